"""From parsed MLIR (`MOp` trees) to graph IR: the walk, the environment, the op table.

Each dialect module registers, for each op it understands, a pretty-syntax reader
(in `mlir.syntax.CUSTOM_SYNTAX`) and a converter here (`@converts`). A converter gets
the `Converter` and the `MOp`, emits `rt.*` ops through `cv.b`, and returns the
op's results: graph `Value`s, or static shapes (tuples) for `!tosa.shape` values.
Scalars (f32, index, i1) become rank-0 tensors, so the scalar bodies of
`linalg.generic` and `stablehlo.reduce` convert with the same converters.

Sizes known only at run time (`tensor.dim` of a `?`, `stablehlo.get_dimension_size`) are
symbolic dimensions (`ir.symbolic.Sym`) in the environment, and shapes built from them are
tuples; an op reading one converts through `SYMBOLIC_CONVERTERS` (dims.py), which does
the arithmetic on the symbols, never through its tensor converter.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ...errors import ParseError, RetargetError, UnsupportedOpError, VerificationError
from ...ir.core import Builder, DenseAttr, Function, Module, TensorType, Value
from ...ir.dtypes import DTYPES, DType
from ...ir.ops import OPS, normalize_shape_attrs
from ...ir.parser import function_symbols, symbolic_arg_type, types_match
from ...ir.symbolic import Sym, divide_exactly, sanitize
from ...mlir.syntax import MOp, Parser, custom_syntax
from ...registry import registrar
from .. import compose as C

CONVERTERS: dict[str, Callable[[Converter, MOp], list]] = {}
# Converters for ops that read a symbolic size or shape (dims.py): arithmetic on dimensions.
SYMBOLIC_CONVERTERS: dict[str, Callable[[Converter, MOp], object]] = {}
# Dialects whose unknown ops are reported as unsupported (rather than as bad syntax).
DIALECTS = ("arith", "math", "tensor", "linalg", "tosa", "stablehlo", "chlo", "check", "util", "func", "rt")


converts = registrar(CONVERTERS)


def supported_ops(dialect: str) -> list[str]:
    return sorted(n for n in CONVERTERS if n.split(".")[0] == dialect)


def unsupported(name: str, loc, detail: str = "") -> UnsupportedOpError:
    dialect = name.split(".")[0] if "." in name else name
    ops = supported_ops(dialect)
    hint = f"supported {dialect} ops: {', '.join(o.split('.', 1)[-1] for o in ops)}" if ops else \
        f"the '{dialect}' dialect is not supported; supported dialects: {', '.join(DIALECTS)}"
    return UnsupportedOpError(f"unsupported op '{name}'{detail}", location=str(loc), hint=hint)


def _unknown_op_syntax(p: Parser, op: MOp):
    raise unsupported(op.name, op.loc)


for _d in DIALECTS:
    custom_syntax(f"{_d}.*")(_unknown_op_syntax)


def as_tensor_type(t, loc=None) -> TensorType:
    if isinstance(t, TensorType):
        return t
    if isinstance(t, DType):
        return TensorType((), t)
    raise ParseError(f"type {t} is not supported; only tensors and scalars are", location=str(loc) if loc else None)


class Converter:
    """Converts one function's ops; `env` maps SSA names to converted values."""

    def __init__(self, fn: Function, functions: dict[str, MOp], checks: list | None = None):
        self.fn = fn
        self.b = Builder(fn)
        self.functions = functions  # every func.func in the file, for func.call
        self.env: dict[str, object] = {}
        self.checks = checks  # collects check.* ops when importing a check file
        self.in_body = False  # inside a scalar region (linalg body, reducer)
        self.call_depth = 0
        self.num_results = 0

    # -- operands -------------------------------------------------------------------------
    def get(self, op: MOp, name: str):
        try:
            return self.env[name]
        except KeyError:
            raise ParseError(f"'{op.name}' uses {name} before it is defined", location=str(op.loc)) from None

    def value(self, op: MOp, i: int) -> Value:
        v = self.get(op, op.operands[i])
        if is_symbolic_size(v):
            raise UnsupportedOpError(f"'{op.name}': {op.operands[i]} is a size known only at run time ({_text(v)}), "
                                     "which this op cannot take as a tensor", location=str(op.loc),
                                     hint="sizes may feed shapes (tensor.empty, reshapes, broadcasts), not data")
        if isinstance(v, tuple):  # a static shape used as a tensor
            return self.b.constant(np.array(v, dtype=np.int64))
        return v

    def dim(self, op: MOp, i: int, what: str = "size"):
        """Operand `i` as a dimension: an int, or a symbolic size (`tensor.dim` of a `?`)."""
        v = self.get(op, op.operands[i])
        if isinstance(v, Sym):
            return v
        if isinstance(v, tuple) and len(v) == 1:
            return v[0]
        array = constant_value(v)
        if array is None or array.size != 1:
            raise UnsupportedOpError(f"'{op.name}': {what} {op.operands[i]} must be a constant or a size of a tensor",
                                     location=str(op.loc), hint="sizes computed from tensor data are not supported")
        return int(array.reshape(-1)[0])

    def result_shape(self, op: MOp, i: int = 0, like: Value | None = None) -> tuple:
        """The shape of result `i` as declared, a `?` filled in from `like` (a reshape's input: its one
        unknown size is what the element count leaves); an error when nothing determines it."""
        t = self.result_type(op, i)
        unknown = [d for d, size in enumerate(t.shape) if size is None]
        if not unknown:
            return t.shape
        shape = list(t.shape)
        if like is not None and len(unknown) == 1:
            rest = divide_exactly(like.type.num_elements, math.prod(d for d in shape if d is not None))
            if rest is not None:
                shape[unknown[0]] = rest
                return tuple(shape)
        raise UnsupportedOpError(f"'{op.name}': its result {t} has sizes that its operands do not determine",
                                 location=str(op.loc),
                                 hint="give the sizes as operands (tensor.empty(%d), a dynamic_* op, output_shape)")

    def values(self, op: MOp) -> list[Value]:
        return [self.value(op, i) for i in range(len(op.operands))]

    def static(self, op: MOp, i: int, what: str = "operand") -> np.ndarray:
        """The constant value of operand `i`; an error when it is computed at run time."""
        v = self.get(op, op.operands[i])
        array = constant_value(v)
        if array is None:
            raise UnsupportedOpError(f"'{op.name}': {what} {op.operands[i]} must be a constant",
                                     location=str(op.loc), hint="only static shapes and indices are supported")
        return array

    def result_type(self, op: MOp, i: int = 0) -> TensorType:
        return as_tensor_type(op.result_types[i], op.loc)

    def error(self, op: MOp, message: str, cls=VerificationError) -> RetargetError:
        return cls(f"'{op.name}': {message}", location=str(op.loc))

    # -- walking ---------------------------------------------------------------------------
    def run_block(self, ops: list[MOp], terminators=("func.return", "return")) -> list:
        for op in ops:
            if op.name in terminators:
                return [self.get(op, v) for v in op.operands]
            self.convert(op)
        return []

    def convert(self, op: MOp):
        handler = CONVERTERS.get(op.name)
        if handler is None:
            if op.name in OPS:
                handler = _graph_op
            else:
                raise unsupported(op.name, op.loc)
        self.b.loc = op.loc
        as_data = {}  # symbolic operands an op that does not compute on sizes reads as tensors (sizes as data)
        if any(is_symbolic_size(self.env.get(name)) for name in op.operands):
            if op.name in SYMBOLIC_CONVERTERS:
                handler = SYMBOLIC_CONVERTERS[op.name]
            else:
                as_data = {name: self.env[name] for name in op.operands if is_symbolic_size(self.env.get(name))}
                types = list(getattr(op, "operand_types", None) or [])
                for i, name in enumerate(op.operands):
                    if name in as_data and not isinstance(self.env[name], Value):
                        self.env[name] = self.size_data(as_data[name], types[i] if i < len(types) else None)
        try:
            results = handler(self, op)
        except RetargetError as e:
            if e.location is None or (op.name not in e.message and str(op.loc) not in (e.location or "")):
                raise type(e)(f"'{op.name}': {e.message}", location=str(op.loc), hint=e.hint) from None
            raise
        except (KeyError, IndexError, ValueError, TypeError, AttributeError, OverflowError) as e:
            raise self.error(op, f"cannot import it ({type(e).__name__}: {e})", ParseError) from None
        finally:
            self.env.update(as_data)  # later ops may still take them as sizes
        results = list(results) if isinstance(results, (list, tuple)) and not _is_shape(results) else [results]
        if len(results) != len(op.results):
            raise self.error(op, f"produced {len(results)} results, the op declares {len(op.results)}")
        for k, (name, v) in enumerate(zip(op.results, results)):
            declared = op.result_types[k] if k < len(op.result_types) else None
            if isinstance(v, Value) and isinstance(declared, TensorType) and not self.in_body:
                if not _types_match(v.type, declared):
                    raise self.error(op, f"result {k} has type {v.type}, the op declares {declared}")
            self.env[name] = v

    def size_data(self, v, declared=None) -> Value:
        """A size (or a shape) known only at run time as a tensor of the `declared` type's elements (i64 for
        `index`), computed at run time (`compose.size_value`), for an op that reads it as data."""
        dtype = declared.dtype if isinstance(declared, TensorType) else declared
        name = dtype.name if isinstance(dtype, DType) and dtype.name in DTYPES and dtype.name != "i1" else "i64"
        if isinstance(v, Sym):
            return C.size_value(self.b, v, name)
        return C.sizes_value(self.b, np.array(v, dtype=object), name)

    def inline_call(self, op: MOp, callee: str) -> list:
        target = self.functions.get(callee)
        if target is None or not target.regions:
            raise self.error(op, f"calls @{callee}, which has no body in this file", ParseError)
        if self.call_depth > 64:
            raise self.error(op, "recursive calls are not supported", UnsupportedOpError)
        saved = self.env
        block = target.regions[0][0]
        self.env = {vid: v for (vid, _), v in zip(block.args, self.values(op))}
        self.call_depth += 1
        try:
            return self.run_block(block.ops)
        finally:
            self.env = saved
            self.call_depth -= 1


def _is_shape(results) -> bool:
    return isinstance(results, tuple) and all(isinstance(d, (int, np.integer, Sym)) for d in results)


def is_symbolic_size(v) -> bool:
    """A size (Sym) or a shape (tuple) known only at run time."""
    return isinstance(v, Sym) or (isinstance(v, tuple) and any(isinstance(d, Sym) for d in v))


def _text(v) -> str:
    return str(v) if isinstance(v, Sym) else "[" + ", ".join(map(str, v)) + "]"


def _dims(shape) -> tuple:
    return tuple(d if isinstance(d, Sym) else int(d) for d in shape)


def _types_match(actual: TensorType, declared: TensorType) -> bool:
    if actual.dtype != declared.dtype or actual.rank != declared.rank:
        return False
    return all(d is None or a is None or a == d for a, d in zip(actual.shape, declared.shape))


def constant_value(v) -> np.ndarray | None:
    """The array a value always holds, when it is a constant (or a broadcast of one)."""
    if isinstance(v, tuple):
        return np.array(v, dtype=np.int64)
    if not isinstance(v, Value) or v.owner is None or not v.type.is_static:
        return None
    if v.owner.name == "rt.constant":
        return v.owner.attrs["value"].array
    if v.owner.name in ("rt.broadcast", "rt.reshape", "rt.cast", "rt.bitcast"):
        inner = constant_value(v.owner.operands[0])
        if inner is None:
            return None
        if v.owner.name == "rt.cast":
            return inner.astype(v.type.dtype.np_dtype)
        if v.owner.name == "rt.bitcast":
            return inner.view(v.type.dtype.np_dtype)
        if v.owner.name == "rt.reshape":
            return inner.reshape(v.type.shape)
        return np.broadcast_to(inner, v.type.shape)
    return None


def fold(v, memo: dict) -> np.ndarray | None:
    """What `v` holds when every op it is computed from has constant inputs (evaluated on the vmvx
    reference kernels), else None. `memo` (by value id) keeps repeated calls linear."""
    array = constant_value(v)
    if array is not None or not isinstance(v, Value) or v.owner is None:
        return array
    if id(v) not in memo:
        memo[id(v)] = None  # also stops a walk that comes back to `v`
        args = [fold(o, memo) for o in v.owner.operands]
        if all(a is not None for a in args) and len(v.owner.results) == 1:
            from ...vmvx.kernels import evaluate

            memo[id(v)] = evaluate(v.owner.name, v.owner.attrs, args, v.type)
    return memo[id(v)]


def is_splat(v, value) -> bool:
    array = constant_value(v)
    return array is not None and array.size > 0 and bool(np.all(array == value))


def _graph_op(cv: Converter, op: MOp):
    """Our own graph IR in generic form: build it as written."""
    operands = cv.values(op)
    results = cv.b.op_multi(op.name, operands, normalize_shape_attrs(op.attrs))
    declared = [as_tensor_type(t, op.loc) for t in op.result_types]
    if not types_match(declared, [r.type for r in results]):
        raise cv.error(op, f"declared result types {', '.join(map(str, declared))} "
                           f"but the operands give {', '.join(str(r.type) for r in results)}")
    return results


# -- small builders shared by the dialects -----------------------------------------------------


def cast(b: Builder, v: Value, dtype: DType) -> Value:
    return v if v.type.dtype == dtype else b.op("rt.cast", [v], {"dtype": dtype.name})


def bitcast(cv: Converter, op: MOp):
    """`arith.bitcast`, `tensor.bitcast`, `stablehlo.bitcast_convert`: the bits of operand 0 as the result's element
    type, of the same width (`rt.bitcast`: the shape is kept)."""
    try:
        return C.bitcast(cv.b, cv.value(op, 0), cv.result_type(op).dtype)
    except UnsupportedOpError as e:
        raise cv.error(op, e.message, UnsupportedOpError) from None


def reshape(b: Builder, v: Value, shape) -> Value:
    shape = _dims(shape)
    return v if v.type.shape == shape else b.op("rt.reshape", [v], {"shape": shape})


def transpose(b: Builder, v: Value, perm) -> Value:
    perm = tuple(int(p) for p in perm)
    return v if perm == tuple(range(len(perm))) else b.op("rt.transpose", [v], {"perm": perm})


def broadcast(b: Builder, v: Value, shape) -> Value:
    shape = _dims(shape)
    return v if v.type.shape == shape else b.op("rt.broadcast", [v], {"shape": shape})


def full(b: Builder, value, ttype: TensorType) -> Value:
    """A splat constant: a scalar broadcast, so that big fills cost no memory."""
    scalar = b.constant(np.array(value, dtype=ttype.dtype.np_dtype))
    return broadcast(b, scalar, ttype.shape)


def scalar_like(b: Builder, value, like: Value) -> Value:
    return b.constant(np.array(value, dtype=like.type.dtype.np_dtype))


def dense_attr(value, ttype: TensorType) -> DenseAttr:
    if isinstance(value, DenseAttr):
        return value
    return DenseAttr(np.full(ttype.shape, value, dtype=ttype.dtype.np_dtype))


def remove_dead_ops(fn: Function) -> None:
    live = set(fn.returns)
    kept = []
    for op in reversed(fn.ops):
        if any(r in live for r in op.results):
            live.update(op.operands)
            kept.append(op)
    fn.ops = kept[::-1]


# -- func ------------------------------------------------------------------------------------------

ARG_NAME_ATTRS = ("rt.name", "ml_program.identifier", "iree.abi.name")


def convert_function(mop: MOp, functions: dict[str, MOp], checks: list | None = None) -> Function:
    from ...mlir.syntax import FunctionType

    ftype: FunctionType = mop.attrs["function_type"]
    name = mop.attrs["sym_name"]
    block = mop.regions[0][0]
    arg_attrs = mop.attrs.get("arg_attrs", [])
    names = [next((a[k] for k in ARG_NAME_ATTRS if k in a), None) for a in arg_attrs]
    args = []
    for i, (_, t) in enumerate(block.args):
        # a `?` is a new symbol named after its argument and axis, unless rt.dims names it
        base = sanitize(names[i]) if i < len(names) and isinstance(names[i], str) else f"arg{i}"
        t = symbolic_arg_type(as_tensor_type(t, mop.loc), arg_attrs[i] if i < len(arg_attrs) else {}, base, mop)
        args.append(Value(t, None, i))
    fn = Function(name, args, arg_names=[n or f"arg{i}" for i, n in enumerate(names)] if any(names) else None)
    fn.symbols = function_symbols(mop, [a.type for a in args])
    cv = Converter(fn, functions, checks)
    cv.num_results = len(ftype.results)
    cv.env = {vid: a for (vid, _), a in zip(block.args, args)}
    returned = cv.run_block(block.ops)
    returned = [v if isinstance(v, Value) else cv.b.constant(np.array(v, dtype=np.int64)) for v in returned]
    fn.returns = returned + fn.returns  # check ops have appended the values they read
    declared = [as_tensor_type(t, mop.loc) for t in ftype.results]
    if len(declared) != len(returned) or not all(_types_match(v.type, t) for v, t in zip(returned, declared)):
        raise VerificationError(
            f"@{name} returns {', '.join(str(v.type) for v in returned)} but its signature says "
            f"{', '.join(map(str, declared))}", location=str(mop.loc))
    return fn


@converts("func.call", "call")
def _call(cv: Converter, op: MOp):
    return cv.inline_call(op, op.attrs["callee"])


def module_from_mops(top: list[MOp], checks_by_fn: dict | None = None) -> Module:
    functions = {m.attrs["sym_name"]: m for m in top if m.name == "func.func"}
    for m in top:
        if m.name != "func.func":
            raise unsupported(m.name, m.loc, " at module level")
    public = [m for m in functions.values() if m.regions and m.attrs.get("sym_visibility") != "private"]
    if not public:
        public = [m for m in functions.values() if m.regions]
    module = Module()
    for m in public:
        checks = [] if checks_by_fn is not None else None
        fn = convert_function(m, functions, checks)
        if checks is not None:
            checks_by_fn[fn.name] = checks
        remove_dead_ops(fn)
        module.add(fn)
    return module



@custom_syntax("func.call", "call")
def _call_syntax(p: Parser, op: MOp):
    op.attrs["callee"] = p.symbol()
    op.operands = p.delimited("(", p.value_id, ")")
    p.optional_attrs(op)
    p.expect(":")
    t = p.function_type()
    op.operand_types, op.result_types = t.inputs, t.results
