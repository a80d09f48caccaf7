"""The zoo on a CUDA GPU: retarget's cuda target against PyTorch, in one process and interleaved.

    bash benchmarks/gpu/run.sh [--models mlp resnet18] [--repeats 50]

For each model: compile for `cuda:host`, check the output against torch on the GPU (relative error,
1e-4), then time, round-robin so that noise hits every runner alike:

- retarget cuda, direct: one cuLaunchKernel per dispatch;
- retarget cuda, graph: the dispatches replayed as one CUDA graph;
- torch eager, and torch with a CUDA graph (torch.cuda.CUDAGraph), inputs already on the GPU;
- torch eager including the copies in and out, which is what a retarget call does (numpy in, numpy out).

Every time is wall-clock (perf_counter) around one call that ends synchronised: retarget's calls
return host arrays; torch's are followed by torch.cuda.synchronize(). TF32 is off in torch, since
retarget computes in plain fp32. Medians, min and max in ms over `--repeats` runs after warm-up.
The table is printed last; with $OUT set the results also go to $OUT/cuda.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
import traceback
import warnings
from pathlib import Path

import retarget
from retarget.compiler import import_model
from retarget.testing import zoo
from retarget.testing.numerics import relative_error

warnings.filterwarnings("ignore")
TOLERANCE = 1e-4


def runners(name: str) -> tuple[dict, dict]:
    """({label: callable}, facts about the model: compile time, kernels, errors against torch)."""
    import torch

    model, inputs = zoo.make(name)
    arrays = [x.numpy() for x in inputs]
    start = time.perf_counter()
    artifact = retarget.compile(import_model(model, example_inputs=inputs), "cuda:host")
    facts = {"compile_s": time.perf_counter() - start,
             "kernels": len(artifact.manifest["executables"][0]["entry_points"]),
             "arch": artifact.manifest["executables"][0]["arch"]}

    gpu_model = model.to("cuda")  # after importing: torch.export saw the CPU model
    gpu_inputs = [x.to("cuda") for x in inputs]
    with torch.no_grad():
        expected = gpu_model(*gpu_inputs).cpu().numpy()
    out = {}
    for mode, graphs in (("direct", False), ("graph", True)):
        loaded = retarget.load(artifact, device="cuda")
        loaded.device.graphs = graphs
        fn = loaded.main
        error = relative_error(fn(*arrays), expected)
        facts[f"error {mode}"] = float(error)
        if error > TOLERANCE:
            raise AssertionError(f"{name}: retarget cuda {mode} differs from torch: relative error {error:.2e}")
        out[f"retarget cuda {mode}"] = lambda fn=fn: fn(*arrays)

    def eager():
        with torch.no_grad():
            gpu_model(*gpu_inputs)
        torch.cuda.synchronize()

    def eager_with_copies():
        with torch.no_grad():
            gpu_model(*[torch.from_numpy(a).to("cuda") for a in arrays]).cpu().numpy()

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.no_grad():
        for _ in range(3):  # warm-up on a side stream, as torch.cuda.graphs asks
            gpu_model(*gpu_inputs)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        graph_out = gpu_model(*gpu_inputs)

    def graphed():
        graph.replay()
        torch.cuda.synchronize()

    graphed()
    facts["error torch graph"] = float(relative_error(graph_out.cpu().numpy(), expected))
    out["torch eager"] = eager
    out["torch cuda graph"] = graphed
    out["torch eager + copies"] = eager_with_copies
    return out, facts


def measure(name: str, repeats: int) -> tuple[list[dict], dict]:
    fns, facts = runners(name)
    for fn in fns.values():
        for _ in range(3):
            fn()
    times = {label: [] for label in fns}
    for _ in range(repeats):
        for label, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[label].append((time.perf_counter() - start) * 1e3)
    rows = [{"model": name, "runner": label, "median_ms": statistics.median(t), "min_ms": min(t), "max_ms": max(t),
             "repeats": repeats} for label, t in times.items()]
    return rows, facts


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="*", default=list(zoo.MODELS))
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args()

    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    from retarget_cuda.driver import CUDA

    devices = [d for d in CUDA.enumerate() if d.available]
    if not devices:
        raise SystemExit(f"no CUDA device: {CUDA.enumerate()[0].reason}")
    machine = {"gpu": devices[0].name, **devices[0].properties, "python": platform.python_version(),
               "torch": torch.__version__, "cpu": platform.processor() or platform.machine()}
    try:
        from retarget_cuda.compile import nvrtc_version

        machine["nvrtc"] = nvrtc_version()
    except Exception as e:  # reported, and each model's compile will then fail with the reason
        machine["nvrtc"] = f"unavailable: {e}"
    print(json.dumps(machine))

    rows, facts, failures = [], {}, {}
    for name in args.models:
        try:
            model_rows, facts[name] = measure(name, args.repeats)
            rows += model_rows
            print(f"{name}: {json.dumps(facts[name])}", flush=True)
        except Exception as e:  # one model's failure is reported, the others still run
            failures[name] = f"{type(e).__name__}: {e}"
            traceback.print_exc()

    if os.environ.get("OUT"):
        path = Path(os.environ["OUT"]) / "cuda.json"
        path.write_text(json.dumps({"machine": machine, "models": facts, "failures": failures, "results": rows},
                                   indent=1))
    print()
    print(f"{'model':<18} {'runner':<24} {'median ms':>10} {'min':>9} {'max':>9}")
    for r in rows:
        print(f"{r['model']:<18} {r['runner']:<24} {r['median_ms']:>10.3f} {r['min_ms']:>9.3f} {r['max_ms']:>9.3f}")
    for name, error in failures.items():
        print(f"{name:<18} FAILED: {error}")


if __name__ == "__main__":
    main()
