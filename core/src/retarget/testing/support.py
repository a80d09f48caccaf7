"""What a target refuses in practice, beside what its support table says: to write a table, or check one.

    python -m retarget.testing.support vulkan-spirv webgpu-spirv:webgpu   # every case: a report per target

`cases()` is one tiny graph per elementwise op and element type the graph IR accepts, and a few
loop ops (reduce, argmax, matmul) per type. `disagreements(backend, desc)` compiles every case the
table allows (all in one `compile` call, then one by one only if that fails) and returns those that
`compile` refuses: each is a hole in the table, where placement would put an op on a target that
cannot run it. (The other way, a table refusing what compiles, only costs a transfer, and is how
`--refuse` works.) A target that renders source for a driver to compile later (OpenCL, Metal) can
only be checked as far as its `compile` goes.
"""

from __future__ import annotations

import itertools
import sys

from ..errors import RetargetError
from ..ir import dtypes
from ..ir.core import Builder, Function, TensorType, Value
from ..ir.ops import BINARY, UNARY
from ..passes.dispatch import form_dispatches
from ..passes.placement import buffer_refusals, op_refusal
from ..protocols import SupportTable

SAMPLE_OPS = ("add", "neg", "cast", "cmp")  # every element type with these; f32 and i32 with every op


def _case(name: str, op: str, dt, attrs=None, operands: int = 1, shape=(4,)) -> Function | None:
    args = [Value(TensorType(shape, dt)) for _ in range(operands)]
    fn = Function(name, args)
    try:
        fn.returns = [Builder(fn).op(op, args, attrs or {})]
    except RetargetError:  # an op the graph IR does not accept at this type
        return None
    return fn


def cases(sample: bool = False) -> list[tuple[str, Function]]:
    """(label, function) for each case: `op:dtype` labels. With `sample`, the element types with SAMPLE_OPS
    and f32 and i32 with every op: a tenth of the cases, for the conformance suite's quick run."""
    out = []
    for i, (op, dt) in enumerate(itertools.product(
            [*UNARY, *BINARY, "cmp", "cast", "reduce", "argmax", "matmul"], dtypes.DTYPES.values())):
        if sample and op not in SAMPLE_OPS and dt.name not in ("f32", "i32"):
            continue
        name = f"case{i}_{op}_{dt.name}"
        if op in UNARY:
            fn = _case(name, f"rt.{op}", dt)
        elif op in BINARY:
            fn = _case(name, f"rt.{op}", dt, operands=2)
        elif op == "cmp":
            fn = _case(name, "rt.cmp", dt, {"predicate": "lt"}, 2)
        elif op == "cast":
            fn = _case(name, "rt.cast", dt, {"dtype": "f32" if dt.name != "f32" else "i32"})
        elif op == "reduce":
            fn = _case(name, "rt.reduce", dt, {"kind": "sum", "axes": [0]})
        elif op == "argmax":
            fn = _case(name, "rt.argmax", dt, {"axis": 0, "dtype": "i32"})
        else:
            fn = _case(name, "rt.matmul", dt, operands=2, shape=(4, 4))
        if fn is not None:
            out.append((f"{op}:{dt.name}", fn))
    return out


def allows(table: SupportTable, fn: Function) -> bool:
    """Whether `table` lets every op of `fn` run on its target (ops, types and buffers)."""
    dispatches = form_dispatches(fn)
    return not any(op_refusal(op, table) for d in dispatches for op in d.ops) and \
        not any(buffer_refusals(d, table) for d in dispatches)


def disagreements(backend, desc, table: SupportTable | None = None, sample: bool = False) -> list[str]:
    """`label: error` for each case that `table` (default: the backend's own) allows and `compile` refuses."""
    from ..compiler import support_table

    table = support_table(backend, desc) if table is None else table
    allowed = [(label, fn) for label, fn in cases(sample) if allows(table, fn)]
    kernels = [[d.function for d in form_dispatches(fn)] for _, fn in allowed]
    try:
        backend.compile([k for ks in kernels for k in ks], desc)
        return []
    except RetargetError:
        pass
    out = []
    for (label, _), ks in zip(allowed, kernels):
        try:
            backend.compile(ks, desc)
        except RetargetError as e:
            out.append(f"{label}: {e.oneline()}")
    return out


def main(argv: list[str]) -> int:
    from ..compiler import resolve_target

    if not argv:
        print(__doc__.split("\n\n")[1])
        return 2
    failed = 0
    for spec in argv:
        backend, desc, _ = resolve_target(spec)
        found = disagreements(backend, desc)
        failed += bool(found)
        print(f"{desc.name}: {len(found)} case{'s' if len(found) != 1 else ''} the support table allows and "
              f"compile refuses")
        for line in found:
            print(f"  {line}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
