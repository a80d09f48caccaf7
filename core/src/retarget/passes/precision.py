"""Compute precision (`--precision f16|bf16`): every float tensor inside a function takes the compute
type; constants are rounded to it once, at compile time. Kernels still accumulate sums of products
(matmul, conv, reduce sum) in f32 (`kernel.lower._accumulator`), and vmvx computes each op in f32 and
rounds its result once. A mean (a sum scaled by a constant: means, variances, norms) keeps its sum in f32 up to
the scale, as torch's autocast keeps them: a sum of 16-bit floats passes f16's 65504 where the mean does not.

The interface keeps the model's types unless `interface` names another: float arguments are cast to
the compute type as the function starts, and results back as it returns.

A bitcast (`rt.bitcast`) reads the bits of the model's types, which another float type would change: its operand
and result keep their types, cast from and to the compute type around it."""

from __future__ import annotations

import numpy as np

from ..errors import InputError
from ..ir.core import DenseAttr, Module, Operation, TensorType, Value
from ..ir.dtypes import DTYPES, DType, from_numpy
from ..ir.ops import infer_types
from .simplify import eliminate_dead_ops

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

        # a bitcast reads the bits of the model's types: its operand and result keep them, cast around it
        bitcast_from = {op: op.operands[0].type.dtype for op in fn.ops if op.name == "rt.bitcast"}
        exact = {a for a in fn.args if not a.type.dtype.is_float or interface in (None, a.type.dtype)}  # model's type
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
            if op in bitcast_from:
                v = op.operands[0]
                op.operands = [cast(v if v in exact else replace.get(v, v), bitcast_from[op])]
                body.append(op)
                exact.add(op.result)
                if compute is not None and op.result.type.dtype.is_float:
                    replace[op.result] = cast(op.result, compute)
                continue
            op.operands = [replace.get(v, v) for v in op.operands]
            if compute is not None:
                _convert(op, compute)
            body.append(op)
        bitcasts = {op.result for op in bitcast_from}
        fn.returns = [cast(v if v in bitcasts else replace.get(v, v), dt) for v, dt in zip(fn.returns, result_types)]
        fn.ops = body
        eliminate_dead_ops(fn)  # an argument's cast that only a bitcast would have read
        if compute is not None and compute.itemsize < 4:
            _means_in_f32(fn, compute)
    return module


def _means_in_f32(fn, compute: DType) -> None:
    """Each sum (`rt.reduce` sum in `compute`) that is only scaled by constant scalars: taken and scaled in f32, and
    rounded to `compute` once after each scale."""
    users = fn.users()
    after: dict[Operation, list[Operation]] = {}  # ops to insert right after an op
    before: dict[Operation, list[Operation]] = {}
    rounded: dict[Value, Value] = {}  # a scale's f32 result -> its rounding to `compute`
    for op in fn.ops:
        if op.name != "rt.reduce" or op.attrs["kind"] != "sum" or op.result.type.dtype != compute or \
                op.result in fn.returns or not users.get(op.result) or \
                not all(_is_scale_of(u, op.result) for u in users[op.result]):
            continue
        widened = _new_op("rt.cast", [op.operands[0]], {"dtype": "f32"}, op.operands[0].type.shape, "f32", op.loc)
        before[op] = [widened]
        op.operands = [widened.result]
        op.result.type = TensorType(op.result.type.shape, DTYPES["f32"])
        for scale in users[op.result]:
            factor = scale.operands[1]
            value = DenseAttr(factor.owner.attrs["value"].array.astype(np.float32))
            constant = _new_op("rt.constant", [], {"value": value}, factor.type.shape, "f32", factor.owner.loc)
            before[op].append(constant)
            scale.operands = [op.result, constant.result]
            scale.result.type = TensorType(scale.result.type.shape, DTYPES["f32"])
            back = _new_op("rt.cast", [scale.result], {"dtype": compute.name}, scale.result.type.shape, compute.name,
                           scale.loc)
            after[scale] = [back]
            rounded[scale.result] = back.result
    if not rounded:
        return
    ops = []
    for op in fn.ops:
        if op not in after:  # a scale reads its f32 sum; every other op the rounded value
            op.operands = [rounded.get(v, v) for v in op.operands]
        ops += [*before.get(op, []), op, *after.get(op, [])]
    fn.ops = ops
    fn.returns = [rounded.get(v, v) for v in fn.returns]


def _new_op(name: str, operands: list, attrs: dict, shape, dtype: str, loc) -> Operation:
    op = Operation(name, operands, [], attrs, loc)
    op.results = [Value(TensorType(shape, DTYPES[dtype]), op, 0)]
    return op


def _is_scale_of(op: Operation, total: Value) -> bool:
    """`op` multiplies or divides `total` by a constant scalar of its own (used by nothing else)."""
    if op.name not in ("rt.mul", "rt.div") or op.operands[0] is not total or len(op.operands) != 2:
        return False
    other = op.operands[1].owner
    return other is not None and other.name == "rt.constant" and other.attrs["value"].array.size == 1


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
