"""Graph cleanups (`passes/simplify.py`) and the reference semantics they fold with."""

import numpy as np
import pytest
from retarget.ir import Builder, Function, TensorType, Value, dtypes, verify
from retarget.ir.core import Module
from retarget.passes.simplify import fold_constants
from retarget.vmvx.kernels import evaluate


def test_a_folded_scalar_stays_a_scalar():
    """np.ascontiguousarray makes a 0-d array 1-d: every integer floor division by a number (its sign test,
    `b < 0` of two scalars, folds) failed verification after folding."""
    x = Value(TensorType((3,), dtypes.i32))
    fn = Function("main", [x])
    b = Builder(fn)
    two, zero = b.constant(np.array(2, np.int32)), b.constant(np.array(0, np.int32))
    negative = b.op("rt.cmp", [two, zero], {"predicate": "lt"})
    fn.returns = [b.op("rt.select", [negative, x, b.op("rt.add", [x, two])])]
    module = fold_constants(Module({"main": fn}))
    verify(module)
    ops = module.functions["main"].ops
    folded = [op for op in ops if op.name == "rt.constant" and op.result.type.dtype == dtypes.i1]
    assert folded and folded[0].attrs["value"].array.shape == ()


@pytest.mark.parametrize("dtype", ["ui8", "i8", "i32", "i64"])
def test_float_to_integer_casts_saturate_in_the_reference(dtype):
    """As every compiled target does (llvm's fptosi.sat); numpy's astype wraps -126.0 to 130 as uint8."""
    dt = dtypes.DTYPES[dtype]
    info = np.iinfo(dt.np_dtype)
    x = np.array([-126.7, 300.9, np.nan, np.inf, -np.inf, 2.0**63, -2.0**63, 5.9], np.float32)
    got = evaluate("rt.cast", {"dtype": dtype}, [x], TensorType((8,), dt))
    want = [max(-126, info.min), min(300, info.max), 0, info.max, info.min, info.max, info.min, 5]
    assert got.dtype == dt.np_dtype and got.tolist() == want


def _empty_tensor_graph():
    """x [0, 5] (an argument of no elements), y [3, 4]: concat of y with a slice of no rows, a row sum over x's empty
    axis, x @ [5, 2] (no rows), [3, 0] @ [0, 4] (no depth), and x itself returned."""
    x, y = Value(TensorType((0, 5), dtypes.f32)), Value(TensorType((3, 4), dtypes.f32))
    fn = Function("main", [x, y])
    b = Builder(fn)
    none = b.op("rt.slice", [y], {"start": (0, 0), "limit": (0, 4), "stride": (1, 1)})
    joined = b.op("rt.concat", [none, b.op("rt.exp", [y]), none], {"axis": 0})
    sums = b.op("rt.reduce", [x], {"kind": "sum", "axes": (0,), "keepdims": False})
    no_rows = b.op("rt.matmul", [x, b.constant(np.ones((5, 2), np.float32))])
    narrow = b.op("rt.slice", [y], {"start": (0, 0), "limit": (3, 0), "stride": (1, 1)})
    no_depth = b.op("rt.matmul", [narrow, b.op("rt.slice", [y], {"start": (0, 0), "limit": (0, 4), "stride": (1, 1)})])
    fn.returns = [joined, sums, no_rows, no_depth, x]
    return Module({"main": fn})


def test_tensors_of_no_elements_become_constants_and_leave_concats():
    from retarget.passes.simplify import canonicalize

    module = fold_constants(canonicalize(_empty_tensor_graph()))
    verify(module)
    fn = module.functions["main"]
    assert [op.name for op in fn.ops if op.name != "rt.constant"] == ["rt.exp"]  # the concat is just exp(y)
    assert fn.returns[0].owner.name == "rt.exp"
    assert all(r.owner.name == "rt.constant" for r in fn.returns[1:])
    np.testing.assert_array_equal(fn.returns[1].owner.attrs["value"].array, np.zeros(5, np.float32))


@pytest.mark.parametrize("target", ["vmvx", "llvm-cpu"])
def test_a_model_with_tensors_of_no_elements_compiles_and_runs(target):
    """Before, llvm-cpu (and every GPU target: the bounds proof is shared) refused such kernels with a
    KernelBoundsError: a clamped read of an empty buffer, ONNX's test_triu_zero and RotaryEmbedding with no
    pass-through dimensions."""
    import retarget
    from retarget.testing.devices import skip_unless_runs

    skip_unless_runs(target, "local-task")
    x, y = np.zeros((0, 5), np.float32), np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    outs = retarget.load(retarget.compile(_empty_tensor_graph(), target), device="local-task").main(x, y)
    np.testing.assert_allclose(outs[0], np.exp(y), rtol=1e-6)
    np.testing.assert_array_equal(outs[1], np.zeros(5, np.float32))
    assert outs[2].shape == (0, 2) and outs[4].shape == (0, 5)
    np.testing.assert_array_equal(outs[3], np.zeros((3, 4), np.float32))
