"""ONNX's ConvTranspose, GroupNormalization and InstanceNormalization against onnxruntime, for the attribute
combinations that ONNX's own node tests (test_onnx_node_tests.py) leave out: output padding with asymmetric
pads, dilations with groups, SAME_LOWER, output_shape with and without auto_pad, 1-D; opset 18's per-group
scale and bias beside opset 21's per-channel ones."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from retarget.importers.onnx import OnnxImporter  # noqa: E402
from retarget.ir import verify  # noqa: E402
from retarget.testing.devices import skip_unless_runs  # noqa: E402
from retarget.testing.numerics import relative_error  # noqa: E402
from retarget.vmvx.interpreter import run_function  # noqa: E402

TOLERANCE = 1e-5


def one_node_model(op, x_shape, weights: dict, opset=21, **attrs):
    """A model of one `op` node reading input x and the constant `weights` (name -> array), in that order."""
    node = helper.make_node(op, ["x", *weights], ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, name) for name, w in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8  # what onnxruntime 1.31 reads
    return model


def onnxruntime_output(model, x):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def matches_onnxruntime(model, x):
    expected = onnxruntime_output(model, x)
    (out,) = run_function(verify(OnnxImporter().load(model)).functions["main"], [x])
    assert out.shape == expected.shape
    assert relative_error(out, expected) <= TOLERANCE


def randn(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# name -> (x's shape, filter's shape (C_in, C_out / group, k...), bias, attributes)
CONV_TRANSPOSE = {
    "stride 2": ((1, 4, 4, 3), (4, 3, 3, 3), False, dict(strides=[2, 2])),
    "asymmetric pads and output padding": ((1, 4, 4, 3), (4, 3, 3, 3), True,
                                           dict(strides=[2, 3], pads=[1, 0, 2, 1], output_padding=[1, 2])),
    "dilations and 2 groups": ((2, 4, 4, 3), (4, 2, 3, 3), True, dict(strides=[2, 2], dilations=[2, 1], group=2)),
    "SAME_UPPER, stride (3, 2)": ((1, 4, 4, 3), (4, 3, 3, 3), False, dict(strides=[3, 2], auto_pad="SAME_UPPER")),
    "SAME_LOWER, stride (3, 2)": ((1, 4, 4, 3), (4, 3, 3, 3), True, dict(strides=[3, 2], auto_pad="SAME_LOWER")),
    "SAME_UPPER with dilations": ((1, 4, 4, 3), (4, 3, 3, 3), False,
                                  dict(strides=[3, 2], dilations=[2, 2], auto_pad="SAME_UPPER")),
    "SAME_LOWER, stride 1, dilations": ((1, 4, 4, 3), (4, 3, 3, 3), False,
                                        dict(auto_pad="SAME_LOWER", dilations=[2, 2])),
    "VALID": ((1, 4, 4, 3), (4, 3, 3, 3), True, dict(strides=[2, 2], auto_pad="VALID")),
    "output_shape (pads ignored)": ((1, 4, 4, 3), (4, 3, 3, 3), True,
                                    dict(strides=[3, 2], output_shape=[10, 6], pads=[2, 0, 1, 0])),
    "output_shape with output padding": ((1, 4, 4, 3), (4, 3, 3, 3), False,
                                         dict(strides=[3, 2], output_shape=[11, 6], output_padding=[1, 1])),
    "output_shape with SAME_UPPER": ((1, 4, 4, 3), (4, 3, 3, 3), False,
                                     dict(strides=[3, 2], output_shape=[11, 6], auto_pad="SAME_UPPER")),
    "output_shape with SAME_LOWER": ((1, 4, 4, 3), (4, 3, 3, 3), True,
                                     dict(strides=[3, 2], output_shape=[11, 6], auto_pad="SAME_LOWER")),
    "1-D, stride 3, output padding, groups": ((2, 4, 5), (4, 1, 3), True,
                                              dict(strides=[3], pads=[1, 0], output_padding=[2], group=2)),
    "1-D SAME_LOWER, dilation 2": ((1, 2, 6), (2, 3, 4), False,
                                   dict(strides=[2], dilations=[2], auto_pad="SAME_LOWER")),
}


@pytest.mark.parametrize("name", CONV_TRANSPOSE)
def test_conv_transpose_matches_onnxruntime(name):
    x_shape, w_shape, bias, attrs = CONV_TRANSPOSE[name]
    weights = {"w": randn(*w_shape, seed=1)}
    if bias:
        weights["b"] = randn(w_shape[1] * attrs.get("group", 1), seed=2)
    matches_onnxruntime(one_node_model("ConvTranspose", x_shape, weights, **attrs), randn(*x_shape))


@pytest.mark.parametrize("opset, groups, params", [(18, 2, 2), (18, 3, 3), (21, 3, 6), (21, 1, 6)],
                         ids=["opset18-2-groups", "opset18-3-groups", "opset21-3-groups", "opset21-1-group"])
@pytest.mark.parametrize("shape", [(2, 6, 5), (2, 6, 3, 4)], ids=["1d", "2d"])
def test_group_normalization_matches_onnxruntime(shape, opset, groups, params):
    """Opset 18's scale and bias hold one value a group, opset 21's one a channel."""
    weights = {"scale": randn(params, seed=1), "bias": randn(params, seed=2)}
    model = one_node_model("GroupNormalization", shape, weights, opset=opset, num_groups=groups, epsilon=1e-3)
    matches_onnxruntime(model, randn(*shape) * 3 + 2)


@pytest.mark.parametrize("shape", [(2, 4, 7), (2, 4, 3, 5), (1, 4, 2, 3, 2)], ids=["1d", "2d", "3d"])
def test_instance_normalization_matches_onnxruntime(shape):
    weights = {"scale": randn(4, seed=1), "bias": randn(4, seed=2)}
    model = one_node_model("InstanceNormalization", shape, weights, opset=17, epsilon=1e-3)
    matches_onnxruntime(model, randn(*shape) * 3 + 2)


@pytest.mark.parametrize("target", ["vmvx", "llvm-cpu"])
def test_conv_transpose_and_group_norm_compile_and_match_onnxruntime(target):
    import retarget

    skip_unless_runs(target)
    nodes = [helper.make_node("ConvTranspose", ["x", "w", "b"], ["t"], strides=[2, 2], pads=[1, 1, 0, 0],
                              output_padding=[1, 0], group=2),
             helper.make_node("GroupNormalization", ["t", "scale", "bias"], ["g"], num_groups=3),
             helper.make_node("InstanceNormalization", ["g", "scale", "bias"], ["y"])]
    weights = {"w": randn(4, 3, 3, 3, seed=1), "b": randn(6, seed=2), "scale": randn(6, seed=3),
               "bias": randn(6, seed=4)}
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (2, 4, 5, 4))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, name) for name, w in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 8
    x = randn(2, 4, 5, 4)
    expected = onnxruntime_output(model, x)
    out = retarget.load(retarget.compile(OnnxImporter().load(model), target), device="local-task").main(x)
    assert relative_error(out, expected) <= TOLERANCE
