"""The kernel IR: target-independent loop nests over buffers. Every backend consumes it.

A `Kernel` is one dispatch. Its `params` are flat buffers (element-indexed); its
`body` is a list of statements; `workgroup_count` is the grid, and each grid axis
is bound to a variable (`workgroup_vars`) that the body reads. On a GPU each
workgroup runs `workgroup_size` threads, and `thread_vars` hold the thread's index
inside its workgroup; every thread runs the body. Loops carry a
`kind` that says how a backend should map them: `serial`, `unroll`, `vector`
(innermost, contiguous: vectorize it), or `thread` (one GPU thread per
iteration). `Local` declares a small private array (registers on a CPU, a
thread's private memory on a GPU); `shared` arrays live in workgroup memory.

Fragments are the portable matrix-multiply-accumulate intrinsic. A `Fragment` is one operand
of an m x n x k multiply-accumulate (its `role`: "a" is m x k, "b" k x n, "acc" m x n), held
together by a subgroup of `width` threads: threads t*width .. t*width + width-1 of the workgroup
(linear thread index) form subgroup t, and how the elements are spread over its threads is the
backend's business. `FragmentLoad` and `FragmentStore` move a fragment from and to a buffer or
array whose rows are `stride` elements apart (row-major); `FragmentMma` is d = a x b + c.
`VectorCopy` moves a run of consecutive elements, aligned to its length, between buffers and arrays of
one type as one wide access where the backend has them (16 bytes: a tiled matmul's staging), else
element by element (`retarget.kernel.portable.expand_vector_copies`).
Every thread of a subgroup executes the fragment statements of its subgroup together, with the
same operands (uniform control flow, as barriers need). Backends spell them natively
(simdgroup_matrix, wmma, cooperative matrix, MFMA) or take the portable expansion into plain
statements (`retarget.kernel.portable.expand_fragments`).

Expressions are trees of frozen dataclasses; every one has a `dtype`. Index
arithmetic is i64. The text form (`print_kernel`) is MLIR-flavoured and records
the schedule, so that a tuning cache can key on it.

Sizes known only at run time. A kernel of a dispatch with symbolic dimensions (`ir.symbolic`)
takes one i64 scalar argument per symbol, `Kernel.scalars` (symbol names, in order); in the body
symbol `batch` is the variable `%dim_batch` (`symbol_var`). Loop extents, buffer sizes and the
workgroup count may then be expressions of those variables: a `Sym` given for any of them (or to
`const`, or in arithmetic with an `Expr`) becomes one (`dim_expr`). Backends pass the scalars as
kernel arguments, push constants or a uniform; `entry_point` records the entry's scalars and its
workgroup count (dimensions of the symbols) for the host, which evaluates them per call. Integer
`div`/`rem` truncate, which for sizes (never negative) is floor division, as `Sym`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..ir.dtypes import DType, dtype
from ..ir.ops import BINARY, COMPARE_PREDICATES, UNARY
from ..ir.symbolic import Min, Sym, dim_min, sym

INDEX = dtype("i64")
BOOL = dtype("i1")

# Scalar ops are the graph's elementwise ops, applied to one element.
UNARY_OPS, BINARY_OPS, COMPARE_OPS = UNARY, BINARY, COMPARE_PREDICATES
LOOP_KINDS = ("serial", "unroll", "vector", "thread")


class Expr:
    dtype: DType

    # Small builders so lowering code reads like arithmetic on indices.
    def __add__(self, other):
        return _fold("add", self, _lift(other, self))

    def __radd__(self, other):
        return _fold("add", _lift(other, self), self)

    def __sub__(self, other):
        return _fold("sub", self, _lift(other, self))

    def __mul__(self, other):
        return _fold("mul", self, _lift(other, self))

    def __rmul__(self, other):
        return _fold("mul", _lift(other, self), self)

    def __rsub__(self, other):
        return _fold("sub", _lift(other, self), self)

    def __floordiv__(self, other):
        return _fold("div", self, _lift(other, self))

    def __mod__(self, other):
        return _fold("rem", self, _lift(other, self))


@dataclass(frozen=True, eq=True)
class Const(Expr):
    value: float | int | bool
    dtype: DType = INDEX


@dataclass(frozen=True, eq=True)
class Var(Expr):
    name: str
    dtype: DType = INDEX


@dataclass(frozen=True, eq=True)
class Unary(Expr):
    op: str
    a: Expr

    @property
    def dtype(self) -> DType:
        return self.a.dtype


@dataclass(frozen=True, eq=True)
class Binary(Expr):
    op: str
    a: Expr
    b: Expr

    @property
    def dtype(self) -> DType:
        return self.a.dtype


@dataclass(frozen=True, eq=True)
class Compare(Expr):
    op: str
    a: Expr
    b: Expr
    dtype: DType = BOOL


@dataclass(frozen=True, eq=True)
class Select(Expr):
    cond: Expr
    a: Expr
    b: Expr

    @property
    def dtype(self) -> DType:
        return self.a.dtype


@dataclass(frozen=True, eq=True)
class Cast(Expr):
    a: Expr
    dtype: DType


@dataclass(frozen=True, eq=True)
class Load(Expr):
    """Element `index` of buffer (or local array) `buffer`."""

    buffer: str
    index: Expr
    dtype: DType


# -- statements -------------------------------------------------------------------------------


@dataclass
class Loop:
    var: str
    extent: int | Expr  # an Expr (of the kernel's scalars) when the size is known only at run time
    body: list
    kind: str = "serial"
    start: int = 0

    def __post_init__(self):
        if isinstance(self.extent, Sym):
            self.extent = dim_expr(self.extent)


@dataclass
class Assign:
    """Define or update the scalar variable `var`."""

    var: str
    value: Expr


@dataclass
class Store:
    buffer: str
    index: Expr
    value: Expr


@dataclass
class If:
    cond: Expr
    body: list


@dataclass
class Local:
    """A private (or `shared`) array of `size` elements, visible in the enclosing statements."""

    name: str
    size: int
    dtype: DType
    shared: bool = False


@dataclass
class Barrier:
    """All threads of the workgroup reach this point before any goes on."""


FRAGMENT_ROLES = ("a", "b", "acc")


@dataclass
class Fragment:
    """Declares fragment `name`: the `role` operand ("a", "b" or "acc") of an `m` x `n` x `k`
    multiply-accumulate whose A and B elements are `dtype` and whose accumulator is `acc`, held by a
    subgroup of `width` threads. "a" and "b" fragments hold `dtype`, "acc" fragments `acc`. With
    `fill`, every element starts as that value."""

    name: str
    role: str
    m: int
    n: int
    k: int
    dtype: DType
    acc: DType
    width: int = 32
    fill: float | None = None

    @property
    def element(self) -> DType:
        return self.acc if self.role == "acc" else self.dtype

    @property
    def rows(self) -> int:
        return self.k if self.role == "b" else self.m

    @property
    def cols(self) -> int:
        return self.k if self.role == "a" else self.n


@dataclass
class FragmentLoad:
    """Fragment `name` = the rows x cols block of `buffer` (a parameter or an array) that starts at element
    `index`, its rows `stride` elements apart."""

    name: str
    buffer: str
    index: Expr
    stride: int


@dataclass
class FragmentMma:
    """Fragment `d` = `a` x `b` + `c` (d and c may be the same accumulator)."""

    d: str
    a: str
    b: str
    c: str


@dataclass
class FragmentStore:
    """The block of `buffer` at element `index` (rows `stride` apart) = accumulator fragment `name`."""

    name: str
    buffer: str
    index: Expr
    stride: int


FRAGMENT_STATEMENTS = (Fragment, FragmentLoad, FragmentMma, FragmentStore)


@dataclass
class VectorCopy:
    """`dst`[dst_index + l] = `src`[src_index + l] for l < `lanes`: two buffers or arrays of one element type,
    both indices multiples of `lanes` (so a backend may move the run as one aligned vector)."""

    dst: str
    dst_index: Expr
    src: str
    src_index: Expr
    lanes: int


@dataclass(frozen=True)
class Param:
    name: str
    dtype: DType
    size: int | Expr  # elements; an Expr of the kernel's scalars when known only at run time
    access: str  # "read" or "write"

    def __post_init__(self):
        if isinstance(self.size, Sym):
            object.__setattr__(self, "size", dim_expr(self.size))


@dataclass
class Kernel:
    name: str
    params: list[Param]
    body: list
    workgroup_count: tuple = (1, 1, 1)  # ints, or Exprs of the scalars
    workgroup_vars: tuple[str, ...] = ()
    workgroup_size: tuple[int, int, int] = (1, 1, 1)
    thread_vars: tuple[str, ...] = ()  # bound to the thread's index inside its workgroup (GPUs)
    schedule: dict = field(default_factory=dict)
    scalars: tuple[str, ...] = ()  # symbols whose values the kernel takes (i64 `%dim_<symbol>`), in order
    scalar_bounds: tuple = ()  # each scalar's largest value (None: unbounded), for 32-bit indexing (index32.py)

    def __post_init__(self):
        self.workgroup_count = tuple(dim_expr(c) if isinstance(c, Sym) else c for c in self.workgroup_count)


SYMBOL_PREFIX = "dim_"


def symbol_var(name: str) -> Var:
    """The kernel variable holding symbol `name`'s value."""
    return Var(SYMBOL_PREFIX + name)


def dim_expr(d) -> Expr:
    """A dimension (an int or a `Sym`) as an index expression of the symbols' variables."""
    if not isinstance(d, Sym):
        return Const(int(d), INDEX)
    out: Expr | None = None
    for monomial, coefficient in d.terms:
        negative = out is not None and coefficient < 0  # a - 2*b, not a + (-2 * b)
        term: Expr = Const(-coefficient if negative else coefficient, INDEX)
        for atom in monomial:
            if isinstance(atom, str):
                factor = symbol_var(atom)
            elif isinstance(atom, Min):
                factor = Binary("min", dim_expr(atom.a), dim_expr(atom.b))
            else:
                factor = _fold("div", dim_expr(atom.num), Const(atom.den, INDEX))
            term = _fold("mul", term, factor)
        out = term if out is None else _fold("sub" if negative else "add", out, term)
    return out


def expr_dim(e) -> int | Sym:
    """An index expression of the symbols' variables as a dimension (the inverse of `dim_expr`), for
    the host to evaluate; a TypeError for anything else (a min, a load)."""
    if isinstance(e, int):
        return e
    if isinstance(e, Const):
        return int(e.value)
    if isinstance(e, Var) and e.name.startswith(SYMBOL_PREFIX):
        return sym(e.name[len(SYMBOL_PREFIX):])
    if isinstance(e, Binary) and e.op in ("add", "sub", "mul", "div", "rem", "min"):
        a, b = expr_dim(e.a), expr_dim(e.b)
        return {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b,
                "div": lambda: a // b, "rem": lambda: a % b, "min": lambda: dim_min(a, b)}[e.op]()
    raise TypeError(f"{format_expr(e)} is not a size the host can compute")


def is_size(e: Expr) -> bool:
    """Whether `e` is a size that is at least 1 at run time, so that a division by it never traps: a
    positive constant, a symbol's variable, sums and products of them, and their floor divisions by
    positive constants (the runtime refuses sizes that leave a tensor dimension below 1)."""
    if isinstance(e, Const):  # an index constant, or one narrowed to i32 (`index32`)
        return e.dtype.kind == "int" and e.value > 0
    if isinstance(e, Var):
        return e.name.startswith(SYMBOL_PREFIX)
    if isinstance(e, Binary) and e.op == "div":
        return is_size(e.a) and isinstance(e.b, Const) and e.b.value > 0
    return isinstance(e, Binary) and e.op in ("add", "mul") and is_size(e.a) and is_size(e.b)


def entry_point(kernel: Kernel, bindings):
    """The `EntryPoint` of `kernel` with these `Binding`s: its scalars, and its workgroup count as
    dimensions of them (ints for a static kernel)."""
    from ..protocols import EntryPoint

    count = tuple(c if isinstance(c, int) else expr_dim(c) for c in kernel.workgroup_count)
    return EntryPoint(kernel.name, tuple(bindings), tuple(kernel.workgroup_size), count, tuple(kernel.scalars))


# -- helpers ----------------------------------------------------------------------------------


def const(value, dt: DType = INDEX) -> Const:
    if isinstance(value, Sym):
        return dim_expr(value)
    if dt.is_float:
        value = float(value)
    elif dt.kind == "bool":
        value = bool(value)
    else:
        value = int(value)
    return Const(value, dt)


def _lift(x, like: Expr) -> Expr:
    if isinstance(x, Sym):
        return dim_expr(x)
    return x if isinstance(x, Expr) else const(x, like.dtype)


def _fold(op: str, a: Expr, b: Expr) -> Expr:
    """Binary op with the index-arithmetic identities folded, so printed kernels stay short."""
    if isinstance(a, Const) and isinstance(b, Const) and a.dtype == INDEX:
        x, y = a.value, b.value
        if op == "div" and y:
            return const(int(x / y) if (x < 0) != (y < 0) else x // y)
        if op == "rem" and y:
            return const(x - y * int(x / y))
        if op in ("add", "sub", "mul"):
            return const({"add": x + y, "sub": x - y, "mul": x * y}[op])
    if isinstance(b, Const):
        if op in ("add", "sub") and b.value == 0:
            return a
        if op in ("mul", "div") and b.value == 1:
            return a
        if op == "mul" and b.value == 0 and a.dtype == INDEX:
            return b
        if op == "rem" and b.value == 1 and a.dtype == INDEX:
            return const(0)
    if isinstance(a, Const):
        if op == "add" and a.value == 0:
            return b
        if op == "mul" and a.value == 1:
            return b
        if op == "mul" and a.value == 0 and b.dtype == INDEX:
            return a
    return Binary(op, a, b)


def binary(op: str, a: Expr, b: Expr) -> Expr:
    return _fold(op, a, b)


def minimum(a: Expr, b) -> Expr:
    return Binary("min", a, _lift(b, a))


def maximum(a: Expr, b) -> Expr:
    return Binary("max", a, _lift(b, a))


def walk_stmts(stmts):
    """Every statement in `stmts`, loop and if bodies included, outermost first."""
    for s in stmts:
        yield s
        if isinstance(s, (Loop, If)):
            yield from walk_stmts(s.body)


def has_fragments(stmts) -> bool:
    return any(isinstance(s, FRAGMENT_STATEMENTS) for s in walk_stmts(stmts))


def walk_exprs(stmts):
    """Every expression in `stmts`, outermost first."""

    def visit(e):
        yield e
        for child in vars(e).values() if not isinstance(e, (Const, Var)) else ():
            if isinstance(child, Expr):
                yield from visit(child)

    for s in stmts:
        for value in vars(s).values():
            if isinstance(value, Expr):
                yield from visit(value)
            elif isinstance(value, list):
                yield from walk_exprs(value)


def copy_arrays(kernel: Kernel) -> set[str]:
    """The private arrays of `kernel` that only move elements: every store into one is a plain load of
    its own element type, and every load from one is the whole value stored to a buffer or array of
    that type. A backend may keep them in the elements' storage type and copy without converting."""
    arrays = {s.name: s.dtype for s in walk_stmts(kernel.body) if isinstance(s, Local) and not s.shared}
    types = {p.name: p.dtype for p in kernel.params}
    types.update({s.name: s.dtype for s in walk_stmts(kernel.body) if isinstance(s, Local)})
    out, copied = set(arrays), {}
    for s in walk_stmts(kernel.body):
        if not isinstance(s, Store):
            continue
        v = s.value
        plain = isinstance(v, Load) and v.dtype == types.get(v.buffer) == types.get(s.buffer)
        if s.buffer in arrays and not plain:
            out.discard(s.buffer)
        if plain and v.buffer in arrays:
            copied[v.buffer] = copied.get(v.buffer, 0) + 1
    loads: dict[str, int] = {}
    for e in walk_exprs(kernel.body):
        if isinstance(e, Load) and e.buffer in arrays:
            loads[e.buffer] = loads.get(e.buffer, 0) + 1
    return {name for name in out if loads.get(name, 0) == copied.get(name, 0)}


# -- text ---------------------------------------------------------------------------------------


def format_expr(e: Expr) -> str:
    if isinstance(e, Const):
        v = "true" if e.value is True else "false" if e.value is False else repr(e.value)
        return v if e.dtype == INDEX else f"{v}:{e.dtype}"
    if isinstance(e, Var):
        return f"%{e.name}"
    if isinstance(e, Unary):
        return f"{e.op}({format_expr(e.a)})"
    if isinstance(e, Binary):
        infix = {"add": "+", "sub": "-", "mul": "*", "div": "/", "rem": "%"}.get(e.op)
        if infix:
            return f"({format_expr(e.a)} {infix} {format_expr(e.b)})"
        return f"{e.op}({format_expr(e.a)}, {format_expr(e.b)})"
    if isinstance(e, Compare):
        return f"cmp.{e.op}({format_expr(e.a)}, {format_expr(e.b)})"
    if isinstance(e, Select):
        return f"select({format_expr(e.cond)}, {format_expr(e.a)}, {format_expr(e.b)})"
    if isinstance(e, Cast):
        return f"cast<{e.dtype}>({format_expr(e.a)})"
    if isinstance(e, Load):
        return f"%{e.buffer}[{format_expr(e.index)}]"
    raise TypeError(e)


def _format_stmts(stmts, indent: str) -> list[str]:
    lines = []
    for s in stmts:
        if isinstance(s, Loop):
            kind = "" if s.kind == "serial" else f" {{{s.kind}}}"
            end = s.start + s.extent if isinstance(s.extent, int) else format_expr(_lift(s.start, s.extent) + s.extent)
            lines.append(f"{indent}for %{s.var} = {s.start} to {end}{kind} {{")
            lines += _format_stmts(s.body, indent + "  ")
            lines.append(f"{indent}}}")
        elif isinstance(s, Assign):
            lines.append(f"{indent}%{s.var} = {format_expr(s.value)}")
        elif isinstance(s, Store):
            lines.append(f"{indent}%{s.buffer}[{format_expr(s.index)}] = {format_expr(s.value)}")
        elif isinstance(s, If):
            lines.append(f"{indent}if {format_expr(s.cond)} {{")
            lines += _format_stmts(s.body, indent + "  ")
            lines.append(f"{indent}}}")
        elif isinstance(s, Local):
            lines.append(f"{indent}%{s.name} = {'shared' if s.shared else 'local'} alloc {s.size}x{s.dtype}")
        elif isinstance(s, Barrier):
            lines.append(f"{indent}barrier")
        elif isinstance(s, Fragment):
            fill = "" if s.fill is None else f" fill {format_expr(const(s.fill, s.element))}"
            lines.append(f"{indent}%{s.name} = fragment<{s.role}, {s.m}x{s.n}x{s.k}, {s.dtype} -> {s.acc}, "
                         f"width {s.width}>{fill}")
        elif isinstance(s, FragmentLoad):
            lines.append(f"{indent}%{s.name} = fragment.load %{s.buffer}[{format_expr(s.index)}] stride {s.stride}")
        elif isinstance(s, FragmentMma):
            lines.append(f"{indent}%{s.d} = fragment.mma %{s.a}, %{s.b}, %{s.c}")
        elif isinstance(s, FragmentStore):
            lines.append(f"{indent}fragment.store %{s.name}, %{s.buffer}[{format_expr(s.index)}] stride {s.stride}")
        elif isinstance(s, VectorCopy):
            lines.append(f"{indent}%{s.dst}[{format_expr(s.dst_index)}] = vector.copy<{s.lanes}> "
                         f"%{s.src}[{format_expr(s.src_index)}]")
        else:
            raise TypeError(s)
    return lines


def _size(n) -> str:
    return str(n) if isinstance(n, int) else format_expr(n)


def print_kernel(k: Kernel) -> str:
    params = ", ".join(f"%{p.name}: {p.access} {_size(p.size)}x{p.dtype}" for p in k.params)
    if k.scalars:
        params += ", " + ", ".join(f"%{SYMBOL_PREFIX}{s}: i64" for s in k.scalars)
    grid = ", ".join(f"%{v} < {_size(n)}" for v, n in zip(k.workgroup_vars, k.workgroup_count)) or "1"
    if k.thread_vars:
        grid += " threads(" + ", ".join(f"%{v} < {n}" for v, n in zip(k.thread_vars, k.workgroup_size)) + ")"
    sched = ", ".join(f"{key} = {value}" for key, value in sorted(k.schedule.items()))
    head = f"kernel.func @{k.name}({params}) workgroups({grid}) schedule {{{sched}}} {{"
    return "\n".join([head, *_format_stmts(k.body, "  "), "}"])
