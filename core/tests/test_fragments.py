"""Fragments, the kernel IR's matrix-multiply-accumulate intrinsic: how they print, when the GPU lowering's
tiled fragment matmul uses them (from `TargetDesc.extra["fragments"]`), how each dialect spells them, and
that their portable expansion, rendered as C99 and compiled with gcc, computes what the vmvx reference
computes for awkward shapes, batches, prologues and epilogues."""

from __future__ import annotations

import ctypes
import dataclasses
import shutil
import subprocess

import numpy as np
import pytest
from retarget.ir import Builder, Function, TensorType, Value, dtypes
from retarget.kernel import ir as k
from retarget.kernel.c_renderer import C99, CUDA, HIP, MSL, OPENCL, WGSL, render_module
from retarget.kernel.lower import lower_dispatch, matmul_fragments
from retarget.kernel.portable import expand_fragments, lane_grid
from retarget.passes.dispatch import form_dispatches
from retarget.protocols import TargetDesc
from retarget.vmvx.interpreter import run_function

F32, F16, BF16 = dtypes.f32, dtypes.DTYPES["f16"], dtypes.DTYPES["bf16"]
SIMDGROUP = {"m": 8, "n": 8, "k": 8, "a": "f32", "b": "f32", "acc": "f32", "width": 32}
WMMA_F16 = {"m": 16, "n": 16, "k": 16, "a": "f16", "b": "f16", "acc": "f32", "width": 32}
PLAIN = TargetDesc("c", "gpu-like", "c-source", subgroup_size=32, max_workgroup_size=256, shared_memory_bytes=32768)
rng = np.random.default_rng(5)


def _gpu(*fragments, threads: int = 256, shared: int = 32768) -> TargetDesc:
    return dataclasses.replace(PLAIN, max_workgroup_size=threads, shared_memory_bytes=shared,
                               extra={"fragments": list(fragments)})


def _fragment(**changes) -> dict:
    return {**SIMDGROUP, **changes}


def _matmul(a_shape, b_shape, dt=F32, *, bias_relu=False, transpose_b=False) -> Function:
    """y = a @ b (b given transposed when `transpose_b`), then + bias and relu when `bias_relu`."""
    b_given = b_shape[:-2] + b_shape[-2:][::-1] if transpose_b else b_shape
    args = [Value(TensorType(a_shape, dt)), Value(TensorType(b_given, dt))]
    fn = Function("mm", args)
    bld = Builder(fn)
    b = args[1]
    if transpose_b:
        b = bld.op("rt.transpose", [b], {"perm": list(range(len(b_shape) - 2)) + [len(b_shape) - 1, len(b_shape) - 2]})
    y = bld.op("rt.matmul", [args[0], b])
    if bias_relu:
        bias = bld.constant(rng.standard_normal(y.type.shape[-1]).astype(dt.np_dtype))
        y = bld.op("rt.max", [bld.op("rt.add", [y, bias]), bld.constant(np.zeros((), dt.np_dtype))])
    fn.returns = [y]
    return fn


def _dispatch(fn: Function) -> Function:
    (d,) = form_dispatches(fn)
    return d.function


def _statements(kernel: k.Kernel, kind) -> list:
    return [s for s in k.walk_stmts(kernel.body) if isinstance(s, kind)]


# -- the statements -------------------------------------------------------------------------------------


def _tiny_fragment_kernel() -> k.Kernel:
    body = [k.Local("tile", 64, F32, shared=True),
            k.Fragment("acc", "acc", 8, 8, 8, F32, F32, 32, fill=0.0),
            k.Fragment("fa", "a", 8, 8, 8, F32, F32),
            k.Fragment("fb", "b", 8, 8, 8, F32, F32),
            k.FragmentLoad("fa", "in0", k.Var("wg") * 64, 8),
            k.FragmentLoad("fb", "in1", k.const(0), 8),
            k.FragmentMma("acc", "fa", "fb", "acc"),
            k.FragmentStore("acc", "out0", k.Var("wg") * 64 + 8, 16)]
    params = [k.Param("in0", F32, 64, "read"), k.Param("in1", F32, 64, "read"), k.Param("out0", F32, 128, "write")]
    return k.Kernel("tiny", params, body, (1, 1, 1), ("wg",), (32, 1, 1), ("tid",))


def test_fragment_statements_print_in_the_kernel_text():
    text = k.print_kernel(_tiny_fragment_kernel())
    assert "  %acc = fragment<acc, 8x8x8, f32 -> f32, width 32> fill 0.0:f32\n" in text
    assert "  %fa = fragment<a, 8x8x8, f32 -> f32, width 32>\n" in text
    assert "  %fa = fragment.load %in0[(%wg * 64)] stride 8\n" in text
    assert "  %acc = fragment.mma %fa, %fb, %acc\n" in text
    assert "  fragment.store %acc, %out0[((%wg * 64) + 8)] stride 16\n" in text


def test_walk_exprs_visits_the_indices_of_fragment_loads_and_stores():
    names = {e.name for e in k.walk_exprs(_tiny_fragment_kernel().body) if isinstance(e, k.Var)}
    assert names == {"wg"}


def test_the_portable_expansion_leaves_plain_statements_only():
    expanded = expand_fragments(_tiny_fragment_kernel())
    assert not k.has_fragments(expanded.body)
    assert {s.name for s in _statements(expanded, k.Local)} >= {"acc", "fa", "fb"}


@pytest.mark.parametrize("m, n, width, grid, exact", [
    (8, 8, 32, (4, 8, 2, 1), True),  # lanes 4 x 8: two rows, one column each
    (16, 16, 32, (4, 8, 4, 2), True),
    (8, 8, 1, (1, 1, 8, 8), True),  # one thread holds the whole fragment
    (8, 8, 24, (3, 8, 3, 1), False),  # ragged: guarded stores, clamped loads
])
def test_lanes_share_an_accumulator_as_a_grid(m, n, width, grid, exact):
    g = lane_grid(m, n, width)
    assert (g.lane_rows, g.lane_cols, g.rows, g.cols) == grid and g.exact == exact


# -- choosing the tiled fragment matmul ---------------------------------------------------------------


def test_a_float_matmul_takes_the_tiled_fragment_matmul_when_the_target_lists_a_shape():
    kernel = lower_dispatch(_dispatch(_matmul((64, 48), (48, 40))), _gpu(SIMDGROUP))
    assert kernel.schedule["fragments"] == "8x8x8.f32.f32"
    assert (kernel.schedule["tile_m"], kernel.schedule["tile_n"], kernel.schedule["tile_k"]) == (32, 32, 16)
    assert kernel.workgroup_size == (128, 1, 1) and kernel.workgroup_count == (4, 1, 1)
    assert len(_statements(kernel, k.FragmentMma)) == 4 and len(_statements(kernel, k.Barrier)) == 3


def test_a_matmul_of_few_rows_puts_its_subgroups_side_by_side():
    kernel = lower_dispatch(_dispatch(_matmul((8, 64), (64, 128))), _gpu(SIMDGROUP))
    assert (kernel.schedule["tile_m"], kernel.schedule["tile_n"], kernel.schedule["subgroups"]) == (16, 64, "1x4")


def test_the_operands_own_type_comes_first_and_halves_widen_exactly_into_f32():
    desc = _gpu(SIMDGROUP, _fragment(a="f16", b="f16"))
    assert matmul_fragments(_dispatch(_matmul((32, 32), (32, 32), F16)), desc).shape.name == "8x8x8.f16.f32"
    assert matmul_fragments(_dispatch(_matmul((32, 32), (32, 32), BF16)), desc).shape.name == "8x8x8.f32.f32"
    assert matmul_fragments(_dispatch(_matmul((32, 32), (32, 32))), desc).shape.name == "8x8x8.f32.f32"


def test_f32_matmuls_never_take_a_half_shape():
    """An f32 operand does not fit in f16 (nor in tf32) exactly: the numerics would change."""
    desc = _gpu(WMMA_F16)
    assert matmul_fragments(_dispatch(_matmul((64, 64), (64, 64))), desc) is None
    assert "fragments" not in lower_dispatch(_dispatch(_matmul((64, 64), (64, 64))), desc).schedule


@pytest.mark.parametrize("a_shape, b_shape, dt, why", [
    ((1, 64), (64, 64), F32, "a matrix-vector product"),
    ((64, 4), (4, 64), F32, "a reduction shorter than a fragment"),
    ((32, 32), (32, 32), dtypes.i32, "integers"),
])
def test_other_matmuls_keep_the_gpu_matmul(a_shape, b_shape, dt, why):
    fn = _dispatch(_matmul(a_shape, b_shape, dt))
    desc = _gpu(SIMDGROUP, _fragment(a="i32", b="i32", acc="i32"))
    assert matmul_fragments(fn, desc) is None, why
    assert k.print_kernel(lower_dispatch(fn, desc)) == k.print_kernel(lower_dispatch(fn, PLAIN))


def test_tiles_follow_the_workgroup_size_and_the_shared_memory_of_the_target():
    fn = _dispatch(_matmul((64, 64), (64, 64)))
    assert matmul_fragments(fn, _gpu(SIMDGROUP)).threads == 128
    small = matmul_fragments(fn, _gpu(SIMDGROUP, threads=64))
    assert (small.threads, small.tile_m, small.tile_n) == (64, 16, 32)
    tiny = matmul_fragments(fn, _gpu(SIMDGROUP, shared=2048))
    assert tiny.shared_bytes <= 2048 and (tiny.tile_m, tiny.tile_n) == (8, 8)
    assert matmul_fragments(fn, _gpu(SIMDGROUP, shared=512)) is None
    assert matmul_fragments(fn, _gpu(SIMDGROUP, threads=16)) is None


def test_without_fragment_shapes_the_gpu_lowering_prints_exactly_as_it_did():
    """A target that lists no fragments gets the GPU lowering unchanged; one that lists them changes only
    the matmuls that take the tiled fragment matmul."""
    torch = pytest.importorskip("torch")
    from retarget.compiler import GRAPH_PASSES, import_model
    from retarget.testing import zoo

    assert torch is not None
    with_fragments = _gpu(SIMDGROUP)
    taken = 0
    for name in ("mlp", "transformer_block"):
        model, inputs = zoo.make(name)
        module = import_model(model, example_inputs=inputs)
        for _, graph_pass in GRAPH_PASSES:
            module = graph_pass(module)
        for d in form_dispatches(module.functions["main"]):
            plain = lower_dispatch(d.function, PLAIN)
            assert not k.has_fragments(plain.body) and "fragments" not in plain.schedule
            assert k.print_kernel(lower_dispatch(d.function, _gpu())) == k.print_kernel(plain)
            if matmul_fragments(d.function, with_fragments) is None:
                assert k.print_kernel(lower_dispatch(d.function, with_fragments)) == k.print_kernel(plain)
            else:
                taken += 1
    assert taken >= 2


# -- the dialects -------------------------------------------------------------------------------------------


def test_msl_and_cuda_spell_their_shapes_natively_and_every_other_dialect_expands_them():
    simdgroup = lower_dispatch(_dispatch(_matmul((32, 32), (32, 32))), _gpu(SIMDGROUP))
    wmma = lower_dispatch(_dispatch(_matmul((64, 64), (64, 64), F16)), _gpu(WMMA_F16))
    msl = render_module([simdgroup], MSL)
    assert "#include <metal_simdgroup_matrix>" in msl and "simdgroup_float8x8 acc" in msl
    assert "simdgroup_multiply_accumulate(" in msl
    cuda = render_module([wmma], CUDA)
    assert "#include <mma.h>" in cuda and "nvcuda::wmma::mma_sync(" in cuda
    assert "__shared__ __align__(32) __half a_tile" in cuda and "nvcuda::wmma::matrix_a, 16, 16, 16, __half" in cuda
    for dialect, kernel in [(CUDA, simdgroup), (MSL, wmma), (HIP, wmma), (OPENCL, wmma), (WGSL, wmma), (C99, wmma)]:
        source = render_module([kernel], dialect)
        assert "wmma" not in source and "simdgroup_" not in source and "mma.h" not in source, dialect.name


# -- the portable expansion against the reference ------------------------------------------------------------

CASES = {  # name -> (function, target, tolerance); the whole function is one kernel
    "edges": (lambda: _dispatch(_matmul((37, 29), (29, 45))), _gpu(SIMDGROUP), 1e-5),
    "few_rows": (lambda: _dispatch(_matmul((8, 64), (64, 130))), _gpu(SIMDGROUP), 1e-5),
    "batched": (lambda: _dispatch(_matmul((3, 20, 24), (24, 17))), _gpu(SIMDGROUP), 1e-5),
    "broadcast_batches": (lambda: _dispatch(_matmul((2, 1, 16, 8), (3, 8, 12))), _gpu(SIMDGROUP), 1e-5),
    "bias_relu": (lambda: _dispatch(_matmul((40, 24), (24, 33), bias_relu=True)), _gpu(SIMDGROUP), 1e-5),
    "transposed_b": (lambda: _matmul((40, 24), (24, 33), transpose_b=True), _gpu(SIMDGROUP), 1e-5),
    "wmma_f16_bias_relu": (lambda: _dispatch(_matmul((50, 40), (40, 70), F16, bias_relu=True)), _gpu(WMMA_F16), 2e-3),
    "bf16_into_f32": (lambda: _dispatch(_matmul((24, 40), (40, 24), BF16)), _gpu(SIMDGROUP), 1e-2),
    "ragged_lanes": (lambda: _dispatch(_matmul((30, 20), (20, 26))), _gpu(_fragment(width=24)), 1e-5),
    "narrow_subgroups": (lambda: _dispatch(_matmul((19, 13), (13, 22))), _gpu(_fragment(m=4, n=4, k=4, width=8)),
                         1e-5),
}


def _random(t: TensorType) -> np.ndarray:
    return rng.standard_normal(t.shape).astype(t.dtype.np_dtype)


@pytest.fixture(scope="module")
def c99_kernels(tmp_path_factory):
    """Every case lowered for its target and rendered as one C99 library: name -> (kernel, function, library)."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    kernels = {}
    for name, (make, desc, _) in CASES.items():
        fn = make()
        kernels[name] = (dataclasses.replace(lower_dispatch(fn, desc), name=f"k_{name}"), fn)
    tmp = tmp_path_factory.mktemp("fragments")
    src, lib = tmp / "fragments.c", tmp / "fragments.so"
    src.write_text(render_module([kn for kn, _ in kernels.values()], C99))
    done = subprocess.run(["gcc", "-O1", "-shared", "-fPIC", "-std=c11", str(src), "-o", str(lib), "-lm"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[:4000]
    library = ctypes.CDLL(str(lib))
    return {name: (kn, fn, library) for name, (kn, fn) in kernels.items()}


def _call(library, kernel: k.Kernel, inputs: list[np.ndarray]) -> np.ndarray:
    out = np.zeros(kernel.params[-1].size, dtype=kernel.params[-1].dtype.np_dtype)
    arrays = [np.ascontiguousarray(a) for a in inputs] + [out]
    table = (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
    fn = getattr(library, kernel.name)
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64]
    for x in range(kernel.workgroup_count[0]):
        fn(ctypes.cast(table, ctypes.c_void_p), x, 0, 0)
    return out


@pytest.mark.parametrize("case", list(CASES))
def test_the_portable_expansion_in_c99_matches_the_reference(c99_kernels, case):
    kernel, fn, library = c99_kernels[case]
    assert "fragments" in kernel.schedule and k.has_fragments(kernel.body)
    inputs = [_random(a.type) for a in fn.args]
    expected = run_function(fn, inputs)[0]
    got = _call(library, kernel, inputs).reshape(expected.shape)
    tolerance = CASES[case][2]
    np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64), rtol=tolerance, atol=tolerance)
