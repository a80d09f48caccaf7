"""Compile time of a zoo model for a target (llvm-cpu's host by default): cold (an empty compile cache), warm
(again in the same process, from the cache), and the first compile of a new process whose cache is warm.

    .venv/bin/python benchmarks/cpu/compile_time.py [--model mobilenet_v2] [--target llvm-cpu:host]

The model is imported once (torch.export, not timed); each figure is `retarget.compile(module, target)`.
The cache is a fresh temporary directory (RETARGET_CACHE_DIR), removed at the end. A warm compile in a
process that imported torch may include a full garbage collection of it (about 0.25 s on the 2-core VM),
whichever compile happens to trigger it: hence the median of several warm compiles.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings


def compile_once(model: str, target: str) -> float:
    import retarget
    from retarget.compiler import import_model
    from retarget.testing import zoo

    net, inputs = zoo.make(model)
    module = import_model(net, example_inputs=inputs)
    start = time.perf_counter()
    retarget.compile(module, target)
    return time.perf_counter() - start


def main():
    warnings.filterwarnings("ignore")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mobilenet_v2")
    parser.add_argument("--target", default="llvm-cpu:host")
    parser.add_argument("--warm", type=int, default=5, help="warm compiles in the process (the median counts)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:  # a new process: one compile, with the cache the parent filled
        print(compile_once(args.model, args.target))
        return
    with tempfile.TemporaryDirectory() as cache:
        os.environ["RETARGET_CACHE_DIR"] = cache
        import retarget
        from retarget.compiler import import_model
        from retarget.testing import zoo

        net, inputs = zoo.make(args.model)
        module = import_model(net, example_inputs=inputs)
        start = time.perf_counter()
        retarget.compile(module, args.target)
        cold = time.perf_counter() - start
        warm = []
        for _ in range(args.warm):
            start = time.perf_counter()
            retarget.compile(module, args.target)
            warm.append(time.perf_counter() - start)
        child = subprocess.run([sys.executable, __file__, "--child", "--model", args.model, "--target", args.target],
                               capture_output=True, text=True, check=True, env=os.environ)
        fresh = float(child.stdout.split()[-1])
    print(f"{args.model} for {args.target}: cold {cold:.2f} s; warm {statistics.median(warm):.2f} s "
          f"(median of {args.warm}, {min(warm):.2f}-{max(warm):.2f}); new process, warm cache {fresh:.2f} s")


if __name__ == "__main__":
    main()
