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


def add_module(n: int = 1000, dtype: str = "f32", seed: int = 0):
    """z = x + y over `n` elements: one elementwise dispatch with three bindings. `n` is not a
    multiple of a typical workgroup, so the tail is exercised.

    Returns (module, (x, y), expected z)."""
    dt = dtypes.dtype(dtype)
    rng = np.random.default_rng(seed)
    if dt.is_float:
        x, y = (rng.standard_normal(n).astype(dt.np_dtype) for _ in range(2))
    else:
        x, y = (rng.integers(-1000, 1000, n).astype(dt.np_dtype) for _ in range(2))
    args = [Value(TensorType((n,), dt)) for _ in range(2)]
    fn = Function("main", args, arg_names=["x", "y"])
    fn.returns = [Builder(fn).op("rt.add", args)]
    return Module({"main": fn}), (x, y), x + y


def f16_rounding_module():
    """z = f32(f16(x * y)) over 65536 values: a value rounded to f16 inside a kernel whose buffers are all f32 (what a
    target without 16-bit types computes in f32 arithmetic). x holds every f16 value and the midpoints to the next
    one up, and the edges: past 65504, f32 subnormals, -0.

    Returns (module, (x, y), expected z)."""
    args = [Value(TensorType((1 << 16,), dtypes.f32)) for _ in range(2)]
    fn = Function("main", args, arg_names=["x", "y"])
    b = Builder(fn)
    half = b.op("rt.cast", [b.op("rt.mul", args)], {"dtype": "f16"})
    fn.returns = [b.op("rt.cast", [half], {"dtype": "f32"})]
    every = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    with np.errstate(all="ignore"):
        mid = (every.astype(np.float32) + np.nextafter(every, np.float16(np.inf)).astype(np.float32)) / 2
        x = np.where(np.arange(1 << 16) % 2 == 0, every.astype(np.float32), mid).astype(np.float32)
        x[:8] = [65519.99, 65520.0, -70000.0, 1e-8, -1e-8, -0.0, 1e-40, 2.0**-25]
        expected = x.astype(np.float16).astype(np.float32)
    return Module({"main": fn}), (x, np.ones_like(x)), expected


def chain_module(batch: int = 4, features: int = 16, hidden: int = 8, outputs: int = 4, seed: int = 0):
    """y = (x @ w1) @ w2, every operand an argument: two dispatches, the second reading what the
    first wrote, so it is wrong unless the barrier between them is honoured.

    Returns (module, (x, w1, w2), expected y)."""
    rng = np.random.default_rng(seed)
    shapes = [(batch, features), (features, hidden), (hidden, outputs)]
    x, w1, w2 = (rng.standard_normal(s).astype(np.float32) for s in shapes)
    args = [Value(TensorType(s, dtypes.f32)) for s in shapes]
    fn = Function("main", args, arg_names=["x", "w1", "w2"])
    b = Builder(fn)
    fn.returns = [b.op("rt.matmul", [b.op("rt.matmul", args[:2]), args[2]])]
    return Module({"main": fn}), (x, w1, w2), (x.astype(np.float64) @ w1 @ w2).astype(np.float32)


def wide_module(count: int = 40, seed: int = 0):
    """concat(x_0, ..., x_{count-1}, x_0 + ... + x_{count-1}) of `count` arguments: more buffers than one
    kernel may bind (a Vulkan device may give 128 bytes of push constants, an element base per buffer), so
    the compiler must split both the sum's fusion and the concat.

    Returns (module, xs, expected)."""
    rng = np.random.default_rng(seed)
    xs = [rng.standard_normal((3, 5)).astype(np.float32) for _ in range(count)]
    args = [Value(TensorType((3, 5), dtypes.f32)) for _ in range(count)]
    fn = Function("main", args, arg_names=[f"x{i}" for i in range(count)])
    b = Builder(fn)
    total = args[0]
    for arg in args[1:]:
        total = b.op("rt.add", [total, arg])
    fn.returns = [b.op("rt.concat", [*args, total], {"axis": 0})]
    expected = np.concatenate([*xs, np.sum(np.stack(xs).astype(np.float64), 0).astype(np.float32)])
    return Module({"main": fn}), tuple(xs), expected


def _mlp():
    module, x, expected = mlp_module()
    return module, (x,), expected


# The reference graphs of the conformance suite: name -> () -> (module, inputs, expected outputs).
REFERENCE_GRAPHS = {
    "add_f32": add_module,
    "add_i32": lambda: add_module(dtype="i32"),
    "chain": chain_module,
    "mlp": _mlp,
    "wide": wide_module,
}
