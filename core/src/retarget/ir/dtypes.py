"""Element types: one table from MLIR spelling to numpy dtype and properties."""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np


@dataclass(frozen=True)
class DType:
    name: str  # MLIR spelling: f32, bf16, i8, i1, ...
    np_dtype: np.dtype
    bits: int
    kind: str  # "float", "int", "uint" or "bool"
    storage: bool = False  # only cast and moved, never computed in (the narrow types of ONNX and MLIR)

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_integer(self) -> bool:
        return self.kind in ("int", "uint", "bool")

    @property
    def itemsize(self) -> int:
        return self.np_dtype.itemsize

    def __str__(self) -> str:
        return self.name


def _d(name, np_type, bits, kind, storage=False):
    return DType(name, np.dtype(np_type), bits, kind, storage)


DTYPES: dict[str, DType] = {
    d.name: d
    for d in (
        _d("f64", np.float64, 64, "float"),
        _d("f32", np.float32, 32, "float"),
        _d("f16", np.float16, 16, "float"),
        _d("bf16", ml_dtypes.bfloat16, 16, "float"),
        _d("i64", np.int64, 64, "int"),
        _d("i32", np.int32, 32, "int"),
        _d("i16", np.int16, 16, "int"),
        _d("i8", np.int8, 8, "int"),
        _d("i4", ml_dtypes.int4, 4, "int"),
        _d("ui64", np.uint64, 64, "uint"),
        _d("ui32", np.uint32, 32, "uint"),
        _d("ui16", np.uint16, 16, "uint"),
        _d("ui8", np.uint8, 8, "uint"),
        _d("i1", np.bool_, 1, "bool"),
        # float8/float4 (OCP and the FNUZ variants, and OCP MX's E8M0 scale) and the sub-byte integers; one element
        # per byte
        _d("f8E4M3FN", ml_dtypes.float8_e4m3fn, 8, "float", True),
        _d("f8E4M3FNUZ", ml_dtypes.float8_e4m3fnuz, 8, "float", True),
        _d("f8E5M2", ml_dtypes.float8_e5m2, 8, "float", True),
        _d("f8E5M2FNUZ", ml_dtypes.float8_e5m2fnuz, 8, "float", True),
        _d("f8E8M0FNU", ml_dtypes.float8_e8m0fnu, 8, "float", True),
        _d("f4E2M1FN", ml_dtypes.float4_e2m1fn, 4, "float", True),
        _d("ui4", ml_dtypes.uint4, 4, "uint", True),
        _d("i2", ml_dtypes.int2, 2, "int", True),
        _d("ui2", ml_dtypes.uint2, 2, "uint", True),
    )
}

# MLIR's signless integers print as iN; `si`/`ui` prefixes and `index` map onto them.
ALIASES = {"si64": "i64", "si32": "i32", "si16": "i16", "si8": "i8", "index": "i64"}

f32, f16, bf16, i64, i32, i8, i1 = (DTYPES[n] for n in ("f32", "f16", "bf16", "i64", "i32", "i8", "i1"))


def dtype(name: str) -> DType:
    name = ALIASES.get(name, name)
    try:
        return DTYPES[name]
    except KeyError:
        raise KeyError(f"unknown element type '{name}'; known: {', '.join(DTYPES)}") from None


_BY_NUMPY = {d.np_dtype: d for d in DTYPES.values()}


def from_numpy(np_dtype) -> DType:
    np_dtype = np.dtype(np_dtype)
    if np_dtype in _BY_NUMPY:
        return _BY_NUMPY[np_dtype]
    for d in DTYPES.values():  # other byte orders
        if d.np_dtype == np_dtype:
            return d
    raise KeyError(f"numpy dtype {np_dtype} has no retarget element type")
