"""Host programs of functions with symbolic dimensions, and the memory plan of each call.

A dynamic function's manifest entry lists its values as *buffers* whose sizes are dimensions of
its symbols (`"nbytes": "602112*batch"`), and its dispatches in order; slots are
`["buffer", id, nbytes]` (or `["const", offset, nbytes]`). `symbols` says each symbol's range and
where a call's inputs give its value (`"input": [argument, axis]`); `dims` lists the function's
derived dimensions (a convolution's `(h - 3) // 2 + 1`), each of which a call's sizes must keep at
least 1 (kernels divide by them). Nothing is placed at compile time but what the bounds fix:

- every symbol bounded (`retarget compile --dim batch=1..64`): the buffers are placed once, for
  their sizes at the bounds (sizes grow with the symbols), so every call uses one arena of
  `arena_bytes`, allocated when the module is loaded;
- otherwise each call's sizes place them (`Layout.plan`), in an arena taken from a pool by size
  class, so that nearby sizes reuse one.

Either way `Layout.plan(sizes)` turns the program into the static form `host_program.py` writes
(`["arena", offset, nbytes]` slots and barriers), which the runtime records as it records a static
function's, one command buffer per concrete shape (see `runtime_dynamic.py`).
"""

from __future__ import annotations

import functools

from ..errors import InputError, UnsupportedOpError
from ..ir.core import Function, Module, Value
from ..ir.symbolic import (
    Sym,
    SymbolRange,
    dims_from_json,
    dims_to_json,
    evaluate,
    evaluate_shape,
    parse_dim,
    parse_range,
    sym,
    symbols_of,
)
from .dispatch import Dispatch
from .host_program import ConstantPool, _alias_roots, first_fit, with_barriers

SIZE_CLASS_STEPS = 4  # arena sizes per doubling: a call reuses an arena up to 19% larger than it needs


def is_dynamic(fn: Function) -> bool:
    return bool(fn.symbols) or not all(a.type.is_static for a in fn.args + fn.returns)


# -- the user's bounds ----------------------------------------------------------------------------------


def apply_dims(module: Module, dims: dict | None, notes=None) -> Module:
    """Narrow the symbols' ranges to `dims` ({name: (lo, hi) | "lo..hi" | SymbolRange | n}); a single
    value (n, or "8") specializes the symbol: the function becomes static in it. An unknown name
    or an empty range is an InputError; a range reaching past the model's own is cut to it, and `notes`
    (a callable) hears which sizes will be refused."""
    if not dims:
        return module
    from .stages import counts_of

    counts = {name for fn in module.functions.values() for name in counts_of(fn)}
    known = {name for fn in module.functions.values() for name in fn.symbols} - counts
    cut = set()  # names noted as cut to the model's range
    for name, value in dims.items():
        if name in counts:
            raise InputError(f"--dim {name}: '{name}' is a size that depends on the data (a host op's count), "
                             "which a call cannot choose", hint=f"the model's dimensions: {', '.join(sorted(known))}"
                             if known else "the model has no other symbolic dimension")
        if name not in known:
            raise InputError(f"--dim {name}: the model has no symbolic dimension '{name}'",
                             hint=f"its symbolic dimensions: {', '.join(sorted(known)) or 'none (it is static)'}")
        rng = as_range(name, value)
        for fn in module.functions.values():
            if name not in fn.symbols:
                continue
            merged = fn.symbols[name].intersect(rng)
            if merged.empty:
                raise InputError(f"--dim {name}={rng} does not meet the model's range {fn.symbols[name]}",
                                 hint="give a range inside the model's")
            if merged != rng and notes and name not in cut:
                cut.add(name)
                notes(f"--dim {name}={rng} reaches past the model's range {fn.symbols[name]}: compiling for "
                      f"{name}={merged}; calls outside it are refused")
            if merged.lo == merged.hi:
                from ..ir.core import Builder

                Builder(fn).replace_symbol(name, merged.lo)
            else:
                fn.symbols[name] = merged
    return module


def as_range(name: str, value) -> SymbolRange:
    """A `dims` entry as a SymbolRange: (lo, hi), "lo..hi", "lo..", a number, or a SymbolRange."""
    try:
        if isinstance(value, SymbolRange):
            return value
        if isinstance(value, int):
            return SymbolRange(value, value)
        if isinstance(value, str):
            return parse_range(value)
        lo, hi = value
        return SymbolRange(1 if lo is None else int(lo), None if hi is None else int(hi))
    except (ValueError, TypeError) as e:
        raise InputError(f"dims['{name}'] = {value!r} is not a range ({e})",
                         hint="give (lo, hi), 'lo..hi', 'lo..' or a number") from None


# -- compile time: the manifest entry ----------------------------------------------------------------------


def plan_dynamic_function(fn: Function, dispatches: list[Dispatch], entry_index: dict[str, int],
                          pool: ConstantPool) -> dict:
    """The manifest entry of a function with symbolic dimensions (see the module docstring)."""
    root = _alias_roots(fn)
    ids: dict[Value, int] = {}
    buffers: list = []

    def slot(v: Value) -> list:
        r = root(v)
        if r.owner is not None and r.owner.name == "rt.constant":
            base = pool.add(r)
            return [base[0], base[1], v.type.nbytes]
        if r not in ids:
            ids[r] = len(buffers)
            buffers.append(_json(r.type.nbytes))
        return ["buffer", ids[r], _json(v.type.nbytes)]

    names = fn.arg_names or [None] * len(fn.args)
    plan = {
        "inputs": [{"name": n or f"arg{i}", "type": str(a.type), "shape": dims_to_json(a.type.shape), "slot": slot(a)}
                   for i, (n, a) in enumerate(zip(names, fn.args))],
        "symbols": _symbols(fn),
        "program": [{"op": "dispatch", "entry": entry_index[d.name], "name": d.name,
                     "bindings": [slot(v) for v in d.inputs + d.outputs]} for d in dispatches],
    }
    plan["outputs"] = [{"type": str(v.type), "shape": dims_to_json(v.type.shape), "slot": slot(v)} for v in fn.returns]
    plan["buffers"] = buffers
    derived = {d for v in [*fn.args, *(r for op in fn.ops for r in op.results)] for d in v.type.shape
               if isinstance(d, Sym) and d.name is None}
    plan["dims"] = sorted(str(d) for d in derived)
    layout = Layout(plan)
    if layout.bounds is not None:
        plan["arena_bytes"] = layout.arena_at(layout.bounds)
    return plan


def _json(d):
    return d if isinstance(d, int) else str(d)


def _symbols(fn: Function) -> dict:
    """Each symbol's range, and the first argument dimension that is exactly it (where calls give it)."""
    used = symbols_of(*[a.type.shape for a in fn.args + fn.returns])
    out = {}
    for name in sorted(used):
        where = next(([i, axis] for i, a in enumerate(fn.args) for axis, d in enumerate(a.type.shape)
                      if d == sym(name)), None)
        if where is None:
            raise UnsupportedOpError(
                f"@{fn.name}: the symbolic dimension '{name}' is no input's dimension by itself, so a call "
                "cannot give its value", hint="give the model an input whose size along some axis is exactly it")
        out[name] = {"range": str(fn.symbols.get(name, SymbolRange())), "input": where}
    return out


def format_dynamic_program(name: str, plan: dict) -> str:
    """A readable text form of a dynamic host program, for --dump-after-all."""

    def s(slot):
        if slot[0] == "buffer":
            return f"%buffer{slot[1]}[{slot[2]}]"
        return f"%{slot[0]}[{slot[1]}:{slot[1] + slot[2]}]"

    symbols = ", ".join(f"{k} = {v['range']} from input {v['input'][0]} dim {v['input'][1]}"
                        for k, v in plan["symbols"].items())
    arena = f"arena_bytes = {plan['arena_bytes']} at the bounds" if "arena_bytes" in plan else "planned per call"
    lines = [f"rt.host_program @{name} {{symbols = {{{symbols}}}, {arena}}} {{"]
    for i, nbytes in enumerate(plan["buffers"]):
        lines.append(f"  %buffer{i} = alloc {nbytes} bytes")
    for i, inp in enumerate(plan["inputs"]):
        lines.append(f'  {s(inp["slot"])} = input {i} "{inp["name"]}" : {inp["type"]} {inp["shape"]}')
    for cmd in plan["program"]:
        lines.append(f"  dispatch @{cmd['name']}({', '.join(s(b) for b in cmd['bindings'])})")
    lines.append(f"  return {', '.join(s(o['slot']) + ' : ' + o['type'] for o in plan['outputs'])}")
    lines.append("}")
    return "\n".join(lines)


# -- run time: the plan of one call ----------------------------------------------------------------------------


class Layout:
    """A dynamic host program, parsed once: binds a call's symbols and plans its memory."""

    def __init__(self, plan: dict):
        self.plan = plan
        self.symbols = {name: parse_range(info["range"]) for name, info in plan["symbols"].items()}
        self.sources = {name: tuple(info["input"]) for name, info in plan["symbols"].items()}
        self.input_shapes = [dims_from_json(i["shape"]) for i in plan["inputs"]]
        self.output_shapes = [dims_from_json(o["shape"]) for o in plan["outputs"]]
        self.buffers = [_dim(b) for b in plan["buffers"]]
        self.derived = [_dim(d) for d in plan.get("dims", ())]
        self.bounds = None  # each symbol's upper bound, when all have one: the sizes the arena is planned for
        if all(r.hi is not None for r in self.symbols.values()):
            self.bounds = {name: r.hi for name, r in self.symbols.items()}
        # lifetimes: [first command, last command] of each buffer (inputs from 0, outputs to the end)
        end = len(plan["program"]) + 1
        self.lifetimes = [[None, None] for _ in self.buffers]
        for i, cmd in enumerate(plan["program"], start=1):
            for slot in cmd["bindings"]:
                if slot[0] == "buffer":
                    life = self.lifetimes[slot[1]]
                    life[0] = i if life[0] is None else life[0]
                    life[1] = i
        for inp in plan["inputs"]:
            if inp["slot"][0] == "buffer":
                self.lifetimes[inp["slot"][1]][0] = 0
        for out in plan["outputs"]:
            if out["slot"][0] == "buffer":
                life = self.lifetimes[out["slot"][1]]
                life[0] = end if life[0] is None else life[0]
                life[1] = end
        self.lifetimes = [(a or 0, b if b is not None else a or 0) for a, b in self.lifetimes]

    def bind(self, shapes: list[tuple[int, ...]], names: list[str], function: str) -> dict[str, int]:
        """The symbols' values for a call with arguments of these `shapes`; an InputError names the
        argument whose size is outside its symbol's range, or that disagrees with another's."""
        sizes: dict[str, int] = {}
        given: dict[str, tuple[int, int]] = {}
        for i, (want, have) in enumerate(zip(self.input_shapes, shapes)):
            where = f"input {i} ('{names[i]}') of {function}"
            if len(want) != len(have):
                raise InputError(f"{where} must have rank {len(want)}, got shape {list(have)}",
                                 hint=f"the function expects {_shape_text(want)}")
            for axis, (d, n) in enumerate(zip(want, have)):
                if not isinstance(d, Sym) or d.name is None:
                    continue
                rng = self.symbols[d.name]
                if n not in rng:
                    raise InputError(f"{where} has size {n} along axis {axis} ('{d.name}'), outside its range {rng}",
                                     hint=f"give '{d.name}' a size in {rng}; recompile with --dim {d.name}=LO..HI "
                                          "for another range")
                if d.name in sizes and sizes[d.name] != n:
                    j, other = given[d.name]
                    raise InputError(f"{where} has size {n} along axis {axis}, but input {j} ('{names[j]}') has "
                                     f"{sizes[d.name]} along axis {other}, and both are '{d.name}'",
                                     hint=f"inputs that share '{d.name}' must agree on it")
                sizes[d.name] = n
                given[d.name] = (i, axis)
        for i, (want, have) in enumerate(zip(self.input_shapes, shapes)):  # static sizes and derived ones
            expected = tuple(evaluate(d, sizes) for d in want)
            if tuple(have) != expected:
                raise InputError(f"input {i} ('{names[i]}') of {function} must have shape {list(expected)} "
                                 f"({_shape_text(want)}), got {list(have)}",
                                 hint=f"the function expects {_shape_text(want)}")
        for d in self.derived:
            if evaluate(d, sizes) < 1:
                given = ", ".join(f"{k}={v}" for k, v in sizes.items())
                raise InputError(f"at {given}, a tensor inside {function} would have a dimension {d} = "
                                 f"{evaluate(d, sizes)}: the inputs are too small for the model",
                                 hint="e.g. an image smaller than a convolution's window; give larger inputs")
        return sizes

    def arena_at(self, sizes: dict[str, int]) -> int:
        return first_fit(self._blocks(sizes))[1]

    def _blocks(self, sizes):
        return [(a, b, evaluate(n, sizes)) for (a, b), n in zip(self.lifetimes, self.buffers)]

    def plan_for(self, sizes: dict[str, int]) -> dict:
        """The static host program (`host_program.plan_function`'s form) of a call at `sizes`: its
        buffers placed for the bounds (when every symbol has one) or for `sizes`."""
        offsets, arena = first_fit(self._blocks(self.bounds if self.bounds is not None else sizes))

        def slot(s):
            if s[0] != "buffer":
                return s
            return ["arena", offsets[s[1]], evaluate(_dim(s[2]), sizes)]

        program = with_barriers([({"op": "dispatch", "entry": c["entry"], "name": c["name"]},
                                   [slot(b) for b in c["bindings"][:-1]], [slot(c["bindings"][-1])])
                                  for c in self.plan["program"]])
        return {
            "inputs": [{**i, "type": _concrete(i["type"], shape, sizes), "slot": slot(i["slot"])}
                       for i, shape in zip(self.plan["inputs"], self.input_shapes)],
            "outputs": [{**o, "type": _concrete(o["type"], shape, sizes), "slot": slot(o["slot"])}
                        for o, shape in zip(self.plan["outputs"], self.output_shapes)],
            "arena_bytes": arena,
            "program": program,
        }


def size_class(nbytes: int) -> int:
    """`nbytes` rounded up to the next of `SIZE_CLASS_STEPS` sizes per doubling (64-byte multiples)."""
    if nbytes <= 4096:
        return max(64, -(-nbytes // 64) * 64)
    top = nbytes.bit_length() - 1  # 2**top <= nbytes < 2**(top + 1)
    for step in range(1, SIZE_CLASS_STEPS + 1):
        size = (1 << top) + step * (1 << top) // SIZE_CLASS_STEPS
        if size >= nbytes:
            return -(-size // 64) * 64
    return 1 << (top + 1)


def _dim(value):
    return value if isinstance(value, int) else _parsed_dim(value)


@functools.lru_cache(maxsize=4096)  # each call at a new shape plans again: parse each text once
def _parsed_dim(text: str):
    return parse_dim(text)


@functools.lru_cache(maxsize=1024)
def _dtype(type_text: str):
    from ..mlir.syntax import parse_type

    return parse_type(type_text).dtype


def _concrete(type_text: str, shape, sizes) -> str:
    from ..ir.core import TensorType

    return str(TensorType(evaluate_shape(shape, sizes), _dtype(type_text)))


def _shape_text(shape) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


__all__ = ["apply_dims", "plan_dynamic_function", "format_dynamic_program", "Layout", "size_class", "is_dynamic"]
