"""A/B of WGSL's remainder by a constant on the zoo's webgpu device time: C's `%` (before) against
a - b * (a / b) (now: NVIDIA's driver took wgpu's i32 `%` as unsigned). Each model is compiled both ways in one
process and timed in turn, three rounds.

    . benchmarks/gpu/preamble.sh; python3 benchmarks/gpu/probes/wgsl_rem_spelling.py [MODEL ...]
"""

from __future__ import annotations

import dataclasses
import sys
import tempfile
from pathlib import Path

import retarget
from retarget.bench.module import run_module
from retarget.compiler import import_model
from retarget.kernel import c_renderer
from retarget.testing import zoo

SPELLINGS = {"%": "({0} % {1})", "a - b * (a / b)": c_renderer.WGSL.trapless_rem}


def main(models: list[str]) -> None:
    shipped, folder = c_renderer.WGSL, Path(tempfile.mkdtemp())
    paths = {}
    for name in models:
        model, inputs = zoo.make(name)
        module = import_model(model, example_inputs=inputs)
        for label, spelling in SPELLINGS.items():
            c_renderer.WGSL = dataclasses.replace(shipped, trapless_rem=spelling)  # compile.py reads it here
            paths[name, label] = retarget.compile(module, "webgpu-spirv:host").save(folder / f"{name}-{len(paths)}.rtm")
    c_renderer.WGSL = shipped
    for round_ in range(3):
        for (name, label), path in paths.items():
            row = run_module(path, device="webgpu", repeats=40)["results"][0]
            device = (row["device_time"] or {}).get("median_ms")
            print(f"round {round_} {name:18s} {label:16s} device {device:.4f} ms, wall {row['median_ms']:.4f} ms",
                  flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or ["mobilenet_v2", "resnet18", "transformer_block"])
