"""Composite ops spelled in graph ops, shared by every importer.

Frontends meet the same composites (softmax, layer norm, GELU, batch norm, ...)
under different names; each is written once here, in a form the fusion passes
recognise. Every function takes a `Builder` and returns the result `Value`.
"""

from __future__ import annotations

import math

import numpy as np

from ..ir.core import Builder, Value


def scalar(b: Builder, value, like: Value) -> Value:
    """A rank-0 constant of `like`'s element type."""
    return b.constant(np.array(value, dtype=like.type.dtype.np_dtype))


def normalize_axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def clamp(b: Builder, x: Value, lo=None, hi=None) -> Value:
    if lo is not None:
        x = b.op("rt.max", [x, scalar(b, lo, x)])
    if hi is not None:
        x = b.op("rt.min", [x, scalar(b, hi, x)])
    return x


def relu(b: Builder, x: Value) -> Value:
    return clamp(b, x, lo=0)


def mean(b: Builder, x: Value, axes, keepdims: bool = False) -> Value:
    axes = tuple(sorted(normalize_axis(a, x.type.rank) for a in axes))
    total = b.op("rt.reduce", [x], {"kind": "sum", "axes": axes, "keepdims": keepdims})
    count = int(np.prod([x.type.shape[a] for a in axes]))
    return b.op("rt.mul", [total, scalar(b, 1.0 / count, x)])


def softmax(b: Builder, x: Value, axis: int = -1) -> Value:
    axis = normalize_axis(axis, x.type.rank)
    peak = b.op("rt.reduce", [x], {"kind": "max", "axes": (axis,), "keepdims": True})
    e = b.op("rt.exp", [b.op("rt.sub", [x, peak])])
    total = b.op("rt.reduce", [e], {"kind": "sum", "axes": (axis,), "keepdims": True})
    return b.op("rt.div", [e, total])


def log_softmax(b: Builder, x: Value, axis: int = -1) -> Value:
    axis = normalize_axis(axis, x.type.rank)
    peak = b.op("rt.reduce", [x], {"kind": "max", "axes": (axis,), "keepdims": True})
    shifted = b.op("rt.sub", [x, peak])
    total = b.op("rt.reduce", [b.op("rt.exp", [shifted])], {"kind": "sum", "axes": (axis,), "keepdims": True})
    return b.op("rt.sub", [shifted, b.op("rt.log", [total])])


def layer_norm(b: Builder, x: Value, axes, weight: Value | None, bias: Value | None, eps: float) -> Value:
    """(x - mean) / sqrt(var + eps) * weight + bias, over `axes` (the trailing ones)."""
    mu = mean(b, x, axes, keepdims=True)
    centered = b.op("rt.sub", [x, mu])
    var = mean(b, b.op("rt.mul", [centered, centered]), axes, keepdims=True)
    inv = b.op("rt.rsqrt", [b.op("rt.add", [var, scalar(b, eps, x)])])
    y = b.op("rt.mul", [centered, inv])
    if weight is not None:
        y = b.op("rt.mul", [y, weight])
    if bias is not None:
        y = b.op("rt.add", [y, bias])
    return y


def channel_vector(b: Builder, v: Value, rank: int, axis: int = 1) -> Value:
    """Reshape a per-channel vector [C] so it broadcasts along `axis` of a rank-`rank` tensor."""
    shape = tuple(v.type.shape[0] if d == axis else 1 for d in range(rank))
    return b.op("rt.reshape", [v], {"shape": shape})


def batch_norm(b: Builder, x: Value, scale: Value, bias: Value, mean_: Value, var: Value, eps: float) -> Value:
    """Inference batch norm on NC... input: (x - mean) * scale / sqrt(var + eps) + bias.

    Written as one multiply and one add of per-channel constants, so that constant
    folding leaves `x * a + c`, which folds into a preceding conv."""
    rank = x.type.rank
    inv = b.op("rt.rsqrt", [b.op("rt.add", [var, scalar(b, eps, var)])])
    a = b.op("rt.mul", [scale, inv])
    c = b.op("rt.sub", [bias, b.op("rt.mul", [mean_, a])])
    y = b.op("rt.mul", [x, channel_vector(b, a, rank)])
    return b.op("rt.add", [y, channel_vector(b, c, rank)])


def gelu(b: Builder, x: Value, approximate: str = "none") -> Value:
    half = scalar(b, 0.5, x)
    if approximate == "tanh":
        cube = b.op("rt.mul", [b.op("rt.mul", [x, x]), x])
        inner = b.op("rt.add", [x, b.op("rt.mul", [cube, scalar(b, 0.044715, x)])])
        t = b.op("rt.tanh", [b.op("rt.mul", [inner, scalar(b, math.sqrt(2 / math.pi), x)])])
    else:
        t = b.op("rt.erf", [b.op("rt.mul", [x, scalar(b, 1 / math.sqrt(2), x)])])
    return b.op("rt.mul", [b.op("rt.mul", [x, half]), b.op("rt.add", [t, scalar(b, 1.0, x)])])


def linear(b: Builder, x: Value, weight_t: Value, bias: Value | None) -> Value:
    """x @ weight_t (+ bias); `weight_t` is [in, out]."""
    y = b.op("rt.matmul", [x, weight_t]) if x.type.rank >= 2 else None
    if y is None:  # a vector input: lift to a row
        row = b.op("rt.reshape", [x], {"shape": (1, x.type.shape[0])})
        y = b.op("rt.reshape", [b.op("rt.matmul", [row, weight_t])], {"shape": (weight_t.type.shape[1],)})
    return b.op("rt.add", [y, bias]) if bias is not None else y
