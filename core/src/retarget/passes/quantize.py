"""Weight quantization: linear (matmul) layers and 1x1 convolutions with constant weights get packed
integer weights that their kernels unpack as they read them (`--quantize SCHEME`).

Schemes (`SCHEMES`, spelled as `--quantize` takes them):

    int8            8-bit weights, one scale per output channel
    int4-g32        4-bit weights, one scale per group of 32 (or 64, 128) along the reduction axis
    8da8w, 8da4w-g32  the same weights, and activations quantized to 8 bits at run time, one scale per
                    row (token); the products are summed as integers, then scaled
    ...-asym        asymmetric weights: a zero point per channel or group besides the scale

The numbers, for each output channel (or group) of a weight w, in f32:
- symmetric: scale = max|w| / (2^(bits-1) - 1), q = clip(rint(w / scale), -(2^(bits-1) - 1), 2^(bits-1) - 1);
  stored as u = q + 2^(bits-1), so that dequantization is (u - 2^(bits-1)) * scale;
- asymmetric: lo = min(w, 0), hi = max(w, 0), scale = (hi - lo) / (2^bits - 1),
  zero = clip(rint(-lo / scale), 0, 2^bits - 1), u = clip(rint(w / scale) + zero, 0, 2^bits - 1);
  dequantization is (u - zero) * scale;
- an all-zero channel or group has scale 1.
- dynamic activations (8da): per row of x, s = max|x| / 127 (1 for a zero row), xq = clip(rint(x / s), -127, 127).

The weight of a matmul x @ W ([K, N]) is stored as W^T: N rows of K values, packed along K (so a row's
words are contiguous, and a group never straddles a word: group sizes are multiples of 8). A 1x1
convolution's [O, C, 1, 1] filter is O rows of C. Values sit in 32-bit words (`rt.dequantize`, in
`ir/ops.py`, says how), because WGSL has no 8-bit storage and every backend reads words.
`retarget.testing.quant_model` is an independent numpy model of the same numbers, for tests.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InputError, closest
from ..ir.core import Builder, DenseAttr, Function, Module, Operation, Value
from ..ir.dtypes import from_numpy
from .simplify import eliminate_dead_ops

GROUP_SIZES = (32, 64, 128)


@dataclass(frozen=True)
class Scheme:
    name: str
    bits: int
    group: int | None  # None: one group per output channel
    symmetric: bool
    dynamic_activations: bool

    def group_size(self, columns: int) -> int:
        """The group size for rows of `columns` values: a multiple of the values in a word."""
        per_word = 32 // self.bits
        size = self.group if self.group is not None else columns
        return -(-min(size, columns) // per_word) * per_word


def _schemes() -> dict[str, Scheme]:
    out = {}
    for asym in (False, True):
        tail = "-asym" if asym else ""
        out[f"int8{tail}"] = Scheme(f"int8{tail}", 8, None, not asym, False)
        for g in GROUP_SIZES:
            out[f"int4-g{g}{tail}"] = Scheme(f"int4-g{g}{tail}", 4, g, not asym, False)
        out[f"8da8w{tail}"] = Scheme(f"8da8w{tail}", 8, None, not asym, True)
        for g in GROUP_SIZES:
            out[f"8da4w-g{g}{tail}"] = Scheme(f"8da4w-g{g}{tail}", 4, g, not asym, True)
    return out


SCHEMES: dict[str, Scheme] = _schemes()


def scheme(name: str) -> Scheme:
    try:
        return SCHEMES[name]
    except KeyError:
        near = closest(name, SCHEMES)
        hint = (f"did you mean {', '.join(near)}? " if near else "") + f"schemes: {', '.join(SCHEMES)}"
        raise InputError(f"unknown quantization scheme '{name}'", hint=hint) from None


# -- the numbers ----------------------------------------------------------------------------------------------


def quantize_weight(w: np.ndarray, s: Scheme) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, int]:
    """w ([rows, columns], float) -> (packed ui32 words [rows, words], f32 scales [rows, groups], f32 zero
    points or None, group size)."""
    w = np.asarray(w, dtype=np.float32)
    rows, columns = w.shape
    group = s.group_size(columns)
    groups = -(-columns // group)
    padded = np.zeros((rows, groups * group), np.float32)
    padded[:, :columns] = w
    blocks = padded.reshape(rows, groups, group)
    if s.symmetric:
        top = np.float32(2 ** (s.bits - 1) - 1)
        scale = np.abs(blocks).max(axis=2) / top
        scale[scale == 0] = 1
        q = np.clip(np.rint(blocks / scale[..., None]), -top, top)
        u, zero = q + 2 ** (s.bits - 1), None
    else:
        top = np.float32(2 ** s.bits - 1)
        lo, hi = np.minimum(blocks.min(axis=2), 0), np.maximum(blocks.max(axis=2), 0)
        scale = (hi - lo) / top
        scale[scale == 0] = 1
        zero = np.clip(np.rint(-lo / scale), 0, top).astype(np.float32)
        u = np.clip(np.rint(blocks / scale[..., None]) + zero[..., None], 0, top)
    u = u.reshape(rows, -1)[:, :columns].astype(np.uint32)
    return pack(u, s.bits), scale.astype(np.float32), zero, group


def pack(u: np.ndarray, bits: int) -> np.ndarray:
    """Unsigned `bits`-bit values [rows, columns] -> ui32 words [rows, ceil(columns / per_word)]: value c
    at bits [bits * (c % per_word), ...) of word c // per_word."""
    per_word = 32 // bits
    rows, columns = u.shape
    words = -(-columns // per_word)
    padded = np.zeros((rows, words * per_word), np.uint32)
    padded[:, :columns] = u
    lanes = padded.reshape(rows, words, per_word) << (np.arange(per_word, dtype=np.uint32) * bits)
    return np.bitwise_or.reduce(lanes, axis=2).astype(np.uint32)


# -- the pass -------------------------------------------------------------------------------------------------


def quantize_weights(module: Module, s: Scheme) -> tuple[Module, str]:
    """Every matmul with a constant 2-D float right operand, and every ungrouped 1x1 convolution with a
    constant filter, reads packed weights; with dynamic activations, matmuls (and stride-1 unpadded 1x1
    convolutions, as matmuls over pixels) also quantize their activations per row. Returns the module and
    a one-line summary (layers quantized, their weights' bytes before and after)."""
    counts = {"rt.matmul": 0, "rt.conv2d": 0}
    before = after = 0
    for fn in module.functions.values():
        replace: dict[Value, Value] = {}
        new_ops: list[Operation] = []
        for op in fn.ops:
            op.operands = [replace.get(v, v) for v in op.operands]
            out = _rewrite(fn, op, s)
            if out is None:
                new_ops.append(op)
                continue
            ops, result = out
            counts[op.name] += 1
            before += op.operands[1].type.nbytes
            after += sum(o.result.type.nbytes for o in ops if o.name == "rt.constant" and o.result.type.rank == 2)
            new_ops += ops
            replace[op.result] = result
        fn.ops = new_ops
        fn.returns = [replace.get(v, v) for v in fn.returns]
        eliminate_dead_ops(fn)
    summary = (f"{s.name}: {counts['rt.matmul']} linear layers and {counts['rt.conv2d']} 1x1 convolutions quantized, "
               f"their weights {before:,} -> {after:,} bytes" if before else
               f"{s.name}: no layer to quantize (it takes matmuls with a constant 2-D weight and 1x1 convolutions)")
    return module, summary


def _constant(v: Value) -> np.ndarray | None:
    if v.owner is None or v.owner.name != "rt.constant":
        return None
    array = v.owner.attrs["value"].array
    return array if from_numpy(array.dtype).is_float else None


class _Ops:
    """A Builder that collects ops into a list (the pass splices them in where the old op was)."""

    def __init__(self, loc):
        self.fn = Function("scratch", [])
        self.b = Builder(self.fn, loc)

    def op(self, name, operands, attrs=None) -> Value:
        return self.b.op(name, operands, attrs)

    def constant(self, array) -> Value:
        return self.b.op("rt.constant", [], {"value": DenseAttr(np.require(array, requirements="C"))})


def _rewrite(fn: Function, op: Operation, s: Scheme):
    if op.name == "rt.matmul":
        x, w = op.operands
        weight = _constant(w)
        if weight is None or weight.ndim != 2 or _constant(x) is not None:
            return None
        b = _Ops(op.loc)
        if s.dynamic_activations:
            return b.fn.ops, _dynamic_matmul(b, x, weight.T, s, x.type.dtype)
        deq = _dequantize(b, weight.T, s, w.type.dtype)
        return b.fn.ops, b.op("rt.matmul", [x, b.op("rt.transpose", [deq], {"perm": [1, 0]})])
    if op.name == "rt.conv2d":
        x, w = op.operands
        weight = _constant(w)
        if weight is None or weight.shape[2:] != (1, 1) or op.attrs.get("groups", 1) != 1:
            return None
        b = _Ops(op.loc)
        plain = (tuple(op.attrs.get("strides", (1, 1))) == (1, 1) and not any(op.attrs.get("pad", (0, 0, 0, 0)))
                 and tuple(op.attrs.get("dilations", (1, 1))) == (1, 1))
        if s.dynamic_activations and plain:
            n, c, h, wd = x.type.shape
            o = weight.shape[0]
            pixels = b.op("rt.transpose", [b.op("rt.reshape", [x], {"shape": [n, c, h * wd]})], {"perm": [0, 2, 1]})
            y = _dynamic_matmul(b, pixels, weight.reshape(o, c), s, x.type.dtype)
            y = b.op("rt.transpose", [y], {"perm": [0, 2, 1]})
            return b.fn.ops, b.op("rt.reshape", [y], {"shape": [n, o, h, wd]})
        deq = _dequantize(b, weight.reshape(weight.shape[0], -1), s, w.type.dtype, shape=list(weight.shape))
        return b.fn.ops, b.op("rt.conv2d", [x, deq], dict(op.attrs))
    return None


def _weight_operands(b: _Ops, rows: np.ndarray, s: Scheme, dt) -> tuple[list[Value], dict]:
    words, scale, zero, group = quantize_weight(rows, s)
    operands = [b.constant(words), b.constant(scale.astype(dt.np_dtype))]
    if zero is not None:
        operands.append(b.constant(zero.astype(dt.np_dtype)))
    return operands, {"bits": s.bits, "group_size": group}


def _dequantize(b: _Ops, rows: np.ndarray, s: Scheme, dt, shape=None) -> Value:
    operands, attrs = _weight_operands(b, rows, s, dt)
    return b.op("rt.dequantize", operands, {**attrs, "shape": shape or list(rows.shape)})


def _dynamic_matmul(b: _Ops, x: Value, rows: np.ndarray, s: Scheme, dt) -> Value:
    """x @ rows^T with x quantized per row: s = max|x| / 127 (1 for a zero row), xq = clip(rint(x / s))."""
    def scalar(v):
        return b.constant(np.asarray(v, dt.np_dtype))

    amax = b.op("rt.reduce", [b.op("rt.abs", [x])], {"kind": "max", "axes": [x.type.rank - 1], "keepdims": True})
    positive = b.op("rt.cmp", [amax, scalar(0)], {"predicate": "gt"})
    x_scale = b.op("rt.select", [positive, b.op("rt.div", [amax, scalar(127)]), scalar(1)])
    q = b.op("rt.round", [b.op("rt.div", [x, x_scale])])
    q = b.op("rt.min", [b.op("rt.max", [q, scalar(-127)]), scalar(127)])
    xq = b.op("rt.cast", [q], {"dtype": "i32"})
    operands, attrs = _weight_operands(b, rows, s, dt)
    return b.op("rt.quantized_matmul", [xq, x_scale, *operands], attrs)


