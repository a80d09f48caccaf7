"""The `cuda` HAL driver, through the CUDA driver API (`cuda.bindings.driver`).

One device is one GPU's primary context (the one the CUDA runtime, and so torch, also
uses) and one stream, which runs in order with the legacy default stream; all work of a device
runs in that stream's order.
A command buffer records launches, copies and fills. `submit` runs them in one of three modes:

- graph (the default): the first submit captures the commands into a CUDA graph, later
  submits replay it with one cuGraphLaunch;
- stream: each command is issued on the stream (one cuLaunchKernel per dispatch), back to back;
- direct: each command is issued and waited for before the next, so an error names the
  dispatch that raised it (slow: for debugging a kernel).

`retarget.load(..., mode=...)`, `retarget run --mode`, or `RETARGET_CUDA_MODE` pick the mode
(`RETARGET_CUDA_GRAPHS=0`, the older spelling, means stream). Every CUresult is checked; a failure
raises `CudaError` naming the call and the error.

DLPack: arrays of this GPU (torch, cupy, jax) go in without a trip through the host (`wrap` and
`copy`, ordered after the producer's work through DLPack's stream argument), and outputs come out as
`retarget.DeviceArray`s over memory this driver allocated (`address`).

Threads: a device may be used from several threads at once. Every call makes the device's context
current on the calling thread first (a new thread has none). Graphs are captured on a stream of their
own, never on the device's stream, so another thread's copy or synchronisation on that stream cannot
land in a capture or break it; a lock serialises submits, captures and timing, and the host arrays of
copies in flight are released only once a synchronisation has covered them. What a device holds (its
streams, events, spare buffers, executables' modules, graphs, buffers) is freed when the Python objects go;
`close()` also releases its retain of the primary context.
"""

from __future__ import annotations

import atexit
import os
import threading
import weakref

import numpy as np
from retarget.errors import RetargetError, UnknownDeviceError, no_such_device
from retarget.protocols import DeviceInfo, ExecutableBinary, TargetDesc

from . import FORMAT

NAME = "cuda"


MODES = ("graph", "stream", "direct")
_OPEN: weakref.WeakSet = weakref.WeakSet()  # devices alive, whose spare buffers are freed at exit


@atexit.register
def _free_spares() -> None:
    """Free the spare buffers of devices still alive at exit, so that nothing outlives the process unfreed
    (compute-sanitizer's leak check sees exactly what a program leaked)."""
    for device in list(_OPEN):
        try:
            device.drop_spares()
        except Exception:  # the bindings may already be gone
            pass
SPARE_BYTES = 64 << 20  # freed buffers a device keeps for reuse, at most
SPARE_BUFFER_BYTES = 16 << 20  # and each of them at most (outputs handed out through DLPack, not whole arenas)


def _default_mode() -> str:
    mode = os.environ.get("RETARGET_CUDA_MODE", "").strip().lower()
    if mode in MODES:
        return mode
    if os.environ.get("RETARGET_CUDA_GRAPHS", "1").lower() in ("0", "false", "no", "off"):
        return "stream"
    return "graph"


class CudaError(RetargetError):
    """A CUDA driver call failed; `error` is the CUresult's name (CUDA_ERROR_...)."""

    def __init__(self, message: str, error: str = "", hint: str | None = None):
        self.error = error
        super().__init__(message, hint=hint)


def _cu():
    from cuda.bindings import driver

    return driver


def check(result, what: str):
    """A cuda.bindings call's (CUresult, *values) -> its value(s); CudaError when it failed."""
    cu = _cu()
    err, *values = result if isinstance(result, tuple) else (result,)
    if err != cu.CUresult.CUDA_SUCCESS:
        name = err.name if hasattr(err, "name") else str(err)
        _, text = cu.cuGetErrorString(err)
        detail = text.decode() if isinstance(text, bytes) else str(text)
        raise CudaError(f"{what} failed: {name} ({detail})", error=name)
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


_init_lock = threading.Lock()
_init_result: tuple[bool, str] | None = None


def initialize() -> tuple[bool, str]:
    """cuInit once per process: (True, "") or (False, why the driver cannot be used)."""
    global _init_result
    with _init_lock:
        if _init_result is None:
            _init_result = _initialize()
        return _init_result


def _initialize() -> tuple[bool, str]:
    try:
        cu = _cu()
    except Exception as e:
        return False, f"cuda-bindings is not importable ({type(e).__name__}: {e}); pip install cuda-bindings"
    try:
        (err,) = cu.cuInit(0)
    except Exception as e:  # the pathfinder cannot find libcuda.so: no NVIDIA driver on this machine
        return False, f"libcuda.so (the NVIDIA driver) cannot be loaded: {e}".replace("\n", " ")
    if err == cu.CUresult.CUDA_ERROR_NO_DEVICE:
        return False, "the NVIDIA driver is installed but sees no GPU (CUDA_ERROR_NO_DEVICE)"
    if err != cu.CUresult.CUDA_SUCCESS:
        return False, f"cuInit failed: {err.name} (is the NVIDIA kernel module loaded? try nvidia-smi)"
    return True, ""


ATTRIBUTES = {  # dump() key -> CU_DEVICE_ATTRIBUTE_ suffix
    "max_threads_per_block": "MAX_THREADS_PER_BLOCK",
    "max_block_dim_x": "MAX_BLOCK_DIM_X",
    "max_block_dim_y": "MAX_BLOCK_DIM_Y",
    "max_block_dim_z": "MAX_BLOCK_DIM_Z",
    "max_grid_dim_x": "MAX_GRID_DIM_X",
    "max_grid_dim_y": "MAX_GRID_DIM_Y",
    "max_grid_dim_z": "MAX_GRID_DIM_Z",
    "shared_memory_per_block": "MAX_SHARED_MEMORY_PER_BLOCK",
    "shared_memory_per_block_optin": "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN",
    "shared_memory_per_multiprocessor": "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR",
    "registers_per_block": "MAX_REGISTERS_PER_BLOCK",
    "max_threads_per_multiprocessor": "MAX_THREADS_PER_MULTIPROCESSOR",
    "l2_cache_bytes": "L2_CACHE_SIZE",
    "memory_bus_width_bits": "GLOBAL_MEMORY_BUS_WIDTH",
    "clock_khz": "CLOCK_RATE",
    "memory_clock_khz": "MEMORY_CLOCK_RATE",
    "ecc": "ECC_ENABLED",
    "integrated": "INTEGRATED",
    "concurrent_kernels": "CONCURRENT_KERNELS",
    "async_engines": "ASYNC_ENGINE_COUNT",
    "pci_bus": "PCI_BUS_ID",
    "pci_device": "PCI_DEVICE_ID",
}


def _attribute(device, suffix: str) -> int:
    cu = _cu()
    return check(cu.cuDeviceGetAttribute(getattr(cu.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{suffix}"), device),
                 f"cuDeviceGetAttribute({suffix})")


class CudaDriver:
    name = NAME

    def enumerate(self) -> list[DeviceInfo]:
        """Every GPU, or one unavailable entry saying why there is none. Never raises."""
        ok, reason = initialize()
        if not ok:
            return [DeviceInfo(NAME, "0", "CUDA GPU", available=False, reason=reason)]
        try:
            cu = _cu()
            count = check(cu.cuDeviceGetCount(), "cuDeviceGetCount")
            if count == 0:
                return [DeviceInfo(NAME, "0", "CUDA GPU", available=False, reason="the NVIDIA driver sees no GPU")]
            return [self._info(i) for i in range(count)]
        except Exception as e:  # a broken driver install must not take `retarget devices` down
            return [DeviceInfo(NAME, "0", "CUDA GPU", available=False, reason=f"{type(e).__name__}: {e}")]

    def _info(self, ordinal: int) -> DeviceInfo:
        cu = _cu()
        device = check(cu.cuDeviceGet(ordinal), "cuDeviceGet")
        name = check(cu.cuDeviceGetName(256, device), "cuDeviceGetName").split(b"\0", 1)[0].decode()
        major = _attribute(device, "COMPUTE_CAPABILITY_MAJOR")
        minor = _attribute(device, "COMPUTE_CAPABILITY_MINOR")
        properties = {
            "arch": f"sm_{major}{minor}",
            "compute_capability": f"{major}.{minor}",
            "memory_bytes": int(check(cu.cuDeviceTotalMem(device), "cuDeviceTotalMem")),
            "multiprocessors": _attribute(device, "MULTIPROCESSOR_COUNT"),
            "subgroup_size": _attribute(device, "WARP_SIZE"),
            "driver_version": _version(check(cu.cuDriverGetVersion(), "cuDriverGetVersion")),
        }
        return DeviceInfo(NAME, str(ordinal), name, properties=properties)

    def create(self, device_id: str) -> CudaDevice:
        every = self.enumerate()
        infos = {d.id: d for d in every if d.available}
        device_id = device_id or "0"
        if device_id not in infos:
            raise no_such_device("cuda", device_id, every)
        return CudaDevice(infos[device_id])

    def dump(self, device_id: str) -> dict:
        info = {d.id: d for d in self.enumerate()}.get(device_id or "0")
        if info is None:
            raise UnknownDeviceError(f"cuda has no device '{device_id}'")
        out = {"driver": NAME, "id": info.id, "name": info.name, "available": info.available}
        if not info.available:
            return {**out, "reason": info.reason}
        out.update(info.properties)
        device = check(_cu().cuDeviceGet(int(info.id)), "cuDeviceGet")
        for key, suffix in ATTRIBUTES.items():
            try:
                out[key] = _attribute(device, suffix)
            except (CudaError, AttributeError):  # attributes come and go between CUDA versions
                pass
        out["executable_formats"] = [FORMAT]
        return out


def _version(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}"


class CudaBuffer:
    """`nbytes` of device memory at `address` (a CUdeviceptr's integer value): allocated here (or reused from
    the device's spares), or with `address` given and not `owned`, memory someone else owns, which `free`
    leaves alone."""

    def __init__(self, device: CudaDevice, nbytes: int, address: int | None = None, owned: bool | None = None):
        self.device, self.nbytes = device, nbytes
        self.owned = address is None if owned is None else owned
        self.handed_out = False  # exported through DLPack: kept for reuse when the consumer lets go
        self.address = int(check(_cu().cuMemAlloc(max(nbytes, 1)), f"cuMemAlloc({nbytes})")) if address is None \
            else address
        if self.owned:
            device.held(nbytes)

    def free(self) -> None:
        if not self.owned:
            self.address = 0
        elif self.address:
            address, self.address = self.address, 0
            self.device.held(-self.nbytes)
            if not (self.handed_out and self.device.recycle(address, self.nbytes)):
                self.device._current()
                check(_cu().cuMemFree(_cu().CUdeviceptr(address)), "cuMemFree")

    def __del__(self):
        try:
            self.free()
        except Exception:  # at interpreter exit the bindings may already be gone
            pass


class CudaExecutable:
    def __init__(self, device: CudaDevice, entry_points, module, functions, loaded_as: str, launch=None):
        self.device = device
        self.entry_points = entry_points
        self.module = module
        self.functions = functions  # one CUfunction per entry point, in order
        self.loaded_as = loaded_as  # "cubin" or "ptx"
        self.launch = launch or [None] * len(entry_points)  # a hopper_gemm.LaunchInfo per entry point, or None

    def unload(self) -> None:
        if self.module is not None:
            module, self.module = self.module, None
            self.device._current()
            check(_cu().cuModuleUnload(module), "cuModuleUnload")

    def __del__(self):
        try:
            self.unload()
        except Exception:  # at interpreter exit the bindings may already be gone
            pass


def kernel_params(words: list[int], blobs: list[bytes]) -> tuple[np.ndarray, list[int]]:
    """Kernel arguments laid out for cuLaunchKernel: 8 bytes per word, then each blob (a 128-byte tensor
    map) at a 64-byte boundary; returns the bytes and where each argument starts."""
    offsets, end = [8 * i for i in range(len(words))], 8 * len(words)
    for blob in blobs:
        end = -(-end // 64) * 64
        offsets.append(end)
        end += len(blob)
    raw = np.zeros(end + 64, dtype=np.uint8)  # 64 spare bytes: the start is moved to a 64-byte boundary
    shift = -raw.ctypes.data % 64
    values = raw[shift:shift + end]
    values[:8 * len(words)].view(np.uint64)[:] = np.array(words, dtype=np.uint64)
    for blob, at in zip(blobs, offsets[len(words):]):
        values[at:at + len(blob)] = np.frombuffer(blob, dtype=np.uint8)
    return values, offsets


def tensor_map(m, address: int) -> bytes:
    """The 128 bytes of the CUtensorMap that `m` (a hopper_gemm.TensorMap) describes at `address`."""
    from .hopper_gemm import TMA_DTYPES

    if address % 16:
        raise CudaError(f"a TMA operand must start on a 16-byte boundary; binding {m.binding} is at {address:#x}",
                        hint="pass a tensor that starts on its allocation (torch: .contiguous().clone())")
    cu = _cu()
    u64, u32 = cu.cuuint64_t, cu.cuuint32_t
    tensor_map = check(cu.cuTensorMapEncodeTiled(
        getattr(cu.CUtensorMapDataType, TMA_DTYPES[m.dtype]), 2, address, [u64(d) for d in m.dims], [u64(m.row_bytes)],
        [u32(b) for b in m.box], [u32(1), u32(1)], cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B, cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE), "cuTensorMapEncodeTiled")
    return np.array(tensor_map.opaque, dtype=np.uint64).tobytes()


def _launch_needs(header: dict, entry_points) -> list:
    """Each entry point's `hopper_gemm.LaunchInfo` from the executable's header (None for a kernel with no
    needs beyond its buffers), checked: a header that names bindings an entry lacks is refused, not run."""
    from .hopper_gemm import LaunchInfo

    needs = header.get("launch") or {}
    out = []
    for e in entry_points:
        try:
            info = LaunchInfo.from_json(needs[e.name]) if e.name in needs else None
            ok = info is None or (0 <= info.shared_bytes <= 1 << 20
                                  and all(0 <= m.binding < len(e.bindings) for m in info.tensor_maps))
        except (KeyError, TypeError, ValueError, AttributeError):
            ok = False
        if not ok:
            raise RetargetError(f"the cuda executable's launch header for {e.name} is malformed",
                                hint="recompile with --target cuda")
        out.append(info)
    return out


def _check_range(buffer: CudaBuffer, offset: int, nbytes: int, what: str) -> None:
    if offset < 0 or nbytes < 0 or offset + nbytes > buffer.nbytes:
        raise ValueError(f"{what} {nbytes} bytes at {offset} overflows a buffer of {buffer.nbytes}")


class CudaCommandBuffer:
    """Recorded commands, each a callable issuing one driver call on a stream.

    The stream orders everything, so a barrier needs no command of its own. `mode` is one of
    `MODES`, or None: the device's default when it is submitted."""

    def __init__(self, device: CudaDevice, mode: str | None = None):
        self.device = device
        self.mode = mode
        self.commands: list = []
        self.names: list[str] = []  # what each command is, for errors in direct mode
        self.keep: list = []  # kernel-parameter arrays the launches point into
        self.ended = False
        self.graph = None
        self.graph_exec = None

    def _add(self, command, what: str) -> None:
        if self.ended:
            raise RuntimeError("command buffer already ended; record a new one")
        self.commands.append(command)
        self.names.append(what)

    def dispatch(self, executable: CudaExecutable, entry: int, bindings, *, scalars=(), workgroup_count=None) -> None:
        """`scalars` and `workgroup_count`: a dynamic entry point's sizes for this dispatch (the scalars are
        the kernel's `long long` arguments after its buffers)."""
        ep = executable.entry_points[entry]
        ep.check_dispatch(bindings, scalars)
        info = executable.launch[entry]
        addresses = [buf.address + offset for buf, offset, _ in bindings]
        # one 8-byte value per kernel argument: the buffers' addresses, then the scalars, then any tensor maps
        words = addresses + [int(v) for v in scalars]
        maps = [tensor_map(m, addresses[m.binding]) for m in info.tensor_maps] if info else []
        values, offsets = kernel_params(words, maps)
        pointers = np.array([values.ctypes.data + o for o in offsets], dtype=np.uint64)
        self.keep.append((values, pointers, [buf for buf, _, _ in bindings]))
        function, params = executable.functions[entry], int(pointers.ctypes.data)
        grid, block = tuple(workgroup_count or ep.workgroup_count), tuple(ep.workgroup_size)
        shared = info.shared_bytes if info else 0
        cu = _cu()

        def launch(stream):
            check(cu.cuLaunchKernel(function, *grid, *block, shared, stream, params, 0), f"cuLaunchKernel({ep.name})")

        self._add(launch, f"dispatch {ep.name}")

    def copy(self, src: CudaBuffer, src_offset: int, dst: CudaBuffer, dst_offset: int, nbytes: int) -> None:
        _check_range(src, src_offset, nbytes, "copying from")
        _check_range(dst, dst_offset, nbytes, "copying to")
        cu = _cu()
        self.keep.append((src, dst))
        s, d = cu.CUdeviceptr(src.address + src_offset), cu.CUdeviceptr(dst.address + dst_offset)
        self._add(lambda stream: check(cu.cuMemcpyDtoDAsync(d, s, nbytes, stream), "cuMemcpyDtoDAsync"),
                  f"a copy of {nbytes} bytes")

    def fill(self, buffer: CudaBuffer, offset: int, nbytes: int, value: int) -> None:
        _check_range(buffer, offset, nbytes, "filling")
        cu = _cu()
        self.keep.append(buffer)
        d = cu.CUdeviceptr(buffer.address + offset)
        self._add(lambda stream: check(cu.cuMemsetD8Async(d, value & 0xFF, nbytes, stream), "cuMemsetD8Async"),
                  f"a fill of {nbytes} bytes")

    def barrier(self) -> None:
        """Commands already run in stream order."""

    def end(self) -> None:
        self.ended = True

    def issue(self, stream) -> None:
        for command in self.commands:
            command(stream)

    def capture(self, stream) -> None:
        """Record the commands into a CUDA graph once (nothing runs while capturing). `stream` is one that
        nothing else uses meanwhile: whatever is issued on a capturing stream joins the capture."""
        cu = _cu()
        check(cu.cuStreamBeginCapture(stream, cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
              "cuStreamBeginCapture")
        try:
            self.issue(stream)
        except BaseException:
            cu.cuStreamEndCapture(stream)  # leave capture mode; the launch's own error is the one to report
            raise
        graph = check(cu.cuStreamEndCapture(stream), "cuStreamEndCapture")
        self.graph = graph
        self.graph_exec = check(cu.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")

    def release(self) -> None:
        if self.graph_exec is not None:
            cu = _cu()
            self.device._current()
            cu.cuGraphExecDestroy(self.graph_exec)
            cu.cuGraphDestroy(self.graph)
            self.graph_exec = self.graph = None

    def __del__(self):
        try:
            self.release()
        except Exception:  # at interpreter exit the bindings may already be gone
            pass


class CudaDevice:
    formats = (FORMAT,)

    def __init__(self, info: DeviceInfo):
        cu = _cu()
        self.info = info
        self.ordinal = int(info.id)
        self.compute_capability = tuple(int(p) for p in info.properties["compute_capability"].split("."))
        self.default_mode = _default_mode()
        self.cu_device = check(cu.cuDeviceGet(self.ordinal), "cuDeviceGet")
        self.context = check(cu.cuDevicePrimaryCtxRetain(self.cu_device), "cuDevicePrimaryCtxRetain")
        self._current()
        # A blocking stream: it runs in order with the legacy default stream (torch's, by default), so arrays
        # that torch wrote there are ready for us, and ours for torch, without an event per call.
        self.stream = check(cu.cuStreamCreate(cu.CUstream_flags.CU_STREAM_DEFAULT.value), "cuStreamCreate")
        self.capture_stream = None  # made on the first capture: graphs are captured there, under the lock
        self.pending: list = []  # host arrays of copies still in flight, kept alive until a wait covers them
        self._pending_lock = threading.Lock()
        self._lock = threading.RLock()  # submits, captures, timing
        self._events = None  # (start, end) for timed_submit, made on first use
        self._spare: dict[int, list[int]] = {}  # nbytes -> addresses of freed buffers, for reuse (see recycle)
        self._spare_bytes = 0
        self._held = 0  # bytes of the buffers this device made that are alive (not freed, not spare)
        self._released = False  # a buffer was recycled since the context last synchronised
        self._pool_lock = threading.RLock()  # allocate holds it while a reused buffer counts itself held
        _OPEN.add(self)

    def _current(self) -> None:
        check(_cu().cuCtxSetCurrent(self.context), "cuCtxSetCurrent")

    def can_load(self, format: str, target: TargetDesc) -> str | None:
        if format != FORMAT:
            return f"the cuda driver loads {FORMAT}, not {format}"
        return _why_not(target, self.compute_capability, self.info.name)

    def allocate(self, nbytes: int) -> CudaBuffer:
        self._current()
        with self._pool_lock:
            spare = self._spare.get(nbytes)
            if spare:
                if self._released:  # another stream may still read a recycled buffer: let all work finish
                    check(_cu().cuCtxSynchronize(), "cuCtxSynchronize")
                    self._released = False
                self._spare_bytes -= nbytes
                return CudaBuffer(self, nbytes, address=spare.pop(), owned=True)
        return CudaBuffer(self, nbytes)

    def drop_spares(self) -> None:
        cu = _cu()
        with self._pool_lock:
            if self._spare:
                self._current()
            for address in (a for spare in self._spare.values() for a in spare):
                check(cu.cuMemFree(cu.CUdeviceptr(address)), "cuMemFree")
            self._spare.clear()
            self._spare_bytes = 0

    def held(self, nbytes: int) -> None:
        with self._pool_lock:
            self._held += nbytes

    def recycle(self, address: int, nbytes: int) -> bool:
        """Keep a freed buffer that was handed out through DLPack for the next allocation of its size (a
        function's outputs, dropped by the consumer each call, cost neither a cuMemAlloc nor a cuMemFree).
        False: free it now. Spares left at exit are freed then (`_free_spares`)."""
        with self._pool_lock:
            if self.stream is None or nbytes > SPARE_BUFFER_BYTES or self._spare_bytes + nbytes > SPARE_BYTES:
                return False
            self._spare.setdefault(nbytes, []).append(address)
            self._spare_bytes += nbytes
            self._released = True
            return True

    def write(self, buffer: CudaBuffer, offset: int, data: np.ndarray) -> None:
        raw = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        if offset < 0 or offset + raw.nbytes > buffer.nbytes:
            raise ValueError(f"writing {raw.nbytes} bytes at {offset} overflows a buffer of {buffer.nbytes}")
        if raw.nbytes == 0:
            return
        cu = _cu()
        self._current()
        with self._pending_lock:  # appended before any wait can start that would not cover the copy
            check(cu.cuMemcpyHtoDAsync(cu.CUdeviceptr(buffer.address + offset), raw.ctypes.data, raw.nbytes,
                                       self.stream), "cuMemcpyHtoDAsync")
            self.pending.append(raw)

    def read(self, buffer: CudaBuffer, offset: int, nbytes: int) -> np.ndarray:
        if offset < 0 or offset + nbytes > buffer.nbytes:
            raise ValueError(f"reading {nbytes} bytes at {offset} overflows a buffer of {buffer.nbytes}")
        out = np.empty(nbytes, dtype=np.uint8)
        if nbytes:
            cu = _cu()
            self._current()
            check(cu.cuMemcpyDtoHAsync(out.ctypes.data, cu.CUdeviceptr(buffer.address + offset), nbytes,
                                       self.stream), "cuMemcpyDtoHAsync")
            self.wait()
        return out

    def load_executable(self, binary: ExecutableBinary) -> CudaExecutable:
        from .compile import unpack

        reason = self.can_load(binary.format, binary.target)
        if reason:
            raise UnknownDeviceError(f"{self.info.uri} cannot run {binary.target.name}: {reason}",
                                     hint="recompile with --target cuda:host")
        header, parts = unpack(binary.data)
        use_cubin = _cubin_runs(binary.target.extra["sm"], self.compute_capability)
        image = np.frombuffer(parts["cubin"] if use_cubin else parts["ptx"] + b"\0", dtype=np.uint8)
        launch = _launch_needs(header, binary.entry_points)
        cu = _cu()
        self._current()
        module = check(cu.cuModuleLoadData(image.ctypes.data), "cuModuleLoadData" + ("" if use_cubin else " (PTX JIT)"))
        executable = CudaExecutable(self, list(binary.entry_points), module, [], "cubin" if use_cubin else "ptx",
                                    launch)
        executable.functions = [check(cu.cuModuleGetFunction(module, e.name.encode()), f"cuModuleGetFunction({e.name})")
                                for e in binary.entry_points]
        for e, function, info in zip(binary.entry_points, executable.functions, launch):
            if info and info.shared_bytes > 48 * 1024:  # more than the default needs the kernel's opt-in
                attribute = cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
                check(cu.cuFuncSetAttribute(function, attribute, info.shared_bytes), f"cuFuncSetAttribute({e.name})")
        return executable

    @property
    def modes(self) -> tuple[str, ...]:
        return (self.default_mode, *(m for m in MODES if m != self.default_mode))

    def command_buffer(self, mode: str | None = None) -> CudaCommandBuffer:
        if mode is not None and mode not in MODES:
            raise ValueError(f"cuda command buffers run as {', '.join(repr(m) for m in MODES)}, not '{mode}'")
        return CudaCommandBuffer(self, mode)

    def submit(self, command_buffer: CudaCommandBuffer) -> None:
        with self._lock:
            self._current()
            if not command_buffer.commands:
                return
            mode = command_buffer.mode or self.default_mode
            if mode == "graph" and command_buffer.ended:
                if command_buffer.graph_exec is None:
                    if self.capture_stream is None:
                        cu = _cu()
                        self.capture_stream = check(cu.cuStreamCreate(cu.CUstream_flags.CU_STREAM_NON_BLOCKING.value),
                                                    "cuStreamCreate")
                    command_buffer.capture(self.capture_stream)
                check(_cu().cuGraphLaunch(command_buffer.graph_exec, self.stream), "cuGraphLaunch")
            elif mode == "direct":
                for command, what in zip(command_buffer.commands, command_buffer.names):
                    command(self.stream)
                    check(_cu().cuStreamSynchronize(self.stream), f"cuStreamSynchronize after {what}")
            else:
                command_buffer.issue(self.stream)

    # -- DLPack (see retarget.dlpack) ------------------------------------------------------------------------
    @property
    def dlpack_device(self) -> tuple[int, int]:
        return (2, self.ordinal)  # kDLCUDA

    @property
    def dlpack_stream(self) -> int:
        """What a producer's `__dlpack__(stream=...)` gets: 1, the legacy default stream, which our blocking
        stream follows. A producer on that stream (torch's default) then needs no event at all."""
        return 1

    def wrap(self, address: int, nbytes: int) -> CudaBuffer:
        """Device memory someone else owns (a torch tensor's storage) as a buffer; never freed here."""
        return CudaBuffer(self, nbytes, address=address)

    def address(self, buffer: CudaBuffer) -> int:
        buffer.handed_out = True  # DLPack hands it out: its memory is kept for the next output when it comes back
        return buffer.address

    def copy(self, src: CudaBuffer, src_offset: int, dst: CudaBuffer, dst_offset: int, nbytes: int) -> None:
        """A device-to-device copy, in stream order with the rest of the device's work."""
        _check_range(src, src_offset, nbytes, "copying from")
        _check_range(dst, dst_offset, nbytes, "copying to")
        if nbytes:
            cu = _cu()
            self._current()
            to, source = cu.CUdeviceptr(dst.address + dst_offset), cu.CUdeviceptr(src.address + src_offset)
            check(cu.cuMemcpyDtoDAsync(to, source, nbytes, self.stream), "cuMemcpyDtoDAsync")

    def wait(self) -> None:
        self._current()
        with self._pending_lock:
            covered = len(self.pending)  # copies issued before this synchronisation starts
        check(_cu().cuStreamSynchronize(self.stream), "cuStreamSynchronize")
        with self._pending_lock:
            del self.pending[:covered]

    def timed_submit(self, command_buffer: CudaCommandBuffer) -> float:
        """Submit, wait, and return the seconds between two events recorded on the stream around the
        work: the GPU's own time, without host copies or Python (`retarget.bench` uses it)."""
        cu = _cu()
        with self._lock:
            self._current()
            if self._events is None:
                flags = cu.CUevent_flags.CU_EVENT_DEFAULT.value
                self._events = tuple(check(cu.cuEventCreate(flags), "cuEventCreate") for _ in range(2))
            start, end = self._events
            check(cu.cuEventRecord(start, self.stream), "cuEventRecord")
            self.submit(command_buffer)
            check(cu.cuEventRecord(end, self.stream), "cuEventRecord")
            self.wait()
            return check(cu.cuEventElapsedTime(start, end), "cuEventElapsedTime") / 1e3

    def memory_in_use(self) -> int:
        """Bytes of the buffers this device allocated that are alive (the spare ones it keeps for reuse left
        out): exact, where cuMemGetInfo counts every process's memory in 2 MB pages."""
        with self._pool_lock:
            return self._held

    def close(self, release_context: bool = True) -> None:
        """Free the streams, events and spare buffers, and release the primary context. When the device goes
        without a close, the garbage collector does the same but keeps the context retained: its buffers may
        be freed after it (a loaded module is a cycle, whose objects go in any order), and need the context."""
        cu = _cu()
        if self.stream is not None:
            self.wait()
            for event in self._events or ():
                check(cu.cuEventDestroy(event), "cuEventDestroy")
            self._events = None
            for stream in (self.stream, self.capture_stream):
                if stream is not None:
                    check(cu.cuStreamDestroy(stream), "cuStreamDestroy")
            self.stream = self.capture_stream = None
            self.drop_spares()
            if release_context:
                check(cu.cuDevicePrimaryCtxRelease(self.cu_device), "cuDevicePrimaryCtxRelease")

    def __del__(self):
        try:
            self.close(release_context=False)
        except Exception:  # at interpreter exit the bindings may already be gone
            pass


def _sm_parts(sm: str) -> tuple[int, int, bool]:
    digits = sm.rstrip("af")
    return int(digits[:-1]), int(digits[-1]), sm.endswith("a")


def _cubin_runs(sm: str, cc: tuple[int, int]) -> bool:
    """A cubin for sm_XY runs on X.Z with Z >= Y; an arch-specific one (sm_90a) only on X.Y itself."""
    major, minor, specific = _sm_parts(sm)
    return (major, minor) == cc if specific else major == cc[0] and minor <= cc[1]


def _why_not(target: TargetDesc, cc: tuple[int, int], device_name: str) -> str | None:
    sm = target.extra.get("sm")
    if not sm:
        return f"the executable's target {target.name} names no SM architecture"
    if _cubin_runs(sm, cc):
        return None
    ptx = target.extra.get("ptx", "")
    ptx_major, ptx_minor, ptx_specific = _sm_parts(ptx.removeprefix("compute_")) if ptx else (0, 0, True)
    if ptx and not ptx_specific and (ptx_major, ptx_minor) <= cc:
        return None  # the driver JIT-compiles the PTX
    here = f"sm_{cc[0]}{cc[1]}"
    holds = f"a cubin for sm_{sm}" + (f" and PTX for {ptx}" if ptx else "")
    why = ("arch-specific code runs only on its own GPU" if ptx_specific and ptx
           else "its PTX is for a newer GPU" if ptx else "and no PTX")
    return (f"the module holds {holds}, and this GPU ({device_name}) is {here}: {why}; "
            f"recompile with --target cuda:host (or cuda:{here})")


CUDA = CudaDriver()
