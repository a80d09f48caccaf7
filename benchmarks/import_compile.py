"""Import + compile time per zoo model and path, and per-call overhead of the tiny MLP.

    .venv/bin/python benchmarks/import_compile.py [--json out.json]
    .venv/bin/python benchmarks/import_compile.py --cold [--model mobilenet_v2] [--decompose]

Prints medians over a few repeats; nothing here is asserted anywhere. `--cold` runs each path in a
fresh process (after one run that leaves Python's bytecode cache, as a user's first import does) and
splits the time into phases: Python imports, torch.export, our import (of the training IR as it
stands where it can, `importers/torch_training_ir.py`) and our compile for vmvx. `--decompose`
decomposes the exported program to core ATen first (`run_decompositions`, its own phase), as every
torch import did before 2026-11-24.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
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


def cold_phases(path: str, model_name: str, onnx_file: str, launched: str, decompose: str = "") -> dict:
    """Seconds per phase of one first import + compile in this (fresh) process, launched at `launched`."""
    phases, start = {"start Python, import retarget": time.time() - float(launched)}, time.perf_counter()

    def lap(name):
        nonlocal start
        now = time.perf_counter()
        phases[name] = now - start
        start = now

    if path == "torch":
        import torch
        from retarget.importers.torch_export import TorchImporter
        lap("python imports")
        model, inputs = zoo.make(model_name)
        lap("build the model")
        program = torch.export.export(model.eval(), tuple(inputs))
        lap("torch.export")
        if decompose:
            program = program.run_decompositions()
            lap("run_decompositions")
        module = TorchImporter().load(program)
    else:
        import onnx  # noqa: F401
        from retarget.importers.onnx import OnnxImporter
        lap("python imports")
        module = OnnxImporter().load(onnx_file)
    lap("ours: import")
    retarget.compile(module, "vmvx")
    lap("ours: compile for vmvx")
    return phases


def cold(model_name: str, decompose: bool = False) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        onnx_file = str(Path(tmp) / f"{model_name}.onnx")
        zoo.export_onnx(model_name, onnx_file)
        for path in ("torch",) if decompose else ("torch", "onnx"):
            for _ in range(2):  # the first leaves the bytecode cache
                command = [sys.executable, __file__, "--child", path, model_name, onnx_file, str(time.time()),
                           "decompose" if decompose else ""]
                out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
            phases = json.loads(out.strip().splitlines()[-1])
            name = "torch, decomposed" if path == "torch" and decompose else path
            rows.append({"model": model_name, "path": name, "phases": phases, "seconds": sum(phases.values())})
    for r in rows:
        ours = sum(v for k, v in r["phases"].items() if k.startswith("ours"))
        print(f"{r['model']} via {r['path']}: {r['seconds']:.2f} s in a fresh process, {ours:.2f} s of it ours")
        for k, v in r["phases"].items():
            print(f"    {k:24s} {v * 1e3:8.0f} ms")
    return rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", type=Path)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cold", action="store_true", help="phases of a first import + compile per path")
    parser.add_argument("--model", default="mobilenet_v2")
    parser.add_argument("--decompose", action="store_true",
                        help="with --cold: decompose to core ATen before importing, as before 2026-11-24")
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(cold_phases(*args.child)))
        return
    if args.cold:
        rows = cold(args.model, args.decompose)
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1))
        return
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("mlp", "mobilenet_v2", "resnet18"):
            model, inputs = zoo.make(name)
            onnx_path = Path(tmp) / f"{name}.onnx"
            zoo.export_onnx(name, onnx_path)
            compile_torch = lambda model=model, inputs=inputs: retarget.compile(model, "vmvx", example_inputs=inputs)
            compile_onnx = lambda onnx_path=onnx_path: retarget.compile(str(onnx_path), "vmvx")
            rows.append({"model": name, "path": "torch", "seconds": median_seconds(compile_torch, args.repeats)})
            rows.append({"model": name, "path": "onnx", "seconds": median_seconds(compile_onnx, args.repeats)})
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
