"""fp16 mode on the GPU (issue 5's "report the figures"): each zoo model compiled with --precision f16 (f16
tensors, f32 sums; f32 in and out) beside the same model in f32, on cuda (inputs and outputs on the GPU) and
vulkan, and torch's own half-precision model (model.half(), a CUDA graph), medians of interleaved calls in
one process. Errors are against torch in fp32 on the CPU; f16's are expected near 1e-3, so they are
reported, not judged by the f32 tolerance.

    . benchmarks/gpu/preamble.sh; OUT=/tmp/out python3 benchmarks/gpu/fp16.py [--repeats 40]

Writes $OUT/fp16.json and prints the table.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")


def main() -> int:
    import retarget
    import torch
    from retarget.bench.peers import capture_cuda_graph
    from retarget.bench.timing import Runner, measure, resident_runner
    from retarget.compiler import import_model
    from retarget.testing import zoo

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--models", nargs="*", default=["mlp", "mobilenet_v2", "resnet18", "transformer_block"])
    parser.add_argument("--devices", nargs="*", default=["cuda", "vulkan"])
    args = parser.parse_args()
    targets = {"cuda": "cuda:host", "vulkan": "vulkan-spirv:host"}
    rows = []
    for name in args.models:
        model, inputs = zoo.make(name)
        module = import_model(model, example_inputs=inputs)
        x = inputs[0].numpy()
        with torch.no_grad():
            expected = model(*inputs).numpy()
        runners = []
        for device in args.devices:
            for precision in ("f32", "f16"):
                artifact = retarget.compile(module, targets[device], precision=precision)
                fn = next(iter(retarget.load(artifact, device=device).functions.values()))
                label = f"{name} {device} {precision}"
                if getattr(fn.module.device, "dlpack_device", None) is not None:
                    runner = resident_runner(fn, [x], label + " on device")
                else:
                    runner = Runner(label, lambda fn=fn, x=x: fn(x))
                runner.device_time = lambda fn=fn: fn.module.device.timed_submit(fn.command_buffer)
                runners.append(runner)
        if torch.cuda.is_available():
            half = copy.deepcopy(model).half().cuda().eval()
            graph, static_y = capture_cuda_graph(half, [inputs[0].half().cuda()])

            def torch_call(graph=graph):
                graph.replay()
                torch.cuda.synchronize()

            runners.append(Runner(f"{name} torch f16 cuda graph", torch_call,
                                  result=lambda call=torch_call, y=static_y: (call(), y.float().cpu().numpy())[1]))
        for m in measure(runners, expected, repeats=args.repeats, tolerance=5e-2):
            rows.append({"runner": m.runner.label, "relative_error": m.relative_error, "error": m.error,
                         "median_ms": m.wall.median_ms if m.wall else None,
                         "device_ms": m.device.median_ms if m.device else None})
    print(f"{'runner':44} {'call ms':>8} {'device ms':>10}  rel. error")
    for r in rows:
        device = f"{r['device_ms']:.4f}" if r["device_ms"] else "-"
        error = f"{r['relative_error']:.1e}" if r["relative_error"] is not None else r["error"]
        print(f"{r['runner']:44} {r['median_ms'] or float('nan'):8.4f} {device:>10}  {error}")
    out = os.environ.get("OUT")
    if out:
        Path(out, "fp16.json").write_text(json.dumps({"rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
