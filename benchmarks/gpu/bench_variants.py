"""Variants of the cuda backend side by side, in one process: end-to-end time, where a call's time goes,
and the slowest kernels of each.

    python benchmarks/gpu/bench_variants.py [--models mobilenet_v2] [--repeats 50] [--before DIR]
        [--tune mobilenet_v2]

A variant is a GPU lowering: the `_GpuLowering` tuning constants, or an older `lower.py` given with
`--before DIR` (e.g. `git show HEAD~1:core/src/retarget/kernel/lower.py > DIR/lower.py`).
For each model and variant: compile for `cuda:host`, check against torch on the GPU (relative error
1e-4, TF32 off), then time, runners interleaved round-robin:

- call: `m.main(x)` with numpy in and out, graph mode (what run_cuda.py reports);
- replay: one cuGraphLaunch and a sync (the kernels alone, with launch gaps);
- copy in: the input writes and a sync.

Per-kernel times come from CUDA events around each launch in direct mode (medians of 20). With $OUT set,
everything goes to $OUT/variants.json; the tables are printed last.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import retarget
import retarget.kernel.lower as lower
from retarget.compiler import import_model
from retarget.testing import zoo
from retarget.testing.numerics import relative_error

warnings.filterwarnings("ignore")
TOLERANCE = 1e-4
TUNING = {  # variant name -> _GpuLowering constants (tried on the --tune models)
    "tile from 1024/SM": {"TILE_THREADS_PER_SM": 1024},
    "tile from 128/SM": {"TILE_THREADS_PER_SM": 128},
    "tile 1": {"CHANNELS_PER_THREAD": 1},
}


def _old_lowering(directory: str):
    spec = importlib.util.spec_from_file_location("retarget.kernel._lower_before", Path(directory) / "lower.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.lower_dispatch


def compile_variant(model, inputs, lower_fn=None, constants=None):
    """(artifact, {kernel name: schedule}) with `lower_fn` or the `_GpuLowering` constants in place."""
    saved_fn = lower.lower_dispatch
    saved = {key: getattr(lower._GpuLowering, key) for key in constants or {}}
    schedules = {}
    base = lower_fn or saved_fn

    def recording(fn, desc):
        kernel = base(fn, desc)
        schedules[kernel.name] = {**kernel.schedule, "out": list(fn.returns[0].type.shape)}
        return kernel

    lower.lower_dispatch = recording
    for key, value in (constants or {}).items():
        setattr(lower._GpuLowering, key, value)
    try:
        return retarget.compile(import_model(model, example_inputs=inputs), "cuda:host"), schedules
    finally:
        lower.lower_dispatch = saved_fn
        for key, value in saved.items():
            setattr(lower._GpuLowering, key, value)


def kernel_times(fn, repeats: int = 20) -> list[tuple[str, float]]:
    """[(entry name, median us)] of each launch of `fn`'s command buffer, timed with events (direct mode)."""
    from retarget_cuda.driver import _cu, check

    cu = _cu()
    device, cb = fn.module.device, fn.command_buffer
    names = [fn.module.executable.entry_points[c["entry"]].name for c in fn.plan["program"] if c["op"] != "barrier"]
    events = [check(cu.cuEventCreate(0), "cuEventCreate") for _ in range(len(cb.commands) + 1)]
    samples = [[] for _ in cb.commands]
    for _ in range(repeats):
        check(cu.cuEventRecord(events[0], device.stream), "cuEventRecord")
        for i, command in enumerate(cb.commands):
            command(device.stream)
            check(cu.cuEventRecord(events[i + 1], device.stream), "cuEventRecord")
        device.wait()
        for i in range(len(cb.commands)):
            samples[i].append(check(cu.cuEventElapsedTime(events[i], events[i + 1]), "cuEventElapsedTime") * 1e3)
    for e in events:
        cu.cuEventDestroy(e)
    return [(name, statistics.median(s)) for name, s in zip(names, samples)]


def runners(loaded, arrays) -> dict:
    fn, device = loaded.main, loaded.device
    from retarget_cuda.driver import _cu, check

    cu = _cu()

    def replay():
        check(cu.cuGraphLaunch(fn.command_buffer.graph_exec, device.stream), "cuGraphLaunch")
        device.wait()

    def copy_in():
        for a, meta in zip(arrays, fn.plan["inputs"]):
            device.write(fn.arena, meta["slot"][1], a)
        device.wait()

    return {"call": lambda: fn(*arrays), "replay": replay, "copy in": copy_in}


def torch_runners(model, inputs) -> tuple[dict, np.ndarray]:
    import torch

    gpu_model = model.to("cuda")
    gpu_inputs = [x.to("cuda") for x in inputs]
    with torch.no_grad():
        expected = gpu_model(*gpu_inputs).cpu().numpy()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.no_grad():
        for _ in range(3):
            gpu_model(*gpu_inputs)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        gpu_model(*gpu_inputs)

    def graphed():
        graph.replay()
        torch.cuda.synchronize()

    return {"torch cuda graph": graphed}, expected


def interleave(fns: dict, repeats: int) -> dict:
    for f in fns.values():
        for _ in range(3):
            f()
    times = {label: [] for label in fns}
    for _ in range(repeats):
        for label, f in fns.items():
            start = time.perf_counter()
            f()
            times[label].append((time.perf_counter() - start) * 1e3)
    return {label: statistics.median(t) for label, t in times.items()}


def measure(name: str, variants: dict, repeats: int) -> dict:
    model, inputs = zoo.make(name)
    arrays = [x.numpy() for x in inputs]
    fns, expected = torch_runners(model, inputs)
    model = model.to("cpu")
    result = {"variants": {}}
    for label, (lower_fn, constants) in variants.items():
        start = time.perf_counter()
        artifact, schedules = compile_variant(model, inputs, lower_fn, constants)
        compile_s = time.perf_counter() - start
        loaded = retarget.load(artifact, device="cuda")
        error = float(relative_error(loaded.main(*arrays), expected))
        info = {"compile_s": compile_s, "error": error, "kernels": len(schedules)}
        result["variants"][label] = info
        if not error <= TOLERANCE:
            info["failed"] = f"relative error {error:.2e}"
            print(f"{name} / {label}: WRONG, relative error {error:.2e}", flush=True)
            continue
        loaded.device.graphs = False
        per_kernel = kernel_times(loaded.main)
        loaded.device.graphs = True
        loaded.main(*arrays)  # captures the graph
        info["kernel_sum_us"] = sum(t for _, t in per_kernel)
        info["slowest"] = [{"kernel": k, "us": t, **schedules.get(k, {})}
                           for k, t in sorted(per_kernel, key=lambda p: -p[1])[:8]]
        for part, f in runners(loaded, arrays).items():
            fns[f"{label} | {part}"] = f
        print(f"{name} / {label}: error {error:.1e}, compile {compile_s:.2f} s, kernel sum "
              f"{info['kernel_sum_us']:.0f} us over {len(per_kernel)} kernels", flush=True)
    medians = interleave(fns, repeats)
    result["torch cuda graph ms"] = medians.pop("torch cuda graph")
    for key, ms in medians.items():
        label, part = key.split(" | ")
        result["variants"][label][f"{part} ms"] = ms
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="*", default=list(zoo.MODELS))
    parser.add_argument("--tune", nargs="*", default=[], help="models that also get the TUNING variants")
    parser.add_argument("--before", help="a folder holding an older lower.py: the 'before' variant")
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args()

    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    variants = {}
    if args.before:
        variants["before"] = (_old_lowering(args.before), None)
    variants["after"] = (None, None)
    results = {}
    for name in args.models:
        chosen = dict(variants)
        if name in args.tune:
            chosen.update({label: (None, constants) for label, constants in TUNING.items()})
        results[name] = measure(name, chosen, args.repeats)
    if os.environ.get("OUT"):
        (Path(os.environ["OUT"]) / "variants.json").write_text(json.dumps(results, indent=1))
    for name, r in results.items():
        print(f"\n{name}: torch cuda graph {r['torch cuda graph ms']:.3f} ms")
        print(f"  {'variant':<18} {'call ms':>8} {'replay ms':>10} {'copy in ms':>11} {'kernels us':>11} {'error':>8}")
        for label, v in r["variants"].items():
            if "failed" in v:
                print(f"  {label:<18} FAILED: {v['failed']}")
                continue
            print(f"  {label:<18} {v['call ms']:>8.3f} {v['replay ms']:>10.3f} {v['copy in ms']:>11.3f} "
                  f"{v['kernel_sum_us']:>11.0f} {v['error']:>8.1e}")
    for name, r in results.items():
        for label in ("before", "after"):
            v = r["variants"].get(label)
            if not v or "slowest" not in v:
                continue
            print(f"\n{name} / {label}: slowest kernels")
            for s in v["slowest"]:
                extra = {key: s[key] for key in ("strategy", "slices", "tile", "out") if key in s}
                print(f"  {s['us']:8.1f} us  {s['kernel']:<40} {extra}")


if __name__ == "__main__":
    main()
