"""Functions whose sizes depend on the data, split into stages at their host ops.

A host op (`ir/ops.py`'s HOST_OPS: NonZero, Unique, NonMaxSuppression) has a result whose size, its `count`, is
known only once it has run. `split_stages` cuts each function that has one into stages: stage 0 holds the ops that
need no host op's result, and stage k the ops that need a result of a host op of level k, whose own operands come
from stage k - 1 or before. Each stage is a function of its own, compiled as any other: static, or dynamic in the
sizes its inputs carry, the counts among them (range 1.., so that arenas are sized per call, not at the largest
count). The runtime (`runtime_staged.py`) runs the stages in order and, between them, the host ops on the host
(`ir/host_eval.py`); values that a later stage reads pass through the host.

A count may be 0 (no nonzero element, no box kept), and kernels take sizes of at least 1. So each stage that reads
counts is also compiled with them 0, for every subset of up to MAX_ZERO_COUNTS of them: there the empty tensors
fold to constants (`simplify.fold_constants`), as a static empty tensor does anywhere. The runtime picks the
variant of the counts it has; a stage reading more counts than that refuses a zero among them at run time.

Ops without operands (constants, iotas) belong to no stage: each stage that reads one has its own copy, unless its
shape holds a count (a broadcast to [count]): an op of any kind goes no earlier than the counts its result's shape
holds.

The manifest's `staged` entry of a function lists its steps: `{"op": "run", "function", "inputs", "sizes", "outputs",
"counts", "variants"}` and `{"op": "host", "name", "attrs", "inputs", "output", "type"}`, over values numbered from the
function's arguments (0 to n - 1) on, and its `returns`.
"""

from __future__ import annotations

import copy
import itertools

from ..errors import UnsupportedOpError
from ..ir.core import Builder, Function, Module, Operation, TensorType, Value
from ..ir.dtypes import DTYPES
from ..ir.ops import HOST_OPS
from ..ir.symbolic import Sym, SymbolRange, dims_to_json, sym, symbols_of

MAX_ZERO_COUNTS = 3
SEPARATOR = "__"  # stage functions are named FUNCTION__stageK (and FUNCTION__stageK__zero_COUNT...)


def has_host_ops(fn: Function) -> bool:
    return any(op.name in HOST_OPS for op in fn.ops)


def counts_of(fn: Function) -> list[str]:
    """The symbols that a host op of `fn` defines (a count fixed by the model's shapes defines none)."""
    return list(dict.fromkeys(op.attrs["count"] for op in fn.ops
                              if op.name in HOST_OPS and isinstance(op.attrs["count"], str)))


def split_stages(module: Module, cleanup) -> tuple[Module, dict[str, dict]]:
    """`module` with each function that has host ops replaced by its stages, and each such function's `staged`
    manifest entry. `cleanup(module)` runs the graph passes on the zero-count variants."""
    functions, staged = {}, {}
    for name, fn in module.functions.items():
        if not has_host_ops(fn):
            functions[name] = fn
            continue
        stages, staged[name] = _split(fn)
        clash = sorted(set(stages) & set(module.functions))
        if clash:
            raise UnsupportedOpError(f"function '{clash[0]}' has the name of a stage of function '{name}'",
                                     hint="rename it")
        functions.update(stages)
    variants = [v["function"] for chain in staged.values() for step in chain["steps"] if step["op"] == "run"
                for v in step["variants"]]
    if variants:
        cleanup(Module({n: functions[n] for n in variants}))
    return Module(functions), staged


def _split(fn: Function) -> tuple[dict[str, Function], dict]:
    counts = counts_of(fn)
    ids: dict[Value, int] = {}

    def vid(v: Value) -> int:
        return ids.setdefault(v, len(ids))

    for a in fn.args:
        vid(a)
    level: dict[Value, int] = {a: 0 for a in fn.args}
    floating: dict[Value, Operation] = {}  # results of ops without operands: copied where read
    stage_ops: dict[int, list[Operation]] = {}
    host_at: dict[int, list[Operation]] = {}  # host ops whose results stage k is the first to have
    count_level: dict[str, int] = {}  # the level from which each count is known
    for op in fn.ops:
        # a size a host op gives raises an op to that host op's level, operands or not (a broadcast to [count])
        sized = max((count_level.get(s, 0) for r in op.results for s in symbols_of(r.type.shape)), default=0)
        if not op.operands and not sized:
            floating[op.result] = op
            continue
        inputs = max((level[v] for v in op.operands if v not in floating), default=0)
        if op.name in HOST_OPS:  # runs after the stage of its inputs
            lv = max(sized, inputs + 1)
            host_at.setdefault(lv, []).append(op)
            if isinstance(op.attrs["count"], str):
                count_level[op.attrs["count"]] = lv
        else:
            lv = max(sized, inputs)
            stage_ops.setdefault(lv, []).append(op)
        level[op.result] = lv
    last = max([*stage_ops, *host_at, 0])

    # what each stage must hand out: values read by a later stage, by a host op, or returned
    needed: dict[int, list[Value]] = {k: [] for k in range(last + 1)}
    extra: dict[int, list[Value]] = {k: [] for k in range(last + 1)}  # floating values a host op or return reads

    def need(v: Value, by_stage: int | None, at: int) -> None:
        """`v` is read at stage `at` (by a host op running before stage `at` when by_stage is None)."""
        if v in floating:
            if by_stage is None:
                home = max(at - 1, 0)
                if v not in extra[home]:
                    extra[home].append(v)
            return
        if v.owner is None or v.owner.name in HOST_OPS:
            return  # an argument or a host op's result: on the host already
        home = level[v]
        if (by_stage is None or home < by_stage) and v not in needed[home]:
            needed[home].append(v)

    for k, ops in stage_ops.items():
        for op in ops:
            for v in op.operands:
                need(v, k, k)
    for k, ops in host_at.items():
        for op in ops:
            for v in op.operands:
                need(v, None, k)
    for v in fn.returns:
        if v in floating:
            if v not in extra[last]:
                extra[last].append(v)
        else:
            need(v, None, last + 1)

    functions, steps = {}, []
    for k in range(last + 1):
        for op in host_at.get(k, []):
            steps.append({"op": "host", "name": op.name, "attrs": dict(op.attrs), "inputs": [vid(v) for v in
                          op.operands], "output": vid(op.result), "type": str(op.result.type),
                          "shape": dims_to_json(op.result.type.shape)})
        outputs = needed[k] + extra[k]
        if not outputs:
            continue
        stage, inputs, sizes = _stage_function(fn, f"{fn.name}{SEPARATOR}stage{k}", stage_ops.get(k, []), outputs,
                                               floating, counts, vid)
        functions[stage.name] = stage
        variants = []
        read = [c for c in counts if c in symbols_of(*[a.type.shape for a in stage.args])]
        if len(read) <= MAX_ZERO_COUNTS:
            for n in range(1, len(read) + 1):
                for zeros in itertools.combinations(read, n):
                    variant = _zero_variant(stage, zeros)
                    functions[variant.name] = variant
                    variants.append({"zero": list(zeros), "function": variant.name})
        steps.append({"op": "run", "function": stage.name, "inputs": [vid(v) for v in inputs], "sizes": sizes,
                      "outputs": [vid(v) for v in outputs], "counts": read, "variants": variants})
    chain = {"steps": steps, "returns": [vid(v) for v in fn.returns], "counts": counts}
    return functions, chain


def _stage_function(fn: Function, name: str, ops: list[Operation], outputs: list[Value], floating: dict,
                    counts: list[str], vid) -> tuple[Function, list[Value], list[str]]:
    """A function of `ops` (in order) returning `outputs`; what they read from elsewhere becomes its arguments.
    Returned with it: the original values it reads, in argument order, then the symbols that its last arguments
    carry as their sizes (`sizes`: arrays of i8 the runtime makes)."""
    stage = Function(name, [])
    mapping: dict[Value, Value] = {}
    inputs: list[Value] = []

    def value(v: Value) -> Value:
        if v in mapping:
            return mapping[v]
        if v in floating:
            src = floating[v]
            clone = Operation(src.name, [], [], dict(src.attrs), src.loc)
            clone.results = [Value(r.type, clone, r.index, r.name_hint) for r in src.results]
            stage.ops.append(clone)
            mapping[v] = clone.results[v.index]
        else:
            arg = Value(v.type, None, len(stage.args), v.name_hint)
            stage.args.append(arg)
            inputs.append(v)
            vid(v)
            mapping[v] = arg
        return mapping[v]

    for op in ops:
        operands = [value(v) for v in op.operands]
        clone = Operation(op.name, operands, [], dict(op.attrs), op.loc)
        clone.results = [Value(r.type, clone, r.index, r.name_hint) for r in op.results]
        for r, c in zip(op.results, clone.results):
            mapping[r] = c
        stage.ops.append(clone)
    stage.returns = [value(v) for v in outputs]
    stage.arg_names = [_arg_name(fn, v, vid) for v in inputs]
    used = symbols_of(*[v.type.shape for v in stage.args + stage.returns],
                      *[r.type.shape for op in stage.ops for r in op.results])
    for s in sorted(used):
        rng = fn.symbols.get(s, SymbolRange())
        stage.symbols[s] = SymbolRange(max(rng.lo, 1), None) if s in counts else rng
    given = {d.name for a in stage.args for d in a.type.shape if isinstance(d, Sym) and d.name}
    sizes = sorted(used - given)
    for s in sizes:  # a size no input carries by itself (x of [batch * 8]): a small input [s] that carries it
        stage.args.append(Value(TensorType((sym(s),), DTYPES["i8"]), None, len(stage.args)))
        stage.arg_names.append(f"size_{s}")
    return stage, inputs, sizes


def _arg_name(fn: Function, v: Value, vid) -> str:
    if v.owner is None and fn.arg_names:
        return fn.arg_names[v.index]
    return v.name_hint or f"value{vid(v)}"


def _zero_variant(stage: Function, zeros: tuple[str, ...]) -> Function:
    """`stage` with the counts `zeros` 0: its empty tensors fold away (the caller runs the graph passes)."""
    variant = copy.deepcopy(stage)
    variant.name = f"{stage.name}{SEPARATOR}zero_{'_'.join(zeros)}"
    b = Builder(variant)
    for c in zeros:
        variant.symbols[c] = SymbolRange(0, None)
        b.replace_symbol(c, 0)
    return variant
