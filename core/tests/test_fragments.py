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


def _gpu(*fragments, threads: int = 256, shared: int = 32768, multiprocessors: int | None = None) -> TargetDesc:
    extra = {"fragments": list(fragments)} | ({"multiprocessors": multiprocessors} if multiprocessors else {})
    return dataclasses.replace(PLAIN, max_workgroup_size=threads, shared_memory_bytes=shared, extra=extra)


def _big_gpu(*fragments, multiprocessors: int = 1) -> TargetDesc:
    """Like an H100 (1024 threads, 48 KB of shared memory) with `multiprocessors`: with one, two tiles fill it."""
    return _gpu(*fragments, threads=1024, shared=48 * 1024, multiprocessors=multiprocessors)


def _runs(desc: TargetDesc) -> TargetDesc:
    """`desc` with 16-byte vector copies (as Vulkan targets have)."""
    return dataclasses.replace(desc, extra={**desc.extra, "vector_copy_bytes": 16})


def _loops(desc: TargetDesc) -> TargetDesc:
    """`desc` with NVIDIA's Vulkan loop spelling: the last step peeled off, the k-slices in a loop."""
    return dataclasses.replace(desc, extra={**desc.extra, "peel_last_step": ["fragments", "registers"],
                                            "fragment_k_loop": "serial"})


def _fragment(**changes) -> dict:
    return {**SIMDGROUP, **changes}


def _matmul(a_shape, b_shape, dt=F32, *, bias_relu=False, transpose_b=False, scale_a=False) -> Function:
    """y = a @ b (b given transposed when `transpose_b`, a scaled by 0.5 first when `scale_a`), then + bias
    and relu when `bias_relu`."""
    b_given = b_shape[:-2] + b_shape[-2:][::-1] if transpose_b else b_shape
    args = [Value(TensorType(a_shape, dt)), Value(TensorType(b_given, dt))]
    fn = Function("mm", args)
    bld = Builder(fn)
    a, b = args
    if transpose_b:
        b = bld.op("rt.transpose", [b], {"perm": list(range(len(b_shape) - 2)) + [len(b_shape) - 1, len(b_shape) - 2]})
    if scale_a:
        a = bld.op("rt.mul", [a, bld.constant(np.full((), 0.5, dt.np_dtype))])
    y = bld.op("rt.matmul", [a, b])
    if bias_relu:
        bias = bld.constant(rng.standard_normal(y.type.shape[-1]).astype(dt.np_dtype))
        y = bld.op("rt.max", [bld.op("rt.add", [y, bias]), bld.constant(np.zeros((), dt.np_dtype))])
    fn.returns = [y]
    return fn


def _dequantized_b(m: int, k_: int, n: int) -> Function:
    """y = a @ dequantize(q, scale)^T: int4 weights in groups of 32 (`--quantize int4-g32` in f16)."""
    args = [Value(TensorType((m, k_), F16)), Value(TensorType((n, k_ // 8), dtypes.dtype("ui32"))),
            Value(TensorType((n, k_ // 32), F16))]
    fn = Function("mm", args)
    bld = Builder(fn)
    w = bld.op("rt.dequantize", args[1:], {"bits": 4, "group_size": 32, "shape": [n, k_]})
    fn.returns = [bld.op("rt.matmul", [args[0], bld.op("rt.transpose", [w], {"perm": [1, 0]})])]
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
    # 2 x 2 fragments a subgroup, in an interior path (2 of the 4 tiles) and an edge path (the 2 across N)
    assert kernel.schedule["interior_tiles"] == "2/4" and len(_statements(kernel, k.FragmentMma)) == 2 * 4


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


def test_large_matrices_take_128x128_tiles_of_8_subgroups_when_they_fill_the_multiprocessors():
    fn = _dispatch(_matmul((4096, 4096), (4096, 4096), F16))
    plan = matmul_fragments(fn, _big_gpu(WMMA_F16, multiprocessors=132))
    assert (plan.tile_m, plan.tile_n, plan.tile_k, plan.threads) == (128, 128, 32, 256)
    assert (plan.sg_rows, plan.sg_cols, plan.frag_rows, plan.frag_cols) == (2, 4, 4, 2)
    assert plan.stages == 2 and plan.shared_bytes <= 48 * 1024  # two staged copies and the scratch fit


def test_matrices_too_small_to_fill_the_gpu_with_large_tiles_keep_small_ones():
    fn = _dispatch(_matmul((1024, 1024), (1024, 1024), F16))
    assert (lambda p: (p.tile_m, p.tile_n, p.threads))(matmul_fragments(fn, _big_gpu(WMMA_F16, multiprocessors=64))) \
        == (128, 64, 128)  # 128 tiles of 128x64: two for each of 64 multiprocessors
    assert (lambda p: (p.tile_m, p.tile_n, p.threads))(matmul_fragments(fn, _big_gpu(WMMA_F16, multiprocessors=132))) \
        == (64, 64, 128)  # neither large plan gives 132 multiprocessors two tiles each
    assert matmul_fragments(fn, _gpu(WMMA_F16, threads=1024, shared=48 * 1024)).tile_n == 64  # no count: 64 assumed


def test_large_tiles_follow_the_limits_of_the_target():
    fn = _dispatch(_matmul((2048, 2048), (2048, 2048)))
    metal = matmul_fragments(fn, _gpu(SIMDGROUP, threads=1024, shared=32 * 1024, multiprocessors=8))
    assert (metal.tile_m, metal.tile_n, metal.tile_k, metal.threads, metal.stages) == (64, 64, 16, 256, 2)
    assert metal.shared_bytes <= 32 * 1024
    few_threads = matmul_fragments(fn, _gpu(SIMDGROUP, threads=128, shared=32 * 1024, multiprocessors=8))
    assert (few_threads.tile_m, few_threads.tile_n, few_threads.threads) == (64, 32, 128)
    one_copy = matmul_fragments(_dispatch(_matmul((2048, 2048), (2048, 2048), F16)),
                                _gpu(WMMA_F16, threads=1024, shared=40 * 1024, multiprocessors=8))
    assert (one_copy.tile_m, one_copy.tile_n, one_copy.stages) == (128, 128, 1)


def _paths(kernel: k.Kernel) -> list[k.If]:
    """The top-level Ifs that hold barriers: the interior and edge pipelines."""
    return [s for s in kernel.body
            if isinstance(s, k.If) and any(isinstance(x, k.Barrier) for x in k.walk_stmts(s.body))]


def _names(e) -> set[str]:
    return {x.name for x in k.walk_exprs([k.Assign("_", e)]) if isinstance(x, k.Var)}


def test_interior_tiles_stage_without_clamps_or_selects_behind_a_uniform_if():
    kernel = lower_dispatch(_dispatch(_matmul((300, 96), (96, 260), F16)), _big_gpu(WMMA_F16))
    assert kernel.schedule["interior_tiles"] == "4/9"
    interior, edge = _paths(kernel)
    tile_vars = {"wg"}  # the variables computed from the workgroup id alone
    for s in kernel.body:
        if isinstance(s, k.Assign) and _names(s.value) <= tile_vars:
            tile_vars.add(s.var)
    for path in (interior, edge):  # the conditions read the workgroup id only, so the barriers inside are legal
        assert _names(path.cond) <= tile_vars
    exprs = list(k.walk_exprs(interior.body))
    assert not any(isinstance(e, k.Select) or isinstance(e, k.Binary) and e.op == "min" for e in exprs)
    assert any(isinstance(e, k.Select) for e in k.walk_exprs(edge.body))


def test_without_edges_there_is_one_unguarded_path_and_with_a_ragged_k_one_guarded_path():
    whole = lower_dispatch(_dispatch(_matmul((256, 64), (64, 256), F16)), _big_gpu(WMMA_F16))
    assert whole.schedule["interior_tiles"] == "4/4" and not _paths(whole)
    assert not any(isinstance(e, k.Select) for e in k.walk_exprs(whole.body))
    ragged = lower_dispatch(_dispatch(_matmul((256, 70), (70, 256), F16)), _big_gpu(WMMA_F16))
    assert ragged.schedule["interior_tiles"] == "0/4" and not _paths(ragged)
    assert any(isinstance(e, k.Select) for e in k.walk_exprs(ragged.body))


def test_the_next_step_is_loaded_into_registers_before_the_fragments_of_this_one():
    kernel = lower_dispatch(_dispatch(_matmul((256, 64), (64, 256), F16)), _big_gpu(WMMA_F16))
    (loop,) = [s for s in kernel.body if isinstance(s, k.Loop) and s.kind == "serial"]
    registers = {s.name for s in _statements(kernel, k.Local) if not s.shared}
    prefetch, mma = loop.body[:2]
    assert isinstance(prefetch, k.If) and {s.buffer for s in k.walk_stmts(prefetch.body)
                                           if isinstance(s, k.Store)} == registers
    assert any(isinstance(s, k.FragmentLoad) for s in k.walk_stmts([mma]))
    # two staged copies: one barrier a step, after the registers are stored into the other copy
    assert [type(s).__name__ for s in loop.body[2:]] == ["If", "Barrier"]


def _evaluate(e: k.Expr, env: dict) -> int:
    if isinstance(e, k.Const):
        return e.value
    if isinstance(e, k.Var):
        return env[e.name]
    ops = {"add": int.__add__, "sub": int.__sub__, "mul": int.__mul__, "div": int.__floordiv__, "rem": int.__mod__,
           "min": min}
    return ops[e.op](_evaluate(e.a, env), _evaluate(e.b, env))


def _first_staged_address(stmts, buffer: str, env: dict) -> int | None:
    """The element of `buffer` that the first staging store from it reads, for the thread in `env`."""
    for s in stmts:
        if isinstance(s, k.Assign):
            try:
                env[s.var] = _evaluate(s.value, env)
            except (KeyError, AttributeError):
                pass
        elif isinstance(s, (k.Loop, k.If)):
            if isinstance(s, k.Loop):
                env[s.var] = s.start
            found = _first_staged_address(s.body, buffer, env)
            if found is not None:
                return found
        elif isinstance(s, k.Store) and isinstance(s.value, k.Load) and s.value.buffer == buffer:
            return _evaluate(s.value.index, env)
    return None


def _warp_addresses(kernel: k.Kernel, buffer: str) -> list[int]:
    return [_first_staged_address(kernel.body, buffer, {"wg": 0, "tid": t}) for t in range(32)]


def test_interior_loads_of_an_input_are_a_base_address_plus_a_constant():
    kernel = lower_dispatch(_dispatch(_matmul((256, 64), (64, 256), F16)), _big_gpu(WMMA_F16))
    (loop,) = [s for s in kernel.body if isinstance(s, k.Loop) and s.kind == "serial"]
    loads = [e for e in k.walk_exprs(loop.body) if isinstance(e, k.Load) and e.buffer in ("in0", "in1")]
    bases = {s.var for s in k.walk_stmts(loop.body) if isinstance(s, k.Assign)}  # one a step for each operand
    assert len(loads) == 2 and len(bases) == 2
    assert all(_names(e.index) <= bases | {s.var for s in k.walk_stmts(loop.body) if isinstance(s, k.Loop)}
               for e in loads)


@pytest.mark.parametrize("transpose_b", [False, True])
def test_consecutive_threads_stage_consecutive_elements_of_each_operand(transpose_b):
    """A by k, B by n, and B given transposed (n x k in memory) by k: each warp's loads coalesce."""
    fn = _matmul((256, 64), (64, 256), F16, transpose_b=transpose_b)
    kernel = lower_dispatch(fn, _big_gpu(WMMA_F16))
    for buffer in ("in0", "in1"):
        addresses = _warp_addresses(kernel, buffer)
        assert addresses == list(range(addresses[0], addresses[0] + 32)), buffer


def test_accumulators_reach_the_epilogue_through_one_small_scratch_a_subgroup():
    kernel = lower_dispatch(_dispatch(_matmul((256, 64), (64, 256), F16, bias_relu=True)), _big_gpu(WMMA_F16))
    (scratch,) = [s for s in _statements(kernel, k.Local) if s.shared and s.dtype == F32]
    assert scratch.size == 8 * 16 * (16 + 4)  # 8 subgroups, a 16 x 16 fragment each, rows padded by 16 bytes
    stores = _statements(kernel, k.FragmentStore)
    assert len(stores) == 8 and {s.buffer for s in stores} == {scratch.name}


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


def test_staged_halves_stay_halves_in_every_c_dialect():
    """The staging registers only move elements, and the staged tiles are sized for halves: neither converts."""
    kernel = lower_dispatch(_dispatch(_matmul((256, 64), (64, 256), F16)), _big_gpu(WMMA_F16))
    registers = [s.name for s in _statements(kernel, k.Local) if not s.shared]
    assert k.copy_arrays(kernel) == set(registers)
    cuda = render_module([kernel], CUDA)
    assert all(f"__half {name}[16];" in cuda for name in registers)
    assert "__half2float(in0" not in cuda and "__float2half_rn(r" not in cuda
    hip = render_module([kernel], HIP)  # no native fragments: expanded, the tiles still hold halves
    assert "__shared__ __half a_tile" in hip and "__shared__ __half b_tile" in hip


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
    # the large plans (one multiprocessor: two tiles fill it): 128 x 128 tiles, or 128 x 64
    "large_interior_and_edges": (lambda: _dispatch(_matmul((300, 96), (96, 260), F16, bias_relu=True)),
                                 _big_gpu(WMMA_F16), 2e-3),
    "large_ragged_k": (lambda: _dispatch(_matmul((200, 70), (70, 150), F16)), _big_gpu(WMMA_F16), 2e-3),
    "large_one_step": (lambda: _dispatch(_matmul((140, 32), (32, 256), F16)), _big_gpu(WMMA_F16), 2e-3),
    "large_batched": (lambda: _dispatch(_matmul((3, 130, 64), (64, 140), F16)), _big_gpu(WMMA_F16), 2e-3),
    "large_broadcast_batches": (lambda: _dispatch(_matmul((2, 1, 130, 32), (3, 32, 150), F16)), _big_gpu(WMMA_F16),
                                2e-3),
    "large_transposed_b": (lambda: _matmul((256, 64), (64, 200), F16, transpose_b=True), _big_gpu(WMMA_F16), 2e-3),
    "large_prologue": (lambda: _matmul((256, 96), (96, 130), F16, scale_a=True), _big_gpu(WMMA_F16), 2e-3),
    "large_dequantized_b": (lambda: _dispatch(_dequantized_b(130, 96, 70)), _big_gpu(WMMA_F16), 2e-3),
    "large_bf16_wmma": (lambda: _dispatch(_matmul((260, 64), (64, 150), BF16)),
                        _big_gpu(_fragment(m=16, n=16, k=16, a="bf16", b="bf16")), 1e-2),
    "large_bf16_into_f32": (lambda: _dispatch(_matmul((130, 48), (48, 70), BF16, bias_relu=True)),
                            _big_gpu(SIMDGROUP), 1e-2),
    "large_f32_edges": (lambda: _dispatch(_matmul((75, 40), (40, 67))), _big_gpu(SIMDGROUP), 1e-5),
    "mid_128x64": (lambda: _dispatch(_matmul((128, 64), (64, 100), F16)), _big_gpu(WMMA_F16), 2e-3),
    "large_one_copy": (lambda: _dispatch(_matmul((300, 96), (96, 260), F16, bias_relu=True)),
                       _gpu(WMMA_F16, threads=1024, shared=40 * 1024, multiprocessors=1), 2e-3),
    "small_interior_and_edges": (lambda: _dispatch(_matmul((64, 48), (48, 40))), _gpu(SIMDGROUP), 1e-5),
    # staged in runs of 16 bytes (a target with `vector_copy_bytes`): only where every tile is interior
    "runs_interior": (lambda: _dispatch(_matmul((256, 64), (64, 256), F16)), _runs(_big_gpu(WMMA_F16)), 2e-3),
    "runs_batched": (lambda: _dispatch(_matmul((2, 128, 96), (2, 96, 128), F16)), _runs(_big_gpu(WMMA_F16)), 2e-3),
    "runs_bias_relu": (lambda: _dispatch(_matmul((128, 32), (32, 256), F16, bias_relu=True)),
                       _runs(_big_gpu(WMMA_F16)), 2e-3),
    "runs_not_at_edges": (lambda: _dispatch(_matmul((300, 96), (96, 260), F16)), _runs(_big_gpu(WMMA_F16)), 2e-3),
    # the last step peeled off the loop and the k-slices in a loop (`extra["peel_last_step"]`, "fragment_k_loop")
    "peeled_interior": (lambda: _dispatch(_matmul((256, 128), (128, 256), F16)), _loops(_runs(_big_gpu(WMMA_F16))),
                        2e-3),
    "peeled_edges_ragged_k": (lambda: _dispatch(_matmul((300, 100), (100, 260), F16, bias_relu=True)),
                              _loops(_big_gpu(WMMA_F16)), 2e-3),
}
RUNS = {"runs_interior": "8xf16+8xf16", "runs_batched": "8xf16+8xf16", "runs_bias_relu": "8xf16+8xf16",
        "runs_not_at_edges": None}

# The register-tiled matmul: a target without fragment shapes, one multiprocessor (so a tile or two fill it).
SIMT = _gpu(multiprocessors=1)
REGISTER_CASES = {  # name -> (function, target, tolerance, the register tile it takes)
    "rt_interior_bias_relu": (lambda: _dispatch(_matmul((256, 64), (64, 256), bias_relu=True)), SIMT, 1e-5, "8x8"),
    "rt_edges_ragged_k": (lambda: _dispatch(_matmul((150, 70), (70, 200))), SIMT, 1e-5, "8x8"),
    "rt_batched": (lambda: _dispatch(_matmul((2, 130, 40), (40, 140))), SIMT, 1e-5, "8x8"),
    "rt_broadcast_batches": (lambda: _dispatch(_matmul((2, 1, 70, 16), (3, 16, 66))), SIMT, 1e-5, "8x8"),
    "rt_transposed_b": (lambda: _matmul((128, 32), (32, 100), transpose_b=True), SIMT, 1e-5, "8x8"),
    "rt_prologue": (lambda: _matmul((128, 48), (48, 130), scale_a=True), SIMT, 1e-5, "8x8"),
    "rt_halves_staged_as_f32": (lambda: _dispatch(_matmul((130, 40), (40, 128), F16, bias_relu=True)), SIMT, 2e-3,
                                "8x8"),
    "rt_small_plan": (lambda: _dispatch(_matmul((40, 24), (24, 70))), SIMT, 1e-5, "4x4"),
    "rt_one_copy": (lambda: _dispatch(_matmul((130, 40), (40, 140))), _gpu(shared=12 * 1024, multiprocessors=1),
                    1e-5, "8x8"),
    "rt_peeled": (lambda: _dispatch(_matmul((150, 70), (70, 200))), _loops(SIMT), 1e-5, "8x8"),
    "rt_not_peeled": (lambda: _dispatch(_matmul((150, 70), (70, 200))),
                      dataclasses.replace(SIMT, extra={**SIMT.extra, "peel_last_step": ["fragments"]}), 1e-5, "8x8"),
}


def _random(t: TensorType) -> np.ndarray:
    if t.dtype.kind == "uint":  # packed words: any bits
        return rng.integers(0, 2**32, t.shape, dtype=np.uint64).astype(t.dtype.np_dtype)
    return rng.standard_normal(t.shape).astype(t.dtype.np_dtype)


@pytest.fixture(scope="module")
def c99_kernels(tmp_path_factory):
    """Every case lowered for its target and rendered as one C99 library: name -> (kernel, function, library)."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    kernels = {}
    for name, (make, desc, *_) in (CASES | REGISTER_CASES).items():
        fn = make()
        kernels[name] = (dataclasses.replace(lower_dispatch(fn, desc), name=f"k_{name}"), fn)
    tmp = tmp_path_factory.mktemp("fragments")
    src, lib = tmp / "fragments.c", tmp / "fragments.so"
    src.write_text(render_module([kn for kn, _ in kernels.values()], C99))
    done = subprocess.run(["gcc", "-O0", "-shared", "-fPIC", "-std=c11", str(src), "-o", str(lib), "-lm"],
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


@pytest.mark.parametrize("case", list(RUNS))
def test_a_target_with_vector_copies_stages_interior_tiles_in_runs_of_16_bytes(c99_kernels, case):
    kernel, _, _ = c99_kernels[case]
    copies = [s for s in k.walk_stmts(kernel.body) if isinstance(s, k.VectorCopy)]
    assert kernel.schedule.get("staging") == RUNS[case]
    assert all(c.lanes == 8 for c in copies) and bool(copies) == (RUNS[case] is not None)
    if copies:  # each thread's runs: global -> registers, registers -> the staged tile, for A and for B
        assert {(c.src.startswith("in"), c.dst.startswith("a_tile") or c.dst.startswith("b_tile")) for c in copies} \
            == {(True, False), (False, True)}


@pytest.mark.parametrize("case", list(REGISTER_CASES))
def test_the_register_tiled_matmul_in_c99_matches_the_reference(c99_kernels, case):
    kernel, fn, library = c99_kernels[case]
    _, _, tolerance, tile = REGISTER_CASES[case]
    assert kernel.schedule["register_tile"] == tile and not k.has_fragments(kernel.body)
    inputs = [_random(a.type) for a in fn.args]
    expected = run_function(fn, inputs)[0]
    got = _call(library, kernel, inputs).reshape(expected.shape)
    np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64), rtol=tolerance, atol=tolerance)


def test_a_register_tile_plan_needs_tiles_for_every_multiprocessor():
    square = _dispatch(_matmul((256, 64), (64, 256)))
    assert lower_dispatch(square, _gpu(multiprocessors=4)).schedule["register_tile"] == "8x8"  # 2 x 2 tiles of 128
    assert lower_dispatch(square, _gpu(multiprocessors=16)).schedule["register_tile"] == "4x4"  # 4 x 4 tiles of 64
    assert "register_tile" not in lower_dispatch(square, _gpu(multiprocessors=1000)).schedule  # the split reduction


def test_a_warp_reads_the_staged_tiles_in_runs_of_four_consecutive_words():
    """Each thread reads its columns of B (and rows of A) in runs of 4 consecutive words, and the 16 threads
    along N read 64 consecutive words: vector loads with no bank conflicts."""
    kernel = lower_dispatch(_dispatch(_matmul((256, 64), (64, 256))), SIMT)
    assert kernel.schedule["register_group"] == 4
    for prefix, threads in (("b_tile", range(16)), ("a_tile", range(0, 256, 16))):
        (tile,) = [s.name for s in _statements(kernel, k.Local) if s.shared and s.name.startswith(prefix)]
        ((loop_var, read),) = [(loop.var, s.value) for loop in k.walk_stmts(kernel.body) if isinstance(loop, k.Loop)
                               for s in loop.body if isinstance(s, k.Store) and isinstance(s.value, k.Load)
                               and s.value.buffer == tile]
        words = []
        for t in threads:
            env = {"tid": t, "wg": 0}
            for s in kernel.body:  # the thread's own variables, from its id
                if isinstance(s, k.Assign) and _names(s.value) <= set(env):
                    env[s.var] = _evaluate(s.value, env)
            env.update({name: 0 for name in _names(read.index) - set(env) - {loop_var}})  # step 0, k 0
            run = [_evaluate(read.index, {**env, loop_var: e}) for e in range(4)]
            assert run == list(range(run[0], run[0] + 4)), prefix
            words += run
        assert words == list(range(words[0], words[0] + 64)), prefix


def _step_loop(kernel: k.Kernel) -> k.Loop:
    """The loop over the reduction's steps: the one whose body holds barriers."""
    (loop,) = [s for s in _statements(kernel, k.Loop) if any(isinstance(b, k.Barrier) for b in s.body)]
    return loop


@pytest.mark.parametrize("case", ["peeled_interior", "peeled_edges_ragged_k", "rt_peeled"])
def test_a_target_may_peel_the_last_step_off_the_loop_and_keep_the_k_slices_in_a_loop(c99_kernels, case):
    kernel, _, _ = c99_kernels[case]
    make, desc, *_ = (CASES | REGISTER_CASES)[case]
    core = {key: value for key, value in desc.extra.items() if key not in ("peel_last_step", "fragment_k_loop")}
    plain = lower_dispatch(make(), dataclasses.replace(desc, extra=core))
    peeled, looped = _step_loop(kernel), _step_loop(plain)
    assert peeled.extent == looped.extent - 1 >= 1
    assert any(isinstance(s, k.If) for s in looped.body) and not any(isinstance(s, k.If) for s in peeled.body)
    k_loops = [s for s in _statements(kernel, k.Loop) if any(isinstance(m, k.FragmentMma) for m in s.body)]
    plain_k_loops = [s for s in _statements(plain, k.Loop) if any(isinstance(m, k.FragmentMma) for m in s.body)]
    assert {s.kind for s in k_loops} == ({"serial"} if case != "rt_peeled" else set())
    assert {s.kind for s in plain_k_loops} == ({"unroll"} if case != "rt_peeled" else set())


def test_a_target_peels_only_the_schedules_it_lists(c99_kernels):
    """NVRTC's spelling: the fragment matmul peeled, register tiles not."""
    peeled, kept = (_step_loop(c99_kernels[case][0]) for case in ("rt_peeled", "rt_not_peeled"))
    assert kept.extent == peeled.extent + 1 and any(isinstance(s, k.If) for s in kept.body)
