"""The webgpu driver on a real adapter (lavapipe on a machine without a GPU)."""

import sys
from pathlib import Path

import numpy as np
import pytest
import retarget
from retarget.errors import UnknownDeviceError
from retarget.testing.graphs import mlp_module
from retarget.testing.kernels import shared_kernel, sum_kernel
from retarget_webgpu import targets
from retarget_webgpu.compile import compile_kernels
from retarget_webgpu.driver import WEBGPU

sys.path.insert(0, str(Path(__file__).parent))
from test_codegen import _with_limits  # noqa: E402

rng = np.random.default_rng(3)
DEFAULT = targets.parse("webgpu")


def test_enumerate_reports_adapters_with_their_limits(webgpu_device):
    info = WEBGPU.enumerate()[0]
    assert info.available and info.properties["backend"] and info.properties["limits"]
    dump = WEBGPU.dump(info.id)
    assert dump["limits"]["max-compute-invocations-per-workgroup"] >= 256
    assert "features" in dump and dump["executable_formats"] == ["wgsl"]


def test_write_and_read_round_trip_at_unaligned_offsets(webgpu_device):
    buf = webgpu_device.allocate(103)
    data = rng.integers(0, 255, 103, dtype=np.uint8)
    webgpu_device.write(buf, 0, data)
    webgpu_device.write(buf, 5, np.array([1, 2, 3], dtype=np.uint8))
    data[5:8] = [1, 2, 3]
    np.testing.assert_array_equal(webgpu_device.read(buf, 0, 103), data)
    np.testing.assert_array_equal(webgpu_device.read(buf, 7, 9), data[7:16])


def _run(device, kernel, desc, arrays, buffers=None, offsets=None):
    """Dispatch `kernel` with `arrays` (inputs, then the output's shape) at byte `offsets` of `buffers`."""
    exe = device.load_executable(compile_kernels([kernel], desc))
    n = len(arrays)
    buffers = buffers or [device.allocate(1 << 16)] * n
    if offsets is None:  # side by side from byte 64, 64-byte aligned, as the host program places them
        ends = np.cumsum([64] + [-(-a.nbytes // 64) * 64 for a in arrays])
        offsets = [int(e) for e in ends[:-1]]
    for buf, off, a in zip(buffers[:-1], offsets, arrays[:-1]):
        device.write(buf, off, a)
    cb = device.command_buffer()
    cb.dispatch(exe, 0, [(buf, off, a.nbytes) for buf, off, a in zip(buffers, offsets, arrays)])
    cb.end()
    outs = []
    for _ in range(2):  # a command buffer is submitted more than once
        device.submit(cb)
        device.wait()
        outs.append(device.read(buffers[-1], offsets[-1], arrays[-1].nbytes).view(arrays[-1].dtype))
    np.testing.assert_array_equal(outs[0], outs[1])
    return outs[0]


def test_bindings_at_offsets_that_are_not_256_aligned_compute(webgpu_device):
    a, b = (rng.standard_normal(200).astype(np.float32) for _ in range(2))
    out = _run(webgpu_device, sum_kernel("add", 2, 200), DEFAULT, [a, b, np.empty(200, np.float32)])
    np.testing.assert_allclose(out, a + b, rtol=1e-6)


def test_a_packed_kernel_computes_with_its_inputs_in_one_buffer(webgpu_device):
    xs = [rng.standard_normal(100).astype(np.float32) for _ in range(10)]
    out = _run(webgpu_device, sum_kernel("sum10", 10, 100), DEFAULT, xs + [np.empty(100, np.float32)])
    np.testing.assert_allclose(out, np.sum(xs, axis=0), rtol=1e-5)


def test_a_packed_kernel_gathers_inputs_from_several_buffers(webgpu_device):
    xs = [rng.standard_normal(100).astype(np.float32) for _ in range(10)]
    buffers = [webgpu_device.allocate(4096) for _ in range(11)]
    out = _run(webgpu_device, sum_kernel("sum10", 10, 100), DEFAULT, xs + [np.empty(100, np.float32)],
               buffers, [64] * 11)
    np.testing.assert_allclose(out, np.sum(xs, axis=0), rtol=1e-5)


def test_a_two_dimensional_grid_covers_every_element(webgpu_device):
    a, b = (rng.standard_normal(64 * 10).astype(np.float32) for _ in range(2))
    desc = _with_limits(max_compute_workgroups_per_dimension=4)
    out = _run(webgpu_device, sum_kernel("add", 2, 640), desc, [a, b, np.empty(640, np.float32)])
    np.testing.assert_allclose(out, a + b, rtol=1e-6)


def test_workgroup_memory_and_a_barrier_compute(webgpu_device):
    a = rng.standard_normal(64).astype(np.float32)
    out = _run(webgpu_device, shared_kernel("reverse", 64), DEFAULT, [a, np.empty(64, np.float32)])
    np.testing.assert_array_equal(out, a[::-1])


def test_integer_kernels_compute(webgpu_device):
    from retarget.ir import dtypes

    a, b = rng.integers(-1000, 1000, (2, 128)).astype(np.int32)
    out = _run(webgpu_device, sum_kernel("iadd", 2, 128, dtypes.i32), DEFAULT, [a, b, np.empty(128, np.int32)])
    np.testing.assert_array_equal(out, a + b)


def test_copy_and_fill(webgpu_device):
    src, dst = webgpu_device.allocate(64), webgpu_device.allocate(64)
    webgpu_device.write(src, 0, np.arange(16, dtype=np.int32))
    cb = webgpu_device.command_buffer()
    cb.fill(dst, 0, 64, 0x7F)
    cb.copy(src, 0, dst, 16, 32)
    cb.fill(dst, 48, 16, 0)
    cb.end()
    webgpu_device.submit(cb)
    webgpu_device.wait()
    got = webgpu_device.read(dst, 0, 64)
    assert (got[:16] == 0x7F).all() and (got[48:] == 0).all()
    np.testing.assert_array_equal(got[16:48].view(np.int32), np.arange(8))


def test_code_for_larger_limits_than_the_device_has_is_refused_with_the_fix(webgpu_device):
    have = webgpu_device.limits["max-compute-workgroup-storage-size"]
    desc = _with_limits(max_compute_workgroup_storage_size=have * 2)
    reason = webgpu_device.can_load("wgsl", desc)
    assert "max-compute-workgroup-storage-size" in reason and "webgpu-spirv:host" in reason
    assert webgpu_device.can_load("wgsl", DEFAULT) is None


def test_the_mlp_runs_on_webgpu_and_matches_numpy(webgpu_device):
    module, x, expected = mlp_module()
    m = retarget.load(retarget.compile(module, "webgpu-spirv"), device="webgpu")
    for _ in range(2):
        np.testing.assert_allclose(m.predict(x), expected, rtol=1e-5, atol=1e-5)


def test_outputs_read_through_the_learned_readback_follow_each_new_input(webgpu_device):
    """From the second call on, a function's outputs come back in its own submit (one map per call): they must
    still be this call's outputs, not a stale copy, and a write in between must not be served old data."""
    module, x, _ = mlp_module()
    m = retarget.load(retarget.compile(module, "webgpu-spirv"), device="webgpu")
    reference = retarget.load(retarget.compile(module, "vmvx"), device="local-sync")
    rng = np.random.default_rng(9)
    for _ in range(4):
        x = rng.standard_normal(x.shape).astype(x.dtype)
        np.testing.assert_allclose(m.predict(x), reference.predict(x), rtol=1e-5, atol=1e-5)
    fn = m.function("predict")
    assert fn.command_buffer.readback_ranges, "the output range should have been learned"


def test_host_code_runs_on_its_own_adapter(webgpu_device):
    module, x, expected = mlp_module()
    m = retarget.load(retarget.compile(module, "webgpu-spirv:host"), device="webgpu")
    np.testing.assert_allclose(m.predict(x), expected, rtol=1e-5, atol=1e-5)


def test_loading_a_cpu_module_on_webgpu_names_what_it_holds(webgpu_device):
    module, _, _ = mlp_module()
    with pytest.raises(UnknownDeviceError, match="vmvx"):
        retarget.load(retarget.compile(module, "vmvx"), device="webgpu")


@pytest.mark.parametrize("case", ["conv_batch_image"])
def test_one_dynamic_module_matches_the_reference_at_each_size(webgpu_device, case):
    from retarget.testing import dynamic

    dynamic.check("webgpu-spirv:host", "webgpu", [case])
