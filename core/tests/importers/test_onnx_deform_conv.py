"""ONNX's DeformConv (opset 22, `onnx_image.py`) at what ONNX's four node tests (one or two channels, 2x2 kernels,
no stride) leave out: conv groups and offset groups together, nested or not (the gathers read rows of the channels
that share both), strides, dilations, asymmetric pads and non-square kernels, a mask and a bias, offsets that move
taps partly and wholly outside the image or onto its edges, W and B as initializers, a batch known only at run time,
float16; and what is refused. Each model is compiled and run; the reference is onnxruntime's DeformConv (onnx's
reference evaluator agrees with it, but takes seconds a case)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import helper  # noqa: E402
from retarget.errors import InputError, UnsupportedOpError  # noqa: E402
from retarget.importers.onnx import OnnxImporter  # noqa: E402
from retarget.testing.onnx_cases import graph_of, matches_reference, model_of  # noqa: E402
from retarget.testing.torch_cases import importer_targets  # noqa: E402

TARGETS = importer_targets()  # vmvx and llvm-cpu, or RETARGET_IMPORTER_TARGETS (GPUs too)
F32 = np.float32
rng = np.random.default_rng(0)


def deform_conv(x_shape, outputs, kernel, attrs, offsets="inside", mask=True, bias=True, dtype=F32):
    """Inputs (X, W, offset[, B][, mask]) of random values, offsets within a pixel or two of each tap ("inside"),
    or mixing taps wholly outside, across the edges and exactly on them ("outside")."""
    n, c, h, w = x_shape
    dims = range(2)
    strides, dilations = attrs.get("strides", [1, 1]), attrs.get("dilations", [1, 1])
    pads = attrs.get("pads", [0, 0, 0, 0])
    out = [(s + pads[d] + pads[d + 2] - dilations[d] * (kernel[d] - 1) - 1) // strides[d] + 1
           for d, s in zip(dims, (h, w))]
    groups = attrs.get("offset_group", 1) * kernel[0] * kernel[1]
    if offsets == "inside":
        offset = rng.normal(0, 1.5, (n, groups * 2, *out))
    else:  # far outside, just outside, on the edges' pixels (integral: one corner), past the far edge
        offset = rng.choice([-40.0, -h - 0.5, -1.0, -0.5, 0.0, 0.3, h - 1.0, h + 0.7, 25.0], (n, groups * 2, *out))
        offset += rng.choice([0.0, 0.0, 0.25], offset.shape)
    inputs = {"x": rng.standard_normal(x_shape), "w": rng.standard_normal((outputs, c // attrs.get("group", 1),
                                                                             *kernel)),
              "offset": offset, "b": rng.standard_normal(outputs) if bias else None,
              "mask": rng.random((n, groups, *out)) if mask else None}
    return {k: v.astype(dtype) for k, v in inputs.items() if v is not None}


def node(inputs: dict, kernel, **attrs):
    names = [k if k in inputs else "" for k in ("x", "w", "offset", "b", "mask")]
    while not names[-1]:
        names.pop()
    return helper.make_node("DeformConv", names, ["y"], kernel_shape=list(kernel), **attrs)


CASES = {  # name: (X shape, output channels, kernel, attributes, offsets, mask, bias)
    "groups-2-offset-groups-3-strided-dilated-asymmetric-pads": (
        (2, 6, 7, 8), 4, (2, 3), {"group": 2, "offset_group": 3, "strides": [2, 1], "dilations": [1, 2],
                                  "pads": [1, 0, 2, 1]}, "inside", True, True),
    "offset-groups-2-of-4-channels-stride-2": (
        (1, 8, 9, 7), 5, (3, 3), {"offset_group": 2, "strides": [2, 2], "pads": [1, 1, 1, 1]}, "inside", True,
        False),
    "groups-2-sharing-one-offset-group": ((2, 8, 6, 6), 6, (3, 2), {"group": 2, "pads": [0, 1, 1, 0]}, "inside",
                                          False, True),
    "depthwise": ((1, 4, 6, 5), 8, (3, 3), {"group": 4, "offset_group": 2, "pads": [1, 1, 1, 1]}, "inside", True,
                  True),
    "taps-outside-across-and-on-the-edges": ((2, 3, 6, 7), 4, (3, 3), {"pads": [2, 1, 0, 1]}, "outside", True,
                                             True),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", CASES)
def test_deform_conv_matches_onnxruntime(case, target):
    x_shape, outputs, kernel, attrs, offsets, mask, bias = CASES[case]
    inputs = deform_conv(x_shape, outputs, kernel, attrs, offsets, mask, bias)
    model = graph_of([node(inputs, kernel, **attrs)], inputs, ["y"], opset=22)
    matches_reference(model, target, inputs, rtol=1e-5, atol=1e-5, onnxruntime=True)


@pytest.mark.parametrize("target", TARGETS)
def test_deform_conv_of_a_batch_known_only_at_run_time_and_initializer_weights(target):
    """A detector's DCN layer: W and B initializers, the batch a symbol that X, offset and mask each name their own
    way (an exporter's unnamed axis too): one batch."""
    kernel, attrs = (3, 3), {"offset_group": 2, "pads": [1, 1, 1, 1]}
    inputs = deform_conv((3, 4, 5, 6), 4, kernel, attrs)
    constants = {"w": inputs.pop("w"), "b": inputs.pop("b")}
    shapes = {"x": ["N", 4, 5, 6], "offset": [None, 36, 5, 6], "mask": ["batch", 18, 5, 6]}
    model = graph_of([node({**inputs, **constants}, kernel, **attrs)], inputs, ["y"], constants, opset=22,
                     shapes=shapes)
    matches_reference(model, target, inputs, rtol=1e-5, atol=1e-5, onnxruntime=True)


@pytest.mark.parametrize("target", TARGETS)
def test_deform_conv_of_float16_samples_in_float32(target):
    kernel, attrs = (3, 3), {"pads": [1, 1, 1, 1]}
    inputs = deform_conv((1, 4, 6, 6), 3, kernel, attrs, dtype=np.float16)
    model = graph_of([node(inputs, kernel, **attrs)], inputs, ["y"], opset=22)
    matches_reference(model, target, inputs, rtol=1e-2, atol=1e-2, onnxruntime=True)


def test_deform_conv_of_a_3d_image_is_refused():
    x, w, offset = np.zeros((1, 1, 3, 3, 3), F32), np.zeros((1, 1, 2, 2, 2), F32), np.zeros((1, 24, 2, 2, 2), F32)
    with pytest.raises(UnsupportedOpError, match="only 2-D"):
        OnnxImporter().load(model_of("DeformConv", {"x": x, "w": w, "offset": offset}, opset=22))


def test_deform_conv_of_an_image_size_known_only_at_run_time_is_refused():
    inputs = deform_conv((1, 2, 4, 4), 2, (2, 2), {}, mask=False, bias=False)
    model = graph_of([node(inputs, (2, 2))], inputs, ["y"], opset=22, shapes={"x": [1, 2, "H", "W"]})
    with pytest.raises(UnsupportedOpError, match="known at import time"):
        OnnxImporter().load(model)


def test_deform_conv_with_offsets_for_another_offset_group_count_is_an_input_error():
    inputs = deform_conv((1, 4, 5, 5), 2, (3, 3), {"offset_group": 2}, bias=False)
    model = graph_of([node(inputs, (3, 3), offset_group=4)], inputs, ["y"], opset=22)
    with pytest.raises(InputError, match="offset"):
        OnnxImporter().load(model)
