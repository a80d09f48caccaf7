"""What a call with numpy arrays in and out costs beside its kernel, on each GPU device, against torch doing the
same (numpy in, `.cuda()`, the op, `.cpu().numpy()` out), and against the bus itself (cuMemcpy from pageable and
from page-locked memory).

    . benchmarks/gpu/preamble.sh; python3 benchmarks/gpu/transfers.py [--mb 4 64] [--repeats 15] [--json OUT]

The model is `x * 2 + 1` on a float32 vector of the given size: one elementwise kernel, so that the call is
almost all transfer. Medians of `--repeats` calls after two warm-ups; wall clock.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings


def median_ms(fn, repeats: int) -> float:
    for _ in range(2):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def measure(mb: int, args) -> list[dict]:
    """The rows of one size: each retarget device, torch three ways, and numpy's first touch."""
    import numpy as np
    import retarget
    import torch
    from retarget.compiler import import_model

    class Affine(torch.nn.Module):
        def forward(self, x):
            return x * 2 + 1

    targets = {"cuda": "cuda:host", "vulkan": "vulkan-spirv:host", "webgpu": "webgpu-spirv:host"}
    rows = []
    n = mb * 2**20 // 4
    x = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
    expected = x * 2 + 1
    module = import_model(Affine(), example_inputs=(torch.from_numpy(x),))
    for device in args.devices.split(","):
        fn = retarget.load(retarget.compile(module, targets[device]), device=device).main
        np.testing.assert_allclose(fn(x), expected, rtol=1e-6)
        rows.append({"mb": mb, "runner": f"retarget {device}", "ms": median_ms(lambda fn=fn: fn(x), args.repeats)})
    gpu = torch.device("cuda")

    def torch_call():
        return (torch.from_numpy(x).to(gpu) * 2 + 1).cpu().numpy()

    np.testing.assert_allclose(torch_call(), expected, rtol=1e-6)
    rows.append({"mb": mb, "runner": "torch, numpy in and out", "ms": median_ms(torch_call, args.repeats)})
    pinned_in = torch.from_numpy(x).pin_memory()
    pinned_out = torch.empty(n, dtype=torch.float32).pin_memory()

    def torch_pinned():
        pinned_out.copy_(pinned_in.to(gpu, non_blocking=True) * 2 + 1)
        return pinned_out

    rows.append({"mb": mb, "runner": "torch, page-locked in and out", "ms": median_ms(torch_pinned, args.repeats)})
    xd = torch.from_numpy(x).to(gpu)
    rows.append({"mb": mb, "runner": "torch, on the device (kernel only)",
                 "ms": median_ms(lambda: (xd * 2 + 1, torch.cuda.synchronize()), args.repeats)})
    rows.append({"mb": mb, "runner": "numpy: a new array's first touch",  # the page faults of a new array
                 "ms": median_ms(lambda: np.empty(n, np.float32).fill(0), args.repeats)})
    return rows


def main():
    warnings.filterwarnings("ignore")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, nargs="+", default=[4, 64])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--devices", default="cuda,vulkan,webgpu")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()

    rows = [row for mb in args.mb for row in measure(mb, args)]
    print(f"{'MB':>4}  {'runner':38s} {'median ms':>10} {'GB/s (in+out)':>14}")
    for r in rows:
        print(f"{r['mb']:>4}  {r['runner']:38s} {r['ms']:10.3f} {2 * r['mb'] / 1024 / (r['ms'] / 1e3):14.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
