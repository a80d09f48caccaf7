"""The C-like renderer: kernels rendered as C99, compiled with gcc and called through ctypes, compute what
the vmvx reference computes; the GPU dialects render; what a dialect cannot express is refused by name."""

from __future__ import annotations

import ctypes
import dataclasses
import shutil
import subprocess

import ml_dtypes
import numpy as np
import pytest
from retarget.compiler import GRAPH_PASSES
from retarget.errors import UnsupportedOpError
from retarget.ir import Builder, Function, Module, TensorType, Value, dtypes
from retarget.kernel import ir as k
from retarget.kernel.c_renderer import (
    C99,
    CUDA,
    DIALECTS,
    FALLBACK_OPS,
    HIP,
    MSL,
    OPENCL,
    WGSL,
    render_kernel,
    render_module,
)
from retarget.kernel.lower import lower_dispatch
from retarget.passes.dispatch import form_dispatches
from retarget.protocols import TargetDesc
from retarget.testing.graphs import mlp_module
from retarget.testing.op_cases import elementwise, op_cases
from retarget.vmvx.interpreter import run_function

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")

CPU = TargetDesc("c", "c99", "c-source", extra={"vector_bits": 256})
GPU = TargetDesc("c", "gpu-like", "c-source", max_workgroup_size=256)
rng = np.random.default_rng(11)


# -- compiling and calling C99 kernels -------------------------------------------------------------


def _compile(source: str, tmp_path, name: str = "kernels") -> ctypes.CDLL:
    src, lib = tmp_path / f"{name}.c", tmp_path / f"{name}.so"
    src.write_text(source)
    done = subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-std=c11", str(src), "-o", str(lib), "-lm"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[:4000] + "\n" + source[:4000]
    return ctypes.CDLL(str(lib))


def _call(lib: ctypes.CDLL, kernel: k.Kernel, inputs: list[np.ndarray]) -> np.ndarray:
    """Run `kernel` over its whole grid; returns its output buffer (flat)."""
    out_param = kernel.params[-1]
    out = np.zeros(out_param.size, dtype=out_param.dtype.np_dtype)
    arrays = [np.ascontiguousarray(a) for a in inputs] + [out]
    table = (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
    fn = getattr(lib, kernel.name)
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64]
    fn.restype = None
    gx, gy, gz = kernel.workgroup_count
    for z in range(gz):
        for y in range(gy):
            for x in range(gx):
                fn(ctypes.cast(table, ctypes.c_void_p), x, y, z)
    return out


def _random(t: TensorType) -> np.ndarray:
    if t.dtype.is_float:
        return rng.standard_normal(t.shape).astype(t.dtype.np_dtype)
    if t.dtype.kind == "bool":
        return rng.random(t.shape) < 0.5
    return rng.integers(-3, 4, t.shape).astype(t.dtype.np_dtype)


# -- differential: lowered dispatches against the vmvx interpreter --------------------------------


def _const(b, shape):
    return b.constant(rng.standard_normal(shape).astype(np.float32))


def _graph(build, *input_shapes) -> Module:
    args = [Value(TensorType(s, dtypes.f32)) for s in input_shapes]
    fn = Function("f", args)
    fn.returns = [build(Builder(fn), *args)]
    return Module({"f": fn})


def _conv(width, stride, pad, dilation):
    def build(b, x):
        y = b.op("rt.conv2d", [x, _const(b, (5, 3, 3, 3))],
                 {"strides": (stride, stride), "pad": (pad,) * 4, "dilations": (dilation, dilation)})
        y = b.op("rt.add", [y, _const(b, (1, 5, 1, 1))])
        return b.op("rt.min", [b.op("rt.max", [y, b.constant(np.float32(0))]), b.constant(np.float32(6))])

    return _graph(build, (1, 3, 9, width + 4))


def _grouped_conv(channels):
    def build(b, x):
        y = b.op("rt.conv2d", [x, _const(b, (2 * channels, 1, 3, 3))],
                 {"strides": (2, 2), "pad": (1, 1, 1, 1), "groups": channels})
        return b.op("rt.sigmoid", [y])

    return _graph(build, (2, channels, 11, 19))


def _pointwise_conv():
    return _graph(lambda b, x: b.op("rt.tanh", [b.op("rt.conv2d", [x, _const(b, (7, 4, 1, 1))], {})]), (1, 4, 5, 13))


def _small_conv(size, stride, pad):
    """A small convolution with 8 output channels, whose GPU schedule keeps the register tile of output
    channels and splits its sums (SMALL_TILE_CONVS); a prologue on its input, a bias + ReLU6 epilogue."""
    def build(b, x):
        attrs = {"strides": (stride, stride), "pad": (pad,) * 4}
        y = b.op("rt.conv2d", [b.op("rt.tanh", [x]), _const(b, (8, 24, size, size))], attrs)
        y = b.op("rt.add", [y, _const(b, (1, 8, 1, 1))])
        return b.op("rt.min", [b.op("rt.max", [y, b.constant(np.float32(0))]), b.constant(np.float32(6))])

    return _graph(build, (2, 24, 7, 12))


def _matmul(m, kk, n):
    return _graph(lambda b, a: b.op("rt.add", [b.op("rt.matmul", [a, _const(b, (kk, n))]), _const(b, (n,))]), (m, kk))


def _reduce(kind, axes):
    attrs = {"kind": kind, "axes": axes, "keepdims": True}
    return _graph(lambda b, x: b.op("rt.reduce", [b.op("rt.tanh", [x])], attrs), (3, 7, 19))


def _pool(op, include_pad):
    attrs = {"kernel": (3, 3), "strides": (2, 2), "pad": (1, 1, 1, 1)}
    if op == "rt.avg_pool2d":
        attrs["count_include_pad"] = include_pad
    return _graph(lambda b, x: b.op(op, [x], attrs), (1, 4, 13, 15))


def _data_movement():
    def build(b, x):
        t = b.op("rt.transpose", [x], {"perm": (0, 2, 1)})
        s = b.op("rt.slice", [t], {"start": (0, 1, 0), "limit": (2, 9, 5), "stride": (1, 2, 1)})
        p = b.op("rt.pad", [s], {"low": (0, 1, 2), "high": (0, 0, 1), "value": -1.0})
        return b.op("rt.concat", [p, b.op("rt.exp", [p])], {"axis": 2})

    return _graph(build, (2, 5, 9))


def _argmax():
    return _graph(lambda b, x: b.op("rt.argmax", [x], {"axis": 1}), (4, 13))


def _long_row():  # one long row: the CPU schedule splits it into vector chunks and a tail
    return _graph(lambda b, x: b.op("rt.mul", [b.op("rt.erf", [x]), b.constant(np.float32(0.5))]), (1, 77))


CASES = {
    **{f"conv_w{w}_s{s}_p{p}_d{d}": (lambda w=w, s=s, p=p, d=d: _conv(w, s, p, d))
       for w, s, p, d in [(1, 1, 0, 1), (7, 1, 1, 1), (17, 2, 1, 1), (33, 1, 2, 2)]},
    **{f"grouped_conv_c{c}": (lambda c=c: _grouped_conv(c)) for c in (1, 6, 13)},
    "pointwise_conv": _pointwise_conv,
    "small_conv_1x1": lambda: _small_conv(1, 1, 0),
    **{f"matmul_{m}x{kk}x{n}": (lambda m=m, kk=kk, n=n: _matmul(m, kk, n))
       for m, kk, n in [(1, 5, 3), (3, 17, 33), (13, 7, 70)]},
    "batched_matmul": lambda: _graph(lambda b, a: b.op("rt.matmul", [a, _const(b, (9, 21))]), (3, 5, 9)),
    **{f"reduce_{kind}_{'_'.join(map(str, axes))}": (lambda kind=kind, axes=axes: _reduce(kind, axes))
       for kind in ("sum", "max", "min") for axes in [(0,), (2,), (1, 2)]},
    **{f"{op[3:]}_pad{int(p)}": (lambda op=op, p=p: _pool(op, p))
       for op in ("rt.max_pool2d", "rt.avg_pool2d") for p in (False, True)},
    "data_movement": _data_movement,
    "argmax": _argmax,
    "long_row": _long_row,
    # large enough that the CPU schedule spreads work over several workgroups (wg_x > 0)
    "big_elementwise": lambda: _graph(lambda b, x: b.op("rt.sigmoid", [x]), (16, 65536)),
    "big_matmul": lambda: _matmul(64, 128, 128),
    "mlp": lambda: mlp_module()[0],
}


C99_INDEX32 = dataclasses.replace(C99, name="c99-index32", index32=True)  # CUDA's, HIP's, MSL's, OpenCL's choice


@pytest.mark.parametrize("case", list(CASES))
def test_rendered_c99_kernels_match_the_vmvx_interpreter_for_cpu_and_gpu_schedules(case, tmp_path):
    module = CASES[case]()
    for _, graph_pass in GRAPH_PASSES:
        module = graph_pass(module)
    grids = []
    jobs = []  # (kernel, dispatch function), both schedules of every dispatch, compiled into one .so
    for fn in module.functions.values():
        for d in form_dispatches(fn):
            cpu, gpu = lower_dispatch(d.function, CPU), lower_dispatch(d.function, GPU)
            assert gpu.thread_vars, "the GPU-like target should get the one-thread-per-element schedule"
            grids.append(cpu.workgroup_count[0])
            jobs += [(cpu, d.function), (dataclasses.replace(gpu, name=gpu.name + "_gpu"), d.function)]
    lib = _compile(render_module([kern for kern, _ in jobs], C99), tmp_path)
    gpu_jobs = [(kern, fn) for kern, fn in jobs if kern.thread_vars]
    lib32 = _compile(render_module([kern for kern, _ in gpu_jobs], C99_INDEX32), tmp_path, "index32")
    for library, kern, fn in [(lib, *job) for job in jobs] + [(lib32, *job) for job in gpu_jobs]:
        inputs = [_random(a.type) for a in fn.args]
        expected = run_function(fn, inputs)[0]
        got = _call(library, kern, inputs).reshape(expected.shape)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5, err_msg=kern.name)
    if case.startswith("big_"):
        assert max(grids) > 1, "this case should exercise several CPU workgroups"


# -- every scalar op, against the reference ---------------------------------------------------------

OP_CASES = op_cases()


@pytest.fixture(scope="module")
def op_library(tmp_path_factory):
    return _compile(render_module([kern for kern, _, _ in OP_CASES.values()], C99), tmp_path_factory.mktemp("ops"))


@pytest.mark.parametrize("case", list(OP_CASES))
def test_each_scalar_op_matches_the_reference_including_nan_and_inf(case, op_library):
    kern, inputs, expected = OP_CASES[case]
    got = _call(op_library, kern, inputs)
    if got.dtype.kind == "f" or got.dtype == ml_dtypes.bfloat16:
        np.testing.assert_allclose(got.astype(np.float64), np.asarray(expected).astype(np.float64),
                                   rtol=1e-5, atol=1e-6, equal_nan=True)
    else:
        np.testing.assert_array_equal(got, expected)


def test_every_ir_op_has_a_test_case():
    covered = {name.split("_", 1)[-1] for name in OP_CASES}  # f32_exp -> exp
    assert set(k.UNARY_OPS) | set(k.BINARY_OPS) <= covered
    assert {f"cmp_{p}" for p in k.COMPARE_OPS} <= covered


def test_round_is_half_to_even():
    kern, inputs, _ = OP_CASES["f32_round"]
    lib_source = render_kernel(kern, C99)
    assert "rintf(" in lib_source
    assert list(np.round(np.array([0.5, 1.5, 2.5, -0.5, -2.5], np.float32))) == [0.0, 2.0, 2.0, -0.0, -2.0]


def test_fallback_helpers_for_languages_without_erf_log1p_expm1_match_the_reference(tmp_path):
    # MSL's table maps these ops to helpers; a C99 table with the same entries runs them here
    c99_like_msl = dataclasses.replace(C99, name="c99-fallbacks", ops={**C99.ops, **FALLBACK_OPS})
    kernels = [OP_CASES[f"f32_{op}"][0] for op in ("erf", "log1p", "expm1")]
    source = render_module(kernels, c99_like_msl)
    assert "rt_erf_f32" in source and "erff(" not in source
    lib = _compile(source, tmp_path)
    for kern in kernels:
        _, inputs, expected = OP_CASES[kern.name.removeprefix("op_")]
        np.testing.assert_allclose(_call(lib, kern, inputs), expected, rtol=2e-6, atol=1e-6, equal_nan=True)


def test_float_constants_are_printed_exactly(tmp_path):
    values = [0.1, 1 / 3, -2.5, 3.4028234663852886e38, 1e-45, np.inf, -np.inf, np.nan]
    kern = k.Kernel("consts", [k.Param("out0", dtypes.f32, len(values), "write")],
                    [k.Store("out0", k.const(i), k.const(v, dtypes.f32)) for i, v in enumerate(values)])
    source = render_kernel(kern, C99)
    assert "0.10000000149011612f" in source  # f32(0.1), to the last bit
    assert "(-(float)INFINITY)" in source and "((float)NAN)" in source
    got = _call(_compile(render_module([kern], C99), tmp_path), kern, [])
    np.testing.assert_array_equal(got, np.array(values, dtype=np.float32))


# -- the GPU dialects ----------------------------------------------------------------------------------

SPELLINGS = {"cuda": ("threadIdx.x", "blockIdx.x", "__global__"), "hip": ("threadIdx.x", "blockIdx.x", "hip_runtime.h"),
             "opencl": ("get_local_id(0)", "get_group_id(0)", "__kernel"),
             "msl": ("thread_position_in_threadgroup", "threadgroup_position_in_grid", "[[buffer(0)]]"),
             "wgsl": ("@builtin(local_invocation_id)", "@builtin(workgroup_id)",
                      "@group(0) @binding(0) var<storage, read_write> in0: array<f32>;")}


def _gpu_mlp_kernels():
    module = mlp_module()[0]
    for _, graph_pass in GRAPH_PASSES:
        module = graph_pass(module)
    return [lower_dispatch(d.function, GPU) for d in form_dispatches(module.functions["predict"])]


@pytest.mark.parametrize("dialect", [CUDA, HIP, OPENCL, MSL, WGSL], ids=lambda d: d.name)
def test_each_gpu_dialect_renders_the_mlp_with_its_own_thread_and_workgroup_ids(dialect):
    source = render_module(_gpu_mlp_kernels(), dialect)
    for spelling in SPELLINGS[dialect.name]:
        assert spelling in source, f"{dialect.name}: {spelling}"
    assert "wg_x" not in source and "bindings" not in source


def test_every_dialect_is_in_the_table():
    assert set(DIALECTS) == {"c99", "cuda", "hip", "opencl", "msl", "wgsl"}


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed: CUDA output is only rendered")
def test_cuda_output_compiles_with_nvcc(tmp_path):
    kernels = _gpu_mlp_kernels() + [kern for name, (kern, _, _) in OP_CASES.items()]
    src = tmp_path / "kernels.cu"
    src.write_text(render_module(kernels, CUDA))
    done = subprocess.run(["nvcc", "-c", "-arch=sm_80", str(src), "-o", str(tmp_path / "kernels.o")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[:4000]


# -- refusals ------------------------------------------------------------------------------------------


def test_an_unknown_op_is_refused_naming_the_op_and_the_dialect():
    kern = elementwise("bad", lambda a: k.Unary("frobnicate", a), [dtypes.f32], dtypes.f32, 4)
    with pytest.raises(UnsupportedOpError, match=r"frobnicate.*c99|c99.*frobnicate"):
        render_kernel(kern, C99)


def test_an_op_outside_its_types_is_refused():
    kern = elementwise("bad", lambda a, b: k.Binary("xor", a, b), [dtypes.f32, dtypes.f32], dtypes.f32, 4)
    with pytest.raises(UnsupportedOpError, match="'xor' on f32"):
        render_kernel(kern, CUDA)


def test_a_type_the_language_lacks_is_refused():
    kern = elementwise("bad", lambda a: k.Unary("exp", a), [dtypes.DTYPES["f64"]], dtypes.DTYPES["f64"], 4)
    with pytest.raises(UnsupportedOpError, match="f64 is not supported by dialect msl"):
        render_kernel(kern, MSL)
    kern = elementwise("bad", lambda a: a, [dtypes.DTYPES["i4"]], dtypes.DTYPES["i4"], 4)
    with pytest.raises(UnsupportedOpError, match="i4"):
        render_kernel(kern, C99)


def test_c99_runs_a_workgroup_s_threads_as_loops_cut_at_its_barriers(tmp_path):
    """Each thread writes its element to workgroup memory, and after the barrier reads its mirror's: C99 has
    no threads, so every thread finishes the first phase before any starts the second."""
    from retarget.testing.kernels import THREADS, shared_kernel

    kern = shared_kernel("mirror", THREADS)
    source = render_kernel(kern, C99)
    assert "barrier" not in source and source.count("for (int64_t tid = 0; tid < 64; tid++)") == 2
    x = rng.standard_normal(THREADS).astype(np.float32)
    np.testing.assert_array_equal(_call(_compile(render_module([kern], C99), tmp_path), kern, [x]), x[::-1])
    assert "__syncthreads();" in render_kernel(kern, CUDA)
    assert "__shared__ __align__(16) float part[64];" in render_kernel(kern, CUDA)


def test_a_variable_first_assigned_in_a_loop_is_declared_in_that_loop():
    body = [k.Loop("i", 3, [k.Assign("x", k.Cast(k.Var("i"), dtypes.f32)),
                            k.Assign("x", k.Binary("mul", k.Var("x", dtypes.f32), k.const(2, dtypes.f32))),
                            k.Store("out0", k.Var("i"), k.Var("x", dtypes.f32))])]
    source = render_kernel(k.Kernel("scoped", [k.Param("out0", dtypes.f32, 3, "write")], body), C99)
    lines = [line.strip() for line in source.splitlines()]
    loop = lines.index("for (int64_t i = 0; i < 3; i++) {")
    assert lines[loop + 1] == "float x = ((float)i);"
    assert lines[loop + 2] == "x = (x * 2.0f);"


# -- sizes known at run time -------------------------------------------------------------------------


def _call_dynamic(lib: ctypes.CDLL, kernel: k.Kernel, inputs: list[np.ndarray], sizes: dict) -> np.ndarray:
    """`_call` for a kernel with scalars: they follow the buffers in the binding table, as i64 values."""
    from retarget.ir.symbolic import evaluate

    out_param = kernel.params[-1]
    out = np.zeros(evaluate(k.expr_dim(out_param.size), sizes), dtype=out_param.dtype.np_dtype)
    scalars = np.array([sizes[s] for s in kernel.scalars], dtype=np.int64)
    arrays = [np.ascontiguousarray(a) for a in inputs] + [out, scalars]
    table = (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
    fn = getattr(lib, kernel.name)
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64]
    fn.restype = None
    gx, gy, gz = (evaluate(k.expr_dim(c), sizes) for c in kernel.workgroup_count)
    for z in range(gz):
        for y in range(gy):
            for x in range(gx):
                fn(ctypes.cast(table, ctypes.c_void_p), x, y, z)
    return out


@pytest.mark.parametrize("case", ["matmul_tails", "conv_batch_image"])
def test_c99_kernels_with_sizes_known_at_run_time_match_the_reference_at_each_size(case, tmp_path):
    from retarget.testing import dynamic

    jobs = []
    for d in form_dispatches(dynamic.module(case).functions["main"]):
        cpu, gpu = lower_dispatch(d.function, CPU), lower_dispatch(d.function, GPU)
        assert cpu.scalars and cpu.scalars == gpu.scalars
        jobs += [(cpu, d.function), (dataclasses.replace(gpu, name=gpu.name + "_gpu"), d.function)]
    lib = _compile(render_module([kern for kern, _ in jobs], C99), tmp_path)
    gpu_jobs = [(kern, fn) for kern, fn in jobs if kern.thread_vars]  # bounded symbols: 32-bit indices, as CUDA's
    assert "const int32_t dim_" in render_module([kern for kern, _ in gpu_jobs], C99_INDEX32)
    lib32 = _compile(render_module([kern for kern, _ in gpu_jobs], C99_INDEX32), tmp_path, "index32")
    for sizes in dynamic.CASES[case].sizes:
        for library, kern, fn in [(lib, *job) for job in jobs] + [(lib32, *job) for job in gpu_jobs]:
            from retarget.ir.symbolic import evaluate_shape

            inputs = [_random(TensorType(evaluate_shape(a.type.shape, sizes), a.type.dtype)) for a in fn.args]
            expected = run_function(fn, inputs, sizes)[0]
            got = _call_dynamic(library, kern, inputs, sizes).reshape(expected.shape)
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5, err_msg=f"{kern.name} at {sizes}")


@pytest.mark.parametrize("dialect, declared, narrowed", [
    (CUDA, "const long long dim_s_arg", "const int dim_s = ((int)dim_s_arg);"),
    (HIP, "const long long dim_s_arg", "const int dim_s = ((int)dim_s_arg);"),
    (OPENCL, "const long dim_s_arg", "const int dim_s = ((int)dim_s_arg);"),
    (MSL, "constant long &dim_s_arg [[buffer(2)]]", "const int dim_s = ((int)dim_s_arg);"),
])
def test_gpu_dialects_take_a_kernel_s_sizes_as_arguments_after_its_buffers(dialect, declared, narrowed):
    """64-bit arguments; with the symbol bounded (s <= 128), the kernel indexes in 32 bits from a copy."""
    from retarget.testing import dynamic

    (d,) = form_dispatches(dynamic.module("long_row").functions["main"])
    source = render_kernel(lower_dispatch(d.function, GPU), dialect)
    head = source[:source.index("{")]
    assert declared in head and head.index(declared) > head.index("out0")
    body = source[source.index("{"):]
    assert narrowed in body and "< dim_s)" in body  # the body bounds its work by it


def test_a_dialect_without_a_way_to_pass_sizes_refuses_them_by_name():
    from retarget.testing import dynamic

    (d,) = form_dispatches(dynamic.module("long_row").functions["main"])
    with pytest.raises(UnsupportedOpError, match="sizes known only at run time"):
        render_kernel(lower_dispatch(d.function, GPU), WGSL)  # the webgpu plugin passes them in a uniform


@pytest.mark.parametrize("size, stride, pad", [(1, 1, 0), (3, 2, 1)])
def test_a_small_conv_keeps_the_channel_tile_and_splits_its_sums_on_the_gpu(size, stride, pad, tmp_path):
    module = _small_conv(size, stride, pad)
    for _, graph_pass in GRAPH_PASSES:
        module = graph_pass(module)
    conv = next(d.function for d in form_dispatches(module.functions["f"]) if "conv2d" in d.function.name)
    shared = dataclasses.replace(GPU, shared_memory_bytes=48 << 10, subgroup_size=32)
    kernel = lower_dispatch(conv, shared)
    assert kernel.schedule["tile"] == 4 and kernel.schedule["slices"] > 1
    inputs = [_random(a.type) for a in conv.args]
    expected = run_function(conv, inputs)[0]
    got = _call(_compile(render_module([kernel], C99), tmp_path), kernel, inputs).reshape(expected.shape)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["sum", "max", "min"])
@pytest.mark.parametrize("axes", [(2,), (1, 2)])
def test_a_reduction_with_few_outputs_splits_each_over_threads_of_a_block_on_the_gpu(kind, axes, tmp_path):
    module = _graph(lambda b, x: b.op("rt.reduce", [b.op("rt.tanh", [x])], {"kind": kind, "axes": axes}),
                    (3, 7, 200))
    for _, graph_pass in GRAPH_PASSES:
        module = graph_pass(module)
    (dispatch,) = form_dispatches(module.functions["f"])
    shared = dataclasses.replace(GPU, shared_memory_bytes=48 << 10, subgroup_size=32)
    kernel = lower_dispatch(dispatch.function, shared)
    assert kernel.schedule["slices"] > 1
    inputs = [_random(a.type) for a in dispatch.function.args]
    expected = run_function(dispatch.function, inputs)[0]
    got = _call(_compile(render_module([kernel], C99), tmp_path), kernel, inputs).reshape(expected.shape)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)

