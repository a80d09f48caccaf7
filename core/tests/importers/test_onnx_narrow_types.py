"""float8 (E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ), the E8M0 scale, float4 E2M1 and the 4- and 2-bit integers on compiled
targets: no code generator spells them, so `retarget.kernel.narrow` makes them bytes and integer arithmetic. Each cast
matches ml_dtypes (ONNX's reference) bit for bit over every f16 value as a float, and moves keep every code as it is.
A cast to E8M0 matches onnx's reference in each of Cast-24's round modes, with and without saturate, over every f16
value and each E8M0 boundary."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import helper  # noqa: E402
from retarget.errors import UnsupportedOpError  # noqa: E402
from retarget.importers.onnx import OnnxImporter  # noqa: E402
from retarget.ir.dtypes import DTYPES  # noqa: E402
from retarget.kernel.narrow import FORMATS  # noqa: E402
from retarget.testing.numerics import assert_same_bits  # noqa: E402
from retarget.testing.onnx_cases import compiled_outputs, graph_of, model_of, reference_outputs  # noqa: E402
from retarget.testing.op_cases import E8M0_FROM  # noqa: E402
from retarget.testing.torch_cases import importer_targets  # noqa: E402

TARGETS = sorted(set(importer_targets()) - {"vmvx"} | {"llvm-cpu", "vulkan-spirv", "webgpu-spirv"})
ONNX_TYPE = {"f8E4M3FN": 17, "f8E4M3FNUZ": 18, "f8E5M2": 19, "f8E5M2FNUZ": 20, "ui4": 21, "i4": 22, "f4E2M1FN": 23,
             "f8E8M0FNU": 24, "ui2": 25, "i2": 26}
ML_DTYPES_CASTS = sorted(set(FORMATS) - {"f8E8M0FNU"})  # ONNX's cast to E8M0 has its own rounding (Cast-24)
E8M0_TARGETS = sorted({*TARGETS, "vmvx"})  # vmvx: the importer's composition, around ml_dtypes' astype
ROUND_MODES = ("up", "down", "nearest")


def every_half_as_float() -> np.ndarray:
    """Every f16 value as f32: each narrow float's values, the ties between them, the overflows, subnormals,
    infinities and NaN. Not -0.0 nor NaNs with the sign bit set: a kernel cannot read their sign (-0.0 becomes +0, a
    NaN the type's NaN of positive sign)."""
    x = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32)
    return x[~(((x == 0) | np.isnan(x)) & np.signbit(x))]


def e8m0_inputs() -> np.ndarray:
    """Each E8M0 boundary (`E8M0_FROM`: powers of two, ties, their neighbours, subnormals, 0, infinities, NaN) and
    every f16 value, -0.0 and NaNs of either sign included: E8M0 reads no sign."""
    halves = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32)
    return np.concatenate([E8M0_FROM, halves, -E8M0_FROM])


def assert_same_bytes(x, out, expected):
    mismatch = np.flatnonzero(out.view(np.uint8) != np.asarray(expected).view(np.uint8))
    assert mismatch.size == 0, (f"{mismatch.size} differ, first {x[mismatch[:5]]}: {out.view(np.uint8)[mismatch[:5]]}"
                                f", not {np.asarray(expected).view(np.uint8)[mismatch[:5]]}")


def codes_of(name: str) -> np.ndarray:
    return np.arange(1 << min(DTYPES[name].bits, 8), dtype=np.uint8).view(DTYPES[name].np_dtype)


@pytest.mark.parametrize("name", ML_DTYPES_CASTS)
@pytest.mark.parametrize("target", TARGETS)
def test_a_cast_to_a_narrow_type_matches_ml_dtypes_bit_for_bit(name, target):
    x = every_half_as_float()
    if not DTYPES[name].is_float:  # integers wrap: keep to where trunc is exact in f16, and past it
        x = np.concatenate([x[np.abs(x) < 2048], [3e9, -3e9, 1e30]]).astype(np.float32)
    attrs = {"saturate": 0} if name.startswith("f8") else {}
    model = model_of("Cast", {"x": x}, opset=21, to=ONNX_TYPE[name], **attrs)
    (out,) = compiled_outputs(model, target, x)
    expected = reference_outputs(model, {"x": x})[0]
    assert out.dtype == expected.dtype == DTYPES[name].np_dtype
    assert_same_bytes(x, out, expected)


@pytest.mark.parametrize("name", sorted(FORMATS))
@pytest.mark.parametrize("target", TARGETS)
def test_every_code_of_a_narrow_type_reads_as_its_value_and_moves_unchanged(name, target):
    codes = codes_of(name)
    wide = np.float32 if DTYPES[name].is_float else np.int32
    nodes = [helper.make_node("Cast", ["x"], ["value"], to=1 if wide is np.float32 else 6),
             helper.make_node("Reshape", ["x", "shape"], ["square"]),
             helper.make_node("Transpose", ["square"], ["moved"], perm=[1, 0])]
    side = int(np.sqrt(codes.size))
    model = graph_of(nodes, {"x": codes}, ["value", "moved"], {"shape": np.array([side, side], np.int64)})
    value, moved = compiled_outputs(model, target, codes)
    np.testing.assert_array_equal(value, codes.astype(wide))  # NaN where a code is NaN
    np.testing.assert_array_equal(moved.view(np.uint8), codes.view(np.uint8).reshape(side, side).T)


@pytest.mark.parametrize("target", TARGETS)
def test_a_float8_quantize_dequantize_pair_matches_the_reference(target):
    x = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32) * 30
    scale = np.array(0.25, np.float32)
    zero = np.zeros((), ml_dtypes.float8_e4m3fn)
    nodes = [helper.make_node("QuantizeLinear", ["x", "scale", "zero"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "scale", "zero"], ["y"])]
    model = graph_of(nodes, {"x": x}, ["q", "y"], {"scale": scale, "zero": zero})
    q, y = compiled_outputs(model, target, x)
    expected_q, expected_y = reference_outputs(model, {"x": x})
    np.testing.assert_array_equal(q.view(np.uint8), expected_q.view(np.uint8))
    np.testing.assert_array_equal(y, expected_y)


@pytest.mark.parametrize("saturate", [1, 0])
@pytest.mark.parametrize("round_mode", ROUND_MODES)
@pytest.mark.parametrize("target", E8M0_TARGETS)
def test_a_cast_to_e8m0_matches_onnx_s_reference_in_each_round_mode_bit_for_bit(target, round_mode, saturate):
    x = e8m0_inputs()
    model = model_of("Cast", {"x": x}, opset=24, to=24, round_mode=round_mode, saturate=saturate)
    (out,) = compiled_outputs(model, target, x)
    expected = reference_outputs(model, {"x": x})[0]
    assert out.dtype == expected.dtype == ml_dtypes.float8_e8m0fnu
    assert_same_bytes(x, out, expected)


@pytest.mark.parametrize("target", E8M0_TARGETS)
def test_an_unsaturated_nearest_cast_to_e8m0_of_a_positive_value_is_ml_dtypes_rounding(target):
    x = e8m0_inputs()
    x = x[x > 0]  # ml_dtypes makes 0 and negatives NaN, where onnx's reference reads |x|
    model = model_of("Cast", {"x": x}, opset=24, to=24, round_mode="nearest", saturate=0)
    (out,) = compiled_outputs(model, target, x)
    assert_same_bytes(x, out, x.astype(ml_dtypes.float8_e8m0fnu))


F32_TIES = [1.5, 3.0, 2.0 ** -126, 2.0 ** 127, 1.5 * 2.0 ** 127, 0.0]


@pytest.mark.parametrize("values", [
    pytest.param(np.array([1.5 - 2.0 ** -30, 1.5 - 2.0 ** -20, 1 + 2.0 ** -30, 2.0 ** -127 * (1 + 2.0 ** -30), 3e38,
                           1e39, -1e-300, 1e-300, *F32_TIES], np.float64), id="f64 rounded to f32 first"),
    pytest.param(np.array([0, 1, 2, 3, 5, 6, 7, -1, -3, 2 ** 24 + 1, 2 ** 31 - 1, -2 ** 31], np.int32), id="i32"),
    pytest.param(np.array([2.0 ** -24, 3 * 2.0 ** -24, 1.5, 65504, np.inf, -0.0, *F32_TIES[:2]], np.float16),
                 id="f16")])
@pytest.mark.parametrize("round_mode", ROUND_MODES)
@pytest.mark.parametrize("target", E8M0_TARGETS)
def test_a_cast_to_e8m0_from_another_type_rounds_its_f32_value(target, round_mode, values):
    if values.dtype == np.float64 and target.startswith("webgpu"):
        pytest.skip("WGSL has no f64")
    model = model_of("Cast", {"x": values}, opset=24, to=24, round_mode=round_mode)
    (out,) = compiled_outputs(model, target, values)
    assert_same_bytes(values, out, reference_outputs(model, {"x": values})[0])


@pytest.mark.parametrize("to", [1, 10, 16], ids=["f32", "f16", "bf16"])
@pytest.mark.parametrize("target", E8M0_TARGETS)
def test_every_e8m0_code_casts_to_a_float_as_ml_dtypes(target, to):
    codes = codes_of("f8E8M0FNU")
    model = model_of("Cast", {"x": codes}, opset=24, to=to)
    (out,) = compiled_outputs(model, target, codes)
    expected = codes.astype(helper.tensor_dtype_to_np_dtype(to))  # 2^-127 as f32 is subnormal; as a half, 0
    assert_same_bits(out, expected)  # NaN as NaN: its payload is the target's (NVIDIA's 0x7fffffff)


@pytest.mark.parametrize("name", ["f8E5M2", "f8E8M0FNU"])
@pytest.mark.parametrize("target", TARGETS)
def test_a_saturating_cast_from_a_narrow_float_to_float8_clamps_its_value(target, name):
    codes = codes_of(name)
    value = codes.astype(np.float32)
    codes = codes[~(((value == 0) | np.isnan(value)) & np.signbit(value))]  # signs a kernel cannot read
    model = model_of("Cast", {"x": codes}, opset=24, to=17, saturate=1)
    (out,) = compiled_outputs(model, target, codes)
    assert_same_bytes(codes, out, reference_outputs(model, {"x": codes})[0])


@pytest.mark.parametrize("target", TARGETS)
def test_round_mode_leaves_a_cast_to_another_type_alone(target):
    """Cast-24: round_mode "only applies to casting to float8e8m0"."""
    x = every_half_as_float()
    model = model_of("Cast", {"x": x}, opset=24, to=17, round_mode="down", saturate=0)
    (out,) = compiled_outputs(model, target, x)
    assert_same_bytes(x, out, x.astype(ml_dtypes.float8_e4m3fn))


@pytest.mark.parametrize("round_mode", ROUND_MODES)
def test_castlike_to_e8m0_takes_round_mode_as_cast_does(round_mode):
    """onnx's reference CastLike drops round_mode (it rounds "up" in each mode); Cast's is the spec's."""
    x = e8m0_inputs()
    like = np.ones(1, ml_dtypes.float8_e8m0fnu)
    model = model_of("CastLike", {"x": x}, {"like": like}, opset=25, round_mode=round_mode, saturate=1)
    (out,) = compiled_outputs(model, "vmvx", x)
    cast = model_of("Cast", {"x": x}, opset=25, to=24, round_mode=round_mode, saturate=1)
    assert_same_bytes(x, out, reference_outputs(cast, {"x": x})[0])


def test_a_cast_to_e8m0_in_an_unknown_round_mode_is_refused():
    x = np.ones(4, np.float32)
    with pytest.raises(UnsupportedOpError, match="round_mode 'zero'"):
        OnnxImporter().load(model_of("Cast", {"x": x}, opset=24, to=24, round_mode="zero"))
