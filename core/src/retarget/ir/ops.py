"""The graph ops: for each, its operands, its attributes and its result types.

Semantics follow numpy where numpy has the op: elementwise ops broadcast,
`rt.matmul` is `np.matmul`. Images are NCHW and conv filters OIHW; importers
insert the transposes for other layouts, and passes fold them. Integer `div`
and `rem` truncate toward zero, as C and every GPU do. `shr` shifts integers
right (arithmetic for signed, logical for unsigned), by 0 to bits - 1. A cast
from a float to an integer truncates toward zero and saturates at the type's
bounds, NaN giving 0 (llvm's fptosi.sat; C leaves it undefined); one between
integers wraps.

Quantized weights (`passes/quantize.py` makes them) are packed into 32-bit words:
`rt.dequantize(q, scale[, zero])` unpacks `bits`-bit unsigned values u along a
row (value c of row r is bits [bits * (c % per_word), ...) of word q[r, c // per_word],
per_word = 32 / bits) and returns (u - zero[r, c // group_size]) * scale[r, c // group_size],
zero defaulting to 2^(bits - 1) (symmetric); `shape` is the result's, its first
dim the rows and the rest one row. `rt.quantized_matmul(xq, x_scale, q, w_scale[, w_zero])`
is x @ W^T for int8 activations xq (integers in an i32 tensor) with per-row
scales and W packed as above: the products of each group are summed exactly, as
integers, then scaled.
`rt.scatter(data [..., P, T...], index [..., K], updates [..., K, T...])` is data with, row by row and for
j = 0..K-1 in order, q = index[..., j] and, where 0 <= q < P, out[..., q, T...] = updates[..., j, T...]
(`reduction` "none": the last write wins) or combined with it ("sum", "prod", "max", "min"; max and min propagate
NaN as `rt.max` does); an index out of range writes nothing. The leading dims of the three are equal (importers
broadcast first); the trailing dims T (none, or a whole row of them: index_put's rows, embedding_bag's) move with
each index.
`rt.segment_reduce(values [L, T...], starts [B], ends [B])` combines, for each segment b, the rows
values[i, T...] for i from starts[b] up to ends[b] (clipped to [0, L)) in order, by `kind` ("sum", "prod", "max",
"min"); an empty segment gives the kind's identity. Rows of values in order of their segments, as embedding_bag's
offsets give them: the cost is linear in the rows, whatever the segments, and their bounds may be data.
`rt.bitcast` reads each element's bits as `dtype`, of the same width (`bitcast_refusal`): the shape is kept. Like
`rt.reshape` it moves nothing: both are views (`VIEWS`), their result the operand's bytes, which no kernel computes.
The numpy reference for each op is in `vmvx/kernels.py`.

Host ops (`HOST_OPS`) have results whose sizes depend on the data: `rt.nonzero(x)` is the indices of x's nonzero
elements, i64 [rank, count] (ONNX NonZero); `rt.unique(x)` one `output` of ONNX Unique (values, indices, inverse or
counts; `sorted`, `axis`); `rt.non_max_suppression(boxes, scores, max_output, iou_threshold, score_threshold)` ONNX
NonMaxSuppression's selected indices, i64 [count, 3]. Each names in `count` the symbol of its data-dependent size.
No kernel computes them: the compiler splits a function at them into stages (`passes/stages.py`), and the runtime
runs them on the host between stages, with `ir/host_eval.py`, binding `count` to the size they produce.

Dimensions may be symbolic (`symbolic.Sym`, e.g. a batch size known only at call time). Symbolic
dimensions never broadcast: a symbol meets only 1, itself, or a dimension it must equal. Where an
op needs two dimensions equal and one is a symbol (a matmul's contraction, an add of `[n, 4]` and
`[m, 4]`), inference raises `DimMismatch`, which an importer's `Builder` answers by unifying the
two (replacing `m` by `n` in the whole function) and inferring again; everywhere else it is the
VerificationError it derives from. The attributes that hold shapes (`SHAPE_ATTRS`) may hold
symbolic dimensions too; the text form writes them as strings (`shape = [1, "seq", 16]`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import VerificationError
from .core import SHAPE_ATTR_KEYS, Location, TensorType
from .dtypes import DTYPES, DType, i1
from .symbolic import Sym, parse_dim

UNARY = (
    "neg abs exp log sqrt rsqrt tanh sigmoid erf floor ceil round sin cos tan "
    "reciprocal sign not log1p expm1 atan"
).split()
BINARY = "add sub mul div rem pow max min and or xor atan2 shr".split()
COMPARE_PREDICATES = ("eq", "ne", "lt", "le", "gt", "ge")
REDUCE_KINDS = ("sum", "max", "min", "prod", "and", "or")
SCATTER_KINDS = ("none", "sum", "prod", "max", "min")
SEGMENT_KINDS = ("sum", "prod", "max", "min")
SHAPE_ATTRS = SHAPE_ATTR_KEYS  # attributes whose entries are dimensions, and may be symbolic

# The ops that only move or convert elements: the only ones that take storage-only types (f8, f4, ui4, i2).
MOVES = frozenset(f"rt.{n}" for n in
                  "cast bitcast constant reshape transpose broadcast slice concat pad gather select".split())
# The ops whose result is its operand's bytes seen another way: the host program gives both one slot, no kernel.
VIEWS = ("rt.reshape", "rt.bitcast")
# The ops whose result sizes depend on the data: run on the host between stages (see the docstring).
HOST_OPS = ("rt.nonzero", "rt.unique", "rt.non_max_suppression")
UNIQUE_OUTPUTS = ("values", "indices", "inverse", "counts")


@dataclass(frozen=True)
class OpDef:
    name: str
    min_operands: int
    max_operands: int | None
    attrs: tuple[str, ...]  # required attributes
    infer: Callable[[str, list[TensorType], dict], list[TensorType]]
    elementwise: bool = False


class _Fail(Exception):
    pass


class _Mismatch(_Fail):
    def __init__(self, a, b, reason: str):
        super().__init__(reason)
        self.dims = (a, b)


class DimMismatch(VerificationError):
    """Two dimensions an op needs equal differ, and at least one is symbolic: `dims` holds them."""

    def __init__(self, message: str, dims: tuple = (), **kwargs):
        super().__init__(message, **kwargs)
        self.dims = dims


def _check(cond, reason: str):
    if not cond:
        raise _Fail(reason)


def _same(a, b, reason: str):
    """a, which must equal b: a mismatch of two ints fails, one involving a symbol asks for unification."""
    if a == b:
        return a
    if isinstance(a, int) and isinstance(b, int):
        raise _Fail(reason)
    raise _Mismatch(a, b, reason)


def _is_int(d) -> bool:
    return isinstance(d, int)


def broadcast_shapes(*shapes):
    if all(s == shapes[0] for s in shapes[1:]) and None not in shapes[0]:  # the common case
        return tuple(shapes[0])
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for axis in range(rank):
        dims = [s[len(s) - rank + axis] for s in shapes if len(s) - rank + axis >= 0]
        if any(d is None for d in dims):
            raise _Fail(f"shapes {' and '.join(str(list(s)) for s in shapes)} have an unknown dimension")
        wide = [d for d in dims if d != 1]
        result = wide[0] if wide else 1
        for d in wide[1:]:
            if d != result:  # the message only when it fails: a rank of thousands made it quadratic
                _same(result, d, f"shapes {' and '.join(_text(s) for s in shapes)} do not broadcast")
        out.append(result)
    return tuple(out)


def _text(shape) -> str:
    """A shape for a message: in full up to 16 dimensions, else its ends and its rank."""
    if len(shape) > 16:
        return "[" + ", ".join(str(d) for d in shape[:8]) + ", ..., " + ", ".join(str(d) for d in shape[-4:]) + \
            f"] (rank {len(shape)})"
    return "[" + ", ".join(str(d) for d in shape) + "]"


def normalize_shape_attrs(attrs: dict) -> dict:
    """`attrs` with the entries of its `SHAPE_ATTRS` as dimensions (text, as the printer writes
    symbolic ones, parsed), in tuples."""
    out = dict(attrs)
    for key in SHAPE_ATTRS:
        value = out.get(key)
        if isinstance(value, (list, tuple)) and any(isinstance(v, (str, Sym)) for v in value):
            try:
                out[key] = tuple(parse_dim(v) if isinstance(v, str) else v for v in value)
            except ValueError as e:
                raise VerificationError(f"attribute {key} = {list(value)}: {e}",
                                        hint="a symbolic dimension is written as text, e.g. \"2*seq\"") from None
    return out


def _same_dtype(types):
    if len({t.dtype for t in types}) != 1:  # the message only when it fails: this runs for every op
        raise _Fail(f"operand element types differ: {', '.join(str(t) for t in types)}")
    return types[0].dtype


def _unary(name, types, attrs):
    return [types[0]]


def _binary(name, types, attrs):
    return [TensorType(broadcast_shapes(*(t.shape for t in types)), _same_dtype(types))]


def _compare(name, types, attrs):
    _check(attrs["predicate"] in COMPARE_PREDICATES, f"predicate must be one of {', '.join(COMPARE_PREDICATES)}")
    _same_dtype(types)
    return [TensorType(broadcast_shapes(*(t.shape for t in types)), i1)]


def _select(name, types, attrs):
    _check(types[0].dtype == i1, "the condition must be i1")
    dtype = _same_dtype(types[1:])
    return [TensorType(broadcast_shapes(*(t.shape for t in types)), dtype)]


def _cast(name, types, attrs):
    _check(attrs["dtype"] in DTYPES, f"unknown dtype '{attrs['dtype']}'")
    return [TensorType(types[0].shape, DTYPES[attrs["dtype"]])]


def _constant(name, types, attrs):
    from .core import DenseAttr

    value = attrs["value"]
    _check(isinstance(value, DenseAttr), "value must be a dense elements attribute")
    return [value.type]


def _reshape(name, types, attrs):
    shape = tuple(attrs["shape"])
    _check(all(not _is_int(d) or d >= 0 for d in shape), f"shape {_text(shape)} has a negative dimension")
    _check(
        math.prod(shape) == types[0].num_elements,
        f"cannot reshape {types[0]} ({types[0].num_elements} elements) to {_text(shape)}",
    )
    return [TensorType(shape, types[0].dtype)]


def bitcast_width(dt: DType) -> int:
    """The bits of an element as a bitcast reads them: i1 is its byte (as ONNX's and torch's bool), a sub-byte type
    its own bits (the low bits of its byte, `kernel/narrow.py`)."""
    return 8 if dt.kind == "bool" else dt.bits


def bitcast_refusal(src: DType, dst: DType) -> str | None:
    """Why the bits of a `src` element cannot be read as a `dst` element, or None. Every target stores an element
    as numpy does (one numpy item each, little-endian), so a view of equal widths is exact; but only the bytes 0 and
    1 are bools (C's, CUDA's and Metal's bool may read another byte as neither)."""
    if src == dst:
        return None
    if bitcast_width(src) != bitcast_width(dst):
        return (f"{src} has {bitcast_width(src)} bits and {dst} {bitcast_width(dst)}: a bitcast keeps the shape, so "
                "both types must be as wide")
    if dst.kind == "bool":
        return f"only the {src} bytes 0 and 1 are i1 values, and a bitcast would keep the others; compare with 0"
    return None


def _bitcast(name, types, attrs):
    _check(attrs["dtype"] in DTYPES, f"unknown dtype '{attrs['dtype']}'")
    dst = DTYPES[attrs["dtype"]]
    why = bitcast_refusal(types[0].dtype, dst)
    _check(why is None, f"cannot bitcast {types[0]} to {dst}: {why}")
    return [TensorType(types[0].shape, dst)]


def _transpose(name, types, attrs):
    perm = tuple(attrs["perm"])
    _check(sorted(perm) == list(range(types[0].rank)),
           f"perm {list(perm)} is not a permutation of rank {types[0].rank}")
    return [TensorType(tuple(types[0].shape[p] for p in perm), types[0].dtype)]


def _broadcast(name, types, attrs):
    shape = tuple(attrs["shape"])
    _check(broadcast_shapes(types[0].shape, shape) == shape, f"{types[0]} does not broadcast to {_text(shape)}")
    return [TensorType(shape, types[0].dtype)]


def _slice(name, types, attrs):
    t = types[0]
    start, limit, stride = (tuple(attrs[k]) for k in ("start", "limit", "stride"))
    _check(len(start) == len(limit) == len(stride) == t.rank, f"start/limit/stride need {t.rank} entries")
    shape = []
    for d, (s, e, k) in enumerate(zip(start, limit, stride)):
        _check(k > 0, f"stride {k} in dim {d} must be positive")
        # symbolic bounds are the importer's promise; only what is known is checked
        known = [v for v in (0, s, e, t.shape[d]) if _is_int(v)]
        _check(known == sorted(known) and (not _is_int(s) or s >= 0),
               f"slice [{s}:{e}] out of bounds for dim {d} of size {t.shape[d]}")
        shape.append((e - s + k - 1) // k)
    return [TensorType(tuple(shape), t.dtype)]


def _concat(name, types, attrs):
    axis = attrs["axis"]
    dtype = _same_dtype(types)
    rank = types[0].rank
    _check(0 <= axis < rank, f"axis {axis} out of range for rank {rank}")
    for t in types:
        _check(t.rank == rank, f"operands {', '.join(map(str, types))} differ in rank")
        for d in range(rank):
            if d != axis:
                _same(types[0].shape[d], t.shape[d],
                      f"operands {', '.join(map(str, types))} differ outside axis {axis}")
    shape = list(types[0].shape)
    shape[axis] = sum(t.shape[axis] for t in types)
    return [TensorType(tuple(shape), dtype)]


def _pad(name, types, attrs):
    t = types[0]
    low, high = tuple(attrs["low"]), tuple(attrs["high"])
    _check(len(low) == len(high) == t.rank, f"low/high need {t.rank} entries")
    _check(all(_is_int(p) and p >= 0 for p in low + high), "padding must be non-negative integers")
    return [TensorType(tuple(d + lo + hi for d, lo, hi in zip(t.shape, low, high)), t.dtype)]


def _gather(name, types, attrs):
    data, idx = types
    axis = attrs["axis"]
    _check(0 <= axis < data.rank, f"axis {axis} out of range for rank {data.rank}")
    _check(idx.dtype.is_integer and idx.dtype != i1, "indices must be integers")
    return [TensorType(data.shape[:axis] + idx.shape + data.shape[axis + 1:], data.dtype)]


def _matmul(name, types, attrs):
    a, b = types
    _check(a.rank >= 2 and b.rank >= 2, f"operands must have rank >= 2, got {a} and {b}")
    _same(a.shape[-1], b.shape[-2], f"contraction dims differ: {a} @ {b} ({a.shape[-1]} and {b.shape[-2]})")
    _same_dtype(types)
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return [TensorType(batch + (a.shape[-2], b.shape[-1]), a.dtype)]


def _window(size, k, stride, lo, hi, dilation=1):
    out = (size + lo + hi - dilation * (k - 1) - 1) // stride + 1
    # a symbolic size: whether the window fits is checked when the function is called (the output's size)
    _check(not _is_int(out) or out > 0,
           f"window of {k} (dilation {dilation}) does not fit input {size} with padding {lo}+{hi}")
    return out


def _pairs(attrs, key, default):
    value = tuple(attrs.get(key, default))
    _check(len(value) == len(default), f"'{key}' needs {len(default)} entries, got {list(value)}")
    _check(all(v >= (0 if key == "pad" else 1) for v in value), f"'{key}' entries out of range: {list(value)}")
    return value


def _conv2d(name, types, attrs):
    x, w = types
    _check(x.rank == 4 and w.rank == 4, f"input and filter must be rank 4 (NCHW, OIHW), got {x} and {w}")
    _same_dtype(types)
    sh, sw = _pairs(attrs, "strides", (1, 1))
    dh, dw = _pairs(attrs, "dilations", (1, 1))
    pt, pb, pl, pr = _pairs(attrs, "pad", (0, 0, 0, 0))
    groups = attrs.get("groups", 1)
    n, c, h, wd = x.shape
    o, ci, kh, kw = w.shape
    _check(all(_is_int(d) for d in w.shape) and _is_int(c),
           f"channels and filter sizes must be static, got {x} and {w} (only batch and image sizes may be symbolic)")
    _check(groups >= 1 and c % groups == 0 and o % groups == 0,
           f"groups={groups} must divide {c} in and {o} out channels")
    _check(ci * groups == c, f"filter has {ci} input channels per group, input has {c} channels in {groups} groups")
    return [TensorType((n, o, _window(h, kh, sh, pt, pb, dh), _window(wd, kw, sw, pl, pr, dw)), x.dtype)]


def _pool2d(name, types, attrs):
    x = types[0]
    _check(x.rank == 4, f"input must be rank 4 (NCHW), got {x}")
    kh, kw = _pairs(attrs, "kernel", (1, 1))
    sh, sw = _pairs(attrs, "strides", (1, 1))
    dh, dw = _pairs(attrs, "dilations", (1, 1))
    pt, pb, pl, pr = _pairs(attrs, "pad", (0, 0, 0, 0))
    span_h, span_w = dh * (kh - 1) + 1, dw * (kw - 1) + 1
    _check(pt < span_h and pb < span_h and pl < span_w and pr < span_w, "padding must be smaller than the window")
    n, c, h, w = x.shape
    return [TensorType((n, c, _window(h, kh, sh, pt, pb, dh), _window(w, kw, sw, pl, pr, dw)), x.dtype)]


def _reduce(name, types, attrs):
    t = types[0]
    _check(attrs["kind"] in REDUCE_KINDS, f"kind must be one of {', '.join(REDUCE_KINDS)}")
    axes = tuple(attrs["axes"])
    _check(all(0 <= a < t.rank for a in axes) and len(set(axes)) == len(axes),
           f"axes {list(axes)} invalid for rank {t.rank}")
    keep = attrs.get("keepdims", False)
    if keep:
        return [TensorType(tuple(1 if d in axes else s for d, s in enumerate(t.shape)), t.dtype)]
    return [TensorType(tuple(s for d, s in enumerate(t.shape) if d not in axes), t.dtype)]


def _argmax(name, types, attrs):
    t = types[0]
    axis = attrs["axis"]
    _check(0 <= axis < t.rank, f"axis {axis} invalid for rank {t.rank}")
    keep = attrs.get("keepdims", False)
    shape = tuple(1 if d == axis else s for d, s in enumerate(t.shape)) if keep else t.shape[:axis] + t.shape[axis + 1:]
    return [TensorType(shape, DTYPES["i64"])]


def _scatter(name, types, attrs):
    data, index, updates = types
    _check(attrs["reduction"] in SCATTER_KINDS, f"reduction must be one of {', '.join(SCATTER_KINDS)}")
    _check(index.dtype.is_integer and index.dtype != i1, f"indices must be integers, got {index}")
    tail = data.shape[index.rank:]
    _check(index.rank >= 1 and data.rank >= index.rank and updates.shape == index.shape + tail,
           f"data {data}, index {index} and updates {updates}: updates must be index's shape and data's trailing "
           "dims past index's rank")
    for d, i in zip(data.shape[:index.rank - 1], index.shape[:-1]):
        _same(d, i, f"index {index} and data {data} differ before the scattered axis")
    _check(updates.dtype == data.dtype, f"updates {updates} and data {data} differ in element type")
    return [data]


def _segment_reduce(name, types, attrs):
    values, starts, ends = types
    _check(attrs["kind"] in SEGMENT_KINDS, f"kind must be one of {', '.join(SEGMENT_KINDS)}")
    _check(values.rank >= 1, f"values {values} need a leading axis of rows")
    for bound in (starts, ends):
        _check(bound.rank == 1 and bound.dtype.is_integer and bound.dtype != i1,
               f"segment bounds must be 1-D integers, got {bound}")
    _same(starts.shape[0], ends.shape[0], f"starts {starts} and ends {ends} differ in length")
    return [TensorType((starts.shape[0], *values.shape[1:]), values.dtype)]


def _iota(name, types, attrs):
    shape = tuple(attrs["shape"])
    _check(0 <= attrs["axis"] < len(shape), f"axis {attrs['axis']} invalid for shape {list(shape)}")
    _check(attrs["dtype"] in DTYPES, f"unknown dtype '{attrs['dtype']}'")
    return [TensorType(shape, DTYPES[attrs["dtype"]])]


def _count(attrs):
    """A host op's data-dependent size: a symbol's name (or a size, where the model's shapes fixed it)."""
    count = attrs["count"]
    _check(isinstance(count, int) or (isinstance(count, str) and count), "count must name a symbol")
    return count if isinstance(count, int) else parse_dim(count)


def _nonzero(name, types, attrs):
    return [TensorType((types[0].rank, _count(attrs)), DTYPES["i64"])]


def _unique(name, types, attrs):
    x, n, axis, output = types[0], _count(attrs), attrs.get("axis"), attrs["output"]
    _check(output in UNIQUE_OUTPUTS, f"output '{output}' is not one of {', '.join(UNIQUE_OUTPUTS)}")
    _check(axis is None or 0 <= axis < x.rank, f"axis {axis} invalid for rank {x.rank}")
    if output == "values":
        return [TensorType((n,) if axis is None else x.shape[:axis] + (n,) + x.shape[axis + 1:], x.dtype)]
    if output == "inverse":
        return [TensorType((x.num_elements if axis is None else x.shape[axis],), DTYPES["i64"])]
    return [TensorType((n,), DTYPES["i64"])]


def _non_max_suppression(name, types, attrs):
    boxes, scores = types[:2]
    _check(boxes.rank == 3 and boxes.shape[2] == 4, f"boxes must be [batches, boxes, 4], got {boxes}")
    _check(scores.rank == 3, f"scores must be [batches, classes, boxes], got {scores}")
    _check(all(t.dtype.is_float for t in (boxes, scores, types[3], types[4])), "boxes, scores and thresholds are "
           "floats")
    _check(types[2].dtype.is_integer, "max_output is an integer")
    return [TensorType((_count(attrs), 3), DTYPES["i64"])]


def _packed_weight(types, attrs, columns: int):
    """Checks q (words), scale and zero point of a packed weight of `columns` values a row; returns its rows."""
    q, scale, *zero = types
    bits, group = attrs["bits"], attrs["group_size"]
    _check(bits in (4, 8), f"bits must be 4 or 8, got {bits}")
    _check(isinstance(group, int) and group > 0 and group % (32 // bits) == 0,
           f"group_size {group} must be a positive multiple of {32 // bits} (values in a word)")
    _check(q.rank == 2 and q.dtype.name == "ui32", f"packed weights must be a 2-D ui32 tensor, got {q}")
    rows = q.shape[0]
    _check(q.shape[1] == -(-columns // (32 // bits)), f"{q} holds {q.shape[1]} words a row; "
           f"{columns} values of {bits} bits need {-(-columns // (32 // bits))}")
    groups = (rows, -(-columns // group))
    for t in [scale, *zero]:
        _check(t.dtype.is_float and t.shape == groups, f"scales and zero points must be float {list(groups)}, got {t}")
    _check(not zero or zero[0].dtype == scale.dtype, "the zero points' type must be the scales'")
    return rows


def _dequantize(name, types, attrs):
    shape = tuple(attrs["shape"])
    _check(len(shape) >= 2 and all(d > 0 for d in shape), f"shape {list(shape)} must be rank >= 2, positive")
    _check(_packed_weight(types, attrs, math.prod(shape[1:])) == shape[0],
           f"shape {list(shape)} has {shape[0]} rows, the weight {types[0].shape[0]}")
    return [TensorType(shape, types[1].dtype)]


def _quantized_matmul(name, types, attrs):
    xq, x_scale, *weight = types
    _check(xq.rank >= 2 and xq.dtype.name == "i32", f"activations must be an i32 tensor of rank >= 2, got {xq}")
    _check(x_scale.dtype == weight[1].dtype and x_scale.shape == xq.shape[:-1] + (1,),
           f"activation scales must be {weight[1].dtype} {list(xq.shape[:-1]) + [1]}, got {x_scale}")
    rows = _packed_weight(weight, attrs, xq.shape[-1])
    return [TensorType(xq.shape[:-1] + (rows,), weight[1].dtype)]


OPS: dict[str, OpDef] = {}


def _define(name, n_min, n_max, attrs, infer, elementwise=False):
    OPS[f"rt.{name}"] = OpDef(f"rt.{name}", n_min, n_max, tuple(attrs), infer, elementwise)


for _n in UNARY:
    _define(_n, 1, 1, (), _unary, elementwise=True)
for _n in BINARY:
    _define(_n, 2, 2, (), _binary, elementwise=True)
_define("cmp", 2, 2, ("predicate",), _compare, elementwise=True)
_define("select", 3, 3, (), _select, elementwise=True)
_define("cast", 1, 1, ("dtype",), _cast, elementwise=True)
_define("constant", 0, 0, ("value",), _constant)
_define("iota", 0, 0, ("shape", "axis", "dtype"), _iota)
_define("reshape", 1, 1, ("shape",), _reshape)
_define("bitcast", 1, 1, ("dtype",), _bitcast)
_define("transpose", 1, 1, ("perm",), _transpose)
_define("broadcast", 1, 1, ("shape",), _broadcast)
_define("slice", 1, 1, ("start", "limit", "stride"), _slice)
_define("concat", 1, None, ("axis",), _concat)
_define("pad", 1, 1, ("low", "high", "value"), _pad)
_define("gather", 2, 2, ("axis",), _gather)
_define("matmul", 2, 2, (), _matmul)
_define("conv2d", 2, 2, (), _conv2d)
_define("max_pool2d", 1, 1, ("kernel",), _pool2d)
_define("avg_pool2d", 1, 1, ("kernel",), _pool2d)
_define("reduce", 1, 1, ("kind", "axes"), _reduce)
_define("argmax", 1, 1, ("axis",), _argmax)
_define("scatter", 3, 3, ("reduction",), _scatter)
_define("segment_reduce", 3, 3, ("kind",), _segment_reduce)
_define("nonzero", 1, 1, ("count",), _nonzero)
_define("unique", 1, 1, ("count", "output"), _unique)
_define("non_max_suppression", 5, 5, ("count", "center_point_box"), _non_max_suppression)
_define("dequantize", 2, 3, ("bits", "group_size", "shape"), _dequantize)
_define("quantized_matmul", 4, 5, ("bits", "group_size"), _quantized_matmul)


def infer_types(name: str, types: list[TensorType], attrs: dict, loc: Location | None = None) -> list[TensorType]:
    """Result types of op `name`; raises VerificationError naming the op and the reason."""
    where = f" at {loc}" if loc else ""
    opdef = OPS.get(name)
    if opdef is None:
        raise VerificationError(f"'{name}'{where}: unknown graph op")
    n = len(types)
    if n < opdef.min_operands or (opdef.max_operands is not None and n > opdef.max_operands):
        want = opdef.min_operands if opdef.max_operands == opdef.min_operands else f"{opdef.min_operands}+"
        raise VerificationError(f"'{name}'{where}: expects {want} operands, got {n}")
    missing = [a for a in opdef.attrs if a not in attrs]
    if missing:
        raise VerificationError(f"'{name}'{where}: missing attribute {', '.join(missing)}")
    try:
        results = opdef.infer(name, types, attrs)
        if name not in MOVES:
            narrow = sorted({str(t.dtype) for t in [*types, *results] if t.dtype.storage})
            _check(not narrow, f"{', '.join(narrow)} values are only cast and moved; cast them to f32 to compute")
        return results
    except _Mismatch as e:
        raise DimMismatch(f"'{name}'{where}: {e}", e.dims,
                          hint=f"dimensions {e.dims[0]} and {e.dims[1]} must be equal") from None
    except _Fail as e:
        raise VerificationError(f"'{name}'{where}: {e}") from None
    except (TypeError, ValueError, KeyError, IndexError, AttributeError, OverflowError) as e:
        # an attribute of the wrong kind, e.g. axes = "x" (text from elsewhere is not always what the printer wrote)
        raise VerificationError(f"'{name}'{where}: malformed attributes ({type(e).__name__}: {e})",
                                hint="attributes: " + ", ".join(f"{k} = {v!r}"[:80]
                                                                for k, v in attrs.items())) from None
