"""One GPU target on this machine's GPU: correctness against torch, then medians, beside torch eager and torch
with a CUDA graph (when torch has CUDA), interleaved per model.

    python3 benchmarks/gpu/run_target.py --target vulkan-spirv:host --device vulkan [--models mlp] [--repeats 30]
    python3 benchmarks/gpu/run_target.py --target webgpu-spirv:host --device webgpu
(writes $OUT/<device>.json if OUT is set)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import warnings

warnings.filterwarnings("ignore")


def main():
    import retarget
    import torch
    from retarget.compiler import import_model
    from retarget.testing import zoo
    from retarget.testing.numerics import relative_error

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=list(zoo.MODELS))
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--target", default="webgpu-spirv:host")
    parser.add_argument("--device", default="webgpu")
    args = parser.parse_args()
    device = retarget.devices()
    adapter = next((d for d in device if d.driver == args.device.partition(":")[0]), None)
    print("adapter:", adapter.name if adapter else None, "available:", adapter.available if adapter else False)
    rows = []
    for name in args.models:
        model, inputs = zoo.make(name)
        with torch.no_grad():
            expected = model(*inputs).numpy()
        start = time.perf_counter()
        art = retarget.compile(import_model(model, example_inputs=inputs), args.target)
        compile_s = time.perf_counter() - start
        fn = retarget.load(art, device=args.device).main
        arrays = [x.numpy() for x in inputs]
        err = relative_error(fn(*arrays), expected)
        runners = {"retarget": lambda fn=fn, arrays=arrays: fn(*arrays), **torch_runners(model, inputs)}
        times = {r: [] for r in runners}
        for run in runners.values():
            for _ in range(3):
                run()
        for _ in range(args.repeats):
            for r, run in runners.items():
                t = time.perf_counter()
                run()
                times[r].append((time.perf_counter() - t) * 1e3)
        for r, samples in times.items():
            rows.append({"model": name, "runner": r, "median_ms": statistics.median(samples), "min_ms": min(samples),
                         "max_ms": max(samples), "relative_error": err if r == "retarget" else None,
                         "compile_s": compile_s if r == "retarget" else None})
    print(f"{'model':18s} {'runner':14s} {'median ms':>10s} {'min':>8s} {'max':>8s} {'rel err':>9s} {'compile s':>9s}")
    for r in rows:
        err = f"{r['relative_error']:9.1e}" if r["relative_error"] is not None else f"{'':9s}"
        comp = f"{r['compile_s']:9.2f}" if r["compile_s"] is not None else ""
        print(f"{r['model']:18s} {r['runner']:14s} {r['median_ms']:10.3f} {r['min_ms']:8.3f} {r['max_ms']:8.3f} "
              f"{err} {comp}")
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], f"{args.device.partition(':')[0]}.json"), "w") as f:
            json.dump({"adapter": adapter.name if adapter else None, "target": args.target, "results": rows}, f,
                      indent=1)


def torch_runners(model, inputs) -> dict:
    """torch eager and torch replaying a CUDA graph, each copying the input in and the output out, as
    retarget's call does (numpy in, numpy out)."""
    import torch

    if not torch.cuda.is_available():
        return {}
    model = model.cuda().eval()
    host = [x.numpy() for x in inputs]
    static = [x.cuda() for x in inputs]

    def eager():
        with torch.no_grad():
            return model(*[torch.from_numpy(h).cuda() for h in host]).cpu().numpy()

    with torch.no_grad():
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                model(*static)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = model(*static)

    def graphed():
        for s, h in zip(static, host):
            s.copy_(torch.from_numpy(h))
        graph.replay()
        return out.cpu().numpy()

    return {"torch eager": eager, "torch graph": graphed}


if __name__ == "__main__":
    main()
