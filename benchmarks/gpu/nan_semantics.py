"""NaN, infinity and signed-zero semantics on each GPU target, against torch on the CPU.

Vulkan lets a driver assume that no float is NaN or infinite unless a module declares SignedZeroInfNanPreserve,
and NVIDIA's compiler does fold `x != x` to false under that assumption (benchmarks/NOTES.md, seventh session).
Each small model here takes inputs full of NaN, +-inf and -0.0 and must give torch's answer element for element:
NaN where torch has NaN, the same infinities, and finite values within 3 ulp (with the same sign of zero).

    . benchmarks/gpu/preamble.sh; python3 benchmarks/gpu/nan_semantics.py [--targets vulkan-spirv:host=vulkan ...]

Runs here too (lavapipe, llvm-cpu). Exits 1 if any answer differs (a zero of the other sign is reported, not
counted).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np


def cases(torch):
    f = torch.nn.functional

    def m(fn):
        class Model(torch.nn.Module):
            def forward(self, x, y):
                return fn(x, y)
        return Model()

    return {
        "isnan(x)": m(lambda x, y: torch.isnan(x).to(torch.float32)),
        "where(isnan(x), 0, x)": m(lambda x, y: torch.where(torch.isnan(x), torch.zeros_like(x), x)),
        "x != y": m(lambda x, y: (x != y).to(torch.float32)),
        "x == x": m(lambda x, y: (x == x).to(torch.float32)),
        "x < y": m(lambda x, y: (x < y).to(torch.float32)),
        "x >= y": m(lambda x, y: (x >= y).to(torch.float32)),
        "isinf(x)": m(lambda x, y: torch.isinf(x).to(torch.float32)),
        "maximum(x, y)": m(lambda x, y: torch.maximum(x, y)),
        "clamp(x, -1, 1)": m(lambda x, y: x.clamp(-1.0, 1.0)),
        "relu(x)": m(lambda x, y: torch.relu(x)),
        "x * y": m(lambda x, y: x * y),
        "x / y": m(lambda x, y: x / y),
        "-x": m(lambda x, y: -x),
        "softmax(x + y) (-inf masks)": m(lambda x, y: f.softmax(torch.where(torch.isnan(x), y, x), dim=-1)),
        "sum over rows": m(lambda x, y: (x * y).sum(dim=-1, keepdim=True)),
    }


def inputs():
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 2.5, -3.0, 1e30, -1e-30, 0.5],
                       dtype=np.float32)
    x = np.tile(special, (len(special), 1))  # every pair of specials, x along rows, y along columns
    y = x.T.copy()
    y[:, -1] = -np.inf  # a masked column for the softmax
    return np.ascontiguousarray(x), y


def zeros_of_other_sign(got, want) -> np.ndarray:
    """Where both are zero but of different signs."""
    return (got == 0) & (want == 0) & (np.signbit(got) != np.signbit(want))


def main():
    import retarget
    import torch
    from retarget.errors import RetargetError, UnknownDeviceError, UnknownTargetError

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", nargs="*", metavar="TARGET=DEVICE",
                        default=["vulkan-spirv:host=vulkan", "webgpu-spirv:host=webgpu", "cuda:host=cuda",
                                 "llvm-cpu=local-task"])
    args = parser.parse_args()
    x, y = inputs()
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)
    failures = 0
    rows = []
    for spec in args.targets:
        target, _, device = spec.partition("=")
        for name, model in cases(torch).items():
            want = model(tx, ty).numpy()
            try:
                loaded = retarget.load(retarget.compile(model, target, example_inputs=(tx, ty)), device=device)
                got = loaded.main(x, y)
            except (UnknownDeviceError, UnknownTargetError) as e:  # a target this machine lacks: say so once
                rows.append((target, "-", f"not run: {str(e).splitlines()[0][:110]}"))
                break
            except RetargetError as e:  # an op a target does not take
                rows.append((target, name, f"not compiled: {type(e).__name__}: {str(e).splitlines()[0][:90]}"))
                continue
            got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
            # values within 3 ulp (Vulkan's division is within 2.5): this is about NaN, infinities and zeros
            with np.errstate(invalid="ignore"):
                close = np.isfinite(want) & np.isfinite(got) & (np.abs(got - want) <= 3e-7 * np.abs(want))
            bad = ~((np.isnan(got) & np.isnan(want)) | (got == want) | close)
            if bad.any():
                failures += 1
                i = tuple(int(v) for v in np.argwhere(bad)[0])
                rows.append((target, name, f"WRONG ({int(bad.sum())} elements; e.g. x={x[i]} y={y[i]}: got {got[i]}, "
                                           f"torch {want[i]})"))
            elif zeros_of_other_sign(got, want).any():
                i = tuple(int(v) for v in np.argwhere(zeros_of_other_sign(got, want))[0])
                rows.append((target, name, f"sign of zero differs (x={x[i]} y={y[i]}: got {got[i]}, torch {want[i]})"))
            else:
                rows.append((target, name, "ok"))
    for target, name, verdict in rows:
        print(f"{target:<22} {name:<30} {verdict}")
    print(f"{failures} wrong")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
