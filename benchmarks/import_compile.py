"""Import + compile time per zoo model and path, and per-call overhead of the tiny MLP.

    .venv/bin/python benchmarks/import_compile.py [--json out.json]

Prints medians over a few repeats; nothing here is asserted anywhere.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import retarget
from retarget.testing import zoo
from retarget.testing.graphs import mlp_module


def median_seconds(fn, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", type=Path)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("mlp", "mobilenet_v2", "resnet18"):
            model, inputs = zoo.make(name)
            onnx_path = Path(tmp) / f"{name}.onnx"
            zoo.export_onnx(name, onnx_path)
            rows.append({"model": name, "path": "torch",
                         "seconds": median_seconds(lambda: retarget.compile(model, "vmvx", example_inputs=inputs), args.repeats)})
            rows.append({"model": name, "path": "onnx",
                         "seconds": median_seconds(lambda: retarget.compile(str(onnx_path), "vmvx"), args.repeats)})
    module, x, _ = mlp_module(batch=1, features=224, hidden=512)
    fn = retarget.load(retarget.compile(module, "vmvx"), "local-sync").predict
    fn(x)
    per_call = median_seconds(lambda: [fn(x) for _ in range(1000)], 5) / 1000
    rows.append({"model": "mlp 224x512 call overhead (vmvx, local-sync)", "path": "api", "seconds": per_call})
    for r in rows:
        print(f"{r['model']:48s} {r['path']:6s} {r['seconds'] * 1e3:10.2f} ms")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
