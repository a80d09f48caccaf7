"""Small convolutions on the GPU: whether one too small for the register tile keeps it and splits its sums
instead (`_GpuLowering.SMALL_TILE_*`), swept on MobileNetV2 and ResNet-18 b1 in one process. Device time of
the whole recorded function and the call (numpy in and out; and with the input on the GPU, for the default),
medians of interleaved calls, every variant checked against torch first; the convolutions of the default
beside "none", dispatch by dispatch.

    . benchmarks/gpu/preamble.sh; OUT=/tmp/out python3 benchmarks/gpu/small_convs.py [--repeats 50]
        [--devices cuda vulkan] [--models mobilenet_v2 resnet18] [--variants none default]

Writes $OUT/small_convs.json and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")

KNOBS = ("SMALL_TILE_CONVS", "SMALL_TILE_SLICES", "SMALL_TILE_BUSY_PER_SM")
# label: the knobs' values; "none": the schedule before (one channel per thread); "default": the lowering's own
VARIANTS = {"none": (False, 16, 4096), "default": None, "16/2048": (True, 16, 2048), "32/8192": (True, 32, 8192),
            "8/4096": (True, 8, 4096)}


def main() -> int:
    import retarget
    import torch
    from retarget.bench.timing import Runner, measure, per_dispatch, resident_runner
    from retarget.compiler import import_model
    from retarget.kernel.lower import _GpuLowering
    from retarget.testing import zoo

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--devices", nargs="*", default=["cuda", "vulkan"])
    parser.add_argument("--models", nargs="*", default=["mobilenet_v2", "resnet18"])
    parser.add_argument("--variants", nargs="*", default=list(VARIANTS))
    args = parser.parse_args()
    targets = {"cuda": "cuda:host", "vulkan": "vulkan-spirv:host"}
    saved = [getattr(_GpuLowering, name) for name in KNOBS]
    rows, convs = [], {}
    for name in args.models:
        model, inputs = zoo.make(name)
        module = import_model(model, example_inputs=inputs)
        x = inputs[0].numpy()
        with torch.no_grad():
            expected = model(inputs[0]).numpy()
        runners, loaded_by = [], {}
        for device in args.devices:
            for label in args.variants:
                for knob, value in zip(KNOBS, VARIANTS[label] or saved):
                    setattr(_GpuLowering, knob, value)
                try:
                    artifact = retarget.compile(module, targets[device])
                finally:
                    for knob, value in zip(KNOBS, saved):
                        setattr(_GpuLowering, knob, value)
                fn = retarget.load(artifact, device=device).main
                loaded_by[(device, label)] = fn
                runners.append(Runner(f"{name} {device} {label}", lambda fn=fn, x=x: fn(x),
                                      device_time=lambda fn=fn: fn.module.device.timed_submit(fn.command_buffer)))
                if getattr(fn.module.device, "dlpack_device", None) is not None and label == "default":
                    runners.append(resident_runner(fn, [x], f"{name} {device} {label} on device"))
        for m in measure(runners, expected, repeats=args.repeats):
            rows.append({"runner": m.runner.label, "correct": m.correct, "relative_error": m.relative_error,
                         "median_ms": m.wall.median_ms if m.wall else None,
                         "device_ms": m.device.median_ms if m.device else None, "error": m.error})
        for label in ("none", "default"):
            fn = loaded_by.get(("cuda", label))
            if fn is not None:
                breakdown = per_dispatch(fn, [x], repeats=20)
                convs[f"{name} {label}"] = {d["name"]: d["device_time"]["median_ms"] for d in breakdown["dispatches"]
                                            if "conv2d" in d["name"]}
    print(f"{'runner':40} {'call ms':>8} {'device ms':>10}  correct")
    for r in rows:
        device = f"{r['device_ms']:.4f}" if r["device_ms"] else "-"
        print(f"{r['runner']:40} {r['median_ms'] or float('nan'):8.4f} {device:>10}  {r['correct']} {r['error'] or ''}")
    for name in args.models:
        before, after = convs.get(f"{name} none"), convs.get(f"{name} default")
        if before and after:
            changed = [(n, t, after[n]) for n, t in before.items() if abs(after[n] - t) > 0.0005]
            print(f"{name} on cuda: convolutions {sum(before.values()):.3f} -> {sum(after.values()):.3f} ms")
            for n, t, u in sorted(changed, key=lambda c: -c[1])[:12]:
                print(f"  {n:40} {t * 1e3:7.1f} -> {u * 1e3:7.1f} us")
    out = os.environ.get("OUT")
    if out:
        Path(out, "small_convs.json").write_text(json.dumps({"rows": rows, "convolutions": convs}, indent=1))
    return 0 if all(r["correct"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
