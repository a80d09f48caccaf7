"""Timing: check each runner's result, warm them up, then let them take turns, and summarize.

Runners of one comparison run in one process and interleave round-robin (each round starts one
runner later than the one before), so that machine noise, thermal state and cache pressure hit
them alike. Every sample is the wall-clock time of one call that ends synchronised. A runner may
also report the device's own time for the work (events on a GPU), which excludes host copies and
launch overhead.

A device offers its own time by having `timed_submit(command_buffer) -> float`: submit, wait, and
return the seconds between two device events around the work. Devices without it (the host drivers,
whose work finishes inside `submit`) are timed by the host clock only.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..dlpack import DeviceArray
from ..testing.numerics import relative_error

TOLERANCE = 1e-4  # the relative error (see retarget.testing.numerics) that counts as correct
ROUND_ORDER_SEED = 0  # the order of runners in each timed round is a shuffle from this seed


@dataclass
class Runner:
    """One way of running one workload.

    `call()` runs it once and returns when the work is done (host arrays back, or after a device
    synchronisation); its time is the sample. `result()`, when given, returns the output as numpy
    for the correctness check (for runners whose `call` leaves the output on a device); otherwise
    `call()`'s return value is checked. `device_time()`, when given, runs the work once more and
    returns the device's own time for it in seconds. `facts` travel to the report unchanged.
    """

    label: str
    call: Callable[[], Any]
    result: Callable[[], Any] | None = None
    device_time: Callable[[], float] | None = None
    facts: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Stats:
    """Median, min and max in milliseconds, and the number of samples."""

    median_ms: float
    min_ms: float
    max_ms: float
    count: int

    @classmethod
    def of(cls, samples_s: Sequence[float]) -> Stats | None:
        if not samples_s:
            return None
        ms = [s * 1e3 for s in samples_s]
        return cls(statistics.median(ms), min(ms), max(ms), len(ms))

    def as_dict(self) -> dict:
        return {"median_ms": self.median_ms, "min_ms": self.min_ms, "max_ms": self.max_ms, "count": self.count}


@dataclass
class Measurement:
    """What one runner gave: its samples, its correctness, or the error that stopped it."""

    runner: Runner
    samples_s: list[float] = field(default_factory=list)
    device_samples_s: list[float] = field(default_factory=list)
    relative_error: float | None = None
    correct: bool | None = None  # None: there was no reference to check against
    error: str | None = None  # a call raised; the runner left the rotation

    @property
    def wall(self) -> Stats | None:
        return Stats.of(self.samples_s)

    @property
    def device(self) -> Stats | None:
        return Stats.of(self.device_samples_s)


def check_output(output, expected, tolerance: float = TOLERANCE) -> tuple[float, bool]:
    """(relative error, within tolerance) of `output` against `expected`; several outputs (a tuple or
    list) are compared pairwise and the largest error counts."""
    outs = list(output) if isinstance(output, (tuple, list)) else [output]
    refs = list(expected) if isinstance(expected, (tuple, list)) else [expected]
    if len(outs) != len(refs):
        return float("inf"), False
    error = 0.0
    for out, ref in zip(outs, refs):
        out, ref = np.asarray(out), np.asarray(ref)
        if out.shape != ref.shape:
            return float("inf"), False
        error = max(error, relative_error(out, ref))
    return error, bool(error <= tolerance)


def _describe(e: BaseException) -> str:
    text = e.oneline() if hasattr(e, "oneline") else str(e)
    return f"{type(e).__name__}: {text}".splitlines()[0]


def interleave(runners: Sequence[Runner], repeats: int, warmup: int = 3, *,
               clock: Callable[[], float] = time.perf_counter,
               progress: Callable[[str], None] | None = None) -> list[Measurement]:
    """Warm every runner up `warmup` times, then time `repeats` rounds in which each runner runs once.

    Each round takes the runners in a new order (a seeded shuffle, the same in every run), so that no
    runner mostly follows the same one: the one after torch eager finds its OpenMP workers still
    spinning on the other cores, which on a 2-core machine halves a two-thread runner (a rotation of
    a fixed order left one runner after torch in 4 rounds of 5). (A sleep between calls, to let the
    previous runner's spinning threads go idle, was tried on the GPU machine's 16 cores: it made
    torch's CPU medians worse, 0.27 -> 3.3 ms on the MLP.) A runner whose call raises is dropped, with
    the error recorded in its Measurement; the others go on."""
    measurements = [Measurement(r) for r in runners]
    _interleave(measurements, repeats, warmup, clock, progress)
    return measurements


def _interleave(measurements: list[Measurement], repeats: int, warmup: int, clock, progress) -> None:
    live = [m for m in measurements if m.error is None]

    def run(m: Measurement, timed: bool) -> None:
        try:
            start = clock()
            m.runner.call()
            end = clock()
            if timed:
                m.samples_s.append(end - start)
                if m.runner.device_time is not None:
                    m.device_samples_s.append(m.runner.device_time())
        except Exception as e:  # one runner's failure is reported; the others still run
            m.error = _describe(e)

    for _ in range(warmup):
        for m in live:
            if m.error is None:
                run(m, timed=False)
    order = random.Random(ROUND_ORDER_SEED)
    for r in range(repeats):
        live = [m for m in live if m.error is None]
        if not live:
            break
        for m in order.sample(live, len(live)):
            run(m, timed=True)
        if progress and repeats >= 8 and (r + 1) % (repeats // 4) == 0 and r + 1 < repeats:
            progress(f"round {r + 1}/{repeats}")


def measure(runners: Sequence[Runner], expected=None, *, repeats: int, warmup: int = 3, tolerance: float = TOLERANCE,
            clock: Callable[[], float] = time.perf_counter,
            progress: Callable[[str], None] | None = None) -> list[Measurement]:
    """Check each runner's output against `expected` (skipped when None), then `interleave` them.

    A runner whose check raises is not timed; one whose output is wrong is timed all the same and
    reported as incorrect."""
    measurements = [Measurement(r) for r in runners]
    for m in measurements:
        try:
            output = m.runner.result() if m.runner.result is not None else m.runner.call()
            if expected is not None:
                m.relative_error, m.correct = check_output(output, expected, tolerance)
        except Exception as e:
            m.error = _describe(e)
    _interleave(measurements, repeats, warmup, clock, progress)
    return measurements


# -- the dispatches of one function --------------------------------------------------------------


def function_runner(fn, args: Sequence[np.ndarray], label: str, facts: dict | None = None) -> Runner:
    """A Runner for a loaded retarget function called with `args` (numpy in, numpy out); it reports
    device time when the device has `timed_submit` (the recorded command buffer alone, no copies)."""
    timed = getattr(fn.module.device, "timed_submit", None) if len(fn.segments) == 1 else None
    return Runner(label, lambda: fn(*args),
                  device_time=(lambda: timed(fn.command_buffer)) if timed is not None else None,
                  facts=dict(facts or {}))


def resident_runner(fn, args: Sequence[np.ndarray], label: str, facts: dict | None = None) -> Runner:
    """Like `function_runner`, but `args` are copied to the function's device once, as DeviceArrays, and
    each call leaves its outputs there (output="device"): no data crosses to or from the host per call, as
    with the torch GPU peers, whose tensors live on the GPU. Only for a device that speaks DLPack."""
    device = fn.module.device
    resident = []
    for a, t in zip(args, fn.input_types):
        buffer = device.allocate(max(a.nbytes, 1))
        device.write(buffer, 0, np.ascontiguousarray(a))
        resident.append(DeviceArray(device, buffer, t.shape, t.dtype))
    device.wait()
    last: dict = {}

    def call():
        last["out"] = fn(*resident, output="device")

    def result():
        call()
        out = last["out"]
        return tuple(np.asarray(o) for o in out) if isinstance(out, tuple) else np.asarray(out)

    timed = getattr(device, "timed_submit", None) if len(fn.segments) == 1 else None
    return Runner(label, call, result=result,
                  device_time=(lambda: timed(fn.command_buffer)) if timed is not None else None,
                  facts=dict(facts or {}))


def _submit_runner(device, command_buffer, label: str) -> Runner:
    def call():
        device.submit(command_buffer)
        device.wait()

    timed = getattr(device, "timed_submit", None)
    return Runner(label, call, device_time=(lambda: timed(command_buffer)) if timed is not None else None)


def per_dispatch(fn, args: Sequence[np.ndarray], *, repeats: int, warmup: int = 3, inner: int | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> dict:
    """Time each dispatch of a loaded function on its own, and the whole recorded function beside them.

    One call with `args` first leaves real values in the function's buffers; then each dispatch
    command of the host program is recorded `inner` times in a row (with barriers) into a command
    buffer with the same bindings, so that one submit's fixed cost (a graph launch, an event pair) is
    shared, and the command buffers take turns (repeated submit + wait, as `interleave` does); times
    are per dispatch, divided by `inner`. `inner` defaults to 10 on a device with its own timer and
    1 elsewhere. Returns `{"dispatches": [...], "whole": stats, "sum_ms": ..., "clock": "device" |
    "host", "inner": n}`, each dispatch with its name, entry point, workgroup count, stats and share
    of the sum of medians. The share uses device time where the device has it, else the host clock."""
    fn.command_buffer  # noqa: B018 - raises an InputError for a function split into several segments
    fn(*args)
    device = fn.module.device
    if inner is None:
        inner = 10 if hasattr(device, "timed_submit") else 1
    entries = fn.module.variant.entry_points
    commands = [c for c in fn.plan["program"] if c["op"] == "dispatch"]
    runners = [_submit_runner(device, fn.record([c, {"op": "barrier"}] * inner),
                              c.get("name") or entries[c["entry"]].name) for c in commands]
    whole = _submit_runner(device, fn.command_buffer, "whole function")
    measurements = interleave([*runners, whole], repeats, warmup, clock=clock)
    for m in measurements[:-1]:
        m.samples_s = [s / inner for s in m.samples_s]
        m.device_samples_s = [s / inner for s in m.device_samples_s]
    use_device = all(m.device is not None for m in measurements)

    def median(m: Measurement) -> float:
        stats = m.device if use_device else m.wall
        return stats.median_ms if stats else float("nan")

    total = sum(median(m) for m in measurements[:-1])
    rows = []
    for i, (command, m) in enumerate(zip(commands, measurements)):
        entry = entries[command["entry"]]
        rows.append({
            "index": i,
            "name": m.runner.label,
            "entry_point": entry.name,
            "workgroups": list(entry.workgroup_count),
            "workgroup_size": list(entry.workgroup_size),
            **(m.wall.as_dict() if m.wall else {}),
            "device_time": m.device.as_dict() if m.device else None,
            "share": median(m) / total if total > 0 else None,
            "error": m.error,
        })
    whole_m = measurements[-1]
    return {
        "clock": "device" if use_device else "host",
        "inner": inner,
        "dispatches": rows,
        "sum_ms": total,
        "whole": {**(whole_m.wall.as_dict() if whole_m.wall else {}),
                  "device_time": whole_m.device.as_dict() if whole_m.device else None},
    }
