"""The `webgpu` HAL driver, through wgpu-py (wgpu-native: Vulkan, Metal, D3D12; lavapipe on a CPU).

One device is one GPUDevice, requested with its adapter's full limits (so `webgpu-spirv:host`
code runs) and shader-f16 when the adapter has it. Buffers are storage buffers that can be
copied from and to; `write` goes through queue.write_buffer, `read` through a mapped readback
buffer. An executable is one compute pipeline per kernel, each with an explicit bind-group
layout (storage buffers, then the uniform `rt_base`; see compile.py for the binding model).

A command buffer records dispatches, copies and fills once; the bind groups and the `rt_base`
uniforms are made while recording. WebGPU command buffers cannot be submitted twice, so
`submit` encodes the recording into one command encoder (consecutive dispatches share one
compute pass) and submits it: one encoder per function call. WebGPU orders the dispatches of a
queue and makes each one's writes visible to the next, so `barrier` records nothing.
"""

from __future__ import annotations

import os
import tempfile
import threading

import numpy as np
from retarget.errors import RetargetError, UnknownDeviceError
from retarget.protocols import DeviceInfo, ExecutableBinary, TargetDesc

from . import FORMAT
from .targets import DEFAULT_LIMITS

NAME = "webgpu"
FEATURES_WANTED = ("shader-f16", "timestamp-query")


class WebGpuError(RetargetError):
    """wgpu rejected something: a shader, a pipeline, a binding. The message carries wgpu's."""


def _wgpu():
    if not os.environ.get("XDG_RUNTIME_DIR"):
        # Mesa's window-system probes print "error: XDG_RUNTIME_DIR is invalid" once per adapter when it
        # is unset (CI, containers); compute never needs it, so give them a private empty one.
        os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="retarget-xdg-")
    import wgpu

    return wgpu


def _adapters():
    """Every adapter wgpu finds, native backends (Vulkan, Metal, D3D12) before OpenGL."""
    adapters = _wgpu().gpu.enumerate_adapters_sync()
    return sorted(adapters, key=lambda a: a.info.get("backend_type") == "OpenGL")


def _limits(adapter) -> dict:
    return {key: int(value) for key, value in adapter.limits.items()}


def _info(index: int, adapter) -> DeviceInfo:
    info = adapter.info
    limits = _limits(adapter)
    properties = {
        "arch": "host",
        "backend": info.get("backend_type", ""),
        "adapter_type": info.get("adapter_type", ""),
        "vendor": info.get("vendor", ""),
        "description": info.get("description", ""),
        "limits": {key: limits.get(key, value) for key, value in DEFAULT_LIMITS.items()},
        "features": sorted(adapter.features),
    }
    name = info.get("device") or info.get("description") or "WebGPU adapter"
    return DeviceInfo(NAME, str(index), f"{name} ({properties['backend']})", properties=properties)


class WebGpuDriver:
    name = NAME

    def enumerate(self) -> list[DeviceInfo]:
        """Every adapter, or one unavailable entry saying why there is none. Never raises."""
        try:
            adapters = _adapters()
        except ImportError as e:
            return [DeviceInfo(NAME, "0", "WebGPU adapter", available=False,
                               reason=f"wgpu is not importable ({e}); pip install wgpu==0.32.0")]
        except Exception as e:  # wgpu-native failing to load, or no instance
            return [DeviceInfo(NAME, "0", "WebGPU adapter", available=False,
                               reason=f"wgpu found no adapter ({type(e).__name__}: {e})".replace("\n", " "))]
        if not adapters:
            return [DeviceInfo(NAME, "0", "WebGPU adapter", available=False,
                               reason="wgpu found no adapter (no Vulkan/Metal/D3D12 driver; on Linux without a GPU "
                                      "install Mesa's lavapipe: apt-get install mesa-vulkan-drivers libvulkan1)")]
        try:
            return [_info(i, a) for i, a in enumerate(adapters)]
        except Exception as e:
            return [DeviceInfo(NAME, "0", "WebGPU adapter", available=False, reason=f"{type(e).__name__}: {e}")]

    def create(self, device_id: str) -> WebGpuDevice:
        infos = self.enumerate()
        available = {d.id: d for d in infos if d.available}
        device_id = device_id or "0"
        if device_id not in available:
            reasons = "; ".join(d.reason for d in infos if not d.available)
            raise UnknownDeviceError(f"webgpu has no device '{device_id}'" + (f": {reasons}" if reasons else ""),
                                     hint=f"its devices: {', '.join(available) or 'none'} (`retarget doctor` says why)")
        return WebGpuDevice(available[device_id], _adapters()[int(device_id)])

    def dump(self, device_id: str) -> dict:
        info = {d.id: d for d in self.enumerate()}.get(device_id or "0")
        if info is None:
            raise UnknownDeviceError(f"webgpu has no device '{device_id}'")
        out = {"driver": NAME, "id": info.id, "name": info.name, "available": info.available}
        if not info.available:
            return {**out, "reason": info.reason}
        adapter = _adapters()[int(info.id)]
        out.update({key: value for key, value in info.properties.items() if key != "limits"})
        out["info"] = {key: value for key, value in adapter.info.items()}
        out["limits"] = _limits(adapter)
        out["executable_formats"] = [FORMAT]
        return out


class WebGpuBuffer:
    """A storage buffer of `nbytes` (the GPU buffer is rounded up to 4 bytes)."""

    def __init__(self, device: WebGpuDevice, nbytes: int):
        wgpu = _wgpu()
        self.device, self.nbytes = device, nbytes
        self.size = max(4, -(-nbytes // 4) * 4)
        usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
        self.gpu = device.gpu.create_buffer(size=self.size, usage=usage)


class WebGpuExecutable:
    def __init__(self, entry_points, kernels, pipelines, layouts):
        self.entry_points = entry_points
        self.kernels = kernels  # the container's per-kernel metadata (groups, item sizes)
        self.pipelines = pipelines  # one GPUComputePipeline per entry point
        self.layouts = layouts  # and its GPUBindGroupLayout


def _round_up(n: int, to: int) -> int:
    return -(-n // to) * to


class WebGpuCommandBuffer:
    """Recorded work: ("dispatch", pipeline, bind group, counts), ("copy", ...) and ("clear", ...)."""

    def __init__(self, device: WebGpuDevice):
        self.device = device
        self.commands: list[tuple] = []
        self.ended = False
        # Ranges read right after this command buffer ran, copied into `readback` by every later run (see
        # WebGpuDevice.read): then wait() maps that one buffer, and reading is a slice of what it held.
        self.readback_ranges: list[tuple[WebGpuBuffer, int, int]] = []  # (buffer, 4-aligned start, size)
        self.readback = None
        self.readback_data: np.ndarray | None = None
        self.run_epoch = -1

    def _add(self, command: tuple) -> None:
        if self.ended:
            raise RuntimeError("command buffer already ended; record a new one")
        self.commands.append(command)

    def dispatch(self, executable: WebGpuExecutable, entry: int, bindings, *, scalars=(),
                 workgroup_count=None) -> None:
        """`scalars` and `workgroup_count`: a dynamic entry point's sizes for this dispatch; the scalars
        follow the element bases in the `rt_base` uniform (compile.py)."""
        ep, meta = executable.entry_points[entry], executable.kernels[entry]
        ep.check_dispatch(bindings, scalars)
        wgpu, dev = _wgpu(), self.device
        bases = [0] * len(bindings)
        entries, before, after = [], [], []
        for g, params in enumerate(meta["groups"]):
            ranges = [bindings[i] for i in params]
            if len({id(buf) for buf, _, _ in ranges}) > 1:  # a packed group across buffers: gather into scratch
                buf, starts, size = self.device.scratch_for(ranges)
                for i, (src, offset, nbytes), start in zip(params, ranges, starts):
                    copy = _round_up(nbytes, 4)
                    if offset % 4 or copy + offset > src.size:
                        raise ValueError(f"{ep.name}: a packed binding at byte {offset} is not 4-byte aligned")
                    if ep.bindings[i].access == "write":
                        after.append(("copy", buf, start, src, offset, copy))
                    else:
                        before.append(("copy", src, offset, buf, start, copy))
                ranges = [(buf, start, nbytes) for start, (_, _, nbytes) in zip(starts, ranges)]
            buf = ranges[0][0]
            lo = min(offset for _, offset, _ in ranges)
            hi = max(offset + nbytes for _, offset, nbytes in ranges)
            start = lo - lo % dev.offset_alignment
            size = min(_round_up(max(hi - start, 4), 4), buf.size - start)
            if size > dev.limits["max-storage-buffer-binding-size"]:
                raise WebGpuError(f"{ep.name}: a binding of {size} bytes exceeds this device's "
                                  f"max-storage-buffer-binding-size ({dev.limits['max-storage-buffer-binding-size']})")
            for i, (_, offset, _) in zip(params, ranges):
                item = meta["itemsizes"][i]
                if (offset - start) % item:
                    raise ValueError(f"{ep.name}: binding {i} at byte {offset} is not aligned to its {item}-byte "
                                     "elements")
                bases[i] = (offset - start) // item
            entries.append({"binding": g, "resource": {"buffer": buf.gpu, "offset": start, "size": size}})
        words = bases + [int(v) for v in scalars]
        data = np.zeros(_round_up(max(len(words), 1), 4), dtype=np.int32)
        data[:len(words)] = words
        uniform = dev.gpu.create_buffer_with_data(data=data.tobytes(), usage=wgpu.BufferUsage.UNIFORM)
        entries.append({"binding": len(meta["groups"]), "resource": {"buffer": uniform, "offset": 0,
                                                                     "size": data.nbytes}})
        group = dev.gpu.create_bind_group(layout=executable.layouts[entry], entries=entries)
        for command in before:
            self._add(command)
        count = tuple(int(c) for c in (workgroup_count or ep.workgroup_count))
        self._add(("dispatch", executable.pipelines[entry], group, count, uniform))
        for command in after:
            self._add(command)

    def copy(self, src: WebGpuBuffer, src_offset: int, dst: WebGpuBuffer, dst_offset: int, nbytes: int) -> None:
        if src_offset % 4 or dst_offset % 4 or nbytes % 4:
            raise ValueError(f"WebGPU copies whole 4-byte words: offsets {src_offset}, {dst_offset} and size {nbytes} "
                             "must be multiples of 4")
        if src_offset < 0 or dst_offset < 0 or src_offset + nbytes > src.size or dst_offset + nbytes > dst.size:
            raise ValueError(f"copying {nbytes} bytes overflows a buffer")
        if src is dst and nbytes:  # WebGPU refuses a copy within one buffer: go through a scratch buffer
            scratch = self.device.allocate(nbytes)
            self._add(("copy", src, src_offset, scratch, 0, nbytes))
            self._add(("copy", scratch, 0, dst, dst_offset, nbytes))
            return
        self._add(("copy", src, src_offset, dst, dst_offset, nbytes))

    def fill(self, buffer: WebGpuBuffer, offset: int, nbytes: int, value: int) -> None:
        if offset % 4 or nbytes % 4:
            raise ValueError(f"WebGPU fills whole 4-byte words: offset {offset} and size {nbytes} must be "
                             "multiples of 4")
        if offset < 0 or offset + nbytes > buffer.size:
            raise ValueError(f"filling {nbytes} bytes at {offset} overflows a buffer of {buffer.nbytes}")
        if value & 0xFF == 0:
            self._add(("clear", buffer, offset, nbytes))
        else:  # clear_buffer only writes zeros: copy from a buffer of the byte pattern, made once here
            wgpu = _wgpu()
            pattern = np.full(nbytes, value & 0xFF, dtype=np.uint8)
            src = self.device.gpu.create_buffer_with_data(data=pattern.tobytes(), usage=wgpu.BufferUsage.COPY_SRC)
            self._add(("copy", _Raw(src), 0, buffer, offset, nbytes))

    def barrier(self) -> None:
        """WebGPU orders dispatches and copies of one queue, and makes writes visible between them."""

    def end(self) -> None:
        self.ended = True

    def encode(self, gpu_device):
        encoder = gpu_device.create_command_encoder()
        compute = None
        for command in self.commands:
            if command[0] == "dispatch":
                if compute is None:
                    compute = encoder.begin_compute_pass()
                _, pipeline, group, counts, _ = command
                compute.set_pipeline(pipeline)
                compute.set_bind_group(0, group)
                compute.dispatch_workgroups(*counts)
                continue
            if compute is not None:
                compute.end()
                compute = None
            if command[0] == "copy":
                _, src, src_offset, dst, dst_offset, nbytes = command
                encoder.copy_buffer_to_buffer(src.gpu, src_offset, dst.gpu, dst_offset, nbytes)
            else:
                _, buffer, offset, nbytes = command
                encoder.clear_buffer(buffer.gpu, offset, nbytes)
        if compute is not None:
            compute.end()
        at = 0
        for buffer, start, size in self.readback_ranges:
            encoder.copy_buffer_to_buffer(buffer.gpu, start, self.readback, at, size)
            at += size
        return encoder.finish()

    def learn_readback(self, buffer: WebGpuBuffer, start: int, size: int) -> None:
        if (buffer, start, size) in self.readback_ranges:
            return
        self.readback_ranges.append((buffer, start, size))
        wgpu = _wgpu()
        total = sum(s for _, _, s in self.readback_ranges)
        self.readback = self.device.gpu.create_buffer(size=_round_up(total, 256),
                                                      usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)

    def find_readback(self, buffer: WebGpuBuffer, start: int, size: int) -> np.ndarray | None:
        at = 0
        for known, known_start, known_size in self.readback_ranges:
            if known is buffer and known_start <= start and start + size <= known_start + known_size:
                begin = at + start - known_start
                return self.readback_data[begin:begin + size]
            at += known_size
        return None


class _Raw:
    """A bare GPUBuffer where a WebGpuBuffer is expected."""

    def __init__(self, gpu):
        self.gpu, self.size, self.nbytes = gpu, gpu.size, gpu.size


class WebGpuDevice:
    formats = (FORMAT,)

    def __init__(self, info: DeviceInfo, adapter):
        self.info = info
        features = [f for f in FEATURES_WANTED if f in adapter.features]
        try:
            self.gpu = adapter.request_device_sync(required_features=features, required_limits=_limits(adapter))
        except Exception as e:
            raise UnknownDeviceError(f"webgpu:{info.id} ({info.name}) refused a device: {e}") from e
        self.limits = {key: int(value) for key, value in self.gpu.limits.items()}
        self.features = set(self.gpu.features)
        self.offset_alignment = self.limits["min-storage-buffer-offset-alignment"]
        self._scratch: list = []
        self._readback = None
        self._fence = None
        self._lock = threading.Lock()
        self._epoch = 0  # bumped by every write and submit: a learned readback is only as fresh as its run
        self._last_run: WebGpuCommandBuffer | None = None
        self._waited = True

    def can_load(self, format: str, target: TargetDesc) -> str | None:
        if format != FORMAT:
            return f"the webgpu driver loads {FORMAT}, not {format}"
        short = [f"{key} {value} > {self.limits.get(key, 0)}" for key, value in target.extra.get("limits", {}).items()
                 if key.startswith("max-") and value > self.limits.get(key, 0)]
        missing = [f for f in target.features if f not in self.features]
        if short or missing:
            return (f"the executable is for webgpu-spirv:{target.arch}, which assumes more than {self.info.name} has ("
                    + ", ".join(short + [f"feature {f}" for f in missing])
                    + "); recompile with --target webgpu-spirv:host (or webgpu-spirv:webgpu)")
        return None

    def allocate(self, nbytes: int) -> WebGpuBuffer:
        if nbytes > self.limits["max-buffer-size"]:
            raise WebGpuError(f"a buffer of {nbytes} bytes exceeds this device's max-buffer-size "
                              f"({self.limits['max-buffer-size']})")
        return WebGpuBuffer(self, nbytes)

    def scratch_for(self, ranges) -> tuple[WebGpuBuffer, list[int], int]:
        """A new buffer holding `ranges` side by side (16-byte aligned), for a packed group that spans buffers."""
        starts, size = [], 0
        for _, _, nbytes in ranges:
            starts.append(size)
            size += _round_up(nbytes, 16)
        buffer = self.allocate(size)
        self._scratch.append(buffer)
        return buffer, starts, size

    def write(self, buffer: WebGpuBuffer, offset: int, data: np.ndarray) -> None:
        raw = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        if offset < 0 or offset + raw.nbytes > buffer.nbytes:
            raise ValueError(f"writing {raw.nbytes} bytes at {offset} overflows a buffer of {buffer.nbytes}")
        if raw.nbytes == 0:
            return
        self._epoch += 1
        start, end = offset - offset % 4, _round_up(offset + raw.nbytes, 4)
        if (start, end) != (offset, offset + raw.nbytes):  # queue writes whole words: merge with what is there
            words = self._read_words(buffer, start, end - start).copy()
            words[offset - start:offset - start + raw.nbytes] = raw
            raw = words
        self.gpu.queue.write_buffer(buffer.gpu, start, raw)

    def read(self, buffer: WebGpuBuffer, offset: int, nbytes: int) -> np.ndarray:
        if offset < 0 or offset + nbytes > buffer.nbytes:
            raise ValueError(f"reading {nbytes} bytes at {offset} overflows a buffer of {buffer.nbytes}")
        if nbytes == 0:
            return np.empty(0, dtype=np.uint8)
        start = offset - offset % 4
        size = _round_up(offset + nbytes, 4) - start
        last = self._last_run
        fresh = last is not None and last.run_epoch == self._epoch and self._waited
        if fresh and last.readback_data is not None:
            found = last.find_readback(buffer, start, size)
            if found is not None:
                return found[offset - start:offset - start + nbytes].copy()
        data = self._read_words(buffer, start, size)
        if fresh:  # read right after a run: later runs of that command buffer copy it out themselves
            last.learn_readback(buffer, start, size)
        return data[offset - start:offset - start + nbytes].copy()

    def _read_words(self, buffer: WebGpuBuffer, start: int, size: int) -> np.ndarray:
        """Bytes [start, start + size) of `buffer`, both multiples of 4, through the readback buffer."""
        wgpu = _wgpu()
        with self._lock:
            if self._readback is None or self._readback.size < size:
                self._readback = self.gpu.create_buffer(size=_round_up(size, 256),
                                                        usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)
            encoder = self.gpu.create_command_encoder()
            encoder.copy_buffer_to_buffer(buffer.gpu, start, self._readback, 0, size)
            self.gpu.queue.submit([encoder.finish()])
            self._readback.map_sync(wgpu.MapMode.READ, 0, size)
            try:
                data = np.frombuffer(self._readback.read_mapped(0, size, copy=True), dtype=np.uint8)
            finally:
                self._readback.unmap()
        return data

    def load_executable(self, binary: ExecutableBinary) -> WebGpuExecutable:
        from .compile import unpack

        reason = self.can_load(binary.format, binary.target)
        if reason:
            raise UnknownDeviceError(f"{self.info.uri} cannot run {binary.target.name}: {reason}",
                                     hint="recompile with --target webgpu-spirv:host")
        kernels = unpack(binary.data)
        if [k["name"] for k in kernels] != [e.name for e in binary.entry_points]:
            raise RetargetError("the WGSL executable's kernels do not match its entry points",
                                hint="recompile with --target webgpu-spirv")
        pipelines, layouts = [], []
        for meta in kernels:
            module = self.shader_module(meta["wgsl"], meta["name"])
            layout = self.bind_group_layout(len(meta["groups"]))
            pipeline_layout = self.gpu.create_pipeline_layout(bind_group_layouts=[layout])
            try:
                pipeline = self.gpu.create_compute_pipeline(layout=pipeline_layout,
                                                            compute={"module": module, "entry_point": meta["name"]})
            except Exception as e:
                raise WebGpuError(f"wgpu cannot make a pipeline of kernel {meta['name']}: {e}") from e
            pipelines.append(pipeline)
            layouts.append(layout)
        return WebGpuExecutable(list(binary.entry_points), kernels, pipelines, layouts)

    def shader_module(self, wgsl: str, name: str = "kernel"):
        """WGSL -> GPUShaderModule; naga's validation error as a WebGpuError naming the kernel."""
        try:
            return self.gpu.create_shader_module(code=wgsl, label=name)
        except Exception as e:
            raise WebGpuError(f"wgpu rejected the WGSL of kernel {name}: {e}") from e

    def bind_group_layout(self, storage: int):
        wgpu = _wgpu()
        entries = [{"binding": i, "visibility": wgpu.ShaderStage.COMPUTE,
                    "buffer": {"type": wgpu.BufferBindingType.storage}} for i in range(storage)]
        entries.append({"binding": storage, "visibility": wgpu.ShaderStage.COMPUTE,
                        "buffer": {"type": wgpu.BufferBindingType.uniform}})
        return self.gpu.create_bind_group_layout(entries=entries)

    def command_buffer(self) -> WebGpuCommandBuffer:
        return WebGpuCommandBuffer(self)

    def submit(self, command_buffer: WebGpuCommandBuffer) -> None:
        if not command_buffer.commands:
            return
        with self._lock:
            self.gpu.queue.submit([command_buffer.encode(self.gpu)])
            self._epoch += 1
            command_buffer.run_epoch, command_buffer.readback_data = self._epoch, None
            self._last_run, self._waited = command_buffer, False

    def wait(self) -> None:
        """Block until all submitted work is done. wgpu-py 0.32.0's queue.on_submitted_work_done_sync fails
        (its cffi callback has the wrong signature), so a mapped buffer is the fence: the last run's learned
        readback when it has one (one map per call, and the outputs come with it), else a copy submitted after
        the work into a small buffer, which maps only when the queue has reached it."""
        wgpu = _wgpu()
        with self._lock:
            last = self._last_run
            if last is not None and not self._waited and last.readback_ranges:
                last.readback.map_sync(wgpu.MapMode.READ)
                try:
                    last.readback_data = np.frombuffer(last.readback.read_mapped(copy=True), dtype=np.uint8)
                finally:
                    last.readback.unmap()
                self._waited = True
                return
            self._waited = True
            if self._fence is None:
                usage = wgpu.BufferUsage
                self._fence = (self.gpu.create_buffer(size=4, usage=usage.COPY_SRC),
                               self.gpu.create_buffer(size=4, usage=usage.MAP_READ | usage.COPY_DST))
            src, dst = self._fence
            encoder = self.gpu.create_command_encoder()
            encoder.copy_buffer_to_buffer(src, 0, dst, 0, 4)
            self.gpu.queue.submit([encoder.finish()])
            dst.map_sync(wgpu.MapMode.READ)
            dst.unmap()


WEBGPU = WebGpuDriver()
