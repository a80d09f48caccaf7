"""Read graph-IR text (as `printer.py` writes it) back into a `Module`."""

from __future__ import annotations

from ..errors import ParseError, VerificationError
from ..mlir.syntax import FunctionType, MOp, parse
from .core import Function, Module, Operation, TensorType, Value
from .ops import OPS, infer_types


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
    for i, (vid, t) in enumerate(block.args):
        _require_tensor(t, f"argument {vid} of @{name}", mop)
        values[vid] = Value(t, None, i)
        args.append(values[vid])
    arg_names = [a.get("rt.name") for a in mop.attrs.get("arg_attrs", [])]
    fn = Function(name, args, arg_names=arg_names if any(arg_names) else None)
    for op in block.ops:
        if op.name in ("return", "func.return"):
            fn.returns = [_lookup(values, v, op) for v in op.operands]
            break
        if op.name not in OPS:
            raise ParseError(f"unknown graph op '{op.name}'", location=str(op.loc),
                             hint="graph IR holds only rt.* ops; import frontend MLIR with `retarget compile`")
        operands = [_lookup(values, v, op) for v in op.operands]
        types = infer_types(op.name, [v.type for v in operands], op.attrs, op.loc)
        if list(op.result_types) != types:
            raise VerificationError(
                f"'{op.name}' at {op.loc}: declared result types "
                f"{', '.join(map(str, op.result_types))} but the operands give {', '.join(map(str, types))}"
            )
        new = Operation(op.name, operands, [], op.attrs, op.loc)
        new.results = [Value(t, new, i) for i, t in enumerate(types)]
        fn.ops.append(new)
        for vid, v in zip(op.results, new.results):
            values[vid] = v
    if [v.type for v in fn.returns] != list(ftype.results):
        raise VerificationError(f"@{name}: returned types differ from the signature", hint=str(mop.loc))
    return fn


def _lookup(values: dict, vid: str, op: MOp) -> Value:
    try:
        return values[vid]
    except KeyError:
        raise ParseError(f"'{op.name}' uses {vid} before it is defined", location=str(op.loc)) from None


def _require_tensor(t, what: str, mop: MOp):
    if not isinstance(t, TensorType):
        raise ParseError(f"{what} has type {t}; only tensors are supported", location=str(mop.loc))
