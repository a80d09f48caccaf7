"""`arith` and `math`: scalar and elementwise tensor arithmetic, one graph op each where one fits."""

from __future__ import annotations

import math

import numpy as np

from ...ir.core import DenseAttr
from ...ir.dtypes import DTYPES, DType
from ...mlir.syntax import MOp, OpaqueAttr, Parser, _typed_number, custom_syntax
from .convert import Converter, as_tensor_type, bitcast, cast, converts, scalar_like
from .pretty import bool_like, cast_syntax, same_type

BINARY = {
    "arith.addf": "rt.add", "arith.addi": "rt.add", "arith.subf": "rt.sub", "arith.subi": "rt.sub",
    "arith.mulf": "rt.mul", "arith.muli": "rt.mul", "arith.divf": "rt.div", "arith.divsi": "rt.div",
    "arith.remf": "rt.rem", "arith.remsi": "rt.rem", "arith.maximumf": "rt.max", "arith.maxnumf": "rt.max",
    "arith.minimumf": "rt.min", "arith.minnumf": "rt.min", "arith.maxsi": "rt.max", "arith.minsi": "rt.min",
    "arith.andi": "rt.and", "arith.ori": "rt.or", "arith.xori": "rt.xor",
    "math.powf": "rt.pow", "math.atan2": "rt.atan2",
}
UNARY = {
    "arith.negf": "rt.neg", "math.exp": "rt.exp", "math.log": "rt.log", "math.sqrt": "rt.sqrt",
    "math.rsqrt": "rt.rsqrt", "math.tanh": "rt.tanh", "math.erf": "rt.erf", "math.absf": "rt.abs",
    "math.absi": "rt.abs", "math.floor": "rt.floor", "math.ceil": "rt.ceil", "math.roundeven": "rt.round",
    "math.sin": "rt.sin", "math.cos": "rt.cos", "math.tan": "rt.tan", "math.atan": "rt.atan",
    "math.log1p": "rt.log1p", "math.expm1": "rt.expm1",
}
COMPOSITE_UNARY = ("math.exp2", "math.log2", "math.log10", "math.round", "math.erfc", "math.trunc")
CASTS = ("arith.extf", "arith.truncf", "arith.sitofp", "arith.fptosi", "arith.extsi", "arith.trunci",
         "arith.index_cast", "arith.uitofp", "arith.fptoui", "arith.extui", "arith.index_castui")

# predicate spellings and their enum numbers (the generic form prints the number)
CMPF = ("false oeq ogt oge olt ole one ord ueq ugt uge ult ule une uno true").split()
CMPI = ("eq ne slt sle sgt sge ult ule ugt uge").split()
_RELATION = {"eq": "eq", "ne": "ne", "gt": "gt", "ge": "ge", "lt": "lt", "le": "le"}

custom_syntax(*BINARY, *UNARY, *COMPOSITE_UNARY, "arith.select", "math.fma", "arith.floordivsi",
              "arith.ceildivsi", "math.fpowi")(same_type)
custom_syntax(*CASTS)(cast_syntax)


@custom_syntax("arith.cmpf", "arith.cmpi")
def _cmp_syntax(p: Parser, op: MOp):
    op.attrs["predicate"] = p.bare_id()
    p.expect(",")
    same_type(p, op)
    op.result_types = [bool_like(op.result_types[0])]


@custom_syntax("arith.constant")
def _constant_syntax(p: Parser, op: MOp):
    p.optional_attrs(op)
    start = p.pos
    if p.peek_keyword("dense") or p.peek_keyword("dense_resource"):
        value = p.attribute()
        op.attrs["value"] = value
        op.result_types = [value.type]
        return
    if p.peek_keyword("true") or p.peek_keyword("false"):
        op.attrs["value"] = p.bare_id() == "true"
        t = p.type() if p.accept(":") else DTYPES["i1"]
    else:
        p.skip()
        start = p.pos
        number = p.number()
        p.expect(":")
        t = p.type()
        number = _typed_number(number, t, p, start)
        op.attrs["value"] = number
    op.result_types = [t]


@converts("arith.constant")
def _constant(cv: Converter, op: MOp):
    value = op.attrs["value"]
    if isinstance(value, DenseAttr):
        return cv.b.op("rt.constant", [], {"value": value})
    rtype = cv.result_type(op)
    if rtype.rank:
        raise cv.error(op, f"a scalar value needs a scalar type, got {rtype}")
    return cv.b.constant(np.array(value, dtype=rtype.dtype.np_dtype))


def _binary(cv: Converter, op: MOp):
    a, b = cv.values(op)
    if op.name in ("arith.divsi", "arith.remsi") and not a.type.dtype.is_integer:
        raise cv.error(op, "needs integer operands")
    return cv.b.op(BINARY[op.name], [a, b])


def _unary(cv: Converter, op: MOp):
    return cv.b.op(UNARY[op.name], [cv.value(op, 0)])


for _n in BINARY:
    converts(_n)(_binary)
for _n in UNARY:
    converts(_n)(_unary)


@converts(*COMPOSITE_UNARY)
def _composite_unary(cv: Converter, op: MOp):
    b, x = cv.b, cv.value(op, 0)
    kind = op.name.split(".")[1]
    if kind == "exp2":
        return b.op("rt.pow", [scalar_like(b, 2.0, x), x])
    if kind in ("log2", "log10"):
        return b.op("rt.mul", [b.op("rt.log", [x]), scalar_like(b, 1 / math.log(2 if kind == "log2" else 10), x)])
    if kind == "erfc":
        return b.op("rt.sub", [scalar_like(b, 1.0, x), b.op("rt.erf", [x])])
    magnitude = b.op("rt.abs", [x])
    if kind == "round":  # half away from zero
        magnitude = b.op("rt.add", [magnitude, scalar_like(b, 0.5, x)])
    return b.op("rt.mul", [b.op("rt.sign", [x]), b.op("rt.floor", [magnitude])])


@converts("math.fma")
def _fma(cv: Converter, op: MOp):
    a, b_, c = cv.values(op)
    return cv.b.op("rt.add", [cv.b.op("rt.mul", [a, b_]), c])


@converts("math.fpowi")
def _fpowi(cv: Converter, op: MOp):
    x, n = cv.values(op)
    return cv.b.op("rt.pow", [x, cast(cv.b, n, x.type.dtype)])


@converts("arith.floordivsi", "arith.ceildivsi")
def _rounded_div(cv: Converter, op: MOp):
    b = cv.b
    x, y = cv.values(op)
    q = b.op("rt.div", [x, y])
    zero = scalar_like(b, 0, x)
    inexact = b.op("rt.cmp", [b.op("rt.rem", [x, y]), zero], {"predicate": "ne"})
    negative = b.op("rt.xor", [b.op("rt.cmp", [x, zero], {"predicate": "lt"}),
                               b.op("rt.cmp", [y, zero], {"predicate": "lt"})])
    if op.name == "arith.ceildivsi":
        negative = b.op("rt.not", [negative])
    fix = b.op("rt.and", [inexact, negative])
    step = scalar_like(b, -1 if op.name == "arith.floordivsi" else 1, x)
    return b.op("rt.select", [fix, b.op("rt.add", [q, step]), q])


@converts("arith.select")
def _select(cv: Converter, op: MOp):
    return cv.b.op("rt.select", cv.values(op))


def predicate_name(op: MOp, table) -> str:
    pred = op.attrs["predicate"]
    if isinstance(pred, OpaqueAttr):  # `#arith<cmpfpredicate olt>`
        pred = pred.text.rstrip(">").split()[-1]
    if isinstance(pred, int):
        pred = table[pred]
    if pred not in table:
        raise ValueError(f"unknown predicate '{pred}'; known: {', '.join(table)}")
    return pred


@converts("arith.cmpf", "arith.cmpi")
def _cmp(cv: Converter, op: MOp):
    b = cv.b
    x, y = cv.values(op)
    pred = predicate_name(op, CMPF if op.name == "arith.cmpf" else CMPI)
    if pred in ("true", "false"):
        shape = np.broadcast_shapes(x.type.shape, y.type.shape)
        return b.constant(np.full(shape, pred == "true"))
    if pred in ("ord", "uno"):
        rel = "eq" if pred == "ord" else "ne"
        both = [b.op("rt.cmp", [v, v], {"predicate": rel}) for v in (x, y)]
        return b.op("rt.and" if pred == "ord" else "rt.or", both)
    if op.name == "arith.cmpi" and pred[0] == "u":
        unsigned = DTYPES["u" + x.type.dtype.name] if "u" + x.type.dtype.name in DTYPES else None
        if unsigned is None:
            raise cv.error(op, f"unsigned comparison of {x.type.dtype} is not supported")
        x, y = cast(b, x, unsigned), cast(b, y, unsigned)
    return b.op("rt.cmp", [x, y], {"predicate": _RELATION[pred[-2:] if len(pred) > 2 else pred]})


def _unsigned(dtype: DType) -> DType:
    return DTYPES.get("u" + dtype.name, dtype)


@converts(*CASTS)
def _cast(cv: Converter, op: MOp):
    x = cv.value(op, 0)
    target = as_tensor_type(op.result_types[0], op.loc).dtype
    if op.name in ("arith.uitofp", "arith.extui", "arith.index_castui"):
        x = cast(cv.b, x, _unsigned(x.type.dtype))
    if op.name == "arith.fptoui":
        return cast(cv.b, cast(cv.b, x, _unsigned(target)), target)
    out = cast(cv.b, x, target)
    if out is x and out.type.dtype != target:
        raise cv.error(op, f"cannot cast {x.type} to {target}")
    return out


converts("arith.bitcast")(bitcast)
custom_syntax("arith.bitcast")(cast_syntax)
