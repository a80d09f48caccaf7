"""retarget.js (the browser loader `retarget export` writes) on this machine's GPU through Dawn's Vulkan backend, a
*core* WebGPU adapter as Chrome has (CI runs it on llvmpipe's OpenGL ES, a compatibility adapter): every zoo model
exported, run under Node (plugins/webgpu/tests/js/harness.mjs), checked against torch and timed per call.

Needs node 20+ and the webgpu npm package beside the harness. The GPU machine has no network: before carrying,
    npm ci --prefix plugins/webgpu/tests/js --ignore-scripts
    rm -rf plugins/webgpu/tests/js/node_modules/webgpu/dist/{darwin-universal,linux-arm64,win32-arm64,win32-x64}
and carry plugins/webgpu/tests/js/node_modules (~22 MB) with .gl and .whl. Then:
    . benchmarks/gpu/preamble.sh; python3 benchmarks/gpu/webgpu_js.py [--models mlp,mobilenet_v2] [--calls 20]
Writes $OUT/webgpu_js.json; the table is printed last. "call ms" is the median of the calls after the first, each
one write per input, one encoder, one submit and one map, awaited in JS (the page's view).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
HARNESS = ROOT / "plugins/webgpu/tests/js/harness.mjs"


def main() -> None:
    import retarget
    import torch
    from retarget.compiler import import_model
    from retarget.testing import zoo
    from retarget.testing.numerics import relative_error
    from retarget_webgpu import export

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(zoo.MODELS))
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args()
    out = Path(os.environ.get("OUT") or tempfile.mkdtemp())
    out.mkdir(parents=True, exist_ok=True)
    why = None
    if shutil.which("node") is None:
        why = "node is not installed on this machine"
    elif not (HARNESS.parent / "node_modules/webgpu").is_dir():
        why = "plugins/webgpu/tests/js/node_modules is missing: carry it (see this script's docstring)"
    rows = []
    if why is None:
        probe = json.loads(subprocess.run(["node", HARNESS, "probe"], capture_output=True, text=True).stdout)
        why = probe.get("error")
        print("adapter:", probe)
    for name in args.models.split(",") if why is None else []:
        model, inputs = zoo.make(name)
        with torch.no_grad():
            expected = model(*inputs).numpy()
        folder = Path(tempfile.mkdtemp()) / name
        export(retarget.compile(import_model(model, example_inputs=inputs), "webgpu-spirv"), folder)
        x = folder.parent / "x.bin"
        inputs[0].numpy().tofile(x)
        result = subprocess.run(["node", HARNESS, "run", folder, "main", folder.parent, *[x] * args.calls],
                                capture_output=True, text=True, timeout=3000)
        data = json.loads(result.stdout.strip().splitlines()[-1]) if result.stdout.strip() else \
            {"error": result.stderr[-500:]}
        if "error" in data:
            rows.append({"model": name, "error": data["error"]})
            continue
        got = np.fromfile(data["outputs"][-1][0], dtype=np.float32)
        calls = data["seconds"]["calls"]
        rows.append({"model": name, "load_s": round(data["seconds"]["load"], 3), "first_call_ms": calls[0] * 1e3,
                     "call_ms": statistics.median(calls[1:]) * 1e3, "rel_error": relative_error(got, expected.ravel())})
    (out / "webgpu_js.json").write_text(json.dumps({"unavailable": why, "rows": rows}, indent=1))
    if why:
        print(f"not run: {why}")
    print("| model | load s | first call ms | call ms (median) | rel. error |\n|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['model']} | error: {r['error'][:200]} | | | |")
        else:
            print(f"| {r['model']} | {r['load_s']} | {r['first_call_ms']:.2f} | {r['call_ms']:.3f} | "
                  f"{r['rel_error']:.1e} |")


if __name__ == "__main__":
    main()
