"""torch.export of models quantized with PT2E (`torchao.quantization.pt2e`: prepare_pt2e, convert_pt2e): the
`quantized_decomposed` quantize/dequantize ops it leaves in the graph.

- An integer weight (a constant) that a dequantize op reads becomes packed 8-bit words and `rt.dequantize`,
  so it stays int8 in memory and the matmul or convolution that reads it unpacks it on the fly, exactly as
  `--quantize int8` weights (per channel, or per tensor as a channel-wise scale).
- Everything else (activations quantized with fixed scales, "static" quantization) becomes elementwise graph
  ops with PyTorch's numbers: q = clamp(round(x * (1 / scale)) + zero_point, qmin, qmax) in the integer type,
  and (q - zero_point) * scale. Those fuse into the neighbouring kernels, and compute what PyTorch's reference
  kernels compute. The graph ops are `quant_common`'s, which ONNX's quantized ops share.
"""

from __future__ import annotations

import numpy as np

from ..errors import UnsupportedOpError
from ..ir.core import Value
from . import quant_common as Q
from .torch_export import _dtype, handles

_NS = "quantized_decomposed"


def _constant(v) -> np.ndarray | None:
    if isinstance(v, Value) and v.owner is not None and v.owner.name == "rt.constant":
        return v.owner.attrs["value"].array
    return None


def _number(v, what: str) -> np.ndarray:
    """A scale or zero point: a Python number, or a constant tensor."""
    if isinstance(v, (int, float)):
        return np.asarray(v)
    array = _constant(v)
    if array is None:
        raise UnsupportedOpError(f"a {what} computed at run time is not supported; PT2E's convert_pt2e makes it "
                                 "a constant", hint="export the model after convert_pt2e")
    return array


@handles(f"{_NS}.quantize_per_tensor.default", f"{_NS}.quantize_per_tensor.tensor",
         f"{_NS}.quantize_per_channel.default")
def _quantize(cv, node, x, scale, zero_point, *rest):
    per_channel = "per_channel" in str(node.target)
    axis, (quant_min, quant_max, dtype) = (rest[0], rest[1:4]) if per_channel else (None, rest[:3])
    b, shape = cv.b, x.type.shape
    inverse = (1.0 / _number(scale, "scale").astype(np.float64)).astype(x.type.dtype.np_dtype)
    zero = _number(zero_point, "zero point").astype(np.int32)
    scaled = b.op("rt.mul", [x, Q.per_axis(b, b.constant(inverse), axis, shape)])
    return Q.quantize(b, scaled, Q.per_axis(b, b.constant(zero), axis, shape), quant_min, quant_max, _dtype(dtype))


@handles(f"{_NS}.dequantize_per_tensor.default", f"{_NS}.dequantize_per_tensor.tensor",
         f"{_NS}.dequantize_per_channel.default")
def _dequantize(cv, node, q, scale, zero_point, *rest, out_dtype=None):
    per_channel = "per_channel" in str(node.target)
    axis = rest[0] if per_channel else None
    _, ft = cv.out_type(node)
    scales = _number(scale, "scale").astype(np.float64)
    zeros = _number(zero_point, "zero point").astype(np.float64)
    weight = _constant(q)
    packed = None if weight is None else Q.packed_weight(cv.b, weight, scales, zeros, axis or 0, ft)
    if packed is not None:
        return packed
    b, shape = cv.b, q.type.shape
    return Q.dequantize(b, q, Q.per_axis(b, b.constant(scales.astype(ft.np_dtype)), axis, shape),
                        Q.per_axis(b, b.constant(zeros.astype(ft.np_dtype)), axis, shape), ft)


@handles("_int_mm")
def _int_mm(cv, node, a, b):
    """int8 x int8 -> int32 (torchao's dynamically quantized matmuls): the products summed exactly in i32."""
    return cv.b.op("rt.matmul", [Q.widen(cv.b, a), Q.widen(cv.b, b)])
