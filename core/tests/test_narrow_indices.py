"""The `narrow-index-constants` graph pass: i64 gather indices that fit in i32 become i32, nothing else does."""

from __future__ import annotations

import numpy as np
import pytest
import retarget
from retarget.ir import dtypes
from retarget.ir.core import Builder, Function, Module, TensorType, Value
from retarget.passes.simplify import narrow_index_constants


def _gather_module(indices: np.ndarray, also_added: bool = False, returned: bool = False) -> Module:
    x = Value(TensorType((5, 3), dtypes.f32))
    fn = Function("main", [x])
    b = Builder(fn)
    idx = b.constant(indices)
    out = b.op("rt.gather", [x, idx], {"axis": 0})
    fn.returns = [out]
    if also_added:  # a second use of the same constant, not as an index
        fn.returns.append(b.op("rt.add", [idx, idx]))
    if returned:
        fn.returns.append(idx)
    return Module({"main": fn})


def _index_dtype(module: Module) -> str:
    (op,) = [op for op in module.functions["main"].ops if op.name == "rt.constant"]
    return op.results[0].type.dtype.name


def test_gather_indices_become_i32_and_the_answer_stays():
    indices = np.array([4, 0, 2, 2], dtype=np.int64)
    module = narrow_index_constants(_gather_module(indices))
    assert _index_dtype(module) == "i32"
    x = np.arange(15, dtype=np.float32).reshape(5, 3)
    out = retarget.load(retarget.compile(_gather_module(indices), "vmvx"), device="local-sync").main(x)
    np.testing.assert_array_equal(out, x[indices])


@pytest.mark.parametrize("case", ["also added", "returned", "too large"])
def test_indices_with_another_use_or_past_i32_stay_i64(case):
    indices = np.array([1, 2**40 if case == "too large" else 0], dtype=np.int64)
    module = _gather_module(indices, also_added=case == "also added", returned=case == "returned")
    assert _index_dtype(narrow_index_constants(module)) == "i64"
