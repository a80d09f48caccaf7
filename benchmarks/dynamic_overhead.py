"""Dynamic-shape overhead: one module compiled for every size against a static module per size, on one device.

    .venv/bin/python benchmarks/dynamic_overhead.py [--devices local-sync local-task] [--models mobilenet_v2]
        [--sizes 1 4] [--repeats 30] [--json out.json] [--markdown out.md]

For each model of `retarget.testing.zoo.DYNAMIC` (MobileNetV2's batch, the transformer block's sequence
length) and each device: the dynamic module (exported with torch.export `Dim`, bounded as the zoo says, so
one arena serves every size) and, for each size, the static module of that size. Every result is checked
against torch first; then the two run interleaved (static, dynamic, static, ...) so that machine noise hits
both alike. Reported per size: medians and minimums of each, their ratio, the dynamic module's first call
at that size (planning its memory and recording its command buffer) and the compile times.
`benchmarks/gpu/run_dynamic.py` runs the same on cuda, vulkan and webgpu.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
import warnings

warnings.filterwarnings("ignore")

TARGETS = {"local-sync": "llvm-cpu", "local-task": "llvm-cpu", "cuda": "cuda", "vulkan": "vulkan-spirv:host",
           "webgpu": "webgpu-spirv:host"}
SIZES = {"mobilenet_v2": (1, 4), "transformer_block": (16, 64, 256)}


def measure(name: str, device: str, sizes, repeats: int, target: str | None = None, tolerance: float = 1e-4) -> list:
    import numpy as np
    import retarget
    import torch
    from retarget.compiler import import_model
    from retarget.testing import zoo
    from retarget.testing.numerics import relative_error

    target = target or TARGETS[device.partition(":")[0]]
    spec = zoo.DYNAMIC[name]
    model, example, shapes = zoo.make_dynamic(name)
    start = time.perf_counter()
    dynamic_art = retarget.compile(import_model(model, example_inputs=example, dynamic_shapes=shapes), target)
    dynamic_compile = time.perf_counter() - start
    dynamic_fn = retarget.load(dynamic_art, device=device).main
    rows = []
    for size in sizes:
        inputs = zoo.dynamic_inputs(name, size, example)
        arrays = [x.numpy() for x in inputs]
        with torch.no_grad():
            expected = model(*inputs).numpy()
        start = time.perf_counter()
        static_art = retarget.compile(import_model(model, example_inputs=inputs), target)
        static_compile = time.perf_counter() - start
        static_fn = retarget.load(static_art, device=device).main
        start = time.perf_counter()
        got = dynamic_fn(*arrays)  # the first call at this size plans and records it
        first_call = (time.perf_counter() - start) * 1e3
        errors = {"dynamic": relative_error(got, expected), "static": relative_error(static_fn(*arrays), expected)}
        runners = {"static": lambda fn=static_fn, xs=arrays: fn(*xs),
                   "dynamic": lambda fn=dynamic_fn, xs=arrays: fn(*xs)}
        times = {k: [] for k in runners}
        for run in runners.values():
            for _ in range(3):
                run()
        for _ in range(repeats):
            for k, run in runners.items():
                t = time.perf_counter()
                run()
                times[k].append((time.perf_counter() - t) * 1e3)
        static_ms, dynamic_ms = statistics.median(times["static"]), statistics.median(times["dynamic"])
        rows.append({
            "model": name, "device": device, "target": target, "symbol": spec.symbol, "size": size,
            "static_ms": static_ms, "dynamic_ms": dynamic_ms, "ratio": dynamic_ms / static_ms,
            "static_min_ms": min(times["static"]), "dynamic_min_ms": min(times["dynamic"]),
            "first_call_ms": first_call, "static_compile_s": static_compile, "dynamic_compile_s": dynamic_compile,
            "static_error": errors["static"], "dynamic_error": errors["dynamic"],
            "correct": bool(max(errors.values()) <= tolerance and np.isfinite(list(errors.values())).all()),
        })
        print(_line(rows[-1]), flush=True)
    return rows


HEADER = (f"{'model':18s} {'device':10s} {'size':>10s} {'static ms':>10s} {'dynamic ms':>10s} {'ratio':>6s} "
          f"{'1st call ms':>11s} {'rel err (s/d)':>17s}")


def _line(r: dict) -> str:
    size = f"{r['symbol']}={r['size']}"
    return (f"{r['model']:18s} {r['device']:10s} {size:>10s} {r['static_ms']:10.3f} {r['dynamic_ms']:10.3f} "
            f"{r['ratio']:6.3f} {r['first_call_ms']:11.1f} {r['static_error']:8.1e}/{r['dynamic_error']:8.1e}"
            f"{'' if r['correct'] else '  WRONG'}")


def markdown(rows: list) -> str:
    lines = ["| model | device | size | static ms | dynamic ms | dynamic / static | first call at the size, ms "
             "| correct |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['device']} | {r['symbol']}={r['size']} | {r['static_ms']:.3f} | "
                     f"{r['dynamic_ms']:.3f} | {r['ratio']:.3f} | {r['first_call_ms']:.1f} | "
                     f"{'yes' if r['correct'] else 'NO'} |")
    return "\n".join(lines) + "\n"


def machine() -> dict:
    import retarget

    return {"platform": platform.platform(), "cpu_count": os.cpu_count(), "python": platform.python_version(),
            "retarget": retarget.__version__}


def run(devices, models, sizes, repeats: int, json_path=None, markdown_path=None) -> list:
    import retarget

    available = {d.driver for d in retarget.devices() if d.available}
    rows = []
    print(HEADER, flush=True)
    for device in devices:
        if device.partition(":")[0] not in available:
            print(f"{device}: no device here, skipped", flush=True)
            continue
        for name in models:
            rows += measure(name, device, sizes or SIZES[name], repeats)
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"machine": machine(), "repeats": repeats, "results": rows}, f, indent=1)
    if markdown_path:
        with open(markdown_path, "w") as f:
            f.write(markdown(rows))
    return rows


def main(default_devices=("local-sync", "local-task")):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", nargs="*", default=list(default_devices))
    parser.add_argument("--models", nargs="*", default=list(SIZES))
    parser.add_argument("--sizes", nargs="*", type=int, help="sizes of the dynamic axis (default: per model)")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--json")
    parser.add_argument("--markdown")
    args = parser.parse_args()
    rows = run(args.devices, args.models, args.sizes, args.repeats, args.json, args.markdown)
    return 0 if all(r["correct"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
