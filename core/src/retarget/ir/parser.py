"""Read graph-IR text (as `printer.py` writes it) back into a `Module`."""

from __future__ import annotations

from ..errors import ParseError, VerificationError
from ..mlir.syntax import FunctionType, MOp, parse
from .core import Function, Module, Operation, TensorType, Value
from .ops import OPS, infer_types, normalize_shape_attrs
from .symbolic import SymbolRange, parse_dim, parse_range, sym, symbols_of


def parse_module(text: str, filename: str = "<string>") -> Module:
    top, _ = parse(text, filename)
    module = Module()
    for mop in top:
        if mop.name != "func.func":
            raise ParseError(f"expected func.func at module level, found '{mop.name}'", location=str(mop.loc))
        module.add(function_from_mop(mop))
    return module


def function_from_mop(mop: MOp) -> Function:
    ftype: FunctionType = mop.attrs["function_type"]
    name = mop.attrs["sym_name"]
    if not mop.regions:
        raise ParseError(f"function @{name} has no body", location=str(mop.loc))
    block = mop.regions[0][0]
    values: dict[str, Value] = {}
    args = []
    arg_attrs = mop.attrs.get("arg_attrs", [])
    for i, (vid, t) in enumerate(block.args):
        _require_tensor(t, f"argument {vid} of @{name}", mop)
        t = symbolic_arg_type(t, arg_attrs[i] if i < len(arg_attrs) else {}, f"arg{i}", mop)
        values[vid] = Value(t, None, i)
        args.append(values[vid])
    arg_names = [a.get("rt.name") for a in arg_attrs]
    fn = Function(name, args, arg_names=arg_names if any(arg_names) else None)
    fn.symbols = function_symbols(mop, [a.type for a in args])
    for op in block.ops:
        if op.name in ("return", "func.return"):
            fn.returns = [_lookup(values, v, op) for v in op.operands]
            break
        if op.name not in OPS:
            raise ParseError(f"unknown graph op '{op.name}'", location=str(op.loc),
                             hint="graph IR holds only rt.* ops; import frontend MLIR with `retarget compile`")
        operands = [_lookup(values, v, op) for v in op.operands]
        attrs = normalize_shape_attrs(op.attrs)
        types = infer_types(op.name, [v.type for v in operands], attrs, op.loc)
        if not types_match(list(op.result_types), types):
            raise VerificationError(
                f"'{op.name}' at {op.loc}: declared result types "
                f"{', '.join(map(str, op.result_types))} but the operands give {', '.join(map(str, types))}"
            )
        new = Operation(op.name, operands, [], attrs, op.loc)
        new.results = [Value(t, new, i) for i, t in enumerate(types)]
        fn.ops.append(new)
        for vid, v in zip(op.results, new.results):
            values[vid] = v
    if not types_match(list(ftype.results), [v.type for v in fn.returns]):
        raise VerificationError(f"@{name}: returned types differ from the signature", hint=str(mop.loc))
    return fn


def types_match(declared: list, actual: list) -> bool:
    """Whether types as written match types as inferred: a `?` stands for any symbolic dimension."""
    return len(declared) == len(actual) and all(
        isinstance(d, TensorType) and d.dtype == a.dtype and d.rank == a.rank
        and all(x == y or (x is None and not isinstance(y, int)) for x, y in zip(d.shape, a.shape))
        for d, a in zip(declared, actual))


def symbolic_arg_type(t: TensorType, attrs: dict, base: str, mop: MOp) -> TensorType:
    """An argument's type with its `?`s replaced by the dimensions its `rt.dims` attribute names,
    or by new symbols `<base>_dim<axis>` when it has none."""
    if t.is_static:
        return t
    unknown = [i for i, d in enumerate(t.shape) if d is None]
    dims = attrs.get("rt.dims")
    if dims is None:
        names = [sym(f"{base}_dim{i}") for i in unknown]
    else:
        if not isinstance(dims, list) or len(dims) != len(unknown):
            raise ParseError(f"rt.dims of {base} must list its {len(unknown)} dynamic dimensions, got {dims}",
                             location=str(mop.loc))
        try:
            names = [parse_dim(d) for d in dims]
        except (ValueError, TypeError) as e:
            raise ParseError(f"rt.dims of {base}: {e}", location=str(mop.loc)) from None
    shape = list(t.shape)
    for i, d in zip(unknown, names):
        shape[i] = d
    return TensorType(tuple(shape), t.dtype)


def function_symbols(mop: MOp, types: list[TensorType]) -> dict[str, SymbolRange]:
    """The ranges in `attributes {rt.symbols = {...}}`, and the default range for other symbols."""
    declared = mop.attrs.get("rt.symbols", {})
    if not isinstance(declared, dict):
        raise ParseError("rt.symbols must be a dictionary of ranges, e.g. {batch = \"1..64\"}", location=str(mop.loc))
    out = {}
    for name, text in declared.items():
        try:
            out[name] = parse_range(text)
        except (ValueError, TypeError) as e:
            raise ParseError(f"rt.symbols: symbol '{name}': {e}", location=str(mop.loc)) from None
    for t in types:  # in order of appearance: unification keeps the first of two symbols
        for d in t.shape:
            for name in sorted(symbols_of(d)):
                out.setdefault(name, SymbolRange())
    return out


def _lookup(values: dict, vid: str, op: MOp) -> Value:
    try:
        return values[vid]
    except KeyError:
        raise ParseError(f"'{op.name}' uses {vid} before it is defined", location=str(op.loc)) from None


def _require_tensor(t, what: str, mop: MOp):
    if not isinstance(t, TensorType):
        raise ParseError(f"{what} has type {t}; only tensors are supported", location=str(mop.loc))
