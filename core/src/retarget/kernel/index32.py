"""32-bit index arithmetic for a kernel whose buffers all hold fewer than 2^31 elements.

The kernel IR computes indices in i64, which is exact for any buffer; on a GPU, 64-bit integer
arithmetic costs two instructions or more per op and twice the registers (a CUDA SGEMM's registers
went from 167 to fewer, ResNet-18 ran 20% faster on an H100 with indices in 32 bits). Vulkan and
WebGPU already compute indices in 32 bits; `narrow_indices` lets a C-like dialect do the same.

A kernel with sizes known at run time (`Kernel.scalars`) fits when its buffers and grid do at the symbols'
bounds (`Kernel.scalar_bounds`); its scalars are then index variables too.

What is narrowed: index variables (the workgroup and thread ids, loop counters, and every scalar whose
assigned values are all index arithmetic) and the index arithmetic itself (index constants, and
add/sub/mul/div/rem/min/max/select of narrowed values). i64 *data* stays i64: a value loaded from a
buffer or cast from one (a gather's index, argmax's answer) is not index arithmetic, and where index
arithmetic meets it, the narrowed side is widened back, so the kernel stays well typed and every
i64 tensor computes exactly as before.

Why it is safe: every index the kernel forms lands in a buffer of fewer than 2^31 elements, and the
intermediate terms of the lowering's index arithmetic (a row times its stride, a tile's origin plus
an offset, a padded coordinate) are bounded by the index they build, so none overflows 32 bits.
A kernel whose buffers or grid are larger is left as it is.
"""

from __future__ import annotations

import math
from dataclasses import replace

from ..ir.dtypes import DTYPES
from ..ir.symbolic import evaluate
from . import ir as k

I32 = DTYPES["i32"]
LIMIT = 2**31 - 1
_INDEX_OPS = ("add", "sub", "mul", "div", "rem", "min", "max")


def fits(kernel: k.Kernel) -> bool:
    """Whether every buffer, private array and the whole grid of threads stay below 2^31."""
    sizes = [p.size for p in kernel.params]
    sizes += [s.size for s in k.walk_stmts(kernel.body) if isinstance(s, k.Local)]
    count = kernel.workgroup_count
    if kernel.scalars:  # sizes known at run time: checked at their bounds (sizes grow with the symbols)
        if len(kernel.scalar_bounds) != len(kernel.scalars) or None in kernel.scalar_bounds:
            return False  # an unbounded symbol: indices stay 64-bit
        env = dict(zip(kernel.scalars, kernel.scalar_bounds))
        try:
            sizes = [s if isinstance(s, int) else evaluate(k.expr_dim(s), env) for s in sizes]
            count = [c if isinstance(c, int) else evaluate(k.expr_dim(c), env) for c in count]
        except TypeError:  # an extent the host cannot compute: no bound
            return False
    threads = math.prod(count) * math.prod(kernel.workgroup_size)
    return max(sizes, default=0) <= LIMIT and threads <= LIMIT


def narrow_indices(kernel: k.Kernel, *, assume_fits: bool = False) -> k.Kernel:
    """`kernel` with its index arithmetic in i32 (its workgroup, thread and loop variables are i32
    after this, and a renderer declares them so), or `kernel` itself when it does not `fit`.
    `assume_fits`: the target's runtime refuses, at each call, a buffer of 2^31 elements or more (Vulkan's
    driver does), so a kernel whose sizes are known only at run time, with no bound, is narrowed too."""
    if not (assume_fits or fits(kernel)):
        return kernel
    index_vars = _index_variables(kernel)
    return replace(kernel, body=_Narrow(index_vars).stmts(kernel.body))


def as_i32(e: k.Expr) -> k.Expr:
    """Index arithmetic (constants, variables and their sums, products, ...) typed i32: a loop extent of the sizes
    known at run time, for a backend whose sizes are i32 whatever else the kernel narrows."""
    return _Narrow(set()).narrow(e)


def _index_variables(kernel: k.Kernel) -> set[str]:
    """Variables every value of which is index arithmetic: the ids and loop counters, and the scalars
    assigned only index arithmetic of those (a fixpoint: a scalar falls out when a value it is assigned
    reads one that fell out)."""
    assigns: dict[str, list[k.Expr]] = {}
    loops = set(kernel.workgroup_vars) | set(kernel.thread_vars) | {k.symbol_var(s).name for s in kernel.scalars}
    for s in k.walk_stmts(kernel.body):
        if isinstance(s, k.Assign):
            assigns.setdefault(s.var, []).append(s.value)
        elif isinstance(s, k.Loop):
            loops.add(s.var)
    candidates = {v for v, values in assigns.items() if v not in loops and all(x.dtype == k.INDEX for x in values)
                  and not any(_accumulates(v, x) for x in values)}
    while True:
        index = loops | candidates
        dropped = {v for v in candidates if not all(_is_index(x, index) for x in assigns[v])}
        if not dropped:
            return index
        candidates -= dropped


def _accumulates(var: str, e: k.Expr) -> bool:
    """Whether `e` adds to, subtracts from or multiplies `var` itself: a running sum or product (of ones, when
    a reduction counts a size), which is data however its terms are spelled. Nothing bounds it but the
    loop's trip count, so it keeps its 64 bits."""
    if isinstance(e, k.Binary):
        if e.op in ("add", "sub", "mul") and var in _reads(e):
            return True
        return _accumulates(var, e.a) or _accumulates(var, e.b)
    if isinstance(e, k.Select):
        return _accumulates(var, e.a) or _accumulates(var, e.b)
    return False


def _reads(e: k.Expr) -> set[str]:
    if isinstance(e, k.Var):
        return {e.name}
    return set().union(*(_reads(c) for c in (getattr(e, f, None) for f in ("a", "b", "cond", "index"))
                         if isinstance(c, k.Expr)))


def _fits_i32(dt) -> bool:
    """Whether every value of integer type `dt` is an i32."""
    return dt.is_integer and dt.bits <= 32 and (dt.kind == "int" or dt.bits < 32)


def _is_clamp(e: k.Expr, index: set[str]) -> bool:
    """`min(max(x, c), bound)`: a 64-bit value (data, such as a segment's bound read from a buffer) clamped
    between an index constant and index arithmetic, so that it lands in 32 bits once clamped in 64."""
    return (isinstance(e, k.Binary) and e.op == "min" and e.dtype == k.INDEX and isinstance(e.a, k.Binary)
            and e.a.op == "max" and e.a.dtype == k.INDEX and isinstance(e.a.b, k.Const) and _is_index(e.a.b, index)
            and _is_index(e.b, index) and not _is_index(e.a.a, index))  # index arithmetic clamps in 32 bits


def _is_index(e: k.Expr, index: set[str]) -> bool:
    if _is_clamp(e, index):
        return True
    if isinstance(e, k.Const):  # i64 data has constants past i32 (INT64_MAX starts a min): not index arithmetic
        return e.dtype == k.INDEX and -LIMIT - 1 <= int(e.value) <= LIMIT
    if isinstance(e, k.Var):
        return e.name in index
    if isinstance(e, k.Binary):
        return e.op in _INDEX_OPS and e.dtype == k.INDEX and _is_index(e.a, index) and _is_index(e.b, index)
    if isinstance(e, k.Select):
        return e.dtype == k.INDEX and _is_index(e.a, index) and _is_index(e.b, index)
    return False


class _Narrow:
    def __init__(self, index_vars: set[str]):
        self.index = index_vars

    # -- expressions: `expr` keeps each expression's type, except that index arithmetic becomes i32 ----------
    def expr(self, e: k.Expr) -> k.Expr:
        if _is_index(e, self.index):
            return self.narrow(e)
        if isinstance(e, (k.Const, k.Var)):
            return e
        if isinstance(e, k.Unary):
            return k.Unary(e.op, self.wide(e.a, e.dtype))
        if isinstance(e, k.Binary):
            return k.Binary(e.op, self.wide(e.a, e.dtype), self.wide(e.b, e.dtype))
        if isinstance(e, k.Compare):
            a, b = self.expr(e.a), self.expr(e.b)
            if a.dtype != b.dtype:
                a, b = self.wide(e.a, e.a.dtype), self.wide(e.b, e.b.dtype)
            return k.Compare(e.op, a, b)
        if isinstance(e, k.Select):
            return k.Select(self.expr(e.cond), self.wide(e.a, e.dtype), self.wide(e.b, e.dtype))
        if isinstance(e, k.Cast):
            inner = self.expr(e.a)
            return inner if inner.dtype == e.dtype else k.Cast(inner, e.dtype)
        if isinstance(e, k.Load):
            return k.Load(e.buffer, self.expr(e.index), e.dtype)
        raise TypeError(e)

    def wide(self, e: k.Expr, dtype) -> k.Expr:
        """`e`, narrowed inside, with its own type `dtype` (a narrowed index widened back to i64)."""
        out = self.expr(e)
        return out if out.dtype == dtype else k.Cast(out, dtype)

    def narrow(self, e: k.Expr) -> k.Expr:
        if _is_clamp(e, self.index):
            x = e.a.a
            if isinstance(x, k.Cast) and _fits_i32(x.a.dtype):  # a narrower integer widened: clamped in 32 bits
                x = self.expr(x.a)
                return k.Binary("min", k.Binary("max", x if x.dtype == I32 else k.Cast(x, I32), self.narrow(e.a.b)),
                                self.narrow(e.b))
            clamped = k.Binary("min", k.Binary("max", self.wide(x, k.INDEX), e.a.b), self.wide(e.b, k.INDEX))
            return k.Cast(clamped, I32)  # clamped in 64 bits, then narrowed
        if isinstance(e, k.Const):
            return k.Const(int(e.value), I32)
        if isinstance(e, k.Var):
            return k.Var(e.name, I32)
        if isinstance(e, k.Binary):
            return k.Binary(e.op, self.narrow(e.a), self.narrow(e.b))
        if isinstance(e, k.Select):
            return k.Select(self.expr(e.cond), self.narrow(e.a), self.narrow(e.b))
        raise TypeError(e)

    # -- statements ----------------------------------------------------------------------------------------
    def stmts(self, body: list) -> list:
        return [self.stmt(s) for s in body]

    def stmt(self, s):
        if isinstance(s, k.Loop):
            return replace(s, body=self.stmts(s.body))
        if isinstance(s, k.If):
            return k.If(self.expr(s.cond), self.stmts(s.body))
        if isinstance(s, k.Assign):
            return k.Assign(s.var, self.narrow(s.value) if s.var in self.index else self.wide(s.value, s.value.dtype))
        if isinstance(s, k.Store):
            return k.Store(s.buffer, self.expr(s.index), self.wide(s.value, s.value.dtype))
        if isinstance(s, (k.FragmentLoad, k.FragmentStore)):
            return replace(s, index=self.expr(s.index))
        if isinstance(s, k.VectorCopy):
            return replace(s, dst_index=self.expr(s.dst_index), src_index=self.expr(s.src_index))
        return s  # Local, Barrier, Fragment, FragmentMma: no expressions
