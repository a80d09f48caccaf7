"""Portable lowerings: kernel IR features that a language (or a device) lacks, rewritten as plain
kernel IR that every backend runs. The renderer applies them where its dialect needs them; a backend
with its own emitter (SPIR-V, LLVM) may call them too.

`expand_fragments`: the fragment intrinsics (`ir.Fragment`, `FragmentLoad`, `FragmentMma`,
`FragmentStore`) as per-thread register arrays and multiply-add loops over the same tiles. The
`width` threads of a subgroup share each fragment as a grid of lanes (`lane_grid`): lane (r, c)
holds rows r, r + lane_rows, ... and columns c, c + lane_cols, ... of the m x n accumulator, the
rows of A and the columns of B those need, and does its own m*n*k / width multiply-adds. Loads read
the buffer directly (shared memory, after the schedule's barrier), so no lane talks to another, and
the answer is exactly the plain loop's: accumulation in the accumulator's type, k in order.

`expand_vector_copies`: each `VectorCopy` as an unrolled loop of element copies, for a language that
does not spell wide moves.

`serialize_threads`: a workgroup whose threads meet at barriers, for a language without threads
(C99, where a workgroup is one call that loops over its threads). The body is cut at its barriers
into phases; each phase is one loop over all the threads (pocl's work-item loops), so every thread
finishes a phase before any starts the next, which is what a barrier promises. What a thread keeps
across a barrier (the scalars and private arrays declared directly in a list that holds a barrier)
becomes an array indexed by thread; workgroup arrays become plain arrays of the call. Barriers must
be in uniform control flow, as on every GPU: the condition of an `If` around one is evaluated once,
for thread 0.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from ..errors import UnsupportedOpError
from .ir import (
    Assign,
    Barrier,
    Cast,
    Compare,
    Const,
    Expr,
    Fragment,
    FragmentLoad,
    FragmentMma,
    FragmentStore,
    If,
    Kernel,
    Load,
    Local,
    Loop,
    Store,
    Var,
    VectorCopy,
    binary,
    const,
    has_fragments,
    minimum,
    walk_stmts,
)

# -- vector copies --------------------------------------------------------------------------------


def vector_copy_elements(s: VectorCopy, dtype) -> Loop:
    """`VectorCopy` `s` (of elements of `dtype`) as an unrolled loop of element copies."""
    lane = Var("vlane")
    return Loop("vlane", s.lanes, [Store(s.dst, s.dst_index + lane, Load(s.src, s.src_index + lane, dtype))], "unroll")


def expand_vector_copies(kernel: Kernel) -> Kernel:
    """`kernel` with every `VectorCopy` an unrolled loop of element copies."""
    if not any(isinstance(s, VectorCopy) for s in walk_stmts(kernel.body)):
        return kernel
    types = {p.name: p.dtype for p in kernel.params}
    types.update({s.name: s.dtype for s in walk_stmts(kernel.body) if isinstance(s, Local)})

    def stmts(body: list) -> list:
        out = []
        for s in body:
            if isinstance(s, VectorCopy):
                out.append(vector_copy_elements(s, types[s.src]))
            elif isinstance(s, (Loop, If)):
                out.append(replace(s, body=stmts(s.body)))
            else:
                out.append(s)
        return out

    return replace(kernel, body=stmts(kernel.body))


# -- fragments ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LaneGrid:
    """How the portable expansion spreads an m x n accumulator over a subgroup: lanes form a
    `lane_rows` x `lane_cols` grid (lane l is at (l // lane_cols, l % lane_cols)), and each holds
    `rows` x `cols` elements, strided by the grid."""

    lane_rows: int
    lane_cols: int
    rows: int
    cols: int
    exact: bool  # every lane busy and every element in range: no guards needed


def lane_grid(m: int, n: int, width: int) -> LaneGrid:
    """The grid with the fewest multiply-adds per lane, then the fewest registers, then the widest rows
    (consecutive lanes on consecutive columns)."""
    best = None
    for lane_rows in range(1, min(m, width) + 1):
        lane_cols = min(n, width // lane_rows)
        rows, cols = -(-m // lane_rows), -(-n // lane_cols)
        key = (rows * cols, rows + cols, -lane_cols)
        if best is None or key < best[0]:
            exact = m % lane_rows == 0 and n % lane_cols == 0 and lane_rows * lane_cols == width
            best = (key, LaneGrid(lane_rows, lane_cols, rows, cols, exact))
    return best[1]


def linear_thread(kernel: Kernel) -> Expr:
    """The thread's index in its workgroup, x fastest."""
    index: Expr = const(0)
    for var, size in reversed(list(zip(kernel.thread_vars, kernel.workgroup_size))):
        index = index * size + Var(var)
    return index


def expand_fragments(kernel: Kernel) -> Kernel:
    """`kernel` with every fragment statement replaced by plain statements (see the module docstring)."""
    if not has_fragments(kernel.body):
        return kernel
    return replace(kernel, body=_Expander(kernel).stmts(kernel.body))


class _Expander:
    def __init__(self, kernel: Kernel):
        self.kernel = kernel
        self.fragments = {s.name: s for s in walk_stmts(kernel.body) if isinstance(s, Fragment)}
        self.types = {p.name: p.dtype for p in kernel.params}
        self.types.update({s.name: s.dtype for s in walk_stmts(kernel.body) if isinstance(s, Local)})
        self.thread = linear_thread(kernel)
        self.names = 0

    def fail(self, what: str) -> UnsupportedOpError:
        return UnsupportedOpError(f"kernel {self.kernel.name}: {what}")

    def fresh(self, prefix: str) -> str:
        self.names += 1
        return f"rt_{prefix}{self.names}"

    def fragment(self, name: str, role: str | None = None) -> Fragment:
        f = self.fragments.get(name)
        if f is None:
            raise self.fail(f"fragment %{name} is used but never declared")
        if role is not None and f.role != role:
            raise self.fail(f"fragment %{name} is a '{f.role}' fragment where an '{role}' one is needed")
        return f

    def buffer_type(self, name: str):
        if name not in self.types:
            raise self.fail(f"fragment statements read or write %{name}, which is not a parameter or an array")
        return self.types[name]

    # -- the lanes ---------------------------------------------------------------------------------
    def lanes(self, f: Fragment) -> tuple[LaneGrid, Expr, Expr, Expr]:
        """(grid, the lane's grid row, its grid column, whether the lane is in the grid)."""
        if f.width > 1 and not self.kernel.thread_vars:
            raise self.fail(f"fragment %{f.name} is shared by {f.width} threads, and the kernel has no threads")
        grid = lane_grid(f.m, f.n, f.width)
        lane = self.thread % f.width if f.width > 1 else const(0)
        busy = Compare("lt", lane, const(grid.lane_rows * grid.lane_cols))
        return grid, lane // grid.lane_cols, lane % grid.lane_cols, busy

    def row(self, f: Fragment, i: Expr) -> Expr:
        grid, lane_row, _, _ = self.lanes(f)
        return lane_row + i * grid.lane_rows

    def col(self, f: Fragment, j: Expr) -> Expr:
        grid, _, lane_col, _ = self.lanes(f)
        return lane_col + j * grid.lane_cols

    def shape(self, f: Fragment) -> tuple[int, int]:
        """(rows, columns) of the lane's register array for `f`."""
        grid = lane_grid(f.m, f.n, f.width)
        return {"a": (grid.rows, f.k), "b": (f.k, grid.cols), "acc": (grid.rows, grid.cols)}[f.role]

    def element(self, f: Fragment, r: Expr, c: Expr, clamp: bool) -> tuple[Expr, Expr]:
        """(row, column) in the m x k, k x n or m x n block of register (r, c) of the lane."""
        grid = lane_grid(f.m, f.n, f.width)
        row = self.row(f, r) if f.role != "b" else r
        col = self.col(f, c) if f.role != "a" else c
        if clamp and not grid.exact:  # idle lanes and ragged edges read in bounds; their results are never stored
            row = minimum(row, f.m - 1) if f.role != "b" else row
            col = minimum(col, f.n - 1) if f.role != "a" else col
        return row, col

    # -- statements ----------------------------------------------------------------------------------
    def stmts(self, body: list) -> list:
        out = []
        for s in body:
            if isinstance(s, Fragment):
                out += self.declare(s)
            elif isinstance(s, FragmentLoad):
                out += self.load(s)
            elif isinstance(s, FragmentMma):
                out += self.mma(s)
            elif isinstance(s, FragmentStore):
                out += self.store(s)
            elif isinstance(s, (Loop, If)):
                out.append(replace(s, body=self.stmts(s.body)))
            else:
                out.append(s)
        return out

    def declare(self, f: Fragment) -> list:
        if f.role not in ("a", "b", "acc"):
            raise self.fail(f"fragment %{f.name} has role '{f.role}'; roles are a, b and acc")
        rows, cols = self.shape(f)
        out = [Local(f.name, rows * cols, f.element)]
        if f.fill is not None:
            e = self.fresh("e")
            out.append(Loop(e, rows * cols, [Store(f.name, Var(e), const(f.fill, f.element))], "unroll"))
        return out

    def load(self, s: FragmentLoad) -> list:
        f = self.fragment(s.name)
        rows, cols = self.shape(f)
        src = self.buffer_type(s.buffer)
        r, c = self.fresh("r"), self.fresh("c")
        row, col = self.element(f, Var(r), Var(c), clamp=True)
        value = Load(s.buffer, s.index + row * s.stride + col, src)
        value = value if src == f.element else Cast(value, f.element)
        store = Store(f.name, Var(r) * cols + Var(c), value)
        return [Loop(r, rows, [Loop(c, cols, [store], "unroll")], "unroll")]

    def mma(self, s: FragmentMma) -> list:
        d, a, b, c = (self.fragment(s.d, "acc"), self.fragment(s.a, "a"), self.fragment(s.b, "b"),
                      self.fragment(s.c, "acc"))
        if len({(f.m, f.n, f.k, f.dtype, f.acc, f.width) for f in (d, a, b, c)}) != 1:
            raise self.fail(f"fragment.mma %{s.d} = %{s.a} x %{s.b} + %{s.c} mixes fragment shapes or types")
        rows, cols = self.shape(d)
        i, j, kk, total = self.fresh("i"), self.fresh("j"), self.fresh("k"), self.fresh("sum")
        acc = d.acc
        av, bv = Load(a.name, Var(i) * a.k + Var(kk), a.dtype), Load(b.name, Var(kk) * cols + Var(j), b.dtype)
        av, bv = (v if v.dtype == acc else Cast(v, acc) for v in (av, bv))
        cell = Var(i) * cols + Var(j)
        return [Loop(i, rows, [Loop(j, cols, [
            Assign(total, Load(c.name, cell, acc)),
            Loop(kk, d.k, [Assign(total, binary("add", Var(total, acc), binary("mul", av, bv)))], "unroll"),
            Store(d.name, cell, Var(total, acc)),
        ], "unroll")], "unroll")]

    def store(self, s: FragmentStore) -> list:
        f = self.fragment(s.name, "acc")
        grid, _, _, busy = self.lanes(f)
        dst = self.buffer_type(s.buffer)
        r, c = self.fresh("r"), self.fresh("c")
        row, col = self.element(f, Var(r), Var(c), clamp=False)
        value = Load(f.name, Var(r) * grid.cols + Var(c), f.acc)
        value = value if dst == f.acc else Cast(value, dst)
        store = Store(s.buffer, s.index + row * s.stride + col, value)
        if not grid.exact:
            inside = binary("and", busy, binary("and", Compare("lt", row, const(f.m)), Compare("lt", col, const(f.n))))
            store = If(inside, [store])
        return [Loop(r, grid.rows, [Loop(c, grid.cols, [store], "unroll")], "unroll")]


# -- threads as loops -------------------------------------------------------------------------------


def _has_barrier(stmts) -> bool:
    return any(isinstance(s, Barrier) for s in walk_stmts(stmts))


def serialize_threads(kernel: Kernel) -> Kernel:
    """`kernel`, whose threads use barriers or workgroup arrays, as a kernel without threads (see the
    module docstring); any other kernel is returned as it is."""
    if not kernel.thread_vars or not any(isinstance(s, Barrier) or (isinstance(s, Local) and s.shared)
                                         for s in walk_stmts(kernel.body)):
        return kernel
    if has_fragments(kernel.body):
        kernel = expand_fragments(kernel)
    return replace(kernel, body=_Serializer(kernel).body(), thread_vars=())


class _Serializer:
    def __init__(self, kernel: Kernel):
        self.kernel = kernel
        self.threads = list(zip(kernel.thread_vars, kernel.workgroup_size))
        self.count = 1
        for _, size in self.threads:
            self.count *= size
        self.scalars: dict[str, object] = {}  # kept across a barrier: name -> dtype
        self.arrays: dict[str, Local] = {}  # private arrays kept across a barrier
        self.shared: dict[str, Local] = {}
        if _has_barrier(kernel.body):
            self.collect(kernel.body)
        for s in walk_stmts(kernel.body):
            if isinstance(s, Local) and s.shared:
                old = self.shared.get(s.name)
                self.shared[s.name] = s if old is None or old.size < s.size else old

    def collect(self, stmts) -> None:
        """The state declared directly in a list that holds a barrier: it lives across phases."""
        for s in stmts:
            if isinstance(s, Assign):
                self.scalars.setdefault(s.var, s.value.dtype)
            elif isinstance(s, Local) and not s.shared:
                old = self.arrays.get(s.name)
                self.arrays[s.name] = s if old is None or old.size < s.size else old
            elif isinstance(s, (Loop, If)) and _has_barrier(s.body):
                self.collect(s.body)

    def body(self) -> list:
        hoisted = [Local(a.name, a.size * self.count, a.dtype) for a in self.arrays.values()]
        hoisted += [Local(name, self.count, dt) for name, dt in self.scalars.items()]
        hoisted += [Local(a.name, a.size, a.dtype) for a in self.shared.values()]
        return hoisted + self.region(self.kernel.body)

    def region(self, stmts) -> list:
        out, run = [], []

        def flush():
            if run:
                body = self.stmts(run)
                if body:
                    out.extend(self.thread_loops(body))
                run.clear()

        for s in stmts:
            if isinstance(s, Barrier):
                flush()
            elif isinstance(s, Loop) and _has_barrier(s.body):
                flush()
                kind = "serial" if s.kind in ("vector", "thread") else s.kind
                out.append(Loop(s.var, s.extent, self.region(s.body), kind, s.start))
            elif isinstance(s, If) and _has_barrier(s.body):
                flush()
                out.append(If(self.expr(s.cond, uniform=True), self.region(s.body)))
            else:
                run.append(s)
        flush()
        return out

    def thread_loops(self, body: list) -> list:
        for var, size in self.threads:  # x innermost
            body = [Loop(var, size, body)]
        return body

    def thread(self, uniform: bool) -> Expr:
        return const(0) if uniform else linear_thread(self.kernel)

    def stmts(self, body: list) -> list:
        return [x for x in (self.stmt(s) for s in body) if x is not None]

    def stmt(self, s):
        if isinstance(s, Assign):
            if s.var in self.scalars:
                return Store(s.var, self.thread(False), self.expr(s.value))
            return Assign(s.var, self.expr(s.value))
        if isinstance(s, Store):
            return Store(s.buffer, self.index(s.buffer, self.expr(s.index), False), self.expr(s.value))
        if isinstance(s, Loop):
            return replace(s, body=self.stmts(s.body))
        if isinstance(s, If):
            return If(self.expr(s.cond), self.stmts(s.body))
        if isinstance(s, Local):
            return None if s.shared or s.name in self.arrays else s
        if isinstance(s, Barrier):
            raise UnsupportedOpError(f"kernel {self.kernel.name}: a barrier outside uniform control flow")
        raise UnsupportedOpError(f"kernel {self.kernel.name}: {type(s).__name__} cannot run as a loop over threads")

    def index(self, buffer: str, index: Expr, uniform: bool) -> Expr:
        array = self.arrays.get(buffer)
        return index if array is None else self.thread(uniform) * array.size + index

    def expr(self, e: Expr, uniform: bool = False) -> Expr:
        if isinstance(e, Const):
            return e
        if isinstance(e, Var):
            if e.name in self.scalars:
                return Load(e.name, self.thread(uniform), e.dtype)
            if uniform and e.name in self.kernel.thread_vars:
                return const(0, e.dtype)
            return e
        if isinstance(e, Load):
            return Load(e.buffer, self.index(e.buffer, self.expr(e.index, uniform), uniform), e.dtype)
        changes = {f.name: self.expr(getattr(e, f.name), uniform) for f in fields(e)
                   if isinstance(getattr(e, f.name), Expr)}
        return replace(e, **changes)
