"""Where a Vulkan call's host time goes (MobileNetV2 b1, numpy in and out): the call's median, the device's own time,
a cProfile of many calls (top functions by own time), and the input write alone into the mapped arena against a
copy into host memory.

    . benchmarks/gpu/preamble.sh; python3 benchmarks/gpu/probes/vulkan_call_profile.py [--model mobilenet_v2]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time
import warnings

import numpy as np

warnings.filterwarnings("ignore")


def median_ms(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times)) * 1e3


def main():
    import retarget
    from retarget.compiler import import_model
    from retarget.testing import zoo

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mobilenet_v2")
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    model, inputs = zoo.make(args.model)
    x = inputs[0].numpy()
    m = retarget.load(retarget.compile(import_model(model, example_inputs=inputs), "vulkan-spirv:host"),
                      device="vulkan")
    fn = m.function(list(m.functions)[0])
    for _ in range(10):
        fn(x)
    print(f"{args.model}: {median_ms(lambda: fn(x), args.repeats):.3f} ms a call (median of {args.repeats})")
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(args.repeats):
        fn(x)
    profile.disable()
    stats = pstats.Stats(profile)
    stats.sort_stats("tottime").print_stats(18)

    device = m.device
    arena = device.allocate(x.nbytes + 4096)
    print(f"arena mapped: {arena.mapped is not None}; {x.nbytes} bytes an input")
    print(f"device.write of the input: {median_ms(lambda: device.write(arena, 0, x), 100):.3f} ms")
    if arena.mapped is not None:
        raw = x.reshape(-1).view(np.uint8)
        into_arena = median_ms(lambda: arena.mapped.__setitem__(slice(0, raw.nbytes), raw), 100)
        print(f"  memcpy into the mapped arena: {into_arena:.3f} ms")
    host = np.empty_like(x)
    print(f"  memcpy into host memory: {median_ms(lambda: np.copyto(host, x), 100):.3f} ms")


if __name__ == "__main__":
    main()
