"""Dispatch formation: cut each function into kernels (dispatches), fusing as it goes.

A dispatch is a small graph function: its arguments are the buffers it reads,
its result the buffer it writes. Splat constants (one value repeated) are copied
into the kernel as scalars; other constants stay in the host's constant pool.
Reshapes and bitcasts are views of their operand's bytes (`ir.ops.VIEWS`) and need no kernel.

Fusion (greedy, in program order) groups ops around at most one *root*, an op
that needs loops of its own (`LOOP_OPS`):
- an elementwise op joins the group of a producer whose value only it uses:
  the epilogue of a conv or matmul (bias, ReLU6), or a chain of elementwise ops;
- a conv's or matmul's result that several elementwise ops read, all of one root-less group, takes that group
  as its epilogue (LeakyRelu's min and max of it, SiLU's x * sigmoid(x), GELU's), once the greedy pass is done;
- data movement (transpose, slice, pad, broadcast, ...) joins only root-less
  groups, since it reads its operand at other indices than it writes;
- a reduction takes single-use root-less producers as its prologue (each input
  element is read once, so inlining them costs nothing); a conv, matmul or pool
  does not, since it reads each input element many times, except for weight
  dequantization (`rt.dequantize` and data movement of its result): that is the
  point of packed weights, which stay packed in memory and unpack as kernels read them;
- a root-less group of more than RECOMPUTED_AT_MOST ops stays a kernel of its own where its consumer reads each
  of its elements several times (a gather's indices, a broadcast operand): fused, each would be computed again at
  every read;
- a scatter takes single-use root-less producers as its prologue too (data is read once, the indices and
  updates once per chunk), and nothing joins it as an epilogue: it writes its output out of order.
Every group has exactly one output, so a kernel writes one buffer. A group binds at most
`MAX_KERNEL_BUFFERS` buffers (what it reads, and the one it writes): past that, producers stay
kernels of their own (a sum of 40 tensors is two kernels, not one of 41 buffers).

With a placement (op -> device name, from `placement.py`), ops fuse only with ops of the same
placement: a kernel never spans two devices.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..ir.core import Function, Operation, Value
from ..ir.ops import VIEWS

HOST_SIDE = ("rt.constant", *VIEWS)
LOOP_OPS = ("rt.matmul", "rt.conv2d", "rt.max_pool2d", "rt.avg_pool2d", "rt.reduce", "rt.argmax",
            "rt.quantized_matmul", "rt.scatter", "rt.segment_reduce")
PROLOGUE_ROOTS = ("rt.reduce", "rt.argmax", "rt.scatter", "rt.segment_reduce")
NO_EPILOGUE_ROOTS = ("rt.scatter",)  # write their output out of order: nothing can read it inside the kernel
DEQUANTIZE_ROOTS = ("rt.matmul", "rt.conv2d")  # take a dequantization as their prologue
EPILOGUE_DAG_ROOTS = ("rt.matmul", "rt.conv2d", "rt.quantized_matmul")  # whose result an epilogue may read twice
DATA_MOVEMENT = ("rt.transpose", "rt.broadcast", "rt.slice")
# Every backend passes a kernel's buffers somewhere bounded: Vulkan an element base each in 128 bytes of push
# constants (the least a device may have, the sizes known at run time after them), Metal 31 buffer slots.
MAX_KERNEL_BUFFERS = 24
RECOMPUTED_AT_MOST = 8  # ops of a root-less group that a kernel may recompute for each of several reads


@dataclass(eq=False)
class Dispatch:
    name: str
    function: Function  # the kernel, named like the dispatch
    inputs: list[Value]  # host values bound to the kernel's arguments, in order
    outputs: list[Value]  # host values the kernel's results are written to
    ops: list[Operation] = field(default_factory=list)  # the function's ops it computes


def is_inlinable_constant(v: Value) -> bool:
    """A splat constant: one scalar, whatever its shape."""
    if v.owner is None or v.owner.name != "rt.constant":
        return False
    flat = v.owner.attrs["value"].array.reshape(-1)
    return flat.size > 0 and bool((flat == flat[0]).all())


def form_dispatches(fn: Function, placement: dict[Operation, str] | None = None) -> list[Dispatch]:
    """One dispatch per compute op, in program order. (Fusion groups more ops per dispatch, never
    across two placements.)"""
    groups = _groups(fn, placement or {})
    used_by = fn.users()
    returned = set(fn.returns)
    dispatches = []
    for i, group in enumerate(groups):
        members = set(group)
        outputs = [r for op in group for r in op.results
                   if r in returned or any(user not in members for user in used_by.get(r, []))]
        dispatch = make_dispatch(f"{fn.name}_dispatch_{i}_{_short(group)}", group, outputs)
        used = dispatch.function.symbols_used()
        dispatch.function.symbols = {s: r for s, r in fn.symbols.items() if s in used}
        dispatches.append(dispatch)
    return dispatches


def _groups(fn: Function, placement: dict[Operation, str]) -> list[list[Operation]]:
    from ..ir.ops import OPS

    used_by = fn.users()
    returned = set(fn.returns)
    position = {op: i for i, op in enumerate(fn.ops)}
    group_of: dict[Operation, list[Operation]] = {}
    order: list[list[Operation]] = []

    def root(group):
        return next((op for op in group if op.name in LOOP_OPS), None)

    for op in fn.ops:
        if op.name in HOST_SIDE:
            continue
        producers = []
        for v in op.operands:
            group = group_of.get(v.owner)
            single_use = len(used_by.get(v, [])) == 1 and v not in returned
            if group is not None and single_use and group[-1] is v.owner and group not in producers \
                    and placement.get(v.owner) == placement.get(op):
                producers.append(group)
        producers = [g for g in producers if (root(g) is None or root(g).name not in NO_EPILOGUE_ROOTS)
                     and not (root(g) is None and _recomputed(g, op))]
        rooted = [g for g in producers if root(g) is not None]
        rootless = [g for g in producers if root(g) is None]
        if op.name in LOOP_OPS:
            merged = rootless if op.name in PROLOGUE_ROOTS else \
                [g for g in rootless if _dequantization(g)] if op.name in DEQUANTIZE_ROOTS else []
        elif OPS[op.name].elementwise and len(rooted) <= 1 and all(
            v.type.shape == op.result.type.shape for g in rooted for v in op.operands if v.owner is g[-1]
        ):
            merged = rooted + rootless
        else:
            merged = rootless
        merged = _within_buffer_limit(merged, op)
        group = [o for g in merged for o in g] + [op]
        group.sort(key=position.__getitem__)
        order = [g for g in order if not any(g is m for m in merged)]
        for o in group:
            group_of[o] = group
        order.append(group)
    return _shared_epilogues(order, group_of, used_by, returned, placement, root)


def _recomputed(group: list[Operation], op: Operation) -> bool:
    """Whether fusing root-less `group` into `op` would compute each of its elements again and again at a cost:
    `op` reads the group's output at several of its own indices (a gather's indices, once per row of the table it
    gathers; an operand that a broadcast or elementwise op broadcasts) and the group is more than a few ops (a
    tree ensemble's step: ~25 ops with gathers, which the gather of its leaves' [T, N, targets] values would
    compute once per target)."""
    from ..ir.ops import OPS

    out = group[-1].result
    if sum(o.name != "rt.constant" for o in group) <= RECOMPUTED_AT_MOST:
        return False
    if op.name == "rt.gather":
        repeats = out is op.operands[1]
    else:
        repeats = op.name == "rt.broadcast" or OPS[op.name].elementwise
    total, once = op.result.type.num_elements, out.type.num_elements
    return repeats and isinstance(total, int) and isinstance(once, int) and total >= 2 * once


def _shared_epilogues(order, group_of, used_by, returned, placement, root) -> list[list[Operation]]:
    """`order` with each rooted group whose output only one root-less group of elementwise ops reads, at the
    output's own indices, merged with that group (where the kernel's buffers allow): the greedy pass fuses an
    epilogue only into the producer of a value that one op reads."""
    from ..ir.ops import OPS

    order = list(order)
    at = 0
    while at < len(order):  # an epilogue comes after its producer: a merged group is looked at again there
        group = order[at]
        top, out = root(group), group[-1].result
        users = used_by.get(out, [])
        epilogue = group_of.get(users[0]) if users else None  # None: a view of it is read elsewhere
        if (top is None or top.name not in EPILOGUE_DAG_ROOTS or out in returned or len(users) < 2
                or any(group_of.get(u) is not epilogue for u in users) or epilogue is None
                or root(epilogue) is not None or not all(OPS[o.name].elementwise for o in epilogue)
                or any(u.result.type.shape != out.type.shape for u in users)
                or any(placement.get(o) != placement.get(top) for o in epilogue)
                or kernel_buffers(group + epilogue) > MAX_KERNEL_BUFFERS):
            at += 1
            continue
        combined = group + epilogue  # each in program order, and the epilogue reads the group's output
        order[next(i for i, g in enumerate(order) if g is epilogue)] = combined
        del order[at]
        for o in combined:
            group_of[o] = combined
    return order


def _within_buffer_limit(producers: list[list[Operation]], op: Operation) -> list[list[Operation]]:
    """The producer groups, in order, that `op` can take in while its kernel binds at most MAX_KERNEL_BUFFERS."""
    kept: list[list[Operation]] = []
    for group in producers:
        if kernel_buffers([o for g in (*kept, group) for o in g] + [op]) <= MAX_KERNEL_BUFFERS:
            kept.append(group)
    return kept


def kernel_buffers(ops: list[Operation]) -> int:
    """The buffers a kernel of `ops` binds: the values it reads from outside (splat constants are copied into
    it) and the one it writes."""
    produced = {r for op in ops for r in op.results}
    read = {v for op in ops for v in op.operands if v not in produced and not is_inlinable_constant(v)}
    return len(read) + 1


def _dequantization(group: list[Operation]) -> bool:
    return group[0].name == "rt.dequantize" and all(op.name in DATA_MOVEMENT for op in group[1:])


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
    return Dispatch(name, kernel, inputs, outputs, list(ops))
