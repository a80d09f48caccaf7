"""The host-memory drivers: `local-sync` runs work in the calling thread,
`local-task` spreads it over a thread pool.

Executables come from `ExecutableLoader`s (hook `retarget_executable_loaders`):
vmvx's, and any CPU target's such as llvm-cpu. Commands between two barriers run
concurrently on `local-task`, and so do the workgroups of one dispatch.

A loader with a `native_runner` (llvm-cpu's) gets each run of consecutive stages made only of its
dispatches as one native program (`ExecutableLoader` in protocols.py): every thread of the device
runs it, without coming back to Python between workgroups or stages.
"""

from __future__ import annotations

import os
import platform
import threading
from collections import deque
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


class _ReadPool:
    """Memory for what `read` returns, recycled: a fresh array of a megabyte costs a page fault a page on its first
    write (glibc maps large allocations anew each time), which made copying a model's outputs out cost more than
    computing them (a rotary embedding's two 2 MB tables: 2.2 ms of copies, 0.65 ms of kernels). A returned array's
    memory comes back here when the last array that views it is gone, and serves a later read of the same size."""

    SMALLEST = 1 << 20  # below, malloc reuses its heap without faults (and a lent array costs a few us more)
    KEPT = 4  # blocks kept for each size

    def __init__(self):
        self.free: dict[int, list[np.ndarray]] = {}
        self.lock = threading.Lock()

    def array(self, nbytes: int) -> np.ndarray:
        if nbytes < self.SMALLEST:
            return np.empty(nbytes, np.uint8)
        with self.lock:
            blocks = self.free.get(nbytes)
            block = blocks.pop() if blocks else None
        return np.asarray(_Lent(self, np.empty(nbytes, np.uint8) if block is None else block))

    def give_back(self, block: np.ndarray) -> None:
        with self.lock:
            blocks = self.free.setdefault(block.size, [])
            if len(blocks) < self.KEPT:
                blocks.append(block)


class _Lent:
    """The owner (numpy's `base`) of an array `_ReadPool` lent: when it goes, its block goes back."""

    __slots__ = ("pool", "block", "__array_interface__")

    def __init__(self, pool: _ReadPool, block: np.ndarray):
        self.pool, self.block = pool, block
        self.__array_interface__ = block.__array_interface__

    def __del__(self):
        self.pool.give_back(self.block)


READ_POOL = _ReadPool()


@dataclass(eq=False)
class LocalExecutable:
    entry_points: list[EntryPoint]
    kernels: list
    runner: object | None = None  # the loader's `native_runner`, when it has one


@dataclass(eq=False)
class LocalCommandBuffer:
    stages: list[list] = field(default_factory=lambda: [[]])  # each: callables that may run at once
    ended: bool = False
    # per stage, while every command of it is a native dispatch: (runner, (function, bindings, count)) each
    native: list = field(default_factory=lambda: [[]])
    programs: dict = field(default_factory=dict)  # first stage -> (native program, end stage, shared), by `end`
    planned: list | None = None  # the `stages` list that `programs` was made for

    def _add(self, work, native=None):
        """`native`: the dispatch's (runner, table row) with its first task, () with the others, None when
        the command has no native form."""
        if self.ended:
            raise RuntimeError("command buffer already ended; record a new one")
        self.stages[-1].append(work)
        if native is None:
            self.native[-1] = None
        elif native and self.native[-1] is not None:
            self.native[-1].append(native)

    def dispatch(self, executable: LocalExecutable, entry: int, bindings, *, scalars=(), workgroup_count=None) -> None:
        """`scalars` and `workgroup_count`: a dynamic entry point's sizes for this dispatch (protocols.py)."""
        ep = executable.entry_points[entry]
        views = [buf.view(offset, t) for (buf, offset, _), t in zip(bindings, ep.check_dispatch(bindings, scalars))]
        bind = executable.kernels[entry]
        run = bind(views, tuple(int(v) for v in scalars)) if ep.scalars else bind(views)
        gx, gy, gz = workgroup_count or ep.workgroup_count
        total = gx * gy * gz
        native = getattr(run, "native", None)
        native = (executable.runner, (*native, (gx, gy, gz))) if native and executable.runner is not None else None
        tasks = min(total, MAX_TASKS_PER_DISPATCH)
        for t in range(tasks):
            lo, hi = total * t // tasks, total * (t + 1) // tasks
            self._add(lambda lo=lo, hi=hi: _run_workgroups(run, lo, hi, gx, gy), native if t == 0 else ())

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
            self.native.append([])

    def end(self) -> None:
        """Ends recording; each run of stages made only of one runner's native dispatches becomes a program."""
        self.ended = True
        start = 0
        while start < len(self.stages):
            runner = _runner_of(self.native[start])
            stop = start
            while stop < len(self.stages) and runner is not None and _runner_of(self.native[stop]) is runner:
                stop += 1
            if stop > start:
                rows = [[row for _, row in self.native[i]] for i in range(start, stop)]
                # helpers are woken only where some stage has work to share: waking one costs tens of us
                shared = any(sum(gx * gy * gz for _, _, (gx, gy, gz) in stage) > 1 for stage in rows)
                self.programs[start] = (runner.program(rows), stop, shared)
            start = max(stop, start + 1)
        self.planned = self.stages


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
        out = READ_POOL.array(nbytes)
        out[...] = buffer.data[offset:offset + nbytes]
        return out

    def load_executable(self, binary: ExecutableBinary) -> LocalExecutable:
        reason = self.can_load(binary.format, binary.target)
        if reason:
            raise UnknownDeviceError(f"{self.info.uri} cannot run {binary.target.name}: {reason}")
        loader = self.loaders[binary.format]
        return LocalExecutable(list(binary.entry_points), loader.load(binary), getattr(loader, "native_runner", None))

    def command_buffer(self) -> LocalCommandBuffer:
        return LocalCommandBuffer()

    def submit(self, command_buffer: LocalCommandBuffer) -> None:
        with self._lock:
            stages = command_buffer.stages
            programs = command_buffer.programs if command_buffer.planned is stages else {}
            i = 0
            while i < len(stages):
                if i in programs:
                    program, i, shared = programs[i]
                    epoch = program.start()
                    if self.team is not None and shared:  # helpers join when they wake; no one waits for them
                        self.team.launch(lambda program=program, epoch=epoch: program.work(epoch))
                    program.work(epoch)  # returns when the last stage is done
                    continue
                stage = stages[i]
                i += 1
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


def _runner_of(native: list | None):
    """The one runner of a stage's native dispatches; None for an empty stage or one with other commands."""
    if not native or any(runner is not native[0][0] for runner, _ in native):
        return None
    return native[0][0]


class _Team:
    """Helper threads that wait for a share of each stage; the submitting thread takes a share too.

    A stage's commands are dealt round-robin over the team. Starting a share is one lock release,
    cheaper than a thread pool's future per task, which matters for kernels of tens of microseconds.
    `launch` hands every helper the same work and waits for nobody (a native program's helpers leave
    when its run is over). Each helper's shares queue up, so one handed out while it is still busy
    with the last is neither lost nor run twice.
    """

    def __init__(self, helpers: int):
        self.helpers = helpers
        self.shares = [deque() for _ in range(helpers)]  # (works, whether to signal `done`); None: stop
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
            share = self.shares[i].popleft()
            if share is None:
                return
            works, signal = share
            try:
                _run_all(works)
            except BaseException as e:  # re-raised in the submitting thread
                self.errors.append(e)
            if signal:
                self.done.release()

    def _hand(self, i: int, share) -> None:
        self.shares[i].append(share)
        self.go[i].release()

    def launch(self, work) -> None:
        for i in range(self.helpers):
            self._hand(i, ([work], False))

    def run(self, stage: list) -> None:
        n = min(self.helpers + 1, len(stage))
        for i in range(1, n):
            self._hand(i - 1, (stage[i::n], True))
        _run_all(stage[0::n])
        for _ in range(1, n):
            self.done.acquire()
        if self.errors:
            error, self.errors = self.errors[0], []
            raise error

    def close(self) -> None:
        for i in range(self.helpers):
            self._hand(i, None)


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
