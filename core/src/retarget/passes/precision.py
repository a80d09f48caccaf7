"""Compute precision (`--precision f16|bf16`): every float tensor inside a function takes the compute
type; constants are rounded to it once, at compile time. Kernels still accumulate sums of products
(matmul, conv, reduce sum) in f32 (`kernel.lower._accumulator`), and vmvx computes each op in f32 and
rounds its result once.

The interface keeps the model's types unless `interface` names another: float arguments are cast to
the compute type as the function starts, and results back as it returns."""

from __future__ import annotations

import numpy as np

from ..errors import InputError
from ..ir.core import DenseAttr, Module, Operation, TensorType, Value
from ..ir.dtypes import DTYPES, DType, from_numpy
from ..ir.ops import infer_types

PRECISIONS = ("f32", "f16", "bf16")


def precision_dtype(name: str, what: str = "precision") -> DType:
    if name not in PRECISIONS:
        raise InputError(f"unknown {what} '{name}'", hint=f"one of {', '.join(PRECISIONS)}")
    return DTYPES[name]


def set_precision(module: Module, compute: DType | None, interface: DType | None = None) -> Module:
    """Every float value computed in `compute` (None: as the model computes it); float arguments and
    results in `interface` (None: as the model declares them)."""
    for fn in module.functions.values():
        body: list[Operation] = []

        def cast(v: Value, dt: DType, body=body) -> Value:
            if v.type.dtype == dt:
                return v
            op = Operation("rt.cast", [v], [], {"dtype": dt.name}, None)
            op.results = [Value(TensorType(v.type.shape, dt), op, 0)]
            body.append(op)
            return op.result

        replace: dict[Value, Value] = {}
        original = {a: a.type.dtype for a in fn.args}
        for a in fn.args:
            if a.type.dtype.is_float:
                if interface is not None:
                    a.type = TensorType(a.type.shape, interface)
                replace[a] = cast(a, compute or original[a])
        result_types = [v.type.dtype if interface is None or not v.type.dtype.is_float else interface
                        for v in fn.returns]
        for op in fn.ops:
            op.operands = [replace.get(v, v) for v in op.operands]
            if compute is not None:
                _convert(op, compute)
            body.append(op)
        fn.returns = [cast(replace.get(v, v), dt) for v, dt in zip(fn.returns, result_types)]
        fn.ops = body
    return module


def _convert(op: Operation, compute: DType) -> None:
    """`op` with its float constants, float attributes of type and results in `compute`."""
    if op.name == "rt.constant":
        array = op.attrs["value"].array
        if from_numpy(array.dtype).is_float:
            op.attrs["value"] = DenseAttr(np.asarray(array.astype(np.float32)).astype(compute.np_dtype))
    elif op.name in ("rt.cast", "rt.iota") and DTYPES[op.attrs["dtype"]].is_float:
        op.attrs["dtype"] = compute.name
    types = infer_types(op.name, [v.type for v in op.operands], op.attrs, op.loc)
    for v, t in zip(op.results, types):
        v.type = t
