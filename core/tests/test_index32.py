"""32-bit index arithmetic (`retarget.kernel.index32`): what it narrows, what it leaves alone, and when. That
narrowed kernels compute what the reference computes is checked through gcc in test_c_renderer.py."""

import numpy as np
from retarget.ir import Builder, Function, TensorType, Value, dtypes
from retarget.kernel import ir as k
from retarget.kernel.c_renderer import CUDA, render_kernel
from retarget.kernel.index32 import I32, fits, narrow_indices
from retarget.kernel.lower import lower_dispatch
from retarget.passes.dispatch import form_dispatches
from retarget.protocols import TargetDesc

GPU = TargetDesc("c", "gpu-like", "c-source", subgroup_size=32, max_workgroup_size=256, shared_memory_bytes=32768)


def _kernel(build, *shapes, dtype=dtypes.f32) -> k.Kernel:
    args = [Value(TensorType(s, dtype)) for s in shapes]
    fn = Function("f", args)
    fn.returns = [build(Builder(fn), *args)]
    (d,) = form_dispatches(fn)
    return lower_dispatch(d.function, GPU)


def _conv() -> k.Kernel:
    w = np.ones((8, 3, 3, 3), np.float32)
    return _kernel(lambda b, x: b.op("rt.conv2d", [x, b.constant(w)], {"pad": (1, 1, 1, 1)}), (1, 3, 16, 16))


def _types(stmts) -> set:
    return {e.dtype.name for e in k.walk_exprs(stmts) if isinstance(e, (k.Var, k.Const)) and e.dtype.is_integer}


def test_index_arithmetic_becomes_i32_and_cuda_declares_its_ids_and_counters_int():
    kernel = _conv()
    narrowed = narrow_indices(kernel)
    assert "i64" in _types(kernel.body) and "i64" not in _types(narrowed.body)
    source = render_kernel(kernel, CUDA)
    assert "const int wg = blockIdx.x;" in source and "const int tid = threadIdx.x;" in source
    assert "long long" not in source


def test_every_binary_op_still_has_operands_of_one_type():
    for kernel in (_conv(), _kernel(lambda b, x: b.op("rt.argmax", [x], {"axis": 1}), (4, 13))):
        for e in k.walk_exprs(narrow_indices(kernel).body):
            if isinstance(e, (k.Binary, k.Compare)):
                assert e.a.dtype == e.b.dtype, k.format_expr(e)


def test_i64_data_stays_i64():
    kernel = _kernel(lambda b, x: b.op("rt.argmax", [x], {"axis": 1}), (4, 13))  # writes i64 indices
    narrowed = narrow_indices(kernel)
    stores = [s for s in k.walk_stmts(narrowed.body) if isinstance(s, k.Store) and s.buffer == "out0"]
    assert stores and all(s.value.dtype == dtypes.i64 for s in stores)
    assert "long long" in render_kernel(kernel, CUDA)  # the output buffer and the running answer


def test_a_gather_index_read_from_an_i64_tensor_is_not_narrowed():
    table = np.arange(40, dtype=np.float32).reshape(10, 4)

    def build(b, ids):
        return b.op("rt.gather", [b.constant(table), ids], {"axis": 0})

    narrowed = narrow_indices(_kernel(build, (6,), dtype=dtypes.i64))
    (ids,) = [p.name for p in narrowed.params if p.dtype == dtypes.i64]
    reads = [e for e in k.walk_exprs(narrowed.body) if isinstance(e, k.Load) and e.buffer == ids]
    assert reads and all(e.dtype == dtypes.i64 for e in reads)
    clamps = [e for e in k.walk_exprs(narrowed.body) if isinstance(e, k.Binary) and e.op == "max" and e.a in reads]
    assert clamps and all(c.dtype == dtypes.i64 for c in clamps)  # the clamp of the read index stays 64-bit


def test_a_kernel_with_a_buffer_of_2_to_the_31_elements_is_left_alone():
    kernel = _conv()
    big = k.Kernel(kernel.name, [*kernel.params[:-1], k.Param("out0", dtypes.f32, 2**31, "write")], kernel.body,
                   kernel.workgroup_count, kernel.workgroup_vars, kernel.workgroup_size, kernel.thread_vars)
    assert fits(kernel) and not fits(big)
    assert narrow_indices(big) is big
    assert "const long long wg" in render_kernel(big, CUDA)


def test_narrowed_vars_carry_the_i32_type():
    narrowed = narrow_indices(_conv())
    assigns = [s for s in k.walk_stmts(narrowed.body) if isinstance(s, k.Assign) and s.value.dtype.is_integer]
    assert assigns and all(s.value.dtype == I32 for s in assigns)


def test_i64_data_constants_past_i32_stay_i64():
    """The min of i64 values starts from INT64_MAX: data, not index arithmetic, though both are i64 constants.
    Narrowed to i32 it overflowed, and the bounds check refused the kernel."""
    kernel = _kernel(lambda b, x: b.op("rt.reduce", [x], {"kind": "min", "axes": (1,), "keepdims": False}), (4, 13),
                     dtype=dtypes.i64)
    consts = [e for e in k.walk_exprs(narrow_indices(kernel).body) if isinstance(e, k.Const)]
    assert any(c.value == 2**63 - 1 and c.dtype == dtypes.i64 for c in consts)
    assert all(-2**31 <= c.value < 2**31 for c in consts if c.dtype == I32)
