"""ONNX's older op versions (`onnx_legacy.py`): opsets 7 to 10 and the versions before them that still mean the
same. Each case is a model of that opset, compiled for each importer target and compared with onnxruntime, which
implements those versions (onnx's reference runs few of them: Upsample and Resize-10 only at whole scales). Older
versions that the importer does not read are refused, naming the op, its version and what to do."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import helper  # noqa: E402
from retarget.errors import UnsupportedOpError  # noqa: E402
from retarget.importers import onnx_legacy  # noqa: E402
from retarget.importers.onnx import SUPPORTED_OPS, OnnxImporter  # noqa: E402
from retarget.testing.onnx_cases import graph_of, matches_reference, model_of  # noqa: E402
from retarget.testing.torch_cases import importer_targets  # noqa: E402

TARGETS = importer_targets()  # vmvx and llvm-cpu, or RETARGET_IMPORTER_TARGETS (GPUs too)
F32, I64 = np.float32, np.int64
rng = np.random.default_rng(0)
IMAGE = rng.standard_normal((2, 3, 5, 7)).astype(F32)


def matches_onnxruntime(model, target, inputs: dict, rtol=1e-5, atol=1e-6):
    matches_reference(model, target, inputs, rtol, atol, onnxruntime=True)


def scales(values):
    return {"scales": np.asarray(values, F32)}


CASES = {  # name: (op, opset, inputs, constants, outputs, attributes)
    "Clip-6, both bounds": ("Clip", 7, {"x": IMAGE}, None, ("y",), {"min": -0.5, "max": 0.75}),
    "Clip-6, a floor only": ("Clip", 7, {"x": IMAGE}, None, ("y",), {"min": 0.0}),
    "Clip-6, no bounds": ("Clip", 7, {"x": IMAGE}, None, ("y",), {}),
    "Pad-2 constant, a value": ("Pad", 7, {"x": IMAGE}, None, ("y",), {"pads": [0, 1, 2, 0, 0, 0, 1, 3],
                                                                          "value": 1.5}),
    "Pad-2 reflect": ("Pad", 7, {"x": IMAGE}, None, ("y",), {"pads": [0, 0, 2, 1, 0, 0, 1, 2], "mode": "reflect"}),
    "Pad-2 edge": ("Pad", 8, {"x": IMAGE}, None, ("y",), {"pads": [0, 0, 1, 3, 0, 0, 2, 0], "mode": "edge"}),
    "Slice-1 with axes": ("Slice", 7, {"x": IMAGE}, None, ("y",), {"starts": [1, -4], "ends": [3, 2**31 - 1],
                                                                     "axes": [1, 3]}),
    "Slice-1 without axes": ("Slice", 9, {"x": IMAGE}, None, ("y",), {"starts": [0, 1, 1], "ends": [1, 3, -1]}),
    "TopK-1": ("TopK", 7, {"x": IMAGE}, None, ("v", "i"), {"k": 3, "axis": 3}),
    "TopK-10": ("TopK", 10, {"x": IMAGE}, {"k": np.array([2], I64)}, ("v", "i"), {"axis": 1}),
    "Scatter-9": ("Scatter", 9, {"x": np.zeros((3, 4), F32)},
                  {"i": np.array([[1, 0, 2, 0], [0, 2, 1, 1]], I64), "u": rng.standard_normal((2, 4)).astype(F32)},
                  ("y",), {"axis": 0}),
    "Dropout-7 (inference)": ("Dropout", 7, {"x": IMAGE}, None, ("y",), {"ratio": 0.3}),
    "BatchNormalization-7 spatial": ("BatchNormalization", 7, {"x": IMAGE},
                                     {"s": rng.uniform(0.5, 2, 3).astype(F32), "b": rng.standard_normal(3).astype(F32),
                                      "m": rng.standard_normal(3).astype(F32), "v": rng.uniform(0.5, 2, 3).astype(F32)},
                                     ("y",), {"epsilon": 1e-3}),
    "BatchNormalization-7 per activation (spatial=0)": (
        "BatchNormalization", 7, {"x": IMAGE},
        {"s": rng.uniform(0.5, 2, (3, 5, 7)).astype(F32), "b": rng.standard_normal((3, 5, 7)).astype(F32),
         "m": rng.standard_normal((3, 5, 7)).astype(F32), "v": rng.uniform(0.5, 2, (3, 5, 7)).astype(F32)},
        ("y",), {"spatial": 0}),
    # the experimental ops of opsets 1 to 9, which onnx no longer defines and onnxruntime still runs
    "ImageScaler": ("ImageScaler", 8, {"x": IMAGE}, None, ("y",), {"scale": 0.5, "bias": [1.0, -2.0, 0.25]}),
    "Affine": ("Affine", 7, {"x": IMAGE}, None, ("y",), {"alpha": -1.5, "beta": 0.25}),
    "Scale": ("Scale", 8, {"x": IMAGE}, None, ("y",), {"scale": 3.0}),
    "ScaledTanh": ("ScaledTanh", 8, {"x": IMAGE}, None, ("y",), {"alpha": 2.0, "beta": 0.5}),
    "ParametricSoftplus": ("ParametricSoftplus", 8, {"x": IMAGE * 30}, None, ("y",), {"alpha": 2.0, "beta": 0.5}),
    "Crop by borders": ("Crop", 8, {"x": IMAGE}, None, ("y",), {"border": [1, 2, 3, 0]}),
    "Crop to a size": ("Crop", 8, {"x": IMAGE}, None, ("y",), {"border": [2, 1, 0, 0], "scale": [3, 4]}),
    "ThresholdedRelu (experimental)": ("ThresholdedRelu", 9, {"x": IMAGE}, None, ("y",), {"alpha": 0.3}),
    "MeanVarianceNormalization-1": ("MeanVarianceNormalization", 8, {"x": IMAGE}, None, ("y",), {}),
    "MeanVarianceNormalization-1 across channels, mean only": (
        "MeanVarianceNormalization", 8, {"x": IMAGE}, None, ("y",), {"across_channels": 1, "normalize_variance": 0}),
    # Upsample and Resize-10: asymmetric coordinates; nearest rounds down where an axis grows, up where it shrinks
    "Upsample-7 nearest, whole scales": ("Upsample", 7, {"x": IMAGE}, None, ("y",),
                                         {"mode": "nearest", "scales": [1.0, 1.0, 2.0, 3.0]}),
    "Upsample-7 linear, fractional scales": ("Upsample", 7, {"x": IMAGE}, None, ("y",),
                                             {"mode": "linear", "scales": [1.0, 1.0, 1.5, 2.6]}),
    "Upsample-9 nearest, fractional scales": ("Upsample", 9, {"x": IMAGE}, scales([1, 1, 1.5, 2.6]), ("y",),
                                              {"mode": "nearest"}),
    "Upsample-9 linear, whole scales": ("Upsample", 9, {"x": IMAGE}, scales([1, 1, 2, 2]), ("y",),
                                        {"mode": "linear"}),
    "Resize-10 nearest, one axis shrinks": ("Resize", 10, {"x": IMAGE}, scales([1, 1, 0.6, 1.5]), ("y",),
                                            {"mode": "nearest"}),
    "Resize-10 nearest, both shrink": ("Resize", 10, {"x": IMAGE}, scales([1, 1, 0.7, 0.45]), ("y",), {}),
    "Resize-10 linear, down and up": ("Resize", 10, {"x": IMAGE}, scales([1, 1, 0.5, 1.7]), ("y",),
                                      {"mode": "linear"}),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", list(CASES))
def test_old_version_matches_onnxruntime(case, target):
    op, opset, inputs, constants, outputs, attrs = CASES[case]
    matches_onnxruntime(model_of(op, inputs, constants, opset, outputs, **attrs), target, inputs)


def scan_8_model(directions):
    """A running sum and a running product over a [batch, seq, 2] sequence, opset 8's batch axis first."""
    add = helper.make_node("Add", ["sum_in", "x_t"], ["sum_out"])
    mul = helper.make_node("Mul", ["prod_in", "x_t"], ["prod_out"])
    copy = helper.make_node("Identity", ["sum_out"], ["trace"])
    info = helper.make_tensor_value_info
    body = helper.make_graph([add, mul, copy], "body",
                             [info(n, onnx.TensorProto.FLOAT, [2]) for n in ("sum_in", "prod_in", "x_t")],
                             [info(n, onnx.TensorProto.FLOAT, [2]) for n in ("sum_out", "prod_out", "trace")])
    scan = helper.make_node("Scan", ["", "s0", "p0", "xs"], ["s", "p", "traces"], num_scan_inputs=1, body=body,
                            directions=directions)
    return scan


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("directions", [[0], [1]], ids=["forward", "reverse"])
def test_scan_8_scans_each_batch_element(directions, target):
    inputs = {"s0": rng.standard_normal((3, 2)).astype(F32), "p0": np.ones((3, 2), F32),
              "xs": rng.uniform(0.5, 1.5, (3, 4, 2)).astype(F32)}
    model = graph_of([scan_8_model(directions)], inputs, ["s", "p", "traces"], opset=8)
    matches_onnxruntime(model, target, inputs)


def test_scan_8_refuses_shorter_sequences():
    inputs = {"s0": np.zeros((3, 2), F32), "p0": np.ones((3, 2), F32), "xs": np.ones((3, 4, 2), F32)}
    scan = scan_8_model([0])
    scan.input[0] = "lengths"
    model = graph_of([scan], inputs, ["s", "p", "traces"], {"lengths": np.array([4, 2, 4], np.int32)}, opset=8)
    with pytest.raises(UnsupportedOpError, match="sequence_lens shorter"):
        OnnxImporter().load(model)


def old_detector(opset: int):
    """A small network as opset-7-to-9 exporters wrote them: ImageScaler, convolutions with spatial batch norms,
    LeakyRelu, a MaxPool, Pad-2, an Upsample back up (its scales an attribute at opset 7, an input at 9), Concat
    with the skip path, Clip-6, a global pool, Dropout, Gemm and Softmax-1."""
    w = {f"w{k}": rng.standard_normal(shape).astype(F32) * 0.3 for k, shape in enumerate([(8, 3, 3, 3),
                                                                                        (8, 8, 3, 3)])}
    bn = {f"{p}{k}": v for k in range(2) for p, v in zip(
        "sbmv", (rng.uniform(0.5, 1.5, 8), rng.standard_normal(8) * 0.1, rng.standard_normal(8) * 0.2,
                 rng.uniform(0.5, 1.5, 8)))}
    consts = {**w, **{k: np.asarray(v, F32) for k, v in bn.items()},
              "fc": rng.standard_normal((10, 16)).astype(F32) * 0.2, "fb": rng.standard_normal(10).astype(F32)}
    up = {"scales": [1.0, 1.0, 2.0, 2.0]}
    if opset >= 9:
        consts["up_scales"] = np.array([1, 1, 2, 2], F32)
        up = {}
    node = helper.make_node
    nodes = [
        node("ImageScaler", ["x"], ["xs"], scale=1 / 64, bias=[-0.5, -0.25, 0.0]),
        node("Conv", ["xs", "w0"], ["c0"], pads=[1, 1, 1, 1]),
        node("BatchNormalization", ["c0", "s0", "b0", "m0", "v0"], ["n0"], **({"spatial": 1} if opset < 9 else {})),
        node("LeakyRelu", ["n0"], ["a0"], alpha=0.1),
        node("MaxPool", ["a0"], ["p0"], kernel_shape=[2, 2], strides=[2, 2]),
        node("Pad", ["p0"], ["q0"], pads=[0, 0, 1, 1, 0, 0, 1, 1], mode="edge"),
        node("Conv", ["q0", "w1"], ["c1"]),
        node("BatchNormalization", ["c1", "s1", "b1", "m1", "v1"], ["n1"]),
        node("Clip", ["n1"], ["a1"], min=0.0, max=6.0),
        node("Upsample", ["a1", "up_scales"] if opset >= 9 else ["a1"], ["u1"], mode="nearest", **up),
        node("Concat", ["u1", "a0"], ["cat"], axis=1),
        node("GlobalAveragePool", ["cat"], ["g"]),
        node("Flatten", ["g"], ["f"], axis=1),
        node("Dropout", ["f"], ["d"], ratio=0.2),
        node("Gemm", ["d", "fc", "fb"], ["logits"], transB=1),
        node("Softmax", ["logits"], ["y"], axis=1),
    ]
    inputs = {"x": rng.uniform(0, 255, (2, 3, 16, 16)).astype(F32)}
    return graph_of(nodes, inputs, ["y", "u1"], consts, opset=opset), inputs


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("opset", [7, 9])
def test_an_old_detector_matches_onnxruntime(opset, target):
    model, inputs = old_detector(opset)
    matches_onnxruntime(model, target, inputs, rtol=1e-4, atol=1e-5)


def test_versions_older_than_read_are_refused_with_what_to_do():
    x = {"a": IMAGE, "b": IMAGE}
    model = model_of("Add", x, opset=6, broadcast=0)
    with pytest.raises(UnsupportedOpError, match=r"'Add' .*version 6 at the model's opset 6.*versions? 7") as e:
        OnnxImporter().load(model)
    assert "version_converter" in e.value.hint and "opset 7" in e.value.hint


def test_an_op_before_the_opset_that_defines_it_is_refused():
    model = model_of("Resize", {"x": IMAGE}, scales([1, 1, 2, 2]), 9)
    with pytest.raises(UnsupportedOpError, match="'Resize' .*not defined at the model's opset 9 .*opset 10"):
        OnnxImporter().load(model)


@pytest.mark.parametrize("op, opset, constants, newer", [
    ("Upsample", 10, scales([1, 1, 2, 2]), "Resize"),
    ("Scatter", 11, {"i": np.zeros((1, 7), I64), "u": np.ones((1, 7), F32)}, "ScatterElements")])
def test_ops_past_their_deprecation_are_refused(op, opset, constants, newer):
    model = model_of(op, {"x": IMAGE[0, 0]}, constants, opset)
    with pytest.raises(UnsupportedOpError, match=f"deprecated at the model's opset {opset}") as e:
        OnnxImporter().load(model)
    assert newer in e.value.hint


def test_every_claimed_op_is_read_from_opset_7():
    """MIN_OPSET's claim: at opset 7 and later, each claimed default-domain op that onnx defines there (and has not
    deprecated) is read."""
    for opset in range(onnx_legacy.MIN_OPSET, 22):
        defined = [op for op in SUPPORTED_OPS if "." not in op and onnx_legacy.since_version(op, opset) is not None
                   and not onnx.defs.get_schema(op, opset, "").deprecated]
        unread = [op for op in defined if not onnx_legacy.reads(op, opset)]
        assert not unread, (opset, unread)
    assert not onnx_legacy.reads("Add", 6) and onnx_legacy.reads("Not", 1)  # Not has only version 1


@pytest.mark.parametrize("target", TARGETS)
def test_tiny_yolov2_at_opset_8_matches_onnxruntime(target):
    """The zoo's Tiny YOLOv2 layers (ImageScaler, BatchNormalization-7, a padded stride-1 MaxPool), a quarter as
    wide and at 64x64, so that it runs in a test."""
    from retarget.testing.old_onnx import tiny_yolov2

    model, inputs = tiny_yolov2(opset=8, size=64, width=4)
    matches_onnxruntime(model, target, inputs, rtol=1e-4, atol=1e-4)


def test_what_the_fuzzer_found_in_the_version_lookup():
    """An opset past onnx's newest reads as the newest (2^40 made onnx's get_schema raise TypeError), an op type
    that is not text (protobuf hands invalid UTF-8 over as bytes) is no op onnx knows, and an opset below 1 is
    an input error."""
    from retarget.errors import InputError

    assert onnx_legacy.since_version("Relu", 2**40) == onnx_legacy.since_version("Relu", onnx.defs.onnx_opset_version())
    assert onnx_legacy.since_version(b"Re\xfflu", 7) is None
    assert onnx_legacy.since_version("Re\udc80lu", 7) is None  # text onnx's C++ cannot take: TypeError, once
    with pytest.raises(InputError, match="opset 0, which does not exist"):
        OnnxImporter().load(model_of("Relu", {"x": IMAGE}, opset=0))
