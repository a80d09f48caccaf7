"""The ops composed this session (3-D convolutions, grid_sample, the scatters, embedding_bag) against torch on one
device, each layer compiled once, checked, then run interleaved with torch's own call so that noise hits both alike.

    .venv/bin/python benchmarks/new_ops.py [--pairs llvm-cpu=local-task vulkan-spirv:host=vulkan] [--repeats 30]
        [--json out.json] [--only TEXT]

torch runs on the CPU beside a CPU device, and on CUDA (when it has it) beside a GPU one. Reported: medians in ms
of a call with its copies in and out (ours: numpy in, numpy out; torch's: the same tensors, synchronized), and the
ratio torch / ours (above 1: ours is faster). Beside cuda, the same calls with the tensors already on the GPU
(DLPack in and out, no copies): what the kernels cost. A small scatter compares every output position with every update
(`compose.scatter_elements`, gather-shaped); past `compose.SCATTER_KERNEL_PAIRS` comparisons it is the `rt.scatter`
kernel, whose cost grows with the updates, as torch's does.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings

warnings.filterwarnings("ignore")


def layers():
    """(name, module, example inputs): seeded, so every run times the same numbers."""
    import torch
    import torch.nn.functional as F

    def seeded(module, seed=0):
        torch.manual_seed(seed)
        return module.eval()

    def module_of(fn):
        class Fn(torch.nn.Module):
            def forward(self, *args):
                return fn(*args)
        return Fn().eval()

    g = torch.Generator().manual_seed(0)
    return [
        ("conv3d 16->32 k3 p1, 16x32x32", seeded(torch.nn.Conv3d(16, 32, 3, padding=1)),
         (torch.randn(1, 16, 16, 32, 32, generator=g),)),
        ("conv_transpose3d 32->16 k2 s2, 8x16x16", seeded(torch.nn.ConvTranspose3d(32, 16, 2, stride=2)),
         (torch.randn(1, 32, 8, 16, 16, generator=g),)),
        ("grid_sample bilinear zeros, 32x64x64 at 64x64", module_of(lambda x, grid: F.grid_sample(
            x, grid, "bilinear", "zeros", align_corners=False)),
         (torch.randn(1, 32, 64, 64, generator=g), torch.rand(1, 64, 64, 2, generator=g) * 2.2 - 1.1)),
        ("scatter_add 256 updates a row into 64x1024", module_of(lambda x, i, u: x.scatter_add(1, i, u)),
         (torch.randn(64, 1024, generator=g), torch.randint(0, 1024, (64, 256), generator=g),
          torch.randn(64, 256, generator=g))),
        ("index_put accumulate, 256 rows of 64 into 4096", module_of(
            lambda x, rows, v: torch.index_put(x, (rows,), v, accumulate=True)),
         (torch.randn(4096, 64, generator=g), torch.randint(0, 4096, (256,), generator=g),
          torch.randn(256, 64, generator=g))),
        ("x[rows] = v, 50000 distinct rows of 16 into 100000", module_of(_row_assignment),
         (torch.randn(100000, 16, generator=g), torch.randperm(100000, generator=g)[:50000],
          torch.randn(50000, 16, generator=g))),
        ("x[:, 1:64:2] = v (slice_scatter), 256x128", module_of(_strided_assignment),
         (torch.randn(256, 128, generator=g), torch.randn(256, 32, generator=g))),
        ("embedding_bag mean, 512 of 10000x64 in 32 bags", module_of(
            lambda i, o, w: F.embedding_bag(i, w, o, mode="mean")),
         (torch.randint(0, 10000, (512,), generator=g), torch.arange(0, 512, 16),
          torch.randn(10000, 64, generator=g))),
        ("index_add, 50000 rows of 16 into 100000", module_of(lambda x, rows, v: x.index_add(0, rows, v)),
         (torch.randn(100000, 16, generator=g), torch.randint(0, 100000, (50000,), generator=g),
          torch.randn(50000, 16, generator=g))),
        ("embedding_bag sum, 100000 of 5000x16 in 2048 bags", module_of(
            lambda i, o, w: F.embedding_bag(i, w, o, mode="sum")),
         (torch.randint(0, 5000, (100000,), generator=g),
          torch.cat([torch.zeros(1, dtype=torch.int64), torch.sort(torch.randint(0, 100000, (2047,), generator=g))[0]]),
          torch.randn(5000, 16, generator=g))),
    ]


def _row_assignment(x, rows, v):
    y = x.clone()
    y[rows] = v
    return y


def _strided_assignment(x, v):
    y = x.clone()
    y[:, 1:64:2] = v
    return y


def _median_ms(samples):
    return 1e3 * statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", nargs="+", default=["llvm-cpu=local-task"], metavar="TARGET=DEVICE")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--json", metavar="FILE")
    parser.add_argument("--only", metavar="TEXT", help="only the layers whose name contains TEXT")
    args = parser.parse_args()

    import numpy as np
    import retarget
    import torch
    from retarget.testing.numerics import relative_error

    rows = []
    print("| layer | target | ours ms | torch ms (device) | torch / ours | on the GPU: ours vs torch ms |\n"
          "|---|---|---|---|---|---|")
    for name, module, inputs in layers():
        if args.only and args.only not in name:
            continue
        with torch.no_grad():
            expected = module(*inputs).numpy()
        program = torch.export.export(module, inputs)
        arrays = [x.numpy() for x in inputs]
        for pair in args.pairs:
            target, _, device = pair.partition("=")
            fn = retarget.load(retarget.compile(program, target), device=device).main
            error = relative_error(np.asarray(fn(*arrays)), expected)
            if error > 1e-4:
                raise SystemExit(f"{name} on {pair}: relative error {error:.1e}")
            gpu = not device.startswith("local") and torch.cuda.is_available()
            peer_device = "cuda" if gpu else "cpu"
            peer_module = module.to(peer_device)

            def peer(module=peer_module, device=peer_device, inputs=inputs):
                with torch.no_grad():
                    out = module(*[x.to(device) for x in inputs]).cpu()
                if device == "cuda":
                    torch.cuda.synchronize()
                return out

            runners = {"ours_ms": lambda fn=fn, arrays=arrays: fn(*arrays), "torch_ms": peer}
            if device.startswith("cuda") and gpu:  # the same calls with the tensors already on the GPU (DLPack)
                on_gpu = [x.to("cuda") for x in inputs]

                def ours_on_device(fn=fn, on_gpu=on_gpu):
                    fn(*on_gpu, output="device")
                    torch.cuda.synchronize()

                def torch_on_device(module=peer_module, on_gpu=on_gpu):
                    with torch.no_grad():
                        module(*on_gpu)
                    torch.cuda.synchronize()

                runners.update(ours_on_device_ms=ours_on_device, torch_on_device_ms=torch_on_device)
            samples = {key: [] for key in runners}
            for _ in range(3):  # warm all
                for run in runners.values():
                    run()
            for _ in range(args.repeats):
                for key, run in runners.items():
                    start = time.perf_counter()
                    run()
                    samples[key].append(time.perf_counter() - start)
            module.to("cpu")
            row = {"layer": name, "pair": pair, **{key: _median_ms(v) for key, v in samples.items()},
                   "torch_device": peer_device, "relative_error": error}
            rows.append(row)
            on_device = (f" {row['ours_on_device_ms']:.3f} vs {row['torch_on_device_ms']:.3f} |"
                         if "ours_on_device_ms" in row else " |")
            print(f"| {name} | {target} | {row['ours_ms']:.3f} | {row['torch_ms']:.3f} ({peer_device}) | "
                  f"{row['torch_ms'] / row['ours_ms']:.2f} |{on_device}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
