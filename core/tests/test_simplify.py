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
