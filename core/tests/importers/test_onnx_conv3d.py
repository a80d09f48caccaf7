"""ONNX's Conv and ConvTranspose on volumes (NCDHW), against onnx's reference evaluator (onnxruntime where that
evaluator is wrong), for the attribute combinations that ONNX's own node tests (only test_convtranspose_3d) leave
out: asymmetric pads, strides, dilations and groups, depthwise, auto_pad, output_padding and output_shape."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402
from retarget.errors import UnsupportedOpError  # noqa: E402
from retarget.importers.onnx import OnnxImporter  # noqa: E402
from retarget.ir import verify  # noqa: E402
from retarget.testing.numerics import relative_error  # noqa: E402
from retarget.vmvx.interpreter import run_function  # noqa: E402

TOLERANCE = 1e-5


def randn(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def one_node_model(op, x_shape, weights: dict, **attrs):
    """A model of one `op` node reading input x and the constant `weights` (name -> array), in that order."""
    node = helper.make_node(op, ["x", *weights], ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, name) for name, w in weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


# onnx 1.23's reference ConvTranspose slices a group's filter by output channels (it fails, or is wrong, for
# group > 1), and with output_shape but no auto_pad crops the end instead of computing the pads as the spec says;
# onnxruntime (which refuses auto_pad with dilations) is the reference there
ONNXRUNTIME_INSTEAD = ("output_shape (pads ignored)", "output_shape with output padding", "2 groups, dilations",
                       "depthwise, stride 3 in depth, output padding")


def reference_output(model, x, onnxruntime: bool):
    if not onnxruntime:
        return ReferenceEvaluator(model).run(None, {"x": x})[0]
    ort = pytest.importorskip("onnxruntime")
    model.ir_version = 8  # what onnxruntime 1.31 reads
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def matches_reference(op, x_shape, w_shape, bias, attrs, onnxruntime=False):
    out_channels = w_shape[0] if op == "Conv" else w_shape[1] * attrs.get("group", 1)
    weights = {"w": randn(*w_shape, seed=1)} | ({"b": randn(out_channels, seed=2)} if bias else {})
    model = one_node_model(op, x_shape, weights, **attrs)
    x = randn(*x_shape)
    expected = reference_output(model, x, onnxruntime)
    (out,) = run_function(verify(OnnxImporter().load(model)).functions["main"], [x])
    assert out.shape == expected.shape
    assert relative_error(out, expected) <= TOLERANCE


# name -> (x's shape, filter's shape (C_out, C_in / group, kd, kh, kw), bias, attributes)
CONV = {
    "asymmetric pads, strides": ((1, 3, 5, 6, 7), (4, 3, 3, 3, 3), True,
                                 dict(strides=[2, 1, 2], pads=[1, 0, 2, 0, 1, 1])),
    "2 groups, dilations": ((2, 4, 6, 5, 6), (6, 2, 2, 3, 2), True,
                            dict(group=2, dilations=[2, 1, 2], pads=[1, 1, 0, 0, 1, 1])),
    "depthwise": ((1, 4, 5, 5, 5), (4, 1, 3, 3, 3), False, dict(group=4, pads=[1] * 6)),
    "depthwise, 3 outputs a channel, strided": ((1, 2, 5, 6, 5), (6, 1, 2, 3, 3), True,
                                                dict(group=2, strides=[1, 2, 2], pads=[0, 1, 1, 1, 1, 0])),
    "SAME_UPPER, stride 2": ((1, 3, 5, 6, 7), (2, 3, 3, 2, 3), False, dict(auto_pad="SAME_UPPER", strides=[2, 2, 2])),
    "SAME_LOWER, dilations": ((1, 3, 5, 6, 7), (2, 3, 2, 2, 3), True,
                              dict(auto_pad="SAME_LOWER", dilations=[2, 1, 2])),
}

# name -> (x's shape, filter's shape (C_in, C_out / group, kd, kh, kw), bias, attributes)
CONV_TRANSPOSE = {
    "stride 2, asymmetric pads, output padding": ((1, 4, 3, 4, 3), (4, 3, 3, 3, 3), True,
                                                  dict(strides=[2, 2, 2], pads=[1, 0, 1, 1, 1, 0],
                                                       output_padding=[1, 1, 0])),
    "output_shape (pads ignored)": ((1, 4, 3, 4, 3), (4, 3, 3, 3, 3), False,
                                    dict(strides=[3, 2, 2], output_shape=[10, 9, 7], pads=[2, 0, 1, 0, 1, 0])),
    "output_shape with output padding": ((1, 4, 3, 4, 3), (4, 2, 3, 2, 3), True,
                                         dict(strides=[3, 2, 2], output_shape=[11, 8, 7], output_padding=[1, 1, 0])),
    "SAME_UPPER, stride (2, 3, 2)": ((1, 4, 3, 4, 3), (4, 3, 3, 3, 3), True,
                                     dict(strides=[2, 3, 2], auto_pad="SAME_UPPER")),
    "SAME_LOWER with dilations": ((1, 4, 3, 4, 3), (4, 3, 3, 3, 3), False,
                                  dict(strides=[3, 2, 2], dilations=[2, 1, 2], auto_pad="SAME_LOWER")),
    "2 groups, dilations": ((2, 4, 3, 3, 4), (4, 2, 2, 3, 2), True,
                            dict(strides=[2, 1, 2], dilations=[2, 2, 1], group=2)),
    "depthwise, stride 3 in depth, output padding": ((1, 3, 3, 3, 3), (3, 2, 2, 2, 2), True,
                                                     dict(strides=[3, 1, 2], group=3, output_padding=[2, 0, 1])),
}


@pytest.mark.parametrize("name", CONV)
def test_conv3d_matches_the_reference(name):
    matches_reference("Conv", *CONV[name])


@pytest.mark.parametrize("name", CONV_TRANSPOSE)
def test_conv_transpose3d_matches_the_reference(name):
    matches_reference("ConvTranspose", *CONV_TRANSPOSE[name], onnxruntime=name in ONNXRUNTIME_INSTEAD)


def test_a_4d_conv_is_refused_naming_what_is_supported():
    model = one_node_model("Conv", (1, 2, 3, 3, 3, 3), {"w": randn(2, 2, 1, 1, 1, 1)})
    with pytest.raises(UnsupportedOpError, match=r"rank-6 .*1-D, 2-D and 3-D"):
        OnnxImporter().load(model)
