"""Weight memory and latency of a GEMV-heavy model per precision and quantization option, each result checked
against the numpy model of the same option (`retarget.testing.quant_model`).

The model is an LLM decoder's MLP at batch 1, `--blocks` times: x = x + W2 silu(W1 x + b1) + b2, W1
[hidden, dim], W2 [dim, hidden]. At batch 1 each linear layer is a GEMV: it reads every weight once and
does two flops with it, so its time is the weight's bytes over the memory bandwidth, and int4 moves a
quarter of f16's bytes.

    python benchmarks/quant_speed.py --targets llvm-cpu:host=local-task --dim 1024 --hidden 2816      # CPU
    python benchmarks/quant_speed.py --targets cuda:host=cuda vulkan-spirv:host=vulkan                 # GPU

Options are `PRECISION[+SCHEME]` (f32, f16, f32+int4-g32, f16+int4-g32, ...). For each target and option:
compile, check the output against the numpy model (relative error; f16 and bf16 rounding allowed for), then
time the options of a target interleaved (medians of `--repeats` calls, numpy in and out; device time in
brackets where the device has a timer). Prints a table; with --json-out (or $OUT) writes the results.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import retarget
from retarget.bench.timing import function_runner, measure
from retarget.ir import dtypes
from retarget.ir.core import Builder, Function, Module, TensorType, Value
from retarget.testing import quant_model as qm
from retarget.testing.numerics import relative_error

OPTIONS = ["f32", "f16", "f32+int8", "f32+int4-g32", "f16+int4-g32", "f16+int4-g128", "f32+8da4w-g32", "f32+8da8w"]
TOLERANCE = {"f32": 1e-4, "f16": 5e-3, "bf16": 3e-2}


def weights(dim: int, hidden: int, blocks: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(blocks):
        w1 = (rng.standard_normal((hidden, dim), np.float32) * dim ** -0.5).astype(np.float32)
        w2 = (rng.standard_normal((dim, hidden), np.float32) * hidden ** -0.5).astype(np.float32)
        out.append((w1, (0.1 * rng.standard_normal(hidden)).astype(np.float32), w2,
                    (0.1 * rng.standard_normal(dim)).astype(np.float32)))
    return out


def mlp_module(params, dim: int, rows: int = 1) -> Module:
    """x = x + (silu(x @ w1^T + b1)) @ w2^T + b2 per block, as graph IR (weights as [in, out] constants)."""
    arg = Value(TensorType((rows, dim), dtypes.f32))
    fn = Function("main", [arg], arg_names=["x"])
    b = Builder(fn)
    x = arg
    for w1, b1, w2, b2 in params:
        h = b.op("rt.add", [b.op("rt.matmul", [x, b.constant(np.ascontiguousarray(w1.T))]), b.constant(b1)])
        h = b.op("rt.mul", [h, b.op("rt.sigmoid", [h])])
        y = b.op("rt.add", [b.op("rt.matmul", [h, b.constant(np.ascontiguousarray(w2.T))]), b.constant(b2)])
        x = b.op("rt.add", [x, y])
    fn.returns = [x]
    return Module({"main": fn})


def reference(params, x: np.ndarray, scheme: str | None) -> np.ndarray:
    """The numpy model of the same quantization (f64)."""
    def lin(v, w):
        return qm.linear(v, w, scheme) if scheme else v.astype(np.float64) @ w.astype(np.float64).T

    x = x.astype(np.float64)
    for w1, b1, w2, b2 in params:
        h = lin(x.astype(np.float32), w1) + b1
        h = h / (1 + np.exp(-h))
        x = x + lin(h.astype(np.float32), w2) + b2
    return x


def parse_option(option: str) -> tuple[str, str | None]:
    precision, _, scheme = option.partition("+")
    return precision, scheme or None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", nargs="+", default=["cuda:host=cuda", "vulkan-spirv:host=vulkan"],
                        help="TARGET=DEVICE pairs")
    parser.add_argument("--options", nargs="+", default=OPTIONS)
    parser.add_argument("--dim", type=int, default=4096)
    parser.add_argument("--hidden", type=int, default=11008)
    parser.add_argument("--blocks", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--json-out", type=Path, default=None)
    args = parser.parse_args()
    out_path = args.json_out or (Path(os.environ["OUT"]) / "quant_speed.json" if os.environ.get("OUT") else None)

    params = weights(args.dim, args.hidden, args.blocks)
    x = np.random.default_rng(1).standard_normal((1, args.dim)).astype(np.float32)
    module = mlp_module(params, args.dim)
    expected = {}
    results = []
    for pair in args.targets:
        target, _, device = pair.partition("=")
        runners, facts = [], {}
        for option in args.options:
            precision, scheme = parse_option(option)
            row = {"target": target, "device": device, "option": option}
            try:
                start = time.perf_counter()
                art = retarget.compile(copy.deepcopy(module), target, precision=precision, quantize=scheme)
                row["compile_s"] = round(time.perf_counter() - start, 2)
                row["constant_bytes"] = art.manifest["constants"]["size"]
                fn = retarget.load(art, device=device).main
                if scheme not in expected:
                    expected[scheme] = reference(params, x, scheme)
                row["relative_error"] = relative_error(fn(x), expected[scheme])
                row["correct"] = row["relative_error"] <= TOLERANCE[precision]
                runners.append(function_runner(fn, [x], option))
                facts[option] = row
            except Exception as e:  # one option's failure is a row of the table; the others still run
                row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
            results.append(row)
            print(f"{target} {option}: " + ", ".join(f"{k}={v}" for k, v in row.items() if k not in ("target",
                  "device", "option")), flush=True)
        for m in measure(runners, None, repeats=args.repeats):
            row = facts[m.runner.label]
            if m.wall:
                row["median_ms"] = m.wall.median_ms
            if m.device:
                row["device_ms"] = m.device.median_ms
            if m.error:
                row["error"] = m.error

    print(f"\nMLP decoder block x{args.blocks} at batch 1 (dim {args.dim}, hidden {args.hidden}): "
          f"{2 * args.blocks * args.dim * args.hidden / 1e6:.0f}M weights; medians of {args.repeats} calls")
    print("| target | option | weight bytes (module constants) | latency ms (device) | rel. error vs its numpy model |")
    print("|---|---|---|---|---|")
    for r in results:
        if "error" in r:
            print(f"| {r['target']} | {r['option']} | | | {r['error']} |")
            continue
        device = f" ({r['device_ms']:.3f})" if "device_ms" in r else ""
        ok = "" if r["correct"] else " WRONG"
        latency = r.get("median_ms", float("nan"))
        print(f"| {r['target']} | {r['option']} | {r['constant_bytes'] / 1e6:.1f} MB | {latency:.3f}{device} | "
              f"{r['relative_error']:.1e}{ok} |")
    if out_path:
        out_path.parent.mkdir(parents=True, exist_ok=True)
        out_path.write_text(json.dumps({"dim": args.dim, "hidden": args.hidden, "blocks": args.blocks,
                                        "repeats": args.repeats, "machine": platform.node(),
                                        "python": sys.version.split()[0], "results": results}, indent=1))
        print(f"wrote {out_path}")
    return 0 if all(r.get("correct") for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
