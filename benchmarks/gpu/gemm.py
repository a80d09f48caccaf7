"""f16 GEMMs on one GPU target beside torch.matmul (cuBLAS): correctness at small sizes (with a bias+ReLU
epilogue), then device time at large ones. retarget's time is the device's own (timestamps around one
submit of the recorded function), torch's is CUDA events around torch.matmul; both are medians.

    python3 benchmarks/gpu/gemm.py --target vulkan-spirv:host --device vulkan [--sizes 1024 4096] [--repeats 20]
(writes $OUT/gemm-<device>.json if OUT is set)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import warnings

import numpy as np

warnings.filterwarnings("ignore")


def main():
    import torch

    import retarget
    from retarget.testing.numerics import relative_error

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="vulkan-spirv:host")
    parser.add_argument("--device", default="vulkan")
    parser.add_argument("--sizes", type=int, nargs="*", default=[1024, 2048, 4096])
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()

    class MatmulBiasRelu(torch.nn.Module):
        def forward(self, a, b, bias):
            return torch.relu(a @ b + bias)

    class Matmul(torch.nn.Module):
        def forward(self, a, b):
            return a @ b

    rng = np.random.default_rng(0)
    rows = []
    for m, n, kk in ((512, 512, 512), (70, 200, 96)):  # correctness, awkward shapes included
        a, b, bias = (rng.standard_normal(s).astype(np.float16) for s in ((m, kk), (kk, n), (n,)))
        art = retarget.compile(MatmulBiasRelu(), args.target, example_inputs=tuple(map(torch.from_numpy, (a, b, bias))))
        out = retarget.load(art, device=args.device).main(a, b, bias)
        expected = np.maximum(a.astype(np.float32) @ b.astype(np.float32) + bias.astype(np.float32), 0)
        err = relative_error(out.astype(np.float32), expected)
        rows.append({"check": f"{m}x{n}x{kk} +bias relu", "relative_error": float(err)})
        print(f"check {m}x{n}x{kk}: relative error {err:.1e}", flush=True)
    for size in args.sizes:
        a, b = (rng.standard_normal((size, size)).astype(np.float16) for _ in range(2))
        start = time.perf_counter()
        art = retarget.compile(Matmul(), args.target, example_inputs=(torch.from_numpy(a), torch.from_numpy(b)))
        compile_s = time.perf_counter() - start
        loaded = retarget.load(art, device=args.device)
        fn = loaded.main
        out = fn(a, b)
        cuda = torch.cuda.is_available()
        ta, tb = (torch.from_numpy(x).cuda() if cuda else torch.from_numpy(x) for x in (a, b))
        expected = (ta.float() @ tb.float()).cpu().numpy()
        err = relative_error(out.astype(np.float32), expected)
        seconds = loaded.device.time(fn.command_buffer, args.repeats)
        ours = statistics.median(seconds) * 1e3
        torch_ms = [float("nan")] * 4
        for _ in range(args.repeats + 3 if cuda else 0):
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            torch.matmul(ta, tb)
            end.record()
            torch.cuda.synchronize()
            torch_ms.append(begin.elapsed_time(end))
        theirs = statistics.median(torch_ms[3:])  # nan without CUDA (a local dry run)
        flop = 2 * size**3
        row = {"size": size, "retarget_ms": ours, "torch_ms": theirs, "retarget_tflops": flop / ours / 1e9,
               "torch_tflops": flop / theirs / 1e9, "relative_error": float(err), "compile_s": compile_s}
        rows.append(row)
        print(f"gemm {size}^3 f16: retarget {ours:.3f} ms ({row['retarget_tflops']:.1f} TFLOP/s), torch {theirs:.3f} ms "
              f"({row['torch_tflops']:.1f} TFLOP/s), ratio {theirs / ours:.2f}x, rel err {err:.1e}", flush=True)
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], f"gemm-{args.device.partition(':')[0]}.json"), "w") as f:
            json.dump({"target": args.target, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
