"""numpy reference semantics for every graph op: the oracle for all backends.

Each kernel takes the op's attributes and its operand arrays and returns the
result array. Half-precision inputs are computed in f32, then rounded once.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from ..ir import host_eval
from ..ir.core import TensorType
from ..ir.dtypes import DTYPES
from ..ir.ops import UNIQUE_OUTPUTS
from ..registry import registrar

KERNELS = {}


kernel = registrar(KERNELS, prefix='rt.')


_HALF = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))


def _wide(a: np.ndarray) -> np.ndarray:
    """f16/bf16 computed in f32, i4 in i8; everything else as is."""
    if a.dtype in _HALF:
        return a.astype(np.float32)
    if a.dtype == np.dtype(ml_dtypes.int4):
        return a.astype(np.int8)
    return a


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def _trunc_div(a, b):
    if a.dtype.kind in "iu":
        with np.errstate(divide="ignore", invalid="ignore"):
            q = np.floor_divide(a, np.where(b == 0, 1, b))
            fix = (np.remainder(a, np.where(b == 0, 1, b)) != 0) & ((a < 0) != (b < 0))
        return q + fix.astype(q.dtype)
    return np.divide(a, b)


_UNARY = {
    "neg": np.negative,
    "abs": np.abs,
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x),
    "tanh": np.tanh,
    "sigmoid": lambda x: 0.5 * (1 + np.tanh(0.5 * x)),
    "erf": _erf,
    "floor": np.floor,
    "ceil": np.ceil,
    "round": np.round,
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "atan": np.arctan,
    "reciprocal": lambda x: 1 / x,
    "sign": np.sign,
    "not": np.invert,
    "log1p": np.log1p,
    "expm1": np.expm1,
}
def _power(a, b):
    """np.power, but an integer to a negative power is 1 for 1, +-1 for -1 by its parity and 0 for any other base
    (C's truncation of 1 / a**n, as every compiled target computes it), where numpy raises."""
    if a.dtype.kind not in "iu" or b.dtype.kind not in "iu" or not np.any(b < 0):
        return np.power(a, b)
    whole = np.power(a, np.where(b < 0, 0, b))
    inverse = np.where(a == 1, 1, np.where(a == -1, np.where(b & 1, -1, 1), 0))
    return np.where(b < 0, inverse, whole).astype(whole.dtype)


_BINARY = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": _trunc_div,
    "rem": np.fmod,
    "pow": _power,
    "max": np.maximum,
    "min": np.minimum,
    "and": np.bitwise_and,
    "or": np.bitwise_or,
    "xor": np.bitwise_xor,
    "atan2": np.arctan2,
    "shr": np.right_shift,
}
_COMPARE = {
    "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal
}
_REDUCE = {"sum": np.sum, "max": np.max, "min": np.min, "prod": np.prod, "and": np.all, "or": np.any}

for _name, _fn in _UNARY.items():
    KERNELS[f"rt.{_name}"] = (lambda f: lambda attrs, x: f(_wide(x)))(_fn)
for _name, _fn in _BINARY.items():
    KERNELS[f"rt.{_name}"] = (lambda f: lambda attrs, a, b: f(_wide(a), _wide(b)))(_fn)


@kernel("cmp")
def _cmp(attrs, a, b):
    return _COMPARE[attrs["predicate"]](a, b)


@kernel("select")
def _select(attrs, c, a, b):
    return np.where(c, a, b)


@kernel("cast")
def _cast(attrs, x):
    return x  # the result conversion below does the work, once


@kernel("constant")
def _constant(attrs):
    return attrs["value"].array


@kernel("iota")
def _iota(attrs):
    shape, axis = tuple(attrs["shape"]), attrs["axis"]
    ramp = np.arange(shape[axis]).reshape([-1 if d == axis else 1 for d in range(len(shape))])
    return np.broadcast_to(ramp, shape)


@kernel("reshape")
def _reshape(attrs, x):
    return x.reshape(tuple(attrs["shape"]))


@kernel("bitcast")
def _bitcast(attrs, x):
    return np.asarray(x).view(DTYPES[attrs["dtype"]].np_dtype)


@kernel("transpose")
def _transpose(attrs, x):
    return np.transpose(x, attrs["perm"])


@kernel("broadcast")
def _broadcast(attrs, x):
    return np.broadcast_to(x, tuple(attrs["shape"]))


@kernel("slice")
def _slice(attrs, x):
    return x[tuple(slice(s, e, k) for s, e, k in zip(attrs["start"], attrs["limit"], attrs["stride"]))]


@kernel("concat")
def _concat(attrs, *xs):
    return np.concatenate(xs, axis=attrs["axis"])


@kernel("pad")
def _pad(attrs, x):
    return np.pad(x, list(zip(attrs["low"], attrs["high"])), constant_values=attrs["value"])


@kernel("gather")
def _gather(attrs, data, idx):
    axis = attrs["axis"]
    if data.shape[axis] == 0:  # nothing to read (a count of 0's stage, folded): zeros, which selects then drop
        return np.zeros(data.shape[:axis] + np.shape(idx) + data.shape[axis + 1:], data.dtype)
    return np.take(data, idx, axis=axis, mode="clip")


@kernel("matmul")
def _matmul(attrs, a, b):
    return np.matmul(_wide(a), _wide(b))


def _taps(x, kh, kw, sh, sw, dh, dw, oh, ow):
    """For each filter tap (i, j), the strided input window it multiplies."""
    for i in range(kh):
        for j in range(kw):
            yield i, j, x[..., i * dh: i * dh + sh * (oh - 1) + 1: sh, j * dw: j * dw + sw * (ow - 1) + 1: sw]


def _pad_nchw(x, pad, value):
    pt, pb, pl, pr = pad
    if not any(pad):
        return x
    return np.pad(x, [(0, 0), (0, 0), (pt, pb), (pl, pr)], constant_values=value)


@kernel("conv2d")
def _conv2d(attrs, x, w):
    sh, sw = attrs.get("strides", (1, 1))
    dh, dw = attrs.get("dilations", (1, 1))
    pad = attrs.get("pad", (0, 0, 0, 0))
    groups = attrs.get("groups", 1)
    x, w = _wide(x), _wide(w)
    if x.dtype.kind in "iu":
        x, w = x.astype(np.int64), w.astype(np.int64)
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh = (h + pad[0] + pad[1] - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + pad[2] + pad[3] - dw * (kw - 1) - 1) // sw + 1
    xp = _pad_nchw(x, pad, 0).reshape(n, groups, cg, h + pad[0] + pad[1], wd + pad[2] + pad[3])
    wg = w.reshape(groups, o // groups, cg, kh, kw)
    out = np.zeros((n, groups, o // groups, oh, ow), dtype=np.result_type(x, w))
    for i, j, window in _taps(xp, kh, kw, sh, sw, dh, dw, oh, ow):
        if cg == 1 and o == groups:  # depthwise: a plain product per channel
            out += window * wg[None, :, :, 0, i, j][..., None, None]
        else:
            out += np.einsum("ngchw,goc->ngohw", window, wg[:, :, :, i, j], optimize=True)
    return out.reshape(n, o, oh, ow)


def _pool(attrs, x, init, combine):
    kh, kw = attrs["kernel"]
    sh, sw = attrs.get("strides", (1, 1))
    dh, dw = attrs.get("dilations", (1, 1))
    pad = attrs.get("pad", (0, 0, 0, 0))
    n, c, h, w = x.shape
    oh = (h + pad[0] + pad[1] - dh * (kh - 1) - 1) // sh + 1
    ow = (w + pad[2] + pad[3] - dw * (kw - 1) - 1) // sw + 1
    xp = _pad_nchw(x, pad, init)
    out = np.full((n, c, oh, ow), init, dtype=xp.dtype)
    for _, _, window in _taps(xp, kh, kw, sh, sw, dh, dw, oh, ow):
        out = combine(out, window)
    return out, oh, ow


@kernel("max_pool2d")
def _max_pool2d(attrs, x):
    x = _wide(x)
    lowest = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    return _pool(attrs, x, lowest, np.maximum)[0]


@kernel("avg_pool2d")
def _avg_pool2d(attrs, x):
    x = _wide(x).astype(np.float32) if x.dtype.kind != "f" else _wide(x)
    total, oh, ow = _pool(attrs, x, 0, np.add)
    if attrs.get("count_include_pad", False):
        kh, kw = attrs["kernel"]
        return total / (kh * kw)
    ones = np.ones((1, 1) + x.shape[2:], dtype=x.dtype)
    count, _, _ = _pool(attrs, ones, 0, np.add)
    return total / count


@kernel("reduce")
def _reduce(attrs, x):
    kind = attrs["kind"]
    x = _wide(x) if kind in ("sum", "prod") else x
    if x.size == 0 and kind in ("max", "min"):  # over no elements: the identity, as a kernel's loop starts from it
        return _REDUCE[kind](x, axis=tuple(attrs["axes"]), keepdims=attrs.get("keepdims", False),
                             initial=_identity(kind, x.dtype))
    return _REDUCE[kind](x, axis=tuple(attrs["axes"]), keepdims=attrs.get("keepdims", False))


@kernel("argmax")
def _argmax(attrs, x):
    return np.argmax(x, axis=attrs["axis"], keepdims=attrs.get("keepdims", False))


# Host ops (ir/ops.py's HOST_OPS): their sizes come from the data; the runtime runs these between stages.
@kernel("nonzero")
def _nonzero(attrs, x):
    return host_eval.nonzero(x)[0]


@kernel("unique")
def _unique(attrs, x):
    results = host_eval.unique(x, sorted=bool(attrs.get("sorted", True)), axis=attrs.get("axis"))
    return results[UNIQUE_OUTPUTS.index(attrs["output"])]


@kernel("non_max_suppression")
def _non_max_suppression(attrs, boxes, scores, max_output, iou_threshold, score_threshold):
    filtered = attrs.get("score_filter", True)
    return host_eval.non_max_suppression(boxes, scores, max_output, iou_threshold,
                                         score_threshold if filtered else None,
                                         center_point_box=attrs["center_point_box"])[0]


_SCATTER_COMBINE = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}


@kernel("scatter")
def _scatter(attrs, data, index, updates):
    """Row by row, updates[..., j, T...] for j in order into position index[..., j] of the scattered axis, where it
    is in range: the last one wins ("none"), or each is combined into what is there (ufunc.at applies them in
    order, one at a time, rounding each as a kernel that stores each does; np.maximum keeps NaN)."""
    out = np.array(data, order="C")  # a copy in which `reshape` is a view
    count, size = index.shape[-1], data.shape[index.ndim - 1]
    tail = data.shape[index.ndim:]
    flat_index = index.reshape(-1, count).astype(np.int64)
    rows = np.broadcast_to(np.arange(flat_index.shape[0])[:, None] * size, flat_index.shape)
    kept = (flat_index >= 0) & (flat_index < size)
    target = (rows + flat_index)[kept]  # row-major: within each row, in j order
    values = updates.reshape((-1, count) + tail)[kept]
    flat = out.reshape((-1,) + tail)
    reduction = attrs["reduction"]
    if reduction == "none":
        last = len(target) - 1 - np.unique(target[::-1], return_index=True)[1]
        flat[target[last]] = values[last]
    else:
        _SCATTER_COMBINE[reduction].at(flat, target, values)
    return out


@kernel("segment_reduce")
def _segment_reduce(attrs, values, starts, ends):
    """Segment b combines values[starts[b]:ends[b]] (clipped to the rows) in order, a row at a time as a kernel's
    running value does (`accumulate` is sequential; halves combine in f32); an empty segment is the identity."""
    combine, wide = _SCATTER_COMBINE[attrs["kind"]], _wide(values)
    rows = values.shape[0]
    out = np.full((len(starts), *values.shape[1:]), _identity(attrs["kind"], wide.dtype), wide.dtype)
    for b, (lo, hi) in enumerate(zip(np.clip(starts, 0, rows), np.clip(ends, 0, rows))):
        if hi > lo:
            out[b] = combine(out[b], combine.accumulate(wide[lo:hi], axis=0)[-1])
    return out.astype(values.dtype)


def _identity(kind: str, dtype):
    """What a sum, product, max or min of no elements is: the value a kernel's running value starts from."""
    if kind in ("sum", "prod"):
        return 0 if kind == "sum" else 1
    low = kind == "max"
    if np.issubdtype(dtype, np.floating):
        return -np.inf if low else np.inf
    if dtype == np.bool_:
        return not low
    return np.iinfo(dtype).min if low else np.iinfo(dtype).max


def _unpack(q: np.ndarray, bits: int, columns: int) -> np.ndarray:
    """Packed 32-bit words -> their unsigned `bits`-bit values, `columns` a row (value c of a row is
    bits [bits * (c % per_word), ...) of word c // per_word)."""
    per_word = 32 // bits
    shifts = (np.arange(per_word, dtype=np.uint32) * bits)
    values = (q.astype(np.uint32)[..., None] >> shifts) & np.uint32((1 << bits) - 1)
    return values.reshape(q.shape[0], -1)[:, :columns].astype(np.int64)


def _per_value(t: np.ndarray, group: int, columns: int) -> np.ndarray:
    """A [rows, groups] tensor repeated over each group's columns: [rows, columns]."""
    return np.repeat(t, group, axis=1)[:, :columns]


@kernel("dequantize")
def _dequantize(attrs, q, scale, zero=None):
    bits, group, shape = attrs["bits"], attrs["group_size"], tuple(attrs["shape"])
    columns = int(np.prod(shape[1:]))
    u = _unpack(q, bits, columns)
    z = 2 ** (bits - 1) if zero is None else _per_value(_wide(zero), group, columns)
    return ((u - z) * _per_value(_wide(scale), group, columns)).reshape(shape)


@kernel("quantized_matmul")
def _quantized_matmul(attrs, xq, x_scale, q, w_scale, w_zero=None):
    """Exact integer sums of each group's products, then the scales (in f64)."""
    bits, group = attrs["bits"], attrs["group_size"]
    columns = xq.shape[-1]
    u = _unpack(q, bits, columns)
    zero = 2 ** (bits - 1) if w_zero is None else np.rint(_per_value(_wide(w_zero), group, columns)).astype(np.int64)
    wq = u - zero
    out = np.zeros(xq.shape[:-1] + (q.shape[0],), np.float64)
    for g in range(-(-columns // group)):
        part = slice(g * group, (g + 1) * group)
        sums = np.matmul(xq[..., part].astype(np.int64), wq[:, part].T)
        out += sums * _wide(w_scale)[:, g].astype(np.float64)
    return out * _wide(x_scale).astype(np.float64)


def _saturate(x: np.ndarray, target: np.dtype) -> np.ndarray:
    """Floats as integers of `target`: truncated toward zero, saturated at its bounds, NaN as 0 (llvm's
    fptosi.sat, what every compiled target does; C leaves it undefined, and numpy's astype wraps on x86)."""
    info = np.iinfo(target)
    x = np.trunc(np.nan_to_num(np.asarray(x, np.float64), nan=0.0, posinf=np.inf, neginf=-np.inf))
    above, below = x >= float(info.max), x <= float(info.min)  # float(max) rounds up to a power of two
    out = np.where(above | below, 0, x).astype(target)
    out[above], out[below] = info.max, info.min
    return out


def evaluate(name: str, attrs: dict, arrays: list[np.ndarray], result_type: TensorType) -> np.ndarray:
    """Run op `name` on `arrays`; the result has exactly `result_type`."""
    with np.errstate(all="ignore"):
        out = np.asarray(KERNELS[name](attrs, *arrays))
        target = result_type.dtype.np_dtype
        if out.dtype.kind == "f" and target.kind in "iu":
            out = _saturate(out, target)
        if out.dtype != target:
            out = out.astype(target)
    if out.shape != result_type.shape:
        out = np.broadcast_to(out, result_type.shape)
    return out
