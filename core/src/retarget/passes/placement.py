"""Placement: which device runs each op, from the targets' support tables, before dispatch formation.

Every compute op goes to the *primary* placement (the `--target`s) unless one of its targets
refuses it; then it goes to the *fallback* placement (`--fallback`), which must run it. A target
refuses an op by its name or type (`SupportTable.ops`, `.dtypes`), or when a kernel would have to
read or write a buffer of a type it cannot hold (`.buffers`). Which values become buffers depends
on the dispatches, so that last rule runs to a fixed point: form the dispatches of the placement
so far, move every op that reads or writes a refused buffer to the fallback, again until nothing
moves (ops only ever move to the fallback, so it ends).

Host-side ops (constants, and the views: reshapes, bitcasts) are not placed: they are slots, not kernels. The
report that `--explain` prints (`explain_text`) holds every compute op with its placement and the reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import UnsupportedOpError
from ..ir.core import Function, Operation
from ..ir.ops import VIEWS
from ..protocols import SupportTable
from .dispatch import HOST_SIDE, Dispatch, form_dispatches

USER_REFUSAL = "refused by --refuse"


@dataclass
class Side:
    """One placement: its name, and the support table of each of its targets (by target name)."""

    name: str
    tables: dict[str, SupportTable]


@dataclass
class OpPlacement:
    op: Operation
    placement: str | None  # None: no placement can run it
    reason: str


@dataclass
class FunctionPlacement:
    function: Function
    ops: list[OpPlacement] = field(default_factory=list)
    dispatches: list[Dispatch] = field(default_factory=list)  # formed within placements
    placement_of: dict[Operation, str] = field(default_factory=dict)

    def dispatch_placement(self, d: Dispatch) -> str:
        return self.placement_of[d.ops[-1]]

    @property
    def refused(self) -> list[OpPlacement]:
        return [p for p in self.ops if p.placement is None]


def with_user_refusals(table: SupportTable, refuse: list[str]) -> SupportTable:
    """`table` plus the `--refuse` names: an op (`rt.erf`, `rt.exp:i32`) or an element type (`i64`)."""
    ops, dtypes = dict(table.ops), dict(table.dtypes)
    for name in refuse:
        (ops if name.startswith("rt.") else dtypes)[name] = USER_REFUSAL
    return SupportTable(ops, dtypes, dict(table.buffers), dict(table.ranges))


def check_refusal_names(refuse: list[str]) -> None:
    """A `--refuse` name must be a graph op, `op:type` or an element type: a typo would refuse nothing."""
    from ..errors import InputError, suggestion
    from ..ir.dtypes import DTYPES
    from ..ir.ops import OPS

    kinds = ("float", "int", "uint", "bool")
    for name in refuse:
        op, _, qualifier = name.partition(":")
        if name.startswith("rt."):
            if op not in OPS:
                raise InputError(f"--refuse {name}: no graph op '{op}'", hint=suggestion(op, OPS))
            if qualifier and qualifier not in DTYPES and qualifier not in kinds:
                raise InputError(f"--refuse {name}: '{qualifier}' is not an element type or kind",
                                 hint=f"e.g. {op}:i64 or {op}:int; kinds: {', '.join(kinds)}")
        elif name not in DTYPES:
            raise InputError(f"--refuse {name}: not a graph op (rt.NAME) or an element type",
                             hint=suggestion(name, [*OPS, *DTYPES]))


def op_refusal(op: Operation, table: SupportTable) -> str | None:
    """Why `table` refuses `op` by its name or its types (not its buffers), or None."""
    if op.name in table.ops:
        return f"refuses {op.name}: {table.ops[op.name]}"
    at = (op.operands[0] if op.operands else op.results[0]).type.dtype
    for key in (f"{op.name}:{at.name}", f"{op.name}:{at.kind}"):
        if key in table.ops:
            return f"refuses {op.name} on {at}: {table.ops[key]}"
    for v in (*op.operands, *op.results):
        if v.type.dtype.name in table.dtypes:
            return f"refuses {v.type.dtype}: {table.dtypes[v.type.dtype.name]}"
    return None


def buffer_refusals(d: Dispatch, table: SupportTable) -> list[tuple[Operation, str]]:
    """The ops of dispatch `d` that read or write a buffer of a type `table` cannot hold, with why."""
    out = []
    for v in d.inputs:
        why = table.buffers.get(v.type.dtype.name)
        if why:
            out += [(op, f"cannot read {_a(v.type.dtype.name)} buffer: {why}") for op in d.ops if v in op.operands]
    for v in d.outputs:
        why = table.buffers.get(v.type.dtype.name)
        if why and v.owner is not None:
            out.append((v.owner, f"cannot write {_a(v.type.dtype.name)} buffer: {why}"))
    return out


def _a(name: str) -> str:
    return f"{'an' if name[0] in 'aefhilmnorsx' else 'a'} {name}"


def place_function(fn: Function, primary: Side, fallback: Side | None) -> FunctionPlacement:
    """Place every compute op of `fn` (see the module's docstring). An op that neither side runs
    gets placement None and is reported by `check`."""
    result = FunctionPlacement(fn)
    decided: dict[Operation, OpPlacement] = {}

    def refusals(op: Operation, side: Side) -> list[str]:
        return [f"{name} {why}" for name, table in side.tables.items() if (why := op_refusal(op, table))]

    def move(op: Operation, why: str) -> None:
        """`op` cannot run on the primary: to the fallback when it runs it there."""
        if fallback is None:
            decided[op] = OpPlacement(op, None, why)
            return
        also = refusals(op, fallback)
        decided[op] = OpPlacement(op, None, f"{why}; and {'; '.join(also)}") if also else \
            OpPlacement(op, fallback.name, why)

    compute = [op for op in fn.ops if op.name not in HOST_SIDE]
    for op in compute:
        why = refusals(op, primary)
        if why:
            move(op, "; ".join(why))
        else:
            decided[op] = OpPlacement(op, primary.name, "supported")
    while True:
        placement_of = {op: p.placement or primary.name for op, p in decided.items()}
        dispatches = form_dispatches(fn, placement_of)
        moved = False
        for d in dispatches:
            side = primary if placement_of[d.ops[-1]] == primary.name else fallback
            for name, table in side.tables.items():
                for op, why in buffer_refusals(d, table):
                    if side is primary and decided[op].placement == primary.name:
                        move(op, f"{name} {why}")
                        moved = True
                    elif side is fallback and decided[op].placement == fallback.name:
                        decided[op] = OpPlacement(op, None, f"{decided[op].reason}; and {name} {why}")
        if not moved:
            break
    result.ops = [decided[op] for op in compute]
    result.placement_of = placement_of
    result.dispatches = dispatches
    return result


def value_ranges(fp: FunctionPlacement, sides: list[Side]) -> dict[str, tuple[int, int, str]]:
    """The element types that a target running some dispatch of `fp` holds only within a range
    (`SupportTable.ranges`): dtype -> (lo, hi, why), the narrowest where several targets restrict one."""
    used = {fp.dispatch_placement(d) for d in fp.dispatches}
    out: dict[str, tuple[int, int, str]] = {}
    for table in (t for side in sides if side.name in used for t in side.tables.values()):
        for name, (lo, hi, why) in table.ranges.items():
            if name not in out or hi - lo < out[name][1] - out[name][0]:
                out[name] = (lo, hi, why)
    return out


def check_constant_ranges(fp: FunctionPlacement, sides: list[Side]) -> None:
    """Refuse a constant that a dispatch reads on a target that cannot hold its values (`SupportTable.ranges`), and
    a bitcast to a type it holds only within a range: any bits may come out, and no call checks them."""
    by_name = {side.name: side for side in sides}
    for d in fp.dispatches:
        ranges = value_ranges(FunctionPlacement(fp.function, dispatches=[d], placement_of=fp.placement_of),
                              [by_name[fp.dispatch_placement(d)]])
        for v in d.inputs:
            bitcast = _bitcast_under(v)
            if bitcast is not None and v.type.dtype.name in ranges:
                lo, hi, why = ranges[v.type.dtype.name]
                where = f" at {bitcast.loc}" if bitcast.loc else ""
                raise UnsupportedOpError(
                    f"rt.bitcast{where} makes {bitcast.result.type} for a kernel on a target that holds "
                    f"{v.type.dtype} only within [{lo}, {hi}] ({why}), and the bits of "
                    f"{bitcast.operands[0].type.dtype} may leave it",
                    hint="use --fallback with a target that holds them (--explain shows the split)")
        for op in d.ops:
            for v in op.operands:
                if v.owner is None or v.owner.name != "rt.constant" or v.type.dtype.name not in ranges:
                    continue
                lo, hi, why = ranges[v.type.dtype.name]
                array = v.owner.attrs["value"].array
                outside = array[(array < lo) | (array > hi)]
                if outside.size:
                    where = f" at {op.loc}" if op.loc else ""
                    raise UnsupportedOpError(
                        f"{op.name}{where} reads a {v.type} constant holding {outside.flat[0]}, outside "
                        f"[{lo}, {hi}]: {why}", hint="keep the model's integers within that range, or use --fallback "
                        "with a target that holds them (--explain shows the split)")


def _bitcast_under(v) -> Operation | None:
    """The bitcast among the views that `v` is (a bitcast, or a reshape of one), or None."""
    while v.owner is not None and v.owner.name in VIEWS:
        if v.owner.name == "rt.bitcast":
            return v.owner
        v = v.owner.operands[0]
    return None


def check(placements: dict[str, FunctionPlacement], sides: dict[str, list[str]], fallback_given: bool) -> None:
    """Raise PlacementError for the first op that no placement runs, naming where it is and why."""
    refused = [p for fp in placements.values() for p in fp.refused]
    if not refused:
        return
    first = refused[0]
    where = f" at {first.op.loc}" if first.op.loc else ""
    more = f" (and {len(refused) - 1} more op{'s' if len(refused) > 2 else ''}; --explain lists them)" \
        if len(refused) > 1 else ""
    hint = ("--explain shows where every op runs; cast the model, or use another fallback" if fallback_given else
            "add --fallback llvm-cpu to run what the target refuses on the CPU (--explain shows the split)")
    raise PlacementError(f"{first.op.name}{where}: {first.reason}{more}", hint=hint,
                         report=report(placements, sides))


class PlacementError(UnsupportedOpError):
    """An op that no placement can run; `report` is the placement report, for --explain."""

    def __init__(self, message: str, *, hint: str, report: dict):
        super().__init__(message, hint=hint)
        self.report = report


# -- the report -----------------------------------------------------------------------------------------


def report(placements: dict[str, FunctionPlacement], sides: dict[str, list[str]],
           functions: dict[str, dict] | None = None) -> dict:
    """The placement report as JSON: the placements and their targets, and per function every compute
    op with its placement, dispatch and reason, and (once planned) the host program's steps."""
    out = {"placements": sides, "functions": {}}
    for name, fp in placements.items():
        dispatch_of = {op: i for i, d in enumerate(fp.dispatches) for op in d.ops}
        ops = [{"op": p.op.name, "loc": str(p.op.loc) if p.op.loc else None, "placement": p.placement,
                "dispatch": dispatch_of.get(p.op), "reason": p.reason,
                "type": str((p.op.results[0] if p.op.results else p.op.operands[0]).type)} for p in fp.ops]
        entry = {"ops": ops}
        plan = (functions or {}).get(name)
        if plan is not None:
            entry["steps"] = summarize_steps(plan)
        out["functions"][name] = entry
    return out


def summarize_steps(plan: dict) -> list[dict]:
    """A host program's steps, short: each segment's placement and dispatches, each transfer's bytes."""
    steps = plan.get("steps") or [{"op": "run", "placement": None, "program": plan["program"]}]
    out = []
    for s in steps:
        if s["op"] == "run":
            out.append({"op": "run", "placement": s["placement"],
                        "dispatches": [c["name"] for c in s["program"] if c["op"] == "dispatch"]})
        else:
            out.append({"op": "transfer", "from": s["from"], "to": s["to"], "bytes": s["src"][2]})
    return out


def explain_text(rep: dict) -> str:
    """The report as ExecuTorch's partitioner logs it: one line per op (its placement, its dispatch,
    where it comes from and why it runs there), then each function's schedule."""
    lines = [f"placements: {', '.join(f'{p} = {chr(43).join(t)}' for p, t in rep['placements'].items())}"]
    for fname, entry in rep["functions"].items():
        counts: dict[str, int] = {}
        for op in entry["ops"]:
            counts[op["placement"] or "REFUSED"] = counts.get(op["placement"] or "REFUSED", 0) + 1
        lines.append(f"@{fname}: {len(entry['ops'])} ops: " + ", ".join(f"{n} {p}" for p, n in counts.items()))
        rows = [(str(i), op["op"], op["type"], op["placement"] or "REFUSED",
                 f"dispatch {op['dispatch']}" if op["dispatch"] is not None and op["placement"] else "",
                 _short_location(op["loc"]), op["reason"]) for i, op in enumerate(entry["ops"])]
        widths = [max((len(r[c]) for r in rows), default=0) for c in range(6)]
        for r in rows:
            lines.append("  " + "  ".join(v.rjust(w) if c == 0 else v.ljust(w)
                                          for c, (v, w) in enumerate(zip(r, widths))) + "  " + r[6])
        if "steps" in entry:
            parts = []
            for s in entry["steps"]:
                if s["op"] == "run":
                    n = len(s["dispatches"])
                    parts.append(f"{s['placement'] or 'device'} ({n} dispatch{'es' if n != 1 else ''})")
                else:
                    parts.append(f"{s['from']}->{s['to']} {_bytes(s['bytes'])}")
            lines.append(f"  schedule: {' -> '.join(parts)}")
            transfers = [s for s in entry["steps"] if s["op"] == "transfer"]
            if transfers:
                lines.append(f"  {len(transfers)} transfer{'s' if len(transfers) > 1 else ''}, "
                             f"{_bytes(sum(s['bytes'] for s in transfers))} a call")
    return "\n".join(lines)


def _short_location(loc: str | None) -> str:
    """A location relative to the working directory when it lies under it."""
    import os

    if not loc:
        return "-"
    cwd = os.getcwd() + os.sep
    return loc[len(cwd):] if loc.startswith(cwd) else loc


def _bytes(n: int) -> str:
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


__all__ = ["Side", "OpPlacement", "FunctionPlacement", "PlacementError", "place_function", "check",
           "with_user_refusals", "check_refusal_names", "op_refusal", "report", "explain_text"]
