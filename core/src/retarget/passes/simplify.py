"""Graph cleanups: drop identity ops, fold constants, narrow gather indices, remove dead ops, split concats of
more tensors than a kernel binds. A tensor of no elements is known whatever the data: it becomes a constant, and a
concat drops it, so that no kernel reads or writes an empty buffer."""

from __future__ import annotations

import numpy as np

from ..ir.core import DenseAttr, Function, Module, Operation, TensorType, Value
from ..ir.dtypes import i32
from ..ir.ops import VIEWS, infer_types
from .dispatch import MAX_KERNEL_BUFFERS

FOLD_LIMIT_BYTES = 1 << 12  # a folded result may grow past its inputs only up to this
KEEP_UNFOLDED = ("rt.dequantize",)  # packed weights stay packed: kernels unpack them as they read


def canonicalize(module: Module) -> Module:
    for fn in module.functions.values():
        _drop_empty_concat_operands(fn)
        _split_wide_concats(fn)
        replace = {}
        for op in fn.ops:
            op.operands = [replace.get(v, v) for v in op.operands]
            inner = op.operands[0].owner if op.name in VIEWS else None
            if inner is not None and inner.name == op.name:  # reshape(reshape(x)) is one reshape of x; so for bitcasts
                op.operands = [inner.operands[0]]
            same = _identity_operand(op)
            if same is not None:
                replace[op.result] = same
        fn.returns = [replace.get(v, v) for v in fn.returns]
        eliminate_dead_ops(fn)
    return module


def _is_empty(v: Value) -> bool:
    return v.type.is_static and v.type.num_elements == 0


def _drop_empty_concat_operands(fn: Function) -> None:
    """A concat's operands of no elements add nothing: dropped (kept where all are empty, for fold_constants)."""
    for op in fn.ops:
        if op.name == "rt.concat" and any(_is_empty(v) for v in op.operands):
            kept = [v for v in op.operands if not _is_empty(v)]
            op.operands = kept or op.operands[:1]


def _split_wide_concats(fn: Function) -> None:
    """A concat of more tensors than one kernel binds becomes concats of runs of them, then one of those."""
    ops = []
    for op in fn.ops:
        while op.name == "rt.concat" and len(op.operands) >= MAX_KERNEL_BUFFERS:
            runs = [op.operands[i:i + MAX_KERNEL_BUFFERS - 1] for i in range(0, len(op.operands),
                                                                          MAX_KERNEL_BUFFERS - 1)]
            operands = []
            for run in runs:
                if len(run) == 1:
                    operands.append(run[0])
                    continue
                part = Operation("rt.concat", list(run), [], dict(op.attrs), op.loc)
                part.results = [Value(t, part, 0) for t in infer_types(part.name, [v.type for v in run], part.attrs)]
                ops.append(part)
                operands.append(part.result)
            op.operands = operands
        ops.append(op)
    fn.ops = ops


def _identity_operand(op: Operation) -> Value | None:
    if len(op.operands) != 1 or len(op.results) != 1:
        return None
    src, dst = op.operands[0].type, op.result.type
    if op.name in ("rt.reshape", "rt.bitcast", "rt.broadcast") and src == dst:
        return op.operands[0]
    if op.name == "rt.transpose" and tuple(op.attrs["perm"]) == tuple(range(src.rank)):
        return op.operands[0]
    if op.name in ("rt.cast", "rt.concat") and src == dst:
        return op.operands[0]
    return None


def fold_constants(module: Module) -> Module:
    """Evaluate ops whose operands are all constants, with the reference kernels."""
    from ..vmvx.kernels import evaluate

    for fn in module.functions.values():
        _empty_as_constants(fn)
        for op in fn.ops:
            if op.name in ("rt.constant", *KEEP_UNFOLDED) or len(op.results) != 1 or not _all_constant(op):
                continue
            inputs = [v.owner.attrs["value"].array for v in op.operands]
            out_type = op.result.type
            if not out_type.is_static:
                continue  # as big as an input known only at run time
            if out_type.nbytes > max([a.nbytes for a in inputs] + [FOLD_LIMIT_BYTES]):
                continue  # e.g. a broadcast of a scalar: cheaper to compute than to store
            value = np.require(evaluate(op.name, op.attrs, inputs, out_type), requirements="C")  # 0-d stays 0-d
            op.name, op.operands, op.attrs = "rt.constant", [], {"value": DenseAttr(value)}
        eliminate_dead_ops(fn)
    return module


def _empty_as_constants(fn: Function) -> None:
    """Every static tensor of no elements (an argument, an op's result) as a constant: ops that read only constants
    and empty tensors then fold (a sum over an empty axis, a matmul of no depth), and no kernel touches them."""
    empty = {}
    for arg in fn.args:
        if _is_empty(arg):
            empty[arg] = _empty_constant(arg.type)
    for op in fn.ops:
        op.operands = [empty[v].result if v in empty else v for v in op.operands]
        if op.name != "rt.constant" and len(op.results) == 1 and _is_empty(op.result):
            op.name, op.operands, op.attrs = "rt.constant", [], {"value": DenseAttr(_zeros(op.result.type))}
    fn.ops = list(empty.values()) + fn.ops
    fn.returns = [empty[v].result if v in empty else v for v in fn.returns]


def _zeros(t: TensorType) -> np.ndarray:
    return np.zeros(tuple(t.shape), dtype=t.dtype.np_dtype)


def _empty_constant(t: TensorType) -> Operation:
    op = Operation("rt.constant", [], [], {"value": DenseAttr(_zeros(t))}, None)
    op.results = [Value(t, op, 0)]
    return op


def narrow_index_constants(module: Module) -> Module:
    """i64 constants used only as gather indices, whose values fit in i32, become i32 (torch's and ONNX's indices
    are i64): half the bytes, and no 64-bit integers in the kernels, which some targets lack (WGSL)."""
    limits = np.iinfo(np.int32)
    for fn in module.functions.values():
        users = fn.users()
        for op in fn.ops:
            value = op.results[0] if op.name == "rt.constant" else None
            if value is None or value.type.dtype.name != "i64" or value in fn.returns or value not in users:
                continue
            array = op.attrs["value"].array
            if all(user.name == "rt.gather" and user.operands[0] is not value for user in users[value]) and \
                    (array.size == 0 or (limits.min <= array.min() and array.max() <= limits.max)):
                op.attrs["value"] = DenseAttr(array.astype(np.int32))
                value.type = TensorType(value.type.shape, i32)
    return module


def _all_constant(op: Operation) -> bool:
    return bool(op.operands) and all(v.owner is not None and v.owner.name == "rt.constant" for v in op.operands)


def eliminate_dead_ops(fn: Function) -> None:
    live = set(fn.returns)
    kept = []
    for op in reversed(fn.ops):
        if any(r in live for r in op.results):
            kept.append(op)
            live.update(op.operands)
    fn.ops = kept[::-1]
