"""Quantized tensors in graph ops, for every importer that reads them: PT2E's quantize and dequantize ops
(`torch_quant.py`) and ONNX's QuantizeLinear, DequantizeLinear and integer ops (`onnx_quant.py`).

- `packed_weight`: an integer weight known at import time (a constant), with its scales and zero points per
  tensor, per channel or per block, as packed words and `rt.dequantize`: it stays 8 (or 4) bits in memory and the
  kernel that reads it unpacks it on the fly, as `--quantize` weights (`passes/quantize.py`).
- `quantize`: scaled floats rounded half to even, plus the zero point, saturated to the integer type's range.
- `dequantize`: (q - zero point) * scale, computed in float.
- `widen`: integers as i32 less their zero point, the operands of products summed exactly (integer matmuls and
  convolutions).
"""

from __future__ import annotations

import numpy as np

from ..ir.core import Builder, DenseAttr, Value
from ..ir.dtypes import DType, from_numpy, i32
from ..passes.quantize import pack
from . import compose as C

# element types that pack: their bits, and the offset that makes them unsigned (u = q + offset)
PACKABLE = {"i8": (8, 128), "ui8": (8, 0), "i4": (4, 8), "ui4": (4, 0)}


def per_axis(b: Builder, v: Value, axis: int | None, shape: tuple, block_size: int = 0) -> Value:
    """Scales or zero points shaped to broadcast against a tensor of `shape`: one value (per tensor), a vector
    along `axis` (per channel), or, with `block_size`, a tensor of `shape` but ceil(size / block_size) along `axis`
    whose values each stand for a block of that many elements there (each repeated, the last block cut to fit)."""
    if v.type.rank == 0 or v.type.num_elements == 1:
        return v if v.type.rank == 0 else b.op("rt.reshape", [v], {"shape": ()})
    if not block_size:
        return C.channel_vector(b, v, len(shape), axis)
    blocks = v.type.shape[axis]
    split = v.type.shape[:axis + 1] + (1,) + v.type.shape[axis + 1:]
    wide = split[:axis + 1] + (block_size,) + split[axis + 2:]
    v = b.op("rt.broadcast", [b.op("rt.reshape", [v], {"shape": split})], {"shape": wide})
    v = b.op("rt.reshape", [v], {"shape": v.type.shape[:axis] + (blocks * block_size,) + v.type.shape[axis + 2:]})
    return C.slice_axis(b, v, axis, 0, shape[axis], 1) if blocks * block_size != shape[axis] else v


def quantize(b: Builder, scaled: Value, zero: Value | None, lowest: int, highest: int, out: DType) -> Value:
    """round(scaled) + zero, saturated to [lowest, highest], as `out`: `scaled` is x / scale (float), rounded half
    to even; the zero point is added in i32 (a 16-bit zero point is not exact in a half float's sum)."""
    q = cast(b, b.op("rt.round", [scaled]), i32.name)  # saturating; exact, as the value is rounded
    if zero is not None:
        q = b.op("rt.add", [q, cast(b, zero, i32.name)])
    return cast(b, C.clamp(b, q, lowest, highest), out.name)


def dequantize(b: Builder, q: Value, scale: Value, zero: Value | None, out: DType) -> Value:
    """(q - zero) * scale, computed in f32 (f64 for an f64 result) and then rounded to `out`."""
    compute = "f64" if out.name == "f64" else "f32"
    x = cast(b, q, compute)
    if zero is not None:
        x = b.op("rt.sub", [x, cast(b, zero, compute)])
    return cast(b, b.op("rt.mul", [x, cast(b, scale, compute)]), out.name)


def widen(b: Builder, q: Value, zero: Value | None = None) -> Value:
    """q - zero in i32: the operand of an integer product that is summed exactly (each product fits: 8 bits
    times 8 bits, and the sums wrap in 32 bits, as ONNX's MatMulInteger allows)."""
    x = cast(b, q, i32.name)
    return x if zero is None else b.op("rt.sub", [x, cast(b, zero, i32.name)])


def cast(b: Builder, x: Value, dtype: DType | str) -> Value:
    """`x` as `dtype` (a cast only where its type differs)."""
    name = dtype if isinstance(dtype, str) else dtype.name
    return x if x.type.dtype.name == name else b.op("rt.cast", [x], {"dtype": name})


def packed_weight(b: Builder, weight: np.ndarray, scales: np.ndarray, zeros: np.ndarray | None, axis: int,
                  out: DType, block_size: int = 0) -> Value | None:
    """`rt.dequantize` of a constant integer weight (8 or 4 bits), or None where the packed form cannot hold it (a
    vector, another element type, blocks that split a word). `scales` and `zeros` (None: 0) are one value, one per
    channel along `axis`, or with `block_size` one per block of that many elements along `axis` (shaped as the
    weight, with ceil(size / block_size) there). Per channel, each channel is a row; per block, `axis` runs along
    the rows and every other position is a row, so blocks are the packed form's groups."""
    kind = from_numpy(weight.dtype).name
    if kind not in PACKABLE or weight.ndim < 2:
        return None
    bits, offset = PACKABLE[kind]
    per_word = 32 // bits
    if block_size and block_size % per_word:
        return None
    zeros = np.zeros_like(scales) if zeros is None else zeros
    if block_size:  # rows: every position but `axis`; columns: `axis`
        moved = np.moveaxis(weight, axis, -1)
        rows, columns = int(np.prod(moved.shape[:-1])), moved.shape[-1]
        scale, zero = (np.moveaxis(np.asarray(t), axis, -1).reshape(rows, -1) for t in (scales, zeros))
        group, shape = block_size, [rows, columns]
    else:  # rows: `axis`; columns: every other position
        moved = np.moveaxis(weight, axis, 0)
        rows, columns = moved.shape[0], int(np.prod(moved.shape[1:]))
        scale, zero = (np.broadcast_to(np.asarray(t).reshape(-1), (rows,)).reshape(rows, 1) for t in (scales, zeros))
        group, shape = -(-columns // per_word) * per_word, list(moved.shape)
    u = (moved.reshape(rows, columns).astype(np.int64) + offset).astype(np.uint32)  # u - (zero + offset) = q - zero
    zero = zero.astype(np.float64) + offset
    operands = [b.op("rt.constant", [], {"value": DenseAttr(pack(u, bits))}), b.constant(scale.astype(out.np_dtype))]
    if not np.all(zero == 2 ** (bits - 1)):  # the implicit zero point of packed values
        operands.append(b.constant(zero.astype(out.np_dtype)))
    y = b.op("rt.dequantize", operands, {"bits": bits, "group_size": group, "shape": shape})
    if block_size:
        y = y if moved.ndim == 2 else b.op("rt.reshape", [y], {"shape": moved.shape})
        perm = list(range(weight.ndim - 1))
        perm.insert(axis, weight.ndim - 1)
    else:
        perm = list(range(1, weight.ndim))
        perm.insert(axis, 0)
    return y if perm == list(range(weight.ndim)) else b.op("rt.transpose", [y], {"perm": perm})
