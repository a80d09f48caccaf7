"""Where a call's time goes on cuda, one model at a time: numpy in and out against DLPack in and out, in each
command-buffer mode, beside torch with a CUDA graph, runners interleaved in one process (medians).

    python3 benchmarks/gpu/calls.py [--models mobilenet_v2 resnet18] [--repeats 50] [--index64] [--profile CALLS]
        [--target cuda:h100]

Every runner's result is checked against torch (fp32, TF32 off) before it is timed. "device ms" is the GPU's
own time for the recorded command buffer (events around one submit), without copies or Python.
`--index64` adds the same kernels with CUDA C's index arithmetic left in 64 bits (what the CUDA dialect did
before `retarget.kernel.index32`). With $OUT set, writes $OUT/calls.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import warnings

import numpy as np

warnings.filterwarnings("ignore")


def bench(name, args, report):
    import retarget
    import torch
    from retarget.bench.peers import capture_cuda_graph
    from retarget.bench.timing import Runner, check_output, interleave, per_dispatch
    from retarget.compiler import import_model
    from retarget.kernel import c_renderer
    from retarget.testing import zoo

    model, inputs = zoo.make(name)
    module = import_model(model, example_inputs=inputs)
    x = inputs[0].numpy()
    gpu_model = model.cuda().eval()
    xg = inputs[0].cuda()
    with torch.no_grad():
        expected = gpu_model(xg).cpu().numpy()
    variants = {"": retarget.compile(module, args.target)}
    if args.index64:
        saved = c_renderer.CUDA
        c_renderer.CUDA = dataclasses.replace(saved, index32=False)  # retarget_cuda reads it at compile time
        try:
            variants[" index64"] = retarget.compile(module, args.target)
        finally:
            c_renderer.CUDA = saved
    runners = []
    for variant, art in variants.items():
        for mode in ("graph", "stream", "direct"):
            loaded = retarget.load(art, device="cuda", mode=mode)
            fn = loaded.main
            device = loaded.device

            def device_time(fn=fn, device=device):
                return device.timed_submit(fn.command_buffer)

            runners.append(Runner(f"retarget {mode}{variant} numpy", lambda fn=fn: fn(x), None, device_time))
            last = {}

            def dlpack_call(fn=fn, last=last):
                last["y"] = fn(xg)
                return last["y"]

            runners.append(Runner(f"retarget {mode}{variant} dlpack", dlpack_call,
                                  lambda last=last: np.asarray(last["y"]), device_time))
            runners.append(Runner(f"retarget {mode}{variant} dlpack in, numpy out",
                                  lambda fn=fn: fn(xg, output="host"), None, device_time))
    static_x = xg.clone()
    graph, static_y = capture_cuda_graph(gpu_model, [static_x])

    def torch_graph():
        static_x.copy_(xg)
        graph.replay()
        torch.cuda.synchronize()
        return static_y

    def torch_device_time():
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / 1e3

    runners.append(Runner("torch cuda graph (tensors on the GPU)", torch_graph,
                          lambda: static_y.cpu().numpy(), torch_device_time))
    ok = []
    for r in runners:
        out = r.call()
        error, correct = check_output(r.result() if r.result else out, expected)
        print(f"{name}: {r.label}: relative error {error:.1e}{'' if correct else '  WRONG'}", flush=True)
        if correct:
            ok.append(r)
    if args.per_dispatch:
        fn = retarget.load(variants[""], device="cuda").main
        breakdown = per_dispatch(fn, [x], repeats=20)
        slowest = sorted(breakdown["dispatches"], key=lambda d: -(d["device_time"] or {}).get("median_ms", 0))
        print(f"{name}: {len(breakdown['dispatches'])} dispatches, sum {breakdown['sum_ms']:.3f} ms, whole "
              f"{breakdown['whole']['device_time']['median_ms']:.3f} ms (device)")
        for d in slowest[:args.per_dispatch]:
            print(f"  {d['device_time']['median_ms'] * 1e3:8.1f} us  {d['name']}  grid {d['workgroups']} "
                  f"x {d['workgroup_size']}")
        report.append({"model": name, "per_dispatch": breakdown})
    if args.profile:
        import cProfile
        import pstats

        for r in ok:
            if not r.label.startswith("retarget graph"):
                continue
            profiler = cProfile.Profile()
            profiler.enable()
            for _ in range(args.profile):
                r.call()
            profiler.disable()
            print(f"-- {name}: {r.label}, {args.profile} calls, by own time")
            pstats.Stats(profiler).sort_stats("tottime").print_stats(14)
    measurements = interleave(ok, args.repeats)
    for m in measurements:
        device = m.device.median_ms if m.device else float("nan")
        row = {"model": name, "runner": m.runner.label, "median_ms": m.wall.median_ms, "min_ms": m.wall.min_ms,
               "max_ms": m.wall.max_ms, "device_ms": device, "error": m.error}
        report.append(row)


def main():
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=["mobilenet_v2"])
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--index64", action="store_true")
    parser.add_argument("--target", default="cuda:host", help="what to compile for (e.g. cuda:h100, a named product)")
    parser.add_argument("--profile", type=int, default=0, metavar="CALLS",
                        help="profile CALLS calls of each graph-mode runner (cProfile, top functions by own time)")
    parser.add_argument("--per-dispatch", type=int, default=12, metavar="N",
                        help="print the N slowest dispatches of each model (graph mode, device time)")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    report = []
    for name in args.models:
        bench(name, args, report)
    print(f"\n{'model':<14} {'runner':<44} {'median ms':>10} {'min':>8} {'device ms':>10}")
    for row in report:
        if "runner" not in row:
            continue
        print(f"{row['model']:<14} {row['runner']:<44} {row['median_ms']:>10.3f} {row['min_ms']:>8.3f} "
              f"{row['device_ms']:>10.3f}")
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "calls.json"), "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
