"""Fold a per-channel scale after a conv into its filter: conv(x, W) * a -> conv(x, W * a).

Inference batch norm arrives from the importers as `x * a + c` with constant
per-channel `a` and `c`; after this pass only `+ c` is left, which fuses into the
conv's epilogue as a bias.
"""

from __future__ import annotations

import numpy as np

from ..ir.core import DenseAttr, Module, Operation
from .simplify import eliminate_dead_ops


def _constant(v):
    return v.owner.attrs["value"].array if v.owner is not None and v.owner.name == "rt.constant" else None


def _channel_scale(scale: np.ndarray, channels: int) -> np.ndarray | None:
    """`scale` as an [O] vector if it only varies along the channel axis of NCHW."""
    if scale.ndim > 4:
        return None
    full = scale.reshape((1,) * (4 - scale.ndim) + scale.shape)
    if full.shape[0] != 1 or full.shape[2:] != (1, 1) or full.shape[1] not in (1, channels):
        return None
    return np.broadcast_to(full.reshape(-1), (channels,))


def fold_conv_scales(module: Module) -> Module:
    for fn in module.functions.values():
        users = fn.users()
        returned = set(fn.returns)
        replace = {}
        for op in list(fn.ops):  # the loop inserts folded filters into fn.ops
            op.operands = [replace.get(v, v) for v in op.operands]
            if op.name != "rt.mul":
                continue
            for conv_value, other in (op.operands, op.operands[::-1]):
                conv: Operation | None = conv_value.owner
                scale = _constant(other)
                weights = _constant(conv.operands[1]) if conv is not None and conv.name == "rt.conv2d" else None
                if weights is None or scale is None or conv_value in returned or len(users.get(conv_value, [])) != 1:
                    continue
                if op.result.type != conv_value.type:
                    continue
                per_channel = _channel_scale(scale, weights.shape[0])
                if per_channel is None:
                    continue
                folded = (weights.astype(np.float64) * per_channel.reshape(-1, 1, 1, 1)).astype(weights.dtype)
                w_op = Operation("rt.constant", [], [], {"value": DenseAttr(folded)}, conv.operands[1].owner.loc)
                w_op.results = [type(conv.operands[1])(conv.operands[1].type, w_op, 0)]
                fn.ops.insert(fn.ops.index(conv), w_op)
                conv.operands = [conv.operands[0], w_op.results[0]]
                replace[op.result] = conv_value
                break
        fn.returns = [replace.get(v, v) for v in fn.returns]
        eliminate_dead_ops(fn)
    return module
