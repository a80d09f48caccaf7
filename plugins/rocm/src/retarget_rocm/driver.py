"""The `hip` HAL driver, through the HIP module API of hip-python (`from hip import hip`).

hip-python is plain bindings: it loads ROCm's libamdhip64.so when first called, so it installs
anywhere, and without ROCm (or without an AMD GPU) `enumerate` reports one unavailable device and
why. One device is one GPU (`hipSetDevice` before each call, HIP's current device being per
thread) and one non-blocking stream; all work of a device runs in that stream's order.
Executables are code objects loaded with hipModuleLoadData; a kernel is a hipModuleGetFunction.
A command buffer records launches (hipModuleLaunchKernel), copies and fills, and `submit` runs
them in one of two modes:

- direct (the default): each command is issued on the stream;
- graph: the first submit captures the commands into a HIP graph, later submits replay it with
  one hipGraphLaunch.

`RETARGET_HIP_GRAPHS=1` or `device.graphs = True` makes graph the default; `command_buffer(mode=...)`
picks a mode for one command buffer. Every hipError_t is checked; a failure raises `HipError`
naming the call and the error. This module is written against the HIP API and untested on an AMD
GPU (none was available): the README says so.

Threads: as the cuda driver. Every call sets the device on the calling thread first; graphs are
captured on a stream of their own, so another thread's copy or synchronisation on the device's stream
cannot land in a capture; a lock serialises submits, captures and timing; host arrays of copies in
flight are released only once a synchronisation has covered them. Streams, events, modules, graphs and
buffers are freed when the Python objects go.
"""

from __future__ import annotations

import os
import re
import threading

import numpy as np
from retarget.errors import RetargetError, UnknownDeviceError, no_such_device
from retarget.protocols import DeviceInfo, ExecutableBinary, TargetDesc

from . import FORMAT

NAME = "hip"
NON_BLOCKING = 1  # hipStreamNonBlocking


class HipError(RetargetError):
    """A HIP runtime call failed; `error` is the hipError_t's name (hipError...)."""

    def __init__(self, message: str, error: str = "", hint: str | None = None):
        self.error = error
        super().__init__(message, hint=hint)


def _hip():
    from hip import hip

    return hip


def check(result, what: str):
    """A hip-python call's (hipError_t, *values) -> its value(s); HipError when it failed."""
    hip = _hip()
    err, *values = result if isinstance(result, tuple) else (result,)
    if err != hip.hipError_t.hipSuccess:
        name = getattr(err, "name", str(err))
        text = hip.hipGetErrorString(err)
        text = text[-1] if isinstance(text, tuple) else text
        raise HipError(f"{what} failed: {name} ({_text(text)})", error=name)
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def _text(value) -> str:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).split(b"\0", 1)[0].decode(errors="replace")
    return str(value).split("\0", 1)[0]


_init_lock = threading.Lock()
_init_result: tuple[bool, str] | None = None


def initialize() -> tuple[bool, str]:
    """hipInit once per process: (True, "") or (False, why the driver cannot be used)."""
    global _init_result
    with _init_lock:
        if _init_result is None:
            _init_result = _initialize()
        return _init_result


def _initialize() -> tuple[bool, str]:
    try:
        hip = _hip()
    except Exception as e:
        return False, f"hip-python is not importable ({type(e).__name__}: {e}); pip install hip-python"
    try:
        (err,) = hip.hipInit(0)
    except Exception as e:  # hip-python dlopens libamdhip64.so on the first call: no ROCm on this machine
        why = (re.findall(r"b'([^']+)'", str(e)) or [str(e)])[-1]  # the loader's own words, without bytes reprs
        return False, (f"the ROCm runtime (libamdhip64.so) cannot be loaded ({why}); install ROCm, or set "
                       "ROCM_PATH to it").replace("\n", " ")
    if err == hip.hipError_t.hipErrorNoDevice:
        return False, "the ROCm runtime is installed but sees no AMD GPU (hipErrorNoDevice)"
    if err != hip.hipError_t.hipSuccess:
        return False, (f"hipInit failed: {getattr(err, 'name', err)} (is the amdgpu kernel driver loaded, and "
                       "/dev/kfd readable? try rocminfo)")
    return True, ""


# dump() key -> hipDeviceProp_t field
PROPERTIES = {
    "max_threads_per_block": "maxThreadsPerBlock",
    "max_block_dims": "maxThreadsDim",
    "max_grid_dims": "maxGridSize",
    "shared_memory_per_block": "sharedMemPerBlock",
    "shared_memory_per_compute_unit": "maxSharedMemoryPerMultiProcessor",
    "registers_per_block": "regsPerBlock",
    "max_threads_per_compute_unit": "maxThreadsPerMultiProcessor",
    "l2_cache_bytes": "l2CacheSize",
    "clock_khz": "clockRate",
    "memory_clock_khz": "memoryClockRate",
    "memory_bus_width_bits": "memoryBusWidth",
    "ecc": "ECCEnabled",
    "integrated": "integrated",
    "large_bar": "isLargeBar",
    "concurrent_kernels": "concurrentKernels",
    "pci_bus": "pciBusID",
    "pci_device": "pciDeviceID",
    "pci_domain": "pciDomainID",
}


def _plain(value):
    """A property value as JSON: ints, strings, lists of ints."""
    if isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (bytes, bytearray)):
        return _text(value)
    try:
        return [int(v) for v in value]
    except TypeError:
        return int(value)


class HipDriver:
    name = NAME

    def enumerate(self) -> list[DeviceInfo]:
        """Every AMD GPU, or one unavailable entry saying why there is none. Never raises."""
        ok, reason = initialize()
        if not ok:
            return [DeviceInfo(NAME, "0", "AMD GPU", available=False, reason=reason)]
        try:
            count = check(_hip().hipGetDeviceCount(), "hipGetDeviceCount")
            if count == 0:
                return [DeviceInfo(NAME, "0", "AMD GPU", available=False, reason="the ROCm runtime sees no AMD GPU")]
            return [self._info(i) for i in range(count)]
        except Exception as e:  # a broken ROCm install must not take `retarget devices` down
            return [DeviceInfo(NAME, "0", "AMD GPU", available=False, reason=f"{type(e).__name__}: {e}")]

    def _info(self, ordinal: int) -> DeviceInfo:
        hip = _hip()
        props = check(hip.hipGetDeviceProperties(ordinal), "hipGetDeviceProperties")
        target_id = _text(props.gcnArchName)
        properties = {
            "arch": target_id.split(":", 1)[0],
            "target_id": target_id,
            "memory_bytes": int(props.totalGlobalMem),
            "compute_units": int(props.multiProcessorCount),
            "subgroup_size": int(props.warpSize),
            "driver_version": int(check(hip.hipDriverGetVersion(), "hipDriverGetVersion")),
            "runtime_version": int(check(hip.hipRuntimeGetVersion(), "hipRuntimeGetVersion")),
        }
        return DeviceInfo(NAME, str(ordinal), _text(props.name), properties=properties)

    def create(self, device_id: str) -> HipDevice:
        every = self.enumerate()
        infos = {d.id: d for d in every if d.available}
        device_id = device_id or "0"
        if device_id not in infos:
            raise no_such_device("hip", device_id, every)
        return HipDevice(infos[device_id])

    def dump(self, device_id: str) -> dict:
        info = {d.id: d for d in self.enumerate()}.get(device_id or "0")
        if info is None:
            raise UnknownDeviceError(f"hip has no device '{device_id}'")
        out = {"driver": NAME, "id": info.id, "name": info.name, "available": info.available}
        if not info.available:
            return {**out, "reason": info.reason}
        out.update(info.properties)
        props = check(_hip().hipGetDeviceProperties(int(info.id)), "hipGetDeviceProperties")
        for key, field in PROPERTIES.items():
            try:
                out[key] = _plain(getattr(props, field))
            except (AttributeError, TypeError, ValueError):  # fields come and go between ROCm versions
                pass
        out["executable_formats"] = [FORMAT]
        return out


class HipBuffer:
    """`nbytes` of device memory at `address` (the integer value of a hipMalloc pointer)."""

    def __init__(self, device: HipDevice, nbytes: int):
        self.device, self.nbytes = device, nbytes
        self.address = int(check(_hip().hipMalloc(max(nbytes, 1)), f"hipMalloc({nbytes})"))

    def free(self) -> None:
        if self.address:
            address, self.address = self.address, 0
            self.device._current()
            check(_hip().hipFree(address), "hipFree")

    def __del__(self):
        try:
            self.free()
        except Exception:  # at interpreter exit the bindings may already be gone
            pass


class HipExecutable:
    def __init__(self, device: HipDevice, entry_points, module, functions):
        self.device = device
        self.entry_points = entry_points
        self.module = module
        self.functions = functions  # one hipFunction_t per entry point, in order

    def unload(self) -> None:
        if self.module is not None:
            module, self.module = self.module, None
            self.device._current()
            check(_hip().hipModuleUnload(module), "hipModuleUnload")

    def __del__(self):
        try:
            self.unload()
        except Exception:  # at interpreter exit the bindings may already be gone
            pass


def _check_range(buffer: HipBuffer, offset: int, nbytes: int, what: str) -> None:
    if offset < 0 or nbytes < 0 or offset + nbytes > buffer.nbytes:
        raise ValueError(f"{what} {nbytes} bytes at {offset} overflows a buffer of {buffer.nbytes}")


class HipCommandBuffer:
    """Recorded commands, each a callable issuing one HIP call on a stream.

    The stream orders everything, so a barrier needs no command of its own. `mode` is "direct",
    "graph", or None: the device's `graphs` setting when it is submitted."""

    def __init__(self, device: HipDevice, mode: str | None = None):
        self.device = device
        self.mode = mode
        self.commands: list = []
        self.keep: list = []  # kernel-parameter arrays the launches point into
        self.ended = False
        self.graph = None
        self.graph_exec = None

    def _add(self, command) -> None:
        if self.ended:
            raise RuntimeError("command buffer already ended; record a new one")
        self.commands.append(command)

    def dispatch(self, executable: HipExecutable, entry: int, bindings, *, scalars=(), workgroup_count=None) -> None:
        """`scalars` and `workgroup_count`: a dynamic entry point's sizes for this dispatch (the scalars are
        the kernel's `long long` arguments after its buffers)."""
        ep = executable.entry_points[entry]
        ep.check_dispatch(bindings, scalars)
        values = np.array([buf.address + offset for buf, offset, _ in bindings] + [int(v) for v in scalars],
                          dtype=np.uint64)
        pointers = np.array([values.ctypes.data + 8 * i for i in range(len(values))], dtype=np.uint64)
        self.keep.append((values, pointers, [buf for buf, _, _ in bindings]))
        function, params = executable.functions[entry], int(pointers.ctypes.data)
        grid, block = tuple(workgroup_count or ep.workgroup_count), tuple(ep.workgroup_size)
        hip = _hip()

        def launch(stream):
            check(hip.hipModuleLaunchKernel(function, *grid, *block, 0, stream, params, None),
                  f"hipModuleLaunchKernel({ep.name})")

        self._add(launch)

    def copy(self, src: HipBuffer, src_offset: int, dst: HipBuffer, dst_offset: int, nbytes: int) -> None:
        _check_range(src, src_offset, nbytes, "copying from")
        _check_range(dst, dst_offset, nbytes, "copying to")
        hip = _hip()
        self.keep.append((src, dst))
        s, d = src.address + src_offset, dst.address + dst_offset
        self._add(lambda stream: check(hip.hipMemcpyDtoDAsync(d, s, nbytes, stream), "hipMemcpyDtoDAsync"))

    def fill(self, buffer: HipBuffer, offset: int, nbytes: int, value: int) -> None:
        _check_range(buffer, offset, nbytes, "filling")
        hip = _hip()
        self.keep.append(buffer)
        d = buffer.address + offset
        self._add(lambda stream: check(hip.hipMemsetD8Async(d, value & 0xFF, nbytes, stream), "hipMemsetD8Async"))

    def barrier(self) -> None:
        """Commands already run in stream order."""

    def end(self) -> None:
        self.ended = True

    def issue(self, stream) -> None:
        for command in self.commands:
            command(stream)

    def capture(self, stream) -> None:
        """Record the commands into a HIP graph once (nothing runs while capturing). `stream` is one that
        nothing else uses meanwhile: whatever is issued on a capturing stream joins the capture."""
        hip = _hip()
        check(hip.hipStreamBeginCapture(stream, hip.hipStreamCaptureMode.hipStreamCaptureModeThreadLocal),
              "hipStreamBeginCapture")
        try:
            self.issue(stream)
        except BaseException:
            hip.hipStreamEndCapture(stream)  # leave capture mode; the launch's own error is the one to report
            raise
        self.graph = check(hip.hipStreamEndCapture(stream), "hipStreamEndCapture")
        self.graph_exec = check(hip.hipGraphInstantiateWithFlags(self.graph, 0), "hipGraphInstantiateWithFlags")

    def release(self) -> None:
        if self.graph_exec is not None:
            hip = _hip()
            self.device._current()
            hip.hipGraphExecDestroy(self.graph_exec)
            hip.hipGraphDestroy(self.graph)
            self.graph_exec = self.graph = None

    def __del__(self):
        try:
            self.release()
        except Exception:  # at interpreter exit the bindings may already be gone
            pass


class HipDevice:
    formats = (FORMAT,)

    def __init__(self, info: DeviceInfo):
        hip = _hip()
        self.info = info
        self.ordinal = int(info.id)
        self.gfx = info.properties["arch"]
        self.graphs = os.environ.get("RETARGET_HIP_GRAPHS", "0") in ("1", "true", "yes", "on")
        self._current()
        self.stream = check(hip.hipStreamCreateWithFlags(NON_BLOCKING), "hipStreamCreateWithFlags")
        self.capture_stream = None  # made on the first capture: graphs are captured there, under the lock
        self.pending: list = []  # host arrays of copies still in flight, kept alive until a wait covers them
        self._pending_lock = threading.Lock()
        self._lock = threading.RLock()  # submits, captures, timing
        self._events = None  # (start, end) for timed_submit, made on first use

    def _current(self) -> None:
        check(_hip().hipSetDevice(self.ordinal), "hipSetDevice")

    def can_load(self, format: str, target: TargetDesc) -> str | None:
        if format != FORMAT:
            return f"the hip driver loads {FORMAT}, not {format}"
        return why_not(target, self.gfx, self.info.name)

    def allocate(self, nbytes: int) -> HipBuffer:
        self._current()
        return HipBuffer(self, nbytes)

    def write(self, buffer: HipBuffer, offset: int, data: np.ndarray) -> None:
        raw = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        if offset < 0 or offset + raw.nbytes > buffer.nbytes:
            raise ValueError(f"writing {raw.nbytes} bytes at {offset} overflows a buffer of {buffer.nbytes}")
        if raw.nbytes == 0:
            return
        self._current()
        with self._pending_lock:  # appended before any wait can start that would not cover the copy
            check(_hip().hipMemcpyHtoDAsync(buffer.address + offset, raw.ctypes.data, raw.nbytes, self.stream),
                  "hipMemcpyHtoDAsync")
            self.pending.append(raw)

    def read(self, buffer: HipBuffer, offset: int, nbytes: int) -> np.ndarray:
        if offset < 0 or offset + nbytes > buffer.nbytes:
            raise ValueError(f"reading {nbytes} bytes at {offset} overflows a buffer of {buffer.nbytes}")
        out = np.empty(nbytes, dtype=np.uint8)
        if nbytes:
            self._current()
            check(_hip().hipMemcpyDtoHAsync(out.ctypes.data, buffer.address + offset, nbytes, self.stream),
                  "hipMemcpyDtoHAsync")
            self.wait()
        return out

    def load_executable(self, binary: ExecutableBinary) -> HipExecutable:
        from .codeobject import read

        reason = self.can_load(binary.format, binary.target)
        if reason:
            raise UnknownDeviceError(f"{self.info.uri} cannot run {binary.target.name}: {reason}",
                                     hint="recompile with --target rocm:host")
        if read(binary.data).gfx not in ("", self.gfx):
            raise UnknownDeviceError(f"{self.info.uri}: the code object is for {read(binary.data).gfx}, "
                                     f"this GPU is {self.gfx}", hint="recompile with --target rocm:host")
        hip = _hip()
        self._current()
        image = np.frombuffer(binary.data, dtype=np.uint8)
        module = check(hip.hipModuleLoadData(image.ctypes.data), "hipModuleLoadData")
        executable = HipExecutable(self, list(binary.entry_points), module, [])
        executable.functions = [check(hip.hipModuleGetFunction(module, e.name.encode()),
                                      f"hipModuleGetFunction({e.name})") for e in binary.entry_points]
        return executable

    @property
    def modes(self) -> tuple[str, ...]:
        return ("graph", "direct") if self.graphs else ("direct", "graph")

    def command_buffer(self, mode: str | None = None) -> HipCommandBuffer:
        if mode is not None and mode not in ("graph", "direct"):
            raise ValueError(f"hip command buffers run as 'direct' or 'graph', not '{mode}'")
        return HipCommandBuffer(self, mode)

    def submit(self, command_buffer: HipCommandBuffer) -> None:
        with self._lock:
            self._current()
            if not command_buffer.commands:
                return
            graph = command_buffer.mode == "graph" if command_buffer.mode else self.graphs
            if graph and command_buffer.ended:
                if command_buffer.graph_exec is None:
                    if self.capture_stream is None:
                        self.capture_stream = check(_hip().hipStreamCreateWithFlags(NON_BLOCKING),
                                                    "hipStreamCreateWithFlags")
                    command_buffer.capture(self.capture_stream)
                check(_hip().hipGraphLaunch(command_buffer.graph_exec, self.stream), "hipGraphLaunch")
            else:
                command_buffer.issue(self.stream)

    def wait(self) -> None:
        self._current()
        with self._pending_lock:
            covered = len(self.pending)  # copies issued before this synchronisation starts
        check(_hip().hipStreamSynchronize(self.stream), "hipStreamSynchronize")
        with self._pending_lock:
            del self.pending[:covered]

    def memory_in_use(self) -> int:
        """Bytes of the GPU's memory in use (total - free of hipMemGetInfo: every process's)."""
        self._current()
        free, total = check(_hip().hipMemGetInfo(), "hipMemGetInfo")
        return int(total) - int(free)

    def timed_submit(self, command_buffer: HipCommandBuffer) -> float:
        """Submit, wait, and return the seconds between two events recorded on the stream around the
        work: the GPU's own time, without host copies or Python (`retarget.bench` uses it)."""
        hip = _hip()
        with self._lock:
            self._current()
            if self._events is None:
                self._events = tuple(check(hip.hipEventCreate(), "hipEventCreate") for _ in range(2))
            start, end = self._events
            check(hip.hipEventRecord(start, self.stream), "hipEventRecord")
            self.submit(command_buffer)
            check(hip.hipEventRecord(end, self.stream), "hipEventRecord")
            self.wait()
            return check(hip.hipEventElapsedTime(start, end), "hipEventElapsedTime") / 1e3

    def close(self) -> None:
        """Free the streams and events (also done when the device goes)."""
        hip = _hip()
        if self.stream is not None:
            self.wait()
            for event in self._events or ():
                check(hip.hipEventDestroy(event), "hipEventDestroy")
            self._events = None
            for stream in (self.stream, self.capture_stream):
                if stream is not None:
                    check(hip.hipStreamDestroy(stream), "hipStreamDestroy")
            self.stream = self.capture_stream = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # at interpreter exit the bindings may already be gone
            pass


def why_not(target: TargetDesc, gfx: str, device_name: str) -> str | None:
    """None when code compiled for `target` runs on a GPU of `gfx`, else why not and the fix. AMDGPU
    code objects are ISA-specific: only the same gfx runs them."""
    built = target.extra.get("gfx")
    if not built:
        return f"the executable's target {target.name} names no gfx"
    if built == gfx:
        return None
    return (f"the module holds a code object for {built}, and this GPU ({device_name}) is {gfx}: AMD code objects "
            f"run only on their own gfx; recompile with --target rocm:host (or rocm:{gfx})")


HIP = HipDriver()
