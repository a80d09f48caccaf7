"""Sizes known only at run time: `tensor.dim`, `stablehlo.get_dimension_size`, the ops that take
sizes or shapes as operands (`tensor.empty(%d)`, `tensor.from_elements`, `stablehlo.dynamic_*`),
and arithmetic on sizes (index math, JAX's shape tensors).

A `?` of a function argument is a symbol (`ir.symbolic`); `tensor.dim` of it is that `Sym`, a
shape built from sizes is a tuple. Arithmetic on them happens here, at import time, so that a
graph op only ever sees dimensions.
"""

from __future__ import annotations

import numpy as np

from ...ir.dtypes import DTYPES
from ...ir.symbolic import Sym, ceil_div
from ...mlir.syntax import MOp, Parser, custom_syntax
from ...registry import registrar
from .convert import SYMBOLIC_CONVERTERS, Converter, broadcast, constant_value, converts, reshape
from .pretty import functional

symbolic = registrar(SYMBOLIC_CONVERTERS)

# -- syntax -----------------------------------------------------------------------------------------


@custom_syntax("tensor.dim")
def _dim_syntax(p: Parser, op: MOp):
    op.operands = [p.value_id()]
    p.expect(",")
    op.operands.append(p.value_id())
    p.optional_attrs(op)
    p.expect(":")
    op.operand_types = [p.type()]
    op.result_types = [DTYPES["i64"]]


@custom_syntax("tensor.from_elements")
def _from_elements_syntax(p: Parser, op: MOp):
    op.operands = p.comma_list(p.value_id) if p.peek("%") else []
    p.optional_attrs(op)
    p.expect(":")
    op.result_types = [p.type()]


@custom_syntax("stablehlo.get_dimension_size")
def _get_dimension_size_syntax(p: Parser, op: MOp):
    op.operands = [p.value_id()]
    p.expect(",")
    p.expect_keyword("dim")
    p.expect("=")
    op.attrs["dimension"] = p.integer()
    p.optional_attrs(op)
    p.expect(":")
    t = p.function_type()
    op.operand_types, op.result_types = t.inputs, t.results


custom_syntax("stablehlo.dynamic_reshape", "stablehlo.dynamic_iota")(functional)


@custom_syntax("stablehlo.dynamic_broadcast_in_dim")
def _dynamic_broadcast_syntax(p: Parser, op: MOp):
    op.operands = [p.value_id()]
    p.expect(",")
    op.operands.append(p.value_id())
    p.expect(",")
    p.expect_keyword("dims")
    p.expect("=")
    op.attrs["broadcast_dimensions"] = p.delimited("[", p.integer, "]")
    p.optional_attrs(op)
    p.expect(":")
    t = p.function_type()
    op.operand_types, op.result_types = t.inputs, t.results


# -- sizes ---------------------------------------------------------------------------------------------


def _size(cv: Converter, d, dtype_name: str = "i64"):
    """A size as the environment holds it: a Sym, or a rank-0 constant when it is known."""
    return d if isinstance(d, Sym) else cv.b.constant(np.array(d, dtype=DTYPES[dtype_name].np_dtype))


@converts("tensor.dim")
@symbolic("tensor.dim")
def _tensor_dim(cv: Converter, op: MOp):
    x = cv.value(op, 0)
    return _size(cv, x.type.shape[int(cv.dim(op, 1, "index"))])


@converts("stablehlo.get_dimension_size")
def _get_dimension_size(cv: Converter, op: MOp):
    x = cv.value(op, 0)
    return _size(cv, x.type.shape[int(op.attrs["dimension"])], cv.result_type(op).dtype.name)


def shape_operand(cv: Converter, op: MOp, i: int) -> tuple:
    """Operand `i`, a 1-D shape: a tuple of sizes (some symbolic), or a constant."""
    v = cv.get(op, op.operands[i])
    if isinstance(v, tuple):
        return v
    array = constant_value(v)
    if array is None:
        raise cv.error(op, f"shape {op.operands[i]} must be built from constants and sizes of tensors")
    return tuple(int(d) for d in array.reshape(-1))


@converts("tensor.from_elements")
def _from_elements(cv: Converter, op: MOp):
    t = cv.result_type(op)
    parts = [reshape(cv.b, cv.value(op, i), (1,)) for i in range(len(op.operands))]
    flat = parts[0] if len(parts) == 1 else cv.b.op("rt.concat", parts, {"axis": 0})
    return reshape(cv.b, flat, t.shape)


@symbolic("tensor.from_elements")
def _from_elements_sizes(cv: Converter, op: MOp):
    return tuple(cv.dim(op, i) for i in range(len(op.operands)))


@converts("tensor.empty")
@symbolic("tensor.empty")
def _empty(cv: Converter, op: MOp):
    """`tensor.empty(%d, ...)`: each `?` of the result type is the next size operand."""
    t = cv.result_type(op)
    sizes = iter(cv.dim(op, i) for i in range(len(op.operands)))
    shape = tuple(next(sizes) if d is None else d for d in t.shape)
    if next(sizes, None) is not None:
        raise cv.error(op, f"has more size operands than {t} has dynamic dimensions")
    if any(d is None for d in shape):
        raise cv.error(op, f"needs one size operand for each dynamic dimension of {t}")
    zero = cv.b.constant(np.array(0, dtype=t.dtype.np_dtype))
    return broadcast(cv.b, zero, shape)  # contents are undefined; zero is one valid choice


@converts("stablehlo.dynamic_broadcast_in_dim")
@symbolic("stablehlo.dynamic_broadcast_in_dim")
def _dynamic_broadcast_in_dim(cv: Converter, op: MOp):
    x = cv.value(op, 0)
    out = shape_operand(cv, op, 1)
    dims = [int(d) for d in op.attrs.get("broadcast_dimensions", [])]
    from .convert import transpose

    x = transpose(cv.b, x, sorted(range(len(dims)), key=lambda k: dims[k]))
    shape = [1] * len(out)
    for k, d in enumerate(sorted(dims)):
        shape[d] = x.type.shape[k]
    return broadcast(cv.b, reshape(cv.b, x, shape), out)


@converts("stablehlo.dynamic_reshape", "tensor.reshape")
@symbolic("stablehlo.dynamic_reshape", "tensor.reshape")
def _dynamic_reshape(cv: Converter, op: MOp):
    return reshape(cv.b, cv.value(op, 0), shape_operand(cv, op, 1))


@converts("stablehlo.dynamic_iota")
@symbolic("stablehlo.dynamic_iota")
def _dynamic_iota(cv: Converter, op: MOp):
    t = cv.result_type(op)
    axis = int(op.attrs.get("iota_dimension", 0))
    return cv.b.op("rt.iota", [], {"shape": shape_operand(cv, op, 0), "axis": axis, "dtype": t.dtype.name})


# -- arithmetic on sizes ----------------------------------------------------------------------------------


def _operand_dims(cv: Converter, op: MOp, i: int):
    """Operand `i` of size arithmetic: a size, or a tuple of sizes (a 1-D shape tensor)."""
    v = cv.get(op, op.operands[i])
    if isinstance(v, (Sym, tuple)):
        return v
    array = constant_value(v)
    if array is None:
        raise cv.error(op, f"operand {op.operands[i]} mixes sizes with tensor data, which is not supported")
    return int(array) if array.ndim == 0 else tuple(int(d) for d in array.reshape(-1))


_ARITHMETIC = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "floordiv": lambda a, b: a // b, "ceildiv": ceil_div, "rem": lambda a, b: a % b,
}
_SIZE_OPS = {
    "arith.addi": "add", "arith.subi": "sub", "arith.muli": "mul", "arith.divsi": "floordiv",
    "arith.divui": "floordiv", "arith.floordivsi": "floordiv", "arith.ceildivsi": "ceildiv",
    "arith.ceildivui": "ceildiv", "arith.remsi": "rem", "arith.remui": "rem",
    "stablehlo.add": "add", "stablehlo.subtract": "sub", "stablehlo.multiply": "mul",
    "stablehlo.divide": "floordiv", "stablehlo.remainder": "rem",
}


@symbolic(*_SIZE_OPS)
def _size_arithmetic(cv: Converter, op: MOp):
    """Sizes are non-negative, so truncating and flooring divisions agree."""
    a, b = _operand_dims(cv, op, 0), _operand_dims(cv, op, 1)
    fn = _ARITHMETIC[_SIZE_OPS[op.name]]
    if isinstance(a, tuple) or isinstance(b, tuple):
        n = len(a) if isinstance(a, tuple) else len(b)
        a = a if isinstance(a, tuple) else (a,) * n
        b = b if isinstance(b, tuple) else (b,) * n
        try:
            return tuple(fn(x, y) for x, y in zip(a, b, strict=True))
        except TypeError as e:
            raise cv.error(op, f"cannot compute {op.name} on sizes {a} and {b} ({e})") from None
    try:
        return fn(a, b)
    except TypeError as e:  # a division by a symbolic size
        raise cv.error(op, f"cannot compute {op.name} on sizes {a} and {b} ({e})") from None


@symbolic("arith.index_cast", "arith.index_castui", "arith.extsi", "arith.extui", "arith.trunci",
          "stablehlo.convert")
def _size_cast(cv: Converter, op: MOp):
    """A size cast to another integer type stays a size; cast to a float (a mean's divisor), it is data."""
    v = _operand_dims(cv, op, 0)
    if op.name == "stablehlo.convert" and cv.result_type(op).dtype.is_float:
        return cv.size_data(v, cv.result_type(op)) if isinstance(v, (Sym, tuple)) else v
    return v


@symbolic("stablehlo.reshape", "tensor.collapse_shape", "tensor.expand_shape")
def _size_reshape(cv: Converter, op: MOp):
    """A size as a 1-element shape, and back."""
    v = _operand_dims(cv, op, 0)
    items = v if isinstance(v, tuple) else (v,)
    rank = cv.result_type(op).rank
    if rank == 0:
        if len(items) != 1:
            raise cv.error(op, f"cannot make one size of {len(items)}")
        return items[0]
    return tuple(items)


@symbolic("stablehlo.concatenate", "tensor.concat")
def _size_concat(cv: Converter, op: MOp):
    out: tuple = ()
    for i in range(len(op.operands)):
        v = _operand_dims(cv, op, i)
        out += v if isinstance(v, tuple) else (v,)
    return out


@symbolic("tensor.extract")
def _size_extract(cv: Converter, op: MOp):
    shape = _operand_dims(cv, op, 0)
    return shape[int(cv.dim(op, 1, "index"))] if isinstance(shape, tuple) else shape

