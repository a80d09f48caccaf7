"""The zoo on the CPU, side by side with the peers, in one process and interleaved.

    .venv/bin/python benchmarks/cpu/run.py [--models mobilenet_v2 mlp] [--repeats 50] [--json out.json]
    .venv/bin/python benchmarks/cpu/run.py --models mobilenet_v2 --peers onnxruntime   # without torch eager

For each model: retarget llvm-cpu on local-task and local-sync, ONNX Runtime (its default threads, and one
thread; spinning off) and PyTorch eager; `retarget benchmark --suite zoo` adds IREE when it is installed.
Each runner is warmed up, then the runners take turns (`retarget.bench.interleave`: each round in a new
order) so that machine noise hits all of them alike. Medians, min and max in milliseconds; every result
is checked against torch before it is timed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import retarget
from retarget.bench import Runner, interleave
from retarget.compiler import import_model
from retarget.testing import zoo
from retarget.testing.numerics import relative_error

warnings.filterwarnings("ignore")


def runners(name: str, tmp: Path, peers=("onnxruntime", "torch")):
    import torch

    model, inputs = zoo.make(name)
    arrays = [x.numpy() for x in inputs]
    with torch.no_grad():
        expected = model(*inputs).numpy()
    out = {}
    start = time.perf_counter()
    module = import_model(model, example_inputs=inputs)
    artifact = retarget.compile(module, "llvm-cpu")
    compile_s = time.perf_counter() - start
    for device in ("local-task", "local-sync"):
        fn = retarget.load(artifact, device=device).main
        out[f"retarget llvm-cpu {device}"] = lambda fn=fn: fn(*arrays)
    try:
        if "onnxruntime" not in peers:
            raise ImportError
        import onnxruntime as ort

        path = tmp / f"{name}.onnx"
        zoo.export_onnx(name, path)
        for threads in (0, 1):  # its default pool spins, which can hurt on a small or shared machine
            options = ort.SessionOptions()
            options.intra_op_num_threads = threads
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")  # no spinning between turns
            session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
            feeds = {i.name: a for i, a in zip(session.get_inputs(), arrays)}
            label = "onnxruntime" + (" 1 thread" if threads else "")
            out[label] = lambda session=session, feeds=feeds: session.run(None, feeds)[0]
    except ImportError:
        pass

    def eager():
        with torch.no_grad():
            return model(*inputs).numpy()

    if "torch" in peers:
        out["torch eager"] = eager
    return out, expected, compile_s


def measure(name: str, repeats: int, tmp: Path, peers=("onnxruntime", "torch")) -> list[dict]:
    fns, expected, compile_s = runners(name, tmp, peers)
    errors = {label: relative_error(np.asarray(fn()), expected) for label, fn in fns.items()}
    measured = interleave([Runner(label, fn) for label, fn in fns.items()], repeats, warmup=3)
    return [{"model": name, "runner": m.runner.label, "median_ms": m.wall.median_ms, "min_ms": m.wall.min_ms,
             "max_ms": m.wall.max_ms, "relative_error": errors[m.runner.label],
             "compile_s": compile_s if m.runner.label.startswith("retarget") else None} for m in measured]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=["mlp", "mobilenet_v2", "resnet18", "transformer_block"])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--peers", nargs="*", default=["onnxruntime", "torch"], choices=["onnxruntime", "torch"],
                        help="which peers run beside retarget (torch eager's OpenMP workers keep spinning on the other "
                             "cores after each call, which the runner after it feels)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            rows += measure(name, args.repeats, Path(tmp), args.peers)
    print(f"{'model':18s} {'runner':28s} {'median ms':>10s} {'min':>8s} {'max':>8s} {'rel err':>9s}")
    for r in rows:
        print(f"{r['model']:18s} {r['runner']:28s} {r['median_ms']:10.2f} {r['min_ms']:8.2f} {r['max_ms']:8.2f} "
              f"{r['relative_error']:9.1e}")
    if args.json:
        machine = {"platform": platform.platform(), "cpu_count": os.cpu_count(), "python": platform.python_version(),
                   "retarget": retarget.__version__}
        args.json.write_text(json.dumps({"machine": machine, "results": rows}, indent=1))


if __name__ == "__main__":
    main()
