"""Dispatch formation: cut each function into kernels (dispatches).

A dispatch is a small graph function: its arguments are the buffers it reads,
its results the buffers it writes. Constants stay on the host side (a constant
pool) unless they are tiny, in which case they are copied into the kernel.
Reshapes of contiguous tensors are views and need no kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir.core import Function, Operation, Value

INLINE_CONSTANT_ELEMENTS = 16
HOST_SIDE = ("rt.constant", "rt.reshape")


@dataclass(eq=False)
class Dispatch:
    name: str
    function: Function  # the kernel, named like the dispatch
    inputs: list[Value]  # host values bound to the kernel's arguments, in order
    outputs: list[Value]  # host values the kernel's results are written to


def is_inlinable_constant(v: Value) -> bool:
    return v.owner is not None and v.owner.name == "rt.constant" and v.type.num_elements <= INLINE_CONSTANT_ELEMENTS


def form_dispatches(fn: Function) -> list[Dispatch]:
    """One dispatch per compute op, in program order. (Fusion groups more ops per dispatch.)"""
    groups = _groups(fn)
    used_by = fn.users()
    returned = set(fn.returns)
    dispatches = []
    for i, group in enumerate(groups):
        members = set(group)
        outputs = [r for op in group for r in op.results
                   if r in returned or any(user not in members for user in used_by.get(r, []))]
        dispatches.append(make_dispatch(f"{fn.name}_dispatch_{i}_{_short(group)}", group, outputs))
    return dispatches


def _groups(fn: Function) -> list[list[Operation]]:
    return [[op] for op in fn.ops if op.name not in HOST_SIDE]


def _short(group: list[Operation]) -> str:
    return "_".join(op.name.removeprefix("rt.") for op in group[:3])


def make_dispatch(name: str, ops: list[Operation], outputs: list[Value]) -> Dispatch:
    """A dispatch computing `ops` (in order) and writing `outputs`; values from outside become arguments."""
    produced = {r for op in ops for r in op.results}
    inputs: list[Value] = []
    mapping: dict[Value, Value] = {}
    body: list[Operation] = []
    for op in ops:
        for v in op.operands:
            if v in produced or v in mapping:
                continue
            if is_inlinable_constant(v):
                clone = Operation("rt.constant", [], [], dict(v.owner.attrs), v.owner.loc)
                clone.results = [Value(v.type, clone, 0)]
                body.append(clone)
                mapping[v] = clone.results[0]
            else:
                inputs.append(v)
                mapping[v] = Value(v.type, None, len(inputs) - 1)
    args = [mapping[v] for v in inputs]
    for op in ops:
        clone = Operation(op.name, [mapping[v] for v in op.operands], [], dict(op.attrs), op.loc)
        clone.results = [Value(r.type, clone, i) for i, r in enumerate(op.results)]
        mapping.update(zip(op.results, clone.results))
        body.append(clone)
    kernel = Function(name, args, body, [mapping[v] for v in outputs])
    return Dispatch(name, kernel, inputs, outputs)
