"""Tiny graph-IR modules built in code, for tests and `retarget doctor`."""

from __future__ import annotations

import numpy as np

from ..ir import dtypes
from ..ir.core import Builder, Function, Module, TensorType, Value


def mlp_module(batch: int = 2, features: int = 8, hidden: int = 4, seed: int = 0):
    """y = relu(x @ w + b): a matmul, a broadcast add and an elementwise max.

    Returns (module, x, expected y)."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((features, hidden)).astype(np.float32)
    bias = rng.standard_normal(hidden).astype(np.float32)
    x = rng.standard_normal((batch, features)).astype(np.float32)
    arg = Value(TensorType((batch, features), dtypes.f32))
    fn = Function("predict", [arg], arg_names=["x"])
    b = Builder(fn)
    y = b.op("rt.add", [b.op("rt.matmul", [arg, b.constant(w)]), b.constant(bias)])
    fn.returns = [b.op("rt.max", [y, b.constant(np.float32(0))])]
    return Module({"predict": fn}), x, np.maximum(x @ w + bias, 0)
