"""ONNX Resize beyond its node tests: antialiased downscales strong enough that an output reads more than
`compose.MAX_GATHERED_TAPS` inputs (a matrix product along the axis instead of gathers), cubic resizes with
exclude_outside and a non-default coefficient, tf_crop_and_resize with a roi past the input (extrapolation),
resizes of some axes only, half floats; against onnxruntime and onnx's reference evaluator. Each runs on the
importer targets (vmvx and llvm-cpu, or RETARGET_IMPORTER_TARGETS)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
import retarget  # noqa: E402
from retarget.errors import UnsupportedOpError  # noqa: E402
from retarget.importers import compose  # noqa: E402
from retarget.importers.onnx import OnnxImporter  # noqa: E402
from retarget.testing.onnx_cases import assert_same, compiled_outputs, model_of, reference_outputs  # noqa: E402
from retarget.testing.torch_cases import importer_targets  # noqa: E402

TARGETS = importer_targets()


def image(*shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


CASES = {  # name: (input, constants (roi, scales, sizes), attributes)
    "cubic antialias, 1/4 (16 taps: a matrix product)": (
        image(1, 2, 24, 20), {"roi": np.zeros(0, np.float32), "scales": np.array([1, 1, 0.25, 0.25], np.float32)},
        dict(mode="cubic", antialias=1)),
    "linear antialias to sizes (4 taps: gathers)": (
        image(2, 1, 10, 9), {"roi": np.zeros(0, np.float32), "scales": np.zeros(0, np.float32),
                             "sizes": np.array([2, 1, 6, 4], np.int64)},
        dict(mode="linear", antialias=1)),
    "cubic upscale, exclude_outside, a=-0.5, align_corners": (
        image(1, 1, 5, 6), {"roi": np.zeros(0, np.float32), "scales": np.array([1, 1, 1.6, 2.5], np.float32)},
        dict(mode="cubic", cubic_coeff_a=-0.5, exclude_outside=1, coordinate_transformation_mode="align_corners")),
    "cubic on the middle axes only (NHWC), pytorch_half_pixel": (
        image(1, 7, 6, 3), {"roi": np.zeros(0, np.float32), "scales": np.array([1.5, 2], np.float32)},
        dict(mode="cubic", axes=[1, 2], coordinate_transformation_mode="pytorch_half_pixel")),
    "tf_crop_and_resize, linear, the roi past the input": (
        image(1, 1, 8, 8), {"roi": np.array([0, 0, -0.2, 0.4, 1, 1, 0.6, 1.3], np.float32),
                            "scales": np.zeros(0, np.float32), "sizes": np.array([1, 1, 5, 7], np.int64)},
        dict(mode="linear", coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=-7.0)),
    "tf_crop_and_resize, nearest, axes": (
        image(2, 9, 7), {"roi": np.array([0.1, 0.3, 0.9, 1.2], np.float32), "scales": np.zeros(0, np.float32),
                         "sizes": np.array([4, 6], np.int64)},
        dict(mode="nearest", axes=[1, 2], coordinate_transformation_mode="tf_crop_and_resize")),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", CASES)
def test_resize_matches_onnxruntime_and_the_reference(name, target):
    x, constants, attrs = CASES[name]
    model = model_of("Resize", {"x": x}, constants, opset=19, **attrs)
    outs = compiled_outputs(model, target, x)
    assert_same(outs, reference_outputs(model, {"x": x}), rtol=1e-5, atol=1e-5)
    assert_same(outs, reference_outputs(model, {"x": x}, onnxruntime=True), rtol=1e-4, atol=1e-5)


def test_a_strong_antialiased_downscale_is_one_matrix_product_and_a_weak_one_gathers():
    def ops(scales):
        x = image(1, 1, 32, 32)
        model = model_of("Resize", {"x": x}, {"roi": np.zeros(0, np.float32), "scales": np.array(scales, np.float32)},
                         mode="cubic", antialias=1)
        return [op.name for op in OnnxImporter().load(model).functions["main"].ops]

    assert ops([1, 1, 1, 0.25]).count("rt.matmul") == 1  # 16 taps > MAX_GATHERED_TAPS
    assert compose.MAX_GATHERED_TAPS < 16
    gathers = ops([1, 1, 1, 0.75])  # 2 - 2 * floor(-2 / 0.75 + 1) = 6 taps
    assert gathers.count("rt.gather") == 6 and "rt.matmul" not in gathers


@pytest.mark.parametrize("target", TARGETS)
def test_a_cubic_resize_of_half_floats_stays_half(target):
    x = image(1, 3, 6, 6, dtype=np.float16)
    model = model_of("Resize", {"x": x}, {"roi": np.zeros(0, np.float32),
                                          "scales": np.array([1, 1, 2, 2], np.float32)}, opset=19, mode="cubic")
    (out,) = compiled_outputs(model, target, x)
    expected = reference_outputs(model, {"x": x.astype(np.float32)})[0]
    assert out.dtype == np.float16 and out.shape == (1, 3, 12, 12)
    np.testing.assert_allclose(out.astype(np.float32), expected, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("attrs, constants, message", [
    (dict(mode="nearest", antialias=1), {"scales": np.array([1, 1, 0.5, 0.5], np.float32)}, "antialias"),
    (dict(mode="linear", coordinate_transformation_mode="tf_crop_and_resize"),
     {"scales": np.array([1, 1, 0.5, 0.5], np.float32)}, "roi"),
    (dict(mode="lanczos"), {"scales": np.array([1, 1, 0.5, 0.5], np.float32)}, "lanczos"),
])
def test_resizes_that_are_not_defined_are_refused_by_name(attrs, constants, message):
    x = image(1, 1, 4, 4)
    model = model_of("Resize", {"x": x}, {"roi": np.zeros(0, np.float32), **constants}, **attrs)
    with pytest.raises(UnsupportedOpError, match=message):
        retarget.compile(model, "vmvx")
