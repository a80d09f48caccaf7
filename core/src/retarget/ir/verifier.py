"""Check a module: every value defined before use, every op's types as its rules say."""

from __future__ import annotations

from ..errors import VerificationError
from .core import Function, Module
from .ops import infer_types


def verify(module: Module) -> Module:
    for fn in module.functions.values():
        verify_function(fn)
    return module


def verify_function(fn: Function) -> None:
    defined = set(fn.args)
    for op in fn.ops:
        for i, v in enumerate(op.operands):
            if v not in defined:
                raise VerificationError(f"{op.describe()} in @{fn.name}: operand {i} is used before it is defined")
        expected = infer_types(op.name, [v.type for v in op.operands], op.attrs, op.loc)
        actual = [r.type for r in op.results]
        if expected != actual:
            raise VerificationError(
                f"{op.describe()} in @{fn.name}: result types {', '.join(map(str, actual))} "
                f"should be {', '.join(map(str, expected))}"
            )
        defined.update(op.results)
    for v in fn.returns:
        if v not in defined:
            raise VerificationError(f"@{fn.name}: returns a value that is never defined")
