"""fp32 matmul throughput: retarget llvm-cpu against numpy (OpenBLAS).

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/cpu/matmul.py [--n 1024]

Some machines of this workplace set OPENBLAS_CORETYPE for old OpenBLAS builds; it slows a current numpy,
so unset it (as above) for a fair peer. Prints GFLOP/s from the median of several runs.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import retarget
from retarget.ir import Builder, Function, Module, TensorType, Value, dtypes


def median_s(fn, repeats=7):
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1024)
    args = parser.parse_args()
    n = args.n
    a_arg, b_arg = Value(TensorType((n, n), dtypes.f32)), Value(TensorType((n, n), dtypes.f32))
    fn = Function("mm", [a_arg, b_arg])
    fn.returns = [Builder(fn).op("rt.matmul", [a_arg, b_arg])]
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
    flops = 2 * n**3
    art = retarget.compile(Module({"mm": fn}), "llvm-cpu")
    for device in ("local-sync", "local-task"):
        mm = retarget.load(art, device).mm
        np.testing.assert_allclose(mm(a, b), a @ b, rtol=1e-3, atol=1e-3)
        print(f"retarget llvm-cpu {device:10s} {flops / median_s(lambda mm=mm: mm(a, b)) / 1e9:7.1f} GFLOP/s")
    print(f"numpy (BLAS)                 {flops / median_s(lambda: a @ b) / 1e9:7.1f} GFLOP/s")


if __name__ == "__main__":
    main()
