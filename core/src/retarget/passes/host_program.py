"""Host programs: the target-independent list of commands that runs a function.

Every value lives in a slot: `["arena", offset, nbytes]` in the function's
scratch arena, or `["const", offset, nbytes]` in the module's constant pool. The
arena is planned statically: a value's bytes are reused once its last reader has
run. Barriers go exactly where a command touches bytes that an earlier command of
the same stage writes (or writes bytes it reads), so independent dispatches can
run at once.

A function whose ops run on several devices (`placement.py`) gets a partitioned host program
(`plan_partitioned_function`): per placement its own arena and constant pool, and a list of
steps, each a *segment* (commands of one placement, recorded into one command buffer) or a
*transfer* (a value's bytes from one placement's buffers to another's, through the host).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..ir.core import Function, Value
from ..ir.ops import VIEWS
from .dispatch import Dispatch, is_inlinable_constant

# Every tensor starts at a multiple of this, in the arena and the constant pool: 256 bytes is the largest
# storage-buffer offset alignment GPUs ask for (WebGPU's default minStorageBufferOffsetAlignment), so each
# binding is exactly its tensor, and writable bindings of one dispatch never overlap (WebGPU forbids that).
ALIGN = 256


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


@dataclass
class ConstantPool:
    """All constants of a module in one blob, each at an aligned offset."""

    chunks: list[bytes] = field(default_factory=list)
    size: int = 0
    items: list[dict] = field(default_factory=list)
    _by_id: dict = field(default_factory=dict)

    def add(self, v: Value) -> list:
        array = np.ascontiguousarray(v.owner.attrs["value"].array)
        key = (str(v.type), array.tobytes())
        if key not in self._by_id:
            raw = key[1]
            offset = self.size
            self.chunks.append(raw + b"\0" * (_align(len(raw)) - len(raw)))
            self.size += _align(len(raw))
            self.items.append({"offset": offset, "nbytes": len(raw), "type": str(v.type)})
            self._by_id[key] = ["const", offset, len(raw)]
        return self._by_id[key]

    def blob(self) -> bytes:
        return b"".join(self.chunks)


def plan_function(fn: Function, dispatches: list[Dispatch], entry_index: dict[str, int], pool: ConstantPool) -> dict:
    """The manifest entry for `fn`: signature slots, arena size and commands."""
    root = _alias_roots(fn)
    end = len(dispatches) + 1  # position after the last command
    start: dict[Value, int] = {}
    last: dict[Value, int] = {}
    for a in fn.args:
        start[root(a)] = 0
        last.setdefault(root(a), 0)
    for i, d in enumerate(dispatches, start=1):
        for v in d.inputs:
            last[root(v)] = max(last.get(root(v), 0), i)
        for v in d.outputs:
            start.setdefault(root(v), i)
            last.setdefault(root(v), i)
    for v in fn.returns:
        last[root(v)] = end

    slots: dict[Value, list] = {}
    # in the order the program reads them (not a set's order, which changes from run to run): the same
    # model compiles to the same bytes
    for v in dict.fromkeys([root(x) for d in dispatches for x in d.inputs] + [root(x) for x in fn.returns]):
        if v.owner is not None and v.owner.name == "rt.constant":
            slots[v] = pool.add(v)
    arena = _allocate([v for v in start if v not in slots], start, last, slots)

    def slot(v: Value) -> list:
        base = slots[root(v)]
        return [base[0], base[1], v.type.nbytes]

    program = with_barriers([({"op": "dispatch", "entry": entry_index[d.name], "name": d.name},
                               [slot(v) for v in d.inputs], [slot(v) for v in d.outputs]) for d in dispatches])
    names = fn.arg_names or [None] * len(fn.args)
    return {
        "inputs": [{"name": n or f"arg{i}", "type": str(a.type), "slot": slot(a)}
                   for i, (n, a) in enumerate(zip(names, fn.args))],
        "outputs": [{"type": str(v.type), "slot": slot(v)} for v in fn.returns],
        "arena_bytes": arena,
        "program": program,
    }


def plan_partitioned_function(fn: Function, dispatches: list[Dispatch], placement_of: dict[Dispatch, str],
                              entry_index: dict[str, dict[str, int]], pools: dict[str, ConstantPool],
                              order: list[str]) -> dict:
    """The manifest entry of `fn` whose dispatches run on several placements.

    Schedule: segments and transfers in an order that keeps devices busy together. Each round
    records, for each placement in `order` (devices that run asynchronously first), every dispatch
    whose inputs are already on that placement; when no placement can go on, the earliest blocked
    dispatch's missing inputs are transferred to it. So a device's segment is submitted before the
    host runs another placement's ready work, and a transfer comes as late as it can.

    Memory: each placement's arena is planned as `plan_function` plans one, over the positions of
    the steps. A transfer writes its destination from the host while the destination device may
    still run earlier segments; so a value that a dispatch last reads stays live until the device
    has been waited on (a transfer from it, or the end of the call), where a transfer into it falls
    before that wait. Inputs are written to every placement that reads them, before the first step.
    """
    root = _alias_roots(fn)
    home = order[0]
    producer = {root(v): d for d in dispatches for v in d.outputs}
    where = {d: placement_of[d] for d in dispatches}

    def is_constant(r: Value) -> bool:
        return r.owner is not None and r.owner.name == "rt.constant"

    # -- the schedule ----------------------------------------------------------------------------
    present: dict[str, set[Value]] = {p: set() for p in order}

    def on(v: Value, p: str) -> bool:
        r = root(v)
        return r not in producer or r in present[p]

    remaining, steps = list(dispatches), []
    while remaining:
        progressed = False
        for p in order:
            segment, grew = [], True
            while grew:
                grew = False
                for d in list(remaining):
                    if where[d] == p and all(on(v, p) for v in d.inputs):
                        segment.append(d)
                        remaining.remove(d)
                        present[p].update(root(v) for v in d.outputs)
                        grew = True
            if segment:
                steps.append(("run", p, segment))
                progressed = True
        if not progressed:  # the earliest remaining dispatch: everything it reads is computed, elsewhere
            d = remaining[0]
            for v in d.inputs:
                r = root(v)
                if not on(v, where[d]):
                    steps.append(("transfer", where[producer[r]], where[d], r))
                    present[where[d]].add(r)

    # -- lifetimes per placement, over step positions -------------------------------------------
    start: dict[str, dict[Value, int]] = {p: {} for p in order}
    last: dict[str, dict[Value, int]] = {p: {} for p in order}
    slots: dict[str, dict[Value, list]] = {p: {} for p in order}
    readers = {root(v): set() for d in dispatches for v in d.inputs}
    for d in dispatches:
        for v in d.inputs:
            readers[root(v)].add(where[d])
    for a in fn.args:
        for p in readers.get(root(a), set()) or ({home} if root(a) in set(map(root, fn.returns)) else set()):
            start[p][root(a)] = last[p][root(a)] = 0
    position, positions = 0, []
    transfers_in: dict[str, list[int]] = {p: [] for p in order}
    waits: dict[str, list[int]] = {p: [] for p in order}
    for step in steps:
        if step[0] == "run":
            _, p, segment = step
            at = []
            for d in segment:
                position += 1
                at.append(position)
                for v in d.inputs:
                    r = root(v)
                    if is_constant(r):
                        if r not in slots[p]:
                            slots[p][r] = pools[p].add(r)
                    else:
                        last[p][r] = position
                for v in d.outputs:
                    start[p].setdefault(root(v), position)
                    last[p].setdefault(root(v), position)
            positions.append(at)
        else:
            _, src, dst, r = step
            position += 1
            positions.append(position)
            last[src][r] = position
            start[dst][r] = last[dst][r] = position
            transfers_in[dst].append(position)
            waits[src].append(position)
    end = position + 1
    outputs = []
    for v in fn.returns:
        r = root(v)
        if is_constant(r):
            p = home
            if r not in slots[p]:
                slots[p][r] = pools[p].add(r)
        else:
            p = where[producer[r]] if r in producer else next(q for q in order if r in start[q])
            last[p][r] = end
        outputs.append((v, p))
    for p in order:  # a value last read by a dispatch stays live until the host waits on its device
        for r, lifetime_end in last[p].items():
            wait = next((w for w in waits[p] if w >= lifetime_end), end)
            late = [t for t in transfers_in[p] if lifetime_end < t < wait]
            if late:
                last[p][r] = max(late)
    arenas = {p: _allocate([r for r in start[p] if r not in slots[p]], start[p], last[p], slots[p]) for p in order}

    def slot(v: Value, p: str) -> list:
        base = slots[p][root(v)]
        return [base[0], base[1], v.type.nbytes]

    # -- the steps -----------------------------------------------------------------------------------
    out_steps, recorded = [], set()
    for step in steps:
        if step[0] == "transfer":
            _, src, dst, r = step
            out_steps.append({"op": "transfer", "from": src, "to": dst, "src": slot(r, src), "dst": slot(r, dst)})
            continue
        _, p, segment = step
        program = [{"op": "barrier"}] if p in recorded else []  # orders it after the device's earlier segments
        recorded.add(p)
        stage_reads, stage_writes = [], []
        for d in segment:
            reads = [slot(v, p) for v in d.inputs]
            writes = [slot(v, p) for v in d.outputs]
            if _overlaps(reads, stage_writes) or _overlaps(writes, stage_writes + stage_reads):
                program.append({"op": "barrier"})
                stage_reads, stage_writes = [], []
            program.append({"op": "dispatch", "entry": entry_index[p][d.name], "name": d.name,
                            "bindings": reads + writes})
            stage_reads += reads
            stage_writes += writes
        out_steps.append({"op": "run", "placement": p, "program": program})
    names = fn.arg_names or [None] * len(fn.args)
    return {
        "inputs": [{"name": n or f"arg{i}", "type": str(a.type),
                    "slots": {p: slot(a, p) for p in order if root(a) in slots[p]}}
                   for i, (n, a) in enumerate(zip(names, fn.args))],
        "outputs": [{"type": str(v.type), "placement": p, "slot": slot(v, p)} for v, p in outputs],
        "arena_bytes": arenas,
        "steps": out_steps,
    }


def _alias_roots(fn: Function):
    """Reshapes and bitcasts are views: the result shares its operand's storage (of as many bytes)."""
    parent: dict[Value, Value] = {}
    for op in fn.ops:
        if op.name in VIEWS:
            parent[op.result] = op.operands[0]

    def root(v: Value) -> Value:
        while v in parent:
            v = parent[v]
        return v

    return root


def with_barriers(commands) -> list[dict]:
    """The program of `commands`, (dispatch command, read slots, write slots) in order, with a barrier
    wherever a command touches bytes that an earlier command of the same stage writes (or writes
    bytes it reads)."""
    program, stage_reads, stage_writes = [], [], []
    for cmd, reads, writes in commands:
        if _overlaps(reads, stage_writes) or _overlaps(writes, stage_writes + stage_reads):
            program.append({"op": "barrier"})
            stage_reads, stage_writes = [], []
        program.append({**cmd, "bindings": reads + writes})
        stage_reads += reads
        stage_writes += writes
    return program


def first_fit(blocks) -> tuple[list[int], int]:
    """Offsets of aligned blocks `(start, last, nbytes)` live over [start, last], placed first-fit in
    order of start (larger first), reusing the bytes of blocks no longer live; and the arena size."""
    live: list[tuple[int, int, int]] = []  # (offset, size, block)
    offsets, size = [0] * len(blocks), 0
    for i in sorted(range(len(blocks)), key=lambda i: (blocks[i][0], -blocks[i][2])):
        start, _, nbytes = blocks[i]
        live = [blk for blk in live if blocks[blk[2]][1] >= start]
        need = _align(max(nbytes, 1))
        offset = 0
        for blk_offset, blk_size, _ in sorted(live, key=lambda b: b[0]):
            if offset + need <= blk_offset:
                break
            offset = max(offset, blk_offset + blk_size)
        live.append((offset, need, i))
        offsets[i] = offset
        size = max(size, offset + need)
    return offsets, size


def _allocate(values, start, last, slots) -> int:
    """First-fit allocation of aligned blocks over [start, last] lifetimes; returns arena size."""
    offsets, size = first_fit([(start[v], last[v], v.type.nbytes) for v in values])
    for v, offset in zip(values, offsets):
        slots[v] = ["arena", offset, v.type.nbytes]
    return size


def _overlaps(slots_a, slots_b) -> bool:
    return any(
        a[0] == b[0] and a[1] < b[1] + b[2] and b[1] < a[1] + a[2]
        for a in slots_a for b in slots_b if a[0] == "arena"
    )


def format_program(name: str, plan: dict) -> str:
    """A readable text form of a host program, for --dump-after-all."""

    def s(slot):
        return f"%{slot[0]}[{slot[1]}:{slot[1] + slot[2]}]"

    def commands(program, indent="  "):
        for cmd in program:
            if cmd["op"] == "barrier":
                lines.append(f"{indent}barrier")
            else:
                lines.append(f"{indent}dispatch @{cmd['name']}({', '.join(s(b) for b in cmd['bindings'])})")

    if "steps" not in plan:
        lines = [f"rt.host_program @{name} {{arena_bytes = {plan['arena_bytes']}}} {{"]
        for i, inp in enumerate(plan["inputs"]):
            lines.append(f'  {s(inp["slot"])} = input {i} "{inp["name"]}" : {inp["type"]}')
        commands(plan["program"])
        lines.append(f"  return {', '.join(s(o['slot']) + ' : ' + o['type'] for o in plan['outputs'])}")
        lines.append("}")
        return "\n".join(lines)
    arenas = ", ".join(f"{p} = {n}" for p, n in plan["arena_bytes"].items())
    lines = [f"rt.host_program @{name} {{arena_bytes = {{{arenas}}}}} {{"]
    for i, inp in enumerate(plan["inputs"]):
        where = ", ".join(f"{p}{s(slot)}" for p, slot in inp["slots"].items()) or "unused"
        lines.append(f'  {where} = input {i} "{inp["name"]}" : {inp["type"]}')
    for step in plan["steps"]:
        if step["op"] == "transfer":
            lines.append(f"  transfer {step['from']}{s(step['src'])} -> {step['to']}{s(step['dst'])}")
        else:
            lines.append(f"  run {step['placement']} {{")
            commands(step["program"], "    ")
            lines.append("  }")
    lines.append(f"  return {', '.join(o['placement'] + s(o['slot']) + ' : ' + o['type'] for o in plan['outputs'])}")
    lines.append("}")
    return "\n".join(lines)


__all__ = [
    "ConstantPool", "plan_function", "plan_partitioned_function", "format_program", "is_inlinable_constant",
    "first_fit", "with_barriers",
]
