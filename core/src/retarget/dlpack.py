"""DLPack without a framework: read another library's device array, and hand out our own.

`borrow(obj)` consumes `obj.__dlpack__()` (a torch or cupy tensor, a jax array, ...) into a `Borrowed`:
the data pointer, the device, shape, strides and element type, kept alive until `release()`.
`DeviceArray` is what a function returns on a device: it implements `__dlpack__` and
`__dlpack_device__`, so `torch.from_dlpack(y)` and `cupy.from_dlpack(y)` take it without a copy.

The C structures are DLPack's (dlpack.h, v1.0): `DLManagedTensor` behind a capsule named
"dltensor", and `DLManagedTensorVersioned` behind "dltensor_versioned" for consumers that ask for
`max_version >= (1, 0)`. A consumer renames the capsule ("used_dltensor") and calls the deleter when
it is done; a capsule nobody consumed calls it when it is collected. Which device memory a driver can
take or give is the driver's business (the optional DLPack members of `retarget.protocols.Device`).
"""

from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass

import numpy as np

from .errors import InputError
from .ir.dtypes import DTYPES, DType

# DLDeviceType values this module names (dlpack.h).
CPU, CUDA, CUDA_HOST, OPENCL, VULKAN, METAL, ROCM = 1, 2, 3, 4, 7, 8, 10
DEVICE_NAMES = {1: "cpu", 2: "cuda", 3: "cuda-host", 4: "opencl", 7: "vulkan", 8: "metal", 10: "rocm",
                13: "cuda-managed", 14: "oneapi", 15: "webgpu"}
# DLDataTypeCode: int, uint, float, (opaque handle), bfloat, complex, bool.
_CODES = {"int": 0, "uint": 1, "float": 2, "bfloat": 4, "bool": 6}


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    pass


_DELETER_VERSIONED = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensorVersioned))
DLManagedTensorVersioned._fields_ = [("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p),
                                     ("deleter", _DELETER_VERSIONED), ("flags", ctypes.c_uint64),
                                     ("dl_tensor", DLTensor)]
_READ_ONLY = 1  # DLPACK_FLAG_BITMASK_READ_ONLY

_api = ctypes.pythonapi
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_GetName.restype = ctypes.c_char_p
_api.PyCapsule_GetName.argtypes = [ctypes.py_object]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


def dtype_code(dt: DType) -> tuple[int, int]:
    """(DLDataTypeCode, bits) of an element type."""
    if dt.name == "bf16":
        return _CODES["bfloat"], 16
    if dt.kind == "bool":
        return _CODES["bool"], 8
    return _CODES[{"float": "float", "int": "int", "uint": "uint"}[dt.kind]], dt.bits


def _dtype_of(code: int, bits: int, lanes: int) -> DType:
    if lanes != 1:
        raise InputError(f"DLPack arrays of {lanes}-lane vectors are not supported", hint="pass scalars per element")
    for dt in DTYPES.values():
        if not dt.storage and dtype_code(dt) == (code, bits):  # f8 variants share (float, 8): none is chosen
            return dt
    raise InputError(f"DLPack element type (code {code}, {bits} bits) has no retarget element type",
                     hint="convert it to float32, float16, bfloat16 or an integer type first")


def device_of(obj) -> tuple[int, int] | None:
    """`obj.__dlpack_device__()` as (device type, id), or None for objects without it (or whose method fails)."""
    method = getattr(obj, "__dlpack_device__", None)
    if method is None:
        return None
    try:
        kind, index = method()
        return int(kind), int(index)
    except Exception:  # a foreign object's method: its failure only means we cannot tell
        return None


def device_name(device: tuple[int, int]) -> str:
    return f"{DEVICE_NAMES.get(device[0], f'DLPack device type {device[0]}')}:{device[1]}"


@dataclass
class Borrowed:
    """Another library's array, borrowed through DLPack: `address` is its first element's device address."""

    address: int
    device: tuple[int, int]
    shape: tuple[int, ...]
    dtype: DType
    contiguous: bool
    _capsule: object
    _managed: int  # the DLManagedTensor(Versioned) address, for its deleter
    _versioned: bool

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize  # math.prod: numpy's costs ~10 us a call

    def release(self) -> None:
        """Tell the producer we are done (its deleter), once."""
        if self._managed:
            managed, self._managed = self._managed, 0
            kind = DLManagedTensorVersioned if self._versioned else DLManagedTensor
            tensor = kind.from_address(managed)
            if tensor.deleter:
                tensor.deleter(ctypes.cast(managed, ctypes.POINTER(kind)))

    def __del__(self):
        try:
            self.release()
        except Exception:  # at interpreter exit ctypes may be gone
            pass


def borrow(obj, stream: int | None = None) -> Borrowed:
    """Consume `obj.__dlpack__(stream=stream)`: the producer orders its pending work before `stream`'s
    (DLPack's contract). Raises InputError for what this cannot read."""
    try:
        capsule = obj.__dlpack__(stream=stream) if stream is not None else obj.__dlpack__()
    except (TypeError, BufferError, RuntimeError, ValueError) as e:
        raise InputError(f"{type(obj).__name__}.__dlpack__ failed: {e}",
                         hint="pass a contiguous array on the module's device, or a numpy array") from None
    versioned = bool(_api.PyCapsule_IsValid(capsule, b"dltensor_versioned"))
    if not versioned and not _api.PyCapsule_IsValid(capsule, b"dltensor"):
        raise InputError(f"{type(obj).__name__}.__dlpack__ returned no unused DLPack capsule")
    name = b"dltensor_versioned" if versioned else b"dltensor"
    managed = _api.PyCapsule_GetPointer(capsule, name)
    kind = DLManagedTensorVersioned if versioned else DLManagedTensor
    t = kind.from_address(managed).dl_tensor
    shape = tuple(t.shape[i] for i in range(t.ndim))
    dt = _dtype_of(t.dtype.code, t.dtype.bits, t.dtype.lanes)
    contiguous = True
    if t.strides:
        expected = 1
        for i in reversed(range(t.ndim)):
            if shape[i] != 1 and t.strides[i] != expected:
                contiguous = False
            expected *= shape[i]
    _api.PyCapsule_SetName(capsule, b"used_dltensor_versioned" if versioned else b"used_dltensor")
    return Borrowed((t.data or 0) + t.byte_offset, (t.device.device_type, t.device.device_id), shape, dt, contiguous,
                    capsule, managed, versioned)


# -- giving our arrays out --------------------------------------------------------------------------------------

_LIVE: dict[int, tuple] = {}  # manager_ctx -> what must stay alive until the consumer's deleter runs


@_DELETER
def _delete(managed):
    _LIVE.pop(ctypes.addressof(managed.contents), None)


@_DELETER_VERSIONED
def _delete_versioned(managed):
    _LIVE.pop(ctypes.addressof(managed.contents), None)


@_CAPSULE_DESTRUCTOR
def _capsule_destructor(capsule):
    """A capsule collected without a consumer: free what it holds (a consumed one was renamed)."""
    obj = ctypes.cast(capsule, ctypes.py_object)
    for name in (b"dltensor", b"dltensor_versioned"):
        if _api.PyCapsule_IsValid(obj, name):
            managed = _api.PyCapsule_GetPointer(obj, name)
            _LIVE.pop(managed, None)


def export(address: int, device: tuple[int, int], shape: tuple[int, ...], dt: DType, owner,
           versioned: bool = False, read_only: bool = False):
    """A DLPack capsule for the C-contiguous `shape` x `dt` array at `address` on `device`; `owner`
    stays alive until the consumer is done with it."""
    kind = DLManagedTensorVersioned if versioned else DLManagedTensor
    managed = kind()
    dims = (ctypes.c_int64 * max(len(shape), 1))(*shape)
    code, bits = dtype_code(dt)
    managed.dl_tensor = DLTensor(address, DLDevice(*device), len(shape), DLDataType(code, bits, 1),
                                 ctypes.cast(dims, ctypes.POINTER(ctypes.c_int64)), None, 0)
    if versioned:
        managed.version = DLPackVersion(1, 0)
        managed.flags = _READ_ONLY if read_only else 0
        managed.deleter = _delete_versioned
    else:
        managed.deleter = _delete
    key = ctypes.addressof(managed)
    _LIVE[key] = (managed, dims, owner)
    return _api.PyCapsule_New(key, b"dltensor_versioned" if versioned else b"dltensor",
                              ctypes.cast(_capsule_destructor, ctypes.c_void_p))


class DeviceArray:
    """A function's output left on its device. `torch.from_dlpack(a)` (or cupy's, jax's) takes it without a
    copy; `a.numpy()` or `np.asarray(a)` copies it to the host. It owns its memory: each call returns new
    arrays, which later calls never overwrite."""

    def __init__(self, device, buffer, shape: tuple[int, ...], dt: DType):
        self.device, self.buffer, self.shape, self.dtype = device, buffer, tuple(shape), dt
        # its device address; asking for it tells the driver that the buffer is handed out (cuda keeps such
        # an output's memory for the next output when this array goes: no cuMemAlloc/cuMemFree per call)
        self.address = device.address(buffer)

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize  # math.prod: numpy's costs ~10 us a call

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device.dlpack_device

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        if dl_device is not None and tuple(dl_device) != self.device.dlpack_device:
            raise BufferError(f"this array lives on {device_name(self.device.dlpack_device)}; "
                              f"it cannot be exported to {device_name(tuple(dl_device))} without a copy")
        if copy:
            raise BufferError("retarget exports device arrays without copying; copy the consumer's tensor instead")
        # The call that made this array waited for its work, so any consumer stream may read it now.
        versioned = max_version is not None and tuple(max_version) >= (1, 0)
        return export(self.address, self.device.dlpack_device, self.shape, self.dtype, self.buffer, versioned)

    def numpy(self) -> np.ndarray:
        raw = self.device.read(self.buffer, 0, self.nbytes)
        return raw.view(self.dtype.np_dtype).reshape(self.shape)

    def __array__(self, dtype=None, copy=None):
        out = self.numpy()
        return out if dtype is None else out.astype(dtype)

    def __repr__(self) -> str:
        dims = "x".join(map(str, self.shape))
        return f"DeviceArray<{dims}x{self.dtype}> on {device_name(self.device.dlpack_device)}"

