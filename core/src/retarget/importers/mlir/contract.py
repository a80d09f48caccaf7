"""Tensor contractions (einsum with one product) as transposes, reshapes and one rt.matmul.

Used by `stablehlo.dot_general` and by `linalg.generic`s that multiply two inputs and sum.
"""

from __future__ import annotations

import math

from ...ir.core import Builder, Value
from .convert import reshape, transpose


def contract(b: Builder, x: Value, x_dims: list, y: Value, y_dims: list, out_dims: list) -> Value:
    """sum over the labels that are not in `out_dims` of x * y; each operand's axes are labelled."""
    size = {d: s for d, s in zip(x_dims, x.type.shape)} | {d: s for d, s in zip(y_dims, y.type.shape)}
    # labels that only one side has and the result drops: sum them out first
    x, x_dims = _sum_out(b, x, x_dims, [d for d in x_dims if d not in y_dims and d not in out_dims])
    y, y_dims = _sum_out(b, y, y_dims, [d for d in y_dims if d not in x_dims and d not in out_dims])
    batch = [d for d in out_dims if d in x_dims and d in y_dims]
    summed = [d for d in x_dims if d in y_dims and d not in out_dims]
    x_free = [d for d in x_dims if d not in y_dims]
    y_free = [d for d in y_dims if d not in x_dims]
    if sorted(batch + x_free + y_free, key=str) != sorted(out_dims, key=str):
        raise ValueError(f"result dims {out_dims} are not batch + free dims of the operands")

    def n(labels):
        return math.prod(size[d] for d in labels)

    lead = [n(batch)] if batch else []
    xm = reshape(b, transpose(b, x, [x_dims.index(d) for d in batch + x_free + summed]), lead + [n(x_free), n(summed)])
    ym = reshape(b, transpose(b, y, [y_dims.index(d) for d in batch + summed + y_free]), lead + [n(summed), n(y_free)])
    z = b.op("rt.matmul", [xm, ym])
    z_dims = batch + x_free + y_free
    z = reshape(b, z, [size[d] for d in z_dims])
    return transpose(b, z, [z_dims.index(d) for d in out_dims])


def _sum_out(b: Builder, v: Value, dims: list, drop: list):
    if not drop:
        return v, dims
    axes = tuple(dims.index(d) for d in drop)
    return b.op("rt.reduce", [v], {"kind": "sum", "axes": axes}), [d for d in dims if d not in drop]
