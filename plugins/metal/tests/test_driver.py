"""The metal driver. Off macOS it is listed as unavailable, with the reason, and importing the plugin
needs no PyObjC. Its Metal path runs here against fake_metal (PyObjC's API, kernels on the CPU), which
checks how it drives the API: encoders, barriers, offsets, compile options, errors."""

import subprocess
import sys

import numpy as np
import pytest
import retarget
from metal_helpers import simple_kernel
from retarget.errors import UnknownDeviceError
from retarget.ir import dtypes
from retarget.testing import dynamic
from retarget.testing.graphs import chain_module, mlp_module
from retarget_metal import targets
from retarget_metal.compile import compile_kernels
from retarget_metal.driver import METAL, MetalError

linux_only = pytest.mark.skipif(sys.platform == "darwin", reason="describes a machine without Metal")
rng = np.random.default_rng(5)


@linux_only
def test_off_macos_enumerate_lists_one_unavailable_device_with_the_reason():
    (info,) = METAL.enumerate()
    assert not info.available and info.reason == "Metal needs macOS; this is Linux"
    assert METAL.dump("0") == {"driver": "metal", "id": "0", "name": "Metal device", "available": False,
                               "reason": info.reason}


@linux_only
def test_off_macos_opening_the_device_says_why_it_cannot():
    with pytest.raises(UnknownDeviceError, match="Metal needs macOS"):
        METAL.create("0")


def test_importing_the_plugin_and_enumerating_never_import_pyobjc():
    code = ("import sys, retarget_metal, retarget_metal.plugin, retarget_metal.driver as d; d.METAL.enumerate(); "
            "print('Metal' in sys.modules and sys.platform != 'darwin')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_enumerate_and_dump_report_the_family_limits_and_target(fake_metal):
    (info,) = METAL.enumerate()
    assert info.available and info.name == "Apple M1" and info.uri == "metal:0"
    props = info.properties
    assert props["family"] == 7 and props["msl"] == "3.1" and props["max_threadgroup_memory_bytes"] == 32768
    dump = METAL.dump("0")
    assert dump["executable_formats"] == ["msl"] and dump["target"] == "metal-spirv:host"
    assert dump["unified_memory"] and dump["max_threads_per_threadgroup"] == 1024


def test_write_and_read_go_through_the_shared_buffer(fake_metal):
    device = METAL.create("0")
    buf = device.allocate(103)
    data = rng.integers(0, 255, 103, dtype=np.uint8)
    device.write(buf, 0, data)
    device.write(buf, 5, np.array([1, 2, 3], dtype=np.uint8))
    data[5:8] = [1, 2, 3]
    np.testing.assert_array_equal(device.read(buf, 0, 103), data)
    np.testing.assert_array_equal(buf.mtl.array[:103], data)  # the MTLBuffer's own memory, no staging copy
    with pytest.raises(ValueError, match="overflows"):
        device.read(buf, 100, 8)


def test_the_library_is_compiled_with_fast_math_off_in_the_target_s_language(fake_metal):
    device = METAL.create("0")
    device.load_executable(compile_kernels([simple_kernel("copy", dtypes.f32)],
                                           targets.parse("m1+msl3.0")))
    (library,) = fake_metal.libraries
    assert library.options.fast_math is False and library.options.language_version == 196608


def test_msl_that_metal_rejects_comes_back_with_the_compiler_s_log(fake_metal):
    device = METAL.create("0")
    source = ("#include <metal_stdlib>\nusing namespace metal;\n"
              "kernel void broken(device float *x [[buffer(0)]]) { x[0] = undeclared; }")
    with pytest.raises(MetalError, match="(?s)Metal rejected the MSL.*undeclared identifier 'undeclared'"):
        device.compile_source(source)


def test_barriers_are_memory_barriers_in_one_concurrent_encoder_and_copies_go_to_a_blit_encoder(fake_metal):
    device = METAL.create("0")
    exe = device.load_executable(compile_kernels([simple_kernel("copy", dtypes.f32, n=64)],
                                                 targets.parse("m1")))
    a, b, c = (device.allocate(256) for _ in range(3))
    cb = device.command_buffer()
    cb.dispatch(exe, 0, [(a, 0, 256), (b, 0, 256)])
    cb.barrier()
    cb.dispatch(exe, 0, [(b, 0, 256), (c, 0, 256)])
    cb.fill(a, 0, 256, 0)
    cb.copy(c, 0, a, 128, 128)
    cb.end()
    for _ in range(2):  # recorded once, submitted twice: a new MTLCommandBuffer each time
        device.write(a, 0, np.arange(64, dtype=np.float32))
        device.submit(cb)
        device.wait()
        got = device.read(a, 0, 256).view(np.float32)
        np.testing.assert_array_equal(got, np.r_[np.zeros(32), np.arange(32)].astype(np.float32))
    first, second = fake_metal.committed
    assert first is not second and first.log == second.log
    assert [entry[0] for entry in first.log] == ["dispatch", "barrier", "dispatch", "fill", "copy"]
    assert first.log[1] == ("barrier", 1)  # MTLBarrierScopeBuffers
    assert device.last_gpu_seconds == 0.5


def test_bindings_must_be_aligned_to_their_elements(fake_metal):
    device = METAL.create("0")
    exe = device.load_executable(compile_kernels([simple_kernel("copy", dtypes.f32, n=8)],
                                                 targets.parse("m1")))
    buf = device.allocate(256)
    cb = device.command_buffer()
    with pytest.raises(ValueError, match="not aligned to its 4-byte elements"):
        cb.dispatch(exe, 0, [(buf, 2, 32), (buf, 64, 32)])
    with pytest.raises(ValueError, match="whole 4-byte words"):
        cb.copy(buf, 2, buf, 64, 8)


def test_a_failed_command_buffer_raises_on_wait(fake_metal, monkeypatch):
    import fake_metal as fake

    device = METAL.create("0")
    monkeypatch.setattr(fake.FakeCommandBuffer, "status", lambda self: 5)  # MTLCommandBufferStatusError
    monkeypatch.setattr(fake.FakeCommandBuffer, "error", lambda self: fake.FakeError("GPU hang"))
    cb = device.command_buffer()
    cb.fill(device.allocate(64), 0, 64, 1)
    cb.end()
    device.submit(cb)
    with pytest.raises(MetalError, match="GPU hang"):
        device.wait()


def test_code_for_a_newer_family_or_language_is_refused_with_the_fix(fake_metal):
    device = METAL.create("0")
    reason = device.can_load("msl", targets.parse("m3"))
    assert "Apple9" in reason and "Apple7" in reason and "metal-spirv:host" in reason
    assert "MSL 3.2" in device.can_load("msl", targets.parse("m1+msl3.2"))
    assert device.can_load("msl", targets.parse("m1+msl3.1")) is None
    assert "loads msl" in device.can_load("wgsl", targets.parse("m1"))


def test_the_mlp_runs_on_metal_and_matches_numpy(fake_metal):
    module, x, expected = mlp_module()
    m = retarget.load(retarget.compile(module, "metal-spirv:host"), device="metal")
    for _ in range(2):
        np.testing.assert_allclose(m.predict(x), expected, rtol=1e-5, atol=1e-5)


def test_a_dispatch_reading_what_the_one_before_wrote_follows_a_barrier(fake_metal):
    module, inputs, expected = chain_module(batch=16, features=32, hidden=24, outputs=8)
    m = retarget.load(retarget.compile(module, "metal-spirv"), device="metal")
    np.testing.assert_allclose(m.main(*inputs), expected, rtol=1e-5, atol=1e-5)
    assert [entry[0] for entry in fake_metal.committed[-1].log] == ["dispatch", "barrier", "dispatch"]


def test_loading_a_cpu_module_on_metal_names_what_it_holds(fake_metal):
    module, _, _ = mlp_module()
    with pytest.raises(UnknownDeviceError, match="vmvx"):
        retarget.load(retarget.compile(module, "vmvx"), device="metal")


@pytest.mark.parametrize("case", ["matmul_tails", "matmul_rows"])
def test_dynamic_shapes_pass_their_sizes_with_setbytes(fake_metal, case):
    dynamic.check("metal-spirv", "metal", [case])


def test_sixteen_threads_get_their_own_answers_from_a_gpu_that_runs_behind_them(fake_metal, monkeypatch):
    """The stand-in queue runs committed command buffers on a thread of its own, as a GPU does; 16 threads
    share a module, and a thread that waits while another waits on the same command buffer waits too."""
    import fake_metal as fake
    from retarget.testing.conformance import test_threads

    monkeypatch.setattr(fake, "ASYNCHRONOUS", True)
    artifact, calls = test_threads._work(METAL.create("0"), "metal")
    module = retarget.load(artifact, device="metal:0")
    problems = test_threads._run_threads(calls, lambda t: module)
    assert not problems, f"{len(problems)} problems, first: " + "; ".join(problems[:3])


def test_a_wait_begun_while_another_thread_waits_still_waits_for_the_work(fake_metal, monkeypatch):
    import threading

    import fake_metal as fake

    monkeypatch.setattr(fake, "ASYNCHRONOUS", True)
    device = METAL.create("0")
    a, b = device.allocate(64), device.allocate(64)
    device.queue.gate.clear()  # the GPU holds everything committed from now on
    for _ in range(2):
        cb = device.command_buffer()
        cb.fill(a, 0, 64, 7)
        cb.copy(a, 0, b, 0, 64)
        cb.end()
        device.submit(cb)
    first = threading.Thread(target=device.wait, daemon=True)
    second = threading.Thread(target=device.wait, daemon=True)
    try:
        first.start()
        first.join(timeout=0.2)
        assert first.is_alive()
        second.start()
        second.join(timeout=0.2)
        assert second.is_alive(), "a second thread's wait returned before the work was done"
    finally:
        device.queue.gate.set()
    first.join(timeout=10)
    second.join(timeout=10)
    assert not first.is_alive() and not second.is_alive()
    assert (device.read(b, 0, 64) == 7).all()
