"""The webgpu-spirv target through wgpu on this machine's GPU: correctness against torch, then medians.

    python3 benchmarks/gpu/run_webgpu.py [--models mobilenet_v2] [--repeats 30]   (writes $OUT/webgpu.json if OUT is set)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import warnings

import numpy as np

warnings.filterwarnings("ignore")


def main():
    import torch

    import retarget
    from retarget.compiler import import_model
    from retarget.testing import zoo
    from retarget.testing.numerics import relative_error

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=["mlp", "small_cnn", "mobilenet_v2", "resnet18", "transformer_block"])
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    device = retarget.devices()
    adapter = next((d for d in device if d.driver == "webgpu"), None)
    print("adapter:", adapter.name if adapter else None, "available:", adapter.available if adapter else False)
    rows = []
    for name in args.models:
        model, inputs = zoo.make(name)
        with torch.no_grad():
            expected = model(*inputs).numpy()
        start = time.perf_counter()
        art = retarget.compile(import_model(model, example_inputs=inputs), "webgpu-spirv:host")
        compile_s = time.perf_counter() - start
        fn = retarget.load(art, device="webgpu").main
        arrays = [x.numpy() for x in inputs]
        err = relative_error(fn(*arrays), expected)
        for _ in range(3):
            fn(*arrays)
        times = []
        for _ in range(args.repeats):
            t = time.perf_counter()
            fn(*arrays)
            times.append((time.perf_counter() - t) * 1e3)
        rows.append({"model": name, "median_ms": statistics.median(times), "min_ms": min(times), "max_ms": max(times),
                     "relative_error": err, "compile_s": compile_s})
    print(f"{'model':18s} {'median ms':>10s} {'min':>8s} {'max':>8s} {'rel err':>9s} {'compile s':>9s}")
    for r in rows:
        print(f"{r['model']:18s} {r['median_ms']:10.3f} {r['min_ms']:8.3f} {r['max_ms']:8.3f} "
              f"{r['relative_error']:9.1e} {r['compile_s']:9.2f}")
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "webgpu.json"), "w") as f:
            json.dump({"adapter": adapter.name if adapter else None, "results": rows}, f, indent=1)


if __name__ == "__main__":
    main()
