"""Bounds checked at build time (`retarget.kernel.bounds`): kernels that stay inside their buffers are
proved, broken ones are compile errors naming the kernel, the access and the range found, and every
target that lowers through the core checks every dispatch."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import retarget
from retarget.errors import KernelBoundsError
from retarget.ir import Builder, Function, Module, TensorType, Value, dtypes
from retarget.kernel import ir as k
from retarget.kernel import lower
from retarget.kernel.bounds import check_kernel
from retarget.kernel.ir import (
    Assign,
    Barrier,
    Cast,
    Compare,
    Fragment,
    FragmentLoad,
    FragmentStore,
    If,
    Kernel,
    Load,
    Local,
    Loop,
    Param,
    Select,
    Store,
    Var,
    const,
)
from retarget.passes.dispatch import form_dispatches
from retarget.testing.graphs import mlp_module

F32, I32, F16 = dtypes.f32, dtypes.DTYPES["i32"], dtypes.DTYPES["f16"]
GPU = dict(workgroup_vars=("wg",), thread_vars=("tid",), workgroup_size=(64, 1, 1))


def _copy(n: int, index, guard=None, grid: int = 1, threads: int = 64) -> Kernel:
    """out[index] = in0[index] for every thread of `grid` workgroups, under `guard` if given."""
    body = [Assign("gid", Var("wg") * threads + Var("tid"))]
    store = [Store("out0", index, Load("in0", index, F32))]
    body += [If(guard, store)] if guard is not None else store
    return Kernel("copy", [Param("in0", F32, n, "read"), Param("out0", F32, n, "write")], body,
                  (grid, 1, 1), **{**GPU, "workgroup_size": (threads, 1, 1)})


# -- what it proves ---------------------------------------------------------------------------------


def test_a_guard_on_the_global_id_proves_an_overhanging_grid():
    gid = Var("gid")
    assert check_kernel(_copy(1000, gid, Compare("lt", gid, const(1000)), grid=16)) == 2


def test_an_overhanging_grid_without_its_guard_is_refused_with_the_range():
    gid = Var("gid")
    with pytest.raises(KernelBoundsError) as e:
        check_kernel(_copy(1000, gid, grid=16))
    message = str(e.value)
    assert "kernel copy" in message and "%in0[%gid]" in message
    assert "elements 0 to 1,023 of a buffer of 1,000" in message


def test_a_loop_reading_one_past_its_end_is_refused():
    body = [Loop("i", 8, [Store("out0", Var("i"), Load("in0", Var("i") + 1, F32))])]
    kernel = Kernel("shift", [Param("in0", F32, 8, "read"), Param("out0", F32, 8, "write")], body)
    with pytest.raises(KernelBoundsError, match=r"load %in0\[\(%i \+ 1\)\] may touch elements 1 to 8 of a buffer of 8"):
        check_kernel(kernel)


def test_a_clamped_index_is_proved():
    clamped = k.minimum(k.maximum(Var("i") - 1, 0), 7)
    body = [Loop("i", 10, [Store("out0", clamped, Load("in0", clamped, F32))])]
    assert check_kernel(Kernel("clamp", [Param("in0", F32, 8, "read"), Param("out0", F32, 8, "write")], body)) == 2


def test_a_select_does_not_guard_the_loads_in_its_operands():
    """SPIR-V, WGSL and LLVM evaluate both operands of a select, so its condition guards nothing."""
    i = Var("i")
    value = Select(Compare("lt", i, const(8)), Load("in0", i, F32), const(0.0, F32))
    kernel = Kernel("pad", [Param("in0", F32, 8, "read"), Param("out0", F32, 10, "write")],
                    [Loop("i", 10, [Store("out0", i, value)])])
    with pytest.raises(KernelBoundsError, match="load %in0"):
        check_kernel(kernel)


def test_a_select_s_condition_narrows_the_index_it_picks():
    """The value of select(i < 4, i, i - 4) is i when i < 4 and i - 4 otherwise: 0 to 3 either way."""
    i = Var("i")
    folded = Select(Compare("lt", i, const(4)), i, i - 4)
    kernel = Kernel("fold", [Param("in0", F32, 4, "read"), Param("out0", F32, 8, "write")],
                    [Loop("i", 8, [Store("out0", i, Load("in0", folded, F32))])])
    assert check_kernel(kernel) == 2
    shifted = Select(Compare("lt", i, const(4)), i, i - 3)
    kernel.body = [Loop("i", 8, [Store("out0", i, Load("in0", shifted, F32))])]
    with pytest.raises(KernelBoundsError, match="elements 0 to 4 of a buffer of 4"):
        check_kernel(kernel)


def test_a_gathered_index_must_be_clamped():
    raw = Cast(Load("idx", Var("i"), I32), k.INDEX)
    params = [Param("table", F32, 100, "read"), Param("idx", I32, 4, "read"), Param("out0", F32, 4, "write")]
    unclamped = Kernel("gather", params, [Loop("i", 4, [Store("out0", Var("i"), Load("table", raw, F32))])])
    with pytest.raises(KernelBoundsError, match=r"elements -2,147,483,648 to 2,147,483,647 of a buffer of 100"):
        check_kernel(unclamped)
    safe = k.minimum(k.maximum(raw, 0), 99)
    clamped = Kernel("gather", params, [Loop("i", 4, [Store("out0", Var("i"), Load("table", safe, F32))])])
    assert check_kernel(clamped) == 3


def test_a_guard_on_a_sum_bounds_an_index_that_contains_the_sum():
    """wg * 4 + t < 10 keeps the last, partial workgroup inside, though neither wg nor t alone says so."""
    item = Var("wg") * 4 + Var("t")
    body = [Loop("t", 4, [If(Compare("lt", item, const(10)), [Store("out0", item * 2 + 1, const(1.0, F32))])])]
    kernel = Kernel("chunks", [Param("out0", F32, 20, "write")], body, (3, 1, 1), ("wg",))
    assert check_kernel(kernel) == 1


def test_a_guard_on_a_tile_row_narrows_the_offsets_computed_from_it_before():
    """m0 = tr * 16 is assigned before the guard on tr; a variable assigned once stands for its expression."""
    body = [Assign("tr", Var("wg")), Assign("m0", Var("tr") * 16),
            If(Compare("lt", Var("tr"), const(3)), [Store("out0", Var("m0") + Var("tid"), const(0.0, F32))])]
    kernel = Kernel("tiles", [Param("out0", F32, 48, "write")], body, (4, 1, 1), ("wg",), (16, 1, 1), ("tid",))
    assert check_kernel(kernel) == 1


def test_an_unrolled_loop_is_proved_one_iteration_at_a_time_when_its_interval_is_too_coarse():
    """8 threads cover a 16-element row twice over 4 unrolled elements: (e * 8) % 16 + t. As intervals,
    (e * 8) % 16 is 0 to 15 and the sum reaches 22; one iteration at a time, each e gives 0..7 or 8..15."""
    t, e = Var("tid"), Var("e")
    body = [Local("row", 16, F32, shared=True),
            Loop("e", 4, [Store("row", (e * 8) % 16 + t, const(0.0, F32))], "unroll")]
    kernel = Kernel("spread", [Param("out0", F32, 1, "write")], body, (1, 1, 1), ("wg",), (8, 1, 1), ("tid",))
    assert check_kernel(kernel) == 4


def test_a_workgroup_array_indexed_past_its_end_by_the_threads_is_refused():
    body = [Local("tile", 32, F32, shared=True), Store("tile", Var("tid"), const(0.0, F32)), Barrier()]
    kernel = Kernel("shared", [Param("out0", F32, 1, "write")], body, (1, 1, 1), ("wg",), (64, 1, 1), ("tid",))
    with pytest.raises(KernelBoundsError, match=r"store %tile\[%tid\] may touch elements 0 to 63 of a buffer of 32"):
        check_kernel(kernel)


def test_a_fragment_block_that_runs_past_its_array_is_refused():
    body = [Local("tile", 16 * 16, F16, shared=True),
            Fragment("fa", "a", 16, 16, 16, F16, F32),
            FragmentLoad("fa", "tile", const(8), 16)]
    kernel = Kernel("frag", [Param("out0", F32, 1, "write")], body, (1, 1, 1), ("wg",), (32, 1, 1), ("tid",))
    with pytest.raises(KernelBoundsError, match=r"16x16 block \(stride 16\) at %tile\[8\] may touch elements 8 to 263"):
        check_kernel(kernel)


def test_a_fragment_store_inside_its_array_is_proved():
    body = [Local("c", 2 * 16 * 16, F32, shared=True),
            Fragment("acc", "acc", 16, 16, 16, F16, F32, fill=0.0),
            Assign("sg", Var("tid") // 32),
            FragmentStore("acc", "c", Var("sg") * 256, 16)]
    kernel = Kernel("frag", [Param("out0", F32, 1, "write")], body, (1, 1, 1), ("wg",), (64, 1, 1), ("tid",))
    assert check_kernel(kernel) == 1


def test_an_index_carried_around_a_loop_widens_and_is_refused():
    body = [Assign("p", const(0)), Loop("i", 4, [Store("out0", Var("p"), const(0.0, F32)), Assign("p", Var("p") + 3)])]
    kernel = Kernel("walk", [Param("out0", F32, 16, "write")], body)
    with pytest.raises(KernelBoundsError, match=r"store %out0\[%p\]"):
        check_kernel(kernel)


def test_a_variable_reassigned_in_one_branch_takes_both_values_after_it():
    body = [Loop("i", 2, [Assign("p", const(0)), If(Compare("eq", Var("i"), const(1)), [Assign("p", const(9))]),
                          Store("out0", Var("p"), const(0.0, F32))])]
    kernel = Kernel("branch", [Param("out0", F32, 8, "write")], body)
    with pytest.raises(KernelBoundsError, match="elements 0 to 9 of a buffer of 8"):
        check_kernel(kernel)


def test_a_loop_variable_reusing_a_guarded_name_is_not_narrowed_by_the_guard():
    i = Var("i")
    body = [Assign("i", Var("wg")), Assign("j", Var("i") * 2),
            If(Compare("lt", i * 2, const(4)), [Loop("i", 8, [Store("out0", i * 2, const(0.0, F32)),
                                                              Store("out0", Var("j"), const(0.0, F32))])])]
    kernel = Kernel("shadow", [Param("out0", F32, 4, "write")], body, (4, 1, 1), ("wg",))
    with pytest.raises(KernelBoundsError) as e:
        check_kernel(kernel)
    assert "%out0[(%i * 2)] may touch elements 0 to 14" in str(e.value) and "%out0[%j]" not in str(e.value)


def test_a_body_that_cannot_run_is_not_checked():
    body = [Loop("i", 4, [If(Compare("gt", Var("i"), const(10)), [Store("out0", Var("i") + 100, const(0.0, F32))])])]
    assert check_kernel(Kernel("dead", [Param("out0", F32, 4, "write")], body)) == 0


def test_a_symbol_with_a_known_range_bounds_an_extent():
    """For symbolic shapes: a free variable's range comes from `symbols`."""
    body = [Loop("i", 8, [If(Compare("lt", Var("i"), Var("n")), [Store("out0", Var("i"), const(0.0, F32))])])]
    kernel = Kernel("sym", [Param("out0", F32, 4, "write")], body)
    assert check_kernel(kernel, symbols={"n": (1, 4)}) == 1
    with pytest.raises(KernelBoundsError):
        check_kernel(kernel, symbols={"n": (1, 5)})


def test_32_bit_index_arithmetic_that_can_overflow_is_refused():
    """(i * 2^21) // 2^21 is i, in bounds, but i * 2^21 passes 2^31 for i >= 1024: the C-like GPU dialects,
    Vulkan and WebGPU compute it in 32 bits (index32), where it would wrap."""
    i = Var("i")
    index = (i * (1 << 21)) // (1 << 21)
    body = [Loop("i", 4096, [Store("out0", index, const(0.0, F32))])]
    with pytest.raises(KernelBoundsError, match=r"32-bit index arithmetic \(%i \* 2097152\) may reach 0 to "
                                                r"8,587,837,440, outside i32"):
        check_kernel(Kernel("wide", [Param("out0", F32, 4096, "write")], body))


def test_index_arithmetic_stays_64_bit_for_a_buffer_of_2_to_the_31_elements_or_more():
    i = Var("i")
    index = (i * (1 << 21)) // (1 << 21)
    body = [Loop("i", 4096, [Store("out0", index, const(0.0, F32))])]
    assert check_kernel(Kernel("wide", [Param("out0", F32, 1 << 31, "write")], body)) == 1


def test_an_access_to_an_undeclared_array_is_refused():
    kernel = Kernel("ghost", [Param("out0", F32, 4, "write")], [Store("nowhere", const(0), const(0.0, F32))])
    with pytest.raises(KernelBoundsError, match="%nowhere is not a parameter or an array"):
        check_kernel(kernel)


def test_the_error_names_at_most_three_accesses_and_counts_the_rest():
    stores = [Store("out0", const(10 + i), const(0.0, F32)) for i in range(5)]
    with pytest.raises(KernelBoundsError, match=r"\(and 2 more\)"):
        check_kernel(Kernel("many", [Param("out0", F32, 4, "write")], stores))


# -- in the compile pipeline --------------------------------------------------------------------------------


def _off_by_one(monkeypatch):
    """Two bugs in the GPU lowering: its global-id guard is `<=`, and the outermost coordinate skips the
    `% extent` that the guard makes redundant. Together, one thread past the end stores."""
    over_output, delinearize = lower._GpuLowering._over_output, lower._delinearize

    def unwrapped(flat, shape):
        return [flat // lower.strides(shape)[0]] + delinearize(flat, shape)[1:]

    def at_most(self, shape, element, work):
        assign, guard = over_output(self, shape, element, work)
        return [assign, If(Compare("le", guard.cond.a, guard.cond.b), guard.body)]

    monkeypatch.setattr(lower, "_delinearize", unwrapped)
    monkeypatch.setattr(lower._GpuLowering, "_over_output", at_most)


def _add_module(n: int = 1000) -> Module:
    args = [Value(TensorType((n,), F32)), Value(TensorType((n,), F32))]
    fn = Function("add", args)
    fn.returns = [Builder(fn).op("rt.add", args)]
    return Module({"add": fn})


@pytest.mark.parametrize("target", ["cuda:sm_90", "rocm:gfx942", "vulkan-spirv", "webgpu-spirv", "metal-spirv"])
def test_every_gpu_target_refuses_a_lowering_with_an_off_by_one_guard(monkeypatch, target):
    if target.split(":")[0] not in retarget.targets():
        pytest.skip(f"target {target} is not installed")
    _off_by_one(monkeypatch)
    with pytest.raises(KernelBoundsError, match=r"kernel add.*store %out0.* elements 0 to 1,000 of a buffer of 1,000"):
        retarget.compile(_add_module(), target)


def _dynamic_add_module() -> Module:
    from retarget.ir.symbolic import SymbolRange, sym

    module = _add_module(sym("n"))
    Builder(module.functions["add"]).symbol("n", SymbolRange(1, None))
    return module


def test_a_dynamic_kernel_with_an_off_by_one_guard_is_refused(monkeypatch):
    if "vulkan-spirv" not in retarget.targets():
        pytest.skip("target vulkan-spirv is not installed")
    _off_by_one(monkeypatch)
    with pytest.raises(KernelBoundsError, match=r"kernel add.*store %out0"):
        retarget.compile(_dynamic_add_module(), "vulkan-spirv")


def test_a_dynamic_kernel_is_proved_at_its_lowest_an_odd_and_its_highest_size(monkeypatch):
    proved = []

    def check(kernel, symbols=None):
        proved.append(symbols)
        return check_kernel(kernel, symbols=symbols)

    monkeypatch.setattr(lower, "check_kernel", check)
    retarget.compile(_dynamic_add_module(), "llvm-cpu", dims={"n": (2, 50)})
    assert proved == [{"dim_n": (2, 2)}, {"dim_n": (17, 17)}, {"dim_n": (50, 50)}]


def test_the_cpu_lowering_is_checked_in_the_compile_pipeline(monkeypatch):
    if "llvm-cpu" not in retarget.targets():
        pytest.skip("target llvm-cpu is not installed")
    original = lower._Lowering.store

    def store_one_past(self, idx):
        s = original(self, idx)
        return dataclasses.replace(s, index=s.index + 1)

    monkeypatch.setattr(lower._Lowering, "store", store_one_past)
    module, _, _ = mlp_module()
    with pytest.raises(KernelBoundsError, match="may touch elements 1 to 8 of a buffer of 8"):
        retarget.compile(module, "llvm-cpu")


@pytest.mark.parametrize("target", ["llvm-cpu", "cuda:sm_90", "cuda:sm_80", "rocm:gfx942", "rocm:gfx1100",
                                    "vulkan-spirv", "webgpu-spirv", "metal-spirv"])
def test_awkward_shapes_lower_and_are_proved_on_every_target(target):
    """Overhanging grids, ragged tiles, padding, strides, broadcasts and f16 fragment matmuls."""
    if target.split(":")[0] not in retarget.targets():
        pytest.skip(f"target {target} is not installed")
    from retarget.compiler import resolve_target

    _, desc, _ = resolve_target(target)
    for fn in _awkward_dispatches():
        kernel = lower.lower_dispatch(fn, desc)
        assert check_kernel(kernel) > 0, kernel.name


def _awkward_dispatches() -> list[Function]:
    out = []
    for a_shape, b_shape, dt in (((37, 53), (53, 29), F32), ((2, 129, 70), (70, 130), F16), ((1, 200), (200, 3), F16),
                                 ((256, 256), (256, 256), F16)):
        args = [Value(TensorType(a_shape, dt)), Value(TensorType(b_shape, dt))]
        fn = Function("mm", args)
        bld = Builder(fn)
        y = bld.op("rt.matmul", args)
        fn.returns = [bld.op("rt.max", [y, bld.constant(np.zeros((), dt.np_dtype))])]
        out += [d.function for d in form_dispatches(fn)]
    x = Value(TensorType((1, 3, 17, 23), F32))
    w = Value(TensorType((8, 3, 3, 3), F32))
    fn = Function("conv", [x, w])
    bld = Builder(fn)
    y = bld.op("rt.conv2d", [x, w], {"strides": [2, 2], "pad": [1, 2, 1, 0], "dilations": [1, 2], "groups": 1})
    fn.returns = [bld.op("rt.max_pool2d", [y], {"kernel": [3, 3], "strides": [2, 2], "pad": [1, 1, 1, 1]})]
    out += [d.function for d in form_dispatches(fn)]
    return out
