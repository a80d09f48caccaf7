"""What the build-time bounds check (`retarget.kernel.bounds`) costs: a zoo model's dispatches lowered for each
installed target, then the check alone timed over all of them (best of --repeats).

    .venv/bin/python benchmarks/bounds_cost.py [--model mobilenet_v2] [--repeats 5]
"""

from __future__ import annotations

import argparse
import time
import warnings

warnings.filterwarnings("ignore")
TARGETS = ("llvm-cpu", "cuda:sm_90", "rocm:gfx942", "vulkan-spirv", "webgpu-spirv", "metal-spirv")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="mobilenet_v2")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    import retarget
    from retarget.compiler import import_model, resolve_target
    from retarget.kernel.bounds import check_kernel
    from retarget.kernel.lower import lower_dispatch
    from retarget.testing import zoo
    from retarget.testing.conformance.kit import dispatches, prepare

    model, inputs = zoo.make(args.model)
    functions = [d.function for d in dispatches(prepare(import_model(model, example_inputs=inputs)))]
    print(f"{args.model}: {len(functions)} dispatches; best of {args.repeats}")
    print("| target | lowering (check included) | the check alone | accesses proved |\n|---|---|---|---|")
    for target in TARGETS:
        if target.split(":")[0] not in retarget.targets():
            continue
        _, desc, _ = resolve_target(target)
        start = time.perf_counter()
        kernels = [lower_dispatch(fn, desc) for fn in functions]
        lowering = time.perf_counter() - start
        best = float("inf")
        for _ in range(args.repeats):
            start = time.perf_counter()
            proved = sum(check_kernel(kn) for kn in kernels)
            best = min(best, time.perf_counter() - start)
        print(f"| {target} | {lowering * 1e3:.0f} ms | {best * 1e3:.1f} ms | {proved:,} |")


if __name__ == "__main__":
    main()
