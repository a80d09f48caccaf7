"""A zoo model split between a GPU target and llvm-cpu, run on the GPU (lavapipe in CI) and the CPU, against torch.

- vulkan-spirv told to refuse erf (`--refuse rt.erf`): the MLP's GELU runs on the CPU, between two GPU segments;
- webgpu-spirv with the MLP's probabilities returned as float64, which WGSL has not: a real gap, so the cast runs on
  the CPU (the argmax itself, int64, runs on the GPU: WGSL holds it in 32-bit words).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import numpy as np  # noqa: E402
import retarget  # noqa: E402
from retarget.passes.placement import PlacementError  # noqa: E402
from retarget.testing import zoo  # noqa: E402
from retarget.testing.numerics import relative_error  # noqa: E402


def _needs(target: str, driver: str) -> None:
    if target not in retarget.targets() or "llvm-cpu" not in retarget.targets():
        pytest.skip(f"needs the {target} and llvm-cpu plugins")
    usable = [d for d in retarget.devices() if d.driver == driver]
    if not any(d.available for d in usable):
        pytest.skip(f"no {driver} device: {'; '.join(d.reason for d in usable) or 'driver not installed'}")


@pytest.fixture(scope="module")
def classifier():
    model, inputs = zoo.make("mlp", argmax=True)
    with torch.no_grad():
        expected = [t.numpy() for t in model(*inputs)]
    module = retarget.compiler.import_model(model, example_inputs=inputs)
    return module, inputs[0].numpy(), expected


@pytest.fixture(scope="module")
def f64_probabilities(classifier):
    """The classifier with its probabilities returned as float64."""
    model, inputs = zoo.make("mlp", argmax=True)

    class F64Probabilities(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, x):
            probabilities, labels = self.model(x)
            return probabilities.to(torch.float64), labels

    module = retarget.compiler.import_model(F64Probabilities(), example_inputs=inputs)
    return module, classifier[1], classifier[2]


def _placements(artifact) -> dict[str, str]:
    return {op["op"]: op["placement"] for op in artifact.placement["functions"]["main"]["ops"]}


def test_vulkan_refusing_erf_runs_the_mlp_with_gelu_on_the_cpu(classifier):
    _needs("vulkan-spirv", "vulkan")
    module, x, (probabilities, labels) = classifier
    artifact = retarget.compile(module, "vulkan-spirv", fallback="llvm-cpu", refuse=["rt.erf"])
    assert _placements(artifact)["rt.erf"] == "cpu" and _placements(artifact)["rt.matmul"] == "gpu"
    assert [s["op"] for s in artifact.functions["main"]["steps"]] == ["run", "transfer", "run", "transfer", "run"]
    loaded = retarget.load(artifact, devices={"gpu": "vulkan", "cpu": "local-task"})
    got_probabilities, got_labels = loaded.main(x)
    assert relative_error(got_probabilities, probabilities) <= 1e-4
    np.testing.assert_array_equal(got_labels, labels)


def test_webgpu_runs_the_classifier_and_its_int64_argmax_without_a_fallback(classifier):
    _needs("webgpu-spirv", "webgpu")
    module, x, (probabilities, labels) = classifier
    notes = []
    artifact = retarget.compile(module, "webgpu-spirv", fallback="llvm-cpu", notes=notes.append)
    assert set(_placements(artifact).values()) == {"gpu"} and any("is not needed" in n for n in notes)
    got_probabilities, got_labels = retarget.load(artifact).main(x)
    assert relative_error(got_probabilities, probabilities) <= 1e-4
    np.testing.assert_array_equal(got_labels, labels)


def test_webgpu_runs_an_f64_cast_on_the_cpu_because_wgsl_has_no_f64(f64_probabilities):
    _needs("webgpu-spirv", "webgpu")
    module, x, (probabilities, labels) = f64_probabilities
    artifact = retarget.compile(module, "webgpu-spirv", fallback="llvm-cpu")
    where = _placements(artifact)
    assert where["rt.cast"] == "cpu" and {p for op, p in where.items() if op != "rt.cast"} == {"gpu"}
    cast = next(op for op in artifact.placement["functions"]["main"]["ops"] if op["op"] == "rt.cast")
    assert "refuses f64" in cast["reason"]
    loaded = retarget.load(artifact)  # auto: the best device for each placement
    assert loaded.placements["gpu"].device.info.driver == "webgpu"
    got_probabilities, got_labels = loaded.main(x)
    assert got_probabilities.dtype == np.float64 and relative_error(got_probabilities, probabilities) <= 1e-4
    np.testing.assert_array_equal(got_labels, labels)


def test_webgpu_without_a_fallback_names_the_cast_its_source_line_and_the_fix(f64_probabilities):
    if "webgpu-spirv" not in retarget.targets():
        pytest.skip("needs the webgpu plugin")
    module, _, _ = f64_probabilities
    with pytest.raises(PlacementError) as e:
        retarget.compile(module, "webgpu-spirv")
    assert e.value.message.startswith("rt.cast at ") and "test_fallback.py:" in e.value.message
    assert "--fallback llvm-cpu" in e.value.hint
