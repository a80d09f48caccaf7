"""The `opencl` HAL driver, through pyopencl: any OpenCL 1.2 device, such as PoCL on a CPU.

One device is one OpenCL device with its own context and one in-order command queue; all work
of a device runs in that queue's order. Buffers are cl.Buffers; `write` and `read` are blocking
copies. An executable is one cl.Program, built by the device's driver when it is loaded.

A command buffer records dispatches, copies and fills once: each dispatch gets its own cl.Kernel
with its arguments set while recording. `submit` enqueues the recording (one enqueue per
command) and `wait` finishes the queue. The queue is in order, so `barrier` records nothing.
"""

from __future__ import annotations

import threading

import numpy as np
from retarget.errors import RetargetError, UnknownDeviceError
from retarget.protocols import DeviceInfo, ExecutableBinary, TargetDesc

from . import FORMAT

NAME = "opencl"
NO_ICD = ("no OpenCL platform is installed (no ICD): on Debian or Ubuntu `apt-get install pocl-opencl-icd` "
          "gives a CPU device; or `pip install 'pyopencl[pocl]'`; or install your GPU vendor's OpenCL driver")


class OpenClError(RetargetError):
    """OpenCL refused something: a program build (the message holds the build log), an enqueue."""


def _cl():
    import pyopencl

    return pyopencl


def _devices() -> list:
    """Every OpenCL device of every platform, in platform order."""
    cl = _cl()
    try:
        platforms = cl.get_platforms()
    except cl.Error as e:  # PLATFORM_NOT_FOUND_KHR: the ICD loader found no vendor driver
        raise LookupError(NO_ICD) from e
    return [d for p in platforms for d in p.get_devices()]


def _properties(device) -> dict:
    cl = _cl()
    return {
        "arch": "host",
        "platform": device.platform.name.strip(),
        "type": cl.device_type.to_string(device.type),
        "vendor": device.vendor.strip(),
        "version": device.version.strip(),
        "opencl_c_version": device.opencl_c_version.strip(),
        "driver_version": device.driver_version.strip(),
        "compute_units": int(device.max_compute_units),
        "max_workgroup_size": int(device.max_work_group_size),
        "max_work_item_sizes": [int(n) for n in device.max_work_item_sizes],
        "local_memory_bytes": int(device.local_mem_size),
        "global_memory_bytes": int(device.global_mem_size),
        "max_allocation_bytes": int(device.max_mem_alloc_size),
        "extensions": sorted(device.extensions.split()),
    }


class OpenClDriver:
    name = NAME

    def __init__(self):
        self._open: dict[str, OpenClDevice] = {}
        self._lock = threading.Lock()

    def enumerate(self) -> list[DeviceInfo]:
        """Every OpenCL device, or one unavailable entry saying why there is none. Never raises."""
        try:
            devices = _devices()
        except ImportError as e:
            return [DeviceInfo(NAME, "0", "OpenCL device", available=False,
                               reason=f"pyopencl is not importable ({e}); pip install pyopencl==2026.1.4")]
        except LookupError as e:
            return [DeviceInfo(NAME, "0", "OpenCL device", available=False, reason=str(e))]
        except Exception as e:  # a broken ICD must not take `retarget devices` down
            return [DeviceInfo(NAME, "0", "OpenCL device", available=False,
                               reason=f"OpenCL failed to list devices ({type(e).__name__}: {e})".replace("\n", " "))]
        if not devices:
            return [DeviceInfo(NAME, "0", "OpenCL device", available=False,
                               reason="the OpenCL platforms list no device")]
        infos = []
        for i, device in enumerate(devices):
            try:
                infos.append(DeviceInfo(NAME, str(i), device.name.strip(), properties=_properties(device)))
            except Exception as e:
                infos.append(DeviceInfo(NAME, str(i), "OpenCL device", available=False,
                                        reason=f"{type(e).__name__}: {e}"))
        return infos

    def create(self, device_id: str) -> OpenClDevice:
        """The device's one OpenClDevice (context and queue), shared by every module loaded on it."""
        infos = self.enumerate()
        available = {d.id: d for d in infos if d.available}
        device_id = device_id or "0"
        if device_id not in available:
            reasons = "; ".join(d.reason for d in infos if not d.available)
            raise UnknownDeviceError(f"opencl has no device '{device_id}'" + (f": {reasons}" if reasons else ""),
                                     hint=f"its devices: {', '.join(available) or 'none'} (`retarget doctor` says why)")
        with self._lock:
            if device_id not in self._open:
                self._open[device_id] = OpenClDevice(available[device_id], _devices()[int(device_id)])
            return self._open[device_id]

    def dump(self, device_id: str) -> dict:
        info = {d.id: d for d in self.enumerate()}.get(device_id or "0")
        if info is None:
            raise UnknownDeviceError(f"opencl has no device '{device_id}'")
        out = {"driver": NAME, "id": info.id, "name": info.name, "available": info.available}
        if not info.available:
            return {**out, "reason": info.reason}
        return {**out, **info.properties, "executable_formats": [FORMAT]}


def _check_range(buffer: OpenClBuffer, offset: int, nbytes: int, what: str) -> None:
    if offset < 0 or nbytes < 0 or offset + nbytes > buffer.nbytes:
        raise ValueError(f"{what} {nbytes} bytes at {offset} overflows a buffer of {buffer.nbytes}")


class OpenClBuffer:
    def __init__(self, device: OpenClDevice, nbytes: int):
        cl = _cl()
        self.nbytes = nbytes
        self.mem = cl.Buffer(device.context, cl.mem_flags.READ_WRITE, size=max(nbytes, 1))


class OpenClExecutable:
    def __init__(self, entry_points, program):
        self.entry_points = entry_points
        self.program = program


class OpenClCommandBuffer:
    """Recorded commands, each a callable that enqueues one OpenCL command on a queue."""

    def __init__(self, device: OpenClDevice):
        self.device = device
        self.commands: list = []
        self.ended = False

    def _add(self, command) -> None:
        if self.ended:
            raise RuntimeError("command buffer already ended; record a new one")
        self.commands.append(command)

    def dispatch(self, executable: OpenClExecutable, entry: int, bindings, *, scalars=(),
                 workgroup_count=None) -> None:
        """`scalars` and `workgroup_count`: a dynamic entry point's sizes for this dispatch (the scalars
        are `long` kernel arguments after the buffers)."""
        ep = executable.entry_points[entry]
        ep.check_dispatch(bindings, scalars)
        args = []
        for buffer, offset, _ in bindings:
            args += [buffer.mem, np.int64(offset)]
        args += [np.int64(v) for v in scalars]
        kernel = _cl().Kernel(executable.program, ep.name)  # one per dispatch: its arguments are its own
        kernel.set_args(*args)
        local = tuple(ep.workgroup_size)
        counts = workgroup_count or ep.workgroup_count
        global_ = tuple(int(c) * s for c, s in zip(counts, ep.workgroup_size))
        self._add(lambda queue: _cl().enqueue_nd_range_kernel(queue, kernel, global_, local))

    def copy(self, src: OpenClBuffer, src_offset: int, dst: OpenClBuffer, dst_offset: int, nbytes: int) -> None:
        _check_range(src, src_offset, nbytes, "copying from")
        _check_range(dst, dst_offset, nbytes, "copying to")
        if not nbytes:
            return
        cl = _cl()
        if src is dst and abs(src_offset - dst_offset) < nbytes:  # OpenCL refuses overlapping copies
            scratch = OpenClBuffer(self.device, nbytes)
            self.copy(src, src_offset, scratch, 0, nbytes)
            self.copy(scratch, 0, dst, dst_offset, nbytes)
            return
        self._add(lambda queue: cl.enqueue_copy(queue, dst.mem, src.mem, src_offset=src_offset,
                                                dst_offset=dst_offset, byte_count=nbytes))

    def fill(self, buffer: OpenClBuffer, offset: int, nbytes: int, value: int) -> None:
        _check_range(buffer, offset, nbytes, "filling")
        if not nbytes:
            return
        pattern = np.array([value & 0xFF], dtype=np.uint8)
        self._add(lambda queue: _cl().enqueue_fill_buffer(queue, buffer.mem, pattern, offset, nbytes))

    def barrier(self) -> None:
        """The queue is in order: every command starts after the previous one has finished."""

    def end(self) -> None:
        self.ended = True


class OpenClDevice:
    formats = (FORMAT,)

    def __init__(self, info: DeviceInfo, cl_device):
        cl = _cl()
        self.info = info
        self.cl_device = cl_device
        self.context = cl.Context([cl_device])
        self.queue = cl.CommandQueue(self.context)
        self.extensions = set(info.properties["extensions"])
        self._programs: dict[str, object] = {}
        self._lock = threading.Lock()

    def can_load(self, format: str, target: TargetDesc) -> str | None:
        if format != FORMAT:
            return f"the opencl driver loads {FORMAT}, not {format}"
        short = [f"extension {e}" for e in target.features if e not in self.extensions]
        limit = self.info.properties["max_workgroup_size"]
        if target.max_workgroup_size > limit:
            short.append(f"{target.max_workgroup_size} work-items per work-group > {limit}")
        if short:
            return (f"the executable is for opencl:{target.arch}, which assumes more than {self.info.name} has ("
                    + ", ".join(short) + "); recompile with --target opencl:host (or opencl:opencl-1.2)")
        return None

    def allocate(self, nbytes: int) -> OpenClBuffer:
        return OpenClBuffer(self, nbytes)

    def write(self, buffer: OpenClBuffer, offset: int, data: np.ndarray) -> None:
        raw = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        _check_range(buffer, offset, raw.nbytes, "writing")
        if raw.nbytes:
            _cl().enqueue_copy(self.queue, buffer.mem, raw, dst_offset=offset, is_blocking=True)

    def read(self, buffer: OpenClBuffer, offset: int, nbytes: int) -> np.ndarray:
        _check_range(buffer, offset, nbytes, "reading")
        out = np.empty(nbytes, dtype=np.uint8)
        if nbytes:
            _cl().enqueue_copy(self.queue, out, buffer.mem, src_offset=offset, is_blocking=True)
        return out

    def load_executable(self, binary: ExecutableBinary) -> OpenClExecutable:
        from .compile import unpack

        reason = self.can_load(binary.format, binary.target)
        if reason:
            raise UnknownDeviceError(f"{self.info.uri} cannot run {binary.target.name}: {reason}",
                                     hint="recompile with --target opencl:host")
        doc = unpack(binary.data)
        if doc["kernels"] != [e.name for e in binary.entry_points]:
            raise RetargetError("the OpenCL executable's kernels do not match its entry points",
                                hint="recompile with --target opencl")
        return OpenClExecutable(list(binary.entry_points), self._program(doc["source"]))

    def _program(self, source: str):
        """The built program of `source`, built once per device."""
        cl = _cl()
        with self._lock:
            if source not in self._programs:
                try:
                    self._programs[source] = cl.Program(self.context, source).build()
                except cl.Error as e:
                    raise OpenClError(f"{self.info.name} cannot build the OpenCL C program: {e}".strip(),
                                      hint="`retarget compile --dump-after-all DIR` writes the source") from e
            return self._programs[source]

    def command_buffer(self) -> OpenClCommandBuffer:
        return OpenClCommandBuffer(self)

    def submit(self, command_buffer: OpenClCommandBuffer) -> None:
        with self._lock:
            for command in command_buffer.commands:
                command(self.queue)

    def wait(self) -> None:
        self.queue.finish()


OPENCL = OpenClDriver()
