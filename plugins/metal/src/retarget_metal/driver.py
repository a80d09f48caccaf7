"""The `metal` HAL driver, through PyObjC's Metal bindings (`pyobjc-framework-Metal`), on macOS.

Elsewhere, and on a Mac without PyObjC or a Metal device, `enumerate()` reports one unavailable
device with the reason, and nothing here imports PyObjC until a device is opened.

- Devices: `MTLCopyAllDevices()` (else `MTLCreateSystemDefaultDevice()`), each with its Apple
  GPU family (the highest `supportsFamily:` answers yes to), its limits, and the MSL version
  its macOS compiles.
- Buffers: `newBufferWithLength:options:` in shared storage, which the CPU and the GPU both see
  (Apple silicon has one memory): `write` and `read` copy through `contents()`, no staging.
- Executables: one MTLLibrary per executable, from the container's `.metallib` when `xcrun`
  built one (`newLibraryWithURL:error:`), else from its source (`newLibraryWithSource:options:
  error:`, fast math off, the target's language version); then one compute pipeline per kernel
  (`newFunctionWithName:`, `newComputePipelineStateWithFunction:error:`). Metal's compile errors
  come back as `MetalError` with the compiler's log.
- Command buffers: Metal's are one-shot, so a `MetalCommandBuffer` records commands as data
  (pipeline and bindings resolved once, at record time) and `submit` encodes them into a new
  MTLCommandBuffer: dispatches into a *concurrent* compute encoder (`dispatchThreadgroups:
  threadsPerThreadgroup:`, buffers bound with `setBuffer:offset:atIndex:` at each tensor's
  offset), a `memoryBarrierWithScope:` for each recorded barrier (the runtime's host program
  places them where a dispatch reads what an earlier one wrote), copies and fills in a blit
  encoder. `submit` commits; `wait` waits for the last committed buffer (one queue runs them in
  order) and raises if the GPU reported an error. `last_gpu_seconds` is its GPU time.

Threads: a device may be used from several threads at once. Encoding and committing are serialised by
a lock (one queue orders the work); `wait` waits for the last buffer committed by any thread, which
stays the one to wait for until it completes; buffers are shared memory, written and read directly.
"""

from __future__ import annotations

import os
import platform
import sys
import tempfile
import threading

import numpy as np
from retarget.errors import RetargetError, UnknownDeviceError, no_such_device
from retarget.protocols import DeviceInfo, ExecutableBinary, TargetDesc

from . import FORMAT

NAME = "metal"
PYOBJC = "pyobjc-framework-Metal==12.2.2"
APPLE_FAMILY_BASE = 1000  # MTLGPUFamilyApple1 == 1001
MAC2_FAMILY = 2002  # MTLGPUFamilyMac2
METAL3_FAMILY = 5001  # MTLGPUFamilyMetal3
# Metal's enum values, so that recording needs no PyObjC constant lookups.
STORAGE_MODE_SHARED = 0  # MTLResourceStorageModeShared
DISPATCH_CONCURRENT = 1  # MTLDispatchTypeConcurrent
BARRIER_SCOPE_BUFFERS = 1  # MTLBarrierScopeBuffers
STATUS_ERROR = 5  # MTLCommandBufferStatusError


class MetalError(RetargetError):
    """Metal rejected something: a library, a pipeline, a command buffer. The message carries Metal's."""


def _metal():
    import Metal

    return Metal


def unavailable_reason() -> str | None:
    """Why this machine cannot run Metal, or None when it can try."""
    if sys.platform != "darwin":
        return f"Metal needs macOS; this is {platform.system() or sys.platform}"
    try:
        _metal()
    except ImportError as e:
        return f"PyObjC's Metal bindings are not importable ({e}); pip install {PYOBJC}"
    return None


def macos_msl() -> str | None:
    """The newest MSL version this macOS compiles (macOS 14 -> '3.1'), or None off macOS."""
    from .targets import MSL_VERSIONS

    release = platform.mac_ver()[0]
    if not release:
        return None
    major = int(release.split(".")[0])
    known = [v for v in MSL_VERSIONS.values() if int(v.macos) <= major]
    return max(known, key=lambda v: v.key).name if known else None


def _devices() -> list:
    Metal = _metal()
    devices = list(Metal.MTLCopyAllDevices() or [])
    if not devices:
        default = Metal.MTLCreateSystemDefaultDevice()
        devices = [default] if default is not None else []
    return devices


def apple_family(mtl_device) -> int | None:
    """The highest Apple GPU family the device supports (9 for an M3), or None for a non-Apple GPU."""
    for number in range(12, 0, -1):
        if mtl_device.supportsFamily_(APPLE_FAMILY_BASE + number):
            return number
    return None


def _size(mtl_size) -> list[int]:
    return [int(mtl_size.width), int(mtl_size.height), int(mtl_size.depth)]


def _info(index: int, mtl_device) -> DeviceInfo:
    family = apple_family(mtl_device)
    threads = _size(mtl_device.maxThreadsPerThreadgroup())
    properties = {
        "arch": f"apple{family}" if family else "not-apple",
        "family": family,
        "mac2": bool(mtl_device.supportsFamily_(MAC2_FAMILY)),
        "metal3": bool(mtl_device.supportsFamily_(METAL3_FAMILY)),
        "msl": macos_msl(),
        "macos": platform.mac_ver()[0],
        "registry_id": int(mtl_device.registryID()),
        "unified_memory": bool(mtl_device.hasUnifiedMemory()),
        "low_power": bool(mtl_device.isLowPower()),
        "max_threads_per_threadgroup": threads[0],
        "max_threads_per_threadgroup_xyz": threads,
        "max_threadgroup_memory_bytes": int(mtl_device.maxThreadgroupMemoryLength()),
        "max_buffer_bytes": int(mtl_device.maxBufferLength()),
        "recommended_working_set_bytes": int(mtl_device.recommendedMaxWorkingSetSize()),
        "subgroup_size": 32,
    }
    return DeviceInfo(NAME, str(index), str(mtl_device.name()), properties=properties)


class MetalDriver:
    name = NAME

    def enumerate(self) -> list[DeviceInfo]:
        """Every Metal device, or one unavailable entry saying why there is none. Never raises."""
        reason = unavailable_reason()
        if reason:
            return [DeviceInfo(NAME, "0", "Metal device", available=False, reason=reason)]
        try:
            devices = _devices()
            if not devices:
                return [DeviceInfo(NAME, "0", "Metal device", available=False,
                                   reason="Metal reports no device (MTLCreateSystemDefaultDevice returned nil; a "
                                          "virtual machine without GPU access?)")]
            return [_info(i, d) for i, d in enumerate(devices)]
        except Exception as e:  # PyObjC or Metal failing in a way we did not foresee: report, never raise
            return [DeviceInfo(NAME, "0", "Metal device", available=False,
                               reason=f"{type(e).__name__}: {e}".replace("\n", " "))]

    def create(self, device_id: str) -> MetalDevice:
        infos = self.enumerate()
        available = {d.id: d for d in infos if d.available}
        device_id = device_id or "0"
        if device_id not in available:
            raise no_such_device("metal", device_id, infos)
        return MetalDevice(available[device_id], _devices()[int(device_id)])

    def dump(self, device_id: str) -> dict:
        info = {d.id: d for d in self.enumerate()}.get(device_id or "0")
        if info is None:
            raise UnknownDeviceError(f"metal has no device '{device_id}'")
        out = {"driver": NAME, "id": info.id, "name": info.name, "available": info.available}
        if not info.available:
            return {**out, "reason": info.reason}
        out.update(info.properties)
        out["executable_formats"] = [FORMAT]
        try:
            from .targets import describe_device

            desc = describe_device(info)
            out["target"], out["target_note"] = f"metal-spirv:{desc.arch}", desc.extra["note"]
        except RetargetError as e:
            out["target"] = f"none ({e})"
        return out


class MetalBuffer:
    """A shared-storage MTLBuffer of `nbytes` (at least 4 bytes: Metal has no empty buffer)."""

    def __init__(self, device: MetalDevice, nbytes: int):
        self.device, self.nbytes = device, nbytes
        self.size = max(4, -(-nbytes // 4) * 4)
        self.mtl = device.mtl.newBufferWithLength_options_(self.size, STORAGE_MODE_SHARED)
        if self.mtl is None:
            raise MetalError(f"Metal could not allocate a buffer of {self.size} bytes")
        self.host = np.frombuffer(self.mtl.contents().as_buffer(self.size), dtype=np.uint8)


class MetalExecutable:
    def __init__(self, entry_points, kernels, pipelines, library):
        self.entry_points = entry_points
        self.kernels = kernels  # the container's per-kernel metadata
        self.pipelines = pipelines  # one MTLComputePipelineState per entry point
        self.library = library


class MetalCommandBuffer:
    """Recorded work, as data: ("dispatch", pipeline, [(buffer, offset)], groups, threads, scalars), ("barrier",),
    ("copy", src, src_offset, dst, dst_offset, nbytes) and ("fill", buffer, offset, nbytes, value)."""

    def __init__(self, device: MetalDevice):
        self.device = device
        self.commands: list[tuple] = []
        self.ended = False

    def _add(self, command: tuple) -> None:
        if self.ended:
            raise RuntimeError("command buffer already ended; record a new one")
        self.commands.append(command)

    def dispatch(self, executable: MetalExecutable, entry: int, bindings, *, scalars=(),
                 workgroup_count=None) -> None:
        """`scalars` and `workgroup_count`: a dynamic entry point's sizes for this dispatch; each scalar is a
        `constant long &` argument after the buffers, set with setBytes."""
        ep, meta = executable.entry_points[entry], executable.kernels[entry]
        if len(bindings) != len(ep.bindings):
            raise ValueError(f"{ep.name} takes {len(ep.bindings)} bindings, got {len(bindings)}")
        if len(scalars) != len(ep.scalars):
            raise ValueError(f"{ep.name} takes {len(ep.scalars)} scalars, got {len(scalars)}")
        types = ep.binding_types(scalars)
        for i, ((buf, offset, nbytes), t, param) in enumerate(zip(bindings, types, meta["params"])):
            if nbytes < t.nbytes or offset < 0 or offset + nbytes > buf.nbytes:
                raise ValueError(f"{ep.name}: binding {i} of {nbytes} bytes at {offset} cannot hold {t}")
            if offset % param["itemsize"]:  # Metal's rule for device buffers: offsets aligned to the element
                raise ValueError(f"{ep.name}: binding {i} at byte {offset} is not aligned to its "
                                 f"{param['itemsize']}-byte elements")
        self._add(("dispatch", executable.pipelines[entry], [(buf, offset) for buf, offset, _ in bindings],
                   tuple(int(c) for c in (workgroup_count or ep.workgroup_count)), tuple(ep.workgroup_size),
                   np.array(scalars, dtype=np.int64)))

    def copy(self, src: MetalBuffer, src_offset: int, dst: MetalBuffer, dst_offset: int, nbytes: int) -> None:
        if src_offset % 4 or dst_offset % 4 or nbytes % 4:  # the blit encoder's rule on macOS
            raise ValueError(f"Metal copies whole 4-byte words on macOS: offsets {src_offset}, {dst_offset} and size "
                             f"{nbytes} must be multiples of 4")
        if src_offset + nbytes > src.size or dst_offset + nbytes > dst.size:
            raise ValueError(f"copying {nbytes} bytes overflows a buffer")
        self._add(("copy", src, src_offset, dst, dst_offset, nbytes))

    def fill(self, buffer: MetalBuffer, offset: int, nbytes: int, value: int) -> None:
        if offset % 4 or nbytes % 4:
            raise ValueError(f"Metal fills whole 4-byte words on macOS: offset {offset} and size {nbytes} must be "
                             "multiples of 4")
        if offset + nbytes > buffer.size:
            raise ValueError(f"filling {nbytes} bytes at {offset} overflows a buffer of {buffer.nbytes}")
        self._add(("fill", buffer, offset, nbytes, value & 0xFF))

    def barrier(self) -> None:
        """Dispatches before it finish their buffer writes before any dispatch after it starts."""
        self._add(("barrier",))

    def end(self) -> None:
        self.ended = True

    def encode(self, queue):
        """The recording as a new MTLCommandBuffer (not committed)."""
        Metal = _metal()
        cb = queue.commandBuffer()
        compute = blit = None
        for command in self.commands:
            kind = command[0]
            if kind in ("dispatch", "barrier"):
                if blit is not None:
                    blit.endEncoding()
                    blit = None
                if kind == "barrier":
                    if compute is not None:  # between encoders Metal orders the work itself
                        compute.memoryBarrierWithScope_(BARRIER_SCOPE_BUFFERS)
                    continue
                if compute is None:
                    compute = cb.computeCommandEncoderWithDispatchType_(DISPATCH_CONCURRENT)
                _, pipeline, buffers, groups, threads, scalars = command
                compute.setComputePipelineState_(pipeline)
                for index, (buf, offset) in enumerate(buffers):
                    compute.setBuffer_offset_atIndex_(buf.mtl, offset, index)
                for j, value in enumerate(scalars):  # sizes known at run time: `constant long &` arguments
                    compute.setBytes_length_atIndex_(value.tobytes(), 8, len(buffers) + j)
                compute.dispatchThreadgroups_threadsPerThreadgroup_(Metal.MTLSizeMake(*groups),
                                                                   Metal.MTLSizeMake(*threads))
                continue
            if compute is not None:
                compute.endEncoding()
                compute = None
            if blit is None:
                blit = cb.blitCommandEncoder()
            if kind == "copy":
                _, src, src_offset, dst, dst_offset, nbytes = command
                blit.copyFromBuffer_sourceOffset_toBuffer_destinationOffset_size_(src.mtl, src_offset, dst.mtl,
                                                                                  dst_offset, nbytes)
            else:
                _, buf, offset, nbytes, value = command
                blit.fillBuffer_range_value_(buf.mtl, (offset, nbytes), value)
        for encoder in (compute, blit):
            if encoder is not None:
                encoder.endEncoding()
        return cb


class MetalDevice:
    formats = (FORMAT,)

    def __init__(self, info: DeviceInfo, mtl_device):
        self.info = info
        self.mtl = mtl_device
        self.queue = mtl_device.newCommandQueue()
        if self.queue is None:
            raise UnknownDeviceError(f"metal:{info.id} ({info.name}) refused a command queue")
        self.family = info.properties.get("family") or 0
        self.msl = info.properties.get("msl")
        self.last_gpu_seconds: float | None = None
        self._last = None  # the last committed MTLCommandBuffer
        self._lock = threading.Lock()

    def can_load(self, format: str, target: TargetDesc) -> str | None:
        from .targets import MSL_VERSIONS

        if format != FORMAT:
            return f"the metal driver loads {FORMAT}, not {format}"
        props = self.info.properties
        short = []
        if target.extra.get("family_number", 0) > self.family:
            short.append(f"it is for Apple{target.extra['family_number']} GPUs and this is Apple{self.family}")
        msl = target.extra.get("msl")
        if msl and (self.msl is None or MSL_VERSIONS[msl].key > MSL_VERSIONS[self.msl].key):
            short.append(f"it needs MSL {msl} (macOS {MSL_VERSIONS[msl].macos}) and this macOS compiles "
                         f"{self.msl or 'none'}")
        if target.max_workgroup_size > props.get("max_threads_per_threadgroup", 0):
            short.append(f"{target.max_workgroup_size} threads a threadgroup > "
                         f"{props.get('max_threads_per_threadgroup')}")
        if target.shared_memory_bytes > props.get("max_threadgroup_memory_bytes", 0):
            short.append(f"{target.shared_memory_bytes} bytes of threadgroup memory > "
                         f"{props.get('max_threadgroup_memory_bytes')}")
        if short:
            return (f"the executable is for metal-spirv:{target.arch}, which assumes more than {self.info.name} has ("
                    + "; ".join(short) + "); recompile with --target metal-spirv:host")
        return None

    def memory_in_use(self) -> int:
        """Bytes the MTLDevice has allocated (its currentAllocatedSize)."""
        return int(self.mtl.currentAllocatedSize())

    def allocate(self, nbytes: int) -> MetalBuffer:
        limit = self.info.properties.get("max_buffer_bytes")
        if limit and nbytes > limit:
            raise MetalError(f"a buffer of {nbytes} bytes exceeds this device's maxBufferLength ({limit})")
        return MetalBuffer(self, nbytes)

    def write(self, buffer: MetalBuffer, offset: int, data: np.ndarray) -> None:
        raw = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        if offset < 0 or offset + raw.nbytes > buffer.nbytes:
            raise ValueError(f"writing {raw.nbytes} bytes at {offset} overflows a buffer of {buffer.nbytes}")
        buffer.host[offset:offset + raw.nbytes] = raw

    def read(self, buffer: MetalBuffer, offset: int, nbytes: int) -> np.ndarray:
        if offset < 0 or offset + nbytes > buffer.nbytes:
            raise ValueError(f"reading {nbytes} bytes at {offset} overflows a buffer of {buffer.nbytes}")
        return buffer.host[offset:offset + nbytes].copy()

    def load_executable(self, binary: ExecutableBinary) -> MetalExecutable:
        from .compile import unpack

        reason = self.can_load(binary.format, binary.target)
        if reason:
            raise UnknownDeviceError(f"{self.info.uri} cannot run {binary.target.name}: {reason}",
                                     hint="recompile with --target metal-spirv:host")
        doc = unpack(binary.data)
        kernels = doc["kernels"]
        if [k["name"] for k in kernels] != [e.name for e in binary.entry_points]:
            raise RetargetError("the MSL executable's kernels do not match its entry points",
                                hint="recompile with --target metal-spirv")
        library = self.library(doc)
        pipelines = []
        for meta in kernels:
            function = library.newFunctionWithName_(meta["name"])
            if function is None:
                raise MetalError(f"the Metal library has no function {meta['name']}")
            pipeline, error = self.mtl.newComputePipelineStateWithFunction_error_(function, None)
            if pipeline is None:
                raise MetalError(f"Metal cannot make a pipeline of kernel {meta['name']}: {_describe(error)}")
            wx, wy, wz = meta["workgroup_size"]
            if wx * wy * wz > pipeline.maxTotalThreadsPerThreadgroup():
                raise MetalError(f"kernel {meta['name']} runs {wx * wy * wz} threads a threadgroup, and its pipeline "
                                 f"allows {pipeline.maxTotalThreadsPerThreadgroup()}")
            pipelines.append(pipeline)
        return MetalExecutable(list(binary.entry_points), kernels, pipelines, library)

    def library(self, doc: dict):
        """The container's metallib when it has one, else its source compiled here (fast math off)."""
        if doc.get("metallib"):
            import base64

            from Foundation import NSURL

            with tempfile.TemporaryDirectory(prefix="retarget-metal-") as tmp:
                path = os.path.join(tmp, "kernels.metallib")
                with open(path, "wb") as f:
                    f.write(base64.b64decode(doc["metallib"]))
                library, error = self.mtl.newLibraryWithURL_error_(NSURL.fileURLWithPath_(path), None)
            if library is not None:
                return library
            # A metallib this macOS cannot read (made by a newer Xcode): fall back to the source.
        return self.compile_source(doc["source"], doc.get("language_version"))

    def compile_source(self, source: str, language_version: int | None = None):
        """MSL source -> MTLLibrary; the compiler's errors as a MetalError."""
        Metal = _metal()
        options = Metal.MTLCompileOptions.new()
        if language_version:
            options.setLanguageVersion_(language_version)
        options.setFastMathEnabled_(False)  # NaN and infinity must behave (see compile.py)
        library, error = self.mtl.newLibraryWithSource_options_error_(source, options, None)
        if library is None:
            raise MetalError(f"Metal rejected the MSL: {_describe(error)}",
                             hint="a retarget bug: report it with the source (--dump-after-all)")
        return library

    def command_buffer(self) -> MetalCommandBuffer:
        return MetalCommandBuffer(self)

    def submit(self, command_buffer: MetalCommandBuffer) -> None:
        if not command_buffer.commands:
            return
        with self._lock:
            cb = command_buffer.encode(self.queue)
            cb.commit()
            self._last = cb

    def wait(self) -> None:
        """Block until every submitted command buffer is done (one queue runs them in order). The last one
        stays the one to wait for until it has completed: a thread that waits while another is waiting
        on it must wait too, not return at once."""
        with self._lock:
            cb = self._last
        if cb is None:
            return
        cb.waitUntilCompleted()
        with self._lock:
            if self._last is cb:
                self._last = None
        if cb.status() == STATUS_ERROR:
            raise MetalError(f"the GPU failed a command buffer: {_describe(cb.error())}")
        self.last_gpu_seconds = float(cb.GPUEndTime() - cb.GPUStartTime())


def _describe(error) -> str:
    if error is None:
        return "no error given"
    try:
        return str(error.localizedDescription())
    except Exception:
        return str(error)


METAL = MetalDriver()
