"""Weight quantization and compute precision in the core: the pass, the graph ops, the vmvx reference, against
the independent numpy model in `retarget.testing.quant_model`."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import retarget
from retarget import ir
from retarget.compiler import import_model
from retarget.errors import InputError, VerificationError
from retarget.ir import dtypes
from retarget.ir.core import Builder, Function, Module, TensorType, Value
from retarget.passes.dispatch import form_dispatches
from retarget.passes.quantize import SCHEMES, pack, quantize_weight, quantize_weights, scheme
from retarget.testing import quant_model as qm
from retarget.testing.numerics import relative_error
from retarget.vmvx.kernels import evaluate


def _run(module, x, **options):
    return retarget.load(retarget.compile(module, "vmvx", **options), device="local-sync").main(x)


@pytest.mark.parametrize("name", list(SCHEMES))
def test_every_scheme_on_vmvx_matches_the_numpy_model(name):
    for case in qm.cases(name):
        qm.check("vmvx", "local-sync", name, case)


@pytest.mark.parametrize("name", ["int4-g32", "int8-asym"])
def test_packed_words_dequantize_to_the_models_weights(name):
    w = np.random.default_rng(3).standard_normal((6, 40)).astype(np.float32)
    words, scale, zero, group = quantize_weight(w, scheme(name))
    operands = [words, scale] + ([zero] if zero is not None else [])
    attrs = {"bits": scheme(name).bits, "group_size": group, "shape": [6, 40]}
    got = evaluate("rt.dequantize", attrs, operands, TensorType((6, 40), dtypes.f32))
    np.testing.assert_allclose(got, qm.dequantized(w, name), rtol=1e-6, atol=1e-7)


def test_int4_values_pack_two_to_a_byte_low_nibble_first():
    words = pack(np.array([[1, 2, 3, 4, 5, 6, 7, 8, 15]], np.uint32), 4)
    assert words.dtype == np.uint32 and words.tolist() == [[0x87654321, 0xF]]


def test_int4_weights_take_an_eighth_of_f32_bytes_plus_scales():
    module, x, w, b = qm.linear_layer(1, 256, 64)
    art = retarget.compile(module, "vmvx", quantize="int4-g32")
    sizes = sorted(item["nbytes"] for item in art.manifest["constants"]["items"])
    assert 64 * 256 // 2 in sizes  # the packed words: 4 bits each
    assert 64 * 256 * 4 not in sizes  # no f32 copy of the weight
    assert art.manifest["constants"]["size"] < 64 * 256 * 4 // 6


def test_dequantization_fuses_into_the_matmul_dispatch():
    module, x, w, b = qm.linear_layer(4, 64, 32)
    (fn,) = quantize_weights(module, scheme("int4-g32"))[0].functions.values()
    (dispatch,) = form_dispatches(fn)
    assert [op.name for op in dispatch.function.ops if op.name != "rt.constant"] == [
        "rt.dequantize", "rt.transpose", "rt.matmul", "rt.add"]


def test_constant_folding_keeps_packed_weights_packed():
    module, x, w, b = qm.linear_layer(2, 16, 8)
    art = retarget.compile(module, "vmvx", quantize="int8")
    text = art.entries[art.manifest["executables"][0]["path"]].decode()
    assert "rt.dequantize" in text


def test_dynamic_activations_of_a_zero_row_give_the_bias():
    module, x, w, b = qm.linear_layer(3, 32, 8)
    x[1] = 0
    got = _run(module, x, quantize="8da4w-g32")
    np.testing.assert_allclose(got[1], b, rtol=1e-6)
    assert relative_error(got, qm.linear(x, w, "8da4w-g32") + b) < 1e-6


def test_dynamic_activations_of_a_1x1_conv_are_quantized_per_pixel():
    module, x, w = qm.pointwise_conv(2, 16, 8, 3)
    got = _run(module, x, quantize="8da8w")
    assert relative_error(got, qm.conv_reference(x, w, "8da8w")) < 1e-6
    assert relative_error(got, qm.conv_reference(x, w, "int8")) > 1e-5  # not merely the weights


def test_a_model_without_linear_layers_says_nothing_was_quantized():
    arg = Value(TensorType((4,), dtypes.f32))
    fn = Function("main", [arg])
    fn.returns = [Builder(fn).op("rt.exp", [arg])]
    notes = []
    retarget.compile(Module({"main": fn}), "vmvx", quantize="int8", notes=notes.append)
    assert any("no layer to quantize" in n for n in notes)


def test_an_unknown_scheme_is_an_input_error_listing_the_schemes():
    module, *_ = qm.linear_layer(1, 8, 8)
    with pytest.raises(InputError) as e:
        retarget.compile(module, "vmvx", quantize="int4-g16")
    assert "int4-g32" in e.value.oneline() and "8da4w-g128-asym" in e.value.oneline()


def test_dequantize_rejects_scales_of_the_wrong_shape():
    q = Value(TensorType((4, 2), dtypes.dtype("ui32")))
    scale = Value(TensorType((4, 3), dtypes.f32))
    with pytest.raises(VerificationError, match="scales and zero points must be float"):
        ir.infer_types("rt.dequantize", [q.type, scale.type], {"bits": 4, "group_size": 8, "shape": [4, 16]})


def test_quantized_graphs_print_and_parse_back():
    module, x, w, b = qm.linear_layer(2, 24, 8)
    quantized, _ = quantize_weights(module, scheme("8da4w-g32-asym"))
    text = ir.print_module(quantized)
    assert ir.print_module(ir.parse_module(text)) == text


# -- precision ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("precision, tolerance", [("f16", 3e-3), ("bf16", 2e-2)])
def test_half_precision_keeps_the_interface_in_f32(precision, tolerance):
    module, x, w, b = qm.linear_layer(4, 64, 16)
    art = retarget.compile(module, "vmvx", precision=precision)
    assert [i["type"] for i in art.manifest["functions"]["main"]["inputs"]] == ["tensor<4x64xf32>"]
    got = retarget.load(art, device="local-sync").main(x)
    assert got.dtype == np.float32
    assert 1e-7 < relative_error(got, x @ w.T + b) < tolerance  # rounded, but not by much


@pytest.mark.parametrize("target, device", [("vmvx", "local-sync"), ("llvm-cpu", "local-task")])
def test_half_precision_means_sum_in_f32(target, device):
    """Means, variances and layer norms of values whose sums pass f16's 65504 (2000 values near 40): the sums stay in
    f32 up to their scale and are rounded once (they came out infinite, and layer norm NaN)."""
    torch = pytest.importorskip("torch")
    from retarget.compiler import import_model

    if target not in retarget.targets():
        pytest.skip(f"target {target} is not installed")

    class Statistics(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = torch.nn.LayerNorm(2000)

        def forward(self, x):
            return x.var(-1), x.mean(-1), self.norm(x)

    model, x = Statistics(), torch.randn(3, 2000, generator=torch.Generator().manual_seed(0)) * 8 + 40
    art = retarget.compile(import_model(model, example_inputs=(x,)), target, precision="f16")
    with torch.no_grad():
        expected = [t.numpy() for t in model(x)]
    for got, want in zip(retarget.load(art, device=device).main(x.numpy()), expected):
        assert np.isfinite(got).all() and relative_error(got, want) < 3e-3


def test_half_precision_constants_are_stored_in_half():
    module, x, w, b = qm.linear_layer(4, 64, 16)
    art = retarget.compile(module, "vmvx", precision="f16")
    assert {item["type"] for item in art.manifest["constants"]["items"]} == {"tensor<64x16xf16>", "tensor<16xf16>"}


def test_interface_precision_sets_argument_and_result_types():
    module, x, w, b = qm.linear_layer(4, 64, 16)
    art = retarget.compile(module, "vmvx", precision="f16", interface_precision="f16")
    fn = art.manifest["functions"]["main"]
    assert fn["inputs"][0]["type"] == "tensor<4x64xf16>" and fn["outputs"][0]["type"] == "tensor<4x16xf16>"
    got = retarget.load(art, device="local-sync").main(x.astype(np.float16))
    assert got.dtype == np.float16 and relative_error(got, x @ w.T + b) < 3e-3


def test_an_unknown_precision_is_an_input_error():
    module, *_ = qm.linear_layer(1, 8, 8)
    with pytest.raises(InputError, match="unknown precision 'fp16'"):
        retarget.compile(module, "vmvx", precision="fp16")


def test_precision_and_quantization_together_match_the_model():
    module, x, w, b = qm.linear_layer(3, 64, 16)
    got = _run(module, x, precision="f16", quantize="int4-g32")
    assert relative_error(got, qm.linear(x, w, "int4-g32") + b) < 3e-3


def test_a_torch_model_quantizes_end_to_end():
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8)).eval()
    x = torch.randn(2, 64)
    got = _run(import_model(model, example_inputs=(x,)), x.numpy(), quantize="int4-g32")
    w1, b1, w2, b2 = (p.detach().numpy() for p in model.parameters())
    hidden = np.maximum(qm.linear(x.numpy(), w1, "int4-g32") + b1, 0).astype(np.float32)
    assert relative_error(got, qm.linear(hidden, w2, "int4-g32") + b2) < 1e-5


def test_the_cpu_loops_over_row_tiles_instead_of_unrolling_them():
    from retarget.kernel.ir import print_kernel
    from retarget.kernel.lower import lower_dispatch
    from retarget.vmvx import REFERENCE

    cpu = dataclasses.replace(REFERENCE, backend="cpu", max_workgroup_size=1)
    sizes = []
    for rows in (8, 4000):
        module, *_ = qm.linear_layer(rows, 64, 16)
        (fn,) = quantize_weights(module, scheme("8da4w-g32"))[0].functions.values()
        kernel = lower_dispatch(form_dispatches(fn)[-1].function, cpu)
        sizes.append(len(print_kernel(kernel)))
    assert sizes[1] < 1.2 * sizes[0]  # the same loops, whatever the number of rows


@pytest.mark.parametrize("options", [{"precision": "f16"}, {"quantize": "int8"}])
def test_compiling_a_module_leaves_the_caller_s_module_as_it_was(options):
    """The passes rewrite a module in place: compile works on a copy, so compiling the same Module again
    (for another target, or in f32 after f16) starts from the model itself."""
    from retarget.testing.graphs import mlp_module

    module, x, expected = mlp_module()
    before = ir.print_module(module)
    retarget.compile(module, "vmvx", **options)
    assert ir.print_module(module) == before
    got = retarget.load(retarget.compile(module, "vmvx"), device="local-sync").predict(x)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
