"""The ONNX frontend: sources it accepts, static shapes, constant evaluation of shape
chains, names, and the errors it raises. Op numerics are covered by test_onnx_node_tests.py."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from retarget.errors import InputError, RetargetError, UnsupportedOpError  # noqa: E402
from retarget.importers.onnx import SUPPORTED_OPS, OnnxImporter  # noqa: E402
from retarget.ir import verify  # noqa: E402
from retarget.ir.symbolic import sym  # noqa: E402
from retarget.vmvx.interpreter import run_function  # noqa: E402


def make_model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8  # what onnxruntime 1.31 reads
    return model


def tensor(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def test_accepts_onnx_paths_and_model_protos_only():
    imp = OnnxImporter()
    assert imp.accepts("m.onnx") and imp.accepts(make_model([], [], []))
    assert not imp.accepts("m.pt2") and not imp.accepts(object())


def test_accepts_does_not_import_onnx_for_paths():
    code = ("import sys; from retarget.importers.onnx import OnnxImporter as O; "
            "print(O().accepts('m.onnx'), O().accepts(3), 'onnx' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True", "False", "False"]


def test_shape_chain_is_evaluated_at_import_time():
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape, as exporters emit for flatten, leaves one reshape."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus_one"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["y"]),
    ]
    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array([0], np.int64), "axes"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus_one")]
    module = verify(OnnxImporter().load(make_model(nodes, [tensor("x", [2, 3, 4])], [tensor("y", [2, 12])], inits)))
    fn = module.functions["main"]
    assert [op.name for op in fn.ops] == ["rt.reshape"]
    assert fn.result_types[0].shape == (2, 12)
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    np.testing.assert_array_equal(run_function(fn, [x])[0], x.reshape(2, 12))


def test_input_names_are_kept_and_initializers_are_not_arguments():
    nodes = [helper.make_node("Add", ["pixels", "bias"], ["y"])]
    inits = [numpy_helper.from_array(np.ones(3, np.float32), "bias")]
    model = make_model(nodes, [tensor("pixels", [2, 3])], [tensor("y", [2, 3])], inits)
    fn = OnnxImporter().load(model, function_name="predict").functions["predict"]
    assert fn.arg_names == ["pixels"] and len(fn.args) == 1


def test_dim_param_is_a_symbolic_dimension_and_input_shapes_fixes_it():
    nodes = [helper.make_node("Relu", ["x"], ["y"])]
    model = make_model(nodes, [tensor("x", ["batch", 3])], [tensor("y", ["batch", 3])])
    fn = OnnxImporter().load(model).functions["main"]
    assert fn.input_types[0].shape == (sym("batch"), 3) and "batch" in fn.symbols
    fn = OnnxImporter().load(model, input_shapes={"x": (5, 3)}).functions["main"]
    assert fn.input_types[0].shape == (5, 3) and not fn.symbols


def test_unsupported_op_names_op_node_and_supported_list():
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("TfIdfVectorizer", ["r"], ["y"], name="distinct")]
    model = make_model(nodes, [tensor("x", [3, 3])], [tensor("y", [])])
    with pytest.raises(UnsupportedOpError) as info:
        OnnxImporter().load(model)
    assert "'TfIdfVectorizer'" in info.value.message and "distinct" in info.value.message and "#1" in info.value.message
    assert "Conv" in info.value.hint and "Gemm" in info.value.hint


def test_custom_domain_op_is_unsupported():
    node = helper.make_node("FusedGemm", ["x", "x"], ["y"], domain="com.microsoft")
    model = make_model([node], [tensor("x", [2, 2])], [tensor("y", [2, 2])])
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    with pytest.raises(UnsupportedOpError, match="com.microsoft.FusedGemm"):
        OnnxImporter().load(model)


def test_bad_files_are_input_errors(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        OnnxImporter().load(tmp_path / "absent.onnx")
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x00\xffnot a model")
    with pytest.raises(RetargetError):
        OnnxImporter().load(junk)
    empty = tmp_path / "empty.onnx"  # protobuf reads an empty file as an empty model: named as what it is
    empty.write_bytes(b"")
    with pytest.raises(InputError, match="empty.onnx holds no ONNX model \\(0 bytes\\)"):
        OnnxImporter().load(empty)
    with pytest.raises(InputError):
        OnnxImporter().load(42)


def test_wrong_shapes_are_retarget_errors_not_bare_exceptions():
    nodes = [helper.make_node("MatMul", ["a", "b"], ["y"])]
    model = make_model(nodes, [tensor("a", [2, 3]), tensor("b", [4, 5])], [tensor("y", [2, 5])])
    with pytest.raises(RetargetError):
        OnnxImporter().load(model)


def test_gemm_conv_pool_chain_matches_onnxruntime():
    ort = pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    fc = rng.standard_normal((10, 4)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], auto_pad="SAME_UPPER", strides=[2, 2]),
        helper.make_node("Clip", ["c", "lo", "hi"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], ceil_mode=1),
        helper.make_node("GlobalAveragePool", ["p"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "fc"], ["y"], transB=1, alpha=0.5),
    ]
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(fc, "fc"),
             numpy_helper.from_array(np.array(0, np.float32), "lo"),
             numpy_helper.from_array(np.array(6, np.float32), "hi")]
    model = make_model(nodes, [tensor("x", [2, 3, 15, 15])], [tensor("y", [2, 10])], inits)
    x = rng.standard_normal((2, 3, 15, 15)).astype(np.float32)
    (ours,) = run_function(OnnxImporter().load(model).functions["main"], [x])
    (ref,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-5)


def test_claims_the_ops_of_the_zoo_families():
    for op in ("Gemm", "MatMul", "Conv", "BatchNormalization", "Relu", "Clip", "LeakyRelu", "HardSigmoid",
               "HardSwish", "Erf", "Softmax", "LayerNormalization", "Gelu", "MaxPool", "AveragePool",
               "GlobalAveragePool", "GlobalMaxPool", "Flatten", "Reshape", "Transpose", "Concat", "Split", "Slice",
               "Gather", "Unsqueeze", "Squeeze", "Shape", "Constant", "ConstantOfShape", "Expand", "Cast", "Where",
               "ReduceMean", "Identity", "Dropout", "Range", "Tile", "Pad", "Min", "Max", "Sum"):
        assert op in SUPPORTED_OPS


# values at the edges of every narrow type: ties (round to nearest even), overflow, infinities, NaN, -0
NARROW_INPUTS = np.array([0.0, -0.0, 0.3, 1.0625, 1.1875, 2.5, -3.5, 7.5, 240.0, 448.0, 460.0, 464.0, 500.0,
                          57344.0, 61440.0, 1e6, -1e6, np.inf, -np.inf, np.nan, 1e-7, -9.0, 16.0], np.float32)


@pytest.mark.parametrize("saturate", [1, 0])
@pytest.mark.parametrize("to", ["FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "FLOAT4E2M1",
                                "INT4", "UINT4", "INT2", "UINT2"])
def test_cast_to_narrow_types_matches_onnx_reference_bit_for_bit(to, saturate):
    from onnx.reference import ReferenceEvaluator

    to_type = getattr(TensorProto, to)
    attrs = {"saturate": saturate} if to.startswith("FLOAT8") else {}
    model = make_model([helper.make_node("Cast", ["x"], ["y"], to=to_type, **attrs)],
                       [tensor("x", [NARROW_INPUTS.size])], [tensor("y", [NARROW_INPUTS.size], to_type)], opset=21)
    x = NARROW_INPUTS if to.startswith("FLOAT") else np.nan_to_num(NARROW_INPUTS, posinf=0, neginf=0)
    (ref,) = ReferenceEvaluator(model).run(None, {"x": x})
    (out,) = run_function(OnnxImporter().load(model).functions["main"], [x])
    assert out.dtype == ref.dtype
    np.testing.assert_array_equal(out.view(np.uint8), ref.view(np.uint8))


def test_narrow_types_are_only_cast_and_moved():
    """A graph op that computes in float8 is refused: the type exists for casts at the edges."""
    from retarget.errors import VerificationError
    from retarget.ir.core import Builder, Function, TensorType, Value
    from retarget.ir.dtypes import DTYPES

    x = Value(TensorType((4,), DTYPES["f8E4M3FN"]))
    b = Builder(Function("f", [x]))
    assert b.op("rt.reshape", [x], {"shape": (2, 2)}).type.dtype.name == "f8E4M3FN"
    with pytest.raises(VerificationError, match="f8E4M3FN values are only cast and moved"):
        b.op("rt.add", [x, x])


def test_training_dropout_without_a_seed_is_refused_with_a_hint():
    ratio = numpy_helper.from_array(np.array(0.5, np.float32), "r")
    training = numpy_helper.from_array(np.array(True), "t")
    model = make_model([helper.make_node("Dropout", ["x", "r", "t"], ["y"], name="drop")],
                       [tensor("x", [2, 3])], [tensor("y", [2, 3])], [ratio, training])
    with pytest.raises(UnsupportedOpError, match="without a seed") as e:
        OnnxImporter().load(model)
    assert "drop" in e.value.message and "seed" in e.value.hint


def test_a_shape_of_more_dimensions_than_numpy_holds_is_refused():
    """The fuzzer's find: an Expand to a shape of thousands of entries built a tensor of that rank (and spent
    seconds writing it into an error message). Past 64 dimensions, numpy's limit, the shape is refused by name."""
    shape = numpy_helper.from_array(np.ones(65, np.int64), "s")
    model = make_model([helper.make_node("Expand", ["x", "s"], ["y"])], [tensor("x", [2, 3])], [tensor("y", None)],
                       [shape])
    with pytest.raises(UnsupportedOpError, match="a shape operand of 65 entries: at most 64 dimensions"):
        OnnxImporter().load(model)


@pytest.mark.parametrize("equation, shapes", [
    ("...ij,...kj->...ik", [(2, 3, 4, 5), (2, 3, 6, 5)]),  # what torch exports for x @ y^T
    ("...ji,...jk->...ik", [(3, 4, 5), (3, 4, 2)]),
    ("...ij,...ij->...i", [(2, 4, 5), (2, 4, 5)]),
    ("bij,jk", [(2, 3, 4), (4, 5)]),  # implicit output: the letters seen once, sorted
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),  # three operands, left to right
    ("bij,bjk->bik", [(1, 3, 4), (5, 4, 2)]),  # a batch of one broadcast against five
    ("ii->i", [(4, 4)]), ("ij->", [(3, 5)]), ("ijk->kji", [(2, 3, 4)]), ("i,j->ij", [(3,), (4,)]),
])
def test_einsum_matches_numpy(equation, shapes):
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    names = [f"x{i}" for i in range(len(shapes))]
    expected = np.einsum(equation, *arrays)
    model = make_model([helper.make_node("Einsum", names, ["y"], equation=equation)],
                       [tensor(n, list(s)) for n, s in zip(names, shapes)], [tensor("y", list(expected.shape))])
    (got,) = run_function(verify(OnnxImporter().load(model)).functions["main"], arrays)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("opset, axis", [(11, None), (11, 2), (12, 0), (13, None), (13, 1)])
def test_softmax_family_before_opset_13_coerces_to_2d(op, opset, axis):
    """Before opset 13 these flatten x to [d0 ... d(axis-1), d(axis) ...] (axis 1 by default) and work along the
    second; from 13 on along `axis` (-1 by default). Against onnxruntime (onnx's reference applies opset 13's
    semantics to every version)."""
    from retarget.testing.onnx_cases import reference_outputs

    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    node = helper.make_node(op, ["x"], ["y"], **({} if axis is None else {"axis": axis}))
    model = make_model([node], [tensor("x", [2, 3, 4])], [tensor("y", [2, 3, 4])], opset=opset)
    (got,) = run_function(verify(OnnxImporter().load(model)).functions["main"], [x])
    expected = reference_outputs(model, {"x": x}, onnxruntime=True)[0]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_opset_11_resize_takes_tf_half_pixel_for_nn():
    from retarget.testing.onnx_cases import assert_same, reference_outputs

    x = np.random.default_rng(0).standard_normal((1, 1, 4, 5)).astype(np.float32)
    node = helper.make_node("Resize", ["x", "roi", "scales"], ["y"], mode="nearest",
                            coordinate_transformation_mode="tf_half_pixel_for_nn")
    model = make_model([node], [tensor("x", [1, 1, 4, 5])], [tensor("y", [1, 1, 6, 11])],
                       [numpy_helper.from_array(np.zeros(0, np.float32), "roi"),
                        numpy_helper.from_array(np.array([1, 1, 1.7, 2.3], np.float32), "scales")], opset=11)
    (got,) = run_function(verify(OnnxImporter().load(model)).functions["main"], [x])
    assert_same([got], reference_outputs(model, {"x": x}, onnxruntime=True))
