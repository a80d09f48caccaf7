"""IREE-style check files: `check.expect_*` ops become extra results plus a list of checks.

`import_check_file` returns the module and, per function, the checks; the function's
results are its own returns followed by the values each check reads. `evaluate_checks`
compares them after a run.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...ir.core import DenseAttr
from ...mlir.syntax import MOp, Parser, custom_syntax
from .convert import Converter, converts

DEFAULT_ATOL = 1e-4  # IREE's default for expect_almost_eq


@dataclass
class Check:
    kind: str  # eq, almost_eq, true, false
    results: tuple[int, ...]  # indices into the function's results that the check reads
    expected: np.ndarray | None  # for the *_const forms
    atol: float
    rtol: float
    location: str


@custom_syntax("check.expect_eq", "check.expect_almost_eq", "check.expect_eq_const",
               "check.expect_almost_eq_const", "check.expect_true", "check.expect_false")
def _check_syntax(p: Parser, op: MOp):
    p.expect("(")
    op.operands = [p.value_id()]
    while p.accept(","):
        if p.peek("%"):
            op.operands.append(p.value_id())
        elif p.accept_keyword("atol"):
            op.attrs["atol"] = float(p.number())
        elif p.accept_keyword("rtol"):
            op.attrs["rtol"] = float(p.number())
        else:
            op.attrs["value"] = p.attribute()
    p.expect(")")
    p.optional_attrs(op)
    p.expect(":")
    op.operand_types = p.comma_list(p.type)


@custom_syntax("util.unfoldable_constant")
def _unfoldable_syntax(p: Parser, op: MOp):
    p.optional_attrs(op)
    value = p.attribute()
    op.attrs["value"] = value
    if isinstance(value, DenseAttr):
        op.result_types = [value.type]
    elif p.accept(":"):
        op.result_types = [p.type()]


@converts("util.unfoldable_constant")
def _unfoldable(cv: Converter, op: MOp):
    value = op.attrs["value"]
    if not isinstance(value, DenseAttr):
        t = cv.result_type(op)
        value = DenseAttr(np.array(value, dtype=t.dtype.np_dtype))
    return cv.b.op("rt.constant", [], {"value": value})


@converts("check.expect_eq", "check.expect_almost_eq", "check.expect_eq_const",
          "check.expect_almost_eq_const", "check.expect_true", "check.expect_false")
def _check(cv: Converter, op: MOp):
    if cv.checks is None:
        raise cv.error(op, "check ops are only valid in a check file (retarget check)")
    kind = op.name.split(".")[1].removeprefix("expect_").removesuffix("_const")
    values = cv.values(op)
    first = len(cv.fn.returns) + cv.num_results  # the function's own results come first
    cv.fn.returns.extend(values)
    expected = op.attrs.get("value")
    if expected is not None:
        expected = expected.array if isinstance(expected, DenseAttr) else np.array(expected)
    almost = kind == "almost_eq"
    cv.checks.append(Check(kind, tuple(range(first, first + len(values))), expected,
                           float(op.attrs.get("atol", DEFAULT_ATOL if almost else 0.0)),
                           float(op.attrs.get("rtol", 0.0)), str(op.loc)))
    return []


def evaluate_checks(checks: list[Check], results: list) -> list[tuple[bool, str]]:
    """For each check, (passed, message); `results` are the function's outputs after a run."""
    out = []
    for c in checks:
        got = [np.asarray(results[i]) for i in c.results]
        if c.kind in ("true", "false"):
            ok = bool(np.all(got[0] != 0)) if c.kind == "true" else bool(np.all(got[0] == 0))
            out.append((ok, f"{c.location}: expect_{c.kind}" + ("" if ok else f" failed, value {got[0]}")))
            continue
        actual = got[0]
        expected = c.expected if c.expected is not None else got[1]
        if actual.shape != np.shape(expected):
            out.append((False, f"{c.location}: expect_{c.kind} shapes differ: {actual.shape} vs {np.shape(expected)}"))
            continue
        if c.kind == "eq":
            ok = bool(np.array_equal(actual, expected))
        else:
            ok = bool(np.allclose(actual.astype(np.float64), np.asarray(expected, dtype=np.float64),
                                  atol=c.atol, rtol=c.rtol, equal_nan=True))
        message = f"{c.location}: expect_{c.kind}"
        if not ok:
            diff = np.abs(actual.astype(np.float64) - np.asarray(expected, dtype=np.float64))
            message += f" failed: max abs diff {np.nanmax(diff) if diff.size else 0:g} " \
                       f"(atol {c.atol:g}, rtol {c.rtol:g})\n" \
                       f"  actual:   {actual}\n  expected: {expected}"
        out.append((ok, message))
    return out
