"""Every zoo model through both frontends (torch.export, and ONNX exported from torch),
run on the vmvx reference interpreter, matches torch. Through torch.export both ways: its training
IR as it stands (what every zoo model takes) and decomposed to core ATen (`decompose=True`).

Accuracy is norm-based: max|ours - torch| / max|torch| <= 1e-4, so a large logit's
rounding does not hide behind rtol and a near-zero output does not fail on it.
Each model is built, imported and run once per frontend (module-scoped fixtures), at batch 1
for the 224x224 CNNs.
"""

from __future__ import annotations

import time
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")

from retarget.importers.onnx import OnnxImporter  # noqa: E402
from retarget.importers.torch_export import TorchImporter, to_numpy  # noqa: E402
from retarget.ir import verify  # noqa: E402
from retarget.testing import zoo  # noqa: E402
from retarget.testing.numerics import relative_error  # noqa: E402
from retarget.vmvx.interpreter import run_function  # noqa: E402

RELATIVE_TOLERANCE = 1e-4


@pytest.fixture(scope="module", params=list(zoo.MODELS))
def zoo_model(request):
    model, inputs = zoo.make(request.param)
    with torch.no_grad():
        expected = model(*inputs).numpy().astype(np.float64)
    return request.param, model, inputs, expected


def _check(module, inputs, expected, name, path):
    verify(module)
    fn = module.functions["main"]
    assert fn.arg_names and len(fn.arg_names) == len(inputs)
    (out,) = run_function(fn, [to_numpy(x) for x in inputs])
    assert out.shape == expected.shape
    err = relative_error(out, expected)
    assert err <= RELATIVE_TOLERANCE, f"{name} via {path}: relative error {err:.2e}"


@pytest.fixture(scope="module")
def exported(zoo_model):
    _, model, inputs, _ = zoo_model
    return torch.export.export(model, tuple(inputs))


def test_zoo_model_imports_its_training_ir_without_decomposition(zoo_model, exported, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("run_decompositions was called")

    monkeypatch.setattr(torch.export.ExportedProgram, "run_decompositions", refuse)
    verify(TorchImporter().load(exported))


def test_zoo_model_through_torch_export_matches_torch(zoo_model, exported):
    name, model, inputs, expected = zoo_model
    start = time.perf_counter()
    module = TorchImporter().load(exported)
    print(f"\n{name}: import of the training IR {time.perf_counter() - start:.2f} s")
    _check(module, inputs, expected, name, "torch.export")


def test_zoo_model_through_core_aten_matches_torch(zoo_model, exported):
    name, model, inputs, expected = zoo_model
    start = time.perf_counter()
    module = TorchImporter().load(exported, decompose=True)
    print(f"\n{name}: run_decompositions and import {time.perf_counter() - start:.2f} s")
    _check(module, inputs, expected, name, "core ATen")


def test_zoo_model_through_onnx_matches_torch(zoo_model, tmp_path_factory):
    name, model, inputs, expected = zoo_model
    path = tmp_path_factory.mktemp("onnx") / f"{name}.onnx"
    start = time.perf_counter()
    zoo.export_onnx(name, path)
    exported = time.perf_counter()
    module = OnnxImporter().load(path)
    print(f"\n{name}: torch.onnx.export {exported - start:.2f} s, ONNX import {time.perf_counter() - exported:.2f} s")
    assert module.functions["main"].arg_names == ["input_0"]
    _check(module, inputs, expected, name, "ONNX")


def test_zoo_models_are_deterministic_and_in_eval_mode():
    model_a, inputs_a = zoo.make("small_cnn")
    model_b, inputs_b = zoo.make("small_cnn")
    assert not model_a.training
    assert torch.equal(inputs_a[0], inputs_b[0])
    for (ka, a), (_, b) in zip(model_a.state_dict().items(), model_b.state_dict().items(), strict=False):
        assert torch.equal(a, b), ka


def test_zoo_batch_norm_statistics_are_not_trivial():
    model, _ = zoo.make("resnet18")
    bn = model.bn1
    assert bn.running_mean.abs().min() > 0 and bn.running_var.min() > 0.4
    assert not torch.allclose(bn.running_var, torch.ones_like(bn.running_var))


def test_unknown_zoo_model_names_the_closest():
    from retarget.errors import InputError

    with pytest.raises(InputError, match="resnet18"):
        zoo.make("resnet-18")


def test_import_zoo_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys, retarget.testing.zoo as z; print(len(z.MODELS), 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == [str(len(zoo.MODELS)), "False"]


warnings.filterwarnings("ignore", category=DeprecationWarning)
