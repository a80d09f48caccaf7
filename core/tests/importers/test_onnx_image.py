"""ONNX's image ops (CenterCropPad, AffineGrid, Col2Im, RoiAlign) and TensorScatter (`onnx_image.py`), at what
ONNX's own node tests (test_onnx_node_tests.py) leave out: odd crops and pads on chosen axes, AffineGrid feeding
GridSample (a spatial transformer), Col2Im's overlapping blocks with strides, dilations and pads in 1-D to 3-D,
RoiAlign's adaptive sampling (sampling_ratio 0) and rois partly or wholly outside the image, opset 13's RoiAlign
(output_half_pixel by default), TensorScatter's circular wrap and other axes; and what is refused. Each model is
compiled and run; the reference is onnx's ReferenceEvaluator, or onnxruntime for RoiAlign (both take max mode as the
largest weighted tap; the evaluator reads opset 10's RoiAlign as opset 16's, onnxruntime does not)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import helper  # noqa: E402
from retarget.errors import InputError, UnsupportedOpError  # noqa: E402
from retarget.importers.onnx import OnnxImporter  # noqa: E402
from retarget.testing.onnx_cases import graph_of, matches_reference, model_of  # noqa: E402
from retarget.testing.torch_cases import importer_targets  # noqa: E402

TARGETS = ["vmvx", "llvm-cpu"]
GPU_TARGETS = importer_targets()  # vmvx and llvm-cpu, or RETARGET_IMPORTER_TARGETS (GPUs too)
F32 = np.float32
rng = np.random.default_rng(0)


def refused(model, match: str):
    with pytest.raises(UnsupportedOpError, match=match):
        OnnxImporter().load(model)


# -- CenterCropPad --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("shape, axes, dtype", [
    ((4, 11), [0, -2], F32),  # axis 0 cropped by 3, axis 1 padded by 3: the odd element at the end both times
    ((6, 2, 5), None, np.int32),  # every axis: cropped by 1 and by 6, padded by 2
], ids=["odd-differences-on-axes", "all-axes-int32"])
def test_center_crop_pad_places_the_odd_element_at_the_end(shape, axes, dtype, target):
    x = rng.integers(-50, 50, (7, 8, 3)).astype(dtype)
    attrs = {"axes": axes} if axes else {}
    matches_reference(model_of("CenterCropPad", {"x": x}, {"shape": np.array(shape, np.int64)}, opset=18, **attrs),
                      target, {"x": x})


def test_center_crop_pad_of_a_shape_known_only_at_run_time_is_refused():
    x = np.zeros((4, 4), F32)
    refused(model_of("CenterCropPad", {"x": x, "shape": np.array([2, 2], np.int64)}, opset=18), "known at import")


# -- AffineGrid -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("target", GPU_TARGETS)
@pytest.mark.parametrize("size, align_corners", [((2, 3, 5, 7), 0), ((2, 2, 3, 4, 5), 1)], ids=["2d", "3d-align"])
def test_affine_grid_feeds_grid_sample_as_a_spatial_transformer(size, align_corners, target):
    dims = len(size) - 2
    image = rng.standard_normal(size).astype(F32)
    identity = np.eye(dims, dims + 1)
    theta = (identity + 0.3 * rng.standard_normal((size[0], dims, dims + 1))).astype(F32)  # rotated, scaled, moved
    nodes = [helper.make_node("AffineGrid", ["theta", "size"], ["grid"], align_corners=align_corners),
             helper.make_node("GridSample", ["image", "grid"], ["y"], align_corners=align_corners)]
    inputs = {"image": image, "theta": theta}
    model = graph_of(nodes, inputs, ["y"], {"size": np.array(size, np.int64)}, opset=20)
    matches_reference(model, target, inputs, rtol=1e-4, atol=1e-5, onnxruntime=True)


@pytest.mark.parametrize("target", GPU_TARGETS)
@pytest.mark.parametrize("padding", ["border", "reflection", "zeros"])
@pytest.mark.parametrize("align_corners", [0, 1])
def test_cubic_grid_sample_past_the_edges_matches_onnxruntime_and_torch(padding, align_corners, target):
    """Positions up to half an image past the edges. With `border`, a cubic position stays where it is and each tap
    is clipped, as onnxruntime and torch do; onnx's reference evaluator clips the position first (0.07-0.2 away from
    both here), so the reference is onnxruntime."""
    image = rng.standard_normal((1, 2, 5, 6)).astype(F32)
    grid = (rng.random((1, 4, 3, 2)) * 3 - 1.5).astype(F32)
    model = model_of("GridSample", {"image": image, "grid": grid}, opset=20, mode="cubic", padding_mode=padding,
                     align_corners=align_corners)
    matches_reference(model, target, {"image": image, "grid": grid}, rtol=1e-4, atol=1e-5, onnxruntime=True)


def test_affine_grid_of_a_1d_size_is_refused():
    theta = np.zeros((1, 1, 2), F32)
    refused(model_of("AffineGrid", {"theta": theta}, {"size": np.array([1, 1, 5], np.int64)}, opset=20), "2-D")


# -- Col2Im ---------------------------------------------------------------------------------------------------------

COL2IM = {  # name: (image_shape, block_shape, attributes)
    "overlapping-2d": ((7, 6), (3, 2), {"strides": [2, 1], "dilations": [1, 2], "pads": [1, 0, 2, 1]}),
    "1d-dilated": ((9,), (3,), {"dilations": [3], "pads": [1, 2]}),
    "tiling-3d-padded": ((4, 5, 3), (2, 2, 3), {"strides": [2, 2, 3], "pads": [0, 1, 0, 0, 0, 0]}),
}


@pytest.mark.parametrize("target", GPU_TARGETS)
@pytest.mark.parametrize("case", COL2IM)
def test_col2im_sums_the_blocks_that_overlap(case, target):
    image, block, attrs = COL2IM[case]
    dims = len(image)
    strides, dilations = attrs.get("strides", [1] * dims), attrs.get("dilations", [1] * dims)
    pads = attrs.get("pads", [0] * 2 * dims)
    blocks = [(s + pads[d] + pads[d + dims] - dilations[d] * (k - 1) - 1) // strides[d] + 1
              for d, (s, k) in enumerate(zip(image, block))]
    x = rng.standard_normal((2, 3 * int(np.prod(block)), int(np.prod(blocks)))).astype(F32)
    model = model_of("Col2Im", {"x": x}, {"image_shape": np.array(image, np.int64),
                                          "block_shape": np.array(block, np.int64)}, opset=18, **attrs)
    matches_reference(model, target, {"x": x}, rtol=1e-5, atol=1e-6)


def test_col2im_of_an_image_shape_known_only_at_run_time_is_refused():
    x = np.zeros((1, 4, 9), F32)
    model = model_of("Col2Im", {"x": x, "image_shape": np.array([4, 4], np.int64)},
                     {"block_shape": np.array([2, 2], np.int64)}, opset=18)
    refused(model, "known at import")


# -- RoiAlign -------------------------------------------------------------------------------------------------------

ROIS = np.array([[0.5, 1.2, 6.3, 7.1],  # inside
                 [-2, -1, 3, 4],  # over the top-left edge
                 [4, 4, 12, 11],  # over the bottom-right edge
                 [1, 1, 1.2, 1.5],  # smaller than a pixel
                 [-30, -20, 40, 50],  # around the whole image: adaptive bins of many samples, most outside
                 [3, 3, 1, 2],  # reversed (negative size)
                 [20, 1, 25, 3]], F32)  # wholly outside
BATCH = np.array([0, 1, 1, 0, 1, 0, 1], np.int64)


def roi_align(opset=16, shapes=None, **attrs):
    x = rng.standard_normal((2, 3, 8, 9)).astype(F32)
    inputs = {"x": x, "rois": ROIS, "batch_indices": BATCH}
    return model_of("RoiAlign", inputs, opset=opset, shapes=shapes, output_height=3, output_width=4,
                    spatial_scale=0.9, **attrs), inputs


@pytest.mark.parametrize("target", GPU_TARGETS)
@pytest.mark.parametrize("mode, coordinates, ratio", [
    ("avg", "half_pixel", 2), ("max", "output_half_pixel", 3),
    ("avg", "half_pixel", 0), ("avg", "output_half_pixel", 0),  # adaptive: ceil(bin) samples a bin
])
def test_roi_align_matches_onnxruntime(mode, coordinates, ratio, target):
    model, inputs = roi_align(mode=mode, coordinate_transformation_mode=coordinates, sampling_ratio=ratio)
    matches_reference(model, target, inputs, rtol=1e-5, atol=1e-6, onnxruntime=True)


@pytest.mark.parametrize("target", TARGETS)
def test_roi_align_of_opset_13_defaults_to_output_half_pixel(target):
    model, inputs = roi_align(opset=13, sampling_ratio=2)
    matches_reference(model, target, inputs, rtol=1e-5, atol=1e-6, onnxruntime=True)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("ratio", [2, 0])
def test_roi_align_takes_a_roi_count_and_batch_known_only_at_run_time(ratio, target):
    """A detector's rois come from NonMaxSuppression: their count is a symbol, as is the batch."""
    model, inputs = roi_align(shapes={"x": ["N", 3, 8, 9], "rois": ["R", 4], "batch_indices": ["R"]},
                              sampling_ratio=ratio)
    matches_reference(model, target, inputs, rtol=1e-5, atol=1e-6, onnxruntime=True)


def test_roi_align_max_mode_with_adaptive_sampling_is_refused():
    refused(roi_align(mode="max", sampling_ratio=0)[0], "sampling_ratio 0")


# -- TensorScatter --------------------------------------------------------------------------------------------------

TENSOR_SCATTER = {  # name: (cache shape, update shape, write indices or None, attributes)
    "linear": ((3, 2, 6, 4), (3, 2, 3, 4), [0, 3, 1], {}),
    "circular-wrapping": ((3, 2, 6, 4), (3, 2, 3, 4), [0, 4, 11], {"mode": "circular"}),
    "axis-1-of-3d": ((2, 5, 3), (2, 2, 3), [3, 0], {"axis": 1}),
    "prefill-without-indices": ((2, 1, 5, 4), (2, 1, 2, 4), None, {}),
}


@pytest.mark.parametrize("target", GPU_TARGETS)
@pytest.mark.parametrize("case", TENSOR_SCATTER)
def test_tensor_scatter_writes_each_batch_from_its_index(case, target):
    cache_shape, update_shape, write, attrs = TENSOR_SCATTER[case]
    inputs = {"cache": rng.standard_normal(cache_shape).astype(F32),
              "update": rng.standard_normal(update_shape).astype(F32)}
    if write is not None:
        inputs["write_indices"] = np.array(write, np.int64)
    matches_reference(model_of("TensorScatter", inputs, opset=24, **attrs), target, inputs)


def test_tensor_scatter_along_the_batch_axis_is_an_input_error():
    cache = np.zeros((4, 3), F32)
    with pytest.raises(InputError, match="must not be 0"):
        OnnxImporter().load(model_of("TensorScatter", {"cache": cache, "update": cache[:2]}, opset=24, axis=0))


def test_tensor_scatter_of_an_undefined_mode_is_refused():
    cache = np.zeros((2, 4, 3), F32)
    refused(model_of("TensorScatter", {"cache": cache, "update": cache[:, :1]}, opset=24, mode="ring"), "ring")
