"""Heterogeneous execution, checked and timed: each GPU target all on the GPU, beside the same model split
with llvm-cpu as the fallback, interleaved, every result checked against torch.

The splits (each a real op a target is told to refuse, `--refuse`, or a real gap):
- mlp_argmax (the zoo MLP returning argmax too) with `--refuse rt.erf`: GELU on the CPU between two GPU segments;
  and, on webgpu-spirv, its int64 argmax, which WGSL cannot store (no refusal needed);
- transformer_block with `--refuse rt.erf`: the MLP's GELU (2 x 64 x 1024 f32, 512 KiB each way);
- mobilenet_v2 with `--refuse rt.reduce`: the global average pool and the classifier after it on the CPU.

    python3 benchmarks/gpu/fallback.py --pairs cuda=cuda vulkan-spirv:host=vulkan [--repeats 30]
    python3 benchmarks/gpu/fallback.py --pairs vulkan-spirv=vulkan webgpu-spirv=webgpu --models mlp_argmax
Writes fallback.json and fallback.md under $OUT when OUT is set. The transfer overhead of a split is its
median minus the all-GPU median; `transfers` is how many a call makes and `transfer_bytes` their bytes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import warnings

warnings.filterwarnings("ignore")

SPLITS = {  # model -> (zoo name, builder arguments, ops refused on the GPU)
    "mlp_argmax": ("mlp", {"argmax": True}, ["rt.erf"]),
    "transformer_block": ("transformer_block", {}, ["rt.erf"]),
    "mobilenet_v2": ("mobilenet_v2", {}, ["rt.reduce"]),
}


def main():
    import numpy as np
    import retarget
    import torch
    from retarget.compiler import import_model
    from retarget.testing import zoo
    from retarget.testing.numerics import relative_error

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", nargs="+", default=["cuda=cuda", "vulkan-spirv:host=vulkan"],
                        help="TARGET=DRIVER: a GPU target and the driver that runs it")
    parser.add_argument("--models", nargs="+", default=list(SPLITS))
    parser.add_argument("--fallback", default="llvm-cpu:host")
    parser.add_argument("--cpu-device", default="local-task")
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    available = {d.driver for d in retarget.devices() if d.available}
    rows, skipped = [], []
    for name in args.models:
        zoo_name, options, refuse = SPLITS[name]
        model, inputs = zoo.make(zoo_name, **options)
        with torch.no_grad():
            expected = model(*inputs)
        expected = [t.numpy() for t in (expected if isinstance(expected, tuple) else (expected,))]
        module = import_model(model, example_inputs=inputs)
        arrays = [x.numpy() for x in inputs]
        for pair in args.pairs:
            target, _, driver = pair.partition("=")
            if driver not in available:
                skipped.append(f"{name} on {target}: no {driver} device here")
                continue
            variants = {"all on the GPU": dict(), f"--refuse {' '.join(refuse)} --fallback": dict(refuse=refuse)}
            if target.startswith("webgpu") and name == "mlp_argmax":
                variants = {"argmax on the CPU (int64)": dict()}  # webgpu cannot run it all on the GPU
            runners = {}
            for label, extra in variants.items():
                art = retarget.compile(module, target, fallback=args.fallback if extra or "CPU" in label else None,
                                       **extra)
                loaded = retarget.load(art, devices={"gpu": driver, "cpu": args.cpu_device}
                                       if "placements" in art.manifest else None, device=driver)
                fn = loaded.main
                got = fn(*arrays)
                got = list(got) if isinstance(got, tuple) else [got]
                err = max(relative_error(g.astype(np.float32), w.astype(np.float32)) for g, w in zip(got, expected))
                steps = art.functions["main"].get("steps", [])
                transfers = [s for s in steps if s["op"] == "transfer"]
                runners[label] = (fn, {"relative_error": err, "transfers": len(transfers),
                                       "transfer_bytes": sum(s["src"][2] for s in transfers),
                                       "segments": sum(s["op"] == "run" for s in steps) or 1,
                                       "devices": loaded.describe_devices()})
            times = {label: [] for label in runners}
            for fn, _ in runners.values():
                for _ in range(3):
                    fn(*arrays)
            for _ in range(args.repeats):
                for label, (fn, _) in runners.items():
                    start = time.perf_counter()
                    fn(*arrays)
                    times[label].append((time.perf_counter() - start) * 1e3)
            base = statistics.median(times["all on the GPU"]) if "all on the GPU" in times else None
            for label, (_, facts) in runners.items():
                median = statistics.median(times[label])
                rows.append({"model": name, "target": target, "variant": label, "median_ms": median,
                             "min_ms": min(times[label]), "overhead_ms": None if base is None else median - base,
                             "correct": facts["relative_error"] <= 1e-4, **facts})
                print(json.dumps(rows[-1]), flush=True)
    table = ["| model | target | variant | devices | segments | transfers (bytes) | median ms | over all-GPU ms | "
             "rel. error |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        over = "" if r["overhead_ms"] is None or r["variant"] == "all on the GPU" else f"{r['overhead_ms']:+.3f}"
        table.append(f"| {r['model']} | {r['target']} | {r['variant']} | {r['devices']} | {r['segments']} | "
                     f"{r['transfers']} ({r['transfer_bytes']:,}) | {r['median_ms']:.3f} | {over} | "
                     f"{r['relative_error']:.1e}{'' if r['correct'] else ' WRONG'} |")
    table += [f"\nskipped: {s}" for s in skipped]
    print("\n".join(table))
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "fallback.json"), "w") as f:
            json.dump({"rows": rows, "skipped": skipped, "repeats": args.repeats,
                       "retarget": retarget.__version__, "torch": torch.__version__}, f, indent=1)
        with open(os.path.join(out, "fallback.md"), "w") as f:
            f.write("\n".join(table) + "\n")
    if any(not r["correct"] for r in rows):
        raise SystemExit("some results are wrong (see the table)")


if __name__ == "__main__":
    main()
