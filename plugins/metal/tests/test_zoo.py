"""Every zoo model compiled for metal-spirv:apple-m1: its MSL type-checks with clang++ against the shim
(Metal's types and builtins, tests/msl/), and it computes what torch computes when the metal driver runs
it on fake_metal, which runs the MSL on the CPU. Execution on a GPU is tested only on macOS."""

import msl_cpu
import pytest
import retarget
from metal_helpers import ZOO_TARGET
from retarget.testing import zoo
from retarget.testing.numerics import relative_error
from retarget_metal.compile import unpack

RUN_ON_CPU = ("mlp", "small_cnn", "mobilenet_v2", "transformer_block")  # resnet18 is type-checked only: time


def _doc(artifact):
    (exe,) = artifact.manifest["executables"]
    assert exe["arch"] == ZOO_TARGET.partition(":")[2]
    return unpack(bytes(artifact.entries[exe["path"]]))


@pytest.mark.parametrize("name", list(zoo.MODELS))
def test_zoo_msl_type_checks(clangxx, zoo_artifacts, name):
    doc = _doc(zoo_artifacts[name][0])
    assert len(doc["kernels"]) > 0 and all(f"kernel void {k['name']}(" in doc["source"] for k in doc["kernels"])
    assert msl_cpu.syntax_errors(doc["source"]) == ""


def test_the_zoo_s_matmuls_use_simdgroup_matrices(zoo_artifacts):
    for name in ("mlp", "transformer_block"):
        schedules = [k["schedule"] for k in _doc(zoo_artifacts[name][0])["kernels"]]
        assert any(s.get("fragments") == "8x8x8.f32.f32" for s in schedules), name
        assert "simdgroup_multiply_accumulate(" in _doc(zoo_artifacts[name][0])["source"]


@pytest.mark.parametrize("name", RUN_ON_CPU)
def test_zoo_model_on_the_metal_driver_matches_torch(fake_metal, zoo_artifacts, name):
    artifact, inputs, expected = zoo_artifacts[name]
    out = retarget.load(artifact, device="metal").main(*[x.numpy() for x in inputs])
    assert out.shape == expected.shape
    assert relative_error(out, expected) <= 1e-4, name
