"""`tosa` (TOSA 1.0 as current MLIR prints it, and the older attribute spellings).

Every TOSA op uses the default assembly format, `operands {attrs} : (types) -> types`.
Images are NHWC and filters OHWI (depthwise: HWCM): converters transpose to the graph
IR's NCHW/OIHW and back. Shapes are `!tosa.shape` values from `tosa.const_shape`,
kept as tuples. Quantized forms (rescale, non-zero zero points) are not supported.
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import UnsupportedOpError
from ...ir.core import DenseAttr, Value
from ...ir.symbolic import divide_exactly
from ...mlir.syntax import MOp, custom_syntax
from .. import compose as C
from .convert import Converter, as_tensor_type, broadcast, cast, constant_value, converts, reshape, transpose
from .pretty import functional

BINARY = {"add": "rt.add", "sub": "rt.sub", "maximum": "rt.max", "minimum": "rt.min", "pow": "rt.pow",
          "logical_and": "rt.and", "logical_or": "rt.or", "logical_xor": "rt.xor", "bitwise_and": "rt.and",
          "bitwise_or": "rt.or", "bitwise_xor": "rt.xor", "intdiv": "rt.div"}
UNARY = {"abs": "rt.abs", "exp": "rt.exp", "log": "rt.log", "tanh": "rt.tanh", "sigmoid": "rt.sigmoid",
         "erf": "rt.erf", "reciprocal": "rt.reciprocal", "rsqrt": "rt.rsqrt", "negate": "rt.neg",
         "floor": "rt.floor", "ceil": "rt.ceil", "sin": "rt.sin", "cos": "rt.cos", "logical_not": "rt.not",
         "bitwise_not": "rt.not", "identity": None}
COMPARE = {"equal": "eq", "greater": "gt", "greater_equal": "ge"}
REDUCE = {"reduce_sum": "sum", "reduce_max": "max", "reduce_min": "min", "reduce_product": "prod",
          "reduce_all": "and", "reduce_any": "or"}
OTHER = ("mul clamp cast select matmul fully_connected conv2d depthwise_conv2d transpose_conv2d avg_pool2d "
         "max_pool2d reshape transpose concat pad slice tile gather argmax reverse const const_shape").split()

custom_syntax(*(f"tosa.{n}" for n in list(BINARY) + list(UNARY) + list(COMPARE) + list(REDUCE) + OTHER))(functional)


def _attr(op: MOp, *names, default=None):
    for n in names:
        if n in op.attrs:
            return op.attrs[n]
    return default


def _ints(v) -> tuple:
    if isinstance(v, DenseAttr):
        return tuple(int(x) for x in v.array.reshape(-1))
    return tuple(int(x) for x in v)


def _shape_operand(cv: Converter, op: MOp, i: int, attr_names=()) -> tuple:
    if i < len(op.operands):
        return tuple(int(x) for x in cv.static(op, i, "shape").reshape(-1))
    value = _attr(op, *attr_names)
    if value is None:
        raise cv.error(op, f"needs operand {i} or one of the attributes {', '.join(attr_names)}")
    return _ints(value)


def _require_zero_points(cv: Converter, op: MOp, indices):
    for i in indices:
        if i < len(op.operands):
            zp = constant_value(cv.get(op, op.operands[i]))
            if zp is not None and np.any(zp != 0):
                raise UnsupportedOpError(f"'{op.name}': non-zero zero points (quantized TOSA) are not supported",
                                         location=str(op.loc))


@converts("tosa.const")
def _const(cv: Converter, op: MOp):
    value = _attr(op, "values", "value")
    if not isinstance(value, DenseAttr):
        raise cv.error(op, "needs a dense 'values' attribute")
    return cv.b.op("rt.constant", [], {"value": value})


@converts("tosa.const_shape")
def _const_shape(cv: Converter, op: MOp):
    return tuple(int(x) for x in _attr(op, "values", "value").array.reshape(-1))


def _binary(cv: Converter, op: MOp):
    a, b = cv.value(op, 0), cv.value(op, 1)
    return cv.b.op(BINARY[op.name.split(".")[1]], [a, b])


def _unary(cv: Converter, op: MOp):
    x = cv.value(op, 0)
    name = UNARY[op.name.split(".")[1]]
    if op.name == "tosa.negate":
        _require_zero_points(cv, op, (1, 2))
    return x if name is None else cv.b.op(name, [x])


def _compare(cv: Converter, op: MOp):
    return cv.b.op("rt.cmp", [cv.value(op, 0), cv.value(op, 1)], {"predicate": COMPARE[op.name.split(".")[1]]})


def _reduce(cv: Converter, op: MOp):
    x = cv.value(op, 0)
    return cv.b.op("rt.reduce", [x], {"kind": REDUCE[op.name.split(".")[1]], "axes": (int(op.attrs["axis"]),),
                                      "keepdims": True})


for _n in BINARY:
    converts(f"tosa.{_n}")(_binary)
for _n in UNARY:
    converts(f"tosa.{_n}")(_unary)
for _n in COMPARE:
    converts(f"tosa.{_n}")(_compare)
for _n in REDUCE:
    converts(f"tosa.{_n}")(_reduce)


@converts("tosa.mul")
def _mul(cv: Converter, op: MOp):
    a, b = cv.value(op, 0), cv.value(op, 1)
    shift = constant_value(cv.get(op, op.operands[2])) if len(op.operands) > 2 else op.attrs.get("shift", 0)
    if shift is not None and np.any(np.asarray(shift) != 0):
        raise UnsupportedOpError("'tosa.mul': a non-zero shift (quantized TOSA) is not supported", location=str(op.loc))
    return cv.b.op("rt.mul", [a, b])


@converts("tosa.clamp")
def _clamp(cv: Converter, op: MOp):
    x = cv.value(op, 0)
    if x.type.dtype.is_float:
        lo, hi = _attr(op, "min_val", "min_fp"), _attr(op, "max_val", "max_fp")
    else:
        lo, hi = _attr(op, "min_val", "min_int"), _attr(op, "max_val", "max_int")
    np_dtype = x.type.dtype.np_dtype
    x = cv.b.op("rt.max", [x, cv.b.constant(np.array(lo, dtype=np_dtype))])
    return cv.b.op("rt.min", [x, cv.b.constant(np.array(hi, dtype=np_dtype))])


@converts("tosa.cast")
def _cast(cv: Converter, op: MOp):
    x = cv.value(op, 0)
    target = cv.result_type(op).dtype
    if x.type.dtype.is_float and target.is_integer and target.kind != "bool":
        x = cv.b.op("rt.round", [x])  # TOSA rounds to nearest even
    return cast(cv.b, x, target)


@converts("tosa.select")
def _select(cv: Converter, op: MOp):
    return cv.b.op("rt.select", cv.values(op)[:3])


@converts("tosa.matmul")
def _matmul(cv: Converter, op: MOp):
    _require_zero_points(cv, op, (2, 3))
    a, b = cv.value(op, 0), cv.value(op, 1)
    dtype = cv.result_type(op).dtype
    return cv.b.op("rt.matmul", [cast(cv.b, a, dtype), cast(cv.b, b, dtype)])


@converts("tosa.fully_connected")
def _fully_connected(cv: Converter, op: MOp):
    x, w, bias = cv.value(op, 0), cv.value(op, 1), cv.value(op, 2)
    y = cv.b.op("rt.matmul", [x, transpose(cv.b, w, (1, 0))])
    return cv.b.op("rt.add", [y, bias])


def _conv_attrs(op: MOp) -> dict:
    return {"strides": _ints(_attr(op, "stride", default=(1, 1))),
            "dilations": _ints(_attr(op, "dilation", default=(1, 1))),
            "pad": _ints(_attr(op, "pad", default=(0, 0, 0, 0)))}


def _bias_nchw(cv: Converter, y: Value, bias: Value) -> Value:
    if constant_value(bias) is not None and not np.any(constant_value(bias)):
        return y
    return cv.b.op("rt.add", [y, reshape(cv.b, bias, (1, bias.type.shape[0], 1, 1))])


@converts("tosa.conv2d")
def _conv2d(cv: Converter, op: MOp):
    _require_zero_points(cv, op, (3, 4))
    x, w, bias = cv.value(op, 0), cv.value(op, 1), cv.value(op, 2)
    b = cv.b
    y = b.op("rt.conv2d", [transpose(b, x, (0, 3, 1, 2)), transpose(b, w, (0, 3, 1, 2))], _conv_attrs(op))
    return transpose(b, _bias_nchw(cv, y, bias), (0, 2, 3, 1))


@converts("tosa.depthwise_conv2d")
def _depthwise_conv2d(cv: Converter, op: MOp):
    _require_zero_points(cv, op, (3, 4))
    x, w, bias = cv.value(op, 0), cv.value(op, 1), cv.value(op, 2)
    b = cv.b
    kh, kw, c, m = w.type.shape
    w = reshape(b, transpose(b, reshape(b, w, (kh, kw, c * m)), (2, 0, 1)), (c * m, 1, kh, kw))
    attrs = _conv_attrs(op) | {"groups": c}
    y = b.op("rt.conv2d", [transpose(b, x, (0, 3, 1, 2)), w], attrs)
    return transpose(b, _bias_nchw(cv, y, bias), (0, 2, 3, 1))


@converts("tosa.transpose_conv2d")
def _transpose_conv2d(cv: Converter, op: MOp):
    """out[oy, ox] += in[iy, ix] * w[ky, kx] at oy = iy * stride + ky + out_pad_top (and so for x): the input
    dilated by the stride, padded by kernel - 1 + out_pad, correlated with the kernel reversed."""
    _require_zero_points(cv, op, (3, 4))
    x, w, bias = cv.value(op, 0), cv.value(op, 1), cv.value(op, 2)
    b = cv.b
    _, kh, kw, _ = w.type.shape
    sy, sx = _ints(_attr(op, "stride", default=(1, 1)))
    top, bottom, left, right = _ints(_attr(op, "out_pad", default=(0, 0, 0, 0)))
    xn = C.dilate(b, transpose(b, x, (0, 3, 1, 2)), (0, 0, sy - 1, sx - 1))
    xn = C.pad_signed(b, xn, (0, 0, kh - 1 + top, kw - 1 + left), (0, 0, kh - 1 + bottom, kw - 1 + right))
    wn = C.reverse(b, transpose(b, w, (0, 3, 1, 2)), (2, 3))
    y = b.op("rt.conv2d", [xn, wn], {"strides": (1, 1), "dilations": (1, 1), "pad": (0, 0, 0, 0)})
    return transpose(b, _bias_nchw(cv, y, bias), (0, 2, 3, 1))


@converts("tosa.reverse")
def _reverse(cv: Converter, op: MOp):
    return C.reverse(cv.b, cv.value(op, 0), (int(op.attrs["axis"]),))


@converts("tosa.avg_pool2d", "tosa.max_pool2d")
def _pool(cv: Converter, op: MOp):
    if op.name == "tosa.avg_pool2d":
        _require_zero_points(cv, op, (1, 2))
    x = cv.value(op, 0)
    attrs = {"kernel": _ints(op.attrs["kernel"]), "strides": _ints(_attr(op, "stride", default=(1, 1))),
             "pad": _ints(_attr(op, "pad", default=(0, 0, 0, 0)))}
    name = "rt.avg_pool2d" if op.name == "tosa.avg_pool2d" else "rt.max_pool2d"
    y = cv.b.op(name, [transpose(cv.b, x, (0, 3, 1, 2))], attrs)
    return transpose(cv.b, y, (0, 2, 3, 1))


@converts("tosa.reshape")
def _reshape(cv: Converter, op: MOp):
    x = cv.value(op, 0)
    shape = list(_shape_operand(cv, op, 1, ("new_shape",)))
    if -1 in shape:
        known = math.prod(d for d in shape if d != -1)
        rest = divide_exactly(x.type.num_elements, max(known, 1))
        if rest is None:
            raise cv.error(op, f"cannot reshape {x.type} to {shape}")
        shape[shape.index(-1)] = rest
    return reshape(cv.b, x, shape)


@converts("tosa.transpose")
def _transpose(cv: Converter, op: MOp):
    perms = _attr(op, "perms")
    perms = _ints(perms) if perms is not None else _shape_operand(cv, op, 1)
    return transpose(cv.b, cv.value(op, 0), perms)


@converts("tosa.concat")
def _concat(cv: Converter, op: MOp):
    return cv.b.op("rt.concat", cv.values(op), {"axis": int(op.attrs["axis"])})


@converts("tosa.pad")
def _pad(cv: Converter, op: MOp):
    x = cv.value(op, 0)
    padding = _shape_operand(cv, op, 1, ("padding",))
    if len(op.operands) > 2:
        value = cv.static(op, 2, "pad value").reshape(-1)[0].item()
    else:
        value = _attr(op, "pad_const", "pad_const_fp", "pad_const_int", default=0)
    return cv.b.op("rt.pad", [x], {"low": tuple(padding[0::2]), "high": tuple(padding[1::2]), "value": value})


@converts("tosa.slice")
def _slice(cv: Converter, op: MOp):
    x = cv.value(op, 0)
    start = _shape_operand(cv, op, 1, ("start",))
    size = _shape_operand(cv, op, 2, ("size",))
    size = tuple(x.type.shape[d] - s if n == -1 else n for d, (s, n) in enumerate(zip(start, size)))
    return cv.b.op("rt.slice", [x], {"start": start, "limit": tuple(s + n for s, n in zip(start, size)),
                                     "stride": (1,) * len(start)})


@converts("tosa.tile")
def _tile(cv: Converter, op: MOp):
    x = cv.value(op, 0)
    multiples = _shape_operand(cv, op, 1, ("multiples",))
    interleaved = [v for d in x.type.shape for v in (1, d)]
    big = [v for m, d in zip(multiples, x.type.shape) for v in (m, d)]
    y = broadcast(cv.b, reshape(cv.b, x, interleaved), big)
    return reshape(cv.b, y, [m * d for m, d in zip(multiples, x.type.shape)])


@converts("tosa.gather")
def _gather(cv: Converter, op: MOp):
    values, idx = cv.value(op, 0), cv.value(op, 1)
    b = cv.b
    n, k, c = values.type.shape
    w = idx.type.shape[1]
    idx = cast(b, idx, as_tensor_type(idx.type.dtype).dtype)
    if n > 1:
        base = b.op("rt.iota", [], {"shape": (n, 1), "axis": 0, "dtype": idx.type.dtype.name})
        idx = b.op("rt.add", [idx, b.op("rt.mul", [base, b.constant(np.array(k, dtype=idx.type.dtype.np_dtype))])])
    flat = b.op("rt.gather", [reshape(b, values, (n * k, c)), reshape(b, idx, (n * w,))], {"axis": 0})
    return reshape(b, flat, (n, w, c))


@converts("tosa.argmax")
def _argmax(cv: Converter, op: MOp):
    y = cv.b.op("rt.argmax", [cv.value(op, 0)], {"axis": int(op.attrs["axis"])})
    return cast(cv.b, y, cv.result_type(op).dtype)
