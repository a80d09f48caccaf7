"""Symbolic dimensions in the graph IR: arithmetic, text, ranges, unification, shape inference."""

from __future__ import annotations

import pytest
from retarget.errors import VerificationError
from retarget.ir import Builder, Function, Module, TensorType, Value, dtype, parse_module, print_module, verify
from retarget.ir.symbolic import (
    SymbolRange,
    bounds,
    divide_exactly,
    hint,
    parse_dim,
    parse_range,
    sym,
    symbols_of,
)

F32 = dtype("f32")
batch, seq = sym("batch"), sym("seq")


def test_arithmetic_folds_back_to_ints_when_symbols_cancel():
    assert batch * 3 - 3 * batch == 0
    assert (batch * 4) // 2 == 2 * batch
    assert isinstance((batch * 4 + 6) // 2 - 2 * batch, int)


def test_floor_division_of_an_inexact_polynomial_keeps_exact_value():
    d = (batch * 224 - 1) // 2 + 1
    assert d.evaluate({"batch": 3}) == (3 * 224 - 1) // 2 + 1
    assert (batch + 1) % 2 == batch + 1 - 2 * ((batch + 1) // 2)


@pytest.mark.parametrize("text", ["2*seq + 1", "(h + 1) // 2", "batch*seq", "-seq + 4", "2*((b + 1) // 2)", "s // 2",
                                  "((m + 31) // 32)*((n + 63) // 64)", "min(n, 8) + 1"])
def test_text_round_trips(text):
    assert str(parse_dim(str(parse_dim(text)))) == str(parse_dim(text))
    assert parse_dim(str(parse_dim(text))) == parse_dim(text)


def test_symbolic_dimensions_refuse_order_and_truth():
    with pytest.raises(TypeError, match="bounds"):
        _ = batch < 3
    with pytest.raises(TypeError, match="truth"):
        bool(batch)


def test_bounds_and_hint_use_the_ranges():
    ranges = {"batch": SymbolRange(1, 64)}
    assert bounds(3 * batch + 1, ranges) == (4, 193)
    assert bounds(batch * seq, ranges) == (1, None)
    assert hint(batch * 2, ranges) == 128


def test_ranges_parse_as_the_cli_writes_them():
    assert parse_range("1..64") == SymbolRange(1, 64)
    assert parse_range("2..") == SymbolRange(2, None)
    assert parse_range("8") == SymbolRange(8, 8)
    with pytest.raises(ValueError, match="empty"):
        parse_range("9..3")


def test_divide_exactly_by_a_monomial():
    assert divide_exactly(batch * seq * 16, batch * 16) == seq
    assert divide_exactly(batch * 3 + 1, 2) is None


def _function(*shapes):
    fn = Function("f", [])
    b = Builder(fn)
    for s in sorted(symbols_of(*shapes)):
        b.symbol(s, SymbolRange(1, 64) if s == "batch" else None)
    fn.args = [Value(TensorType(s, F32), None, i) for i, s in enumerate(shapes)]
    return fn, b


def test_builder_unifies_a_symbol_with_the_dimension_an_op_needs():
    m = sym("m")
    fn, b = _function((batch, 4), (m, 4))
    y = b.op("rt.add", [fn.args[0], fn.args[1]])
    assert y.type.shape == (batch, 4) and fn.args[1].type.shape == (batch, 4)
    assert set(fn.symbols) == {"batch"} and fn.symbols["batch"] == SymbolRange(1, 64)


def test_builder_specializes_a_symbol_that_must_equal_a_number_inside_its_range():
    fn, b = _function((batch, 4), (8, 4))
    y = b.op("rt.matmul", [fn.args[1], fn.args[0]])  # [8, 4] @ [batch, 4]: batch is 4
    assert y.type.shape == (8, 4) and fn.args[0].type.shape == (4, 4) and not fn.symbols


def test_builder_refuses_a_number_outside_the_symbols_range():
    fn, b = _function((batch, 4), (100, 4))
    with pytest.raises(VerificationError, match="outside its range 1..64"):
        b.op("rt.add", [fn.args[0], fn.args[1]])


def test_verifier_reports_symbols_that_must_be_equal():
    fn, b = _function((batch, 4), (seq, 4))
    fn.ops, fn.returns = [], []
    from retarget.ir.ops import infer_types

    with pytest.raises(VerificationError, match="must be equal"):
        infer_types("rt.add", [a.type for a in fn.args], {})


def test_shape_inference_carries_symbols_through_convolution_and_reshape():
    fn, b = _function((batch, 3, seq, 16))
    w = b.constant(__import__("numpy").ones((8, 3, 3, 3), "float32"))
    y = b.op("rt.conv2d", [fn.args[0], w], {"strides": (2, 2), "pad": (1, 1, 1, 1)})
    assert y.type.shape == (batch, 8, (seq + 1) // 2, 8)
    z = b.op("rt.reshape", [y], {"shape": (batch, 64 * ((seq + 1) // 2))})
    assert z.type.num_elements == y.type.num_elements


def test_graph_ir_with_symbols_prints_and_parses_back():
    fn, b = _function((batch, 4), (batch, 4))
    fn.arg_names = ["x", "y"]
    z = b.op("rt.reshape", [b.op("rt.add", [fn.args[0], fn.args[1]])], {"shape": (2 * batch, 2)})
    fn.returns = [b.op("rt.slice", [z], {"start": (0, 0), "limit": (2 * batch - 1, 2), "stride": (1, 1)})]
    text = print_module(Module({"f": fn}))
    assert 'rt.dims = ["batch"]' in text and 'rt.symbols = {batch = "1..64"}' in text and '["2*batch", 2]' in text
    again = parse_module(text)
    verify(again)
    assert print_module(again) == text
    assert again.functions["f"].returns[0].type.shape == (2 * batch - 1, 2)


def test_unnamed_question_marks_in_graph_ir_become_symbols_per_argument():
    text = """module {
  func.func @f(%arg0: tensor<?x4xf32>) -> (tensor<?x4xf32>) {
    %0 = "rt.neg"(%arg0) : (tensor<?x4xf32>) -> tensor<?x4xf32>
    return %0 : tensor<?x4xf32>
  }
}"""
    fn = parse_module(text).functions["f"]
    assert fn.args[0].type.shape == (sym("arg0_dim0"), 4) and "arg0_dim0" in fn.symbols
