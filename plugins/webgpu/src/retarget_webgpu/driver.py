"""The `webgpu` HAL driver, through wgpu-py (wgpu-native: Vulkan, Metal, D3D12; lavapipe on a CPU).

One device is one GPUDevice, requested with its adapter's full limits (so `webgpu-spirv:host`
code runs) and shader-f16 and timestamp-query when the adapter has them. Adapters are enumerated
once per process and kept, and `create(id)` opens a device the first time and returns that same
device afterwards, as the vulkan driver does (dropping adapters of wgpu's GL backend from several
threads crashes wgpu-native). Buffers are storage
buffers that can be copied from and to; `write` goes through queue.write_buffer, `read` through a
mapped readback buffer. An executable is one compute pipeline per kernel, each with an explicit
bind-group layout (storage buffers, then the uniform `rt_base`; see compile.py for the binding
model). Shader modules leave out naga's runtime checks (bounds checks, loop bounding): the
kernels come from retarget's compiler and index in bounds, as on the vulkan and cuda backends;
RETARGET_WEBGPU_CHECKS=1 keeps them, as a browser does.

A command buffer records dispatches, copies and fills once; the bind groups are made while
recording, and the `rt_base` uniforms are slots of a few shared uniform buffers. WebGPU command
buffers cannot be submitted twice, so `submit` encodes the recording into one command encoder
(consecutive dispatches share one compute pass) and submits it: one encoder per function call.
WebGPU orders the dispatches of a queue and makes each one's writes visible to the next, so
`barrier` records nothing. Outputs read right after a run are learned: later runs copy them into
one readback buffer in the same encoder, and `wait` maps it (one map per call).

What runs on every call (encode, submit, write, wait, map) goes through wgpu-native's C API in
native.py, not wgpu-py's per-call wrappers, and `wait` polls the device without blocking for up to
10 ms before it sleeps (RETARGET_WEBGPU_SPIN_US; 0 on a CPU adapter). `timed_submit` (with
timestamp-query) gives `retarget.bench` the GPU's own time.

Threads: a device may be used from several threads at once. One lock serialises what touches its
queue and maps buffers (`write`, `read`, `submit`, `wait`); a read learns a readback only for the
command buffer that the reading thread itself submitted last, so threads never teach each other's
command buffers to copy their outputs.
"""

from __future__ import annotations

import os
import tempfile
import threading
import weakref

import numpy as np
from retarget.errors import RetargetError, UnknownDeviceError, no_such_device
from retarget.protocols import DeviceInfo, ExecutableBinary, TargetDesc

from . import FORMAT, native
from .targets import DEFAULT_LIMITS

NAME = "webgpu"
FEATURES_WANTED = ("shader-f16", "timestamp-query")
SPIN_ENV = "RETARGET_WEBGPU_SPIN_US"  # microseconds `wait` polls without blocking before it sleeps
DEFAULT_GPU_SPIN_US = 10_000  # 0 on a CPU adapter
CHECKS_ENV = "RETARGET_WEBGPU_CHECKS"  # 1: shaders keep naga's bounds checks and loop bounding
UNIFORM_SLAB_BYTES = 1 << 16  # 256 dispatches' rt_base uniforms at the usual 256-byte alignment


class WebGpuError(RetargetError):
    """wgpu rejected something: a shader, a pipeline, a binding. The message carries wgpu's."""


def _wgpu():
    if not os.environ.get("XDG_RUNTIME_DIR"):
        # Mesa's window-system probes print "error: XDG_RUNTIME_DIR is invalid" once per adapter when it
        # is unset (CI, containers); compute never needs it, so give them a private empty one.
        os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="retarget-xdg-")
    import wgpu

    return wgpu


_adapters_lock = threading.Lock()
_adapters_found: list | None = None


def _adapters():
    """Every adapter wgpu finds, native backends (Vulkan, Metal, D3D12) before OpenGL; found once per
    process and kept (wgpu-native panics when GL adapters are dropped from several threads)."""
    global _adapters_found
    with _adapters_lock:
        if _adapters_found is None:
            adapters = _wgpu().gpu.enumerate_adapters_sync()
            _adapters_found = sorted(adapters, key=lambda a: a.info.get("backend_type") == "OpenGL")
        return _adapters_found


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
    why_not = _no_compute(limits)
    if why_not and properties["backend"] == "OpenGL":
        why_not += " (an OpenGL ES context older than 3.1); use the same GPU's Vulkan adapter"
    return DeviceInfo(NAME, str(index), f"{name} ({properties['backend']})", available=not why_not,
                      reason=why_not, properties=properties)


def _prefer_native(infos: list[DeviceInfo]) -> list[DeviceInfo]:
    """wgpu's OpenGL backend is for machines without Vulkan, Metal or D3D12: beside a native adapter it is listed
    unavailable (the H100 machine's EGL adapter reports full compute limits, then fails to open a device)."""
    native = [d for d in infos if d.available and d.properties.get("backend") != "OpenGL"]
    if not native:
        return infos
    for d in infos:
        if d.available and d.properties.get("backend") == "OpenGL":
            d.available = False
            d.reason = (f"wgpu's OpenGL backend is used only where there is no native adapter; use "
                        f"{native[0].uri} ({native[0].name})")
    return infos


def _no_compute(limits: dict) -> str:
    """Why an adapter cannot run our kernels, or "": a downlevel adapter (OpenGL ES 3.0, WebGL 2) reports zero
    compute and storage limits, and every pipeline on it would lose the device."""
    needed = ("max-compute-invocations-per-workgroup", "max-compute-workgroups-per-dimension",
              "max-storage-buffers-per-shader-stage")
    missing = [key for key in needed if limits.get(key, 1) < 1]
    return f"this adapter has no compute shaders or storage buffers ({', '.join(missing)} = 0)" if missing else ""


class WebGpuDriver:
    name = NAME

    def __init__(self):
        self._devices: dict[str, WebGpuDevice] = {}
        self._lock = threading.Lock()

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
            return _prefer_native([_info(i, a) for i, a in enumerate(adapters)])
        except Exception as e:
            return [DeviceInfo(NAME, "0", "WebGPU adapter", available=False, reason=f"{type(e).__name__}: {e}")]

    def create(self, device_id: str) -> WebGpuDevice:
        """The process's device for `device_id` ("0" when empty), opened on first use."""
        device_id = device_id or "0"
        with self._lock:
            if device_id not in self._devices:
                infos = self.enumerate()
                available = {d.id: d for d in infos if d.available}
                if device_id not in available:
                    raise no_such_device("webgpu", device_id, infos)
                self._devices[device_id] = WebGpuDevice(available[device_id], _adapters()[int(device_id)])
            return self._devices[device_id]

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


def beyond_32_bit_indices(name: str, dtypes, bases, itemsizes, nbytes) -> str | None:
    """Why a dispatch cannot run, or None: a binding whose elements reach index 2^31, its element base in the bound
    range counted (`bases[i]`, in units of `itemsizes[i]` bytes: words for the types kept several to a word). WGSL
    kernels index in i32 whatever their sizes (the shared renderer narrows them on this promise), so a kernel whose
    sizes are known only at run time is checked here, at every dispatch; the compiler refuses static sizes itself."""
    from .compile import INDEX_LIMIT

    for i, (dtype, base, itemsize, size) in enumerate(zip(dtypes, bases, itemsizes, nbytes)):
        end = max(base + size // itemsize, size // dtype.itemsize)
        if end > INDEX_LIMIT:
            return (f"{name}: binding {i} spans {end} elements of {dtype}; WebGPU kernels index in 32 bits, so at "
                    f"most {INDEX_LIMIT}")
    return None


def plan_dispatch(meta: dict, writes: list[bool], bindings: list[tuple], alignment: int, max_binding_size: int,
                  name: str = "kernel") -> dict:
    """How one dispatch binds its parameters (compile.py's binding model), as plain data. js/retarget.js computes
    the same plan (tests/test_js_loader.py compares them), so this is the one statement of it.

    `meta` is the kernel's container metadata (groups, itemsizes); `bindings[i]` is parameter i's
    (buffer key, byte offset, bytes, the buffer's size in bytes), where equal keys mean one buffer; `writes[i]` says
    whether the kernel writes parameter i. Returns a dict:

    - "groups": per storage binding g, [source, start, size]: the byte range bound, where source is
      ["binding", i] (the buffer of parameter i) or ["scratch", j];
    - "bases": each parameter's offset in elements from the start of its range (the uniform rt_base);
    - "scratch": the byte size of each scratch buffer: a packed group whose parameters lie in several buffers is
      gathered into one, 16-byte aligned, copied in "before" the dispatch (what it reads) and out "after" (what
      it writes), as [source, byte offset, destination, byte offset, bytes].
    """
    bases = [0] * len(bindings)
    groups, scratch, before, after = [], [], [], []
    for params in meta["groups"]:
        ranges = [(["binding", i], bindings[i][1], bindings[i][2], bindings[i][3]) for i in params]
        if len({bindings[i][0] for i in params}) > 1:  # a packed group across buffers: gather into scratch
            j, at, gathered = len(scratch), 0, []
            for i, (source, offset, nbytes, size) in zip(params, ranges):
                copy = _round_up(nbytes, 4)
                if offset % 4 or offset + copy > size:
                    raise ValueError(f"{name}: a packed binding at byte {offset} is not 4-byte aligned")
                if writes[i]:
                    after.append([["scratch", j], at, source, offset, copy])
                else:
                    before.append([source, offset, ["scratch", j], at, copy])
                gathered.append((["scratch", j], at, nbytes))
                at += _round_up(nbytes, 16)
            scratch.append(at)
            ranges = [(source, offset, nbytes, max(4, _round_up(at, 4))) for source, offset, nbytes in gathered]
        source, buffer_size = ranges[0][0], ranges[0][3]
        lo = min(offset for _, offset, _, _ in ranges)
        hi = max(offset + nbytes for _, offset, nbytes, _ in ranges)
        start = lo - lo % alignment
        size = min(_round_up(max(hi - start, 4), 4), buffer_size - start)
        if size > max_binding_size:
            raise WebGpuError(f"{name}: a binding of {size} bytes exceeds this device's "
                              f"max-storage-buffer-binding-size ({max_binding_size})")
        for i, (_, offset, _, _) in zip(params, ranges):
            item = meta["itemsizes"][i]
            if (offset - start) % item:
                raise ValueError(f"{name}: binding {i} at byte {offset} is not aligned to its {item}-byte elements")
            bases[i] = (offset - start) // item
        groups.append([source, start, size])
    return {"groups": groups, "bases": bases, "scratch": scratch, "before": before, "after": after}


class WebGpuCommandBuffer:
    """Recorded work: ("dispatch", pipeline, bind group, counts), ("copy", ...) and ("clear", ...)."""

    def __init__(self, device: WebGpuDevice):
        self.device = device
        self.commands: list[tuple] = []
        self.scratch: list[WebGpuBuffer] = []  # gathered bindings' buffers, freed with the command buffer
        self.ended = False
        self._segments: list | None = None  # the commands as C calls (see _program), made at the first submit
        self._readback_copies: list = []
        # Ranges read right after this command buffer ran, copied into `readback` by every later run (see
        # WebGpuDevice.read): then wait() maps that one buffer, and reading is a slice of what it held.
        self.readback_ranges: list[tuple[WebGpuBuffer, int, int]] = []  # (buffer, 4-aligned start, size)
        self.readback = None
        self.readback_size = 0
        self.readback_host: np.ndarray | None = None  # where each run's readback is copied (one buffer, reused)
        self.readback_data: np.ndarray | None = None  # readback_host once this run's copy is in it
        self.run_epoch = -1

    def _add(self, command: tuple) -> None:
        if self.ended:
            raise RuntimeError("command buffer already ended; record a new one")
        self.commands.append(command)
        self._segments = None

    def dispatch(self, executable: WebGpuExecutable, entry: int, bindings, *, scalars=(),
                 workgroup_count=None) -> None:
        """`scalars` and `workgroup_count`: a dynamic entry point's sizes for this dispatch; the scalars
        follow the element bases in the `rt_base` uniform (compile.py)."""
        ep, meta = executable.entry_points[entry], executable.kernels[entry]
        ep.check_dispatch(bindings, scalars)
        dev = self.device
        plan = plan_dispatch(meta, [b.access == "write" for b in ep.bindings],
                             [(id(buf), offset, nbytes, buf.size) for buf, offset, nbytes in bindings],
                             dev.offset_alignment, dev.limits["max-storage-buffer-binding-size"], ep.name)
        if too_large := beyond_32_bit_indices(ep.name, [b.type.dtype for b in ep.bindings], plan["bases"],
                                              meta["itemsizes"], [nbytes for _, _, nbytes in bindings]):
            raise WebGpuError(too_large, hint="split the batch, or compile for a target with 64-bit indices "
                                              "(cuda, llvm-cpu)")
        scratch = [dev.allocate(size) for size in plan["scratch"]]  # gathered packed groups' buffers
        self.scratch.extend(scratch)  # freed with the command buffer

        def buffer(source):
            kind, i = source
            return bindings[i][0] if kind == "binding" else scratch[i]

        def copies(key):
            return [("copy", buffer(src), src_at, buffer(dst), dst_at, n) for src, src_at, dst, dst_at, n in plan[key]]

        bases, before, after = plan["bases"], copies("before"), copies("after")
        entries = [{"binding": g, "resource": {"buffer": buffer(source).gpu, "offset": start, "size": size}}
                   for g, (source, start, size) in enumerate(plan["groups"])]
        words = bases + [int(v) for v in scalars]  # the scalars follow the bases (compile.py)
        data = np.zeros(_round_up(max(len(words), 1), 4), dtype=np.int32)
        data[:len(words)] = words
        uniform, at = dev.uniform_slot(data)
        entries.append({"binding": len(meta["groups"]), "resource": {"buffer": uniform, "offset": at,
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

    def encode(self, timestamps=None, after=()):
        """The recording, then the learned readback copies and `after`, in one new command encoder; returns the
        finished command buffer's handle for `Queue.submit`. With `timestamps` (the device's timer), the first
        compute pass writes timestamp 0 at its start and the last one timestamp 1 at its end."""
        if self._segments is None:
            self._segments = self._program()
        copies = self._readback_copies + list(after) if after else self._readback_copies
        return self.device.native.encode(self._segments, copies, timestamps)

    def _program(self) -> list[tuple[bool, list]]:
        """The commands as `Queue.encode` takes them, made once, so that encoding a call is a loop of C calls: compute
        passes of (pipeline, bind group, x, y, z) with None for a pipeline or bind group already set, and the copies
        and clears between them as (function, args)."""
        native, segments = self.device.native, []
        pipeline = group = None
        for command in self.commands:
            if command[0] == "dispatch":
                if not segments or not segments[-1][0]:
                    segments.append((True, []))
                    pipeline = group = None
                _, new_pipeline, new_group, counts, _ = command
                segments[-1][1].append((new_pipeline._internal if new_pipeline is not pipeline else None,
                                        new_group._internal if new_group is not group else None, *counts))
                pipeline, group = new_pipeline, new_group
                continue
            if not segments or segments[-1][0]:
                segments.append((False, []))
            if command[0] == "copy":
                _, src, src_offset, dst, dst_offset, nbytes = command
                segments[-1][1].append((native.copy, (src.gpu._internal, src_offset, dst.gpu._internal, dst_offset,
                                                      nbytes)))
            else:
                _, buffer, offset, nbytes = command
                segments[-1][1].append((native.clear, (buffer.gpu._internal, offset, nbytes)))
        return segments

    def learn_readback(self, buffer: WebGpuBuffer, start: int, size: int) -> None:
        if (buffer, start, size) in self.readback_ranges:
            return
        self.readback_ranges.append((buffer, start, size))
        wgpu = _wgpu()
        total = sum(s for _, _, s in self.readback_ranges)
        self.readback = self.device.gpu.create_buffer(size=_round_up(total, 256),
                                                      usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)
        self.readback_size = total
        self.readback_host = np.empty(total, dtype=np.uint8)
        copy, at = self.device.native.copy, 0
        self._readback_copies = []
        for known, known_start, known_size in self.readback_ranges:
            self._readback_copies.append((copy, (known.gpu._internal, known_start, self.readback._internal, at,
                                                 known_size)))
            at += known_size

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
        # On a GPU a sleeping wait can wake up a millisecond late, so `wait` polls first (as the vulkan driver
        # does); on a CPU adapter (lavapipe) polling would take a core from the work itself.
        spin_us = DEFAULT_GPU_SPIN_US if info.properties.get("adapter_type", "").lower() != "cpu" else 0
        self.native = native.Queue(self.gpu, spin_s=float(os.environ.get(SPIN_ENV) or spin_us) / 1e6)
        self._readback = None
        self._timer = None
        self._uniforms = None  # [the uniform buffer slots are taken from, its next free byte]
        self._lock = threading.RLock()  # the queue, mapping, and what follows: epoch, last run, readbacks
        self._epoch = 0  # bumped by every write and submit: a learned readback is only as fresh as its run
        self._last_run: WebGpuCommandBuffer | None = None  # submitted last, by any thread: wait() maps after it
        self._waited = True
        self._mine = threading.local()  # .run: weakref to the command buffer this thread submitted last
        if "timestamp-query" in self.features:  # retarget.bench takes device time from devices that have this
            self.timed_submit = self._timed_submit

    @property
    def shader_checks(self) -> bool:
        """Our kernels index in bounds (proved when they are built; the same code runs unchecked on vulkan and
        cuda), so by default naga leaves out the checks a browser adds; RETARGET_WEBGPU_CHECKS=1 keeps them for
        the shaders made from then on (the device is shared by the process)."""
        return os.environ.get(CHECKS_ENV, "") not in ("", "0")

    def memory_in_use(self) -> int:
        """Bytes of GPU buffers and textures alive in this process, as wgpu-py counts them."""
        from wgpu import diagnostics

        return int(diagnostics.object_counts.get_dict()["total"].get("resource_mem", 0))

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

    def uniform_slot(self, data: np.ndarray):
        """(buffer, offset) of a new slot holding `data`, in a uniform buffer shared by many slots: each submit
        tracks every buffer its bind groups hold, so one shared buffer is cheaper than one per dispatch."""
        step = _round_up(max(data.nbytes, 1), self.limits["min-uniform-buffer-offset-alignment"])
        if self._uniforms is None or self._uniforms[1] + step > self._uniforms[0].size:
            usage = _wgpu().BufferUsage
            size = max(UNIFORM_SLAB_BYTES, step)
            self._uniforms = [self.gpu.create_buffer(size=size, usage=usage.UNIFORM | usage.COPY_DST), 0]
        buffer, at = self._uniforms
        self.native.write(buffer, at, data)
        self._uniforms[1] = at + step
        return buffer, at


    def write(self, buffer: WebGpuBuffer, offset: int, data: np.ndarray) -> None:
        raw = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        if offset < 0 or offset + raw.nbytes > buffer.nbytes:
            raise ValueError(f"writing {raw.nbytes} bytes at {offset} overflows a buffer of {buffer.nbytes}")
        if raw.nbytes == 0:
            return
        with self._lock:
            self._epoch += 1
            start, end = offset - offset % 4, _round_up(offset + raw.nbytes, 4)
            if (start, end) != (offset, offset + raw.nbytes):  # queue writes whole words: merge with what is there
                words = self._read_words(buffer, start, end - start).copy()
                words[offset - start:offset - start + raw.nbytes] = raw
                raw = words
            self.native.write(buffer.gpu, start, raw)

    def read(self, buffer: WebGpuBuffer, offset: int, nbytes: int) -> np.ndarray:
        if offset < 0 or offset + nbytes > buffer.nbytes:
            raise ValueError(f"reading {nbytes} bytes at {offset} overflows a buffer of {buffer.nbytes}")
        if nbytes == 0:
            return np.empty(0, dtype=np.uint8)
        start = offset - offset % 4
        size = _round_up(offset + nbytes, 4) - start
        with self._lock:
            mine = getattr(self._mine, "run", None)
            last = mine() if mine is not None else None
            fresh = last is not None and last.run_epoch == self._epoch and self._waited
            if fresh and last.readback_data is not None:
                found = last.find_readback(buffer, start, size)
                if found is not None:
                    return found[offset - start:offset - start + nbytes].copy()
            data = self._read_words(buffer, start, size)
            if fresh:  # this thread's read right after its run: later runs of that command buffer copy it out
                last.learn_readback(buffer, start, size)
            return data[offset - start:offset - start + nbytes].copy()

    def _read_words(self, buffer: WebGpuBuffer, start: int, size: int) -> np.ndarray:
        """Bytes [start, start + size) of `buffer`, both multiples of 4, through the readback buffer."""
        wgpu = _wgpu()
        data = np.empty(size, dtype=np.uint8)
        with self._lock:
            if self._readback is None or self._readback.size < size:
                self._readback = self.gpu.create_buffer(size=_round_up(size, 256),
                                                        usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)
            native = self.native
            copy = (native.copy, (buffer.gpu._internal, start, self._readback._internal, 0, size))
            native.submit(native.encode([(False, [copy])]))
            native.map_read(self._readback, size, data)
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
        """WGSL -> GPUShaderModule (with naga's runtime checks when `shader_checks`); naga's validation error as a
        WebGpuError naming the kernel."""
        try:
            if self.shader_checks:
                return self.gpu.create_shader_module(code=wgsl, label=name)
            return self.native.unchecked_shader_module(wgsl, name)
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

    def submit(self, command_buffer: WebGpuCommandBuffer, timestamps=None) -> None:
        if not command_buffer.commands:
            return
        with self._lock:
            try:
                self.native.submit(command_buffer.encode(timestamps, self._timer_copies() if timestamps else ()))
            except _wgpu().GPUError as e:  # finish's or submit's validation error
                raise WebGpuError(f"wgpu refused a command buffer: {e}".rstrip(),
                                  hint="every buffer it uses must be alive and large enough") from e
            self._epoch += 1
            command_buffer.run_epoch, command_buffer.readback_data = self._epoch, None
            self._last_run, self._waited = command_buffer, False
            self._mine.run = weakref.ref(command_buffer)

    def wait(self) -> None:
        """Return when all submitted work is done: device polls on this thread (see native.Queue). When the last
        run has a learned readback, its buffer is mapped first, so the same polls bring the outputs (one map per
        call)."""
        with self._lock:
            last = self._last_run
            if last is not None and not self._waited and last.readback_ranges:
                self.native.map_read(last.readback, last.readback_size, last.readback_host)
                last.readback_data = last.readback_host
            else:
                self.native.wait()
            self._waited, self._last_run = True, None

    def _timed_submit(self, command_buffer: WebGpuCommandBuffer) -> float:
        """One run of `command_buffer`, waited for; returns the GPU's seconds from the start of its first compute
        pass to the end of its last (timestamp queries), 0 when it has no dispatch. What `retarget.bench` asks a
        device for its own time; present when the adapter has the timestamp-query feature."""
        if self._timer is None:
            wgpu = _wgpu()
            usage = wgpu.BufferUsage
            query_set = self.gpu.create_query_set(type=wgpu.QueryType.timestamp, count=2)
            self._timer = (query_set, self.native.timestamp_pass_descriptors(query_set),
                           self.gpu.create_buffer(size=16, usage=usage.QUERY_RESOLVE | usage.COPY_SRC),
                           self.gpu.create_buffer(size=16, usage=usage.MAP_READ | usage.COPY_DST),
                           np.zeros(2, dtype=np.uint64))
        if not any(command[0] == "dispatch" for command in command_buffer.commands):
            self.submit(command_buffer)
            self.wait()
            return 0.0
        self.submit(command_buffer, self._timer[1])
        self.wait()
        _, _, _, readback, ticks = self._timer
        with self._lock:
            self.native.map_read(readback, 16, ticks)
        return max(int(ticks[1]) - int(ticks[0]), 0) * self.native.timestamp_period_ns() * 1e-9

    def _timer_copies(self) -> list:
        """Encoder commands after a timed run: resolve the two timestamps and copy them where they can be mapped."""
        query_set, _, resolved, readback, _ = self._timer
        native = self.native
        return [(native.lib.wgpuCommandEncoderResolveQuerySet, (query_set._internal, 0, 2, resolved._internal, 0)),
                (native.copy, (resolved._internal, 0, readback._internal, 0, 16))]


WEBGPU = WebGpuDriver()
