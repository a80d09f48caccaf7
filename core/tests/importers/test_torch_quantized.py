"""PyTorch models quantized the usual ways import and match PyTorch: PT2E (torchao's prepare_pt2e /
convert_pt2e, which leaves quantize/dequantize ops in the exported graph) and torchao's quantize_ configs."""

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    torchao = pytest.importorskip("torchao")

import retarget  # noqa: E402
from retarget.testing.numerics import relative_error  # noqa: E402


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 1), torch.nn.ReLU(), torch.nn.Flatten(),
                               torch.nn.Linear(8 * 4 * 4, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).eval()


@pytest.fixture(scope="module")
def pt2e_program():
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.quantization.pt2e.quantizer.x86_inductor_quantizer import (
        X86InductorQuantizer,
        get_default_x86_inductor_quantization_config,
    )

    x = torch.randn(2, 3, 4, 4)
    quantizer = X86InductorQuantizer().set_global(get_default_x86_inductor_quantization_config())
    prepared = prepare_pt2e(torch.export.export(_model(), (x,)).module(), quantizer)
    prepared(x)
    program = torch.export.export(convert_pt2e(prepared), (x,))
    return program, x


def test_a_pt2e_model_matches_its_pytorch_reference(pt2e_program):
    program, x = pt2e_program
    expected = program.module()(x).detach().numpy()
    got = retarget.load(retarget.compile(program, "vmvx"), device="local-sync").main(x.numpy())
    assert relative_error(got, expected) < 1e-5


def test_pt2e_int8_weights_stay_packed_int8(pt2e_program):
    program, _ = pt2e_program
    art = retarget.compile(program, "vmvx")
    types = [item["type"] for item in art.manifest["constants"]["items"]]
    assert "tensor<32x32xui32>" in types  # the 32 x 128 int8 weight, four values a word
    assert not any(t.startswith("tensor<32x128x") or t.startswith("tensor<128x32x") for t in types)


@pytest.mark.parametrize("config", ["Int8WeightOnlyConfig", "Int8DynamicActivationInt8WeightConfig",
                                    "Int8DynamicActivationIntxWeightConfig"])
def test_a_torchao_quantized_model_matches_pytorch(config):
    import torchao.quantization as tq

    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8)).eval()
    x = torch.randn(2, 64)
    tq.quantize_(model, getattr(tq, config)())
    with torch.no_grad():
        expected = model(x).numpy()
    got = retarget.load(retarget.compile(model, "vmvx", example_inputs=(x,)), device="local-sync").main(x.numpy())
    assert np.isfinite(got).all() and relative_error(got, expected) < 1e-5
