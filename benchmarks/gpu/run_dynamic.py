"""Dynamic shapes on this machine's GPU in one go: MobileNetV2 with a dynamic batch and the transformer block
with a dynamic sequence length, one module each per device, checked against torch at several sizes and
timed against a static module per size, on cuda (CUDA graphs, one per shape), vulkan and webgpu.

    . benchmarks/gpu/preamble.sh; OUT=/tmp/out python3 benchmarks/gpu/run_dynamic.py [--repeats 30]

Writes $OUT/dynamic.json (every row, the machine) and $OUT/dynamic.md (the table); exits 1 if any result
is wrong. The measurement itself is benchmarks/dynamic_overhead.py's (the CPU figure in NOTES.md).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import dynamic_overhead  # noqa: E402

GPU_SIZES = {"mobilenet_v2": (1, 8, 32), "transformer_block": (16, 128, 512)}


def main() -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", nargs="*", default=["cuda", "vulkan", "webgpu"])
    parser.add_argument("--models", nargs="*", default=list(GPU_SIZES))
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    out = os.environ.get("OUT")
    rows = []
    print(dynamic_overhead.HEADER, flush=True)
    import retarget

    available = {d.driver for d in retarget.devices() if d.available}
    for device in args.devices:
        if device not in available:
            print(f"{device}: no device here, skipped", flush=True)
            continue
        for name in args.models:
            rows += dynamic_overhead.measure(name, device, GPU_SIZES[name], args.repeats)
    table = dynamic_overhead.markdown(rows)
    print("\n" + table)
    if out:
        import json

        Path(out, "dynamic.json").write_text(json.dumps({"machine": dynamic_overhead.machine(),
                                                         "repeats": args.repeats, "results": rows}, indent=1))
        Path(out, "dynamic.md").write_text(table)
    return 0 if rows and all(r["correct"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
