"""Composite ops spelled in graph ops, shared by every importer.

Frontends meet the same composites (softmax, layer norm, GELU, batch norm, ...)
under different names; each is written once here, in a form the fusion passes
recognise. Every function takes a `Builder` and returns the result `Value`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from ..errors import InputError, UnsupportedOpError
from ..ir.core import Builder, Value
from ..ir.dtypes import DType
from ..ir.ops import bitcast_refusal
from ..ir.symbolic import FloorDiv, Min, Sym, bounds, sym


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


def shift(b: Builder, x: Value, amount, left: bool) -> Value:
    """x shifted by `amount` bits (a number or a tensor), as torch and ONNX shift. A right shift is arithmetic for
    signed x; a left shift wraps, so it is a multiplication by 2^amount in x's type. An amount outside [0, bits)
    (past the width, or negative, as ONNX's BitShift defines it) leaves 0, or for a right shift of signed x its
    sign."""
    dtype, bits = x.type.dtype, x.type.dtype.bits
    signed = dtype.kind == "int"
    if not isinstance(amount, Value):
        amount = int(amount)
        inside = 0 <= amount < bits
        if left:
            factor = np.array(1 << amount if inside else 0, np.uint64).astype(dtype.np_dtype)  # wraps
            return b.op("rt.mul", [x, b.constant(factor)])
        if not inside and not signed:
            return b.op("rt.mul", [x, scalar(b, 0, x)])
        return b.op("rt.shr", [x, scalar(b, amount if inside else bits - 1, x)])
    amount = b.op("rt.cast", [amount], {"dtype": dtype.name}) if amount.type.dtype != dtype else amount
    past = b.op("rt.cmp", [amount, scalar(b, bits, amount)], {"predicate": "ge"})
    if signed:
        past = b.op("rt.or", [past, b.op("rt.cmp", [amount, scalar(b, 0, amount)], {"predicate": "lt"})])
    keeps_sign = signed and not left  # past the width: shifted by bits - 1, which leaves the sign
    inside = b.op("rt.select", [past, scalar(b, bits - 1 if keeps_sign else 0, amount), amount])
    if left:  # x times 2^amount, the power gathered from a table of `bits` (no integer pow on every target)
        powers = np.array([1 << i for i in range(bits)], np.uint64).astype(dtype.np_dtype)  # wraps
        index = b.op("rt.cast", [inside], {"dtype": "i32"})
        shifted = b.op("rt.mul", [x, b.op("rt.gather", [b.constant(powers), index], {"axis": 0})])
    else:
        shifted = b.op("rt.shr", [x, inside])
    return shifted if keeps_sign else b.op("rt.select", [past, scalar(b, 0, x), shifted])


def floor_div(b: Builder, x: Value, y: Value) -> Value:
    """x // y of integers, rounded toward minus infinity as Python's `//` and torch's floor division round: the
    truncating quotient (`rt.div`), less one where the remainder is nonzero and its sign differs from y's."""
    q = b.op("rt.div", [x, y])
    if q.type.dtype.kind in ("uint", "bool"):
        return q
    fix = _sign_differs(b, b.op("rt.sub", [x, b.op("rt.mul", [q, y])]), y)
    return b.op("rt.sub", [q, b.op("rt.cast", [fix], {"dtype": q.type.dtype.name})])


def _sign_differs(b: Builder, r: Value, y: Value) -> Value:
    """Where a truncating remainder `r` of a division by `y` is nonzero and of the other sign than y: where the
    truncating quotient and remainder differ from the flooring ones."""
    zero = scalar(b, 0, r)
    differ = b.op("rt.cmp", [b.op("rt.cmp", [r, zero], {"predicate": "lt"}),
                             b.op("rt.cmp", [y, zero], {"predicate": "lt"})], {"predicate": "ne"})
    return b.op("rt.and", [b.op("rt.cmp", [r, zero], {"predicate": "ne"}), differ])


def size_value(b: Builder, d, dtype: str = "i64") -> Value:
    """A dimension (an int, or a `Sym` known only at run time) as a rank-0 tensor of `dtype`, for models that use a
    size as data (`x * x.shape[0]`, a roll by a shift modulo the size). No graph op reads a size, so each symbol is
    counted as the sum of a broadcast of ones along it (in i32), and the Sym's polynomial, floor divisions and
    minimums are evaluated on those counts in i64."""
    one = b.constant(np.array(1, np.int32))  # one size is below 2^31 on every target; their products may not be

    def atom(a) -> Value:
        if isinstance(a, str):
            ones = b.op("rt.broadcast", [one], {"shape": (sym(a),)})
            count = b.op("rt.reduce", [ones], {"kind": "sum", "axes": (0,), "keepdims": False})
            return b.op("rt.cast", [count], {"dtype": "i64"})
        if isinstance(a, FloorDiv):
            return floor_div(b, value(a.num), b.constant(np.array(a.den, np.int64)))
        if isinstance(a, Min):
            return b.op("rt.min", [value(a.a), value(a.b)])
        raise TypeError(f"unknown atom {a!r} of a symbolic dimension")

    def value(x) -> Value:
        if not isinstance(x, Sym):
            return b.constant(np.array(int(x), np.int64))
        total = None
        for monomial, coefficient in x.terms:
            term = b.constant(np.array(coefficient, np.int64))
            for a in monomial:
                term = b.op("rt.mul", [term, atom(a)])
            total = term if total is None else b.op("rt.add", [total, term])
        return total

    out = value(d)
    return out if dtype == "i64" else b.op("rt.cast", [out], {"dtype": dtype})


def sizes_value(b: Builder, dims: np.ndarray, dtype: str = "i64") -> Value:
    """An array of dimensions (ints and `Sym`s, as a shape computed from Shape ops holds them) as a tensor of
    `dtype` of the same shape: `size_value` of each, joined."""
    dims = np.asarray(dims, dtype=object)
    parts = [b.op("rt.reshape", [size_value(b, d, dtype)], {"shape": (1,)}) for d in dims.reshape(-1)]
    flat = parts[0] if len(parts) == 1 else b.op("rt.concat", parts, {"axis": 0})
    return b.op("rt.reshape", [flat], {"shape": dims.shape})


def floor_mod(b: Builder, x: Value, y: Value) -> Value:
    """x mod y with the sign of y, as Python's `%`, torch's `remainder` and ONNX's Mod (fmod=0) take it: the
    truncating remainder (`rt.rem`, exact), plus y where it is nonzero and its sign differs from y's."""
    r = b.op("rt.rem", [x, y])
    if r.type.dtype.kind in ("uint", "bool"):
        return r
    return b.op("rt.select", [_sign_differs(b, r, y), b.op("rt.add", [r, y]), r])


def bitcast(b: Builder, x: Value, dtype: DType) -> Value:
    """`x`'s bits read as `dtype` (`rt.bitcast`, a view); an UnsupportedOpError says why they cannot be."""
    if x.type.dtype == dtype:
        return x
    why = bitcast_refusal(x.type.dtype, dtype)
    if why is not None:
        raise UnsupportedOpError(f"cannot bitcast {x.type} to {dtype}: {why}",
                                 hint="bitcast to a type of the same width (f32 <-> i32, f16 <-> i16), or Cast to "
                                      "convert the values")
    return b.op("rt.bitcast", [x], {"dtype": dtype.name})


HALF_FLOATS = ("f16", "bf16")


def widen(b: Builder, x: Value) -> Value:
    """`x` in f32 where it is a half float: a sum of 16-bit floats overflows (f16 above 65504) or loses digits, so
    statistics are taken in f32 and rounded once, as torch (its accumulate type) and ONNX (`stash_type`) take them."""
    return b.op("rt.cast", [x], {"dtype": "f32"}) if x.type.dtype.name in HALF_FLOATS else x


def narrow_to(b: Builder, y: Value, like: Value) -> Value:
    """`y` in the element type of `like` (undoes `widen`)."""
    return y if y.type.dtype == like.type.dtype else b.op("rt.cast", [y], {"dtype": like.type.dtype.name})


def mean(b: Builder, x: Value, axes, keepdims: bool = False) -> Value:
    """The mean over `axes`, in x's type; a half float's sum is taken and divided in f32 (`widen`)."""
    axes = tuple(sorted(normalize_axis(a, x.type.rank) for a in axes))
    wide = widen(b, x)
    total = b.op("rt.reduce", [wide], {"kind": "sum", "axes": axes, "keepdims": keepdims})
    count = math.prod(x.type.shape[a] for a in axes)
    if isinstance(count, Sym):  # a size known at run time
        return narrow_to(b, b.op("rt.div", [total, size_value(b, count, wide.type.dtype.name)]), x)
    return narrow_to(b, b.op("rt.mul", [total, scalar(b, 1.0 / count, wide)]), x)


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


def normalized(b: Builder, x: Value, axes, eps: float, compute: str | None = None) -> Value:
    """(x - mean) / sqrt(var + eps) over `axes`, with the biased variance, computed in the float type `compute`
    (x's own by default), which the result has. x is cast once for each of its two reads, so that each cast fuses
    into the kernel that reads it rather than writing a converted copy of x."""
    def read():
        return x if compute in (None, x.type.dtype.name) else b.op("rt.cast", [x], {"dtype": compute})

    mu = mean(b, read(), axes, keepdims=True)
    centered = b.op("rt.sub", [read(), mu])
    var = mean(b, b.op("rt.mul", [centered, centered]), axes, keepdims=True)
    inv = b.op("rt.rsqrt", [b.op("rt.add", [var, scalar(b, eps, var)])])
    return b.op("rt.mul", [centered, inv])


def layer_norm(b: Builder, x: Value, axes, weight: Value | None, bias: Value | None, eps: float) -> Value:
    """(x - mean) / sqrt(var + eps) * weight + bias, over `axes` (the trailing ones); a half float computes in f32
    and is rounded once (`widen`)."""
    y = normalized(b, x, axes, eps, _statistics_type(x))
    if weight is not None:
        y = b.op("rt.mul", [y, widen(b, weight)])
    if bias is not None:
        y = b.op("rt.add", [y, widen(b, bias)])
    return narrow_to(b, y, x)


def rms_norm(b: Builder, x: Value, axes, weight: Value | None, eps: float) -> Value:
    """x / sqrt(mean(x^2) + eps) * weight over `axes` (the trailing ones), without centring; a half float
    computes in f32 and is rounded once (`widen`), as ONNX's stash_type and torch's accumulate type say."""
    wide = widen(b, x)
    power = mean(b, b.op("rt.mul", [wide, wide]), axes, keepdims=True)
    y = b.op("rt.mul", [wide, b.op("rt.rsqrt", [b.op("rt.add", [power, scalar(b, eps, power)])])])
    if weight is not None:
        y = b.op("rt.mul", [y, widen(b, weight)])
    return narrow_to(b, y, x)


def swish(b: Builder, x: Value, alpha: float = 1.0) -> Value:
    """x * sigmoid(alpha * x)."""
    inner = x if alpha == 1.0 else b.op("rt.mul", [x, scalar(b, alpha, x)])
    return b.op("rt.mul", [x, b.op("rt.sigmoid", [inner])])


def rotary_embedding(b: Builder, x: Value, cos: Value, sin: Value, interleaved: bool, rotary_dim: int = 0) -> Value:
    """Rotary position embedding of x [batch, heads, seq, head_size] by cos and sin [batch, seq, rotary_dim / 2]:
    the first `rotary_dim` channels of each head (all of them for 0) taken as pairs (x1, x2), the halves, or
    neighbours where `interleaved`, and turned into (x1 cos - x2 sin, x1 sin + x2 cos); the rest pass."""
    batch, heads, seq, head = x.type.shape
    rotary_dim = rotary_dim or head
    half = rotary_dim // 2
    if cos.type.shape[-1] != half or sin.type.shape[-1] != half:
        raise UnsupportedOpError(f"rotary embedding: the cos and sin caches end in {cos.type.shape[-1]} and "
                                 f"{sin.type.shape[-1]}, where rotary_dim / 2 is {half}",
                                 hint="give caches of rotary_dim / 2 columns, or set rotary_embedding_dim to twice "
                                      "theirs")
    cos, sin = (b.op("rt.reshape", [c], {"shape": (c.type.shape[0], 1, seq, half)}) for c in (cos, sin))
    rotated = slice_axis(b, x, 3, 0, rotary_dim)
    if interleaved:
        x1, x2 = slice_axis(b, rotated, 3, 0, rotary_dim, 2), slice_axis(b, rotated, 3, 1, rotary_dim, 2)
    else:
        x1, x2 = slice_axis(b, rotated, 3, 0, half), slice_axis(b, rotated, 3, half, rotary_dim)

    def mul(u, v):
        return b.op("rt.mul", [u, v])

    real = b.op("rt.sub", [mul(x1, cos), mul(x2, sin)])
    imag = b.op("rt.add", [mul(x1, sin), mul(x2, cos)])
    if interleaved:  # (real, imag) pairs side by side again
        pairs = [b.op("rt.reshape", [v], {"shape": (batch, heads, seq, half, 1)}) for v in (real, imag)]
        y = b.op("rt.reshape", [b.op("rt.concat", pairs, {"axis": 4})], {"shape": (batch, heads, seq, rotary_dim)})
    else:
        y = b.op("rt.concat", [real, imag], {"axis": 3})
    if rotary_dim < head:
        y = b.op("rt.concat", [y, slice_axis(b, x, 3, rotary_dim, head)], {"axis": 3})
    return y


def channel_vector(b: Builder, v: Value, rank: int, axis: int = 1) -> Value:
    """Reshape a per-channel vector [C] so it broadcasts along `axis` of a rank-`rank` tensor."""
    shape = tuple(v.type.shape[0] if d == axis else 1 for d in range(rank))
    return b.op("rt.reshape", [v], {"shape": shape})


def batch_norm(b: Builder, x: Value, scale: Value, bias: Value, mean_: Value, var: Value, eps: float,
               per_channel: bool = True) -> Value:
    """Inference batch norm on NC... input: (x - mean) * scale / sqrt(var + eps) + bias.

    Written as one multiply and one add of per-channel constants, so that constant
    folding leaves `x * a + c`, which folds into a preceding conv. Without `per_channel`, the
    statistics have the shape of one sample ([C, D1, ...], ONNX's BatchNormalization-7 `spatial=0`)."""
    rank = x.type.rank
    inv = b.op("rt.rsqrt", [b.op("rt.add", [var, scalar(b, eps, var)])])
    a = b.op("rt.mul", [scale, inv])
    c = b.op("rt.sub", [bias, b.op("rt.mul", [mean_, a])])
    if per_channel:
        a, c = channel_vector(b, a, rank), channel_vector(b, c, rank)
    return b.op("rt.add", [b.op("rt.mul", [x, a]), c])


def _statistics_type(x: Value) -> str | None:
    """f32 for half-precision x, whose statistics over many elements lose too much in f16; else x's own."""
    return "f32" if x.type.dtype.name in HALF_FLOATS else None


def _affine(b: Builder, y: Value, weight: Value | None, bias: Value | None, shape, dtype) -> Value:
    """y * weight + bias (either may be None), the per-channel vectors reshaped to `shape` to broadcast against y;
    then rounded to `dtype` once."""
    for v, op in ((weight, "rt.mul"), (bias, "rt.add")):
        if v is not None:
            if v.type.dtype != y.type.dtype:
                v = b.op("rt.cast", [v], {"dtype": y.type.dtype.name})
            y = b.op(op, [y, b.op("rt.reshape", [v], {"shape": tuple(shape)})])
    return y if y.type.dtype == dtype else b.op("rt.cast", [y], {"dtype": dtype.name})


def group_norm(b: Builder, x: Value, groups: int, weight: Value | None, bias: Value | None, eps: float) -> Value:
    """Group norm of NC... input: each sample's channels in `groups` groups of C / groups, each normalized over
    its channels and positions, then a per-channel weight and bias. Instance norm is groups = C. The weight and
    bias apply in the grouped layout, so that they fuse with the normalization (a reshape between would not)."""
    n, c, *spatial = x.type.shape
    grouped = b.op("rt.reshape", [x], {"shape": (n, groups, c // groups, *spatial)})
    y = normalized(b, grouped, tuple(range(2, grouped.type.rank)), eps, _statistics_type(x))
    y = _affine(b, y, weight, bias, (groups, c // groups) + (1,) * len(spatial), x.type.dtype)
    return b.op("rt.reshape", [y], {"shape": x.type.shape})


def batch_stats_norm(b: Builder, x: Value, weight: Value | None, bias: Value | None, eps: float) -> Value:
    """Batch norm of NC... input by the batch's own statistics (training mode): each channel normalized over every
    sample and position, then a per-channel weight and bias."""
    y = normalized(b, x, (0, *range(2, x.type.rank)), eps, _statistics_type(x))
    return _affine(b, y, weight, bias, (x.type.shape[1],) + (1,) * (x.type.rank - 2), x.type.dtype)


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


def leaky_relu(b: Builder, x: Value, slope: float = 0.01) -> Value:
    """max(x, 0) + slope * min(x, 0)."""
    zero = scalar(b, 0, x)
    neg = b.op("rt.mul", [b.op("rt.min", [x, zero]), scalar(b, slope, x)])
    return b.op("rt.add", [b.op("rt.max", [x, zero]), neg])


def hard_sigmoid(b: Builder, x: Value, alpha: float = 0.2, beta: float = 0.5) -> Value:
    """clamp(alpha * x + beta, 0, 1); torch's hardsigmoid is alpha=1/6, beta=0.5."""
    y = b.op("rt.add", [b.op("rt.mul", [x, scalar(b, alpha, x)]), scalar(b, beta, x)])
    return clamp(b, y, 0, 1)


def thresholded_relu(b: Builder, x: Value, alpha: float = 1.0) -> Value:
    """x where x > alpha, else 0."""
    above = b.op("rt.cmp", [x, scalar(b, alpha, x)], {"predicate": "gt"})
    return b.op("rt.select", [above, x, scalar(b, 0, x)])


def softsign(b: Builder, x: Value) -> Value:
    """x / (1 + |x|)."""
    return b.op("rt.div", [x, b.op("rt.add", [b.op("rt.abs", [x]), scalar(b, 1, x)])])


def elu(b: Builder, x: Value, alpha: float = 1.0) -> Value:
    """x for x > 0, alpha * (exp(x) - 1) otherwise."""
    zero = scalar(b, 0, x)
    neg = b.op("rt.mul", [b.op("rt.expm1", [b.op("rt.min", [x, zero])]), scalar(b, alpha, x)])
    return b.op("rt.select", [b.op("rt.cmp", [x, zero], {"predicate": "gt"}), x, neg])


def celu(b: Builder, x: Value, alpha: float = 1.0) -> Value:
    """x for x > 0, alpha * (exp(x / alpha) - 1) otherwise."""
    zero = scalar(b, 0, x)
    inner = b.op("rt.div", [b.op("rt.min", [x, zero]), scalar(b, alpha, x)])
    neg = b.op("rt.mul", [b.op("rt.expm1", [inner]), scalar(b, alpha, x)])
    return b.op("rt.select", [b.op("rt.cmp", [x, zero], {"predicate": "gt"}), x, neg])


def softplus(b: Builder, x: Value) -> Value:
    """log(1 + exp(x)) as max(x, 0) + log1p(exp(-|x|)): no overflow for large x, no loss for large -x."""
    tail = b.op("rt.log1p", [b.op("rt.exp", [b.op("rt.neg", [b.op("rt.abs", [x])])])])
    return b.op("rt.add", [relu(b, x), tail])


def mish(b: Builder, x: Value) -> Value:
    """x * tanh(softplus(x))."""
    return b.op("rt.mul", [x, b.op("rt.tanh", [softplus(b, x)])])


def _odd(b: Builder, x: Value, magnitude: Value) -> Value:
    """`magnitude` (f(|x|) of an odd f) with x's sign: f(x)."""
    negative = b.op("rt.cmp", [x, scalar(b, 0, x)], {"predicate": "lt"})
    return b.op("rt.select", [negative, b.op("rt.neg", [magnitude]), magnitude])


def _past_sqrt_eps(x: Value) -> float:
    """1 / sqrt(eps) of x's float type: above it x * x + 1 rounds to x * x, and x * x may overflow (in f16 from
    256), so asinh and acosh take log(2x) there."""
    import ml_dtypes

    return float(1 / np.sqrt(float(ml_dtypes.finfo(x.type.dtype.np_dtype).eps)))


def _sqrt_one_minus_square(b: Builder, x: Value) -> Value:
    """sqrt(1 - x * x), as sqrt((1 - x) * (1 + x)): exact factors near |x| = 1, where 1 - x * x cancels."""
    one = scalar(b, 1, x)
    return b.op("rt.sqrt", [b.op("rt.mul", [b.op("rt.sub", [one, x]), b.op("rt.add", [one, x])])])


def asin(b: Builder, x: Value) -> Value:
    """atan2(x, sqrt(1 - x^2)): exact at +-1 (pi / 2), NaN past them."""
    return b.op("rt.atan2", [x, _sqrt_one_minus_square(b, x)])


def acos(b: Builder, x: Value) -> Value:
    """atan2(sqrt(1 - x^2), x): exact at 1 (0) and -1 (pi), NaN past them."""
    return b.op("rt.atan2", [_sqrt_one_minus_square(b, x), x])


def asinh(b: Builder, x: Value) -> Value:
    """sign(x) * asinh(|x|), with asinh(a) = log1p(a + a^2 / (1 + sqrt(1 + a^2))) (no cancellation near 0), and
    log(a) + log(2) past 1 / sqrt(eps), where a^2 would overflow."""
    a = b.op("rt.abs", [x])
    one = scalar(b, 1, x)
    square = b.op("rt.mul", [a, a])
    near = b.op("rt.log1p", [b.op("rt.add", [a, b.op("rt.div", [square, b.op("rt.add", [
        one, b.op("rt.sqrt", [b.op("rt.add", [one, square])])])])])])
    far = b.op("rt.add", [b.op("rt.log", [a]), scalar(b, math.log(2), x)])
    large = b.op("rt.cmp", [a, scalar(b, _past_sqrt_eps(x), x)], {"predicate": "gt"})
    return _odd(b, x, b.op("rt.select", [large, far, near]))


def acosh(b: Builder, x: Value) -> Value:
    """log1p(t + sqrt(t * (t + 2))) with t = x - 1 (exact, so acosh(1) is 0 and values near 1 keep their digits),
    and log(x) + log(2) past 1 / sqrt(eps) in magnitude, where t * (t + 2) would overflow (below -1 / sqrt(eps)
    the log of a negative x gives the NaN). NaN below 1."""
    t = b.op("rt.sub", [x, scalar(b, 1, x)])
    root = b.op("rt.sqrt", [b.op("rt.mul", [t, b.op("rt.add", [t, scalar(b, 2, x)])])])
    near = b.op("rt.log1p", [b.op("rt.add", [t, root])])
    far = b.op("rt.add", [b.op("rt.log", [x]), scalar(b, math.log(2), x)])
    large = b.op("rt.cmp", [b.op("rt.abs", [x]), scalar(b, _past_sqrt_eps(x), x)], {"predicate": "gt"})
    return b.op("rt.select", [large, far, near])


def atanh(b: Builder, x: Value) -> Value:
    """sign(x) * log1p(2a / (1 - a)) / 2 with a = |x|: 1 - a is exact near 1, so the result keeps its digits
    there (log1p of a sum that cancels, as for x near -1 in the unsigned form, would not); +-inf at +-1."""
    a = b.op("rt.abs", [x])
    ratio = b.op("rt.div", [b.op("rt.add", [a, a]), b.op("rt.sub", [scalar(b, 1, x), a])])
    return _odd(b, x, b.op("rt.mul", [b.op("rt.log1p", [ratio]), scalar(b, 0.5, x)]))


def _half_exp(b: Builder, a: Value) -> Value:
    """exp(a) / 2, finite wherever it is: exp(a) * 0.5 until exp(a) itself would overflow, then exp(a - log 2)
    (whose argument's rounding costs a few ulps, there only: in f32 from 87.7 to 89.4, where cosh is finite). Not
    h * h / 2 with h = exp(a / 2): a backend that reassociates float products (llvm-cpu does) may compute h * h
    first, or fold it into exp(a)."""
    import ml_dtypes

    limit = math.log(float(ml_dtypes.finfo(a.type.dtype.np_dtype).max)) - 1
    direct = b.op("rt.mul", [b.op("rt.exp", [a]), scalar(b, 0.5, a)])
    shifted = b.op("rt.exp", [b.op("rt.sub", [a, scalar(b, math.log(2), a)])])
    return b.op("rt.select", [b.op("rt.cmp", [a, scalar(b, limit, a)], {"predicate": "gt"}), shifted, direct])


def cosh(b: Builder, x: Value) -> Value:
    """exp(|x|) / 2 + exp(-|x|) / 2, finite wherever cosh is (`_half_exp`)."""
    a = b.op("rt.abs", [x])
    return b.op("rt.add", [_half_exp(b, a), b.op("rt.mul", [b.op("rt.exp", [b.op("rt.neg", [a])]), scalar(b, 0.5, a)])])


def sinh(b: Builder, x: Value) -> Value:
    """sign(x) * sinh(|x|): below 1, (u + u / (u + 1)) / 2 with u = expm1(|x|), which does not cancel near 0;
    from 1, exp(|x|) / 2 - exp(-|x|) / 2 (`_half_exp`)."""
    a = b.op("rt.abs", [x])
    u = b.op("rt.expm1", [a])
    half = scalar(b, 0.5, x)
    near = b.op("rt.mul", [b.op("rt.add", [u, b.op("rt.div", [u, b.op("rt.add", [u, scalar(b, 1, x)])])]), half])
    far = b.op("rt.sub", [_half_exp(b, a), b.op("rt.mul", [b.op("rt.exp", [b.op("rt.neg", [a])]), half])])
    small = b.op("rt.cmp", [a, scalar(b, 1, x)], {"predicate": "lt"})
    return _odd(b, x, b.op("rt.select", [small, near, far]))


def trunc(b: Builder, x: Value) -> Value:
    """x rounded toward zero: ceil below 0, floor above, so that -0.5 gives -0.0 as C's trunc does; integers as
    they are."""
    if not x.type.dtype.is_float:
        return x
    negative = b.op("rt.cmp", [x, scalar(b, 0, x)], {"predicate": "lt"})
    return b.op("rt.select", [negative, b.op("rt.ceil", [x]), b.op("rt.floor", [x])])


def log_base(b: Builder, x: Value, base: int) -> Value:
    """log(x) / log(base) (log2, log10), exact where x is a power of the base: there log(x) / log(base) may round
    to 2.9999998 for 3, which a floor or a comparison of it would get wrong, so where base^round(y) equals x
    the result is round(y). Not among subnormals, where a power rounds to a neighbour far from it."""
    import ml_dtypes

    y = b.op("rt.mul", [b.op("rt.log", [x]), scalar(b, 1 / math.log(base), x)])
    whole = b.op("rt.round", [y])
    exact = b.op("rt.cmp", [b.op("rt.pow", [scalar(b, base, x), whole]), x], {"predicate": "eq"})
    normal = b.op("rt.cmp", [x, scalar(b, float(ml_dtypes.finfo(x.type.dtype.np_dtype).tiny), x)], {"predicate": "ge"})
    return b.op("rt.select", [b.op("rt.and", [exact, normal]), whole, y])


def hypot(b: Builder, x: Value, y: Value) -> Value:
    """sqrt(x^2 + y^2) without overflow or underflow, as C's hypot: m * sqrt(1 + (s / m)^2) with m the larger
    magnitude and s the smaller (0 where m is), inf where either is inf, even against a NaN."""
    ax, ay = b.op("rt.abs", [x]), b.op("rt.abs", [y])
    large, small = b.op("rt.max", [ax, ay]), b.op("rt.min", [ax, ay])
    zero = scalar(b, 0, large)
    ratio = b.op("rt.select", [b.op("rt.cmp", [large, zero], {"predicate": "eq"}), zero,
                               b.op("rt.div", [small, large])])
    root = b.op("rt.sqrt", [b.op("rt.add", [scalar(b, 1, ratio), b.op("rt.mul", [ratio, ratio])])])
    inf = scalar(b, math.inf, large)
    infinite = b.op("rt.or", [b.op("rt.cmp", [ax, inf], {"predicate": "eq"}),
                              b.op("rt.cmp", [ay, inf], {"predicate": "eq"})])
    return b.op("rt.select", [infinite, inf, b.op("rt.mul", [large, root])])


def copysign(b: Builder, x: Value, sign: Value) -> Value:
    """|x| with the sign of `sign`, -0.0's included (its reciprocal is -inf). A NaN's sign bit cannot be read
    without a bit cast, which no graph op does: a NaN `sign` gives |x|."""
    magnitude = b.op("rt.abs", [x])
    zero = scalar(b, 0, sign)
    negative = b.op("rt.or", [b.op("rt.cmp", [sign, zero], {"predicate": "lt"}),
                              b.op("rt.cmp", [b.op("rt.reciprocal", [sign]), zero], {"predicate": "lt"})])
    return b.op("rt.select", [negative, b.op("rt.neg", [magnitude]), magnitude])


def _polynomial(b: Builder, t: Value, coefficients) -> Value:
    """sum(c_k t^k) by Horner's rule, `coefficients` from the highest power down."""
    acc = scalar(b, coefficients[0], t)
    for c in coefficients[1:]:
        acc = b.op("rt.add", [b.op("rt.mul", [acc, t]), scalar(b, c, t)])
    return acc


def _in_f32(b: Builder, x: Value, f) -> Value:
    """f(x) computed in f32 where x is a half float (as torch computes its special functions), else in x's type."""
    return narrow_to(b, f(widen(b, x)), x)


# erfinv(x) / x as polynomials (highest power first) of w - 2.5 where w = -log(1 - x^2) < 5, and of sqrt(w) - 3
# past that: M. Giles' form ("Approximating the erfinv function", GPU Computing Gems Jade, 2011), refitted for
# relative error at Chebyshev nodes against mpmath's erfinv.
_ERFINV_CENTRAL = (-8.94141408e-09, 2.32648002e-08, 4.68266974e-07, -3.46309307e-06, -4.97306967e-06,
                   2.18345887e-04, -1.25272523e-03, -4.17738847e-03, 2.46640278e-01, 1.50140936e+00)
_ERFINV_TAIL = (1.24163012e-04, -3.17256905e-04, -6.83708592e-05, 1.49434390e-03, -3.59180378e-03, 5.68355799e-03,
                -7.63836193e-03, 9.44567474e-03, 1.00167503e+00, 2.83297679e+00)
_ERFINV_FAR = (-1.29130608e-06, 5.17299985e-06, -1.93599282e-05, 7.55122310e-05, -2.15153646e-04, -1.38608573e-04,
               1.01030048e+00, 4.84990640e+00)  # in sqrt(w) - 5, for w >= 16: within 1 - 6e-8 of +-1, only f64 there


def erfinv(b: Builder, x: Value) -> Value:
    """The inverse error function: +-inf at +-1, NaN past them. In f32 (half floats computed in f32) within 2e-7
    relative (about 3 ulps) of the exact value over [-1, 1], from polynomials in w = -log((1 - x)(1 + x))
    (`_ERFINV_CENTRAL`, `_ERFINV_TAIL`). f64 adds two Newton steps on erf, to about 1e-15 relative, where
    |x| < 1 - 1e-9; closer to +-1 a step would make erf's rounding the error, so there the polynomials' 2e-9
    stays (`_ERFINV_FAR` past f32's last value below 1)."""
    def compute(x):
        one = scalar(b, 1, x)
        w = b.op("rt.neg", [b.op("rt.log", [b.op("rt.mul", [b.op("rt.sub", [one, x]), b.op("rt.add", [one, x])])])])
        central = _polynomial(b, b.op("rt.sub", [w, scalar(b, 2.5, w)]), _ERFINV_CENTRAL)
        tail = _polynomial(b, b.op("rt.sub", [b.op("rt.sqrt", [w]), scalar(b, 3, w)]), _ERFINV_TAIL)
        if x.type.dtype.name == "f64":
            far = _polynomial(b, b.op("rt.sub", [b.op("rt.sqrt", [w]), scalar(b, 5, w)]), _ERFINV_FAR)
            tail = b.op("rt.select", [b.op("rt.cmp", [w, scalar(b, 16, w)], {"predicate": "lt"}), tail, far])
        near = b.op("rt.cmp", [w, scalar(b, 5, w)], {"predicate": "lt"})
        y = b.op("rt.mul", [b.op("rt.select", [near, central, tail]), x])
        if x.type.dtype.name == "f64":
            refine = b.op("rt.cmp", [w, scalar(b, 20, w)], {"predicate": "lt"})
            for _ in range(2):
                slope = b.op("rt.mul", [b.op("rt.exp", [b.op("rt.neg", [b.op("rt.mul", [y, y])])]),
                                        scalar(b, 2 / math.sqrt(math.pi), y)])
                step = b.op("rt.div", [b.op("rt.sub", [b.op("rt.erf", [y]), x]), slope])
                y = b.op("rt.select", [refine, b.op("rt.sub", [y, step]), y])
        edge = b.op("rt.cmp", [b.op("rt.abs", [x]), one], {"predicate": "eq"})
        return b.op("rt.select", [edge, b.op("rt.mul", [x, scalar(b, math.inf, x)]), y])

    return _in_f32(b, x, compute)


_EULER_GAMMA = 0.57721566490153286061
_LOG_PI = math.log(math.pi)
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
_STIRLING_FROM = 10  # lgamma's asymptotic series from here; below, shifts to [1.25, 2.5) and Taylor series
_BERNOULLI = (1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66, -691 / 2730, 7 / 6)  # B_2, B_4, ..., B_14


def _zeta_minus_one(k: int) -> float:
    """zeta(k) - 1 = sum of n^-k over n >= 2 (k >= 2), to double precision: 62 terms, and the rest by
    Euler-Maclaurin to the B_6 term."""
    n = 64
    tail = n ** (1 - k) / (k - 1) + n ** -k / 2 + k * n ** (-k - 1) / 12 - k * (k + 1) * (k + 2) * n ** (-k - 3) / 720 \
        + k * (k + 1) * (k + 2) * (k + 3) * (k + 4) * n ** (-k - 5) / 30240
    return sum(float(m) ** -k for m in range(2, n)) + tail


@functools.cache
def _lgamma_series(around: int, radius: float, eps: float) -> tuple[float, ...]:
    """Taylor coefficients (highest power first, none constant) of lgamma(around + p), around 1 or 2: -gamma p
    (1 - gamma at 2) plus (-1)^k (zeta(k) - [around is 2]) / k p^k, to where radius^k / k drops below eps (the
    coefficients fall as 1 and 1/2^k)."""
    coefficients = [(1 - _EULER_GAMMA) if around == 2 else -_EULER_GAMMA]
    k = 2
    while (radius / (2 if around == 2 else 1)) ** k / k > eps / 4:
        coefficients.append((-1) ** k * (_zeta_minus_one(k) + (0 if around == 2 else 1)) / k)
        k += 1
    return tuple(reversed(coefficients))


def _lgamma_positive(b: Builder, a: Value) -> Value:
    """lgamma(a) for a >= 0: Stirling's series from _STIRLING_FROM; the Taylor series about 1 on [0.75, 1.25),
    whose p = a - 1 is exact, so that lgamma keeps its digits near its zero at 1; elsewhere a shifted by whole
    steps to t in [1.25, 2.5) (a - n, exact) and the series about 2 there (its zero at 2 likewise), with
    lgamma(a) = lgamma(t) + log(t (t + 1) ... (t + n - 1)) for a shift down, - log(a (a + 1)) for one up."""
    eps = float(np.finfo(a.type.dtype.np_dtype).eps)
    one = scalar(b, 1, a)

    def cmp(u, v, predicate):
        return b.op("rt.cmp", [u, scalar(b, v, u)], {"predicate": predicate})

    def series(p, around, radius):
        return b.op("rt.mul", [_polynomial(b, p, _lgamma_series(around, radius, eps)), p])

    steps = b.op("rt.floor", [b.op("rt.sub", [a, scalar(b, 1.5, a)])])  # t in [1.5, 2.5), or [1.25, 1.5) kept
    steps = b.op("rt.select", [cmp(a, 1.25, "ge"), b.op("rt.max", [steps, scalar(b, 0, a)]), steps])
    steps = clamp(b, steps, -2, _STIRLING_FROM - 2)
    t = b.op("rt.sub", [a, steps])
    down, up = one, one
    for i in range(_STIRLING_FROM - 2):
        down = b.op("rt.mul", [down, b.op("rt.select", [cmp(steps, i, "gt"), b.op("rt.add", [t, scalar(b, i, t)]),
                                                        one])])
    for i in range(2):
        up = b.op("rt.select", [cmp(steps, -i, "lt"), b.op("rt.mul", [up, b.op("rt.add", [a, scalar(b, i, a)])]), up])
    shifted = b.op("rt.add", [series(b.op("rt.sub", [t, scalar(b, 2, t)]), 2, 0.75),
                              b.op("rt.sub", [b.op("rt.log", [down]), b.op("rt.log", [up])])])
    near_one = b.op("rt.and", [cmp(a, 0.75, "ge"), cmp(a, 1.25, "lt")])
    small = b.op("rt.select", [near_one, series(b.op("rt.sub", [a, one]), 1, 0.25), shifted])
    inverse = b.op("rt.reciprocal", [a])
    corrections = [b_2k / (2 * k * (2 * k - 1)) for k, b_2k in enumerate(_BERNOULLI, 1)]
    correction = b.op("rt.mul", [_polynomial(b, b.op("rt.mul", [inverse, inverse]), corrections[::-1]), inverse])
    stirling = b.op("rt.sub", [b.op("rt.mul", [b.op("rt.sub", [a, scalar(b, 0.5, a)]), b.op("rt.log", [a])]), a])
    stirling = b.op("rt.add", [stirling, b.op("rt.add", [scalar(b, _HALF_LOG_2PI, a), correction])])
    return b.op("rt.select", [cmp(a, _STIRLING_FROM, "ge"), stirling, small])


def lgamma(b: Builder, x: Value) -> Value:
    """log|Gamma(x)|: inf at 0, at the negative integers and at +-inf. For x >= 0 `_lgamma_positive`: in f32
    within 3e-7 relative of the exact value (about 4 ulps; torch's CPU kernel, glibc's lgammaf, 1), in f64
    within 1.1e-15. Below 0 the reflection log(pi / |x sin(pi x)|) - lgamma(-x), sin(pi x) taken of x's distance
    to the nearest integer (exact): its two terms cancel near lgamma's zeros (-2.457, -2.747, ...), so there the
    error is about 1e-6 (f32) of their size, 1e-4 relative at worst, as it is 1e-6 in torch's own f32 kernel."""
    def compute(x):
        a = b.op("rt.abs", [x])
        zero, inf = scalar(b, 0, x), scalar(b, math.inf, x)
        positive = _lgamma_positive(b, a)
        distance = b.op("rt.sub", [x, b.op("rt.round", [x])])
        sine = b.op("rt.abs", [b.op("rt.sin", [b.op("rt.mul", [distance, scalar(b, math.pi, x)])])])
        logs = b.op("rt.add", [b.op("rt.log", [a]), b.op("rt.log", [sine])])
        reflected = b.op("rt.sub", [b.op("rt.sub", [scalar(b, _LOG_PI, x), logs]), positive])
        negative = b.op("rt.cmp", [x, zero], {"predicate": "lt"})
        y = b.op("rt.select", [negative, reflected, positive])
        pole = b.op("rt.and", [b.op("rt.cmp", [x, zero], {"predicate": "le"}),
                               b.op("rt.cmp", [distance, zero], {"predicate": "eq"})])
        pole = b.op("rt.or", [pole, b.op("rt.cmp", [a, inf], {"predicate": "eq"})])
        return b.op("rt.select", [pole, inf, y])

    return _in_f32(b, x, compute)


_DIGAMMA_ASYMPTOTIC = (8.33333333333333333333E-2, -2.10927960927960927961E-2, 7.57575757575757575758E-3,
                       -4.16666666666666666667E-3, 3.96825396825396825397E-3, -8.33333333333333333333E-3,
                       8.33333333333333333333E-2)  # Cephes' psi, as torch's calc_digamma takes them
_DIGAMMA_10 = 2.25175258906672110764  # psi(10)


def digamma(b: Builder, x: Value) -> Value:
    """psi(x), as torch's calc_digamma computes it (so within a few ulps of torch, including near psi's zero at
    1.4616 where both lose digits to cancellation): -inf at +0 and inf at -0, NaN at the negative integers and
    -inf; below 0 psi(1 - x) - pi / tan(pi frac(x)); then x raised past 10 by psi(x) = psi(x + 1) - 1 / x (ten
    steps, unrolled), psi(10) a constant, and past it log(x) - 1 / (2x) - z P(z) with z = 1 / x^2. torch takes
    pi / tan(pi frac(x)) in double; here tan is taken of x's distance to the nearest integer, which keeps f32's
    digits near the poles."""
    def compute(x):
        zero, one = scalar(b, 0, x), scalar(b, 1, x)
        negative = b.op("rt.cmp", [x, zero], {"predicate": "lt"})
        whole = trunc(b, x)
        u = b.op("rt.select", [negative, b.op("rt.sub", [one, x]), x])
        total = zero
        for _ in range(10):
            below = b.op("rt.cmp", [u, scalar(b, 10, u)], {"predicate": "lt"})
            total = b.op("rt.select", [below, b.op("rt.sub", [total, b.op("rt.reciprocal", [u])]), total])
            u = b.op("rt.select", [below, b.op("rt.add", [u, one]), u])
        z = b.op("rt.reciprocal", [b.op("rt.mul", [u, u])])
        series = b.op("rt.mul", [z, _polynomial(b, z, _DIGAMMA_ASYMPTOTIC)])
        far = b.op("rt.sub", [b.op("rt.sub", [b.op("rt.log", [u]), b.op("rt.div", [scalar(b, 0.5, u), u])]), series])
        at_ten = b.op("rt.cmp", [u, scalar(b, 10, u)], {"predicate": "eq"})
        psi = b.op("rt.add", [total, b.op("rt.select", [at_ten, scalar(b, _DIGAMMA_10, u), far])])
        # tan(pi x) has period 1: taken of x's distance to the nearest integer, pi times it loses nothing
        fraction = b.op("rt.mul", [b.op("rt.sub", [x, b.op("rt.round", [x])]), scalar(b, math.pi, x)])
        reflected = b.op("rt.sub", [psi, b.op("rt.div", [scalar(b, math.pi, x), b.op("rt.tan", [fraction])])])
        pole = b.op("rt.and", [negative, b.op("rt.cmp", [x, whole], {"predicate": "eq"})])
        y = b.op("rt.select", [negative, b.op("rt.select", [pole, scalar(b, math.nan, x), reflected]), psi])
        at_zero = b.op("rt.cmp", [x, zero], {"predicate": "eq"})
        return b.op("rt.select", [at_zero, b.op("rt.neg", [b.op("rt.reciprocal", [x])]), y])

    return _in_f32(b, x, compute)


def vector_norm(b: Builder, x: Value, axes, ord=2, keepdims: bool = False) -> Value:
    """The `ord`-norm of x over `axes`, in x's type, as torch's linalg.vector_norm and ONNX's LpNormalization take
    it: 2 sqrt(sum(x^2)), 1 sum(|x|), inf max(|x|), -inf min(|x|), 0 the count of nonzero elements (a NaN
    counts), any other p sum(|x|^p)^(1/p) (a negative p too, 0 where an element is). Unscaled, as torch's: a
    2-norm overflows to inf once a square does."""
    attrs = {"kind": "sum", "axes": tuple(axes), "keepdims": keepdims}
    if ord == 1:
        return b.op("rt.reduce", [b.op("rt.abs", [x])], attrs)
    if ord == 2:
        return b.op("rt.sqrt", [b.op("rt.reduce", [b.op("rt.mul", [x, x])], attrs)])
    if ord in (math.inf, -math.inf):
        return b.op("rt.reduce", [b.op("rt.abs", [x])], {**attrs, "kind": "max" if ord > 0 else "min"})
    if ord == 0:
        nonzero = b.op("rt.cmp", [x, scalar(b, 0, x)], {"predicate": "ne"})
        return b.op("rt.reduce", [b.op("rt.cast", [nonzero], {"dtype": x.type.dtype.name})], attrs)
    total = b.op("rt.reduce", [b.op("rt.pow", [b.op("rt.abs", [x]), scalar(b, ord, x)])], attrs)
    return b.op("rt.pow", [total, scalar(b, 1 / ord, total)])


def pairwise_distance(b: Builder, x1: Value, x2: Value, p=2, by_matmul: bool = False) -> Value:
    """torch's cdist: [..., P, M] and [..., R, M] (batch dims broadcast) to [..., P, R], the `p`-norm of each
    difference (`vector_norm`'s orders). With `by_matmul` (p 2) torch's faster form: |x1|^2 - 2 x1 x2^T + |x2|^2,
    clamped at 0 and square-rooted, one matmul where the direct form holds P x R x M differences."""
    if by_matmul:
        squares = [b.op("rt.reduce", [b.op("rt.mul", [v, v])], {"kind": "sum", "axes": (v.type.rank - 1,),
                                                                 "keepdims": True}) for v in (x1, x2)]
        swap = tuple(range(x2.type.rank - 2)) + (x2.type.rank - 1, x2.type.rank - 2)
        cross = b.op("rt.matmul", [b.op("rt.mul", [x1, scalar(b, -2, x1)]), b.op("rt.transpose", [x2], {"perm": swap})])
        total = b.op("rt.add", [b.op("rt.add", [cross, squares[0]]),
                                b.op("rt.transpose", [squares[1]], {"perm": swap})])
        return b.op("rt.sqrt", [clamp(b, total, lo=0)])
    *batch1, p1, m = x1.type.shape
    *batch2, r2, _ = x2.type.shape
    rows = b.op("rt.reshape", [x1], {"shape": (*batch1, p1, 1, m)})
    columns = b.op("rt.reshape", [x2], {"shape": (*batch2, 1, r2, m)})
    difference = b.op("rt.sub", [rows, columns])
    return vector_norm(b, difference, (difference.type.rank - 1,), p)


def conv2d(b: Builder, x: Value, w: Value, bias: Value | None, strides=(1, 1), pad=(0, 0, 0, 0),
           dilations=(1, 1), groups: int = 1) -> Value:
    """NCHW / OIHW convolution, plus a per-output-channel bias."""
    y = b.op("rt.conv2d", [x, w], {"strides": tuple(strides), "pad": tuple(pad),
                                   "dilations": tuple(dilations), "groups": groups})
    return b.op("rt.add", [y, channel_vector(b, bias, 4)]) if bias is not None else y


CONV_TRANSPOSE_PHASES = True  # strided transposed convs as one conv a phase (False: the zero-stuffed input)


def conv_transpose2d(b: Builder, x: Value, w: Value, bias: Value | None, strides=(1, 1), pad=(0, 0, 0, 0),
                     dilations=(1, 1), groups: int = 1) -> Value:
    """NCHW transposed convolution (conv2d's gradient with respect to its input) with an IOHW filter
    ([C_in, C_out / groups, kh, kw], as torch and ONNX hold it), plus a per-output-channel bias. `pad` (top,
    bottom, left, right) crops the full output, (H - 1) * stride + dilation * (kh - 1) + 1 rows; a negative
    amount extends it (an output padding is a smaller bottom or right).

    At stride 1 it is a conv2d with the kernel flipped and its in and out channels swapped within each group,
    padded by dilation * (k - 1) - pad (negative: a crop); nothing is materialized. With a stride (and static
    image sizes) the output splits into s_h * s_w phases, the rows and columns o = m * s + r of each (r, c):
    phase (r, c) is a conv2d of the input itself with the taps that land there (`_phase_taps`), and the phases
    are interleaved back (`_conv_transpose_phases`). So no multiply is spent on the zeros a stride puts between
    input pixels, and the zero-stuffed input (s_h * s_w times the input) is never written: a decoder's or a GAN's
    strided upsampling costs the multiplies it needs, not s_h * s_w times as many. Image sizes known only at run
    time keep the zero-stuffed form."""
    cin, cout_per_group, kh, kw = w.type.shape
    per_group = (groups, cin // groups, cout_per_group, kh, kw)
    w = b.op("rt.transpose", [b.op("rt.reshape", [w], {"shape": per_group})], {"perm": (0, 2, 1, 3, 4)})
    w = b.op("rt.reshape", [w], {"shape": (groups * cout_per_group, cin // groups, kh, kw)})
    sh, sw = strides
    if CONV_TRANSPOSE_PHASES and (sh, sw) != (1, 1) and not any(isinstance(d, Sym) for d in x.type.shape[2:]):
        return _conv_transpose_phases(b, x, w, bias, strides, pad, dilations, groups)
    w = reverse(b, w, (2, 3))
    x = spread(b, x, (0, 0, sh - 1, sw - 1))
    spans = (dilations[0] * (kh - 1), dilations[0] * (kh - 1) - (sh - 1),
             dilations[1] * (kw - 1), dilations[1] * (kw - 1) - (sw - 1))
    around = [span - p for span, p in zip(spans, pad)]  # (top, bottom, left, right) of the correlation
    x = pad_signed(b, x, (0, 0, min(around[0], 0), min(around[2], 0)), (0, 0, min(around[1], 0), min(around[3], 0)))
    return conv2d(b, x, w, bias, (1, 1), tuple(max(a, 0) for a in around), dilations, groups)


def _phase_taps(size: int, k: int, stride: int, dilation: int, pad_low: int, out: int, r: int):
    """Along one axis of a transposed conv: for its outputs o = m * stride + r (m < count), the kernel taps that
    reach them, in the order a correlation reads them, the input offset of the first (out[m] reads
    x[m + first + j * step] with tap j), the step between taps, and count. Output o (at o + pad_low before the
    crop) takes tap t from input i where i * stride + t * dilation = o + pad_low."""
    count = len(range(r, out, stride))
    q = r + pad_low
    taps = [t for t in range(k - 1, -1, -1) if (q - t * dilation) % stride == 0]  # input offsets increase
    offsets = [(q - t * dilation) // stride for t in taps]
    step = offsets[1] - offsets[0] if len(offsets) > 1 else 1
    reach = offsets[0] + count + (len(taps) - 1) * step if taps else 0  # one past the last input read
    if not taps or offsets[0] >= size or reach <= 0:
        return [], 0, 1, count  # nothing of the input lands on this phase: the bias alone
    return taps, offsets[0], step, count


def _conv_transpose_phases(b: Builder, x: Value, w: Value, bias: Value | None, strides, pad, dilations,
                           groups: int) -> Value:
    """`conv_transpose2d` with a stride, as one conv2d a phase (see there). `w` is [C_out, C_in / groups, kh, kw]
    (channels already swapped, taps not flipped). Each phase's output is padded to ceil(out / stride) rows and
    columns, the phases are stacked as [N, C, rows, s_h, cols, s_w], merged and cropped to the output."""
    n, _, h, wd = x.type.shape
    cout, _, kh, kw = w.type.shape
    (sh, sw), (dh, dw) = strides, dilations
    top, bottom, left, right = pad
    out_h, out_w = (h - 1) * sh + dh * (kh - 1) + 1 - top - bottom, (wd - 1) * sw + dw * (kw - 1) + 1 - left - right
    rows, cols = -(-out_h // sh), -(-out_w // sw)
    zeros = None
    phase_rows = []
    for r in range(sh):
        taps_y, first_y, step_y, count_y = _phase_taps(h, kh, sh, dh, top, out_h, r)
        phases = []
        for c in range(sw):
            taps_x, first_x, step_x, count_x = _phase_taps(wd, kw, sw, dw, left, out_w, c)
            if not taps_y or not taps_x or not count_y or not count_x:
                if zeros is None:
                    zeros = b.op("rt.broadcast", [scalar(b, 0, x)], {"shape": (n, cout, rows, cols)})
                phases.append(zeros)
                continue
            sub = b.op("rt.gather", [w, b.constant(np.array(taps_y, np.int32))], {"axis": 2})
            sub = b.op("rt.gather", [sub, b.constant(np.array(taps_x, np.int32))], {"axis": 3})
            need_h, need_w = count_y + (len(taps_y) - 1) * step_y, count_x + (len(taps_x) - 1) * step_x
            around = (-first_y, first_y + need_h - h, -first_x, first_x + need_w - wd)  # negative: a crop
            xs = pad_signed(b, x, (0, 0, min(around[0], 0), min(around[2], 0)),
                            (0, 0, min(around[1], 0), min(around[3], 0)))
            y = conv2d(b, xs, sub, None, (1, 1), tuple(max(a, 0) for a in around), (step_y, step_x), groups)
            phases.append(pad_signed(b, y, (0, 0, 0, 0), (0, 0, rows - count_y, cols - count_x)))
        lifted = [b.op("rt.reshape", [p], {"shape": (n, cout, rows, 1, cols, 1)}) for p in phases]
        phase_rows.append(lifted[0] if sw == 1 else b.op("rt.concat", lifted, {"axis": 5}))
    y = phase_rows[0] if sh == 1 else b.op("rt.concat", phase_rows, {"axis": 3})
    y = b.op("rt.reshape", [y], {"shape": (n, cout, rows * sh, cols * sw)})
    y = pad_signed(b, y, (0, 0, 0, 0), (0, 0, out_h - rows * sh, out_w - cols * sw))
    return b.op("rt.add", [y, channel_vector(b, bias, 4)]) if bias is not None else y


def conv3d(b: Builder, x: Value, w: Value, bias: Value | None, strides=(1, 1, 1), pad=(0,) * 6,
           dilations=(1, 1, 1), groups: int = 1) -> Value:
    """NCDHW / OIDHW convolution, plus a per-output-channel bias; `pad` is (front, back, top, bottom, left,
    right), as conv2d's with depth first. One conv2d: output depth od reads the depth-padded input at depths
    od * s_d + kd * dil_d, so each depth tap kd is a strided slice of it; the output depths are folded into the
    batch and the taps stacked along the channels group-major (x as [N * OD, g, KD, C / g, H, W], w as
    [O, KD * C / g, KH, KW]), so that each group of the conv2d reads its own channels at every tap."""
    n, c, depth, h, wd = x.type.shape
    o, per_group, kd, kh, kw = w.type.shape
    if isinstance(depth, Sym):
        raise UnsupportedOpError(f"conv3d of a volume whose depth ({depth}) is known only at run time",
                                 hint="export with a static depth")
    (sd, dd), span = (strides[0], dilations[0]), dilations[0] * (kd - 1) + 1
    x = pad_signed(b, x, (0, 0, pad[0], 0, 0), (0, 0, pad[1], 0, 0))
    od = (depth + pad[0] + pad[1] - span) // sd + 1
    taps = [slice_axis(b, x, 2, t * dd, t * dd + (od - 1) * sd + 1, sd) for t in range(kd)]
    taps = [b.op("rt.reshape", [t], {"shape": (n, groups, 1, per_group, od, h, wd)}) for t in taps]
    x = taps[0] if kd == 1 else b.op("rt.concat", taps, {"axis": 2})
    x = b.op("rt.transpose", [x], {"perm": (0, 4, 1, 2, 3, 5, 6)})  # [N, OD, g, KD, C / g, H, W]
    x = b.op("rt.reshape", [x], {"shape": (n * od, groups * kd * per_group, h, wd)})
    w = b.op("rt.transpose", [w], {"perm": (0, 2, 1, 3, 4)})
    w = b.op("rt.reshape", [w], {"shape": (o, kd * per_group, kh, kw)})
    y = conv2d(b, x, w, None, strides[1:], pad[2:], dilations[1:], groups)
    y = b.op("rt.reshape", [y], {"shape": (n, od, o) + y.type.shape[2:]})
    y = b.op("rt.transpose", [y], {"perm": (0, 2, 1, 3, 4)})
    return b.op("rt.add", [y, channel_vector(b, bias, 5)]) if bias is not None else y


def conv_transpose3d(b: Builder, x: Value, w: Value, bias: Value | None, strides=(1, 1, 1), pad=(0,) * 6,
                     dilations=(1, 1, 1), groups: int = 1) -> Value:
    """NCDHW transposed convolution with a [C_in, C_out / groups, kd, kh, kw] filter, plus a per-output-channel
    bias; `pad` (front, back, top, bottom, left, right) crops the full output, as conv_transpose2d's does, with
    depth (D - 1) * s_d + dil_d * (kd - 1) + 1 (a negative amount extends it).

    Input depth i, through depth tap t, lands at output depth i * s_d + t * dil_d: one conv_transpose2d with
    the input depths folded into the batch and the taps stacked along its output channels group-major (w as
    [C_in, KD * C_out / g, KH, KW], output channels (g, t, o)); each tap's depths are then spread by s_d,
    shifted by t * dil_d and summed, and the sum cropped."""
    n, c, depth, h, wd = x.type.shape
    cin, per_group, kd, kh, kw = w.type.shape
    if isinstance(depth, Sym):
        raise UnsupportedOpError(f"conv_transpose3d of a volume whose depth ({depth}) is known only at run time",
                                 hint="export with a static depth")
    (sd, dd), cout = (strides[0], dilations[0]), groups * per_group
    x = b.op("rt.reshape", [b.op("rt.transpose", [x], {"perm": (0, 2, 1, 3, 4)})], {"shape": (n * depth, c, h, wd)})
    w = b.op("rt.reshape", [b.op("rt.transpose", [w], {"perm": (0, 2, 1, 3, 4)})],
             {"shape": (cin, kd * per_group, kh, kw)})
    y = conv_transpose2d(b, x, w, None, strides[1:], pad[2:], dilations[1:], groups)
    oh, ow = y.type.shape[2:]
    y = b.op("rt.reshape", [y], {"shape": (n, depth, groups, kd, per_group, oh, ow)})
    y = b.op("rt.transpose", [y], {"perm": (0, 3, 2, 4, 1, 5, 6)})  # [N, KD, g, C_out / g, D, OH, OW]
    y = b.op("rt.reshape", [y], {"shape": (n, kd, cout, depth, oh, ow)})
    full = (depth - 1) * sd + dd * (kd - 1) + 1
    total = None
    for t in range(kd):  # spread (depth * s_d: the last input's zeros too), shifted, its tail cut to `full`
        tap = b.op("rt.reshape", [slice_axis(b, y, 1, t, t + 1)], {"shape": (n, cout, depth, oh, ow)})
        tap = pad_signed(b, spread(b, tap, (0, 0, sd - 1, 0, 0)), (0, 0, t * dd, 0, 0),
                         (0, 0, full - depth * sd - t * dd, 0, 0))
        total = tap if total is None else b.op("rt.add", [total, tap])
    y = pad_signed(b, total, (0, 0, -pad[0], 0, 0), (0, 0, -pad[1], 0, 0))
    return b.op("rt.add", [y, channel_vector(b, bias, 5)]) if bias is not None else y


def pool(b: Builder, x: Value, kind: str, kernel, strides, dilations, begin, end,
         count_include_pad: bool = False) -> Value:
    """Max or average pooling (`kind` is rt.max_pool2d or rt.avg_pool2d, with its padding and count rules) of an
    NC + 1, 2 or 3 spatial dims tensor, in rt's 2-D pools, padded by `begin` and `end` a spatial dim. 1-D is
    lifted to 2-D; 3-D is a pool over (H, W) and then one over D. Both are separable: a max of maxes, and a mean
    of means whose counts multiply: a window is a box, so its count (of kernel positions, or of those inside
    the input) is the product of its counts along each axis."""
    rank = x.type.rank
    if rank == 3:
        y = pool(b, b.op("rt.reshape", [x], {"shape": x.type.shape[:2] + (1,) + x.type.shape[2:]}), kind,
                 [1, *kernel], [1, *strides], [1, *dilations], [0, *begin], [0, *end], count_include_pad)
        return b.op("rt.reshape", [y], {"shape": y.type.shape[:2] + y.type.shape[3:]})
    if rank == 4:
        attrs = {"kernel": tuple(kernel), "strides": tuple(strides), "pad": (begin[0], end[0], begin[1], end[1])}
        if any(d != 1 for d in dilations):
            attrs["dilations"] = tuple(dilations)
        if kind == "rt.avg_pool2d":
            attrs["count_include_pad"] = count_include_pad
        return b.op(kind, [x], attrs)
    if rank != 5:
        raise UnsupportedOpError(f"pooling of rank-{rank} tensors is not supported (1-D to 3-D pooling, of "
                                 "rank-3 to rank-5 tensors, is)")
    nb, c, d, h, w = x.type.shape
    y = pool(b, b.op("rt.reshape", [x], {"shape": (nb, c * d, h, w)}), kind, kernel[1:], strides[1:],
             dilations[1:], begin[1:], end[1:], count_include_pad)
    oh, ow = y.type.shape[2:]
    y = pool(b, b.op("rt.reshape", [y], {"shape": (nb, c, d, oh * ow)}), kind, [kernel[0], 1], [strides[0], 1],
             [dilations[0], 1], [begin[0], 0], [end[0], 0], count_include_pad)
    return b.op("rt.reshape", [y], {"shape": (nb, c, y.type.shape[2], oh, ow)})


def max_pool_indices(b: Builder, x: Value, y: Value, kernel, strides, dilations, begin, end, *,
                     plane_offset: bool, column_major: bool) -> Value:
    """Where each maximum of a max pool of x [N, C, spatial...] lies (y: the pool's values; begin and end: its pads
    a spatial dim, ceil_mode's extra ones included): an i64 flat index within the (n, c) plane, row-major over the
    spatial dims (torch's), or column-major with `column_major` (ONNX's storage_order=1), plus the plane's offset
    (n * C + c) * plane size with `plane_offset` (ONNX's). As torch's CPU kernel picks it: of the window's positions
    equal to the maximum the first in window order, but a NaN is the maximum, and of several NaNs the last; a
    padding position never. Each window tap is a strided slice of the padded x compared with y; positions come
    from per-dim vectors, so nothing the size of y is stored."""
    spatial, out = x.type.shape[2:], y.type.shape[2:]
    order = list(range(len(spatial)))[::-1] if column_major else list(range(len(spatial)))
    step = {d: math.prod(spatial[e] for e in order[k + 1:]) for k, d in enumerate(order)}

    def along(d, values):  # a vector along spatial dim d, broadcast over the others
        return values.reshape((1, 1) + tuple(o if e == d else 1 for e, o in enumerate(out)))

    # each output position's window start, as a flat index (-begin where it lies in the padding)
    starts = [np.arange(o) * s - lo for o, s, lo in zip(out, strides, begin, strict=True)]
    origin = _flat_positions(b, [start * step[d] for d, start in enumerate(starts)],
                             x.type.shape[:2] if plane_offset else None, math.prod(spatial))
    lowest = extreme(x.type.dtype, low=True)
    xp = b.op("rt.pad", [x], {"low": (0, 0, *begin), "high": (0, 0, *end), "value": float(lowest)})
    taps = []  # (flat index, tap's values, where it lies inside x), in window order
    for tap in np.ndindex(*kernel):
        shift = [t * dil for t, dil in zip(tap, dilations, strict=True)]
        limit = [s0 + (o - 1) * s + 1 for s0, o, s in zip(shift, out, strides, strict=True)]
        window = b.op("rt.slice", [xp], {"start": (0, 0, *shift), "limit": (*x.type.shape[:2], *limit),
                                         "stride": (1, 1, *strides)})
        inside = functools.reduce(np.logical_and, [along(d, (start + t >= 0) & (start + t < size))
                                                   for d, (start, t, size) in enumerate(zip(starts, shift, spatial))])
        index = b.op("rt.add", [origin, scalar(b, sum(t * step[d] for d, t in enumerate(shift)), origin)])
        taps.append((index, window, b.constant(inside)))
    index = None
    for tap_index, window, inside in reversed(taps):  # the first tap in window order is assigned last
        hit = b.op("rt.and", [b.op("rt.cmp", [window, y], {"predicate": "eq"}), inside])
        index = tap_index if index is None else b.op("rt.select", [hit, tap_index, index])
    if x.type.dtype.kind == "float":
        for tap_index, window, inside in taps:  # the last NaN in window order is assigned last
            nan = b.op("rt.and", [b.op("rt.cmp", [window, window], {"predicate": "ne"}), inside])
            index = b.op("rt.select", [nan, tap_index, index])
    if index.type.shape != y.type.shape:
        index = b.op("rt.broadcast", [index], {"shape": y.type.shape})
    return index


def _flat_positions(b: Builder, vectors, planes=None, plane_size: int = 0) -> Value:
    """An i64 table of flat positions [1, 1, spatial...]: the sum of `vectors`, the d-th along spatial dim d; plus
    each plane's offset (n * C + c) * plane_size, [N, C, spatial...], with `planes` (N, C). One small constant a
    dim, so nothing the size of the table is stored."""
    rank = len(vectors)
    total = None
    for d, vector in enumerate(vectors):
        along = (1, 1) + tuple(-1 if e == d else 1 for e in range(rank))
        term = b.constant(np.asarray(vector, dtype=np.int64).reshape(along))
        total = term if total is None else b.op("rt.add", [total, term])
    if planes is not None:
        offset = np.arange(math.prod(planes), dtype=np.int64).reshape(tuple(planes) + (1,) * rank) * plane_size
        total = b.op("rt.add", [total, b.constant(offset)])
    return total


def slice_axis(b: Builder, x: Value, axis: int, start: int, stop: int, step: int = 1) -> Value:
    """x[..., start:stop:step, ...] along one axis (bounds already clamped, step > 0)."""
    rank = x.type.rank
    if (start, stop, step) == (0, x.type.shape[axis], 1):
        return x
    starts = tuple(start if d == axis else 0 for d in range(rank))
    limits = tuple(stop if d == axis else x.type.shape[d] for d in range(rank))
    strides = tuple(step if d == axis else 1 for d in range(rank))
    return b.op("rt.slice", [x], {"start": starts, "limit": limits, "stride": strides})


def attention(b: Builder, q: Value, k: Value, v: Value, mask: Value | None = None, causal: bool = False,
              scale: float | None = None) -> Value:
    """softmax(q @ k^T * scale + mask) @ v over [..., L, E] inputs; a boolean mask keeps where true."""
    rank = k.type.rank
    perm = tuple(range(rank - 2)) + (rank - 1, rank - 2)
    scale = 1 / math.sqrt(q.type.shape[-1]) if scale is None else scale
    s = b.op("rt.matmul", [b.op("rt.mul", [q, scalar(b, scale, q)]), b.op("rt.transpose", [k], {"perm": perm})])
    lq, lk = q.type.shape[-2], k.type.shape[-2]
    if causal:  # row >= column, from i32 iotas that fuse into the kernel: no mask buffer, no 64-bit integers
        rows = b.op("rt.iota", [], {"shape": (lq, lk), "axis": 0, "dtype": "i32"})
        cols = b.op("rt.iota", [], {"shape": (lq, lk), "axis": 1, "dtype": "i32"})
        mask = b.op("rt.cmp", [rows, cols], {"predicate": "ge"})
    if mask is not None:
        if mask.type.dtype.kind == "bool":
            s = b.op("rt.select", [mask, s, scalar(b, -np.inf, s)])
        else:
            s = b.op("rt.add", [s, mask])
    return b.op("rt.matmul", [softmax(b, s, -1), v])


def resample(b: Builder, x: Value, axis: int, low: np.ndarray, high: np.ndarray | None = None,
             weight: np.ndarray | None = None) -> Value:
    """`x` read along `axis` at input positions `low` (nearest neighbours), or at `low` and `high` mixed by
    `weight` (linear: x[low] * (1 - weight) + x[high] * weight). Positions are already inside the axis."""
    if high is None:
        return b.op("rt.gather", [x, b.constant(np.asarray(low, dtype=np.int32))], {"axis": axis})
    weight = np.asarray(weight, dtype=np.float64)
    return resample_taps(b, x, axis, np.stack([low, high], 1), np.stack([1 - weight, weight], 1))


MAX_GATHERED_TAPS = 8  # past this many taps an output reads, a matrix product along the axis does less work


def resample_taps(b: Builder, x: Value, axis: int, indices: np.ndarray, weights: np.ndarray) -> Value:
    """`x` filtered along `axis`: output j is sum_k weights[j, k] * x[indices[j, k]], with indices inside the axis
    and weights known at import time (cubic and antialiased resizes). Few taps are gathers; many (a strong
    antialiased downscale) are one matrix product with the dense [out, in] weights, the axis moved last."""
    size_out, taps = weights.shape
    dtype = x.type.dtype.np_dtype
    if taps <= MAX_GATHERED_TAPS:
        shape = [1] * x.type.rank
        shape[axis] = size_out
        total = None
        for k in range(taps):
            tap = b.op("rt.gather", [x, b.constant(np.asarray(indices[:, k], dtype=np.int32))], {"axis": axis})
            tap = b.op("rt.mul", [tap, b.constant(weights[:, k].reshape(shape).astype(dtype))])
            total = tap if total is None else b.op("rt.add", [total, tap])
        return total
    dense = np.zeros((size_out, x.type.shape[axis]))
    np.add.at(dense, (np.repeat(np.arange(size_out), taps), indices.reshape(-1)), weights.reshape(-1))
    last = x.type.rank - 1
    perm = tuple(a for a in range(x.type.rank) if a != axis) + (axis,)
    moved = x if axis == last else b.op("rt.transpose", [x], {"perm": perm})
    y = b.op("rt.matmul", [moved, b.constant(dense.T.astype(dtype))])
    return y if axis == last else b.op("rt.transpose", [y], {"perm": tuple(int(i) for i in np.argsort(perm))})


def resample_matrix(b: Builder, x: Value, axis: int, matrix: np.ndarray) -> Value:
    """`x` filtered along `axis` by a dense [out, in] `matrix` known at import time: each output row's band of
    nonzero weights becomes that many taps (`resample_taps`)."""
    nonzero = matrix != 0
    first = np.where(nonzero.any(axis=1), nonzero.argmax(axis=1), 0)
    last = np.where(nonzero.any(axis=1), matrix.shape[1] - 1 - nonzero[:, ::-1].argmax(axis=1), 0)
    taps = int((last - first).max()) + 1
    indices = first[:, None] + np.arange(taps)
    inside = indices <= last[:, None]
    indices = np.where(inside, indices, first[:, None])  # a row's spare taps read its first input at weight 0
    weights = np.where(inside, np.take_along_axis(matrix, np.minimum(indices, matrix.shape[1] - 1), axis=1), 0.0)
    return resample_taps(b, x, axis, indices, weights)


def advanced_index(b: Builder, x: Value, indices) -> Value:
    """x[indices] as NumPy and PyTorch's `aten.index` read it. `indices` holds, for each leading axis of x, an
    integer tensor or None (the whole axis); the index tensors broadcast together and negative entries count from
    the end. The broadcast shape takes the indexed axes' place where those are adjacent, else leads the result.
    One gather: the indexed axes (static sizes) are brought together and merged, and read at a linear index."""
    indexed = [axis for axis, index in enumerate(indices) if index is not None]
    tensors = [indices[axis] for axis in indexed]
    sizes = [x.type.shape[axis] for axis in indexed]
    wide = any(t.type.dtype.name == "i64" for t in tensors) or math.prod(sizes) > np.iinfo(np.int32).max
    dtype = "i64" if wide else "i32"
    first = indexed[0]
    if indexed != list(range(first, first + len(indexed))):  # separated by a whole axis: they lead
        rest = [axis for axis in range(x.type.rank) if axis not in indexed]
        x = b.op("rt.transpose", [x], {"perm": tuple(indexed + rest)})
        first = 0
    linear = None
    for k, (index, size) in enumerate(zip(tensors, sizes)):
        if index.type.dtype.name != dtype:
            index = b.op("rt.cast", [index], {"dtype": dtype})
        index = wrap_negative(b, index, size)
        stride = math.prod(sizes[k + 1:])
        term = index if stride == 1 else b.op("rt.mul", [index, scalar(b, stride, index)])
        linear = term if linear is None else b.op("rt.add", [linear, term])
    if len(sizes) > 1:
        shape = x.type.shape
        merged = shape[:first] + (math.prod(sizes),) + shape[first + len(sizes):]
        x = b.op("rt.reshape", [x], {"shape": merged})
    return b.op("rt.gather", [x, linear], {"axis": first})


def linear_neighbours(position: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(low, high, weight of high) of fractional input positions along an axis of `size`, clamped to its edges."""
    below = np.floor(position)
    low, high = np.clip(below, 0, size - 1), np.clip(below + 1, 0, size - 1)
    return low.astype(np.int64), high.astype(np.int64), np.clip(position - below, 0, 1)


GRID_SAMPLE_MODES = ("nearest", "linear", "cubic")
GRID_SAMPLE_PADDINGS = ("zeros", "border", "reflection")


def grid_sample(b: Builder, x: Value, grid: Value, mode: str, padding: str, align_corners: bool,
                onnx_order: bool = False) -> Value:
    """x [N, C, *spatial] read at the normalized positions of grid [N, *out, D] (last axis (x, y, ...), the
    fastest-varying spatial axis first; -1 and 1 are the edges, or the edge pixels' centres with
    `align_corners`), as torch's grid_sample and ONNX's GridSample: [N, C, *out].

    Each position's taps (1 nearest, 2 a dim linear, 4 a dim cubic with Keys' a = -0.75) are read by one gather
    each from the flattened x, their weights multiplied across dims. A tap outside the image reads 0 (`zeros`),
    the nearest edge pixel (`border`) or its mirror image (`reflection`). Before that, torch moves a linear or
    nearest position itself inside the image (clipped, or reflected then clipped) and rounds a nearest one after;
    ONNX (`onnx_order`) rounds first, and moves a position only when it lies past the edges; but a cubic one with
    `border` stays where it is and each tap is clipped, as onnxruntime and torch do (onnx's reference evaluator
    clips the position first: 0.07-0.2 from both on a random grid; no node test covers it)."""
    n, c, *spatial = x.type.shape
    dims = len(spatial)
    if any(isinstance(s, Sym) for s in (c, *spatial)) or grid.type.shape[-1] != dims or grid.type.rank != dims + 2:
        raise UnsupportedOpError(f"grid_sample of {x.type} at a grid {grid.type}: the channels and the image's "
                                 f"sizes must be known, and the grid's last axis must hold one coordinate per "
                                 f"spatial dim ({dims})", hint="export with a static image size")
    out = grid.type.shape[1:-1]
    f = grid if grid.type.dtype.name in ("f32", "f64") else b.op("rt.cast", [grid], {"dtype": "f32"})

    def const(value):
        return scalar(b, value, f)

    def reflect(p, size, around_centres):  # torch's reflect_coordinates: mirror images of [low, low + span]
        low, span = (0.0, size - 1.0) if around_centres else (-0.5, float(size))
        if span <= 0:
            return b.op("rt.mul", [p, const(0)])
        distance = b.op("rt.abs", [b.op("rt.sub", [p, const(low)])])
        flips = b.op("rt.floor", [b.op("rt.div", [distance, const(span)])])
        extra = b.op("rt.sub", [distance, b.op("rt.mul", [flips, const(span)])])
        odd = b.op("rt.sub", [flips, b.op("rt.mul", [b.op("rt.floor", [b.op("rt.mul", [flips, const(0.5)])]),
                                                     const(2)])])
        mirrored = b.op("rt.sub", [const(span), extra])
        even = b.op("rt.cmp", [odd, const(0)], {"predicate": "eq"})
        return b.op("rt.add", [b.op("rt.select", [even, extra, mirrored]), const(low)])

    def inside(p, size):  # moves a continuous position into the image, as `padding` says
        if padding == "border":
            return clamp(b, p, 0, size - 1)
        if padding == "reflection":
            return clamp(b, reflect(p, size, align_corners), 0, size - 1)
        return p

    def fetch_index(tap, size):  # (integer index inside the image, mask of taps inside it or None)
        if padding == "reflection":
            tap = reflect(tap, size, align_corners)
        if padding == "zeros":
            ok = b.op("rt.and", [b.op("rt.cmp", [tap, const(0)], {"predicate": "ge"}),
                                 b.op("rt.cmp", [tap, const(size - 1)], {"predicate": "le"})])
        else:
            ok = None
        index = b.op("rt.cast", [clamp(b, tap, 0, size - 1)], {"dtype": "i32"})
        return index, ok

    # per dim: the position, then its taps as (offset from the base, weight) pairs
    per_dim = []
    for d, size in enumerate(spatial):
        g = b.op("rt.slice", [f], {"start": (0,) * (dims + 1) + (dims - 1 - d,), "limit": (n, *out, dims - d),
                                   "stride": (1,) * (dims + 2)})
        g = b.op("rt.reshape", [g], {"shape": (n, *out)})
        if align_corners:
            p = b.op("rt.mul", [b.op("rt.add", [g, const(1)]), const((size - 1) / 2)])
        else:
            p = b.op("rt.mul", [b.op("rt.sub", [b.op("rt.mul", [b.op("rt.add", [g, const(1)]), const(size)]),
                                                 const(1)]), const(0.5)])
        if mode == "nearest" and onnx_order:
            p = b.op("rt.round", [p])
        if onnx_order and padding != "zeros" and (mode, padding) != ("cubic", "border"):  # see the docstring
            low, high = (0.0, size - 1.0) if align_corners else (-0.5, size - 0.5)
            past = b.op("rt.or", [b.op("rt.cmp", [p, const(low)], {"predicate": "lt"}),
                                  b.op("rt.cmp", [p, const(high)], {"predicate": "gt"})])
            p = b.op("rt.select", [past, inside(p, size) if padding == "border"
                                   else reflect(p, size, align_corners), p])
        elif not onnx_order and mode != "cubic":
            p = inside(p, size)
        if mode == "nearest":
            per_dim.append([(p if onnx_order else b.op("rt.round", [p]), None)])
            continue
        base = b.op("rt.floor", [p])
        t = b.op("rt.sub", [p, base])
        if mode == "linear":
            weights = [b.op("rt.sub", [const(1), t]), t]
        else:
            weights = [_keys_cubic(b, t, k, const) for k in range(4)]
        first = 0 if mode == "linear" else -1
        per_dim.append([(b.op("rt.add", [base, const(first + k)]), w) for k, w in enumerate(weights)])

    strides = [math.prod(spatial[d + 1:]) for d in range(dims)]
    image = math.prod(spatial)
    elements = n * c * image
    linear_type = index_type(elements)
    batch = b.op("rt.iota", [], {"shape": (n, c), "axis": 0, "dtype": linear_type})
    plane = b.op("rt.add", [b.op("rt.mul", [batch, scalar(b, c, batch)]),
                            b.op("rt.iota", [], {"shape": (n, c), "axis": 1, "dtype": linear_type})])
    plane = b.op("rt.reshape", [plane], {"shape": (n, c) + (1,) * len(out)})
    plane = b.op("rt.mul", [plane, scalar(b, image, plane)])
    flat = b.op("rt.reshape", [x], {"shape": (elements,)})
    total = None
    for taps in np.ndindex(*(len(t) for t in per_dim)):
        linear, weight, mask = plane, None, None
        for d, k in enumerate(taps):
            position, w = per_dim[d][k]
            index, ok = fetch_index(position, spatial[d])
            index = b.op("rt.reshape", [index], {"shape": (n, 1, *out)})
            index = _as_index(b, index, linear_type)
            if strides[d] != 1:
                index = b.op("rt.mul", [index, scalar(b, strides[d], index)])
            linear = b.op("rt.add", [linear, index])
            weight = w if weight is None or w is None else b.op("rt.mul", [weight, w])
            if ok is not None:
                mask = ok if mask is None else b.op("rt.and", [mask, ok])
        value = b.op("rt.gather", [flat, linear], {"axis": 0})
        if mask is not None:
            value = b.op("rt.select", [b.op("rt.reshape", [mask], {"shape": (n, 1, *out)}), value,
                                       scalar(b, 0, value)])
        if weight is not None:
            weight = b.op("rt.reshape", [weight], {"shape": (n, 1, *out)})
            if weight.type.dtype != value.type.dtype:
                weight = b.op("rt.cast", [weight], {"dtype": value.type.dtype.name})
            value = b.op("rt.mul", [value, weight])
        total = value if total is None else b.op("rt.add", [total, value])
    return total


def _keys_cubic(b: Builder, t: Value, k: int, const) -> Value:
    """Weight of tap k (at base - 1 + k) of the cubic convolution with a = -0.75 at fraction t, as torch's
    cubic_convolution1/2: near taps (|s| <= 1) ((a + 2) s - (a + 3)) s^2 + 1, far ones ((a s - 5a) s + 8a) s - 4a."""
    a = -0.75
    s = {0: b.op("rt.add", [t, const(1)]), 1: t, 2: b.op("rt.sub", [const(1), t]),
         3: b.op("rt.sub", [const(2), t])}[k]
    if k in (1, 2):
        inner = b.op("rt.sub", [b.op("rt.mul", [s, const(a + 2)]), const(a + 3)])
        return b.op("rt.add", [b.op("rt.mul", [b.op("rt.mul", [inner, s]), s]), const(1)])
    inner = b.op("rt.add", [b.op("rt.mul", [b.op("rt.sub", [b.op("rt.mul", [s, const(a)]), const(5 * a)]), s]),
                            const(8 * a)])
    return b.op("rt.sub", [b.op("rt.mul", [inner, s]), const(4 * a)])


SCATTER_REDUCTIONS = ("none", "sum", "prod", "max", "min", "mean")
# Comparisons (outputs x updates along the axis) past which a scatter is the `rt.scatter` kernel, linear in the
# updates, rather than the gather-shaped reduction (fast on GPUs while small, but quadratic).
SCATTER_KERNEL_PAIRS = 1 << 22
SCATTER_LIMIT = 1 << 31  # comparisons past which a gather-shaped scatter of sizes known only at run time is refused


def scatter_elements(b: Builder, data: Value, axis: int, index: Value, updates: Value, reduction: str = "none",
                     include_self: bool = True) -> Value:
    """torch's scatter / scatter_reduce and ONNX's ScatterElements: data with updates[..., k, ...] written to
    (or combined into) position index[..., k, ...] along `axis`. `index` and `updates` have data's rank, no
    dim past data's (a smaller one leaves the rest of data as is); updates past index's extent are unused;
    negative indices count from the end. With `reduction` "none" a position written twice keeps the last
    update in index order (as onnx's reference and torch's CPU kernel do); otherwise the updates meeting there
    are summed, multiplied, or their max, min or mean taken, with data's value unless not `include_self`."""
    rank, axis = data.type.rank, normalize_axis(axis, data.type.rank)
    beside = [(i, d) for k, (i, d) in enumerate(zip(index.type.shape, data.type.shape)) if k != axis]
    if index.type.rank != rank or isinstance(data.type.shape[axis], Sym) or isinstance(index.type.shape[axis], Sym) \
            or any((isinstance(i, Sym) or isinstance(d, Sym)) and i != d for i, d in beside):
        raise UnsupportedOpError(f"a scatter of {index.type} indices into {data.type} along axis {axis}: index needs "
                                 "data's rank, sizes along the axis known when compiling, and beside it the data's "
                                 "sizes where those are known only at run time", hint="export with static sizes")
    if any(i > d for i, d in beside if not isinstance(i, Sym)):
        raise UnsupportedOpError(f"a scatter index {index.type} is larger than data {data.type} beside axis {axis}")
    if updates.type.shape != index.type.shape:
        updates = b.op("rt.slice", [updates], {"start": (0,) * rank, "limit": index.type.shape,
                                               "stride": (1,) * rank})
    perm = tuple(d for d in range(rank) if d != axis) + (axis,)
    last = [b.op("rt.transpose", [v], {"perm": perm}) if perm != tuple(range(rank)) else v
            for v in (data, index, updates)]
    size = data.type.shape[axis]
    wanted = last[0].type.shape[:-1]
    lead = last[1].type.shape[:-1]
    index, updates = wrap_negative(b, _as_index(b, last[1], index_type(size)), size), last[2]
    if lead != wanted:  # past index's extent nothing is written: indices there (-1) match no position
        index = b.op("rt.pad", [index], {"low": (0,) * rank, "high": tuple(w - s for w, s in zip(wanted, lead)) + (0,),
                                         "value": -1})
        updates = b.op("rt.pad", [updates], {"low": (0,) * rank,
                                             "high": tuple(w - s for w, s in zip(wanted, lead)) + (0,), "value": 0})
    out = _scatter_along_last(b, last[0], index, updates, reduction, include_self)
    inverse = tuple(int(i) for i in np.argsort(perm))
    return b.op("rt.transpose", [out], {"perm": inverse}) if perm != tuple(range(rank)) else out


def _scatter_along_last(b: Builder, data: Value, index: Value, updates: Value, reduction: str,
                        include_self: bool) -> Value:
    """data [..., P] with updates [..., K] at index [..., K] (the leading dims data's, or 1 to broadcast) along
    the last axis; an index outside [0, P) writes nothing. Deterministic and free of atomics either way. Up to
    SCATTER_KERNEL_PAIRS comparisons (P x K a row), gather-shaped: each output position compares every index of
    its row, in one reduction whose compare and select fuse into it. Past that `rt.scatter`, whose cost is
    linear in the updates (`_scatter_kernel`), where the sizes are static; with sizes known only at run time the
    gather-shaped form, up to SCATTER_LIMIT comparisons at the symbols' bounds."""
    size, count = data.type.shape[-1], index.type.shape[-1]
    if reduction not in SCATTER_REDUCTIONS:
        raise UnsupportedOpError(f"scatter reduction '{reduction}' is not supported ({', '.join(SCATTER_REDUCTIONS)} "
                                 "are)")
    if reduction == "mean" and data.type.dtype.kind != "float":
        raise UnsupportedOpError("a scatter's mean of integers is not supported (of floats it is)")
    _, pairs = bounds(math.prod(data.type.shape) * count, b.fn.symbols)
    static = all(isinstance(d, int) for d in (*data.type.shape, *index.type.shape, *updates.type.shape))
    if static and pairs > SCATTER_KERNEL_PAIRS:
        return _scatter_kernel(b, data, index, updates, reduction, include_self)
    if pairs is None or pairs > SCATTER_LIMIT:  # rt.scatter is lowered for static sizes only, so far
        many = "an unbounded number of" if pairs is None else pairs
        raise UnsupportedOpError(f"a scatter of {count} updates into {data.type} along its last axis, with sizes "
                                 f"known only at run time, compares {many} pairs, past the {SCATTER_LIMIT} supported",
                                 hint="bound the symbol's range, or scatter into a tensor of static shape")
    dtype = index.type.dtype.name
    rank = data.type.rank
    columns = index.type.shape[:-1] + (1, count)
    index = b.op("rt.reshape", [index], {"shape": columns})
    position = b.op("rt.iota", [], {"shape": (size, 1), "axis": 0, "dtype": dtype})
    hit = b.op("rt.cmp", [index, position], {"predicate": "eq"})  # [..., P, K]
    along = (rank,)
    if reduction == "none":
        k = b.op("rt.iota", [], {"shape": (1, count), "axis": 1, "dtype": dtype})
        latest = b.op("rt.reduce", [b.op("rt.select", [hit, k, scalar(b, -1, k)])], {"kind": "max", "axes": along})
        found = b.op("rt.cmp", [latest, scalar(b, 0, latest)], {"predicate": "ge"})
        lead = data.type.shape[:-1]
        if updates.type.shape[:-1] != lead:
            updates = b.op("rt.broadcast", [updates], {"shape": lead + updates.type.shape[-1:]})
        slot = b.op("rt.max", [latest, scalar(b, 0, latest)])
        if slot.type.shape != data.type.shape:
            slot = b.op("rt.broadcast", [slot], {"shape": data.type.shape})
        written = take_along_axis(b, updates, slot, rank - 1)
        return b.op("rt.select", [found, written, data])
    kind = {"sum": "sum", "mean": "sum", "prod": "prod", "max": "max", "min": "min"}[reduction]
    identity = _identity(kind, data.type.dtype)
    spread_updates = b.op("rt.reshape", [updates], {"shape": updates.type.shape[:-1] + (1, count)})
    combined = b.op("rt.reduce", [b.op("rt.select", [hit, spread_updates, scalar(b, identity, updates)])],
                    {"kind": kind, "axes": along})
    if reduction == "mean":
        hits = b.op("rt.reduce", [b.op("rt.select", [hit, scalar(b, 1, data), scalar(b, 0, data)])],
                    {"kind": "sum", "axes": along})
        if include_self:
            total, hits = b.op("rt.add", [combined, data]), b.op("rt.add", [hits, scalar(b, 1, hits)])
            return b.op("rt.div", [total, hits])
        some = b.op("rt.cmp", [hits, scalar(b, 0, hits)], {"predicate": "gt"})
        return b.op("rt.select", [some, b.op("rt.div", [combined, b.op("rt.max", [hits, scalar(b, 1, hits)])]),
                                  data])
    if include_self:
        return b.op({"sum": "rt.add", "prod": "rt.mul", "max": "rt.max", "min": "rt.min"}[kind], [data, combined])
    some = b.op("rt.reduce", [hit], {"kind": "or", "axes": along})
    return b.op("rt.select", [some, combined, data])


def _scatter_kernel(b: Builder, data: Value, index: Value, updates: Value, reduction: str,
                    include_self: bool) -> Value:
    """A scatter as `rt.scatter`: index [..., K] addresses the axis of data [..., P, T...] at index's rank, each
    index moving a whole row of the trailing dims T (none for `_scatter_along_last`; index_put's rows and
    embedding_bag's have some); index and updates broadcast to data's leading dims. A mean is a sum divided by
    the counts of a scatter of ones; without `include_self` the updates combine into the reduction's identity,
    and positions that a scatter of ones marks untouched keep data."""
    axis = index.type.rank - 1
    lead, plane, tail = data.type.shape[:axis], data.type.shape[:axis + 1], data.type.shape[axis + 1:]
    count = index.type.shape[-1]
    if index.type.shape[:-1] != lead:
        index = b.op("rt.broadcast", [index], {"shape": lead + (count,)})
    if updates.type.shape != lead + (count,) + tail:
        updates = b.op("rt.broadcast", [updates], {"shape": lead + (count,) + tail})

    def scatter(into: Value, values: Value, kind: str) -> Value:
        return b.op("rt.scatter", [into, index, values], {"reduction": kind})

    def filled(value, like: Value, shape) -> Value:
        return b.op("rt.broadcast", [scalar(b, value, like)], {"shape": shape})

    def per_position(counts: Value) -> Value:  # [..., P] -> data's shape, the same over T
        if not tail:
            return counts
        spread = b.op("rt.reshape", [counts], {"shape": plane + (1,) * len(tail)})
        return b.op("rt.broadcast", [spread], {"shape": data.type.shape})

    kind = "sum" if reduction == "mean" else reduction
    if reduction == "mean":
        ones = filled(1, data, index.type.shape)
        if include_self:  # each position's count starts at 1, for data's own value
            sizes = per_position(scatter(filled(1, data, plane), ones, "sum"))
            return b.op("rt.div", [scatter(data, updates, "sum"), sizes])
        hits = per_position(scatter(filled(0, data, plane), ones, "sum"))
        total = scatter(filled(0, data, data.type.shape), updates, "sum")
        some = b.op("rt.cmp", [hits, scalar(b, 0, hits)], {"predicate": "gt"})
        return b.op("rt.select", [some, b.op("rt.div", [total, b.op("rt.max", [hits, scalar(b, 1, hits)])]), data])
    if include_self or reduction == "none":
        return scatter(data, updates, kind)
    combined = scatter(filled(_identity(kind, data.type.dtype), data, data.type.shape), updates, kind)
    flag = b.constant(np.array(0, np.int32))
    touched = per_position(scatter(b.op("rt.broadcast", [flag], {"shape": plane}), filled(1, flag, index.type.shape),
                                   "max"))
    some = b.op("rt.cmp", [touched, scalar(b, 0, touched)], {"predicate": "gt"})
    return b.op("rt.select", [some, combined, data])


def _identity(kind: str, dtype):
    """What a sum, product, max or min starts from."""
    return {"sum": 0, "prod": 1, "max": extreme(dtype, low=True), "min": extreme(dtype, low=False)}[kind]


def extreme(dtype, low: bool):
    """The least (or greatest) value of a graph element type: the identity of a max (or min)."""
    if dtype.kind == "float":
        return -np.inf if low else np.inf
    if dtype.kind == "bool":
        return not low
    info = np.iinfo(dtype.np_dtype)
    return info.min if low else info.max


def scatter_nd(b: Builder, data: Value, indices: Value, updates: Value, reduction: str = "none") -> Value:
    """ONNX's ScatterND, and torch's index_put with index tensors for data's leading dims: indices [..., q]
    address data's first q dims (negative ones count from the end), updates [..., rest of data's dims]. The
    addressed dims are merged, and each index tuple becomes one position along them. The count of tuples may be known
    only at run time (a NonZero's indices: `x[mask] = v` as exporters write it); then the scatter stays
    gather-shaped."""
    q = indices.type.shape[-1]
    shape = data.type.shape
    if isinstance(q, Sym) or q > len(shape) or any(isinstance(d, Sym) for d in shape[:q]):
        raise UnsupportedOpError(f"a scatter of {indices.type} index tuples into {data.type}: the indices' sizes "
                                 "and the indexed dims must be known when compiling, and a tuple at most data's rank "
                                 "long", hint="export with static sizes")
    dtype = index_type(math.prod(shape[:q]))
    linear = None
    for j in range(q):
        part = b.op("rt.slice", [indices], {"start": (0,) * (indices.type.rank - 1) + (j,),
                                            "limit": indices.type.shape[:-1] + (j + 1,),
                                            "stride": (1,) * indices.type.rank})
        part = wrap_negative(b, _as_index(b, part, dtype), shape[j])
        stride = math.prod(shape[j + 1:q])
        term = part if stride == 1 else b.op("rt.mul", [part, scalar(b, stride, part)])
        linear = term if linear is None else b.op("rt.add", [linear, term])
    tuples = math.prod(indices.type.shape[:-1])
    rest = shape[q:]
    flat = b.op("rt.reshape", [data], {"shape": (math.prod(shape[:q]),) + rest})
    if rest and all(isinstance(d, int) for d in rest) and isinstance(tuples, int) \
            and math.prod(shape) * tuples > SCATTER_KERNEL_PAIRS \
            and reduction in SCATTER_REDUCTIONS:  # whole rows of `rest` a tuple, contiguous, no transposes
        values = b.op("rt.reshape", [updates], {"shape": (tuples,) + rest})
        linear = b.op("rt.reshape", [linear], {"shape": (tuples,)})
        out = _scatter_kernel(b, flat, linear, values, reduction, True)
        return b.op("rt.reshape", [out], {"shape": shape})
    linear = b.op("rt.reshape", [linear], {"shape": (1,) * len(rest) + (tuples,)})
    moved = tuple(range(1, len(rest) + 1)) + (0,)
    values = b.op("rt.reshape", [updates], {"shape": (tuples,) + rest})
    values = b.op("rt.transpose", [values], {"perm": moved}) if rest else values
    target = b.op("rt.transpose", [flat], {"perm": moved}) if rest else flat
    out = _scatter_along_last(b, target, linear, values, reduction, True)
    if rest:
        out = b.op("rt.transpose", [out], {"perm": (len(rest),) + tuple(range(len(rest)))})
    return b.op("rt.reshape", [out], {"shape": shape})


@dataclass(frozen=True)
class PoolWindows:
    """A max pool's windows, and how its indices number positions (`max_pool_indices`): what an importer records
    for each indices value a pool of its graph makes, so that `max_unpool` can read each position's own window."""

    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    begin: tuple[int, ...]  # pads before each spatial dim
    end: tuple[int, ...]  # pads after it, as the pool states them (ceil_mode's extra ones not counted)
    image: tuple  # the pool input's spatial sizes, in which an index is a flat position
    plane_offset: bool  # numbered over the whole tensor (ONNX), else within each (n, c) plane (torch)
    column_major: bool

    def with_unit_dims(self, count: int) -> PoolWindows:
        """The same windows over the image with `count` trailing spatial dims of size 1 (torch's max_unpool1d
        unpools a 1-D pool's indices, unsqueezed, as 2-D): every index stays the same."""
        one, zero = (1,) * count, (0,) * count
        return replace(self, kernel=self.kernel + one, strides=self.strides + one, dilations=self.dilations + one,
                       begin=self.begin + zero, end=self.end + zero, image=self.image + one)


def max_unpool(b: Builder, x: Value, indices: Value, size, *, plane_offset: bool,
               windows: PoolWindows | None = None) -> Value:
    """Max unpooling: zeros [N, C, *size], with x [N, C, spatial...] written at `indices` (x's shape), flat positions
    within each (n, c) plane, row-major (torch's, as `max_pool_indices` gives them), or over the whole tensor with
    `plane_offset` (ONNX's: the plane's offset (n * C + c) * plane size included).

    Where `windows` says the indices are a max pool's whose windows do not overlap (and `_in_own_windows` the rest),
    each output position can only receive x at its own window: one read of x and of indices there, and a
    comparison (`_unpool_in_own_windows`), linear in the output. Otherwise the composed scatter along the flattened
    plane (`_scatter_along_last`): deterministic, the last of x's values winning where indices repeat (a max
    pool's repeat with equal values); quadratic (plane size x x's plane size comparisons per plane) while small,
    past SCATTER_KERNEL_PAIRS the `rt.scatter` kernel, linear in x. Either way an index outside its own plane
    writes nothing: torch raises on one, which would need a check at run time; ONNX leaves it undefined."""
    size = tuple(size)
    if windows is not None and _in_own_windows(windows, x, indices, size, plane_offset):
        return _unpool_in_own_windows(b, x, indices, size, windows)
    n, c = x.type.shape[:2]
    rows, count, positions = n * c, math.prod(x.type.shape[2:]), math.prod(size)
    index = b.op("rt.reshape", [indices], {"shape": (rows, count)})
    if plane_offset:
        plane = b.op("rt.iota", [], {"shape": (rows, 1), "axis": 0, "dtype": index.type.dtype.name})
        index = b.op("rt.sub", [index, b.op("rt.mul", [plane, scalar(b, positions, plane)])])
    # out-of-range indices (-1 or `positions`, after the clamp) match no position, in the narrowest index type
    index = _as_index(b, clamp(b, index, -1, positions), index_type(positions + 1))
    updates = b.op("rt.reshape", [x], {"shape": (rows, count)})
    zeros = b.op("rt.broadcast", [scalar(b, 0, x)], {"shape": (rows, positions)})
    out = _scatter_along_last(b, zeros, index, updates, "none", True)
    return b.op("rt.reshape", [out], {"shape": (n, c, *size)})


def _in_own_windows(windows: PoolWindows, x: Value, indices: Value, size: tuple, plane_offset: bool) -> bool:
    """True where every index lies in its own window and no other window holds that position, so that output
    position p can only receive x at window (p + begin) // stride: the windows do not overlap (a span of at most
    the stride), each holds a position of the image (which `max_pool_indices` then picks), x and indices are the
    pool's shape, known when compiling, and `size` numbers positions as the pool did. That is row-major, the same
    sizes but the first (within a plane a larger or smaller first dim moves no index), or all the same where the
    numbering runs over the whole tensor."""
    spatial = x.type.shape[2:]
    if len(windows.kernel) != len(spatial) or len(size) != len(spatial) or indices.type.shape != x.type.shape \
            or windows.column_major or windows.plane_offset != plane_offset \
            or not all(isinstance(d, int) for d in (*x.type.shape, *size, *windows.image)):
        return False
    if size[1:] != windows.image[1:] or (plane_offset and size[0] != windows.image[0]):
        return False
    for k, s, dil, lo, image, count in zip(windows.kernel, windows.strides, windows.dilations, windows.begin,
                                           windows.image, spatial, strict=True):
        taps = np.arange(count)[:, None] * s - lo + np.arange(k) * dil
        if dil * (k - 1) + 1 > s or not ((taps >= 0) & (taps < image)).any(axis=1).all():
            return False
    return True


def _unpool_in_own_windows(b: Builder, x: Value, indices: Value, size: tuple, windows: PoolWindows) -> Value:
    """out[p] = x[w] where indices[w] is p's flat position, else 0, with w = (p + begin) // stride a dim, clamped
    into x (a position past every window compares with a window that does not hold it, so gets 0). x and indices
    are read at w as nearest upsampling reads (`resample`); the reads, the comparison and the select fuse into
    one kernel, linear in the output."""
    for d, (extent, s, lo, count) in enumerate(zip(size, windows.strides, windows.begin, x.type.shape[2:],
                                                   strict=True)):
        window = np.clip((np.arange(extent) + lo) // s, 0, count - 1)
        if not np.array_equal(window, np.arange(count)):
            x, indices = (resample(b, v, 2 + d, window) for v in (x, indices))
    step = [math.prod(size[d + 1:]) for d in range(len(size))]
    position = _flat_positions(b, [np.arange(extent) * st for extent, st in zip(size, step, strict=True)],
                               x.type.shape[:2] if windows.plane_offset else None, math.prod(size))
    hit = b.op("rt.cmp", [_as_index(b, indices, "i64"), position], {"predicate": "eq"})
    return b.op("rt.select", [hit, x, scalar(b, 0, x)])


def embedding_bag(b: Builder, weight: Value, indices: Value, offsets: Value, mode: str,
                  per_sample_weights: Value | None = None, include_last_offset: bool = False,
                  padding_idx: int | None = None) -> Value:
    """torch's EmbeddingBag: weight's rows at the 1-D `indices`, summed (`mode` "sum", each scaled by its
    per-sample weight), averaged ("mean") or their max taken ("max") within each bag; bag k holds positions
    offsets[k] up to the next offset (with `include_last_offset` the last offset ends the last bag). Rows at
    `padding_idx` count in no bag; an empty bag gives zeros. One `rt.segment_reduce` a result: each bag reads
    only its own rows, whose bounds are the offsets themselves, so offsets may be inputs and the cost is linear
    in the rows."""
    (count,), (bags,) = indices.type.shape, offsets.type.shape
    if include_last_offset:
        bags -= 1
    rows = b.op("rt.gather", [weight, indices], {"axis": 0})  # [L, D]
    if per_sample_weights is not None:
        rows = b.op("rt.mul", [rows, b.op("rt.reshape", [per_sample_weights], {"shape": (count, 1)})])
    starts = _as_index(b, offsets, "i32")
    begin = b.op("rt.slice", [starts], {"start": (0,), "limit": (bags,), "stride": (1,)})
    end = b.op("rt.slice", [starts], {"start": (1,), "limit": (bags + 1 if include_last_offset else bags,),
                                      "stride": (1,)})
    if not include_last_offset:  # the last bag runs to the end
        end = b.op("rt.concat", [end, b.op("rt.reshape", [size_value(b, count, "i32")], {"shape": (1,)})],
                   {"axis": 0})

    def per_bag(values: Value, kind: str) -> Value:
        return b.op("rt.segment_reduce", [values, begin, end], {"kind": kind})

    kept = None
    if padding_idx is not None:
        kept = b.op("rt.reshape", [b.op("rt.cmp", [indices, b.constant(np.array(padding_idx,
                                                                                  indices.type.dtype.np_dtype))],
                                        {"predicate": "ne"})], {"shape": (count, 1)})
    if mode == "sum":
        return per_bag(rows if kept is None else b.op("rt.select", [kept, rows, scalar(b, 0, rows)]), "sum")
    one = b.op("rt.broadcast", [scalar(b, 1, rows)], {"shape": (count, 1)})
    sizes = per_bag(one if kept is None else b.op("rt.select", [kept, one, scalar(b, 0, rows)]), "sum")  # [B, 1]
    if mode == "max":
        lowest = scalar(b, extreme(rows.type.dtype, low=True), rows)
        best = per_bag(rows if kept is None else b.op("rt.select", [kept, rows, lowest]), "max")
        some = b.op("rt.cmp", [sizes, scalar(b, 0, sizes)], {"predicate": "gt"})
        return b.op("rt.select", [some, best, scalar(b, 0, best)])
    total = per_bag(rows if kept is None else b.op("rt.select", [kept, rows, scalar(b, 0, rows)]), "sum")
    return b.op("rt.div", [total, b.op("rt.max", [sizes, scalar(b, 1, sizes)])])


def slice_scatter(b: Builder, x: Value, src: Value, axis: int, start: int, end: int, step: int = 1) -> Value:
    """x with x[start:end:step] along `axis` replaced by src (torch's slice_scatter): a gather of src at each
    position's slot, chosen where a slot lands."""
    size = x.type.shape[axis]
    if isinstance(size, Sym):
        raise UnsupportedOpError(f"slice_scatter along an axis of size {size}, known only at run time",
                                 hint="export with a static size for that axis")
    start, end, _ = slice(start, end, step).indices(size)
    positions = np.arange(size)
    slot = (positions - start) // step
    inside = (positions >= start) & (positions < end) & ((positions - start) % step == 0)
    if inside.all() and src.type.shape == x.type.shape:
        return src
    if src.type.dtype != x.type.dtype:
        src = b.op("rt.cast", [src], {"dtype": x.type.dtype.name})
    taken = b.op("rt.gather", [src, b.constant(np.clip(slot, 0, max(src.type.shape[axis] - 1, 0)).astype(np.int32))],
                 {"axis": axis})
    mask = inside.reshape([size if d == axis else 1 for d in range(x.type.rank)])
    return b.op("rt.select", [b.constant(mask), taken, x])


def masked_scatter(b: Builder, x: Value, mask: Value, source: Value) -> Value:
    """torch's masked_scatter: x where `mask` (broadcast to x) is false; where it is true, in row-major order, the
    k-th such position takes source's k-th element (source read flattened). k is the mask's exclusive running
    count (`cumulative_sum`); a gather of source there and a select. Static shapes."""
    shape = x.type.shape
    if any(isinstance(d, Sym) for d in (*shape, *source.type.shape)):
        raise UnsupportedOpError(f"masked_scatter into {x.type} from {source.type}, sizes known only at run time",
                                 hint="export with static shapes")
    count, available = math.prod(shape), math.prod(source.type.shape)
    if available == 0 or count == 0:  # then torch requires a mask with nothing true
        return x
    if mask.type.shape != shape:
        mask = b.op("rt.broadcast", [mask], {"shape": shape})
    flat_mask = b.op("rt.reshape", [mask], {"shape": (count,)})
    taken = cumulative_sum(b, b.op("rt.cast", [flat_mask], {"dtype": "i32"}), 0, exclusive=True)
    taken = b.op("rt.min", [taken, scalar(b, available - 1, taken)])  # past the last true position: unread
    values = b.op("rt.gather", [b.op("rt.reshape", [source], {"shape": (available,)}), taken], {"axis": 0})
    flat = b.op("rt.select", [flat_mask, values, b.op("rt.reshape", [x], {"shape": (count,)})])
    return b.op("rt.reshape", [flat], {"shape": shape})


def reverse(b: Builder, x: Value, axes) -> Value:
    """x with `axes` reversed: a gather of the reversed indices along each (size - 1 - iota where the size is known
    only at run time)."""
    for axis in axes:
        size = x.type.shape[axis]
        if isinstance(size, Sym):
            iota = b.op("rt.iota", [], {"shape": (size,), "axis": 0, "dtype": "i32"})
            index = b.op("rt.sub", [size_value(b, size - 1, "i32"), iota])
            x = b.op("rt.gather", [x, index], {"axis": axis})
        elif size > 1:
            x = b.op("rt.gather", [x, b.constant(np.arange(size - 1, -1, -1, dtype=np.int32))], {"axis": axis})
    return x


def spread(b: Builder, x: Value, interior, value=0) -> Value:
    """`interior[d]` copies of `value` after each element along each axis d, the last one's included:
    pad a unit axis after each spread one, and merge."""
    if not any(interior):
        return x
    lifted, padded, merged = [], [], []
    for size, k in zip(x.type.shape, interior):
        lifted += [size, 1] if k else [size]
        padded += [0, k] if k else [0]
        merged.append(size * (k + 1) if k else size)
    y = b.op("rt.pad", [b.op("rt.reshape", [x], {"shape": tuple(lifted)})],
             {"low": (0,) * len(lifted), "high": tuple(padded), "value": value})
    return b.op("rt.reshape", [y], {"shape": tuple(merged)})


def dilate(b: Builder, x: Value, interior, value=0) -> Value:
    """`interior[d]` copies of `value` between neighbours along each axis d (StableHLO's interior padding,
    an input dilation of interior + 1): spread, then drop the tail."""
    if not any(interior):
        return x
    y = spread(b, x, interior, value)
    limit = tuple((size - 1) * (k + 1) + 1 if size else 0 for size, k in zip(x.type.shape, interior))
    return b.op("rt.slice", [y], {"start": (0,) * len(limit), "limit": limit, "stride": (1,) * len(limit)})


def pad_signed(b: Builder, x: Value, low, high, value=0) -> Value:
    """Edge padding where a negative amount crops."""
    low, high = list(low), list(high)
    if any(v < 0 for v in low + high):
        start = [max(-v, 0) for v in low]
        limit = [s - max(-v, 0) for s, v in zip(x.type.shape, high)]
        x = b.op("rt.slice", [x], {"start": tuple(start), "limit": tuple(limit), "stride": (1,) * x.type.rank})
        low, high = [max(v, 0) for v in low], [max(v, 0) for v in high]
    if not any(low + high):
        return x
    return b.op("rt.pad", [x], {"low": tuple(low), "high": tuple(high), "value": value})


# Sorting counts, for each element, the elements that come before it: n * n comparisons a row, which only
# pay off on short axes (a 4096 axis is 16M comparisons a row); longer ones are refused, not run slowly.
SORT_AXIS_LIMIT = 4096


def _dynamic_axis_lowest(b: Builder, n, limit: int, what: str, otherwise: str) -> int:
    """The least size of an axis of `n` elements; an UnsupportedOpError, saying how to bound it, where `n` is known
    only at run time and its symbols' ranges let it pass `limit`."""
    lowest, highest = bounds(n, b.fn.symbols)
    if isinstance(n, Sym) and (highest is None or highest > limit):
        raise UnsupportedOpError(
            f"{what} along an axis whose size ({n}) is known only at run time, and may be more than {limit}"
            + ("" if highest is None else f" (up to {highest})"),
            hint=f"bound the symbol so that the axis has at most {limit} elements (torch.export.Dim's max; for "
                 f"ONNX, --dim NAME=1..N or dims=), or {otherwise}")
    return lowest


def _min_with(k, n) -> bool:
    """Whether size `k` is min(n, something): at most n whatever the symbols (a detector's k = min(count, 100))."""
    if not isinstance(k, Sym) or len(k.terms) != 1:
        return False
    (atoms, coefficient), = k.terms
    return coefficient == 1 and len(atoms) == 1 and isinstance(atoms[0], Min) and n in (atoms[0].a, atoms[0].b)


def sort(b: Builder, x: Value, axis: int, descending: bool = False, k: int | None = None) -> tuple[Value, Value]:
    """(values, int64 indices) of the first `k` (default: all) elements of `x` sorted along `axis`, as torch's
    stable sort orders them: equal elements keep their order, NaN is larger than every number. No sort op:
    element i's place is its rank, the count of elements before it (smaller ones, or equal ones at j < i),
    which is a permutation even with ties; the index at place p is sum_i i * (rank_i == p), and the values
    are x read there. Each is one reduction over an [.., n, n] (or [.., k, n]) elementwise compare, and every
    value in them is used once, so each fuses into one kernel (`passes/dispatch.py`): three kernels in all."""
    from ..errors import UnsupportedOpError

    shape = x.type.shape
    n = shape[axis]
    k = n if k is None else k
    lowest = _dynamic_axis_lowest(b, n, SORT_AXIS_LIMIT, "sorting", "sort along an axis of static size")
    if isinstance(n, Sym) and k != n and not (isinstance(k, int) and 0 <= k <= lowest) and not _min_with(k, n):
        raise UnsupportedOpError(f"the top {k} of an axis of {n} elements (at least {lowest}) is not supported: "
                                 "at its smallest sizes there are fewer than k",
                                 hint=f"raise the symbol's lower bound to {k} (torch.export.Dim's min), or take "
                                      "k of at most the axis's smallest size")
    if isinstance(n, int) and n > SORT_AXIS_LIMIT:
        raise UnsupportedOpError(
            f"sorting an axis of {n} elements is not supported: sort and topk compare every pair of elements "
            f"along the axis (n * n a row), so the axis is limited to {SORT_AXIS_LIMIT}",
            hint=f"sort or take the top k over axes of at most {SORT_AXIS_LIMIT} elements, or run this op on the "
                 "CPU (--fallback llvm-cpu)")
    if isinstance(n, int) and not (isinstance(k, int) and 0 <= k <= n):
        raise UnsupportedOpError(f"k = {k} is out of range for an axis of {n} elements")
    rank = _stable_ranks(b, x, axis, descending)
    # the index at each place p < k: an [.., k, n] compare of the ranks with p, reduced over i
    inner = (1,) * (len(shape) - axis - 1)
    rank = b.op("rt.reshape", [rank], {"shape": shape[:axis] + (1,) + shape[axis:]})
    place, i = (b.op("rt.iota", [], {"shape": (k, n) + inner, "axis": a, "dtype": "i32"}) for a in (0, 1))
    chosen = b.op("rt.select", [b.op("rt.cmp", [rank, place], {"predicate": "eq"}), i, scalar(b, 0, i)])
    index = b.op("rt.reduce", [chosen], {"kind": "sum", "axes": (axis + 1,), "keepdims": False})
    index = b.op("rt.cast", [index], {"dtype": "i64"})
    return take_along_axis(b, x, b.op("rt.cast", [index], {"dtype": "i32"}), axis), index


def _stable_ranks(b: Builder, x: Value, axis: int, descending: bool) -> Value:
    """Each element's place (i32, x's shape) in x stably sorted along `axis` (`sort`): the count of elements
    before it, smaller ones (larger, `descending`), NaN larger than every number, or equal ones at j < i."""
    shape, n = x.type.shape, x.type.shape[axis]
    keys = b.op("rt.cast", [x], {"dtype": "i32"}) if x.type.dtype.kind == "bool" else x
    inner = (1,) * (len(shape) - axis - 1)  # the axes after `axis`, which the [n, n] iotas broadcast over
    mine = b.op("rt.reshape", [keys], {"shape": shape[:axis + 1] + (1,) + shape[axis + 1:]})  # i at axis
    other = b.op("rt.reshape", [keys], {"shape": shape[:axis] + (1,) + shape[axis:]})  # j at axis + 1

    def compare(a, c, predicate):
        return b.op("rt.cmp", [a, c], {"predicate": predicate})

    before = compare(other, mine, "gt" if descending else "lt")
    equal = compare(other, mine, "eq")
    if keys.type.dtype.is_float:  # NaN is larger than every number, and equal to NaN
        larger, smaller = (other, mine) if descending else (mine, other)
        nan_first = b.op("rt.and", [compare(larger, larger, "ne"), compare(smaller, smaller, "eq")])
        before = b.op("rt.or", [before, nan_first])
        both_nan = b.op("rt.and", [compare(other, other, "ne"), compare(mine, mine, "ne")])
        equal = b.op("rt.or", [equal, both_nan])
    i, j = (b.op("rt.iota", [], {"shape": (n, n) + inner, "axis": a, "dtype": "i32"}) for a in (0, 1))
    counted = b.op("rt.or", [before, b.op("rt.and", [equal, compare(j, i, "lt")])])
    return b.op("rt.reduce", [b.op("rt.cast", [counted], {"dtype": "i32"})],
                {"kind": "sum", "axes": (axis + 1,), "keepdims": False})


def kth_smallest(b: Builder, x: Value, axis: int, k: int, keepdims: bool = False) -> tuple[Value, Value]:
    """(value, int64 index) at place k (from 0) of x sorted ascending along `axis` as `sort` sorts it (NaN larger
    than every number, equal values in their order along the axis): torch's kthvalue (place k - 1), and its lower
    median. The ranks of `sort` (n * n comparisons a row), then one reduction over the axis for the place, not
    the [k, n] one of a sort's first k."""
    n = x.type.shape[axis]
    if isinstance(n, Sym) or n > SORT_AXIS_LIMIT:
        raise UnsupportedOpError(f"the k-th smallest of an axis of {n} elements: it compares every pair of elements "
                                 f"along the axis, so the axis must be static and at most {SORT_AXIS_LIMIT} long",
                                 hint="export with a static size for that axis, at most "
                                      f"{SORT_AXIS_LIMIT}, or run this op on the CPU (--fallback llvm-cpu)")
    if not 0 <= k < n:
        raise UnsupportedOpError(f"place {k} is out of range for an axis of {n} elements")
    rank = _stable_ranks(b, x, axis, False)
    position = b.op("rt.iota", [], {"shape": x.type.shape, "axis": axis, "dtype": "i32"})
    chosen = b.op("rt.select", [b.op("rt.cmp", [rank, scalar(b, k, rank)], {"predicate": "eq"}), position,
                                scalar(b, 0, position)])
    index = b.op("rt.reduce", [chosen], {"kind": "sum", "axes": (axis,), "keepdims": True})
    value = take_along_axis(b, x, index, axis)
    if not keepdims:
        shape = x.type.shape[:axis] + x.type.shape[axis + 1:]
        value, index = (b.op("rt.reshape", [v], {"shape": shape}) for v in (value, index))
    return value, b.op("rt.cast", [index], {"dtype": "i64"})


def search_sorted(b: Builder, sorted_values: Value, x: Value, right: bool = False, sorter: Value | None = None,
                  dtype: str = "i64") -> Value:
    """torch's searchsorted and bucketize: for each element v of x, the first position along sorted_values' last
    axis whose value is >= v (> v with `right`), read through `sorter` (positions that sort it) if given. One
    sequence [N] for all of x, or one a row ([..., N] against x [..., M]). As torch's CPU kernel, a binary search:
    it moves right past a position unless that value is >= v (> v), so a NaN v lands at N and NaNs in the sequence
    count as its search meets them. floor(log2(N)) + 1 halvings, unrolled: a gather and a few compares each."""
    n = sorted_values.type.shape[-1]
    if isinstance(n, Sym):
        raise UnsupportedOpError(f"searching a sorted sequence of {n} values, a length known only at run time",
                                 hint="export with a static length for the sorted sequence")
    start = b.op("rt.broadcast", [b.constant(np.array(0, np.int32))], {"shape": x.type.shape})
    end = b.op("rt.broadcast", [b.constant(np.array(n, np.int32))], {"shape": x.type.shape})
    rows = sorted_values.type.rank > 1

    def read(source: Value, position: Value) -> Value:
        if rows:
            return take_along_axis(b, source, position, source.type.rank - 1)
        return b.op("rt.gather", [source, position], {"axis": 0})

    for _ in range(n.bit_length()):
        active = b.op("rt.cmp", [start, end], {"predicate": "lt"})
        middle = b.op("rt.add", [start, b.op("rt.div", [b.op("rt.sub", [end, start]), scalar(b, 2, start)])])
        at = b.op("rt.min", [middle, scalar(b, n - 1, middle)])  # an inactive search reads, and ignores, a value
        value = read(sorted_values, at if sorter is None else _as_index(b, read(sorter, at), "i32"))
        stop = b.op("rt.cmp", [value, x], {"predicate": "gt" if right else "ge"})
        onward = b.op("rt.and", [active, b.op("rt.not", [stop])])
        start = b.op("rt.select", [onward, b.op("rt.add", [middle, scalar(b, 1, middle)]), start])
        end = b.op("rt.select", [b.op("rt.and", [active, stop]), middle, end])
    return _as_index(b, start, dtype)


def take_along_axis(b: Builder, x: Value, index: Value, axis: int, negative: bool = False) -> Value:
    """np.take_along_axis: x read along `axis` at `index` (in range; with `negative`, in [-size, size), a negative
    entry counting from the end, as ONNX's GatherElements takes it), other axes at the index's own position, so
    that the index may be shorter than x along them (torch's gather). One gather of the flattened x, at linear
    positions from iotas, each value used once so that they fuse into it. A stride known only at run time is
    computed as data (`size_value`)."""
    shape, out = x.type.shape, index.type.shape
    dtype = index_type(math.prod(shape))
    coordinates = []
    for d in range(len(shape)):
        if d != axis:
            coordinates.append(b.op("rt.iota", [], {"shape": out, "axis": d, "dtype": dtype}))
            continue
        index = _as_index(b, index, dtype)
        coordinates.append(wrap_negative(b, index, shape[axis]) if negative else index)
    return _gather_flat(b, x, len(shape), coordinates)


def gather_nd(b: Builder, x: Value, indices: Value, batch_dims: int = 0) -> Value:
    """ONNX's GatherND: the last axis of `indices` holds k coordinates into x's axes batch_dims ... batch_dims + k
    (negative ones counting from the end), its first `batch_dims` axes walk x's; the result is indices' shape
    but the last, then x's axes past the indexed ones. One gather of x with its batch and indexed axes merged,
    at a linear index."""
    k, shape = indices.type.shape[-1], x.type.shape
    if isinstance(k, Sym) or not 1 <= k <= x.type.rank - batch_dims:
        raise UnsupportedOpError(f"GatherND of {x.type} at {indices.type} with batch_dims {batch_dims}: the "
                                 f"indices' last axis must be static, from 1 to {x.type.rank - batch_dims}",
                                 hint="export the indices with a static last axis, no longer than the data's rank "
                                      "less batch_dims")
    if indices.type.shape[:batch_dims] != shape[:batch_dims]:
        raise InputError(f"GatherND of {x.type} at {indices.type}: the first {batch_dims} axes (batch_dims) of the "
                         "data and the indices differ")
    merged = batch_dims + k
    dtype = index_type(math.prod(shape[:merged]))
    out = indices.type.shape[:-1]
    coordinates = [b.op("rt.iota", [], {"shape": out, "axis": d, "dtype": dtype}) for d in range(batch_dims)]
    for j in range(k):
        column = b.op("rt.reshape", [slice_axis(b, indices, len(out), j, j + 1)], {"shape": out})
        coordinates.append(wrap_negative(b, _as_index(b, column, dtype), shape[batch_dims + j]))
    return _gather_flat(b, x, merged, coordinates)


def index_type(elements) -> str:
    """i32 for linear positions into `elements` elements where they fit (every target's native index), else i64."""
    return "i64" if isinstance(elements, Sym) or elements > np.iinfo(np.int32).max else "i32"


def _as_index(b: Builder, index: Value, dtype: str) -> Value:
    return index if index.type.dtype.name == dtype else b.op("rt.cast", [index], {"dtype": dtype})


def wrap_negative(b: Builder, index: Value, size) -> Value:
    """Indices in [-size, size) with the negative ones counted from the end: (index + size) mod size, which reads
    the index once, so that it fuses into the gather's kernel (a value used twice is a kernel of its own)."""
    if index.type.dtype.kind == "uint":
        return index
    size = size_value(b, size, index.type.dtype.name) if isinstance(size, Sym) else scalar(b, size, index)
    return b.op("rt.rem", [b.op("rt.add", [index, size]), size])


def _gather_flat(b: Builder, x: Value, axes: int, coordinates: list[Value]) -> Value:
    """x read at `coordinates` (one tensor per leading axis, all of one shape and index type): x's first `axes`
    axes merged into one and gathered at the row-major linear position; the result is the coordinates' shape,
    then x's remaining axes."""
    shape = x.type.shape
    linear = None
    for d, coordinate in enumerate(coordinates):
        stride = math.prod(shape[d + 1:axes])
        if isinstance(stride, Sym):
            term = b.op("rt.mul", [coordinate, size_value(b, stride, coordinate.type.dtype.name)])
        else:
            term = coordinate if stride == 1 else b.op("rt.mul", [coordinate, scalar(b, stride, coordinate)])
        linear = term if linear is None else b.op("rt.add", [linear, term])
    flat = b.op("rt.reshape", [x], {"shape": (math.prod(shape[:axes]),) + shape[axes:]})
    return b.op("rt.gather", [flat, linear], {"axis": 0})


def argmin(b: Builder, x: Value, axis: int, keepdims: bool = False) -> Value:
    """The first index of the least value along `axis`: the argmax of an order-reversing map of x, negation for
    floats (a NaN stays a NaN, which argmax picks) and bitwise not for integers and bools (-x - 1 for signed ones,
    which never overflows, unlike negation at the most negative value)."""
    flipped = b.op("rt.neg" if x.type.dtype.is_float else "rt.not", [x])
    return b.op("rt.argmax", [flipped], {"axis": axis, "keepdims": keepdims})


def tile(b: Builder, x: Value, repeats) -> Value:
    """x repeated `repeats[d]` times along each axis d, whole (numpy's tile): each repeated axis is lifted to
    [1, size], broadcast to [repeats, size] and merged back."""
    shape = x.type.shape
    if all(r == 1 for r in repeats):
        return x
    lifted = tuple(v for d, r in zip(shape, repeats, strict=True) for v in ((d,) if r == 1 else (1, d)))
    wide = tuple(v for d, r in zip(shape, repeats, strict=True) for v in ((d,) if r == 1 else (r, d)))
    y = b.op("rt.broadcast", [b.op("rt.reshape", [x], {"shape": lifted})], {"shape": wide})
    return b.op("rt.reshape", [y], {"shape": tuple(d * r for d, r in zip(shape, repeats, strict=True))})


SCAN_DIRECT = 128  # the longest axis scanned by one masked reduction; longer ones are cut into blocks


@dataclass(frozen=True)
class Scan:
    """A running combination `cumulative` computes: how two partial results combine, how a whole axis reduces (to
    a kept axis of 1 with `keepdims`), and what it starts from for a dtype."""

    what: str
    combine: Callable[[Builder, Value, Value], Value]
    reduce: Callable[[Builder, Value, int, bool], Value]
    identity: Callable


def _by_op(name: str) -> Callable[[Builder, Value, Value], Value]:
    return lambda b, u, v: b.op(name, [u, v])


def _by_reduce(kind: str) -> Callable[[Builder, Value, int, bool], Value]:
    return lambda b, x, axis, keepdims: b.op("rt.reduce", [x], {"kind": kind, "axes": (axis,), "keepdims": keepdims})


def _finite_or_zero(b: Builder, peak: Value) -> Value:
    """`peak` where it is finite, else 0: the shift that keeps a log-sum-exp of infinities (or of NaN) from
    computing inf - inf."""
    finite = b.op("rt.cmp", [b.op("rt.abs", [peak]), scalar(b, math.inf, peak)], {"predicate": "lt"})
    return b.op("rt.select", [finite, peak, scalar(b, 0, peak)])


def logsumexp(b: Builder, x: Value, axis: int, keepdims: bool = False) -> Value:
    """log(sum(exp(x))) along `axis`, shifted by the axis's largest value: -inf where every element is, inf where
    one is, NaN where one is NaN."""
    shift = _finite_or_zero(b, b.op("rt.reduce", [x], {"kind": "max", "axes": (axis,), "keepdims": True}))
    total = b.op("rt.reduce", [b.op("rt.exp", [b.op("rt.sub", [x, shift])])],
                 {"kind": "sum", "axes": (axis,), "keepdims": keepdims})
    return b.op("rt.add", [b.op("rt.log", [total]), shift if keepdims else b.op("rt.reshape", [shift], {
        "shape": total.type.shape})])


def log_add_exp(b: Builder, u: Value, v: Value) -> Value:
    """log(exp(u) + exp(v)), shifted by the larger (0 where that is infinite, as `logsumexp` shifts)."""
    shift = _finite_or_zero(b, b.op("rt.max", [u, v]))
    return b.op("rt.add", [b.op("rt.log", [b.op("rt.add", [b.op("rt.exp", [b.op("rt.sub", [u, shift])]),
                                                           b.op("rt.exp", [b.op("rt.sub", [v, shift])])])]), shift])


SCANS = {
    "sum": Scan("a cumulative sum", _by_op("rt.add"), _by_reduce("sum"), lambda dtype: 0),
    "prod": Scan("a cumulative product", _by_op("rt.mul"), _by_reduce("prod"), lambda dtype: 1),
    "max": Scan("a cumulative maximum", _by_op("rt.max"), _by_reduce("max"), lambda dtype: extreme(dtype, low=True)),
    "min": Scan("a cumulative minimum", _by_op("rt.min"), _by_reduce("min"), lambda dtype: extreme(dtype, low=False)),
    "logsumexp": Scan("a cumulative log-sum-exp", log_add_exp, logsumexp, lambda dtype: -math.inf),
}


def cumulative_sum(b: Builder, x: Value, axis: int, exclusive: bool = False, reverse: bool = False) -> Value:
    """Running sums along `axis` (`cumulative`)."""
    return cumulative(b, x, axis, "sum", exclusive, reverse)


def cumulative(b: Builder, x: Value, axis: int, kind: str = "sum", exclusive: bool = False,
               reverse: bool = False) -> Value:
    """Running sums, products, maxima, minima or log-sum-exps (`kind`, of `SCANS`) along `axis`, in x's element
    type: y[i] = the sum (product, ...) of x[j] over j <= i (j < i when `exclusive`; j >= i and j > i when
    `reverse`). The axis must be static. Up to SCAN_DIRECT long, one reduction of x masked by position
    (`_masked_scan`): one kernel, n operations per element, no constant. A longer axis is cut into blocks of about
    sqrt(n), each scanned so, combined with the exclusive scan of the blocks' totals: about sqrt(n) + 2 operations
    per element and six kernels, where a matmul with a triangular constant would hold n^2 values and do n
    multiply-adds (and could not multiply). A product is multiplied, never taken through logarithms, so zeros and
    signs are exact."""
    scan = SCANS[kind]
    n = x.type.shape[axis]
    _dynamic_axis_lowest(b, n, SCAN_DIRECT, scan.what, "export with a static size for the scanned axis")
    if isinstance(n, Sym) or n <= SCAN_DIRECT:  # one masked reduction (a dynamic axis is short at every size)
        return _masked_scan(b, x, axis, kind, exclusive, reverse)
    shape, block = x.type.shape, math.isqrt(n - 1) + 1
    blocks = -(-n // block)
    if blocks * block != n:  # identities at the end, which change nothing that is kept
        high = tuple(blocks * block - n if d == axis else 0 for d in range(len(shape)))
        x = b.op("rt.pad", [x], {"low": (0,) * len(shape), "high": high, "value": scan.identity(x.type.dtype)})
    x = b.op("rt.reshape", [x], {"shape": shape[:axis] + (blocks, block) + shape[axis + 1:]})
    inside = cumulative(b, x, axis + 1, kind, exclusive, reverse)
    totals = scan.reduce(b, x, axis + 1, True)
    y = scan.combine(b, inside, cumulative(b, totals, axis, kind, True, reverse))  # with the blocks before it
    y = b.op("rt.reshape", [y], {"shape": shape[:axis] + (blocks * block,) + shape[axis + 1:]})
    return slice_axis(b, y, axis, 0, n)


def _masked_scan(b: Builder, x: Value, axis: int, kind: str, exclusive: bool, reverse: bool) -> Value:
    """`cumulative` as one reduction over [..., i, j, ...] of x[..., j, ...] where j is before i (or after), the
    identity elsewhere: the mask comes from i32 iotas, so the reduction's kernel computes it and nothing n x n is
    stored."""
    shape, n = x.type.shape, x.type.shape[axis]
    scan = SCANS[kind]
    if n == 0 or (n == 1 and not exclusive):
        return x
    lifted = b.op("rt.reshape", [x], {"shape": shape[:axis] + (1, n) + shape[axis + 1:]})
    square = (n, n) + (1,) * (len(shape) - axis - 1)
    out_pos, in_pos = (b.op("rt.iota", [], {"shape": square, "axis": a, "dtype": "i32"}) for a in (0, 1))
    predicate = {(False, False): "le", (True, False): "lt", (False, True): "ge", (True, True): "gt"}
    keep = b.op("rt.cmp", [in_pos, out_pos], {"predicate": predicate[exclusive, reverse]})
    masked = b.op("rt.select", [keep, lifted, scalar(b, scan.identity(x.type.dtype), x)])
    return scan.reduce(b, masked, axis + 1, False)


def cumulative_extreme(b: Builder, x: Value, axis: int, largest: bool = True) -> tuple[Value, Value]:
    """(values, int64 indices) of torch's cummax (`largest`) or cummin along `axis`: the running maximum
    (minimum), and where it was last reached, as torch's CPU kernel keeps it: an element equal to the running
    value takes its place (>= for cummax), a NaN always does, and nothing replaces a NaN. Position j is such a
    record where x[j] equals the running value there or is NaN; the index at i is the last record up to i, a
    running maximum of the records' positions."""
    keys = b.op("rt.cast", [x], {"dtype": "i32"}) if x.type.dtype.kind == "bool" else x
    running = cumulative(b, keys, axis, "max" if largest else "min")
    record = b.op("rt.cmp", [keys, running], {"predicate": "eq"})
    if keys.type.dtype.is_float:
        record = b.op("rt.or", [record, b.op("rt.cmp", [keys, keys], {"predicate": "ne"})])
    position = b.op("rt.iota", [], {"shape": x.type.shape, "axis": axis, "dtype": "i32"})
    last = cumulative(b, b.op("rt.select", [record, position, scalar(b, -1, position)]), axis, "max")
    values = running if keys is x else b.op("rt.cast", [running], {"dtype": x.type.dtype.name})
    return values, b.op("rt.cast", [last], {"dtype": "i64"})


def adaptive_windows(size_in: int, size_out: int) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of PyTorch's adaptive pooling windows along an axis: output i reads input positions
    [floor(i * in / out), ceil((i + 1) * in / out))."""
    i = np.arange(size_out, dtype=np.int64)
    return i * size_in // size_out, -(-(i + 1) * size_in // size_out)


def _static_image(x: Value, what: str) -> tuple[int, int]:
    h, w = x.type.shape[-2:]
    if isinstance(h, Sym) or isinstance(w, Sym):
        raise UnsupportedOpError(f"{what} of an image whose size ({h}x{w}) is known only at run time",
                                 hint="export with static image sizes")
    return h, w


def adaptive_avg_pool2d(b: Builder, x: Value, size) -> Value:
    """PyTorch's adaptive average pooling of [..., H, W] to `size` (oh, ow). Where the windows tile the image
    evenly, an average pool; else, since each window is a product of a row range and a column range, a sum over
    each axis in turn, as a matmul with a constant 0/1 [out, in] window matrix, divided by each window's size."""
    oh, ow = size
    h, w = _static_image(x, "adaptive_avg_pool2d")
    if (oh, ow) == (1, 1):
        return mean(b, x, (-2, -1), keepdims=True)
    if h % oh == 0 and w % ow == 0:
        return _as_nchw(b, x, lambda y: b.op("rt.avg_pool2d", [y], {"kernel": (h // oh, w // ow),
                                                                    "strides": (h // oh, w // ow)}))
    count = np.ones((oh, ow))
    for axis, (size_in, size_out) in ((-1, (w, ow)), (-2, (h, oh))):
        if size_in == size_out:
            continue
        starts, ends = adaptive_windows(size_in, size_out)
        positions = np.arange(size_in)
        inside = (positions >= starts[:, None]) & (positions < ends[:, None])  # [out, in]
        window = b.constant(inside.astype(x.type.dtype.np_dtype))
        x = b.op("rt.matmul", [x, b.op("rt.transpose", [window], {"perm": (1, 0)})] if axis == -1 else [window, x])
        count = count * (ends - starts).reshape((-1, 1) if axis == -2 else (1, -1))
    return b.op("rt.div", [x, b.constant(count.astype(x.type.dtype.np_dtype))])


def adaptive_avg_pool(b: Builder, x: Value, size) -> Value:
    """PyTorch's adaptive average pooling of x's last len(size) axes to `size` (any number of them; 3-D pools'
    too), an axis at a time, since each window is a product of one range an axis: where the axis tiles evenly a
    reshape and a mean; else a sum over each window as a matmul with a 0/1 [out, in] window matrix (x viewed as
    [before, in, after], so no transpose), divided by the windows' sizes."""
    first = x.type.rank - len(size)
    for axis, size_out in enumerate(size, first):
        shape, size_in = x.type.shape, x.type.shape[axis]
        if isinstance(size_in, Sym):
            raise UnsupportedOpError(f"adaptive average pooling of an axis of {size_in}, a size known only at run "
                                     "time", hint="export with static spatial sizes")
        if size_in == size_out:
            continue
        if size_in % size_out == 0:
            windows = shape[:axis] + (size_out, size_in // size_out) + shape[axis + 1:]
            x = mean(b, b.op("rt.reshape", [x], {"shape": windows}), (axis + 1,))
            continue
        starts, ends = adaptive_windows(size_in, size_out)
        positions = np.arange(size_in)
        window = ((positions >= starts[:, None]) & (positions < ends[:, None])).astype(x.type.dtype.np_dtype)
        before, after = math.prod(shape[:axis]), math.prod(shape[axis + 1:])
        viewed = b.op("rt.reshape", [x], {"shape": (before, size_in, after)})
        summed = b.op("rt.matmul", [b.constant(window), viewed])
        sizes = b.constant((ends - starts).astype(x.type.dtype.np_dtype).reshape(size_out, 1))
        pooled = b.op("rt.div", [summed, sizes])
        x = b.op("rt.reshape", [pooled], {"shape": shape[:axis] + (size_out,) + shape[axis + 1:]})
    return x


def _as_nchw(b: Builder, x: Value, pool) -> Value:
    """`pool` (of an NCHW value) applied to x of rank 3 (CHW) or 4."""
    if x.type.rank == 4:
        return pool(x)
    y = pool(b.op("rt.reshape", [x], {"shape": (1,) + x.type.shape}))
    return b.op("rt.reshape", [y], {"shape": y.type.shape[1:]})


def _window_positions(size_in: int, size_out: int) -> np.ndarray:
    """[out, widest window] input positions of each adaptive window, a shorter one filled with its last position:
    the repeats come after the position they copy, so neither a max nor the first index of one changes."""
    starts, ends = adaptive_windows(size_in, size_out)
    return np.minimum(starts[:, None] + np.arange(int((ends - starts).max())), ends[:, None] - 1)


def adaptive_max_pool2d(b: Builder, x: Value, size, indices: bool = False):
    """PyTorch's adaptive max pooling of [..., H, W] to `size` (oh, ow): a max pool where the windows tile the
    image evenly; else each window's rows gathered (padded to the widest window) and reduced, then its columns.
    With `indices`, (values, the flat index h * W + w of each window's first maximum in row-major order, as
    torch's): an argmax over each window's gathered [rows, columns], offset by the window's start."""
    oh, ow = size
    h, w = _static_image(x, "adaptive_max_pool2d")
    rows, cols = _window_positions(h, oh), _window_positions(w, ow)
    if h % oh == 0 and w % ow == 0:
        values = _as_nchw(b, x, lambda y: b.op("rt.max_pool2d", [y], {"kernel": (h // oh, w // ow),
                                                                      "strides": (h // oh, w // ow)}))
    else:
        values = x
        for axis, positions in ((x.type.rank - 2, rows), (x.type.rank - 1, cols)):
            if positions.shape[1] > 1 or not np.array_equal(positions[:, 0], np.arange(len(positions))):
                values = b.op("rt.gather", [values, b.constant(positions.astype(np.int32))], {"axis": axis})
                values = b.op("rt.reduce", [values], {"kind": "max", "axes": (axis + 1,), "keepdims": False})
    if not indices:
        return values
    lead, (kh, kw) = x.type.rank - 2, (rows.shape[1], cols.shape[1])
    y = b.op("rt.gather", [x, b.constant(rows.astype(np.int32))], {"axis": lead})  # [..., oh, kh, W]
    y = b.op("rt.gather", [y, b.constant(cols.astype(np.int32))], {"axis": lead + 2})  # [..., oh, kh, ow, kw]
    perm = tuple(range(lead)) + (lead, lead + 2, lead + 1, lead + 3)
    y = b.op("rt.transpose", [y], {"perm": perm})
    y = b.op("rt.reshape", [y], {"shape": x.type.shape[:lead] + (oh, ow, kh * kw)})
    first = b.op("rt.argmax", [y], {"axis": lead + 2, "keepdims": False})  # row * kw + column in the window
    row = b.op("rt.div", [first, scalar(b, kw, first)])
    column = b.op("rt.rem", [first, scalar(b, kw, first)])
    start = rows[:, :1] * w + cols[:, 0]  # the flat index of each window's first position, [oh, ow]
    index = b.op("rt.add", [b.op("rt.mul", [row, scalar(b, w, row)]), column])
    return values, b.op("rt.add", [index, b.constant(start.astype(np.int64))])


def triangle(b: Builder, x: Value, k: int = 0, upper: bool = False) -> Value:
    """tril (`upper=False`: column - row <= k) or triu (column - row >= k) over the last two axes, the rest 0; the
    mask comes from i32 iotas, so it is computed in the kernel and nothing n x m is stored."""
    n, m = x.type.shape[-2:]
    rows, cols = (b.op("rt.iota", [], {"shape": (n, m), "axis": a, "dtype": "i32"}) for a in (0, 1))
    offset = b.op("rt.sub", [cols, rows])
    keep = b.op("rt.cmp", [offset, b.constant(np.array(k, np.int32))], {"predicate": "ge" if upper else "le"})
    return b.op("rt.select", [keep, x, scalar(b, 0, x)])


def diagonal(b: Builder, x: Value, offset: int = 0, axis1: int = 0, axis2: int = 1) -> Value:
    """numpy's and torch's diagonal: x[..., i, i + offset] over axis1 and axis2 (x[..., i - offset, i] for a
    negative offset) as x's last axis, the other axes in their order before it: the two axes moved last and
    merged, read every (columns + 1) elements from the diagonal's start."""
    axis1, axis2 = normalize_axis(axis1, x.type.rank), normalize_axis(axis2, x.type.rank)
    rows, columns = x.type.shape[axis1], x.type.shape[axis2]
    if isinstance(rows, Sym) or isinstance(columns, Sym):
        raise UnsupportedOpError(f"the diagonal of a {rows} x {columns} matrix, a size known only at run time",
                                 hint="export with static sizes for the two axes")
    rest = [d for d in range(x.type.rank) if d not in (axis1, axis2)]
    lead = tuple(x.type.shape[d] for d in rest)
    length = max(0, min(rows, columns - offset) if offset >= 0 else min(rows + offset, columns))
    if length == 0:
        return b.op("rt.broadcast", [scalar(b, 0, x)], {"shape": lead + (0,)})
    perm = tuple(rest) + (axis1, axis2)
    moved = x if perm == tuple(range(x.type.rank)) else b.op("rt.transpose", [x], {"perm": perm})
    flat = b.op("rt.reshape", [moved], {"shape": lead + (rows * columns,)})
    start = offset if offset >= 0 else -offset * columns
    return slice_axis(b, flat, len(lead), start, start + (length - 1) * (columns + 1) + 1, columns + 1)


DETERMINANT_LIMIT = 16  # the largest matrix whose LU decomposition is unrolled: one step a row


def determinant(b: Builder, x: Value) -> Value:
    """det of [..., n, n] matrices, by LU decomposition with partial pivoting as LAPACK's getrf factors them,
    unrolled (n up to DETERMINANT_LIMIT): at each step the row with the largest magnitude in the column (the
    first of equal ones) is swapped up, which flips the sign unless it is already there, its pivot joins the
    product, and the rows below take away their multiple of it. A zero pivot (a singular matrix) leaves the rows
    below as they are, as getrf does, so the product is 0 and nothing divides by 0."""
    n = x.type.shape[-1]
    if isinstance(n, Sym) or n != x.type.shape[-2]:
        raise UnsupportedOpError(f"the determinant of {x.type}: square matrices of a size known when compiling")
    if n > DETERMINANT_LIMIT:
        raise UnsupportedOpError(f"the determinant of a {n} x {n} matrix: LU decomposition is unrolled for up to "
                                 f"{DETERMINANT_LIMIT} x {DETERMINANT_LIMIT}",
                                 hint="compute it outside the model, or from a factorization done elsewhere")
    lead = x.type.shape[:-2]
    det = b.op("rt.broadcast", [scalar(b, 1, x)], {"shape": lead})
    rest = x
    for size in range(n, 0, -1):
        if size > 1:
            column = b.op("rt.reshape", [slice_axis(b, rest, rest.type.rank - 1, 0, 1)], {"shape": lead + (size,)})
            pivot_row = b.op("rt.argmax", [b.op("rt.abs", [column])], {"axis": len(lead), "keepdims": True})
            pivot_row = b.op("rt.cast", [pivot_row], {"dtype": "i32"})
            position = b.op("rt.iota", [], {"shape": lead + (size,), "axis": len(lead), "dtype": "i32"})
            first = b.op("rt.cmp", [position, scalar(b, 0, position)], {"predicate": "eq"})
            swapped = b.op("rt.cmp", [position, pivot_row], {"predicate": "eq"})
            order = b.op("rt.select", [first, b.op("rt.broadcast", [pivot_row], {"shape": lead + (size,)}),
                                       b.op("rt.select", [swapped, scalar(b, 0, position), position])])
            order = b.op("rt.broadcast", [b.op("rt.reshape", [order], {"shape": lead + (size, 1)})],
                         {"shape": lead + (size, size)})
            rest = take_along_axis(b, rest, order, len(lead))
            moved = b.op("rt.cmp", [pivot_row, scalar(b, 0, pivot_row)], {"predicate": "ne"})
            det = b.op("rt.select", [b.op("rt.reshape", [moved], {"shape": lead}), b.op("rt.neg", [det]), det])
        corner = b.op("rt.reshape", [b.op("rt.slice", [rest], {
            "start": (0,) * rest.type.rank, "limit": lead + (1, 1), "stride": (1,) * rest.type.rank})], {"shape": lead})
        det = b.op("rt.mul", [det, corner])
        if size == 1:
            break
        pivot = b.op("rt.reshape", [corner], {"shape": lead + (1, 1)})
        below = b.op("rt.slice", [rest], {"start": (0,) * len(lead) + (1, 0), "limit": lead + (size, 1),
                                          "stride": (1,) * rest.type.rank})
        zero = scalar(b, 0, x)
        factor = b.op("rt.select", [b.op("rt.cmp", [pivot, zero], {"predicate": "eq"}), zero,
                                    b.op("rt.div", [below, pivot])])
        top = b.op("rt.slice", [rest], {"start": (0,) * len(lead) + (0, 1), "limit": lead + (1, size),
                                        "stride": (1,) * rest.type.rank})
        inner = b.op("rt.slice", [rest], {"start": (0,) * len(lead) + (1, 1), "limit": lead + (size, size),
                                          "stride": (1,) * rest.type.rank})
        rest = b.op("rt.sub", [inner, b.op("rt.mul", [factor, top])])
    return det


def einsum(b: Builder, equation: str, operands: list[Value]) -> Value:
    """numpy's einsum (explicit or implicit output, `...` included) as sums, transposes and batched matmuls:
    operands are contracted two at a time, left to right, each keeping the letters that the output or a later
    operand needs. A letter twice in one operand takes the diagonal (a mask from iotas, and a sum)."""
    inputs, arrow, output = equation.replace(" ", "").partition("->")
    terms = inputs.split(",")
    if len(terms) != len(operands):
        raise UnsupportedOpError(f"einsum '{equation}' names {len(terms)} operands, and {len(operands)} are given",
                                 hint="give the equation one comma-separated term per operand")
    ellipsis = max((x.type.rank - len(t.replace("...", "")) for t, x in zip(terms, operands) if "..." in t), default=0)
    spare = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in equation][:ellipsis]  # letters for `...`'s axes

    def expand(term: str, rank: int) -> str:
        if "..." not in term:
            return term
        dots = rank - len(term.replace("...", ""))
        return term.replace("...", "".join(spare[ellipsis - dots:]))

    letters = [expand(t, x.type.rank) for t, x in zip(terms, operands)]
    if not arrow:  # implicit: the letters seen once, in order, after `...`'s
        counts = "".join(letters)
        output = "".join(spare) + "".join(sorted(c for c in set(counts) if counts.count(c) == 1 and c not in spare))
    output = expand(output, len(spare) + len(output.replace("...", "")))
    operands = list(operands)
    for i, (term, x) in enumerate(zip(letters, operands)):
        if len(term) != x.type.rank:
            raise UnsupportedOpError(f"einsum '{equation}': operand '{term}' does not have rank {x.type.rank}",
                                     hint="give each operand one letter per axis, or '...' for the rest")
        operands[i], letters[i] = _diagonals(b, x, term)
    acc, acc_letters = operands[0], letters[0]
    for i in range(1, len(operands)):
        later = "".join(letters[i + 1:]) + output
        acc, acc_letters = _contract_pair(b, acc, acc_letters, operands[i], letters[i], later)
    acc, acc_letters = _sum_letters(b, acc, acc_letters, output)  # what the output does not name
    return b.op("rt.transpose", [acc], {"perm": tuple(acc_letters.index(c) for c in output)}) \
        if acc_letters != output else acc


def _diagonals(b: Builder, x: Value, term: str) -> tuple[Value, str]:
    """x's diagonal over each letter that `term` names twice ('ii' -> 'i'): the elements off it masked to 0, and
    the second axis summed away."""
    while (c := next((c for c in term if term.count(c) > 1), None)) is not None:
        p = term.index(c)
        q = term.index(c, p + 1)
        rows, cols = (b.op("rt.iota", [], {"shape": x.type.shape, "axis": a, "dtype": "i32"}) for a in (p, q))
        on = b.op("rt.cmp", [rows, cols], {"predicate": "eq"})
        x = b.op("rt.reduce", [b.op("rt.select", [on, x, scalar(b, 0, x)])],
                 {"kind": "sum", "axes": (q,), "keepdims": False})
        term = term[:q] + term[q + 1:]
    return x, term


def _sum_letters(b: Builder, x: Value, term: str, keep: str) -> tuple[Value, str]:
    """x summed over the letters of `term` that `keep` does not name."""
    axes = tuple(i for i, c in enumerate(term) if c not in keep)
    if not axes:
        return x, term
    return b.op("rt.reduce", [x], {"kind": "sum", "axes": axes, "keepdims": False}), \
        "".join(c for c in term if c in keep)


def _contract_pair(b: Builder, x: Value, xs: str, y: Value, ys: str, later: str) -> tuple[Value, str]:
    """x and y multiplied over their shared letters, summed over those that `later` does not need: one batched
    matmul of [batch, m, k] by [batch, k, n]."""
    x, xs = _sum_letters(b, x, xs, ys + later)
    y, ys = _sum_letters(b, y, ys, xs + later)
    batch = "".join(c for c in xs if c in ys and c in later)
    summed = "".join(c for c in xs if c in ys and c not in later)
    rows = "".join(c for c in xs if c not in ys)
    cols = "".join(c for c in ys if c not in xs)
    size = {**dict(zip(ys, y.type.shape)), **{c: d for c, d in zip(xs, x.type.shape) if d != 1 or c not in ys}}

    def arrange(v: Value, term: str, order: str, groups) -> Value:
        if term != order:
            v = b.op("rt.transpose", [v], {"perm": tuple(term.index(c) for c in order)})
        full = tuple(size[c] for c in order)
        if v.type.shape != full:  # a batch axis of 1 against a longer one: numpy's broadcast
            v = b.op("rt.broadcast", [v], {"shape": full})
        return b.op("rt.reshape", [v], {"shape": tuple(math.prod(size[c] for c in g) for g in groups)})

    a = arrange(x, xs, batch + rows + summed, (batch, rows, summed))
    c = arrange(y, ys, batch + summed + cols, (batch, summed, cols))
    product = b.op("rt.matmul", [a, c])
    out = batch + rows + cols
    return b.op("rt.reshape", [product], {"shape": tuple(size[ch] for ch in out)}), out
