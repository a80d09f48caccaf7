"""Measures (never asserted anywhere): kernel call overhead and a naive matmul's GFLOP/s.

    .venv/bin/python plugins/llvm_cpu/benchmarks/kernels.py [--target host]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from retarget.ir.dtypes import f32
from retarget.kernel import ir as k
from retarget_llvm_cpu import targets
from retarget_llvm_cpu.compile import compile_kernels
from retarget_llvm_cpu.loader import LlvmCpuLoader


def elementwise(n: int) -> k.Kernel:
    i = k.Var("i")
    y = k.maximum(k.Binary("add", k.Load("x", i, f32), k.Load("b", i, f32)), k.const(0, f32))
    return k.Kernel("ew", [k.Param("x", f32, n, "read"), k.Param("b", f32, n, "read"), k.Param("y", f32, n, "write")],
                    [k.Loop("i", n, [k.Store("y", i, y)], kind="vector")])


def matmul(n: int, rows_per_group: int) -> k.Kernel:
    """C = A @ B as the naive i, k, j nest, j vectorized; one workgroup per block of rows."""
    w, i, kk, j = (k.Var(v) for v in ("w", "i", "k", "j"))
    row = w * rows_per_group + i
    c = row * n + j
    body = [k.Loop("i", rows_per_group, [
        k.Loop("j", n, [k.Store("C", c, k.const(0, f32))], kind="vector"),
        k.Loop("k", n, [
            k.Assign("a", k.Load("A", row * n + kk, f32)),
            k.Loop("j", n, [k.Store("C", c, k.Binary("add", k.Load("C", c, f32),
                                                     k.Binary("mul", k.Var("a", f32), k.Load("B", kk * n + j, f32))))],
                   kind="vector"),
        ]),
    ])]
    return k.Kernel("matmul", [k.Param("A", f32, n * n, "read"), k.Param("B", f32, n * n, "read"),
                               k.Param("C", f32, n * n, "write")], body,
                    workgroup_count=(n // rows_per_group, 1, 1), workgroup_vars=("w",))


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--target", default="host")
    args = p.parse_args()
    desc = targets.parse(args.target)
    loader = LlvmCpuLoader()
    print(f"target llvm-cpu:{desc.arch} (cpu {desc.extra['cpu']}, vector_bits {desc.extra['vector_bits']})")

    t = time.perf_counter()
    run = loader.load(compile_kernels([elementwise(1024)], desc, use_cache=False))[0](
        [np.ones(1024, np.float32), np.ones(1024, np.float32), np.zeros(1024, np.float32)])
    print(f"compile+load elementwise: {1e3 * (time.perf_counter() - t):.1f} ms (cold, no cache)")
    calls = 100_000
    per_call = best(lambda: [run((0, 0, 0)) for _ in range(calls)], 5) / calls
    print(f"1024-element elementwise, one run(wg) call: {per_call * 1e6:.2f} us")

    n = 256
    a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
    b = np.random.default_rng(1).standard_normal((n, n), dtype=np.float32)
    for rows in (n, 16):
        kern = matmul(n, rows)
        c = np.zeros((n, n), np.float32)
        bind = loader.load(compile_kernels([kern], desc, use_cache=False))[0]
        run = bind([a.reshape(-1), b.reshape(-1), c.reshape(-1)])
        groups = [(g, 0, 0) for g in range(kern.workgroup_count[0])]
        seconds = best(lambda run=run, groups=groups: [run(g) for g in groups], 20)
        err = np.abs(c - a @ b).max()
        print(f"matmul {n}^3 naive i,k,j (vector j), {len(groups)} workgroup(s), one thread: "
              f"{2 * n**3 / seconds / 1e9:.1f} GFLOP/s ({seconds * 1e3:.2f} ms, max err {err:.1e})")
    seconds = best(lambda: a @ b, 20)
    print(f"numpy a @ b for comparison: {2 * n**3 / seconds / 1e9:.1f} GFLOP/s")


if __name__ == "__main__":
    main()
