"""Random models (`retarget.testing.differential`) on every target with a device here, against float64.

Each pair runs the same seeds on every machine: 60 graphs and 10 GEMM-class ops in f32, 10 GEMM-class ops in
f16 where the target takes f16 (the others refuse them, and that refusal is checked to be a clean one), 20
integer graphs each in i8, ui8 and i64, compared exactly with torch, 30 graphs through ONNX (torch.onnx.export,
then the ONNX importer), and 30 graphs and 10 GEMM-class ops with a dynamic batch (compiled once, run at batch 1,
their own and 3 more). No other model may be refused, by an importer or a target, but those that torch's ONNX
exporter cannot write, or that torch.export cannot trace with a dynamic batch (a reshape to fixed sizes): every
op in the tables imports, and every target runs it. Each
model is imported once for every pair (torch's export is most of the time), and each pair's test reads its part of
that run. A pair whose target is not installed, or whose device is missing, is skipped and says which. On a GPU
machine the same tool runs larger sizes: `python -m retarget.testing.differential --pair vulkan-spirv=vulkan
--family gemm --dtype f16 --max-size 2048` (`STEPS=differential bash benchmarks/gpu/confirm.sh`).
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

import retarget  # noqa: E402
from retarget.testing.devices import unavailable  # noqa: E402
from retarget.testing.differential import check  # noqa: E402

PAIRS = [("vmvx", "local-sync"), ("llvm-cpu", "local-task"), ("vulkan-spirv", "vulkan"), ("webgpu-spirv", "webgpu"),
         ("opencl", "opencl")]
# (family, dtype, seeds, importer, dynamic)
RUNS = [("graph", "f32", range(60), "torch", False), ("gemm", "f32", range(10), "torch", False),
        ("gemm", "f16", range(10), "torch", False), ("int", "i8", range(20), "torch", False),
        ("int", "ui8", range(20), "torch", False), ("int", "i64", range(20), "torch", False),
        ("graph", "f32", range(30), "onnx", False), ("graph", "f32", range(30), "torch", True),
        ("gemm", "f32", range(10), "torch", True)]
F16_REFUSED = {"webgpu-spirv", "opencl"}  # their default profiles do not assume f16 (shader-f16, cl_khr_fp16)
# where each plugin's source is (the OpenCL one stands outside plugins/, as a third party's would)
SOURCE = {"webgpu-spirv": "plugins/webgpu", "opencl": "examples/opencl_plugin"}


def _missing(target: str, device: str) -> str | None:
    """Why the pair cannot run here (with how to install a missing plugin), or None."""
    why = unavailable(target, device)
    if why and target not in retarget.targets():
        why += f"; pip install -e {SOURCE.get(target, 'plugins/' + target.replace('-', '_'))}"
    return why


@pytest.fixture(scope="module")
def run_on_every_pair():
    """(family, dtype, seeds, importer, dynamic) -> the report of those models on every pair here, run once."""
    reports = {}

    def run(family, dtype, seeds, importer, dynamic):
        key = family, dtype, importer, dynamic
        if key not in reports:
            pairs = [p for p in PAIRS if not _missing(*p)]
            reports[key] = check(seeds, pairs, family, dtype, importer=importer, dynamic=dynamic)
        return reports[key]
    return run


@pytest.mark.parametrize("family, dtype, seeds, importer, dynamic", RUNS,
                         ids=[f"{f}-{d}" + ("-onnx" if i == "onnx" else "") + ("-dynamic" if dyn else "")
                              for f, d, _, i, dyn in RUNS])
@pytest.mark.parametrize("target, device", PAIRS, ids=[t for t, _ in PAIRS])
def test_random_models_match_float64(run_on_every_pair, target, device, family, dtype, seeds, importer, dynamic):
    if why := _missing(target, device):
        pytest.skip(why)
    report = run_on_every_pair(family, dtype, seeds, importer, dynamic)
    outcomes = report.by_pair[f"{target}={device}"]
    findings = [f for f in report.findings if (f.target, f.device) == (target, device)]
    details = "\n".join(f"seed {f.seed}: {f.kind}: {f.detail}\n  {' -> '.join(f.ops)}\n  {f.command(family, dtype)}"
                        for f in findings)
    assert not findings, report.summary() + "\n" + details
    if dtype == "f16" and target in F16_REFUSED:
        assert outcomes == {"refused": len(seeds)}, report.summary()
    elif importer == "onnx":  # torch's exporter cannot write some models (roll of a flattened tensor, expm1): its gap
        assert all(why.startswith("torch.onnx.export") for why in report.refusals), report.summary()
        assert outcomes["ok"] >= 0.8 * len(seeds) and set(outcomes) <= {"ok", "refused"}, report.summary()
    elif dynamic:  # torch.export specializes some graphs' batch (a reshape to fixed sizes, a weight of its size)
        assert all(why.startswith("the importer: torch.export could not trace") for why in report.refusals), \
            report.summary()
        assert outcomes["ok"] >= 0.5 * len(seeds) and set(outcomes) <= {"ok", "refused"}, report.summary()
    else:
        assert outcomes == {"ok": len(seeds)}, report.summary()


@pytest.mark.parametrize("target, device", PAIRS, ids=[t for t, _ in PAIRS])
def test_argmax_and_argmin_take_nan_as_the_largest_on_every_pair(target, device):
    """torch and numpy take NaN as larger than every number, so argmax and argmin return the first NaN's index.
    Every compiled target returned the first number's instead (the lowering compared with `>` alone)."""
    import numpy as np
    import torch
    from retarget.compiler import import_model

    if why := _missing(target, device):
        pytest.skip(why)

    class ArgExtremes(torch.nn.Module):
        def forward(self, x):
            return x.argmax(-1), x.argmin(-1)

    nan = float("nan")
    x = torch.tensor([[1.0, nan, -3.0, nan], [2.0, 5.0, 5.0, 1.0], [nan, 1.0, 2.0, 3.0], [-1.0, -4.0, 7.0, nan]])
    art = retarget.compile(import_model(ArgExtremes(), example_inputs=(x,)), target)
    got = retarget.load(art, device=device).main(x.numpy())
    for g, want in zip(got, ArgExtremes()(x)):
        np.testing.assert_array_equal(g, want.numpy())


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "unbounded-batch"])
@pytest.mark.parametrize("target, device", PAIRS, ids=[t for t, _ in PAIRS])
def test_i64_sums_and_products_past_32_bits_on_every_pair(target, device, dynamic):
    """torch sums integers in int64: a cumsum or sum of int32 values past 2^31 must not wrap at 32 bits. Vulkan
    computed every i64 in 32 bits (exact for indices, wrong for such sums) until its kernels told index arithmetic
    from data (`kernel.index32`), and then still where a size known only at run time had no bound (the
    `unbounded-batch` case: its modules were not even valid SPIR-V); WebGPU did too (WGSL has no 64-bit integers)
    until its i64 data was computed in pairs of 32-bit words."""
    import numpy as np
    import torch
    from retarget.compiler import import_model

    if why := _missing(target, device):
        pytest.skip(why)

    class Wide(torch.nn.Module):
        def forward(self, x):
            wide = x.to(torch.int64)
            return torch.cumsum(x, 0), wide.sum(0), wide * 5 - (2**40), (wide * 3) // 7, (wide << 20) % 1000003

    x = torch.randint(-2**30, 2**30, (9, 4), dtype=torch.int32, generator=torch.Generator().manual_seed(0))
    shapes = ({1: torch.export.Dim("columns")},) if dynamic else None  # no bound given: torch's default
    art = retarget.compile(import_model(Wide(), example_inputs=(x,), dynamic_shapes=shapes), target)
    got = retarget.load(art, device=device).main(x.numpy())
    for g, want in zip(got, Wide()(x), strict=True):
        np.testing.assert_array_equal(g, want.numpy())
