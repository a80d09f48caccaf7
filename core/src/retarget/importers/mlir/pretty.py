"""Pretty-syntax readers that several dialects share (MLIR's common assembly formats)."""

from __future__ import annotations

from ...ir.core import TensorType
from ...ir.dtypes import i1
from ...mlir.syntax import FunctionType, MOp, Parser

FLAG_KEYWORDS = ("fastmath", "overflow", "exact", "nneg", "rounding_mode")


def skip_flags(p: Parser):
    """`fastmath<fast>`, `overflow<nsw>`, ...: they do not change the value we compute."""
    while any(p.peek_keyword(k) for k in FLAG_KEYWORDS):
        p.bare_id()
        if p.peek("<"):
            p._balanced("<", ">")


def same_type(p: Parser, op: MOp):
    """`%a, %b [flags] [{attrs}] : T` (one type for all) or `: Tcond, T` (select)."""
    if p.peek("%"):
        op.operands = p.comma_list(p.value_id)
    skip_flags(p)
    p.optional_attrs(op)
    p.expect(":")
    types = p.comma_list(p.type)
    op.operand_types = [types[0]] * (len(op.operands) - len(types) + 1) + types[1:]
    if len(types) == 2 and len(op.operands) == 3:  # select: condition type, value type
        op.operand_types = [types[0], types[1], types[1]]
    op.result_types = [types[-1]]


def cast_syntax(p: Parser, op: MOp):
    """`%a [flags] [{attrs}] : T1 to T2`."""
    op.operands = [p.value_id()]
    skip_flags(p)
    p.optional_attrs(op)
    p.expect(":")
    op.operand_types = [p.type()]
    p.expect_keyword("to")
    op.result_types = [p.type()]


def functional(p: Parser, op: MOp):
    """`operands [{attrs}] : (T...) -> R...` or `: T` when all types agree."""
    if p.peek("%"):
        op.operands = p.comma_list(p.value_id)
    if p.peek("<{"):
        p.expect("<")
        op.attrs.update(p.attr_dict())
        p.expect(">")
    p.optional_attrs(op)
    p.expect(":")
    read_types(p, op)


def read_types(p: Parser, op: MOp):
    t = p.type()
    if isinstance(t, FunctionType):
        op.operand_types, op.result_types = t.inputs, t.results
    elif isinstance(t, list):  # `(T...)` without `->` should not happen; keep the inputs
        op.operand_types = t
    else:
        if p.accept("->"):
            op.operand_types, op.result_types = [t], [p.type()]
        else:
            op.operand_types, op.result_types = [t] * len(op.operands), [t]


def bool_like(t):
    if isinstance(t, TensorType):
        return TensorType(t.shape, i1)
    return i1
