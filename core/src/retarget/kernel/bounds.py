"""Bounds checked at build time: a proof that every load and store of a kernel stays inside its buffer.

`check_kernel(kernel)` runs an interval analysis over the kernel IR and raises `KernelBoundsError`,
naming the kernel, the access and the range of indices it found, for any `Load`, `Store`,
`FragmentLoad` or `FragmentStore` it cannot prove inside its parameter, private array or workgroup
array. `lower_dispatch` runs it on every kernel it makes, so every target that lowers through the core
(llvm-cpu, cuda, rocm, vulkan-spirv, webgpu-spirv, metal-spirv, and third-party ones such as the OpenCL
example) has every dispatch checked. A plugin that builds or rewrites kernel IR itself calls it too.

What the analysis knows (intervals of Python integers, so nothing overflows inside the proof):
- a workgroup id ranges over [0, count), a thread id over [0, size), a loop variable over
  [start, start + extent), and a free variable over the range given in `symbols`
  (`check_kernel(kernel, symbols={"dim_n": (1, 4096)})`). Intervals do not relate a buffer's size to
  the symbol it grows with, so `lower_dispatch` proves a kernel with sizes known at run time at a few
  concrete sizes of its symbols (each given as (v, v)) rather than over their whole ranges;
- a scalar `Assign`ed once stands for its expression, re-evaluated where it is read, so a guard on a
  variable it reads narrows it too; one assigned more than once takes the range of its latest value,
  joined over the branches and loop iterations that may have set it (loop-carried ones widen to
  unbounded after a few rounds);
- `If` conditions (`and` of comparisons over sums and constant multiples of variables) narrow what
  they compare inside the body, both the variables and the compared expression itself, so a
  `wg * chunk + t < count` guard bounds an index that contains `wg * chunk + t`; a body that cannot be
  reached is skipped;
- `min`, `max` (clamps), division and remainder by constants, casts; an integer loaded from a buffer
  ranges over its type;
- a small unrolled loop whose body cannot be proved with its variable as an interval is proved one
  iteration at a time (`ENUMERATE_LIMIT`), which recovers the correlations of a thread's unrolled
  elements.

It also proves that 32-bit index arithmetic cannot overflow: where a kernel's buffers all hold fewer than
2^31 elements, the C-like GPU dialects compute its index arithmetic in i32 (`index32.narrow_indices`), as
Vulkan and WebGPU always do, so every expression `index32` narrows must range inside i32 too, or the
kernel is refused the same way.

What it does not take as a guard, on purpose: the condition of a `Select`. SPIR-V's OpSelect, WGSL's
select() and LLVM's select evaluate both operands, so a load in either must be in bounds whatever the
condition says; the lowering clamps such loads (padding, concatenation, gathers, ragged tiles).
"""

from __future__ import annotations

import math

from ..errors import KernelBoundsError
from . import index32
from .ir import (
    INDEX,
    Assign,
    Binary,
    Cast,
    Compare,
    Const,
    Expr,
    Fragment,
    FragmentLoad,
    FragmentStore,
    If,
    Kernel,
    Load,
    Local,
    Loop,
    Select,
    Store,
    Unary,
    Var,
    VectorCopy,
    format_expr,
    walk_stmts,
)

INF = math.inf
TOP = (-INF, INF)
ENUMERATE_LIMIT = 64  # iterations of one unrolled loop that may be proved one at a time
ENUMERATE_BUDGET = 200_000  # statements walked while enumerating, per kernel: a bound on the check's cost
LOOP_ROUNDS = 3  # rounds of a loop body before its loop-carried variables widen to unbounded
MAX_REPORTED = 3  # accesses named in one error


def check_kernel(kernel: Kernel, symbols: dict[str, tuple[int, int]] | None = None) -> int:
    """Prove every access of `kernel` inside its buffer; returns how many accesses were proved.
    Raises KernelBoundsError naming the kernel, the first accesses it cannot prove, and their ranges."""
    checker = _Checker(kernel, symbols or {})
    checker.run()
    for text, (lo, hi) in list(checker.overflows.items())[:MAX_REPORTED]:
        checker.failures.append(f"32-bit index arithmetic {_short(text)} may reach {_bound(lo)} to {_bound(hi)}, "
                                "outside i32")
    if checker.failures:
        found = list(dict.fromkeys(checker.failures))
        more = f" (and {len(found) - MAX_REPORTED} more)" if len(found) > MAX_REPORTED else ""
        raise KernelBoundsError(
            f"kernel {kernel.name}: cannot prove its accesses in bounds: " + "; ".join(found[:MAX_REPORTED]) + more,
            hint="a retarget bug in the kernel's lowering: report it with the kernel "
                 "(`retarget compile --dump-after-all DIR` writes the dispatches)")
    return checker.proved


# -- intervals ----------------------------------------------------------------------------------------


def _mul(a, b):
    return 0 if a == 0 or b == 0 else a * b


def _join(a, b):
    return (min(a[0], b[0]), max(a[1], b[1]))


def _meet(a, b):
    return (max(a[0], b[0]), min(a[1], b[1]))


def _empty(r) -> bool:
    return r[0] > r[1]


def _trunc_div(a, b):
    """C's truncating division of interval ends (either may be infinite; b is not 0)."""
    if math.isinf(a) or math.isinf(b):
        return 0 if math.isinf(b) and not math.isinf(a) else a * (1 if b > 0 else -1) if math.isinf(a) else 0
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def _type_range(dt) -> tuple:
    if dt.kind == "bool":
        return (0, 1)
    if dt.kind == "int":
        return (-(1 << (dt.bits - 1)), (1 << (dt.bits - 1)) - 1)
    if dt.kind == "uint":
        return (0, (1 << dt.bits) - 1)
    return TOP


def _binary(op: str, a, b):
    if op == "add":
        return (a[0] + b[0], a[1] + b[1])
    if op == "sub":
        return (a[0] - b[1], a[1] - b[0])
    if op == "mul":
        corners = [_mul(x, y) for x in a for y in b]
        return (min(corners), max(corners))
    if op == "min":
        return (min(a[0], b[0]), min(a[1], b[1]))
    if op == "max":
        return (max(a[0], b[0]), max(a[1], b[1]))
    if op == "div":
        if b[0] > 0 or b[1] < 0:  # the divisor's sign is known and it is never 0
            corners = [_trunc_div(x, y) for x in a for y in b]
            return (min(corners), max(corners))
        return TOP
    if op == "rem":
        if b[0] > 0 or b[1] < 0:
            m = max(abs(b[0]), abs(b[1])) - 1
            c = b[0]
            if c == b[1] and a[0] >= 0 and not math.isinf(a[1]) and a[0] // abs(c) == a[1] // abs(c):
                return (a[0] % abs(c), a[1] % abs(c))  # within one period: exact
            if a[0] >= 0:
                return (0, min(a[1], m))
            if a[1] <= 0:
                return (max(a[0], -m), 0)
            return (-m, m)
        return TOP
    if op == "and" and a[0] >= 0 and b[0] >= 0:  # bitwise and of non-negatives (and of booleans)
        return (0, min(a[1], b[1]))
    if op in ("and", "or", "xor") and a[0] >= 0 and b[0] >= 0 and a[1] <= 1 and b[1] <= 1:
        return (0, 1)
    return TOP


# -- the checker ----------------------------------------------------------------------------------------


class _Checker:
    def __init__(self, kernel: Kernel, symbols: dict):
        self.kernel = kernel
        self.failures: list[str] = []
        self.proved = 0
        self.budget = ENUMERATE_BUDGET
        self.enumerating = 0
        self.sizes = {p.name: p.size for p in kernel.params}
        self.fragments: dict[str, Fragment] = {}
        self.ranges: dict[str, tuple] = {name: (int(lo), int(hi)) for name, (lo, hi) in symbols.items()}
        self.defs: dict[str, tuple[Expr, set]] = {}  # scalars assigned once: name -> (expression, what it reads)
        self.facts: dict[Expr, tuple] = {}  # expressions narrowed by guards
        self.narrowed = None  # until it is known: the grid's extents below are computed in i64
        for var, count in zip(kernel.workgroup_vars, kernel.workgroup_count):
            self.ranges[var] = (0, self._extent(count)[1] - 1)
        for var, size in zip(kernel.thread_vars, kernel.workgroup_size):
            self.ranges[var] = (0, self._extent(size)[1] - 1)
        assigned: dict[str, int] = {}
        for s in walk_stmts(kernel.body):
            if isinstance(s, Assign):
                assigned[s.var] = assigned.get(s.var, 0) + 1
        self.mutable = {name for name, count in assigned.items() if count > 1}
        # What index32 computes in 32 bits, when the kernel lets it (None: indices stay 64-bit).
        self.narrowed = index32._index_variables(kernel) if index32.fits(kernel) else None
        self._is_narrowed: dict[int, tuple[Expr, bool]] = {}
        self.overflows: dict[str, tuple] = {}

    def run(self) -> None:
        self.stmts(self.kernel.body)

    # -- ranges of expressions ----------------------------------------------------------------------
    def _extent(self, e) -> tuple:
        return self.range(e) if isinstance(e, Expr) else (int(e), int(e))

    def range(self, e: Expr) -> tuple:
        r = self._range(e)
        fact = self.facts.get(e) if self.facts and not isinstance(e, (Const, Var)) else None
        r = r if fact is None else _meet(r, fact)
        if self.narrowed is not None and (r[0] < -index32.LIMIT - 1 or r[1] > index32.LIMIT) and self.narrow32(e):
            self.overflows.setdefault(format_expr(e), r)
        return r

    def narrow32(self, e: Expr) -> bool:
        """Whether index32 computes `e` in 32 bits."""
        known = self._is_narrowed.get(id(e))
        if known is None or known[0] is not e:
            known = self._is_narrowed[id(e)] = (e, e.dtype == INDEX and index32._is_index(e, self.narrowed))
        return known[1]

    def _range(self, e: Expr) -> tuple:
        dt = e.dtype
        if dt.is_float:
            return TOP
        if isinstance(e, Const):
            return (int(e.value), int(e.value))
        if isinstance(e, Var):
            r = self.ranges.get(e.name, TOP)
            d = self.defs.get(e.name)
            return r if d is None else _meet(r, self.range(d[0]))
        if isinstance(e, Load):
            return _type_range(dt)
        if isinstance(e, Compare):
            return (0, 1)
        if isinstance(e, Cast):
            inner = self.range(e.a) if not e.a.dtype.is_float else TOP
            bounds = _type_range(dt)
            return inner if inner[0] >= bounds[0] and inner[1] <= bounds[1] else bounds
        if isinstance(e, Select):  # the value picked is `a` where the condition holds, else `b`
            return _join(self.range_if(e.cond, e.a), self.range_if(_negate(e.cond), e.b))
        if isinstance(e, Unary):
            a = self.range(e.a)
            if e.op == "neg":
                return (-a[1], -a[0])
            if e.op == "abs":
                return (0 if a[0] <= 0 <= a[1] else min(abs(a[0]), abs(a[1])), max(abs(a[0]), abs(a[1])))
            if e.op == "not" and dt.kind == "bool":
                return (0, 1)
            return _type_range(dt)
        if isinstance(e, Binary):
            r = _binary(e.op, self.range(e.a), self.range(e.b))
            return r if r != TOP else _type_range(dt)
        return _type_range(dt)

    def range_if(self, cond: Expr | None, e: Expr) -> tuple:
        """The range of `e` where `cond` holds (None: no condition known)."""
        if cond is None:
            return self.range(e)
        state = self._state()
        self.assume(cond)
        r = self.range(e) if self.reachable() else (INF, -INF)
        self.ranges, self.defs, self.facts = state
        return r

    # -- guards ---------------------------------------------------------------------------------------
    def narrow(self, e: Expr, to: tuple) -> None:
        """Record that `e` lies in `to` (inside the current guard), and push that into what `e` reads."""
        if e.dtype.is_float or isinstance(e, Const):
            return
        current = self.range(e)
        new = _meet(current, to)
        if new == current:
            return
        if isinstance(e, Var):
            self.ranges[e.name] = _meet(self.ranges.get(e.name, TOP), new)
            if e.name in self.defs:
                self.narrow(self.defs[e.name][0], new)
            return
        self.facts[e] = _meet(self.facts.get(e, TOP), new)
        if isinstance(e, Binary):
            a, b = self.range(e.a), self.range(e.b)
            if e.op == "add":
                self.narrow(e.a, (new[0] - b[1], new[1] - b[0]))
                self.narrow(e.b, (new[0] - a[1], new[1] - a[0]))
            elif e.op == "sub":
                self.narrow(e.a, (new[0] + b[0], new[1] + b[1]))
                self.narrow(e.b, (a[0] - new[1], a[1] - new[0]))
            elif e.op == "mul" and isinstance(e.b, Const) and e.b.value > 0:
                c = int(e.b.value)
                self.narrow(e.a, (-((-new[0]) // c) if not math.isinf(new[0]) else new[0],
                                  new[1] // c if not math.isinf(new[1]) else new[1]))
            elif e.op == "div" and isinstance(e.b, Const) and e.b.value > 0 and a[0] >= 0:
                c = int(e.b.value)
                self.narrow(e.a, (_mul(new[0], c), _mul(new[1], c) + c - 1))
        elif isinstance(e, Cast) and not e.a.dtype.is_float:
            self.narrow(e.a, new)

    def assume(self, cond: Expr) -> None:
        """Narrow what `cond` compares, as true inside an If."""
        if isinstance(cond, Var) and cond.name in self.defs:
            return self.assume(self.defs[cond.name][0])
        if isinstance(cond, Binary) and cond.op == "and":
            self.assume(cond.a)
            self.assume(cond.b)
            return
        if not isinstance(cond, Compare) or cond.a.dtype.is_float:
            return
        a, b = self.range(cond.a), self.range(cond.b)
        op = cond.op
        if op == "lt":
            self.narrow(cond.a, (-INF, b[1] - 1))
            self.narrow(cond.b, (a[0] + 1, INF))
        elif op == "le":
            self.narrow(cond.a, (-INF, b[1]))
            self.narrow(cond.b, (a[0], INF))
        elif op == "gt":
            self.narrow(cond.a, (b[0] + 1, INF))
            self.narrow(cond.b, (-INF, a[1] - 1))
        elif op == "ge":
            self.narrow(cond.a, (b[0], INF))
            self.narrow(cond.b, (-INF, a[1]))
        elif op == "eq":
            self.narrow(cond.a, b)
            self.narrow(cond.b, a)

    def reachable(self) -> bool:
        return not any(_empty(r) for r in self.ranges.values()) and not any(_empty(r) for r in self.facts.values())

    # -- accesses ------------------------------------------------------------------------------------
    def access(self, what: str, buffer: str, index: Expr, last_offset: int = 0) -> None:
        """Check elements index .. index + last_offset of `buffer`."""
        size = self.sizes.get(buffer)
        if size is not None:
            lo, hi = self.range(index)
            lo_size, _ = self._extent(size)
            if lo >= 0 and hi + last_offset <= lo_size - 1:
                self.proved += 1
                return
        text = f"{what} %{buffer}[{_short(format_expr(index))}]"
        if size is None:
            self.failures.append(f"{text}: %{buffer} is not a parameter or an array of the kernel")
            return
        span = f"elements {_bound(lo)} to {_bound(hi + last_offset)}"
        self.failures.append(f"{text} may touch {span} of a buffer of {lo_size:,}")

    def loads(self, e) -> None:
        if not isinstance(e, Expr) or isinstance(e, (Const, Var)):
            return
        if isinstance(e, Load):
            self.loads(e.index)
            self.access("load", e.buffer, e.index)
            return
        for child in vars(e).values():
            if isinstance(child, Expr):
                self.loads(child)

    # -- statements ----------------------------------------------------------------------------------
    def stmts(self, body: list) -> None:
        if self.enumerating:
            self.budget -= len(body)
        for s in body:
            self.stmt(s)

    def stmt(self, s) -> None:
        if isinstance(s, Assign):
            self.loads(s.value)
            self.assign(s.var, s.value)
        elif isinstance(s, Store):
            self.loads(s.index)
            self.loads(s.value)
            self.access("store", s.buffer, s.index)
        elif isinstance(s, Local):
            self.sizes[s.name] = s.size
        elif isinstance(s, If):
            self.loads(s.cond)
            self.guarded(s)
        elif isinstance(s, Loop):
            self.loop(s)
        elif isinstance(s, Fragment):
            self.fragments[s.name] = s
        elif isinstance(s, (FragmentLoad, FragmentStore)):
            self.loads(s.index)
            f = self.fragments.get(s.name)
            if f is None:
                self.failures.append(f"fragment %{s.name} is used before it is declared")
                return
            what = "fragment load of" if isinstance(s, FragmentLoad) else "fragment store to"
            self.access(f"{what} a {f.rows}x{f.cols} block (stride {s.stride}) at", s.buffer, s.index,
                        (f.rows - 1) * s.stride + f.cols - 1)
        elif isinstance(s, VectorCopy):
            self.loads(s.src_index)
            self.loads(s.dst_index)
            self.access(f"vector load of {s.lanes} elements at", s.src, s.src_index, s.lanes - 1)
            self.access(f"vector store of {s.lanes} elements at", s.dst, s.dst_index, s.lanes - 1)

    def forget(self, var: str) -> None:
        """`var` is about to change: drop what guards said about expressions of its old value, and pin the
        variables defined from it to their ranges now."""
        for e in [e for e in self.facts if _reads(e, var)]:
            del self.facts[e]
        for name in [n for n, (_, reads) in self.defs.items() if var in reads]:
            self.ranges[name] = self.range(Var(name))
            del self.defs[name]

    def assign(self, var: str, value: Expr) -> None:
        if value.dtype.is_float:
            return
        self.forget(var)
        reads = _names(value)
        if var in self.mutable or not self.mutable.isdisjoint(reads):
            self.ranges[var] = self.range(value)  # now: a variable it reads may change later
            self.defs.pop(var, None)
        else:
            self.ranges.pop(var, None)
            self.defs[var] = (value, reads)

    def _state(self):
        return dict(self.ranges), dict(self.defs), dict(self.facts)

    def _restore(self, state, keep_mutable_from=None) -> None:
        """Back to `state`; mutable variables take the join of their value in `state` and now."""
        now = self.ranges
        self.ranges, self.defs, self.facts = dict(state[0]), dict(state[1]), dict(state[2])
        for var in self.mutable:
            if var in now or var in self.ranges:
                self.ranges[var] = _join(self.ranges.get(var, TOP), now.get(var, TOP))

    def guarded(self, s: If) -> None:
        state = self._state()
        self.assume(s.cond)
        if self.reachable():
            self.stmts(s.body)
        self._restore(state)

    def loop(self, s: Loop) -> None:
        lo = s.start
        hi = s.start + self._extent(s.extent)[1] - 1
        if hi < lo:
            return
        carried = {a.var for a in walk_stmts(s.body) if isinstance(a, Assign) and a.var in self.mutable}
        mark, overflows = len(self.failures), dict(self.overflows)
        self.iterate(s, (lo, hi), carried)
        if (len(self.failures) > mark or len(self.overflows) > len(overflows)) and hi - lo < ENUMERATE_LIMIT \
                and self.budget > 0:
            coarse = self.failures[mark:]  # what to report if one iteration at a time fails too: the whole range
            del self.failures[mark:]
            self.overflows = overflows
            self.enumerating += 1
            for i in range(lo, hi + 1):
                if self.budget <= 0:
                    self.failures.append(f"loop %{s.var}: proving it one iteration at a time takes more than "
                                         f"{ENUMERATE_BUDGET:,} statements")
                    break
                self.iterate(s, (i, i), carried)
                if len(self.failures) > mark:
                    self.failures[mark:] = coarse
                    break
            self.enumerating -= 1

    def iterate(self, s: Loop, var_range: tuple, carried: set) -> None:
        """The loop body with its variable in `var_range`, repeated until its carried variables settle."""
        self.forget(s.var)  # the loop's variable may reuse a name that guards and definitions outside it read
        before = self._state()
        entry = {v: before[0].get(v, TOP) for v in carried}
        for rounds in range(LOOP_ROUNDS + 1):
            mark = len(self.failures)
            self.ranges.update(entry)
            self.ranges[s.var] = var_range
            self.defs.pop(s.var, None)
            self.stmts(s.body)
            settled = {v: _join(entry[v], self.ranges.get(v, TOP)) for v in carried}
            if settled == entry:
                break
            entry = settled if rounds < LOOP_ROUNDS - 1 else {v: TOP for v in carried}
            del self.failures[mark:]
            self._restore(before)
        self._restore(before)


NEGATED = {"lt": "ge", "ge": "lt", "le": "gt", "gt": "le", "eq": "ne", "ne": "eq"}


def _negate(cond: Expr) -> Expr | None:
    """The comparison that holds where `cond` does not, or None when that is no comparison."""
    if isinstance(cond, Compare) and not cond.a.dtype.is_float:  # a float compare is false on NaN either way
        return Compare(NEGATED[cond.op], cond.a, cond.b)
    return None


def _reads(e: Expr, var: str) -> bool:
    if isinstance(e, Var):
        return e.name == var
    return any(_reads(c, var) for c in vars(e).values() if isinstance(c, Expr)) if not isinstance(e, Const) else False


def _names(e: Expr) -> set[str]:
    if isinstance(e, Var):
        return {e.name}
    if isinstance(e, Const):
        return set()
    return set().union(*(_names(c) for c in vars(e).values() if isinstance(c, Expr)))


def _bound(x) -> str:
    return ("-inf" if x < 0 else "+inf") if math.isinf(x) else f"{int(x):,}"


def _short(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."
