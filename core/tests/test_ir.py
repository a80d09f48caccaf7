import numpy as np
import pytest
from retarget.errors import ParseError, VerificationError
from retarget.ir import (
    Builder,
    DenseAttr,
    Function,
    Module,
    TensorType,
    Value,
    dtypes,
    parse_module,
    print_module,
    verify,
)


def _every_dtype_module() -> Module:
    fn = Function("f", [Value(TensorType((2, 3), dtypes.f32))], arg_names=["x"])
    b = Builder(fn)
    outs = []
    for name in ("f32", "f16", "bf16", "i8", "i32", "i64", "i1", "i4"):
        dt = dtypes.dtype(name)
        values = np.arange(6).reshape(2, 3) % (2 if name == "i1" else 5)
        outs.append(b.constant(values.astype(dt.np_dtype)))
    big = b.constant(np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8))
    pad = b.op("rt.pad", [fn.args[0]], {"low": (0, 1), "high": (1, 0), "value": float("-inf")})
    conv = b.op("rt.conv2d", [b.op("rt.reshape", [fn.args[0]], {"shape": (1, 1, 2, 3)}),
                              b.constant(np.ones((4, 1, 1, 1), np.float32))],
                {"strides": (1, 1), "pad": (0, 0, 0, 0), "groups": 1})
    fn.returns = outs + [big, pad, conv]
    return Module({"f": fn})


def test_text_round_trips_exactly_for_every_dtype():
    text = print_module(_every_dtype_module())
    again = parse_module(text)
    assert print_module(again) == text
    verify(again)


def test_parsed_constants_keep_their_values():
    module = _every_dtype_module()
    again = parse_module(print_module(module))
    for a, b in zip(module.functions["f"].returns, again.functions["f"].returns):
        if a.owner.name == "rt.constant":
            assert a.owner.attrs["value"] == b.owner.attrs["value"]


def test_elided_dump_hides_large_constants():
    text = print_module(_every_dtype_module(), elide_constants=True)
    assert "dense_resource<__elided__>" in text
    assert "dialect_resources" not in text


def test_bad_shapes_name_the_op_and_reason():
    fn = Function("f", [Value(TensorType((2, 3), dtypes.f32)), Value(TensorType((4, 5), dtypes.f32))])
    with pytest.raises(VerificationError, match=r"'rt.matmul'.*contraction dims differ"):
        Builder(fn).op("rt.matmul", fn.args)


def test_verifier_rejects_a_wrong_recorded_result_type():
    text = """
    func.func @f(%arg0: tensor<2xf32>) -> (tensor<3xf32>) {
      %0 = "rt.exp"(%arg0) : (tensor<2xf32>) -> tensor<3xf32>
      return %0 : tensor<3xf32>
    }"""
    with pytest.raises(VerificationError, match=r"'rt.exp' at <string>:3:\d+: declared result types"):
        parse_module(text)


def test_parse_errors_carry_file_line_and_column():
    with pytest.raises(ParseError, match=r"^model.mlir:2:\d+: "):
        parse_module('func.func @f(%a: tensor<2xf32>) -> (tensor<2xf32>) {\n  %0 = "rt.exp"(%a : \n}', "model.mlir")


def test_dynamic_dims_print_as_question_marks():
    assert str(TensorType((None, 3), dtypes.f32)) == "tensor<?x3xf32>"


def test_dense_attr_compares_by_value():
    assert DenseAttr(np.ones(3, np.float32)) == DenseAttr(np.ones(3, np.float32))
    assert DenseAttr(np.ones(3, np.float32)) != DenseAttr(np.ones(3, np.float16))


def test_broadcasting_builds_its_mismatch_message_only_when_shapes_mismatch(monkeypatch):
    """The fuzzer's find: an ONNX Expand whose shape was a 128 x 128 weight gave a rank of 16384, and each axis
    built the mismatch message of both shapes before knowing it matched (quadratic: more than 10 s)."""
    import pytest
    from retarget.ir import ops

    texts = []
    monkeypatch.setattr(ops, "_text", lambda shape: texts.append(shape) or str(list(shape)))
    assert ops.broadcast_shapes((1,) * 20000, (2,) * 20000, (2,) * 20000) == (2,) * 20000
    assert texts == []
    with pytest.raises(ops._Fail, match=r"\[2, 3\] and \[4, 3\] do not broadcast"):
        ops.broadcast_shapes((2, 3), (4, 3))


def test_a_mismatch_message_of_a_huge_rank_is_short():
    """The fuzzer's next find: shapes of a huge rank that do not broadcast spent seconds writing every dimension."""
    import pytest
    from retarget.ir import ops

    with pytest.raises(ops._Fail, match=r"\[1, 1, 1, 1, 1, 1, 1, 1, \.\.\., 1, 1, 1, 3\] \(rank 300000\) and "
                                        r"\[4\] do not broadcast") as failure:
        ops.broadcast_shapes((1,) * 299999 + (3,), (4,))
    assert len(str(failure.value)) < 200
