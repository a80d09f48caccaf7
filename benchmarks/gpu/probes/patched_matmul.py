"""One size^3 matmul compiled with module constants patched, checked against torch and timed (median of 20
submits, device time). For probing a schedule's knobs; with RETARGET_VULKAN_PIPELINE_STATISTICS=1 the Vulkan
driver's register count and spill bytes are printed too.

    python3 benchmarks/gpu/probes/patched_matmul.py "{'PEEL_LAST_STEP': ()}" --size 4096

PATCH is a Python dict literal: plain names are `retarget.kernel.lower`'s constants, dotted ones name their
module (`retarget_vulkan_spirv.targets.LARGE_FRAGMENT_PLANS`). `--pipeline-cache FILE` (Vulkan) writes the
device's pipeline cache after the run: `vulkan_sass.py` turns NVIDIA's into the kernel's machine code.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import statistics

import numpy as np


def main():
    import retarget
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("patch", nargs="?", default="{}")
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--target", default="vulkan-spirv:host")
    parser.add_argument("--device", default="vulkan")
    parser.add_argument("--dtype", choices=["f16", "f32"], default="f16")
    parser.add_argument("--pipeline-cache", metavar="FILE")
    args = parser.parse_args()
    for key, value in ast.literal_eval(args.patch).items():
        place, _, name = key.rpartition(".")
        setattr(importlib.import_module(place or "retarget.kernel.lower"), name, value)

    class Matmul(torch.nn.Module):
        def forward(self, a, b):
            return a @ b

    a = torch.randn(args.size, args.size, dtype=getattr(torch, {"f16": "float16", "f32": "float32"}[args.dtype]))
    loaded = retarget.load(retarget.compile(Matmul(), args.target, example_inputs=(a, a)), device=args.device)
    out = loaded.main(a.numpy(), a.numpy())
    where = "cuda" if torch.cuda.is_available() else "cpu"
    expected = (a.to(where).double() @ a.to(where).double()).cpu().numpy()
    err = float(np.abs(out.astype(np.float64) - expected).max() / np.abs(expected).max())
    device, buffer = loaded.device, loaded.main.command_buffer
    seconds = device.time(buffer, 20) if hasattr(device, "time") else [device.timed_submit(buffer) for _ in range(20)]
    ms = statistics.median(seconds) * 1e3
    print(f"{args.target} {args.dtype} {args.patch}: {ms:.3f} ms, {2 * args.size ** 3 / ms / 1e9:.1f} TFLOP/s, "
          f"max error {err:.1e} of the largest", flush=True)
    if args.pipeline_cache:
        from load_paths import write_pipeline_cache  # beside this script

        write_pipeline_cache(device, args.pipeline_cache)


if __name__ == "__main__":
    main()
