"""The host-memory drivers: `local-sync` runs work in the calling thread,
`local-task` spreads it over a thread pool.

Executables come from `ExecutableLoader`s (hook `retarget_executable_loaders`):
vmvx's, and any CPU target's such as llvm-cpu. Commands between two barriers run
concurrently on `local-task`, and so do the workgroups of one dispatch.
"""

from __future__ import annotations

import os
import platform
import threading
from dataclasses import dataclass, field

import numpy as np

from .errors import UnknownDeviceError
from .protocols import DeviceInfo, EntryPoint, ExecutableBinary, TargetDesc

ALIGNMENT = 64
# A dispatch's workgroups run as at most this many tasks, each a contiguous range of them: enough to keep
# every worker busy, and a grid of millions of workgroups costs no more memory than a small one.
MAX_TASKS_PER_DISPATCH = 64


@dataclass(eq=False)
class HostBuffer:
    nbytes: int
    data: np.ndarray  # uint8, ALIGNMENT-aligned

    @classmethod
    def allocate(cls, nbytes: int) -> HostBuffer:
        raw = np.empty(nbytes + ALIGNMENT, dtype=np.uint8)
        start = (-raw.ctypes.data) % ALIGNMENT
        return cls(nbytes, raw[start:start + nbytes])

    def view(self, offset: int, binding_type) -> np.ndarray:
        t = binding_type
        return np.ndarray(t.shape, dtype=t.dtype.np_dtype, buffer=self.data, offset=offset)


@dataclass(eq=False)
class LocalExecutable:
    entry_points: list[EntryPoint]
    kernels: list


@dataclass(eq=False)
class LocalCommandBuffer:
    stages: list[list] = field(default_factory=lambda: [[]])  # each: callables that may run at once
    ended: bool = False

    def _add(self, work):
        if self.ended:
            raise RuntimeError("command buffer already ended; record a new one")
        self.stages[-1].append(work)

    def dispatch(self, executable: LocalExecutable, entry: int, bindings, *, scalars=(), workgroup_count=None) -> None:
        """`scalars` and `workgroup_count`: a dynamic entry point's sizes for this dispatch (protocols.py)."""
        ep = executable.entry_points[entry]
        views = [buf.view(offset, t) for (buf, offset, _), t in zip(bindings, ep.check_dispatch(bindings, scalars))]
        bind = executable.kernels[entry]
        run = bind(views, tuple(int(v) for v in scalars)) if ep.scalars else bind(views)
        gx, gy, gz = workgroup_count or ep.workgroup_count
        total = gx * gy * gz
        tasks = min(total, MAX_TASKS_PER_DISPATCH)
        for t in range(tasks):
            lo, hi = total * t // tasks, total * (t + 1) // tasks
            self._add(lambda lo=lo, hi=hi: _run_workgroups(run, lo, hi, gx, gy))

    def copy(self, src: HostBuffer, src_offset: int, dst: HostBuffer, dst_offset: int, nbytes: int) -> None:
        _check_range(src, src_offset, nbytes, "copying from")
        _check_range(dst, dst_offset, nbytes, "copying to")

        def run():
            dst.data[dst_offset:dst_offset + nbytes] = src.data[src_offset:src_offset + nbytes]

        self._add(run)

    def fill(self, buffer: HostBuffer, offset: int, nbytes: int, value: int) -> None:
        _check_range(buffer, offset, nbytes, "filling")

        def run():
            buffer.data[offset:offset + nbytes] = value & 0xFF

        self._add(run)

    def barrier(self) -> None:
        if self.stages[-1]:
            self.stages.append([])

    def end(self) -> None:
        self.ended = True


class LocalDevice:
    def __init__(self, info: DeviceInfo, workers: int):
        from .plugin_manager import manager

        self.info = info
        self.loaders = manager().by_name("retarget_executable_loaders")
        self.formats = tuple(self.loaders)
        self.team = _Team(workers - 1) if workers > 1 else None
        self._lock = threading.Lock()

    def can_load(self, format: str, target: TargetDesc) -> str | None:
        loader = self.loaders.get(format)
        if loader is None:
            return (f"no executable loader for format '{format}' is installed (the plugin of target "
                    f"'{target.backend}' provides it)")
        return loader.can_load(target)

    def allocate(self, nbytes: int) -> HostBuffer:
        return HostBuffer.allocate(nbytes)

    def write(self, buffer: HostBuffer, offset: int, data: np.ndarray) -> None:
        raw = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        _check_range(buffer, offset, raw.size, "writing")
        buffer.data[offset:offset + raw.size] = raw

    def read(self, buffer: HostBuffer, offset: int, nbytes: int) -> np.ndarray:
        _check_range(buffer, offset, nbytes, "reading")
        return buffer.data[offset:offset + nbytes].copy()

    def load_executable(self, binary: ExecutableBinary) -> LocalExecutable:
        reason = self.can_load(binary.format, binary.target)
        if reason:
            raise UnknownDeviceError(f"{self.info.uri} cannot run {binary.target.name}: {reason}")
        return LocalExecutable(list(binary.entry_points), self.loaders[binary.format].load(binary))

    def command_buffer(self) -> LocalCommandBuffer:
        return LocalCommandBuffer()

    def submit(self, command_buffer: LocalCommandBuffer) -> None:
        with self._lock:
            for stage in command_buffer.stages:
                if not stage:
                    continue
                if self.team is None or len(stage) == 1:
                    _run_all(stage)
                else:
                    self.team.run(stage)

    def wait(self) -> None:
        """Work finishes inside `submit`; nothing is left in flight."""

    def close(self) -> None:
        if self.team is not None:
            self.team.close()


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "host CPU"


def _check_range(buffer: HostBuffer, offset: int, nbytes: int, what: str) -> None:
    if offset < 0 or nbytes < 0 or offset + nbytes > buffer.nbytes:
        raise ValueError(f"{what} {nbytes} bytes at {offset} overflows a buffer of {buffer.nbytes}")


def _run_workgroups(run, lo: int, hi: int, gx: int, gy: int) -> None:
    """Workgroups lo..hi-1, numbered x fastest, then y, then z."""
    for i in range(lo, hi):
        run((i % gx, i // gx % gy, i // (gx * gy)))


def _run_all(works) -> None:
    for work in works:
        work()


class _Team:
    """Helper threads that wait for a share of each stage; the submitting thread takes a share too.

    A stage's commands are dealt round-robin over the team. Starting a share is one lock release,
    cheaper than a thread pool's future per task, which matters for kernels of tens of microseconds.
    """

    def __init__(self, helpers: int):
        self.helpers = helpers
        self.shares: list = [None] * helpers
        self.go = [threading.Semaphore(0) for _ in range(helpers)]
        self.done = threading.Semaphore(0)
        self.errors: list[BaseException] = []
        self.threads = [threading.Thread(target=self._serve, args=(i,), daemon=True, name=f"retarget-local-{i}")
                        for i in range(helpers)]
        try:
            for t in self.threads:
                t.start()
        except BaseException:  # the OS refused a thread: stop the ones that started
            self.close()
            raise

    def _serve(self, i: int) -> None:
        while True:
            self.go[i].acquire()
            share = self.shares[i]
            if share is None:
                return
            try:
                _run_all(share)
            except BaseException as e:  # re-raised in the submitting thread
                self.errors.append(e)
            self.done.release()

    def run(self, stage: list) -> None:
        n = min(self.helpers + 1, len(stage))
        for i in range(1, n):
            self.shares[i - 1] = stage[i::n]
            self.go[i - 1].release()
        _run_all(stage[0::n])
        for _ in range(1, n):
            self.done.acquire()
        if self.errors:
            error, self.errors = self.errors[0], []
            raise error

    def close(self) -> None:
        for i in range(self.helpers):
            self.shares[i] = None
            self.go[i].release()


class LocalDriver:
    def __init__(self, name: str, workers: int | None):
        self.name = name
        self.workers = workers
        self._device: LocalDevice | None = None
        self._lock = threading.Lock()

    def _workers(self) -> int:
        return self.workers or os.cpu_count() or 1

    def enumerate(self) -> list[DeviceInfo]:
        return [
            DeviceInfo(
                self.name,
                "0",
                cpu_name(),
                properties={"workers": self._workers(), "arch": platform.machine(), "memory": "host"},
            )
        ]

    def create(self, device_id: str) -> LocalDevice:
        """The driver's one device, shared by every module loaded on it (it owns the worker threads)."""
        if device_id not in ("", "0"):
            raise UnknownDeviceError(f"{self.name} has one device, '0'; there is no '{device_id}'",
                                     hint=f"use --device {self.name}")
        with self._lock:
            if self._device is None:
                try:
                    self._device = LocalDevice(self.enumerate()[0], self._workers())
                except RuntimeError as e:  # threading's "can't start new thread"
                    raise UnknownDeviceError(
                        f"{self.name} cannot start its {self._workers() - 1} worker threads ({e})",
                        hint="use --device local-sync, which runs in the calling thread, or raise the process's "
                             "thread limit (ulimit -u)") from None
            return self._device

    def dump(self, device_id: str) -> dict:
        info = self.enumerate()[0]
        from .plugin_manager import manager

        return {
            "driver": self.name,
            "id": info.id,
            "name": info.name,
            **info.properties,
            "cpu_count": os.cpu_count(),
            "executable_formats": sorted(manager().by_name("retarget_executable_loaders")),
        }


LOCAL_SYNC = LocalDriver("local-sync", workers=1)
LOCAL_TASK = LocalDriver("local-task", workers=None)
