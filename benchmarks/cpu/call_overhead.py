"""Per-call time of a tiny MLP (224 -> 512 -> 10, batch 1, numpy in and out) on the CPU targets: issue 4's
"per-call overhead" figure (goal 30 us). Medians of 5 loops of 2000 calls each, after 500 warm-up calls.

    .venv/bin/python benchmarks/cpu/call_overhead.py
"""

from __future__ import annotations

import statistics
import time

import numpy as np


def main() -> None:
    import retarget
    from retarget.ir import Builder, Function, Module, TensorType, Value, dtypes

    rng = np.random.default_rng(0)
    x = Value(TensorType((1, 224), dtypes.f32))
    fn = Function("predict", [x])
    b = Builder(fn)
    h = b.op("rt.max", [b.op("rt.add", [b.op("rt.matmul", [x, b.constant(rng.standard_normal((224, 512), np.float32))]),
                                       b.constant(rng.standard_normal(512, np.float32))]), b.constant(np.float32(0))])
    fn.returns = [b.op("rt.add", [b.op("rt.matmul", [h, b.constant(rng.standard_normal((512, 10), np.float32))]),
                                  b.constant(rng.standard_normal(10, np.float32))])]
    module = Module({"predict": fn})
    data = rng.standard_normal((1, 224)).astype(np.float32)
    for target, device in (("vmvx", "local-sync"), ("llvm-cpu", "local-sync"), ("llvm-cpu", "local-task")):
        call = retarget.load(retarget.compile(module, target), device).predict
        for _ in range(500):
            call(data)
        loops = []
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(2000):
                call(data)
            loops.append((time.perf_counter() - start) / 2000)
        print(f"{target:9} {device:11} {statistics.median(loops) * 1e6:7.1f} us a call")


if __name__ == "__main__":
    main()
