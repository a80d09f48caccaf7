"""Strided transposed convolutions: one conv2d a phase (the default) against the zero-stuffed input, on one device.

    .venv/bin/python benchmarks/conv_transpose.py [--pairs llvm-cpu=local-task vulkan-spirv:host=vulkan]
        [--repeats 30] [--json out.json]

Each layer (decoder and GAN upsamplings: 4x4 stride 2, 3x3 stride 2 with an output padding, 2x2 stride 2, and a
3x3 stride 3) is compiled both ways (`compose.CONV_TRANSPOSE_PHASES`), checked against torch, then the two run
interleaved, so that machine noise hits both alike. Reported: medians and minimums in ms, and the ratio of medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings

warnings.filterwarnings("ignore")

# (name, in channels, out channels, kernel, stride, padding, output padding, input size)
LAYERS = [("dcgan 256->128 k4 s2 p1, 16x16", 256, 128, 4, 2, 1, 0, 16),
          ("unet 128->64 k3 s2 p1 op1, 32x32", 128, 64, 3, 2, 1, 1, 32),
          ("unet 64->32 k2 s2, 64x64", 64, 32, 2, 2, 0, 0, 64),
          ("k3 s3 64->64, 24x24", 64, 64, 3, 3, 0, 0, 24)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", nargs="+", default=["llvm-cpu=local-task"], metavar="TARGET=DEVICE")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()

    import numpy as np
    import retarget
    import torch
    from retarget.importers import compose
    from retarget.testing.numerics import relative_error

    rows = []
    print("| layer | target | zero-stuffed ms (min) | phases ms (min) | speed-up |\n|---|---|---|---|---|")
    for name, cin, cout, k, s, p, op, size in LAYERS:
        torch.manual_seed(0)
        layer = torch.nn.ConvTranspose2d(cin, cout, k, s, p, op).eval()
        x = torch.randn(1, cin, size, size)
        with torch.no_grad():
            expected = layer(x).numpy()
        for pair in args.pairs:
            target, _, device = pair.partition("=")
            calls = {}
            for phases in (False, True):
                compose.CONV_TRANSPOSE_PHASES = phases
                try:
                    fn = retarget.load(retarget.compile(layer, target, example_inputs=(x,)), device=device).main
                finally:
                    compose.CONV_TRANSPOSE_PHASES = True
                error = relative_error(np.asarray(fn(x.numpy())), expected)
                if error > 1e-4:
                    raise SystemExit(f"{name} on {pair} ({'phases' if phases else 'zero-stuffed'}): error {error:.1e}")
                calls[phases] = fn
            times = {False: [], True: []}
            for _ in range(args.repeats):
                for phases, fn in calls.items():
                    start = time.perf_counter()
                    fn(x.numpy())
                    times[phases].append((time.perf_counter() - start) * 1e3)
            old, new = (statistics.median(times[v]) for v in (False, True))
            rows.append({"layer": name, "pair": pair, "zero_stuffed_ms": old, "phases_ms": new,
                         "zero_stuffed_min_ms": min(times[False]), "phases_min_ms": min(times[True])})
            print(f"| {name} | {pair} | {old:.3f} ({min(times[False]):.3f}) | {new:.3f} ({min(times[True]):.3f}) "
                  f"| {old / new:.2f}x |", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
