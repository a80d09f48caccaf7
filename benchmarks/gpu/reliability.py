"""The reliability checks of issue 14 on a CUDA GPU, as steps that run_reliability.sh strings together.

    python3 benchmarks/gpu/reliability.py prepare DIR        # compile the cases for cuda:host into DIR
    python3 benchmarks/gpu/reliability.py names DIR          # the cases, one a line
    python3 benchmarks/gpu/reliability.py run DIR NAME       # load one case on cuda, run it, check it: one JSON line
    python3 benchmarks/gpu/reliability.py summarize OUT      # OUT/reliability.json and OUT/reliability.md

The cases are the zoo (checked against torch on the CPU) and f16 matmuls whose shapes take the tiled
fragment matmul's interior and edge tiles (wmma on the tensor cores) and the Hopper schedule (wgmma; checked
against vmvx). `prepare`
compiles everything outside the sanitizer; `run` only loads a module, calls it once, compares, and drops
every object before it exits, so that compute-sanitizer's leak check sees what the driver freed.
RELIABILITY_TARGET and RELIABILITY_DEVICE (default cuda:host and cuda) run the same steps elsewhere,
e.g. llvm-cpu on local-task to try the script on a machine without a GPU.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import sys
from pathlib import Path

import numpy as np

# f16 matmuls: (name, a shape, b shape) -- interior tiles only, ragged edges, a batch, a skinny one
MATMULS = (("matmul_f16_512", (512, 512), (512, 512)), ("matmul_f16_ragged", (200, 130), (130, 300)),
           ("matmul_f16_batched", (3, 129, 70), (70, 130)), ("matmul_f16_skinny", (1, 200), (200, 3)))
# ... and one through the cuda backend's Hopper schedule (wgmma fed by TMA; on sm_90a), made to take a shape too
# small to fill the GPU: TMA's zero fill past ragged edges (K too) and the guarded stores, under memcheck
WGMMA_MATMULS = (("matmul_f16_wgmma_ragged", (300, 136), (136, 520)),)
TOLERANCE = {"zoo": 1e-4, "f16": 2e-2}
TARGET = os.environ.get("RELIABILITY_TARGET", "cuda:host")
DEVICE = os.environ.get("RELIABILITY_DEVICE", "cuda")


def prepare(folder: Path) -> None:
    import retarget
    from retarget.compiler import import_model
    from retarget.ir import Builder, Function, Module, TensorType, Value, dtypes
    from retarget.testing import zoo

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for name in zoo.MODELS:
        import torch

        model, inputs = zoo.make(name)
        with torch.no_grad():
            expected = model(*inputs).numpy()
        artifact = retarget.compile(import_model(model, example_inputs=inputs), TARGET)
        _save(folder, name, "zoo", artifact, [x.numpy() for x in inputs], expected)
        print(f"prepared {name}", flush=True)
    f16 = dtypes.DTYPES["f16"]
    for name, a_shape, b_shape in MATMULS + WGMMA_MATMULS:
        args = [Value(TensorType(a_shape, f16)), Value(TensorType(b_shape, f16))]
        fn = Function("main", args)
        fn.returns = [Builder(fn).op("rt.matmul", args)]
        module = Module({"main": fn})
        inputs = [rng.standard_normal(s).astype(np.float16) for s in (a_shape, b_shape)]
        expected = retarget.load(retarget.compile(module, "vmvx"), device="local-sync").main(*inputs)
        _save(folder, name, "f16", _compile_any_size(module) if "wgmma" in name else retarget.compile(module, TARGET),
              inputs, expected)
        print(f"prepared {name}", flush=True)


def _compile_any_size(module):
    """`module` for TARGET with the Hopper schedule taking any size (where the target is cuda on sm_90a)."""
    import retarget

    try:
        from retarget_cuda import hopper_gemm
    except ImportError:
        return retarget.compile(module, TARGET)
    saved, hopper_gemm.MIN_WAVES = hopper_gemm.MIN_WAVES, 0
    try:
        return retarget.compile(module, TARGET)
    finally:
        hopper_gemm.MIN_WAVES = saved


def _save(folder: Path, name: str, kind: str, artifact, inputs, expected) -> None:
    artifact.save(folder / f"{name}.rtm")
    np.savez(folder / f"{name}.npz", expected=expected, **{f"input{i}": x for i, x in enumerate(inputs)})
    (folder / f"{name}.kind").write_text(kind)


def names(folder: Path) -> list[str]:
    return sorted(p.stem for p in folder.glob("*.rtm"))


def run(folder: Path, name: str) -> dict:
    import retarget
    from retarget.testing.numerics import relative_error

    data = np.load(folder / f"{name}.npz")
    inputs = [data[f"input{i}"] for i in range(len(data.files) - 1)]
    kind = (folder / f"{name}.kind").read_text()
    loaded = retarget.load(str(folder / f"{name}.rtm"), device=DEVICE)
    got = loaded.main(*inputs)
    error = float(relative_error(np.asarray(got, np.float32), data["expected"].astype(np.float32)))
    result = {"name": name, "kind": kind, "relative_error": error, "ok": error <= TOLERANCE[kind]}
    del loaded, got  # every buffer, executable and stream freed before exit: the leak check sees the rest
    gc.collect()
    return result


# memcheck and synccheck end with "ERROR SUMMARY: N errors"; racecheck with "RACECHECK SUMMARY: H hazards
# displayed (N errors, W warnings)"
SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) error|RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) error")


def summarize(out: Path) -> dict:
    """Read the logs under OUT/sanitizer, OUT/leaks-*.json and OUT/pytest-*.txt into one report."""
    report: dict = {"sanitizer": {}, "leaks": {}, "tests": {}}
    for log in sorted((out / "sanitizer").glob("*.log")):
        tool, name = log.stem.split("-", 1)
        text = log.read_text(errors="replace")
        errors = [int(a or b) for a, b in SUMMARY.findall(text)]
        results = [json.loads(line[len("RESULT "):]) for line in text.splitlines() if line.startswith("RESULT ")]
        report["sanitizer"].setdefault(name, {})[tool] = {
            "errors": errors[-1] if errors else None,  # None: the tool did not finish (see the log)
            "ran": bool(results), "ok": bool(results) and results[-1]["ok"],
            "relative_error": results[-1]["relative_error"] if results else None}
    for path in sorted(out.glob("leaks-*.json")):
        try:
            report["leaks"][path.stem.removeprefix("leaks-")] = json.loads(path.read_text())
        except json.JSONDecodeError:
            report["leaks"][path.stem.removeprefix("leaks-")] = {"error": path.read_text()[-2000:]}
    for path in sorted(out.glob("pytest-*.txt")):
        tail = path.read_text(errors="replace").strip().splitlines()[-1:] or [""]
        report["tests"][path.stem.removeprefix("pytest-")] = tail[0]
    (out / "reliability.json").write_text(json.dumps(report, indent=1))
    lines = ["| case | memcheck errors | racecheck errors | synccheck errors | result vs reference |",
             "|---|---|---|---|---|"]
    for name, tools in report["sanitizer"].items():
        first = next(iter(tools.values()))
        cells = [str(tools[t]["errors"]) if t in tools else "-" for t in ("memcheck", "racecheck", "synccheck")]
        verdict = "did not run" if not first["ran"] else \
            f"{'ok' if first['ok'] else 'WRONG'} ({first['relative_error']:.1e})"
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {verdict} |")
    for device, leak in report["leaks"].items():
        if "call" not in leak:
            lines.append(f"\n{device} leaks: failed: {leak.get('error', '')[-300:]}")
            continue
        for kind, count in (("call", "calls"), ("load", "loads")):
            r = leak[kind]
            lines.append(f"\n{device}, {r[count]:,} {count}: traced {r['traced']['total']:+,} B, RSS "
                         f"{_maybe(r['rss']['total'])}, device {_maybe(r['device']['total'])}, threads "
                         f"{r['threads']['total']:+}")
    for name, tail in report["tests"].items():
        lines.append(f"\npytest {name}: {tail}")
    (out / "reliability.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return report


def _maybe(value) -> str:
    return "n/a" if value is None else f"{value:+,} B"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", choices=("prepare", "names", "run", "summarize"))
    parser.add_argument("folder", type=Path)
    parser.add_argument("name", nargs="?")
    args = parser.parse_args()
    if args.step == "prepare":
        prepare(args.folder)
    elif args.step == "names":
        print("\n".join(names(args.folder)))
    elif args.step == "run":
        result = run(args.folder, args.name)
        print("RESULT " + json.dumps(result), flush=True)
        return 0 if result["ok"] else 1
    else:
        summarize(args.folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
