"""Accuracy of every precision and quantization option against the f32 reference, for the zoo.

    python benchmarks/quant_accuracy.py [--models mlp transformer_block] [--options f16 int4-g32] [--json-out a.json]

Each zoo model is imported once; for each option it is compiled for vmvx (the numpy reference, which computes
each op exactly as the option says: halves rounded after every op, packed weights unpacked, int8 activations
summed exactly) and run on the zoo's seeded input. The f32 reference is the same model compiled without
options. Columns:

- rel. max: max|y - ref| / max|ref| (`retarget.testing.numerics.relative_error`, what the tests use);
- rel. RMS: ||y - ref|| / ||ref||;
- top-1: whether the arg-max of every output row agrees (the zoo's classifiers; a transformer's hidden state
  has no classes, so its column is its cosine similarity instead);
- weights: bytes of the module's constants (packed words, scales and zero points included).

Prints a markdown table per metric (options as rows, models as columns) and writes JSON with --json-out (or to
$OUT/quant_accuracy.json).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import retarget
from retarget.compiler import import_model
from retarget.passes.quantize import SCHEMES
from retarget.testing import zoo
from retarget.testing.numerics import relative_error

OPTIONS = ["f16", "bf16", *SCHEMES, "f16+int4-g32", "f16+8da4w-g32"]
CLASSIFIERS = ("mlp", "small_cnn", "mobilenet_v2", "resnet18")


def run(module, inputs, option: str | None):
    kwargs = {}
    for part in (option or "").split("+"):
        if part in ("f16", "bf16"):
            kwargs["precision"] = part
        elif part:
            kwargs["quantize"] = part
    art = retarget.compile(copy.deepcopy(module), "vmvx", **kwargs)
    out = retarget.load(art, device="local-task").main(*inputs)
    return np.asarray(out, np.float64), art.manifest["constants"]["size"]


def metrics(name: str, y: np.ndarray, ref: np.ndarray) -> dict:
    out = {"rel_max": relative_error(y, ref), "rel_rms": float(np.linalg.norm(y - ref) / np.linalg.norm(ref))}
    if name in CLASSIFIERS:
        out["top1"] = float(np.mean(y.reshape(-1, y.shape[-1]).argmax(-1) == ref.reshape(-1, ref.shape[-1]).argmax(-1)))
    else:
        out["cosine"] = float(np.dot(y.ravel(), ref.ravel()) / (np.linalg.norm(y) * np.linalg.norm(ref)))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=list(zoo.MODELS))
    parser.add_argument("--options", nargs="+", default=OPTIONS)
    parser.add_argument("--json-out", type=Path, default=None)
    args = parser.parse_args()
    out_path = args.json_out or (Path(os.environ["OUT"]) / "quant_accuracy.json" if os.environ.get("OUT") else None)
    warnings.filterwarnings("ignore")

    results: dict[str, dict] = {}
    for name in args.models:
        model, tensors = zoo.make(name)
        module = import_model(model, example_inputs=tensors)
        inputs = [t.numpy() for t in tensors]
        ref, f32_bytes = run(module, inputs, None)
        results[name] = {"f32": {"weights": f32_bytes, "rel_max": 0.0, "rel_rms": 0.0}}
        start = time.perf_counter()
        for option in args.options:
            y, size = run(module, inputs, option)
            results[name][option] = {"weights": size, **metrics(name, y, ref)}
        print(f"{name}: {len(args.options)} options in {time.perf_counter() - start:.1f} s", file=sys.stderr)

    def table(title: str, cell) -> None:
        print(f"\n{title}\n")
        print("| option | " + " | ".join(args.models) + " |")
        print("|---|" + "---|" * len(args.models))
        for option in ["f32", *args.options]:
            print(f"| {option} | " + " | ".join(cell(results[m].get(option), m) for m in args.models) + " |")

    table("Relative max error against f32 (max|y - ref| / max|ref|)",
          lambda r, m: f"{r['rel_max']:.1e}" if r else "")
    table("Relative RMS error against f32", lambda r, m: f"{r['rel_rms']:.1e}" if r else "")
    table("Top-1 agreement (classifiers) or cosine similarity (transformer_block)",
          lambda r, m: "" if not r or "rel_rms" not in r or ("top1" not in r and "cosine" not in r)
          else (f"{r['top1']:.0%}" if "top1" in r else f"{r['cosine']:.5f}"))
    table("Weights (bytes of module constants)", lambda r, m: f"{r['weights'] / 1e6:.2f} MB" if r else "")
    if out_path:
        out_path.parent.mkdir(parents=True, exist_ok=True)
        out_path.write_text(json.dumps({"models": args.models, "options": args.options, "results": results}, indent=1))
        print(f"\nwrote {out_path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
