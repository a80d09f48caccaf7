"""ONNX's quantized ops, as onnxruntime's quantizer writes them (`quantize_static`, QDQ or QOperator format, and
`quantize_dynamic`): QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, MatMulInteger, ConvInteger,
QLinearMatMul and QLinearConv. The numbers are `quant_common`'s, which PT2E's ops share.

- DequantizeLinear of an integer weight known at import time (8 or 4 bits, per tensor, per axis or per block)
  becomes packed words and `rt.dequantize`: the weight stays small in memory, and the kernel that reads it unpacks it.
- Everything else is elementwise graph ops with ONNX's numbers (as onnx's reference computes them):
  QuantizeLinear is saturate(round_half_even(x / scale) + zero_point) in the output type (uint8 unless the zero
  point or `output_dtype` says otherwise; 16-, 4- and 2-bit integers too; float8 and float4 as a cast, float8
  saturating unless `saturate=0`); DequantizeLinear is (x - zero_point) * scale, computed in f32.
- MatMulInteger and ConvInteger sum products of (q - zero_point) exactly, in i32. QLinearMatMul and QLinearConv
  do the same, then requantize: round(sum * (a_scale * b_scale / y_scale)) + y_zero_point, saturated, the
  multiplier in the scales' type and the product in f32 (onnx's reference takes it in f64; onnxruntime in f32).
"""

from __future__ import annotations

from ..errors import UnsupportedOpError
from ..ir.core import Value
from ..ir.dtypes import DTYPES, DType, f32, from_numpy
from . import compose as C
from . import quant_common as Q
from .onnx import _NO_FOLD, HANDLERS, _cast_to, _dtype, handles

_NO_FOLD.add("DequantizeLinear")  # a known integer weight stays packed, not folded into floats
ui8 = DTYPES["ui8"]

# the integer types a quantized value may have, and their ranges
RANGES = {"ui8": (0, 255), "i8": (-128, 127), "ui16": (0, 65535), "i16": (-32768, 32767), "ui4": (0, 15),
          "i4": (-8, 7), "ui2": (0, 3), "i2": (-2, 1)}


class _Operands:
    """Node `n` with other inputs (None: absent), for another op's handler: ConvInteger and QLinearConv take Conv's
    pads, strides, groups and 1-D lift, the integer matmuls MatMul's ranks."""

    def __init__(self, n, inputs: list):
        self._n, self._inputs = n, inputs

    def __getattr__(self, name):
        return getattr(self._n, name)

    def __call__(self, i: int) -> Value:
        return self._inputs[i]

    def has(self, i: int) -> bool:
        return i < len(self._inputs) and self._inputs[i] is not None


def _optional(n, i: int) -> Value | None:
    return n(i) if n.has(i) else None


def _type_of(n, i: int) -> tuple[tuple, DType]:
    """Shape and element type of input `i`, known or not (without making a known one a graph constant)."""
    v = n.cv.env[n.node.input[i]]
    return (v.type.shape, v.type.dtype) if isinstance(v, Value) else (v.shape, from_numpy(v.dtype))


def _axis(n, rank: int) -> int:
    """The quantization axis (1 by default; any for a scalar, whose scale is per tensor)."""
    return C.normalize_axis(n.attr("axis", 1), rank) if rank else 0


@handles("QuantizeLinear")
def _quantize_linear(n):
    x, scale, zero = n(0), n(1), _optional(n, 2)
    b, shape, axis, block = n.b, x.type.shape, _axis(n, x.type.rank), n.attr("block_size", 0)
    if zero is not None:
        out = zero.type.dtype
    else:
        out = _dtype(n.attr("output_dtype"), "QuantizeLinear's output_dtype") if n.attr("output_dtype") else ui8
    if out.name not in RANGES and not out.is_float:
        raise UnsupportedOpError(f"QuantizeLinear to {out} is not supported",
                                 hint=f"it quantizes to {', '.join(RANGES)}, float8 and float4")
    if n.attr("precision"):
        ft = _dtype(n.attr("precision"), "QuantizeLinear's precision")
    else:  # the division in the wider type, as numpy promotes
        ft = x.type.dtype if x.type.dtype == scale.type.dtype else f32
    scaled = b.op("rt.div", [Q.cast(b, x, ft), Q.per_axis(b, Q.cast(b, scale, ft), axis, shape, block)])
    zero = None if zero is None else Q.per_axis(b, zero, axis, shape, block)
    if out.name in RANGES:
        return Q.quantize(b, scaled, zero, *RANGES[out.name], out)
    if out.name.startswith("f4") and zero is not None:  # float8's zero point is 0; float4's is added
        scaled = b.op("rt.add", [scaled, Q.cast(b, zero, ft)])
    return _cast_to(n, scaled, out)  # float8 saturates unless saturate=0


@handles("DequantizeLinear")
def _dequantize_linear(n):
    out_code = n.attr("output_dtype")
    out = _dtype(out_code, "DequantizeLinear's output_dtype") if out_code else _type_of(n, 1)[1]
    axis, block = _axis(n, len(_type_of(n, 0)[0])), n.attr("block_size", 0)
    weight, scales, zeros = (n.known_if_so(i) for i in range(3))
    if weight is not None and scales is not None and (zeros is not None or not n.has(2)):
        per_tensor = scales.size == 1
        packed = Q.packed_weight(n.b, weight, scales, zeros, 0 if per_tensor else axis, out,
                                 0 if per_tensor else block)
        if packed is not None:
            return packed
    x = n(0)
    zero = None if x.type.dtype.is_float else _optional(n, 2)  # float8's and float4's zero point is 0
    zero = None if zero is None else Q.per_axis(n.b, zero, axis, x.type.shape, block)
    return Q.dequantize(n.b, x, Q.per_axis(n.b, n(1), axis, x.type.shape, block), zero, out)


@handles("DynamicQuantizeLinear")
def _dynamic_quantize_linear(n):
    """uint8 with the scale and zero point that map [min(x, 0), max(x, 0)] onto [0, 255]: three outputs."""
    x, b = n(0), n.b
    axes = tuple(range(x.type.rank))
    zero = C.scalar(b, 0, x)
    high = b.op("rt.max", [b.op("rt.reduce", [x], {"kind": "max", "axes": axes, "keepdims": False}), zero])
    low = b.op("rt.min", [b.op("rt.reduce", [x], {"kind": "min", "axes": axes, "keepdims": False}), zero])
    span = b.op("rt.sub", [high, low])
    span = b.op("rt.select", [b.op("rt.cmp", [span, zero], {"predicate": "eq"}), C.scalar(b, 1, x), span])
    scale = b.op("rt.div", [span, C.scalar(b, 255, x)])
    zero_point = Q.quantize(b, b.op("rt.sub", [zero, b.op("rt.div", [low, scale])]), None, 0, 255, ui8)
    return [Q.quantize(b, b.op("rt.div", [x, scale]), zero_point, 0, 255, ui8), scale, zero_point]


def _integers(n, *indices) -> list[Value | None]:
    """Inputs as integer operands: a float8 one (QLinearMatMul allows them) is refused."""
    values = [_optional(n, i) for i in indices]
    for v in values:
        if v is not None and v.type.dtype.is_float:
            raise UnsupportedOpError(f"{n.node.op_type} of {v.type.dtype} is not supported (8-bit integers are)")
    return values


def _integer_matmul(n, a, a_zero, w, w_zero) -> Value:
    """sum of (a - a_zero) * (w - w_zero) in i32; a 1-D a_zero is per row of a 2-D a, a w_zero per column."""
    if a_zero is not None and a_zero.type.rank == 1 and a_zero.type.num_elements > 1:
        a_zero = n.b.op("rt.reshape", [a_zero], {"shape": (a_zero.type.shape[0], 1)})
    return HANDLERS["MatMul"](_Operands(n, [Q.widen(n.b, a, a_zero), Q.widen(n.b, w, w_zero)]))


def _integer_conv(n, x, x_zero, w, w_zero, bias) -> Value:
    """Conv of (x - x_zero) and (w - w_zero) in i32 (padding is zero after the shift: the zero point before), plus
    an i32 bias; a 1-D w_zero is per output channel."""
    if w_zero is not None and w_zero.type.rank == 1 and w_zero.type.num_elements > 1:
        w_zero = C.channel_vector(n.b, w_zero, w.type.rank, 0)
    return HANDLERS["Conv"](_Operands(n, [Q.widen(n.b, x, x_zero), Q.widen(n.b, w, w_zero), bias]))


def _requantize(n, sums: Value, scale: Value, y_scale: Value, y_zero: Value | None, like: Value) -> Value:
    """round(sums * (scale / y_scale)) + y_zero, saturated to y_zero's type (else `like`'s): the multiplier in the
    scales' type, the product in f32."""
    b = n.b
    multiplier = Q.cast(b, b.op("rt.div", [scale, y_scale]), f32.name)
    out = (y_zero if y_zero is not None else like).type.dtype
    return Q.quantize(b, b.op("rt.mul", [Q.cast(b, sums, f32.name), multiplier]), y_zero, *RANGES[out.name], out)


@handles("MatMulInteger")
def _matmul_integer(n):
    a, w, a_zero, w_zero = _integers(n, 0, 1, 2, 3)
    return _integer_matmul(n, a, a_zero, w, w_zero)


@handles("ConvInteger")
def _conv_integer(n):
    x, w, x_zero, w_zero = _integers(n, 0, 1, 2, 3)
    return _integer_conv(n, x, x_zero, w, w_zero, None)


@handles("QLinearMatMul")
def _qlinear_matmul(n):
    a, a_zero, w, w_zero, y_zero = _integers(n, 0, 2, 3, 5, 7)
    sums = _integer_matmul(n, a, a_zero, w, w_zero)
    return _requantize(n, sums, n.b.op("rt.mul", [n(1), n(4)]), n(6), y_zero, a)


@handles("QLinearConv")
def _qlinear_conv(n):
    x, x_zero, w, w_zero, y_zero = _integers(n, 0, 2, 3, 5, 7)
    sums = _integer_conv(n, x, x_zero, w, w_zero, _optional(n, 8))
    w_scale = n(4)
    if w_scale.type.rank == 1 and w_scale.type.num_elements > 1:  # per output channel
        w_scale = C.channel_vector(n.b, w_scale, sums.type.rank)
    return _requantize(n, sums, n.b.op("rt.mul", [n(1), w_scale]), n(6), y_zero, x)
