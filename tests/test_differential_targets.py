"""Random models (`retarget.testing.differential`) on every target with a device here, against float64.

Each pair runs the same seeds on every machine: 25 graphs and 10 GEMM-class ops in f32, and 10 GEMM-class ops in
f16 where the target takes f16 (the others refuse them, and that refusal is checked to be a clean one). A pair
whose target is not installed, or whose device is missing, is skipped and says which. On a GPU machine the same
tool runs larger sizes: `python -m retarget.testing.differential --pair vulkan-spirv=vulkan --family gemm
--dtype f16 --max-size 2048` (`STEPS=differential bash benchmarks/gpu/confirm.sh`).
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

import retarget  # noqa: E402
from retarget.testing.differential import check  # noqa: E402

PAIRS = [("vmvx", "local-sync"), ("llvm-cpu", "local-task"), ("vulkan-spirv", "vulkan"), ("webgpu-spirv", "webgpu"),
         ("opencl", "opencl")]
RUNS = [("graph", "f32", range(25)), ("gemm", "f32", range(10)), ("gemm", "f16", range(10))]
F16_REFUSED = {"webgpu-spirv", "opencl"}  # their default profiles do not assume f16 (shader-f16, cl_khr_fp16)


# where each plugin's source is (the OpenCL one stands outside plugins/, as a third party's would)
SOURCE = {"webgpu-spirv": "plugins/webgpu", "opencl": "examples/opencl_plugin"}


def _pair_or_skip(target: str, device: str):
    if target not in retarget.targets():
        source = SOURCE.get(target, f"plugins/{target.replace('-', '_')}")
        pytest.skip(f"target {target} is not installed (pip install -e {source})")
    if not any(d.available for d in retarget.devices() if d.driver == device):
        pytest.skip(f"no {device} device here")


@pytest.mark.parametrize("family, dtype, seeds", RUNS, ids=[f"{f}-{d}" for f, d, _ in RUNS])
@pytest.mark.parametrize("target, device", PAIRS, ids=[t for t, _ in PAIRS])
def test_random_models_match_float64(target, device, family, dtype, seeds):
    _pair_or_skip(target, device)
    report = check(seeds, [(target, device)], family, dtype)
    details = "\n".join(f"seed {f.seed}: {f.kind}: {f.detail}\n  {' -> '.join(f.ops)}\n  {f.command(family, dtype)}"
                        for f in report.findings)
    assert not report.findings, report.summary() + "\n" + details
    if dtype == "f16" and target in F16_REFUSED:
        assert report.outcomes == {"refused": len(seeds)}, report.summary()
    else:
        assert report.outcomes == {"ok": len(seeds)}, report.summary()
