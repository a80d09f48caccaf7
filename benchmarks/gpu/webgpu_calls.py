"""Where a webgpu call's time goes: each zoo model compiled for webgpu-spirv, checked against torch, then timed per
call (numpy in, numpy out), with the GPU's own time (timestamp queries) and the host's phases of a call.

    python3 benchmarks/gpu/webgpu_calls.py [--models mobilenet_v2 mlp] [--repeats 50] [--target webgpu-spirv:host]
    python3 benchmarks/gpu/webgpu_calls.py --models mobilenet_v2 --host-only      # lavapipe: the host path alone

Phases of one call (medians over the calls, µs), each timed around the driver's method that does it:
  upload  device.write: queue.write_buffer of the inputs;
  encode  the command buffer's encode: one command encoder, every pass command, finish;
  submit  queue submit;
  wait    the readback buffer's map, which waits for the GPU (blocking device poll), and the copy of its bytes;
  read    the outputs sliced out of the copy;
  other   the rest: the runtime's argument checks and bookkeeping.
"device" is the GPU's time from the first compute pass's start to the last one's end (`timed_submit`); wait minus
device is the submission's latency and the wake-up. Calls are timed waiting both ways, taking turns: "spin" polls
without blocking (the default on a GPU), "sleep" blocks in the driver at once (the default on a CPU adapter).
Each model runs with the driver's default shaders ("unchecked": without naga's runtime checks) and "checked" ones
(RETARGET_WEBGPU_CHECKS=1: bounds checks and loop bounding, as in a browser).
`--host-only` (for a software GPU) runs every dispatch at 0 workgroups after the correctness check, so the work
vanishes and the call's host path stays. With $OUT set, writes $OUT/webgpu_calls.json.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import time
import warnings

warnings.filterwarnings("ignore")

CHECKS_ENV = "RETARGET_WEBGPU_CHECKS"
SPIN_S = 0.01  # the "spin" wait on a device that sleeps by default (a CPU adapter)
PHASES = {"upload": [("device", "write")], "encode": [("command_buffer", "encode")],
          "submit": [("native", "submit")], "wait": [("native", "map_read"), ("native", "wait")],
          "read": [("device", "read")]}


def median_us(samples) -> float:
    return statistics.median(samples) * 1e6


def calls(fn, args, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(*args)
        out.append(time.perf_counter() - start)
    return out


def phases(fn, args, repeats: int) -> dict[str, list[float]]:
    """Each call's seconds in each phase: the driver's methods wrapped (on the instances) by a clock while it runs."""
    device = fn.module.device
    owners = {"device": device, "command_buffer": fn.command_buffer, "native": device.native}
    spent: dict[str, float] = {}

    def clocked(phase, method):
        def wrapper(*a, **k):
            start = time.perf_counter()
            try:
                return method(*a, **k)
            finally:
                spent[phase] = spent.get(phase, 0.0) + time.perf_counter() - start
        return wrapper

    wrapped = [(owners[owner], name) for methods in PHASES.values() for owner, name in methods]
    for phase, methods in PHASES.items():
        for owner, name in methods:
            setattr(owners[owner], name, clocked(phase, getattr(owners[owner], name)))
    samples = {phase: [] for phase in [*PHASES, "other", "call"]}
    try:
        for _ in range(repeats):
            spent.clear()
            start = time.perf_counter()
            fn(*args)
            total = time.perf_counter() - start
            for phase in PHASES:
                samples[phase].append(spent.get(phase, 0.0))
            samples["other"].append(total - sum(spent.values()))
            samples["call"].append(total)
    finally:
        for owner, name in wrapped:
            owner.__dict__.pop(name, None)  # the class's method again
    return samples


def zero_work(command_buffer) -> None:
    """Every dispatch of a recorded command buffer at 0 workgroups: the host path of a call without the work."""
    command_buffer.commands = [c[:3] + ((0, 0, 0),) + c[4:] if c[0] == "dispatch" else c
                               for c in command_buffer.commands]
    command_buffer._segments = None


def bench(name, args) -> list[dict]:
    """The rows of one model: one per shader variant."""
    import retarget
    import torch
    from retarget.compiler import import_model
    from retarget.testing import zoo
    from retarget.testing.numerics import relative_error

    model, inputs = zoo.make(name)
    with torch.no_grad():
        expected = model(*inputs).numpy()
    start = time.perf_counter()
    art = retarget.compile(import_model(model, example_inputs=inputs), args.target)
    compile_s = time.perf_counter() - start
    arrays = [x.numpy() for x in inputs]
    rows = []
    for variant in args.shaders:
        row = {"model": name, "shaders": variant, "compile_s": compile_s}
        rows.append(row)
        os.environ[CHECKS_ENV] = "1" if variant == "checked" else "0"  # read when the device is made
        try:
            loaded = retarget.load(art, device="webgpu")
        finally:
            os.environ.pop(CHECKS_ENV)
        fn, device = loaded.main, loaded.device
        row["dispatches"] = sum(1 for c in fn.command_buffer.commands if c[0] == "dispatch")
        row["relative_error"] = relative_error(fn(*arrays), expected)  # the first call: no learned readback yet
        for _ in range(5):
            fn(*arrays)
        row["relative_error_warm"] = relative_error(fn(*arrays), expected)  # through the learned readback
        row["correct"] = max(row["relative_error"], row["relative_error_warm"]) <= 1e-4
        if args.host_only:
            zero_work(fn.command_buffer)
            for _ in range(3):
                fn(*arrays)
        default_spin = device.native.spin_s
        row["default_wait"] = "spin" if default_spin else "sleep"
        waits = {"spin": default_spin or SPIN_S, "sleep": 0.0}
        samples = {wait: [] for wait in waits}
        for _ in range(args.repeats):  # the two ways of waiting take turns
            for wait, spin_s in waits.items():
                device.native.spin_s = spin_s
                samples[wait] += calls(fn, arrays, 1)
        device.native.spin_s = default_spin
        for wait, s in samples.items():
            row[f"{wait}_median_ms"] = statistics.median(s) * 1e3
            row[f"{wait}_min_ms"] = min(s) * 1e3
        timed = getattr(device, "timed_submit", None)
        if timed is not None:
            row["device_ms"] = statistics.median(timed(fn.command_buffer) for _ in range(args.repeats)) * 1e3
        row["phases_us"] = {phase: median_us(s) for phase, s in phases(fn, arrays, args.repeats).items()}
        del loaded, fn, device, timed
        gc.collect()  # the device goes before the next variant's comes
    return rows


def main():
    from retarget.testing import zoo

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=list(zoo.MODELS))
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--target", default="webgpu-spirv:host")
    parser.add_argument("--host-only", action="store_true", help="dispatches at 0 workgroups after the check")
    parser.add_argument("--shaders", nargs="*", default=["unchecked", "checked"],
                        help="unchecked: the driver's default; checked: naga's bounds checks and loop bounding kept")
    args = parser.parse_args()

    import retarget

    adapter = next((d for d in retarget.devices() if d.driver == "webgpu"), None)
    print("adapter:", adapter.name if adapter else None, "available:", adapter.available if adapter else False)
    rows = []
    for name in args.models:
        try:
            rows += bench(name, args)
        except Exception as e:  # one model failing leaves the others' figures
            rows.append({"model": name, "error": f"{type(e).__name__}: {e}"})
            print(f"{name}: {rows[-1]['error']}")
    print(f"\n{'model':18s} {'shaders':9s} {'disp':>4s} {'spin ms':>8s} {'sleep ms':>8s} {'device':>7s} {'rel err':>8s}"
          f" | phases (default wait), µs: {' '.join(f'{p:>7s}' for p in [*PHASES, 'other'])}")
    for r in rows:
        if "error" in r:
            print(f"{r['model']:18s} {r['error']}")
            continue
        device = f"{r['device_ms']:7.3f}" if "device_ms" in r else f"{'-':>7s}"
        err = max(r["relative_error"], r["relative_error_warm"])
        spent = " ".join(f"{r['phases_us'][p]:7.1f}" for p in [*PHASES, "other"])
        print(f"{r['model']:18s} {r['shaders']:9s} {r['dispatches']:4d} {r['spin_median_ms']:8.3f} "
              f"{r['sleep_median_ms']:8.3f} {device} {err:8.1e}{'' if r['correct'] else ' WRONG'} | {spent}")
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "webgpu_calls.json"), "w") as f:
            json.dump({"adapter": adapter.name if adapter else None, "target": args.target,
                       "host_only": args.host_only, "results": rows}, f, indent=1)


if __name__ == "__main__":
    main()
