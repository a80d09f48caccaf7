"""A stand-in for `cuda.bindings.driver`, so driver.py runs on a machine without a GPU: the calls it makes,
with the bindings' return convention ((CUresult, *values)), keeping count of what is alive (allocations,
modules, streams, graphs, events, the primary context's retains) and enforcing a rule of stream capture
that the driver must follow: while a stream captures, only the capturing thread's launches may go on it
(CUDA fails anything else issued there, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, and invalidates the
capture). Kernels do not run: these tests check how the driver uses the API, not what kernels compute."""

from __future__ import annotations

import enum
import itertools
import threading
import time
from types import SimpleNamespace


class CUresult(enum.Enum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_INVALID_VALUE = 1
    CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900


CUstream_flags = SimpleNamespace(CU_STREAM_DEFAULT=SimpleNamespace(value=0),
                                 CU_STREAM_NON_BLOCKING=SimpleNamespace(value=1))
CUstreamCaptureMode = SimpleNamespace(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL=1)
CUevent_flags = SimpleNamespace(CU_EVENT_DEFAULT=SimpleNamespace(value=0))
CUfunction_attribute = SimpleNamespace(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES="max dynamic shared")


class _Names:
    """An enum whose every member's value is its own name (the fake records it)."""

    def __getattr__(self, member: str) -> str:
        return member


# the tensor-map enums
CUtensorMapDataType = CUtensorMapInterleave = CUtensorMapSwizzle = _Names()
CUtensorMapL2promotion = CUtensorMapFloatOOBfill = _Names()
OK = CUresult.CUDA_SUCCESS
CAPTURE_LAUNCH_S = 0.0  # how long a launch takes while captured: a test widens the window for other threads


def CUdeviceptr(address):  # noqa: N802 - the bindings' name
    return int(address)


class Cuda:
    """The state of the fake driver: what is alive, and which streams capture for which thread."""

    def __init__(self):
        self.ids = itertools.count(1)
        self.live = {"allocations": {}, "modules": set(), "streams": set(), "graphs": set(), "events": set()}
        self.retains = 0
        self.capturing: dict[int, int] = {}  # stream -> the thread capturing on it
        self.captured: dict[int, list] = {}  # stream -> what its capture recorded
        self.errors: list[str] = []
        self.lock = threading.Lock()
        self.launches: list[dict] = []  # each cuLaunchKernel's grid, block and dynamic shared bytes
        self.attributes: list[tuple] = []  # each cuFuncSetAttribute's (function, attribute, value)
        self.tensor_maps: list[dict] = []  # each cuTensorMapEncodeTiled's arguments

    def _on(self, stream, what: str):
        owner = self.capturing.get(stream)
        if owner is not None and (owner != threading.get_ident() or what != "launch"):
            self.errors.append(f"{what} on stream {stream} while it captures")
            return (CUresult.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,)
        if owner is not None:
            self.captured[stream].append(what)
        return None

    # -- context, memory -------------------------------------------------------------------------------
    def cuCtxSetCurrent(self, context):  # noqa: N802
        return (OK,)

    def cuCtxSynchronize(self):  # noqa: N802
        return (OK,)

    def cuDeviceGet(self, ordinal):  # noqa: N802
        return (OK, ordinal)

    def cuDevicePrimaryCtxRetain(self, device):  # noqa: N802
        self.retains += 1
        return (OK, "context")

    def cuDevicePrimaryCtxRelease(self, device):  # noqa: N802
        self.retains -= 1
        return (OK,)

    def cuMemAlloc(self, nbytes):  # noqa: N802
        with self.lock:
            address = next(self.ids) << 32
            self.live["allocations"][address] = nbytes
        return (OK, address)

    def cuMemFree(self, address):  # noqa: N802
        with self.lock:
            if self.live["allocations"].pop(int(address), None) is None:
                return (CUresult.CUDA_ERROR_INVALID_VALUE,)
        return (OK,)

    def cuMemGetInfo(self):  # noqa: N802
        total = 80 << 30
        return (OK, total - sum(self.live["allocations"].values()), total)

    def cuMemcpyHtoDAsync(self, dst, src, nbytes, stream):  # noqa: N802
        return self._on(stream, "copy") or (OK,)

    def cuMemcpyDtoHAsync(self, dst, src, nbytes, stream):  # noqa: N802
        return self._on(stream, "copy") or (OK,)

    def cuMemcpyDtoDAsync(self, dst, src, nbytes, stream):  # noqa: N802
        return self._on(stream, "copy") or (OK,)

    def cuMemsetD8Async(self, dst, value, nbytes, stream):  # noqa: N802
        return self._on(stream, "fill") or (OK,)

    # -- modules and launches ----------------------------------------------------------------------------
    def cuModuleLoadData(self, image):  # noqa: N802
        module = next(self.ids)
        self.live["modules"].add(module)
        return (OK, module)

    def cuModuleGetFunction(self, module, name):  # noqa: N802
        return (OK, (module, name))

    def cuModuleUnload(self, module):  # noqa: N802
        self.live["modules"].discard(module)
        return (OK,)

    def cuLaunchKernel(self, function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):  # noqa: N802
        if self.capturing.get(stream) == threading.get_ident():
            time.sleep(CAPTURE_LAUNCH_S)
        self.launches.append({"function": function, "grid": (gx, gy, gz), "block": (bx, by, bz), "shared": shared,
                              "params": params})
        return self._on(stream, "launch") or (OK,)

    def cuFuncSetAttribute(self, function, attribute, value):  # noqa: N802
        self.attributes.append((function, attribute, value))
        return (OK,)

    def cuTensorMapEncodeTiled(self, dtype, rank, address, dims, strides, box, element_strides, interleave,  # noqa: N802
                               swizzle, l2, oob):
        self.tensor_maps.append(dict(dtype=dtype, rank=rank, address=address, dims=list(dims), strides=list(strides),
                                     box=list(box), swizzle=swizzle))
        n = len(self.tensor_maps)
        return (OK, SimpleNamespace(opaque=[n] * 16))  # 128 bytes that say which encode made them

    # -- streams, capture, graphs, events ---------------------------------------------------------------------
    def cuStreamCreate(self, flags):  # noqa: N802
        stream = next(self.ids)
        self.live["streams"].add(stream)
        return (OK, stream)

    def cuStreamDestroy(self, stream):  # noqa: N802
        self.live["streams"].discard(stream)
        return (OK,)

    def cuStreamSynchronize(self, stream):  # noqa: N802
        return self._on(stream, "synchronize") or (OK,)

    def cuStreamBeginCapture(self, stream, mode):  # noqa: N802
        self.capturing[stream] = threading.get_ident()
        self.captured[stream] = []
        return (OK,)

    def cuStreamEndCapture(self, stream):  # noqa: N802
        self.capturing.pop(stream, None)
        graph = next(self.ids)
        self.live["graphs"].add(graph)
        return (OK, graph)

    def cuGraphInstantiate(self, graph, flags):  # noqa: N802
        graph_exec = next(self.ids)
        self.live["graphs"].add(graph_exec)
        return (OK, graph_exec)

    def cuGraphLaunch(self, graph_exec, stream):  # noqa: N802
        return self._on(stream, "graph launch") or (OK,)

    def cuGraphExecDestroy(self, graph_exec):  # noqa: N802
        self.live["graphs"].discard(graph_exec)
        return (OK,)

    def cuGraphDestroy(self, graph):  # noqa: N802
        self.live["graphs"].discard(graph)
        return (OK,)

    def cuEventCreate(self, flags):  # noqa: N802
        event = next(self.ids)
        self.live["events"].add(event)
        return (OK, event)

    def cuEventDestroy(self, event):  # noqa: N802
        self.live["events"].discard(event)
        return (OK,)

    def cuGetErrorString(self, error):  # noqa: N802
        return (OK, error.name.encode())

    CUresult = CUresult
    CUstream_flags = CUstream_flags
    CUstreamCaptureMode = CUstreamCaptureMode
    CUevent_flags = CUevent_flags
    CUfunction_attribute = CUfunction_attribute
    CUtensorMapDataType, CUtensorMapInterleave, CUtensorMapSwizzle = (
        CUtensorMapDataType, CUtensorMapInterleave, CUtensorMapSwizzle)
    CUtensorMapL2promotion, CUtensorMapFloatOOBfill = CUtensorMapL2promotion, CUtensorMapFloatOOBfill
    CUdeviceptr = staticmethod(CUdeviceptr)
    cuuint32_t = cuuint64_t = int

    def alive(self) -> dict:
        return {kind: len(items) for kind, items in self.live.items()}
