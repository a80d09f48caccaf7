"""Host programs: the target-independent list of commands that runs a function.

Every value lives in a slot: `["arena", offset, nbytes]` in the function's
scratch arena, or `["const", offset, nbytes]` in the module's constant pool. The
arena is planned statically: a value's bytes are reused once its last reader has
run. Barriers go exactly where a command touches bytes that an earlier command of
the same stage writes (or writes bytes it reads), so independent dispatches can
run at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..ir.core import Function, Value
from .dispatch import Dispatch, is_inlinable_constant

ALIGN = 64


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
    for v in set(root(x) for d in dispatches for x in d.inputs) | set(root(x) for x in fn.returns):
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
        "inputs": [{"name": n or f"arg{i}", "type": str(a.type), "slot": slot(a)} for i, (n, a) in enumerate(zip(names, fn.args))],
        "outputs": [{"type": str(v.type), "slot": slot(v)} for v in fn.returns],
        "arena_bytes": arena,
        "program": program,
    }


def _alias_roots(fn: Function):
    """Reshapes are views: a reshape's result shares its operand's storage."""
    parent: dict[Value, Value] = {}
    for op in fn.ops:
        if op.name == "rt.reshape":
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

    lines = [f"rt.host_program @{name} {{arena_bytes = {plan['arena_bytes']}}} {{"]
    for i, inp in enumerate(plan["inputs"]):
        lines.append(f'  {s(inp["slot"])} = input {i} "{inp["name"]}" : {inp["type"]}')
    for cmd in plan["program"]:
        if cmd["op"] == "barrier":
            lines.append("  barrier")
        else:
            lines.append(f"  dispatch @{cmd['name']}({', '.join(s(b) for b in cmd['bindings'])})")
    lines.append(f"  return {', '.join(s(o['slot']) + ' : ' + o['type'] for o in plan['outputs'])}")
    lines.append("}")
    return "\n".join(lines)


__all__ = ["ConstantPool", "plan_function", "format_program", "is_inlinable_constant", "first_fit", "with_barriers"]
