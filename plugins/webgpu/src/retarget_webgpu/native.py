"""The per-call path of the webgpu driver, through wgpu-native's C API (the cffi `lib` of wgpu-py's backend).

wgpu-py wraps every C call in Python: error capture and a descriptor struct per call, and for a map a promise
that a poll thread resolves, plus an empty submit before every read mapping. On lavapipe that is about 1 µs a
pass command and 150 µs a map; for MobileNetV2 (54 dispatches) it was most of a call's host time
(benchmarks/NOTES.md, "webgpu per-call path"). So the driver makes every object (buffers, pipelines, bind
groups, query sets) through wgpu-py's public API, which owns and releases them, and only the calls made on every
function call come here, with the objects' handles:

- recording: encoder, compute passes, set_pipeline / set_bind_group / dispatch, copies, clears: plain C calls
  (wgpu records a pass's and an encoder's validation errors and reports them at finish);
- finish, submit and queue writes: through wgpu-py's error-capturing `libf`, so a mistake still raises;
- waiting: `wgpuDevicePoll` on the calling thread, which runs the map callbacks there (no promise, no thread
  hand-off): without blocking, in a loop, for up to `spin_s` seconds, then blocking (a sleeping wait can wake up
  a millisecond late on a GPU: see the vulkan driver); reading: the mapped range copied out with one memmove;
- shader modules: `wgpuDeviceCreateShaderModuleTrusted`, which can leave out naga's runtime checks (bounds
  checks on every buffer access, a counter in every loop) from the code it makes.

Only wgpu-py's wgpu-native backend has this (wgpu==0.32.0, the version retarget-webgpu pins).
"""

from __future__ import annotations

import time

import numpy as np
from retarget.errors import RetargetError

# Every C function this module calls: checked once, so another wgpu-py gives one clear error.
FUNCTIONS = (
    "wgpuDeviceCreateCommandEncoder", "wgpuCommandEncoderBeginComputePass", "wgpuComputePassEncoderSetPipeline",
    "wgpuComputePassEncoderSetBindGroup", "wgpuComputePassEncoderDispatchWorkgroups", "wgpuComputePassEncoderEnd",
    "wgpuComputePassEncoderRelease", "wgpuCommandEncoderCopyBufferToBuffer", "wgpuCommandEncoderClearBuffer",
    "wgpuCommandEncoderResolveQuerySet", "wgpuCommandEncoderFinish", "wgpuCommandEncoderRelease",
    "wgpuCommandBufferRelease", "wgpuQueueSubmit", "wgpuQueueWriteBuffer", "wgpuQueueGetTimestampPeriod",
    "wgpuBufferMapAsync", "wgpuBufferGetConstMappedRange", "wgpuBufferUnmap", "wgpuDevicePoll",
    "wgpuDeviceCreateShaderModuleTrusted",
)
UNCHECKED = 0  # WGPUShaderRuntimeChecks_None: no bounds checks, no loop bounding


def backend():
    """(ffi, lib, libf) of wgpu-py's wgpu-native backend; a RetargetError naming the fix when it lacks them."""
    try:
        from wgpu.backends.wgpu_native import _api, ffi, lib

        libf = _api.libf
        missing = [name for name in FUNCTIONS if not hasattr(lib, name) or not hasattr(libf, name)]
    except (ImportError, AttributeError) as e:
        missing = [f"{type(e).__name__}: {e}"]
    if missing:
        import wgpu

        raise RetargetError(f"the webgpu driver needs wgpu-py's wgpu-native backend with {', '.join(missing[:3])}; "
                            f"this is wgpu {getattr(wgpu, '__version__', '?')}",
                            hint="pip install wgpu==0.32.0 (the version retarget-webgpu is tested with)")
    return ffi, lib, libf


class Queue:
    """One device's queue, seen through the C API: encode, submit, write, wait, map and read."""

    def __init__(self, gpu_device, spin_s: float = 0.0):
        ffi, lib, libf = backend()
        self.gpu_device, self.spin_s = gpu_device, spin_s
        self.ffi, self.lib, self.libf = ffi, lib, libf
        self.device, self.queue = gpu_device._internal, gpu_device.queue._internal
        self.encoder_descriptor = ffi.new("WGPUCommandEncoderDescriptor *")
        self.finish_descriptor = ffi.new("WGPUCommandBufferDescriptor *")
        self.pass_descriptor = ffi.new("WGPUComputePassDescriptor *")
        self.submitted = ffi.new("WGPUCommandBuffer[1]")
        self.null = ffi.NULL
        self.mapped = []  # set by the map callback: the status of the last map
        self._on_mapped = ffi.callback("void(WGPUMapAsyncStatus, WGPUStringView, void *, void *)", self._map_done)
        self.map_callback = ffi.new("WGPUBufferMapCallbackInfo *")
        self.map_callback.mode = lib.WGPUCallbackMode_AllowProcessEvents
        self.map_callback.callback = self._on_mapped
        # the command functions, looked up once
        self.set_pipeline = lib.wgpuComputePassEncoderSetPipeline
        self.set_bind_group = lib.wgpuComputePassEncoderSetBindGroup
        self.dispatch = lib.wgpuComputePassEncoderDispatchWorkgroups
        self.copy = lib.wgpuCommandEncoderCopyBufferToBuffer
        self.clear = lib.wgpuCommandEncoderClearBuffer

    def timestamp_pass_descriptors(self, query_set) -> dict:
        """Compute-pass descriptors that write timestamp 0 at the start of a pass and/or 1 at its end, keyed by
        (first pass, last pass)."""
        ffi, unset = self.ffi, self.lib.WGPU_QUERY_SET_INDEX_UNDEFINED
        out = {}
        for first in (False, True):
            for last in (False, True):
                writes = ffi.new("WGPUPassTimestampWrites *")
                writes.querySet = query_set._internal
                writes.beginningOfPassWriteIndex = 0 if first else unset
                writes.endOfPassWriteIndex = 1 if last else unset
                descriptor = ffi.new("WGPUComputePassDescriptor *")
                descriptor.timestampWrites = writes
                out[first, last] = (descriptor, writes)
        return out

    def encode(self, segments, after=(), pass_descriptors=None):
        """One finished command buffer (its handle, for `submit`); raises wgpu's validation error.

        `segments`: (True, [(pipeline or None, bind group or None, x, y, z)]) is a compute pass of dispatches (None:
        the one set before stays); (False, [(function, args)]) are encoder commands, each called as
        function(encoder, *args). `after`: more encoder commands, at the end. `pass_descriptors`: see
        `timestamp_pass_descriptors`."""
        lib, null = self.lib, self.null
        set_pipeline, set_bind_group, dispatch = self.set_pipeline, self.set_bind_group, self.dispatch
        encoder = lib.wgpuDeviceCreateCommandEncoder(self.device, self.encoder_descriptor)
        try:
            passes = sum(1 for is_pass, _ in segments if is_pass)
            seen = 0
            for is_pass, ops in segments:
                if not is_pass:
                    for function, args in ops:
                        function(encoder, *args)
                    continue
                descriptor = self.pass_descriptor
                if pass_descriptors is not None:
                    descriptor = pass_descriptors[seen == 0, seen == passes - 1][0]
                seen += 1
                compute = lib.wgpuCommandEncoderBeginComputePass(encoder, descriptor)
                for pipeline, group, x, y, z in ops:
                    if pipeline is not None:
                        set_pipeline(compute, pipeline)
                    if group is not None:
                        set_bind_group(compute, 0, group, 0, null)
                    dispatch(compute, x, y, z)
                lib.wgpuComputePassEncoderEnd(compute)
                lib.wgpuComputePassEncoderRelease(compute)
            for function, args in after:
                function(encoder, *args)
            return self.libf.wgpuCommandEncoderFinish(encoder, self.finish_descriptor)
        finally:
            lib.wgpuCommandEncoderRelease(encoder)

    def submit(self, command_buffer) -> None:
        """Submit a command buffer from `encode`, and release it."""
        self.submitted[0] = command_buffer
        try:
            self.libf.wgpuQueueSubmit(self.queue, 1, self.submitted)
        finally:
            self.lib.wgpuCommandBufferRelease(command_buffer)

    def write(self, buffer, offset: int, data: np.ndarray) -> None:
        """queue.write_buffer of a contiguous array's bytes (wgpu copies them before returning)."""
        self.libf.wgpuQueueWriteBuffer(self.queue, buffer._internal, offset, self.ffi.from_buffer(data), data.nbytes)

    def wait(self) -> None:
        """Return when the queue has finished all submitted work."""
        self._poll(mapping=False)

    def _poll(self, mapping: bool) -> None:
        """Poll the device until the queue is empty, or with `mapping` until the map callback has run: without
        blocking for up to `spin_s`, then blocking."""
        lib, device, null, mapped = self.lib, self.device, self.null, self.mapped
        if self.spin_s > 0:
            clock = time.perf_counter
            deadline = clock() + self.spin_s
            while clock() < deadline:
                empty = lib.wgpuDevicePoll(device, False, null)  # true once no submission is in flight
                if mapped if mapping else empty:
                    return
        for _ in range(3):  # a blocking poll returns once the queue is empty; the callback has run by then
            empty = lib.wgpuDevicePoll(device, True, null)
            if mapped if mapping else empty:
                return
        raise RetargetError("wgpu finished its queue but never called back for a buffer map",
                            hint="the device may have been lost; `retarget doctor` checks it")

    def map_read(self, buffer, size: int, into: np.ndarray) -> None:
        """Map the first `size` bytes of a MAP_READ buffer (waiting for the work that writes it), copy them into
        `into` (contiguous, at least `size` bytes), and unmap."""
        lib, handle = self.lib, buffer._internal
        self.mapped.clear()
        lib.wgpuBufferMapAsync(handle, lib.WGPUMapMode_Read, 0, size, self.map_callback[0])
        self._poll(mapping=True)
        status = self.mapped[0]
        if status != lib.WGPUMapAsyncStatus_Success:
            raise RetargetError(f"wgpu could not map a readback buffer (status {status})",
                                hint="the device may have been lost; `retarget doctor` checks it")
        try:
            self.ffi.memmove(self.ffi.from_buffer(into), lib.wgpuBufferGetConstMappedRange(handle, 0, size), size)
        finally:
            lib.wgpuBufferUnmap(handle)

    def unchecked_shader_module(self, wgsl: str, label: str):
        """A GPUShaderModule of `wgsl` without naga's runtime checks; naga's errors raise."""
        from wgpu.backends.wgpu_native._api import GPUShaderModule

        ffi, lib = self.ffi, self.lib
        code, name = ffi.new("char[]", wgsl.encode()), ffi.new("char[]", label.encode())
        source = ffi.new("WGPUShaderSourceWGSL *")
        source.chain.sType = lib.WGPUSType_ShaderSourceWGSL
        source.code.data, source.code.length = code, len(code) - 1
        descriptor = ffi.new("WGPUShaderModuleDescriptor *")
        descriptor.nextInChain = ffi.cast("WGPUChainedStruct *", source)
        descriptor.label.data, descriptor.label.length = name, len(name) - 1
        handle = self.libf.wgpuDeviceCreateShaderModuleTrusted(self.device, descriptor, UNCHECKED)
        if handle == ffi.NULL:
            raise RetargetError(f"wgpu made no shader module of {label}")
        return GPUShaderModule(label, handle, self.gpu_device)

    def timestamp_period_ns(self) -> float:
        return float(self.lib.wgpuQueueGetTimestampPeriod(self.queue))

    def _map_done(self, status, message, userdata1, userdata2) -> None:
        self.mapped.append(int(status))
