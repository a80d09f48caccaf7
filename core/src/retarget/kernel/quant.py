"""Kernels over packed weights (see `passes/quantize.py` and `rt.dequantize` in `ir/ops.py`).

Packed values are read as 32-bit words, then shifted and masked: every backend renders that, and WGSL
has no narrower storage. Three lowerings:

- `dequantized`: `rt.dequantize` as an expression of the element's index, so that any kernel reading a
  packed weight (a convolution's filter, a large matmul's staged tiles) unpacks it as it reads;
- `packed_matmul`: x @ dequantize(W)^T read word by word, for matmuls with few rows on GPUs (a batch-1
  linear layer is a GEMV, bound by the weight's bytes: int4 moves a quarter of f16's) and for every
  matmul on CPUs;
- `quantized_matmul`: the same loops over int8 activations, with the products of each group summed
  exactly in i32 before they are scaled (8da8w, 8da4w).

The loops walk *units*: the words that share one scale (a group; the whole row for per-channel
weights). Within a unit, products are summed in the unit's type (f32 for float activations, i32 for
int8 ones) and scaled once. On a GPU, `lanes` (up to 32) consecutive threads share one output column and
add their partial sums through workgroup memory at the end; each thread keeps the sums of up to `GPU_ROWS`
output rows in registers, so that a word is read once for all of them. The lanes walk the words of the row,
so that consecutive threads read consecutive words, each word scaled by its group's scale as it is read;
only int8 activations with grouped weights (8da4w) give each lane whole groups instead, so that a group's
integer sum stays exact. On a CPU, each column's words are unpacked as vectors of their values, four words
a step into separate partial sums.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir.core import Value
from ..ir.dtypes import DTYPES, DType
from . import ir as k
from .ir import Assign, Cast, Compare, Expr, If, Load, Local, Loop, Select, Store, Var

F32, I32, U32 = DTYPES["f32"], DTYPES["i32"], DTYPES["ui32"]
GPU_ROWS = 8  # matmuls with at most this many rows take `packed_matmul` on a GPU (larger ones: the tiled matmul)
ROW_TILE = 4  # rows a CPU loop or a GPU thread computes together, reading each word once for all of them
UNROLL_WORDS = 16  # a unit's words are unrolled up to this many
CPU_CHAINS = 4  # words a CPU loop step unpacks, each into its own partial sums


@dataclass
class Packed:
    """A packed weight of `rows` rows of `columns` values, as the lowering reads it."""

    q: Value
    scale: Value
    zero: Value | None
    bits: int
    group: int
    rows: int
    columns: int

    @property
    def per_word(self) -> int:
        return 32 // self.bits

    @property
    def words(self) -> int:
        return -(-self.columns // self.per_word)

    @property
    def unit_words(self) -> int:
        """Words that share a scale."""
        return min(self.group, self.words * self.per_word) // self.per_word

    @property
    def units(self) -> int:
        return -(-self.words // self.unit_words)

    def value(self, word: Expr, j: Expr) -> Expr:
        """Value j (0 .. per_word - 1) of `word`, unsigned, as ui32."""
        if isinstance(j, k.Const):
            shift = k.const(j.value * self.bits, U32)
        else:
            shift = Cast(j * self.bits, U32)
        shifted = word if isinstance(j, k.Const) and j.value == 0 else k.Binary("shr", word, shift)
        return k.Binary("and", shifted, k.const((1 << self.bits) - 1, U32))


def packed_operand(op) -> Packed:
    q, scale, *zero = op.operands
    shape = op.attrs["shape"] if "shape" in op.attrs else None
    columns = int(np.prod(shape[1:])) if shape else None
    return Packed(q, scale, zero[0] if zero else None, op.attrs["bits"], op.attrs["group_size"], q.type.shape[0],
                  columns)


def dequantized(lowering, op, idx: list[Expr]) -> Expr:
    """Element `idx` of `rt.dequantize` op `op`: (u - zero) * scale, u unpacked from its word."""
    shape = op.result.type.shape
    w = packed_operand(op)
    row, col = idx[0], _linear(idx[1:], shape[1:])
    word = lowering.value(w.q, [row, col // w.per_word])
    shift = Cast((col % w.per_word) * w.bits, U32)
    u = k.Binary("and", k.Binary("shr", word, shift), k.const((1 << w.bits) - 1, U32))
    g = col // w.group
    dt = op.result.type.dtype
    zero = lowering.value(w.zero, [row, g]) if w.zero is not None else k.const(1 << (w.bits - 1), dt)
    return k.Binary("mul", k.Binary("sub", Cast(u, dt), zero), lowering.value(w.scale, [row, g]))


def _linear(idx: list[Expr], shape) -> Expr:
    total: Expr = k.const(0)
    step = 1
    for i, d in reversed(list(zip(idx, shape))):
        total = total + i * step
        step *= d
    return total


def dequantized_rhs(lowering, b: Value) -> Packed | None:
    """The packed weight W when matmul operand `b` is transpose(dequantize(W)) in the dispatch."""
    op = b.owner
    if b in lowering.inputs or op is None or op.name != "rt.transpose" or tuple(op.attrs["perm"]) != (1, 0):
        return None
    d = op.operands[0]
    if d in lowering.inputs or d.owner is None or d.owner.name != "rt.dequantize" or d.type.rank != 2:
        return None
    return packed_operand(d.owner)


# -- the matmul loops -----------------------------------------------------------------------------------------


class _Matmul:
    """out[..., m, n] = sum over units u of scale[n, u] * sum_(k in u) a(m, k) * (w(n, k) - zero[n, u]), times
    `row_scale(m)` when there is one; `a(m, k)` and the unit sums are of type `dt` (f32 or i32)."""

    def __init__(self, lowering, op, a: Value, w: Packed, dt: DType, row_scale: Value | None):
        self.lw, self.op, self.a, self.w, self.dt, self.row_scale = lowering, op, a, w, dt, row_scale
        self.out = op.result.type
        self.lead = self.out.shape[:-1]  # the rows, as the output's leading dims
        self.m = int(np.prod(self.lead, dtype=np.int64)) if self.lead else 1
        self.acc = _accumulator(self.out.dtype)
        w.columns = a.type.shape[-1]
        lowering.schedule.update(packed=f"{'i8 x ' if dt == I32 else ''}int{w.bits}, group {w.group}")

    # -- expressions --
    def row_index(self, m: Expr) -> list[Expr]:
        out, step = [], 1
        for d in reversed(self.lead):
            out.append((m // step) % d if d != 1 else k.const(0))
            step *= d
        return out[::-1]

    def a_at(self, m: Expr, col: Expr) -> Expr:
        from .lower import _broadcast_index

        idx = _broadcast_index(self.row_index(m) + [col], self.a.type.shape, self.lead + (self.a.type.shape[-1],))
        v = self.lw.value(self.a, idx)
        return v if v.dtype == self.dt else Cast(v, self.dt)

    def zero_at(self, n: Expr, unit: Expr) -> Expr:
        w = self.w
        if w.zero is None:
            return k.const(1 << (w.bits - 1), self.dt)
        z = self.lw.value(w.zero, [n, unit])
        return Cast(k.Unary("round", Cast(z, F32)), I32) if self.dt == I32 else Cast(z, F32)

    def scale_at(self, n: Expr, unit: Expr) -> Expr:
        return Cast(self.lw.value(self.w.scale, [n, unit]), F32)

    def load_word(self, n: Expr, word: Expr) -> Expr:
        return self.lw.value(self.w.q, [n, word])

    def product(self, bits: Expr, word: Expr, j: Expr, m: Expr, zero: Expr) -> Expr:
        """a(m, k) * (value - zero) for value j of word number `word` (its contents: `bits`), k = word * per_word
        + j; zero past the last column."""
        w = self.w
        v = Cast(Cast(w.value(bits, j), I32), self.dt) if self.dt != I32 else Cast(w.value(bits, j), I32)
        col = word * w.per_word + j
        ragged = w.columns % w.per_word and not (isinstance(j, k.Const) and j.value < w.columns % w.per_word)
        a = self.a_at(m, k.minimum(col, w.columns - 1) if ragged else col)
        p = k.Binary("mul", a, k.Binary("sub", v, zero))
        return Select(Compare("lt", col, k.const(w.columns)), p, k.const(0, self.dt)) if ragged else p

    def finish(self, m: Expr, total: Expr) -> Expr:
        """The output element from a row's scaled sum (f32)."""
        if self.row_scale is not None:
            idx = self.row_index(m) + [k.const(0)]
            total = k.Binary("mul", total, Cast(self.lw.value(self.row_scale, idx), F32))
        return total if self.out.dtype == F32 else Cast(total, self.out.dtype)

    def store(self, m: Expr, n: Expr, total: Expr) -> Store:
        self.lw.override[self.op.result] = self.finish(m, total)
        return self.lw.store(self.row_index(m) + [n])

    # -- CPU: each column's rows in tiles, the word's values as a vector loop --
    def cpu(self) -> list:
        lw, w = self.lw, self.w
        full, tail = divmod(self.m, ROW_TILE)
        lw.schedule.update(tile_m=ROW_TILE)

        in_unit = min(w.unit_words, w.words)
        # `CPU_CHAINS` words at a time, each into its own partial sums, so that the additions of consecutive
        # words do not wait for each other
        chains = CPU_CHAINS if in_unit % CPU_CHAINS == 0 and w.words % w.unit_words == 0 else 1
        width = chains * w.per_word  # partial sums per row

        def tile(n: Expr, m0: Expr, rows: int) -> list:
            """Rows m0 .. m0 + rows - 1 of column n."""
            acc, part, unit, u, c, j, r = (lw.fresh(p) for p in ("acc", "part", "unit", "w", "c", "j", "r"))
            word = Var(unit) * w.unit_words + Var(u) * chains + Var(c)
            ms = [m0 + i for i in range(rows)]
            zero, bits = lw.fresh("z"), lw.fresh("bits")
            # one vector loop per row: lane j accumulates value j of each word
            lane = Var(c) * w.per_word + Var(j)
            per_word = [Assign(bits, self.load_word(n, word))]
            per_word += [Loop(j, w.per_word, [Store(part, lane + i * width, k.Binary(
                "add", Load(part, lane + i * width, self.dt),
                self.product(Var(bits, U32), word, Var(j), ms[i], Var(zero, self.dt))))], "vector")
                for i in range(rows)]
            if w.words % w.unit_words:
                per_word = [If(Compare("lt", word, k.const(w.words)), per_word)]
            words = [Loop(u, in_unit // chains, [Loop(c, chains, per_word, "unroll")])]
            scaled = [Store(acc, k.const(i), k.Binary("add", Load(acc, k.const(i), F32), k.Binary(
                "mul", Cast(_sum(part, i * width, width, self.dt), F32), self.scale_at(n, Var(unit)))))
                for i in range(rows)]
            return [Local(acc, rows, F32), Local(part, rows * width, self.dt),
                    Loop(r, rows, [Store(acc, Var(r), k.const(0, F32))], "unroll"),
                    Loop(unit, w.units, [
                        Loop(r, rows * width, [Store(part, Var(r), k.const(0, self.dt))], "unroll"),
                        Assign(zero, self.zero_at(n, Var(unit))), *words, *scaled]),
                    *[self.store(ms[i], n, Load(acc, k.const(i), F32)) for i in range(rows)]]

        def column(n: Expr) -> list:
            t = lw.fresh("t")
            body = [Loop(t, full, tile(n, Var(t) * ROW_TILE, ROW_TILE))] if full else []
            return body + (tile(n, k.const(full * ROW_TILE), tail) if tail else [])

        return lw.parallel(w.rows, self.m * w.rows * w.columns, column)

    # -- GPU: `lanes` threads a column, threads over the units (or words) of its row --
    def gpu(self) -> list:
        lw, w = self.lw, self.w
        threads = lw.threads
        # Lanes walk the words of the row (consecutive threads read consecutive words) unless the unit sums must
        # stay exact integers across several words of a group (8da4w): then each lane takes whole groups.
        along_words = w.units == 1 or self.dt == F32
        scaled_words = along_words and w.units > 1  # each word's sum is scaled by its own group's scale
        steps_total = w.words if along_words else w.units
        lanes = 1
        while lanes < 32 and 2 * lanes <= steps_total and 2 * lanes <= threads and lw.desc.shared_memory_bytes:
            lanes *= 2
        columns = threads // lanes
        rows = min(self.m, ROW_TILE if self.m > GPU_ROWS else GPU_ROWS)
        row_tiles = -(-self.m // rows)
        col_blocks = -(-w.rows // columns)
        lw.grid = row_tiles * col_blocks
        lw.schedule.update(lanes=lanes, tile_m=rows)
        tid, wg = Var("tid"), Var("wg")
        n, lane, m0, step, acc, part, word, unit, zero = (lw.fresh(p) for p in (
            "n", "lane", "m0", "step", "acc", "part", "word", "unit", "z"))
        sum_dt = self.dt if along_words and not scaled_words else F32  # what the lanes add up
        ms = [Var(m0) + i for i in range(rows)]
        body = [Assign(n, (wg % col_blocks) * columns + tid // lanes), Assign(lane, tid % lanes),
                Assign(m0, (wg // col_blocks) * rows), Local(acc, rows, sum_dt)]
        body += [Store(acc, k.const(i), k.const(0, sum_dt)) for i in range(rows)]
        valid = Compare("lt", Var(n), k.const(w.rows))
        if self.m % rows:
            row_ok = [Compare("lt", m, k.const(self.m)) for m in ms]
            ms = [k.minimum(m, self.m - 1) for m in ms]
        else:
            row_ok = [None] * rows
        nv = Var(n)

        def add_word(wexpr: Expr, into: str, dt: DType, scale: Expr | None = None) -> list:
            word_var, bits = lw.fresh("wd"), lw.fresh("bits")
            out = [Assign(word_var, wexpr), Assign(bits, self.load_word(nv, Var(word_var)))]
            for i in range(rows):
                term = _total([self.product(Var(bits, U32), Var(word_var), k.const(j), ms[i], Var(zero, self.dt))
                               for j in range(w.per_word)])
                term = term if scale is None else k.Binary("mul", term, scale)
                out.append(Store(into, k.const(i), k.Binary("add", Load(into, k.const(i), dt), term)))
            return out

        if along_words:
            per_word = [Assign(word, Var(step) * lanes + Var(lane))]
            if scaled_words:
                unit_of = Var(word) // w.unit_words
                per_word += [Assign(zero, self.zero_at(nv, unit_of)),
                             *add_word(Var(word), acc, sum_dt, self.scale_at(nv, unit_of))]
            else:
                per_word += add_word(Var(word), acc, sum_dt)
            inner = per_word if w.words % lanes == 0 else \
                [per_word[0], If(Compare("lt", Var(word), k.const(w.words)), per_word[1:])]
            steps = -(-w.words // lanes)
            loop = [] if scaled_words else [Assign(zero, self.zero_at(nv, k.const(0)))]
            loop.append(Loop(step, steps, inner, "unroll" if steps <= UNROLL_WORDS else "serial"))
        else:
            uw = lw.fresh("u")
            part = lw.fresh("part")
            wexpr = Var(unit) * w.unit_words + Var(uw)
            words = add_word(wexpr, part, self.dt)
            if w.words % w.unit_words:
                words = [If(Compare("lt", wexpr, k.const(w.words)), words)]
            kind = "unroll" if w.unit_words <= UNROLL_WORDS else "serial"
            per_unit = [Local(part, rows, self.dt),
                        *[Store(part, k.const(i), k.const(0, self.dt)) for i in range(rows)],
                        Assign(zero, self.zero_at(nv, Var(unit))), Loop(uw, w.unit_words, words, kind),
                        *[Store(acc, k.const(i), k.Binary("add", Load(acc, k.const(i), F32), k.Binary(
                            "mul", Cast(Load(part, k.const(i), self.dt), F32), self.scale_at(nv, Var(unit)))))
                          for i in range(rows)]]
            inner = [Assign(unit, Var(step) * lanes + Var(lane))]
            inner += per_unit if w.units % lanes == 0 else [If(Compare("lt", Var(unit), k.const(w.units)), per_unit)]
            loop = [Loop(step, -(-w.units // lanes), inner)]
        body.append(If(valid, loop))

        def total(i: int) -> Expr:
            t = Load(acc, k.const(i), sum_dt)
            if along_words and not scaled_words:  # one scale for the row, applied to the lanes' exact sum
                return k.Binary("mul", Cast(t, F32), self.scale_at(nv, k.const(0)))
            return t

        stores = []
        for i in range(rows):
            s = self.store(ms[i], nv, total(i))
            stores.append(If(row_ok[i], [s]) if row_ok[i] is not None else s)
        if lanes == 1:
            return body + [If(valid, stores)]
        shared = lw.fresh("lanes")
        body += [Local(shared, rows * threads, sum_dt, shared=True)]
        body += [Store(shared, k.const(i * threads) + tid, Load(acc, k.const(i), sum_dt)) for i in range(rows)]
        body.append(k.Barrier())
        ln = lw.fresh("l")
        column = (tid // lanes) * lanes  # = tid in the first lane, where this runs: written so the bounds are provable
        combine = [Loop(ln, lanes - 1, [Store(acc, k.const(i), k.Binary(
            "add", Load(acc, k.const(i), sum_dt), Load(shared, k.const(i * threads) + column + Var(ln), sum_dt)))
            for i in range(rows)], "unroll" if lanes <= 32 else "serial", start=1)]
        first = k.Binary("and", valid, Compare("eq", Var(lane), k.const(0)))
        return body + [If(first, combine + stores)]


def _total(terms: list[Expr]) -> Expr:
    out = terms[0]
    for t in terms[1:]:
        out = k.Binary("add", out, t)
    return out


def _sum(array: str, start: int, count: int, dt: DType) -> Expr:
    return _total([Load(array, k.const(start + j), dt) for j in range(count)])


def _accumulator(dt: DType) -> DType:
    return F32 if dt.is_float else dt


def packed_matmul(lowering, op) -> list | None:
    """The word-by-word loops for matmul `op` when its right operand is a dequantized packed weight (on a GPU,
    only for at most `GPU_ROWS` rows); None otherwise."""
    a, b = op.operands
    w = dequantized_rhs(lowering, b)
    if w is None:
        return None
    gpu = lowering.desc.max_workgroup_size > 1
    mm = _Matmul(lowering, op, a, w, F32, None)
    if gpu and mm.m > GPU_ROWS:
        return None
    return mm.gpu() if gpu else mm.cpu()


def quantized_matmul(lowering, op) -> list:
    """`rt.quantized_matmul`: int8 activations times packed weights, each unit's products summed in i32."""
    xq, x_scale, *rest = op.operands
    w = Packed(rest[0], rest[1], rest[2] if len(rest) > 2 else None, op.attrs["bits"], op.attrs["group_size"],
               rest[0].type.shape[0], xq.type.shape[-1])
    mm = _Matmul(lowering, op, xq, w, I32, x_scale)
    return mm.gpu() if lowering.desc.max_workgroup_size > 1 else mm.cpu()
