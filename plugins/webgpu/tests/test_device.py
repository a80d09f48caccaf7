"""The webgpu driver on a real adapter (lavapipe on a machine without a GPU)."""

import sys
import time
from pathlib import Path

import numpy as np
import pytest
import retarget
from retarget.errors import RetargetError, UnknownDeviceError
from retarget.ir import dtypes
from retarget.testing.graphs import mlp_module
from retarget.testing.kernels import shared_kernel, sum_kernel
from retarget.testing.op_cases import op_cases
from retarget_webgpu import targets
from retarget_webgpu.compile import compile_kernels
from retarget_webgpu.driver import WEBGPU

sys.path.insert(0, str(Path(__file__).parent))
from test_codegen import _with_limits  # noqa: E402

rng = np.random.default_rng(3)
DEFAULT = targets.parse("webgpu")
OP_CASES = op_cases()


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
    if offsets is None:  # side by side from byte 64, 64-byte aligned, as older host programs placed them
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
    assert outs[0].tobytes() == outs[1].tobytes()  # bit for bit (NaNs included)
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


def test_bf16_buffers_hold_two_elements_a_word_written_by_neighbouring_threads(webgpu_device):
    import ml_dtypes

    a, b = (rng.standard_normal(101).astype(ml_dtypes.bfloat16) for _ in range(2))  # an odd count: a half word
    out = _run(webgpu_device, sum_kernel("add", 2, 101, dtypes.DTYPES["bf16"]), DEFAULT,
               [a, b, np.empty(101, ml_dtypes.bfloat16)])
    expected = (a.astype(np.float32) + b.astype(np.float32)).astype(ml_dtypes.bfloat16)  # rounded to nearest even
    np.testing.assert_array_equal(out.view(np.uint16), expected.view(np.uint16))


def test_a_packed_bf16_kernel_reads_and_writes_one_array_of_atomic_words(webgpu_device):
    import ml_dtypes

    xs = [rng.standard_normal(100).astype(ml_dtypes.bfloat16) for _ in range(10)]
    out = _run(webgpu_device, sum_kernel("sum10", 10, 100, dtypes.DTYPES["bf16"]), DEFAULT,
               xs + [np.empty(100, ml_dtypes.bfloat16)])
    np.testing.assert_allclose(out.astype(np.float32), np.sum([x.astype(np.float32) for x in xs], axis=0),
                               rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("name, count", [("add", 2), ("sum10", 10)])  # sum10: a packed kernel
def test_i64_buffers_hold_whole_64_bit_values(webgpu_device, name, count):
    xs = [rng.integers(-2**59, 2**59, 101) for _ in range(count)]
    out = _run(webgpu_device, sum_kernel(name, count, 101, dtypes.DTYPES["i64"]), DEFAULT,
               xs + [np.empty(101, np.int64)])
    np.testing.assert_array_equal(out, np.sum(xs, axis=0))  # carries between the words, negatives


@pytest.mark.parametrize("case", list(OP_CASES))
def test_each_scalar_op_matches_the_reference_on_the_adapter(webgpu_device, case):
    """Every op case of the reference, NaN, infinities and signed zeros included: WGSL lets a compiler assume no
    NaN or infinity, so the renderer tests for them on the bits (`_WGSL_NAN` in the shared renderer)."""
    import ml_dtypes

    kern, inputs, expected = OP_CASES[case]
    desc = targets.parse("host")
    try:
        compile_kernels([kern], desc)
    except RetargetError as e:  # a buffer type WGSL does not store (i64, f64, bool, ...)
        pytest.skip(f"webgpu-spirv refuses it: {str(e).splitlines()[0]}")
    out = kern.params[-1]
    got = _run(webgpu_device, kern, desc, [*inputs, np.empty(out.size, np.asarray(expected).dtype)])
    if case in ("f32_sin", "f32_cos", "f32_tan"):  # exact argument reduction below 8192 only
        near = ~np.isfinite(inputs[0]) | (np.abs(inputs[0]) < 8192)
        got, expected = got[near], np.asarray(expected)[near]
    if got.dtype.kind == "f" or got.dtype == ml_dtypes.bfloat16:
        np.testing.assert_allclose(got.astype(np.float64), np.asarray(expected).astype(np.float64),
                                   rtol=2e-5, atol=1e-6, equal_nan=True)
    else:
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("pred", ["eq", "ne", "lt", "le", "gt", "ge", "isnan", "isinf"])
def test_float_compares_with_nan_answer_as_c_does(webgpu_device, pred):
    """WGSL bools are not stored, so the op cases' compares skip here: each predicate picks 1 or 0 instead. C's
    `!=` is true where either side is NaN and every other predicate false; `x != x` is how isnan arrives, and
    `abs(x) == inf` isinf."""
    from retarget.ir.dtypes import f32
    from retarget.kernel import ir as k
    from retarget.testing.op_cases import F32_A, F32_B, elementwise

    def body(a, b):
        test = {"isnan": k.Compare("ne", a, a),
                "isinf": k.Compare("eq", k.Unary("abs", a), k.const(float("inf"), f32))}.get(pred)
        test = test or k.Compare(pred, a, b)
        return k.Select(test, k.const(1.0, f32), k.const(0.0, f32))

    kern = elementwise(f"cmp_{pred}", body, [f32, f32], f32, len(F32_A))
    with np.errstate(invalid="ignore"):
        want = np.isnan(F32_A) if pred == "isnan" else np.isinf(F32_A) if pred == "isinf" else {
            "eq": F32_A == F32_B, "ne": F32_A != F32_B, "lt": F32_A < F32_B, "le": F32_A <= F32_B,
            "gt": F32_A > F32_B, "ge": F32_A >= F32_B}[pred]
    got = _run(webgpu_device, kern, DEFAULT, [F32_A, F32_B, np.empty(len(F32_A), np.float32)])
    np.testing.assert_array_equal(got, want.astype(np.float32))


@pytest.mark.parametrize("case", ["bf16_mul_add", "bf16_cast_from_f32"])
def test_bf16_scalar_cases_match_the_reference_including_nan_and_inf(webgpu_device, case):
    from retarget.testing.op_cases import op_cases

    kern, inputs, expected = op_cases()[case]
    out = _run(webgpu_device, kern, DEFAULT, [*inputs, np.empty(len(expected), expected.dtype)])
    np.testing.assert_array_equal(out.astype(np.float32), np.asarray(expected).astype(np.float32))  # NaN where NaN


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


def test_a_chain_of_dispatches_in_one_command_buffer_runs_in_order(webgpu_device):
    """300 dispatches of one kernel, each adding to the one before's output: one compute pass, the pipeline set
    once, and more rt_base uniforms than one uniform buffer of the driver holds."""
    n, steps = 256, 300
    exe = webgpu_device.load_executable(compile_kernels([sum_kernel("add", 2, n)], DEFAULT))
    arena = webgpu_device.allocate(3 * 4 * n)
    x, b = rng.integers(-100, 100, n).astype(np.float32), np.ones(n, np.float32)
    webgpu_device.write(arena, 0, x)
    webgpu_device.write(arena, 8 * n, b)
    ping, pong = (arena, 0, 4 * n), (arena, 4 * n, 4 * n)
    cb = webgpu_device.command_buffer()
    for i in range(steps):
        src, dst = (ping, pong) if i % 2 == 0 else (pong, ping)
        cb.dispatch(exe, 0, [src, (arena, 8 * n, 4 * n), dst])
        cb.barrier()
    cb.end()
    webgpu_device.submit(cb)
    webgpu_device.wait()
    np.testing.assert_array_equal(webgpu_device.read(arena, 0, 4 * n).view(np.float32), x + steps)


def test_timed_submit_runs_the_work_and_returns_the_gpu_seconds(webgpu_device):
    if not hasattr(webgpu_device, "timed_submit"):
        pytest.skip(f"{webgpu_device.info.name} has no timestamp-query feature")
    n = 1 << 14
    exe = webgpu_device.load_executable(compile_kernels([sum_kernel("add", 2, n)], DEFAULT))
    arena = webgpu_device.allocate(3 * 4 * n)
    a, b = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    webgpu_device.write(arena, 0, a)
    webgpu_device.write(arena, 4 * n, b)
    cb = webgpu_device.command_buffer()
    cb.dispatch(exe, 0, [(arena, 0, 4 * n), (arena, 4 * n, 4 * n), (arena, 8 * n, 4 * n)])
    cb.end()
    start = time.perf_counter()
    seconds = webgpu_device.timed_submit(cb)
    wall = time.perf_counter() - start
    assert 0 < seconds < wall
    np.testing.assert_allclose(webgpu_device.read(arena, 8 * n, 4 * n).view(np.float32), a + b, rtol=1e-6)


def test_shaders_leave_out_naga_checks_unless_retarget_webgpu_checks_is_set(webgpu_device, monkeypatch):
    module, x, expected = mlp_module()
    art = retarget.compile(module, "webgpu-spirv")
    assert not retarget.load(art, device="webgpu").device.shader_checks
    monkeypatch.setenv("RETARGET_WEBGPU_CHECKS", "1")
    checked = retarget.load(art, device="webgpu")
    assert checked.device.shader_checks
    np.testing.assert_allclose(checked.predict(x), expected, rtol=1e-5, atol=1e-5)


def test_a_spinning_wait_returns_each_calls_own_outputs(webgpu_device, monkeypatch):
    # RETARGET_WEBGPU_SPIN_US sets this when the process opens the device; the device is shared, so set it here
    monkeypatch.setattr(webgpu_device.native, "spin_s", 0.2)
    module, x, _ = mlp_module()
    m = retarget.load(retarget.compile(module, "webgpu-spirv"), device="webgpu")
    reference = retarget.load(retarget.compile(module, "vmvx"), device="local-sync")
    assert m.device is webgpu_device
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal(x.shape).astype(x.dtype)
        np.testing.assert_allclose(m.predict(x), reference.predict(x), rtol=1e-5, atol=1e-5)


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


def test_causal_attention_and_constant_gather_indices_run_on_webgpu(webgpu_device):
    """torch gives a causal mask and index_select's indices as bool and i64 tensors, which WGSL cannot store: the
    mask is now computed in the kernel from i32 iotas and the indices narrowed to i32 (found by
    `retarget.testing.differential`, which saw both refused)."""
    torch = pytest.importorskip("torch")
    from retarget.compiler import import_model

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("rows", torch.tensor([3, 0, 0, 5, 1], dtype=torch.int64))

        def forward(self, x):
            y = torch.nn.functional.scaled_dot_product_attention(x, x * 0.5, torch.tanh(x), is_causal=True)
            return torch.index_select(y, 1, self.rows)

    x = torch.from_numpy(rng.standard_normal((2, 6, 8)).astype(np.float32))
    with torch.no_grad():
        expected = Model()(x).numpy()
    m = retarget.load(retarget.compile(import_model(Model(), example_inputs=(x,)), "webgpu-spirv"), device="webgpu")
    np.testing.assert_allclose(m.main(x.numpy()), expected, rtol=1e-5, atol=1e-5)


def torch_and_webgpu(model, x):
    """(what webgpu computes, what torch does) for `model` of one input `x`, as lists of numpy arrays."""
    torch = pytest.importorskip("torch")
    from retarget.compiler import import_model

    with torch.no_grad():
        expected = [t.numpy() for t in model(x)]
    m = retarget.load(retarget.compile(import_model(model, example_inputs=(x,)), "webgpu-spirv"), device="webgpu")
    return m.main(x.numpy()), expected


def test_token_ids_argmax_and_masks_run_on_webgpu(webgpu_device, tokens_and_masks):
    got, expected = torch_and_webgpu(*tokens_and_masks)
    assert [g.dtype for g in got] == [e.dtype for e in expected] == [np.float32, np.bool_, np.int64, np.int64]
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-5, atol=1e-6)
    for g, e in zip(got[1:], expected[1:]):
        np.testing.assert_array_equal(g, e)


def test_int64_past_32_bits_runs_on_webgpu_as_torch_computes_it(webgpu_device, wide_integers):
    got, expected = torch_and_webgpu(*wide_integers)
    for g, e in zip(got, expected, strict=True):  # exact, the float cast included (rounded to nearest even)
        assert g.dtype == e.dtype
        np.testing.assert_array_equal(g, e)


def test_uint8_images_and_8_and_16_bit_integers_run_on_webgpu(webgpu_device, image_bytes):
    got, expected = torch_and_webgpu(*image_bytes)
    assert [g.dtype for g in got] == [e.dtype for e in expected] == [np.float32, np.uint8, np.int8, np.int16, np.uint8]
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-6)
    for g, e in zip(got[1:], expected[1:]):  # exact, wrapped where torch wraps (int8 + 100, int16 * 300)
        np.testing.assert_array_equal(g, e)


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


def test_an_adapter_without_compute_is_listed_unavailable_with_the_reason():
    """A downlevel adapter (OpenGL ES 3.0: the H100 machine's EGL one) reports zero compute limits; opening it
    and building a pipeline would lose the device, so it is not offered."""
    from retarget_webgpu.driver import _info

    class Downlevel:
        info = {"device": "Some GPU", "backend_type": "OpenGL", "adapter_type": "DiscreteGPU"}
        features = set()
        limits = {"max-compute-invocations-per-workgroup": 0, "max-compute-workgroups-per-dimension": 0,
                  "max-storage-buffers-per-shader-stage": 0, "max-buffer-size": 1 << 28}

    info = _info(3, Downlevel())
    assert not info.available and "no compute shaders" in info.reason and "Vulkan adapter" in info.reason


def test_threads_sharing_a_module_learn_only_their_own_outputs(webgpu_device):
    """16 threads share one module: each function's command buffer learns to copy out only its own outputs
    (a read learns only for the reading thread's own last run), never another function's; a read that
    another thread's work followed learns nothing, and the next calls on their own learn the outputs."""
    from retarget.testing.conformance import test_threads

    artifact, calls = test_threads._work(webgpu_device, "webgpu")
    module = retarget.load(artifact, device=webgpu_device.info.uri)
    problems = test_threads._run_threads(calls, lambda t: module)
    assert not problems, "; ".join(problems[:3])
    for name, function in module.functions.items():
        outputs = {(function.arena, offset, nbytes) for _, offset, nbytes in
                   (meta["slot"] for meta in function.plan["outputs"])}
        assert set(function.command_buffer.readback_ranges) <= outputs, name
        args = next(args for mine in calls for called, args, _ in mine if called == name)
        function(*args)
        function(*args)
        assert set(function.command_buffer.readback_ranges) == outputs, name


def test_opening_a_device_twice_returns_the_same_device(webgpu_device):
    assert WEBGPU.create(webgpu_device.info.id) is webgpu_device


def test_a_hundred_loads_of_a_module_leave_no_wgpu_object_behind(webgpu_device):
    """Pipelines, bind groups, buffers (the learned readbacks' too), as wgpu-py counts them."""
    import gc

    from wgpu import diagnostics

    module, x, _ = mlp_module()
    artifact = retarget.compile(module, "webgpu-spirv:host")

    def load_call_drop():
        loaded = retarget.load(artifact, device=webgpu_device.info.uri)
        loaded.predict(x)
        loaded.predict(x)  # the second call runs the readback the first one's read taught it

    def counts():
        gc.collect()
        return {kind: entry["count"] for kind, entry in diagnostics.object_counts.get_dict().items()}

    load_call_drop()
    before = counts()
    for _ in range(100):
        load_call_drop()
    assert counts() == before


def test_an_opengl_adapter_beside_a_native_one_is_listed_unavailable():
    from retarget.protocols import DeviceInfo
    from retarget_webgpu.driver import _prefer_native

    vulkan = DeviceInfo("webgpu", "0", "GPU (Vulkan)", properties={"backend": "Vulkan"})
    gl = DeviceInfo("webgpu", "1", "GPU (OpenGL)", properties={"backend": "OpenGL"})
    infos = _prefer_native([vulkan, gl])
    assert infos[0].available and not infos[1].available and "webgpu:0" in infos[1].reason
    alone = DeviceInfo("webgpu", "0", "GPU (OpenGL)", properties={"backend": "OpenGL"})
    assert _prefer_native([alone])[0].available  # with nothing better, OpenGL is offered
