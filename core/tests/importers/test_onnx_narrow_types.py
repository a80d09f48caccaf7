"""float8 (E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ), float4 E2M1 and the 4- and 2-bit integers on compiled targets: no code
generator spells them, so `retarget.kernel.narrow` makes them bytes and integer arithmetic. Each cast matches
ml_dtypes (ONNX's reference) bit for bit over every f16 value as a float, and moves keep every code as it is."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import helper  # noqa: E402
from retarget.ir.dtypes import DTYPES  # noqa: E402
from retarget.kernel.narrow import FORMATS  # noqa: E402
from retarget.testing.onnx_cases import compiled_outputs, graph_of, model_of, reference_outputs  # noqa: E402
from retarget.testing.torch_cases import importer_targets  # noqa: E402

TARGETS = sorted(set(importer_targets()) - {"vmvx"} | {"llvm-cpu", "vulkan-spirv", "webgpu-spirv"})
ONNX_TYPE = {"f8E4M3FN": 17, "f8E4M3FNUZ": 18, "f8E5M2": 19, "f8E5M2FNUZ": 20, "ui4": 21, "i4": 22, "f4E2M1FN": 23,
             "ui2": 25, "i2": 26}


def every_half_as_float() -> np.ndarray:
    """Every f16 value as f32: each narrow float's values, the ties between them, the overflows, subnormals,
    infinities and NaN. Not -0.0 nor NaNs with the sign bit set: a kernel cannot read their sign (-0.0 becomes +0, a
    NaN the type's NaN of positive sign)."""
    x = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32)
    return x[~(((x == 0) | np.isnan(x)) & np.signbit(x))]


def codes_of(name: str) -> np.ndarray:
    return np.arange(1 << min(DTYPES[name].bits, 8), dtype=np.uint8).view(DTYPES[name].np_dtype)


@pytest.mark.parametrize("name", sorted(FORMATS))
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
    mismatch = np.flatnonzero(out.view(np.uint8) != expected.view(np.uint8))
    assert mismatch.size == 0, f"{mismatch.size} differ, first {x[mismatch[:5]]}: {out.view(np.uint8)[mismatch[:5]]}"


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
