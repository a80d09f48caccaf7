"""ONNX models quantized by onnxruntime's quantizer (quantize_static in the QDQ and QOperator formats,
quantize_dynamic) import, keep their weights packed, and compute what onnxruntime computes; QuantizeLinear rounds
half to even and saturates as onnx's reference does; and ONNX's node tests of the quantized ops that are written
below opset 13 (so test_onnx_node_tests.py does not select them) pass at opset 13, where those ops are unchanged."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime quantizes the test models and is their reference")

import retarget  # noqa: E402
from retarget.bench.peers import export_onnx  # noqa: E402
from retarget.importers.onnx import OnnxImporter  # noqa: E402
from retarget.testing.numerics import relative_error  # noqa: E402
from retarget.vmvx.interpreter import run_function  # noqa: E402

TARGETS = ["vmvx", "llvm-cpu"]
BATCH = 2


class _ConvThenMlp(torch.nn.Module):
    """Two convolutions, then an MLP over the feature map's pixels: a Linear of a 3-D tensor exports as MatMul, which
    quantize_dynamic (MatMulInteger) and the QOperator format (QLinearMatMul) take in the default domain."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.fc1 = torch.nn.Linear(16, 32)
        self.fc2 = torch.nn.Linear(32, 10)

    def forward(self, x):
        x = torch.relu(self.conv2(torch.relu(self.conv1(x))))
        return self.fc2(torch.relu(self.fc1(x.flatten(2).transpose(1, 2))))


def _images(seed: int) -> np.ndarray:
    return np.random.RandomState(seed).randn(BATCH, 3, 8, 8).astype(np.float32)


class _Calibration:
    """Eight seeded batches, as onnxruntime's CalibrationDataReader hands them out."""

    def __init__(self):
        self.batches = iter([{"input_0": _images(seed)} for seed in range(8)])

    def get_next(self):
        return next(self.batches, None)


# reduce_range (7-bit weights): without it, onnxruntime's int8 kernels on an x86 CPU without VNNI sum pairs of 8-bit
# products in 16 bits and saturate (vpmaddubsw), so its output is several steps from the exact sums (8 output steps
# on the QDQ model here, where its unoptimized session and onnx's reference agree with the exact sums, and with us).
# With 7-bit weights no pair saturates and onnxruntime's sums are exact on every CPU. "qdq-8bit" keeps full-range
# weights and is compared with onnxruntime's unoptimized session, which runs DequantizeLinear, the float Conv or
# MatMul and QuantizeLinear as they are written.
FORMATS = {
    "qdq": lambda q, src, dst: q.quantize_static(src, dst, _Calibration(), quant_format=q.QuantFormat.QDQ,
                                                 per_channel=True, reduce_range=True),
    "qdq-8bit": lambda q, src, dst: q.quantize_static(src, dst, _Calibration(), quant_format=q.QuantFormat.QDQ,
                                                      per_channel=True),
    "qoperator": lambda q, src, dst: q.quantize_static(  # Gemm and Add would be com.microsoft's QGemm, QLinearAdd
        src, dst, _Calibration(), quant_format=q.QuantFormat.QOperator, per_channel=True, reduce_range=True,
        op_types_to_quantize=["Conv", "MatMul"]),
    "dynamic": lambda q, src, dst: q.quantize_dynamic(src, dst, weight_type=q.QuantType.QInt8, reduce_range=True),
}
UNOPTIMIZED_REFERENCE = {"qdq-8bit"}
WEIGHT_SHAPES = [(8, 3, 3, 3), (16, 8, 3, 3), (32, 16), (10, 32)]  # torch's: [out, in, ...]


@pytest.fixture(scope="module")
def float_model(tmp_path_factory):
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("onnx") / "float.onnx"
    return export_onnx(_ConvThenMlp().eval(), (torch.from_numpy(_images(0)),), path)


@pytest.fixture(scope="module", params=list(FORMATS))
def quantized(request, float_model):
    """(format, path of the model onnxruntime quantized)."""
    from onnxruntime import quantization

    path = float_model.with_name(f"{request.param}.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        FORMATS[request.param](quantization, str(float_model), str(path))
    return request.param, path


def _output_step(path) -> float:
    """The scale of the last activation's DequantizeLinear: the output is a multiple of it (QDQ), or one plus a
    bias (QOperator, whose last Add is float)."""
    model = onnx.load(path)
    values = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    *_, last = [n for n in model.graph.node if n.op_type == "DequantizeLinear" and n.input[0] not in values]
    return float(values[last.input[1]])


@pytest.mark.parametrize("target", TARGETS)
def test_a_quantized_model_matches_onnxruntime(quantized, target):
    """Static formats: within 2 steps of the output's quantization, and almost every element the same. Both sides
    sum the integers exactly, but we convolve the dequantized values in f32 (QDQ), or scale the sums in another
    order; where that lands within rounding of a tie, an activation rounds the other way, one step, which later
    layers carry to a step or two of the output. Dynamic: the integer sums are exact and the float ops after them
    are the same, so only rounding remains."""
    fmt, path = quantized
    x = _images(100)
    options = ort.SessionOptions()
    if fmt in UNOPTIMIZED_REFERENCE:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    expected = session.run(None, {"input_0": x})[0]
    got = retarget.load(retarget.compile(str(path), target), device="local-sync").main(x)
    assert got.shape == expected.shape
    if fmt == "dynamic":
        assert relative_error(got, expected) < 1e-5
    else:
        steps = np.abs(got - expected) / _output_step(path)
        assert steps.max() <= 2.0 + 1e-3 and np.mean(steps < 1e-3) >= 0.99, f"{steps.max()} steps"


def test_quantized_weights_stay_8_bit(quantized):
    """QDQ weights: rt.dequantize of 8-bit words, and no float constant of a weight's size (QOperator and dynamic
    weights stay int8 constants that integer ops read)."""
    fmt, path = quantized
    fn = OnnxImporter().load(path).functions["main"]
    constants = [op.result.type for op in fn.ops if op.name == "rt.constant"]
    sizes = {int(np.prod(shape)) for shape in WEIGHT_SHAPES}
    assert not [t for t in constants if t.dtype.is_float and t.num_elements in sizes]
    if fmt.startswith("qdq"):
        unpacked = sorted(tuple(op.attrs["shape"]) for op in fn.ops if op.name == "rt.dequantize")
        assert unpacked == sorted(WEIGHT_SHAPES)  # a row an output channel: MatMul's [K, N] weight as N rows
        words = sorted(t.shape for t in constants if t.dtype.name == "ui32")
        assert words == sorted([(8, 7), (16, 18), (32, 4), (10, 8)])  # four values a word, rows padded to words
    else:
        assert sorted(t.shape for t in constants if t.dtype.name == "i8" and t.num_elements in sizes) == sorted(
            [(8, 3, 3, 3), (16, 8, 3, 3), (16, 32), (32, 10)])


# -- QuantizeLinear's rounding and saturation against onnx's reference ---------------------------------------


def _quantize_model(x: np.ndarray, scale, zero: np.ndarray, axis: int = 1):
    from onnx import helper, numpy_helper

    inits = [numpy_helper.from_array(np.asarray(scale, np.float32), "scale"), numpy_helper.from_array(zero, "zero")]
    node = helper.make_node("QuantizeLinear", ["x", "scale", "zero"], ["y"], axis=axis)
    graph = helper.make_graph([node], "q", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(zero.dtype),
                                                             x.shape)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


TIES = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 62.5, 63.5, 126.5, -127.5, -0.49999997, 0.50000006],
                np.float32)
QUANTIZE_CASES = {  # name: (x, scale, zero point)
    "int8 ties": (TIES, 1.0, np.int8(0)),
    "int8 ties, scale 0.5 and a zero point": (TIES / 2, 0.5, np.int8(-3)),
    "uint8 ties past either end": (np.array([-1.5, -0.5, 0.5, 254.5, 255.5, 256.5, 1e6, -1e6], np.float32), 1.0,
                                   np.uint8(0)),
    "int8 saturates": (np.array([-300, -128.5, -128.49, 127.49, 127.5, 300, 3e9, -3e9], np.float32), 1.0, np.int8(0)),
    "int8 with a zero point saturates after adding it": (np.array([-140, -120, 120, 140], np.float32), 1.0,
                                                         np.int8(10)),
    "uint16 ties and ends": (np.array([0.5, 1.5, 32767.5, 65534.5, 65535.5, 70000, -3], np.float32), 1.0,
                             np.uint16(0)),
    "int16 with a zero point": (np.array([-32768.5, -32767.5, 2.5, 32766.5, 32767.5, 40000], np.float32), 1.0,
                                np.int16(1)),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", list(QUANTIZE_CASES))
def test_quantize_linear_rounds_half_to_even_and_saturates_as_onnx_reference(case, target):
    from onnx.reference import ReferenceEvaluator

    x, scale, zero = QUANTIZE_CASES[case]
    model = _quantize_model(x, scale, np.asarray(zero))
    finite = np.abs(x / scale) < 2.0**31  # onnx's reference casts to int32 before it clips: it wraps beyond
    with np.errstate(invalid="ignore"):
        expected = ReferenceEvaluator(model).run(None, {"x": x})[0]
    got = retarget.load(retarget.compile(model, target), device="local-sync").main(x)
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got[finite], expected[finite])
    info = np.iinfo(got.dtype)
    np.testing.assert_array_equal(got[~finite], np.where(x[~finite] > 0, info.max, info.min))


def test_quantize_linear_per_channel_rounds_each_channel_with_its_scale():
    from onnx.reference import ReferenceEvaluator

    x = np.array([[0.25, 0.75, -0.25, 1.25], [1.5, 2.5, -1.5, 300], [-3.0, 3.0, 4.5, -600]], np.float32)
    model = _quantize_model(x, [0.5, 1.0, 3.0], np.array([0, 5, -2], np.int8), axis=0)
    got = retarget.load(retarget.compile(model, "vmvx"), device="local-sync").main(x)
    np.testing.assert_array_equal(got, ReferenceEvaluator(model).run(None, {"x": x})[0])


# -- ONNX's node tests written below opset 13 ---------------------------------------------------------------------


def _low_opset_cases():
    from onnx.backend.test.loader import load_model_tests

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = load_model_tests(kind="node")
    names = ("test_dynamicquantizelinear", "test_matmulinteger", "test_convinteger", "test_qlinearconv")
    return [pytest.param(case, id=case.name) for case in cases if case.name.startswith(names)]


@pytest.mark.parametrize("case", _low_opset_cases())
def test_onnx_node_test_at_opset_13(case):
    """The case's opset (10 or 11) raised to 13, the importer's oldest: these ops are the same there."""
    model = onnx.ModelProto()
    model.CopyFrom(case.model)
    for opset in model.opset_import:
        opset.version = 13 if opset.domain in ("", "ai.onnx") else opset.version
    fn = OnnxImporter().load(model).functions["main"]
    for inputs, expected in case.data_sets:
        outputs = run_function(fn, [onnx.numpy_helper.to_array(x) if isinstance(x, onnx.TensorProto) else x
                                    for x in inputs])
        for got, want in zip(outputs, expected, strict=True):
            want = np.asarray(onnx.numpy_helper.to_array(want) if isinstance(want, onnx.TensorProto) else want)
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_array_equal(got, want)


# -- DequantizeLinear of constant weights: packed, per tensor, per axis and per block -----------------------------


def _weight_model(weight: np.ndarray, scale: np.ndarray, zero: np.ndarray | None, **attrs):
    """y = x @ DequantizeLinear(weight) for an x [2, K], the weight [K, N] an initializer."""
    from onnx import helper, numpy_helper

    names = ["w", "scale"] + (["zero"] if zero is not None else [])
    inits = [numpy_helper.from_array(a, name) for a, name in zip([weight, scale, zero], names)]
    nodes = [helper.make_node("DequantizeLinear", names, ["wf"], **attrs),
             helper.make_node("MatMul", ["x", "wf"], ["y"])]
    k, n = weight.shape
    graph = helper.make_graph(nodes, "dq", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, k])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, n])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def _integers(dtype, shape, seed=0) -> np.ndarray:
    import ml_dtypes

    info = ml_dtypes.iinfo(dtype)
    return np.random.RandomState(seed).randint(int(info.min), int(info.max) + 1, shape).astype(dtype)


def _scales(shape, seed=1) -> np.ndarray:
    return np.random.RandomState(seed).uniform(0.01, 0.1, shape).astype(np.float32)


def _weight_cases():
    import ml_dtypes

    k, n = 40, 6
    return {  # name: (model, packed)
        "int8 per tensor": (_weight_model(_integers(np.int8, (k, n)), _scales(()), np.int8(3)), True),
        "uint8 per column (axis 1), zero points": (
            _weight_model(_integers(np.uint8, (k, n)), _scales(n), _integers(np.uint8, n, 2), axis=1), True),
        "int8 per row (axis 0), no zero point": (_weight_model(_integers(np.int8, (k, n)), _scales(k), None, axis=0),
                                                 True),
        "int4 blocks of 16 along K, the last cut short": (
            _weight_model(_integers(ml_dtypes.int4, (k, n)), _scales((3, n)), _integers(ml_dtypes.int4, (3, n), 2),
                          axis=0, block_size=16), True),
        "uint4 blocks of 8 along K": (_weight_model(_integers(ml_dtypes.uint4, (k, n)), _scales((5, n)), None,
                                                    axis=0, block_size=8), True),
        "int8 blocks of 6, which split a word: unpacked": (
            _weight_model(_integers(np.int8, (k, n)), _scales((7, n)), None, axis=0, block_size=6), False),
        "int16 per tensor: unpacked": (_weight_model(_integers(np.int16, (k, n)), _scales(()), np.int16(-7)), False),
    }


@pytest.mark.parametrize("case", list(_weight_cases()))
def test_dequantize_linear_of_a_constant_weight_matches_onnx_reference(case):
    from onnx.reference import ReferenceEvaluator

    model, packed = _weight_cases()[case]
    fn = OnnxImporter().load(model).functions["main"]
    assert any(op.name == "rt.dequantize" for op in fn.ops) == packed
    x = np.random.RandomState(5).randn(2, 40).astype(np.float32)
    got = retarget.load(retarget.compile(model, "vmvx"), device="local-sync").main(x)
    np.testing.assert_allclose(got, ReferenceEvaluator(model).run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)


# -- QLinearConv beyond its one node test ------------------------------------------------------------------------


def _qlinear_conv_model(x_shape, w_shape, per_channel: bool, **attrs):
    from onnx import helper, numpy_helper

    rs, channels = np.random.RandomState(0), w_shape[0]
    inits = {"x_scale": np.float32(0.02), "x_zero": np.uint8(120), "w": rs.randint(-127, 128, w_shape).astype(np.int8),
             "w_scale": rs.uniform(0.005, 0.02, channels).astype(np.float32) if per_channel else np.float32(0.01),
             "w_zero": np.zeros(channels, np.int8) if per_channel else np.int8(0), "y_scale": np.float32(0.05),
             "y_zero": np.uint8(128), "bias": rs.randint(-2000, 2000, channels).astype(np.int32)}
    node = helper.make_node("QLinearConv", ["x", *inits], ["y"], **attrs)
    graph = helper.make_graph([node], "qconv", [helper.make_tensor_value_info("x", onnx.TensorProto.UINT8, x_shape)],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.UINT8, None)],
                              [numpy_helper.from_array(np.asarray(v), name) for name, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


QLINEAR_CONVS = {
    "per channel, 2 groups, stride 2, padded": ((2, 4, 9, 9), (6, 2, 3, 3), True, {"group": 2, "strides": [2, 2],
                                                                                   "pads": [1, 1, 1, 1]}),
    "per tensor": ((2, 4, 9, 9), (6, 4, 3, 3), False, {}),
    "1-D, stride 2, padded": ((2, 4, 17), (6, 4, 3), False, {"strides": [2], "pads": [1, 1]}),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", list(QLINEAR_CONVS))
def test_qlinear_conv_matches_onnx_reference(case, target):
    from onnx.reference import ReferenceEvaluator

    x_shape, w_shape, per_channel, attrs = QLINEAR_CONVS[case]
    model = _qlinear_conv_model(x_shape, w_shape, per_channel, **attrs)
    x = np.random.RandomState(1).randint(0, 256, x_shape).astype(np.uint8)
    got = retarget.load(retarget.compile(model, target), device="local-sync").main(x)
    np.testing.assert_array_equal(got, ReferenceEvaluator(model).run(None, {"x": x})[0])
