"""Small graphs with symbolic dimensions, and the sizes to run each at: every backend's dynamic-shape
tests and the conformance kit share them.

Each case stresses what a fixed size would hide: tails of tiles that only a run-time size leaves
(a matmul of 5 x 19 with tiles of 4 x 16), a batch of 1 where a schedule spreads the batch over
workgroups, reductions and softmax along a symbolic axis, batched matmuls whose three sizes are all
symbolic (attention), and a 1-D row of any length.

    for name in dynamic.CASES:
        module = dynamic.module(name)                 # one function "main", symbols named n, m, k, s
        for sizes in dynamic.CASES[name].sizes:
            args = dynamic.inputs(name, sizes)        # seeded, at these sizes
            expected = dynamic.reference(name, args)  # the vmvx reference's answer

`check(target, device)` does all of that for a target and a device, and names the case and sizes
that differ.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..ir import dtypes
from ..ir.core import Builder, Function, Module, TensorType, Value
from ..ir.symbolic import SymbolRange, evaluate_shape, sym

F32 = dtypes.f32
n, m, k, s = sym("n"), sym("m"), sym("k"), sym("s")


@dataclass(frozen=True)
class Case:
    args: tuple  # argument shapes (dimensions of n, m, k, s)
    build: Callable  # (builder, *args) -> result
    sizes: tuple  # dicts of symbol values to run at
    doc: str = ""


def _const(b: Builder, shape, seed: int = 3):
    return b.constant(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def _elementwise_batch(b, x):
    y = b.op("rt.mul", [b.op("rt.sigmoid", [x]), b.constant(np.float32(2))])
    return b.op("rt.add", [y, _const(b, (4, 1, 1))])


def _matmul_tails(b, x, w):
    return b.op("rt.max", [b.op("rt.matmul", [x, w]), b.constant(np.float32(0))])


def _conv_batch_image(b, x):
    y = b.op("rt.conv2d", [x, _const(b, (5, 3, 3, 3))], {"strides": (2, 2), "pad": (1, 1, 1, 1)})
    y = b.op("rt.add", [y, _const(b, (1, 5, 1, 1))])
    y = b.op("rt.min", [b.op("rt.max", [y, b.constant(np.float32(0))]), b.constant(np.float32(6))])
    return b.op("rt.max_pool2d", [y], {"kernel": (2, 2), "strides": (1, 1)})


def _softmax_seq(b, x):
    peak = b.op("rt.reduce", [x], {"kind": "max", "axes": (2,), "keepdims": True})
    e = b.op("rt.exp", [b.op("rt.sub", [x, peak])])
    return b.op("rt.div", [e, b.op("rt.reduce", [e], {"kind": "sum", "axes": (2,), "keepdims": True})])


def _long_row(b, x):
    return b.op("rt.add", [b.op("rt.mul", [x, x]), b.constant(np.float32(1))])


def _attention(b, q, kk, v):
    scores = b.op("rt.matmul", [q, b.op("rt.transpose", [kk], {"perm": (0, 2, 1)})])
    return b.op("rt.matmul", [_softmax_seq(b, scores), v])


def _shape_ops(b, x):
    """Concatenation, a slice to a symbolic limit, padding and a reshape that merges a symbol."""
    both = b.op("rt.concat", [x, b.op("rt.neg", [x])], {"axis": 0})  # [2n, 6]
    head = b.op("rt.slice", [both], {"start": (1, 0), "limit": (2 * n, 6), "stride": (1, 2)})  # [2n - 1, 3]
    padded = b.op("rt.pad", [head], {"low": (1, 0), "high": (0, 1), "value": 0.5})  # [2n, 4]
    return b.op("rt.reshape", [padded], {"shape": (n, 8)})


CASES: dict[str, Case] = {
    "elementwise_batch": Case(((n, 4, 5, 6),), _elementwise_batch, ({"n": 1}, {"n": 3}),
                              "a batch that may be 1: the schedule must not rely on it to fill workgroups"),
    "matmul_tails": Case(((m, k), (k, n)), _matmul_tails,
                         ({"m": 5, "k": 3, "n": 19}, {"m": 1, "k": 1, "n": 1}, {"m": 9, "k": 17, "n": 2}),
                         "tails of register tiles in all three sizes"),
    "conv_batch_image": Case(((n, 3, m, k),), _conv_batch_image, ({"n": 1, "m": 7, "k": 9}, {"n": 2, "m": 12, "k": 5}),
                             "a strided padded convolution whose batch and image sizes are symbolic"),
    "softmax_seq": Case(((1, s, s),), _softmax_seq, ({"s": 1}, {"s": 7}, {"s": 33}), "reductions along a symbol"),
    "long_row": Case(((s,),), _long_row, ({"s": 1}, {"s": 5}, {"s": 70}), "one row: vector chunks and a tail"),
    "attention": Case(((2, s, 8), (2, s, 8), (2, s, 8)), _attention, ({"s": 3}, {"s": 17}),
                      "batched matmuls with symbolic rows, columns and reduction"),
    "shape_ops": Case(((n, 6),), _shape_ops, ({"n": 1}, {"n": 4}), "concat, slice, pad and reshape on symbols"),
    "matmul_rows": Case(((s, 40), (40, 72)), _matmul_tails, ({"s": 3}, {"s": 150}),
                        "rows up to 4096: a GPU's register-tiled matmul, its edge tiles guarded at run time"),
    "matmul_few_rows": Case(((s, 512), (512, 1024)), _matmul_tails, ({"s": 2}, {"s": 9}),
                            "fewer rows than a register tile but work enough for several CPU workgroups"),
}

RANGES = {"n": SymbolRange(1, 64), "m": SymbolRange(1, 64), "k": SymbolRange(1, 64), "s": SymbolRange(1, 128)}
RANGE_OVERRIDES = {"matmul_rows": {"s": SymbolRange(1, 4096)}}


def module(name: str) -> Module:
    """Case `name` as a module with one function, `main`."""
    case = CASES[name]
    args = [Value(TensorType(shape, F32), None, i) for i, shape in enumerate(case.args)]
    fn = Function("main", args, arg_names=[f"x{i}" for i in range(len(args))])
    b = Builder(fn)
    ranges = {**RANGES, **RANGE_OVERRIDES.get(name, {})}
    for shape in case.args:
        for d in shape:
            for symbol in getattr(d, "symbols", ()):
                b.symbol(symbol, ranges[symbol])
    fn.returns = [case.build(b, *args)]
    return Module({"main": fn})


def inputs(name: str, sizes: dict, seed: int = 0) -> list[np.ndarray]:
    g = np.random.default_rng(seed)
    return [g.standard_normal(evaluate_shape(shape, sizes)).astype(np.float32) for shape in CASES[name].args]


def reference(name: str, args: list[np.ndarray]) -> np.ndarray:
    from ..vmvx.interpreter import run_function

    return run_function(module(name).functions["main"], args)[0]


def check(target, device: str, names=None, rtol: float = 2e-5, atol: float = 2e-5) -> None:
    """Compile each case (all, or `names`) for `target`, run it on `device` at each of its sizes and
    compare with the reference; an AssertionError names the case and the sizes."""
    import retarget

    for name in names or CASES:
        fn = retarget.load(retarget.compile(module(name), target), device=device).main
        for sizes in CASES[name].sizes:
            args = inputs(name, sizes)
            got, want = fn(*args), reference(name, args)
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=f"case {name} at {sizes}")
