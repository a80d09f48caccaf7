"""Explicit vector code for short innermost loops (register tiles, vector chunks).

A loop of kind `unroll` or `vector` whose body is only stores, with at most
`MAX_LANES` iterations, is emitted once as LLVM vector operations of `extent`
lanes instead of as a loop: the loop variable is the constant vector
<start, start+1, ...>, expressions that do not read it stay scalar (and are
broadcast where they meet a vector), and each load is classified by how its index
moves with the loop variable:

- stride 0: one scalar load, broadcast;
- stride 1: one vector load; stride s: one wider load and a shuffle;
- otherwise: a load per lane.

`select(in_range(i), x[clamp(i)], c)`, the form lowering gives padded reads, becomes
a masked load of the unclamped index, so that border tiles of a padded convolution
stay vector loads instead of per-lane loads. We do this ourselves rather than
count on LLVM's unrolling + SROA + SLP: those put the accumulators of a register
tile in memory, or vectorize across the wrong loop and gather.
"""

from __future__ import annotations

from llvmlite import ir
from retarget.kernel import ir as k

MAX_LANES = 128  # wider tiles stay loops, for LLVM's loop vectorizer (128: eight AVX-512 registers of f32)
MAX_STRIDED_SPAN = 256  # elements one strided load may span
VECTOR_DTYPES = ("f32", "f64", "i32", "i64")
INT_BINARY = ("add", "sub", "mul", "and", "or", "xor", "max", "min", "shr")
FLOAT_BINARY = ("add", "sub", "mul", "div", "rem", "max", "min", "pow")


_FREE: dict[int, tuple] = {}  # id -> (expression, its variables, the buffers it loads from); see `forget`
_CONSTANTS: dict[tuple, ir.Constant] = {}  # see `constant`
_NOTHING = frozenset()


def _facts(e: k.Expr) -> tuple[frozenset, frozenset]:
    hit = _FREE.get(id(e))
    if hit is not None and hit[0] is e:
        return hit[1], hit[2]
    if isinstance(e, k.Var):
        out = frozenset((e.name,)), _NOTHING
    elif isinstance(e, k.Const):
        out = _NOTHING, _NOTHING
    else:
        parts = [_facts(c) for c in vars(e).values() if isinstance(c, k.Expr)]
        loaded = frozenset().union(*(p[1] for p in parts))
        out = frozenset().union(*(p[0] for p in parts)), loaded | {e.buffer} if isinstance(e, k.Load) else loaded
    _FREE[id(e)] = (e, *out)
    return out


def free_vars(e: k.Expr) -> frozenset:
    """The variables `e` reads, remembered per expression object: the vector code asks for every node of
    deep index trees, and recomputing each time is quadratic in their depth."""
    return _facts(e)[0]


def loads_from(e: k.Expr) -> frozenset:
    """The buffers and arrays `e` loads from (remembered like `free_vars`)."""
    return _facts(e)[1]


_LANE_OPS = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b, "max": max, "min": min,
             "and": lambda a, b: a and b, "or": lambda a, b: a or b,
             # truncating, as the kernel IR's own folding of index constants (never by zero: see lane_values)
             "div": lambda a, b: k.binary("div", k.const(a), k.const(b)).value,
             "rem": lambda a, b: k.binary("rem", k.const(a), k.const(b)).value}
_LANE_COMPARES = {"lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
                  "ge": lambda a, b: a >= b, "eq": lambda a, b: a == b, "ne": lambda a, b: a != b}


def lane_values(e: k.Expr, var: str, lanes: list[int]) -> list | None:
    """The value of integer or boolean `e` at each lane, when it reads only the lane variable `var` (a mask of
    a tile at a known position); None otherwise."""
    if isinstance(e, k.Var):
        return lanes if e.name == var else None
    if e.dtype.is_float:
        return None
    if isinstance(e, k.Const):
        return [e.value] * len(lanes)
    if isinstance(e, k.Select):
        c, a, b = (lane_values(x, var, lanes) for x in (e.cond, e.a, e.b))
        return None if None in (c, a, b) else [x if t else y for t, x, y in zip(c, a, b)]
    if isinstance(e, (k.Binary, k.Compare)):
        fn = (_LANE_OPS if isinstance(e, k.Binary) else _LANE_COMPARES).get(e.op)
        a = lane_values(e.a, var, lanes) if fn else None
        b = lane_values(e.b, var, lanes) if a is not None else None
        if b is None or (e.op in ("div", "rem") and 0 in b):  # x / 0 is the reference's business, not a mask's
            return None
        return [fn(x, y) for x, y in zip(a, b)]
    return None


def forget() -> None:
    """Drops what `free_vars` and `constant` remembered (the code generator calls it after each kernel)."""
    _FREE.clear()
    _CONSTANTS.clear()


def constant(ty: ir.Type, value) -> ir.Constant:
    """One `ir.Constant` per type and value: llvmlite formats a constant once per object, and a new splat or
    shuffle mask at each use was a sixth of a large model's code generation."""
    key = (str(ty), _exact(value))
    out = _CONSTANTS.get(key)
    if out is None:
        out = _CONSTANTS[key] = ir.Constant(ty, value)
    return out


def _exact(value):
    if isinstance(value, float):  # -0.0 == 0.0, but they are different constants
        return "float", value.hex()
    if isinstance(value, (list, tuple)):
        return tuple(map(_exact, value))
    return value


def uses(e: k.Expr, var: str) -> bool:
    return var in free_vars(e)


def affine(e: k.Expr, var: str):
    """(base, stride) with e == base + stride * var and `base` free of var, or None."""
    if not uses(e, var):
        return e, 0
    if isinstance(e, k.Var):
        return k.const(0), 1
    if isinstance(e, k.Binary) and e.op in ("add", "sub"):
        a, b = affine(e.a, var), affine(e.b, var)
        if a is None or b is None:
            return None
        if e.op == "add":
            return k.binary("add", a[0], b[0]), a[1] + b[1]
        return k.binary("sub", a[0], b[0]), a[1] - b[1]
    if isinstance(e, k.Binary) and e.op == "mul":
        for x, c in ((e.a, e.b), (e.b, e.a)):
            if isinstance(c, k.Const) and not uses(c, var):
                inner = affine(x, var)
                return None if inner is None else (k.binary("mul", inner[0], c), inner[1] * c.value)
    return None


def _conjuncts(e: k.Expr) -> list[k.Expr]:
    if isinstance(e, k.Binary) and e.op == "and":
        return _conjuncts(e.a) + _conjuncts(e.b)
    return [e]


def unclamp(index: k.Expr, cond: k.Expr):
    """`index` with every clamp `min(max(i, 0), n - 1)` that `cond` guards by `0 <= i < n` removed
    (where cond holds, the clamp changes nothing), the others kept; None if none is removed."""
    guards = {format_key(c) for c in _conjuncts(cond)}
    found = []

    def strip(e):
        if (isinstance(e, k.Binary) and e.op == "min" and isinstance(e.b, k.Const)
                and isinstance(e.a, k.Binary) and e.a.op == "max" and isinstance(e.a.b, k.Const)
                and e.a.b.value == 0):
            i, n = e.a.a, e.b.value + 1
            lo = k.Compare("ge", i, k.const(0))
            hi = k.Compare("lt", i, k.const(n))
            if format_key(lo) in guards and format_key(hi) in guards:
                found.append(i)
                return strip(i)
            return e
        if isinstance(e, (k.Const, k.Var)):
            return e
        if isinstance(e, k.Binary):
            return k.Binary(e.op, strip(e.a), strip(e.b))
        if isinstance(e, k.Unary):
            return k.Unary(e.op, strip(e.a))
        if isinstance(e, k.Cast):
            return k.Cast(strip(e.a), e.dtype)
        raise LookupError

    try:
        out = strip(index)
    except LookupError:
        return None
    return out if found else None


def format_key(e: k.Expr) -> str:
    return k.format_expr(e)


def vectorizable(loop: k.Loop, buffers: dict) -> bool:
    """Whether `loop` can be emitted as one set of vector operations."""
    if loop.kind not in ("unroll", "vector") or not isinstance(loop.extent, int) or not 2 <= loop.extent <= MAX_LANES:
        return False
    if not loop.body or not all(isinstance(s, k.Store) for s in loop.body):
        return False
    var = loop.var
    written: dict[str, str] = {}
    for s in loop.body:
        step = affine(s.index, var)
        if step is None or step[1] != 1 or buffers[s.buffer][1].name not in VECTOR_DTYPES:
            return False
        key = format_key(s.index)
        if written.setdefault(s.buffer, key) != key:
            return False
    for s in loop.body:
        for e in k.walk_exprs([s]):
            if isinstance(e, k.Load) and e.buffer in written and format_key(e.index) != written[e.buffer]:
                return False  # a lane would read what another lane writes
            if uses(e, var) and not _vector_op(e, buffers) and lane_values(e, var, [0]) is None:
                return False  # (what reads only the lane variable is a constant vector, whatever its ops)
    return True


def _vector_op(e: k.Expr, buffers: dict) -> bool:
    if isinstance(e, (k.Const, k.Var, k.Compare, k.Select)):
        return True
    if isinstance(e, k.Load):
        return buffers[e.buffer][1].name in VECTOR_DTYPES and e.dtype == buffers[e.buffer][1]
    if isinstance(e, k.Unary):
        return e.dtype.is_float and e.dtype.name in ("f32", "f64") or e.op in ("neg", "not")
    if isinstance(e, k.Binary):
        if e.dtype.is_float:
            return e.op in FLOAT_BINARY
        return e.op in INT_BINARY
    if isinstance(e, k.Cast):
        src, dst = e.a.dtype, e.dtype
        return not (dst.kind == "bool" or src.name in ("f16", "bf16") or dst.name in ("f16", "bf16"))
    return False


class VectorLanes:
    """Evaluates kernel expressions as `n`-lane vectors of loop variable `var` (from `start`)."""

    def __init__(self, kb, var: str, start: int, n: int):
        self.kb, self.var, self.start, self.n = kb, var, start, n

    @property
    def b(self) -> ir.IRBuilder:
        return self.kb.b

    def vec(self, ty: ir.Type) -> ir.VectorType:
        return ir.VectorType(ty, self.n)

    def splat(self, x: ir.Value) -> ir.Value:
        if isinstance(x, ir.Constant):
            return constant(self.vec(x.type), x.constant)
        undefined = constant(self.vec(x.type), ir.Undefined)
        one = self.b.insert_element(undefined, x, constant(ir.IntType(32), 0))
        return self.b.shuffle_vector(one, undefined, constant(ir.VectorType(ir.IntType(32), self.n), (0,) * self.n))

    def scalar(self, e: k.Expr) -> ir.Value:
        saved, self.kb.lanes = self.kb.lanes, None
        try:
            return self.kb.expr(e)
        finally:
            self.kb.lanes = saved

    def expr(self, e: k.Expr) -> ir.Value:
        if not uses(e, self.var):
            return self.splat(self.scalar(e))
        if isinstance(e, k.Var):
            return constant(self.vec(ir.IntType(64)), tuple(range(self.start, self.start + self.n)))
        if free_vars(e) == {self.var} and not loads_from(e):
            values = lane_values(e, self.var, list(range(self.start, self.start + self.n)))
            if values is not None:  # known now: a constant vector, e.g. the mask of a tile at a known position
                return constant(self.vec(self.kb.expr_type(e.dtype)), tuple(int(v) for v in values))
        if not isinstance(e, (k.Load, k.Select)):
            return getattr(self.kb, "expr_" + type(e).__name__.lower())(e)
        # loads (and masked loads) of buffers nothing writes are emitted once per block and lanes: a tile's
        # channels read the same pixels
        key = (e, self.var, self.start, self.n)
        value = self.kb.recall(key) if loads_from(e) <= self.kb.read_only else None
        if value is None:
            value = self.load(e) if isinstance(e, k.Load) else self.masked_load(e) if (
                isinstance(e.a, k.Load) and not uses(e.b, self.var)) else None
            if value is None:
                value = self.kb.expr_select(e)
            if loads_from(e) <= self.kb.read_only:
                self.kb.remember(key, e, value)
        return value

    # -- memory -------------------------------------------------------------------------------------
    def address(self, buffer: str, index: k.Expr):
        ptr, dt, local = self.kb.buffers[buffer]
        elem = self.kb.element_type(dt, local)
        return self.b.gep(ptr, [self.scalar(index)], inbounds=True, source_etype=elem), elem

    def load(self, e: k.Load, mask=None, fill=None) -> ir.Value:
        """The lanes of `e`; with `mask`, lanes where it is false are `fill` and are not read."""
        step = affine(e.index, self.var)
        if step is None:
            return self.per_lane_load(e)
        base, stride = step
        if stride == 0:
            return self.splat(self.scalar(e))
        span = (self.n - 1) * abs(stride) + 1
        if stride < 0 or span > MAX_STRIDED_SPAN:
            return self.per_lane_load(e)
        first = k.binary("add", base, k.const(self.start * stride))
        addr, elem = self.address(e.buffer, first)
        if stride == 1:
            return self._load(addr, self.vec(elem), mask, fill)
        # n * stride elements, the last stride - 1 masked off (they may lie past the buffer): whole registers
        # legalize into plain loads and one masked load, where `span` elements split into odd pieces
        width = self.n * stride
        wide = ir.VectorType(elem, width)
        if mask is not None:
            picks = [i // stride if i % stride == 0 else self.n for i in range(width)]
            mask = self.b.shuffle_vector(mask, constant(mask.type, 0),
                                         constant(ir.VectorType(ir.IntType(32), width), tuple(picks)))
        elif width > span:
            mask = constant(ir.VectorType(ir.IntType(1), width), tuple(i < span for i in range(width)))
        raw = self._load(addr, wide, mask, fill)
        picks = tuple(range(0, self.n * stride, stride))
        lanes = constant(ir.VectorType(ir.IntType(32), self.n), picks)
        return self.b.shuffle_vector(raw, constant(wide, ir.Undefined), lanes)

    def _load(self, addr, ty: ir.VectorType, mask, fill) -> ir.Value:
        align = _bytes(ty.element)
        if mask is None:
            out = self.b.load(addr, typ=ty)
            out.align = align
            return out
        fn = self.kb.mb.masked_load(ty)
        return self.b.call(fn, [addr, constant(ir.IntType(32), align), mask, constant(ty, fill)])

    def per_lane_load(self, e: k.Load) -> ir.Value:
        index = self.expr(e.index)
        ptr, dt, local = self.kb.buffers[e.buffer]
        elem = self.kb.element_type(dt, local)
        out = ir.Constant(self.vec(elem), ir.Undefined)
        for i in range(self.n):
            lane = ir.Constant(ir.IntType(32), i)
            addr = self.b.gep(ptr, [self.b.extract_element(index, lane)], inbounds=True, source_etype=elem)
            out = self.b.insert_element(out, self.b.load(addr, typ=elem), lane)
        return out

    def masked_load(self, e: k.Select):
        """select(cond, x[clamp(i)], c) -> masked load of x[i] where cond holds, else c."""
        load: k.Load = e.a
        if not uses(e.cond, self.var):  # the same for every lane: the clamped load is in bounds, select after it
            return None
        index = unclamp(load.index, e.cond)
        if index is None or not isinstance(e.b, k.Const):
            return None
        step = affine(index, self.var)
        if step is None or step[1] <= 0 or (self.n - 1) * step[1] + 1 > MAX_STRIDED_SPAN:
            return None
        _, dt, _ = self.kb.buffers[load.buffer]
        if dt.name not in VECTOR_DTYPES or load.dtype != dt:
            return None
        mask = self.expr(e.cond)
        return self.load(k.Load(load.buffer, index, load.dtype), mask, self.kb.expr_const(e.b).constant)

    def store(self, s: k.Store) -> None:
        ptr, dt, local = self.kb.buffers[s.buffer]
        base, _ = affine(s.index, self.var)
        value = self.kb.convert(self.expr(s.value), s.value.dtype, dt, round_half=local)
        addr, elem = self.address(s.buffer, k.binary("add", base, k.const(self.start)))
        out = self.b.store(value, addr)
        out.align = _bytes(elem)


def _bytes(ty: ir.Type) -> int:
    if isinstance(ty, ir.IntType):
        return max(1, ty.width // 8)
    return {"float": 4, "double": 8, "half": 2}[str(ty)]
