"""torch.export of models quantized with PT2E (`torchao.quantization.pt2e`: prepare_pt2e, convert_pt2e): the
`quantized_decomposed` quantize/dequantize ops it leaves in the graph.

- An integer weight (a constant) that a dequantize op reads becomes packed 8-bit words and `rt.dequantize`,
  so it stays int8 in memory and the matmul or convolution that reads it unpacks it on the fly, exactly as
  `--quantize int8` weights (per channel, or per tensor as a channel-wise scale).
- Everything else (activations quantized with fixed scales, "static" quantization) becomes elementwise graph
  ops with PyTorch's numbers: q = clamp(round(x * (1 / scale)) + zero_point, qmin, qmax) in the integer type,
  and (q - zero_point) * scale. Those fuse into the neighbouring kernels, and compute what PyTorch's reference
  kernels compute.
"""

from __future__ import annotations

import numpy as np

from ..errors import UnsupportedOpError
from ..ir.core import DenseAttr, Value
from ..passes.quantize import pack
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


def _broadcast(values: np.ndarray, axis: int | None, rank: int) -> np.ndarray:
    """Per-channel values along `axis` shaped to broadcast against a rank-`rank` tensor."""
    if axis is None or values.ndim == 0:
        return values.reshape(())
    shape = [1] * rank
    shape[axis] = values.size
    return values.reshape(shape)


@handles(f"{_NS}.quantize_per_tensor.default", f"{_NS}.quantize_per_tensor.tensor",
         f"{_NS}.quantize_per_channel.default")
def _quantize(cv, node, x, scale, zero_point, *rest):
    per_channel = "per_channel" in str(node.target)
    axis, (quant_min, quant_max, dtype) = (rest[0], rest[1:4]) if per_channel else (None, rest[:3])
    out = _dtype(dtype)
    ft = x.type.dtype
    inverse = (1.0 / _number(scale, "scale").astype(np.float64)).astype(ft.np_dtype)
    zero = _number(zero_point, "zero point").astype(ft.np_dtype)
    b = cv.b
    q = b.op("rt.round", [b.op("rt.mul", [x, b.constant(_broadcast(inverse, axis, x.type.rank))])])
    q = b.op("rt.add", [q, b.constant(_broadcast(zero, axis, x.type.rank))])
    q = b.op("rt.min", [b.op("rt.max", [q, cv.tensor(float(quant_min), ft)]), cv.tensor(float(quant_max), ft)])
    return b.op("rt.cast", [q], {"dtype": out.name})


@handles(f"{_NS}.dequantize_per_tensor.default", f"{_NS}.dequantize_per_tensor.tensor",
         f"{_NS}.dequantize_per_channel.default")
def _dequantize(cv, node, q, scale, zero_point, *rest, out_dtype=None):
    per_channel = "per_channel" in str(node.target)
    axis = rest[0] if per_channel else None
    _, ft = cv.out_type(node)
    scales = _number(scale, "scale").astype(np.float64)
    zeros = _number(zero_point, "zero point").astype(np.float64)
    weight = _constant(q)
    if weight is not None and weight.ndim >= 2 and weight.dtype in (np.int8, np.uint8):
        return _packed(cv, weight, scales, zeros, axis or 0, ft)
    b = cv.b
    shifted = b.op("rt.sub", [b.op("rt.cast", [q], {"dtype": ft.name}),
                              b.constant(_broadcast(zeros.astype(ft.np_dtype), axis, q.type.rank))])
    return b.op("rt.mul", [shifted, b.constant(_broadcast(scales.astype(ft.np_dtype), axis, q.type.rank))])


def _packed(cv, weight: np.ndarray, scales: np.ndarray, zeros: np.ndarray, axis: int, ft):
    """rt.dequantize of an int8 or uint8 weight, its channels along `axis` (per-tensor: every channel alike)."""
    moved = np.moveaxis(weight, axis, 0)
    rows = moved.shape[0]
    columns = int(np.prod(moved.shape[1:]))
    offset = 128 if weight.dtype == np.int8 else 0  # stored unsigned: u = q + 128, and (u - (zp + 128)) = q - zp
    u = (moved.reshape(rows, columns).astype(np.int64) + offset).astype(np.uint32)
    scale = np.broadcast_to(scales.reshape(-1), (rows,)).reshape(rows, 1).astype(ft.np_dtype)
    zero = np.broadcast_to(zeros.reshape(-1), (rows,)).reshape(rows, 1) + offset
    b = cv.b
    operands = [b.op("rt.constant", [], {"value": DenseAttr(pack(u, 8))}), b.constant(scale)]
    if not np.all(zero == 128):  # 128 is the implicit zero point of 8-bit packed values
        operands.append(b.constant(zero.astype(ft.np_dtype)))
    group = -(-columns // 4) * 4
    out = b.op("rt.dequantize", operands, {"bits": 8, "group_size": group, "shape": list(moved.shape)})
    if axis == 0:
        return out
    perm = list(range(1, weight.ndim))
    perm.insert(axis, 0)
    return b.op("rt.transpose", [out], {"perm": perm})


@handles("_int_mm")
def _int_mm(cv, node, a, b):
    """int8 x int8 -> int32 (torchao's dynamically quantized matmuls): the products summed exactly in i32."""
    wide = [cv.b.op("rt.cast", [x], {"dtype": "i32"}) for x in (a, b)]
    return cv.b.op("rt.matmul", wide)
