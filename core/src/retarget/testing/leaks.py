"""Leak checks: what a process holds before and after many calls of a function, or many loads of a module.

    from retarget.testing import leaks
    report = leaks.call_growth(module.predict, (x,), calls=10_000, device=module.device)
    report = leaks.load_growth(lambda: retarget.load(artifact, device="vulkan"), loads=100)

Each measures, after a warm-up and a garbage collection: the Python memory tracemalloc traces, the
process's resident set (RSS, from /proc; None elsewhere), the live threads, and the device memory of
`device.memory_in_use()` where the device has it (an optional member of the `Device` protocol: the
bytes the API reports in use, or that the driver tracks). Each is taken at the start, half way and at
the end, so a report tells a cache that fills once (growth in the first half only) from a leak (growth
in both halves). `python -m retarget.testing.leaks --device vulkan --calls 10000` prints one for a tiny
model on any device (`--json` for JSON).
"""

from __future__ import annotations

import gc
import threading
import tracemalloc
from collections.abc import Callable

WARMUP_CALLS = 200  # caches, allocator pools and learned readbacks settle before the first measure
WARMUP_LOADS = 3


def rss_bytes() -> int | None:
    """The process's resident set in bytes, or None where /proc is not there."""
    try:
        with open("/proc/self/statm") as f:
            resident_pages = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    import os

    return resident_pages * os.sysconf("SC_PAGE_SIZE")


def device_bytes(device) -> int | None:
    """`device.memory_in_use()` where the device has it, else None."""
    method = getattr(device, "memory_in_use", None)
    return None if method is None else int(method())


def _sample(device) -> dict:
    gc.collect()
    return {"traced": tracemalloc.get_traced_memory()[0], "rss": rss_bytes(), "threads": threading.active_count(),
            "device": device_bytes(device)}


def _growth(samples: list[dict], key: str) -> dict:
    first, middle, last = (s[key] for s in samples)
    if first is None:
        return {"total": None, "second_half": None}
    return {"total": last - first, "second_half": last - middle}


def _measure(step: Callable[[], None], count: int, warmup: int, device) -> dict:
    for _ in range(warmup):
        step()
    tracing = tracemalloc.is_tracing()
    if not tracing:
        tracemalloc.start()
    try:
        samples = [_sample(device)]
        for half in (count // 2, count - count // 2):
            for _ in range(half):
                step()
            samples.append(_sample(device))
    finally:
        if not tracing:
            tracemalloc.stop()
    return {key: _growth(samples, key) for key in ("traced", "rss", "threads", "device")}


def call_growth(function: Callable, args: tuple, calls: int, device=None, warmup: int = WARMUP_CALLS) -> dict:
    """How memory grows over `calls` calls of `function(*args)`: {"calls": n, "traced": {"total",
    "second_half"}, "rss": ..., "threads": ..., "device": ...} in bytes (threads: a count); None where
    the process or the device cannot say."""
    return {"calls": calls, **_measure(lambda: function(*args), calls, warmup, device)}


def load_growth(load: Callable[[], object], loads: int, device=None, warmup: int = WARMUP_LOADS) -> dict:
    """How memory grows over `loads` rounds of loading a module (`load()`), calling nothing, and dropping it."""

    def once():
        module = load()
        del module

    return {"loads": loads, **_measure(once, loads, warmup, device)}


def main(argv=None) -> int:
    """`python -m retarget.testing.leaks`: the leak report of a tiny MLP on one device."""
    import argparse
    import json

    import retarget

    from .conformance import kit
    from .graphs import mlp_module

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--device", default="local-task", help="a device, e.g. local-task, vulkan, webgpu, cuda:0")
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--loads", type=int, default=100)
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    options = parser.parse_args(argv)
    from ..runtime import open_device, parse_device

    device = open_device(options.device)
    backend, desc = kit.target_for(parse_device(options.device)[0], device)
    if backend is None:
        parser.error(f"no installed target produces code that {options.device} loads")
    module, x, _ = mlp_module()
    artifact = retarget.compile(module, desc)
    loaded = retarget.load(artifact, device=options.device)
    report = {"device": device.info.uri, "device_name": device.info.name, "target": desc.name,
              "call": call_growth(loaded.predict, (x,), options.calls, device=device),
              "load": load_growth(lambda: retarget.load(artifact, device=options.device), options.loads, device=device)}
    if options.json:
        print(json.dumps(report, indent=1))
    else:
        print(format_report(report))
    return 0


def format_report(report: dict) -> str:
    lines = [f"{report['device']} ({report['device_name']}), target {report['target']}"]
    for kind, count in (("call", "calls"), ("load", "loads")):
        r = report[kind]
        parts = []
        for key, unit in (("traced", "B"), ("rss", "B"), ("device", "B"), ("threads", "")):
            g = r[key]
            if g["total"] is None:
                parts.append(f"{key} n/a")
            else:
                parts.append(f"{key} {g['total']:+,}{unit} (second half {g['second_half']:+,}{unit})")
        lines.append(f"  {r[count]:,} {count}: " + ", ".join(parts))
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
