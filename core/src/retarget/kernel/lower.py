"""Lower a dispatch (a small graph function, see passes/dispatch.py) to kernel IR.

Each dispatch has at most one *root*, an op that needs loops of its own (matmul,
conv, pool, reduce, argmax, scatter). The root picks the loop nest; every other op of the
dispatch is inlined as an expression of the output index: prologue ops where the
root reads its operands, epilogue ops (bias, activation) where the result is
stored. Broadcasts, transposes, slices, pads and reshapes become index
arithmetic, never copies.

The schedules here are for CPUs (one core per workgroup, vector loops inside):
tiles come from `TargetDesc.extra["vector_bits"]`, not from the target's name.
A GPU backend brings its own thread mapping on top of the same expressions.

Matrix fragments. A target whose hardware multiplies small matrices (simdgroup_matrix, wmma/mma,
cooperative matrix, MFMA) says so in `TargetDesc.extra["fragments"]`, a list of shapes, e.g.

    [{"m": 8, "n": 8, "k": 8, "a": "f32", "b": "f32", "acc": "f32", "width": 32}]

an m x n x k multiply-accumulate of A (m x k, element type "a") by B (k x n, type "b") into an
accumulator of type "acc", each fragment held by a subgroup of "width" threads (default: the
target's subgroup size). A target lists only what its code can run; the renderer spells what its
dialect knows natively and expands the rest portably (`portable.expand_fragments`). On the GPU,
a matmul whose operands convert exactly into a listed shape's A/B type (the same type, or f16/bf16
into f32), with an f32 accumulator and M, N, K at least the fragment's, takes the tiled fragment
matmul (`matmul_fragments` picks the shape and sizes the tiles from the shape, the workgroup size,
the shared memory and the multiprocessors to fill: 128 x 128 tiles of 8 subgroups for large matrices,
small ones for small matrices). Every other matmul, and every matmul on a target without "fragments",
is lowered exactly as before. f32 inputs never take an f16 or tf32 shape: that would change numerics.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace

import numpy as np

from ..errors import UnsupportedOpError
from ..ir.core import Function, Value
from ..ir.dtypes import DTYPES, DType
from ..ir.symbolic import Sym, bounds, ceil_div, dim_min, evaluate, hint, sym
from ..protocols import TargetDesc
from . import ir as k
from . import quant
from .bounds import check_kernel
from .ir import (
    INDEX,
    Assign,
    Cast,
    Compare,
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
    Param,
    Select,
    Store,
    Var,
    VectorCopy,
)
from .narrow import expand_narrow_types

I32 = DTYPES["i32"]
ROOTS = ("rt.matmul", "rt.conv2d", "rt.max_pool2d", "rt.avg_pool2d", "rt.reduce", "rt.argmax", "rt.quantized_matmul",
         "rt.scatter", "rt.segment_reduce")
MAX_WORKGROUPS = 8  # a cap: each workgroup is one call from the driver, and calls cost microseconds
# Below this many multiply-adds (~5 us of work) one workgroup is faster. The drivers' native programs (llvm-cpu's)
# start a workgroup in tens of nanoseconds and hand a stage to a running helper in about a microsecond, but a
# program with nothing to share never wakes one (tens of microseconds): a small model stays on one thread.
MIN_PARALLEL_WORK = 1 << 18
MATMUL_ROWS = 4  # rows of a matmul tile, and output channels of a conv tile, kept in registers
WINDOW_ROWS = 6  # output channels of a windowed convolution's tile (at most one group's)
MATMUL_DEPTH_BLOCK = 128  # reduction steps of a large matmul's block: its B block (128 rows of a slab) stays in L1
POINTWISE_ROWS = 6  # output channels of a 1x1 convolution's tile: 6 x 2 vectors of pixels is 12 accumulators
CACHED_OPERAND_BYTES = 256 << 10  # an operand this large is re-read from cache (about half an L2) ...
MAX_STORE_STREAMS = 64  # ... and a loop nest writing this many output rows at once still streams them well
MAX_UNROLLED_TAPS = 25  # taps of a conv window unrolled in a tile: 5x5, or a row of a dense conv's 7x7 ...
MAX_UNROLLED_WINDOW = 32  # ... whose rows are unrolled too while window x input channels is this small
FLAT_LOOP_MIN_CHANNELS = 16  # a flat run of pixels loops over its chunks (masks computed) from this many inputs a group
FLAT_CONSTANT_CHUNKS = 4  # ... else at most this many chunks, each its own code with constant masks
L1_SETS, L1_WAYS, LINE_BYTES = 64, 8, 64  # a 32 KB 8-way first-level data cache (x86 cores, Zen 4's among them)
REG = "unroll"  # register tiles are unrolled whole: the accumulators become registers, SLP vectorizes them


def lower_dispatch(fn: Function, desc: TargetDesc) -> Kernel:
    if len(fn.returns) != 1:
        raise UnsupportedOpError(f"dispatch {fn.name} writes {len(fn.returns)} buffers; kernels write one")
    lowering = _GpuLowering if desc.max_workgroup_size > 1 else _Lowering
    kernel = lowering(fn, desc).kernel()
    kernel.scalars = tuple(sorted(fn.symbols_used()))
    kernel.scalar_bounds = tuple(fn.symbols[s].hi if s in fn.symbols else None for s in kernel.scalars)
    if kernel.scalars:
        for sizes in _sample_sizes(fn, kernel.scalars):
            check_kernel(kernel, symbols={k.symbol_var(s).name: (v, v) for s, v in sizes.items()})
    else:
        check_kernel(kernel)  # every load and store proved inside its buffer, or a KernelBoundsError
    return expand_narrow_types(kernel)  # float8, float4 and sub-byte integers as bytes: no code generator spells them


def _sample_sizes(fn: Function, symbols) -> list[dict[str, int]]:
    """Sizes at which to prove a kernel with sizes known at run time in bounds. Intervals lose how a buffer's
    size follows its symbol (`i < n` with n in 1..64 bounds i by 63, and the buffer by 1), so the proof is made
    at a few concrete sizes instead: each symbol at its lowest, at a small odd size and at its highest (4099
    when unbounded), the symbols apart from one another so that a size read for another shows; sizes at
    which a dimension of the dispatch would be empty are skipped, as calls are refused there."""
    shapes = [v.type.shape for v in fn.args + fn.returns] + [r.type.shape for op in fn.ops for r in op.results]
    out = []
    for pick in ("low", "odd", "high"):
        sizes = {}
        for i, s in enumerate(symbols):
            r = fn.symbols.get(s)
            lo, hi = (max(r.lo, 1), r.hi) if r is not None else (1, None)
            want = {"low": lo, "odd": 17 + 6 * i, "high": (hi if hi is not None else 4099) - i}[pick]
            sizes[s] = max(lo, want if hi is None else min(hi, want))
        if sizes not in out and all(evaluate(d, sizes) >= 1 for shape in shapes for d in shape):
            out.append(sizes)
    return out


def fold_grid(kn: Kernel, per_dim: int) -> Kernel:
    """A 1-D grid over a device's per-dimension limit (65535 on many GPUs) as a 2-D grid; the body sees
    the same 1-D workgroup index, and the few extra workgroups skip it."""
    count = kn.workgroup_count
    if not isinstance(count[0], int) and count[1:] == (1, 1) and len(kn.workgroup_vars) == 1:
        return _fold_dynamic_grid(kn, per_dim)
    if all(c <= per_dim for c in count):
        return kn
    if count[1] != 1 or count[2] != 1 or len(kn.workgroup_vars) != 1:
        raise UnsupportedOpError(f"kernel {kn.name}: a {count} grid exceeds {per_dim} workgroups per dimension")
    y = -(-count[0] // per_dim)
    x = -(-count[0] // y)
    if y > per_dim:
        raise UnsupportedOpError(f"kernel {kn.name} needs {count[0]} workgroups, more than {per_dim}^2")
    wg = kn.workgroup_vars[0]
    index = k.Binary("add", k.Binary("mul", Var("rt_wgy"), k.const(x)), Var("rt_wgx"))
    # The guard is uniform in the workgroup (it reads only the workgroup id), so barriers inside stay legal.
    body = [Assign(wg, index), If(Compare("lt", Var(wg), k.const(count[0])), kn.body)]
    return replace(kn, body=body, workgroup_count=(x, y, 1), workgroup_vars=("rt_wgx", "rt_wgy"),
                   schedule={**kn.schedule, "grid": f"{x}x{y}"})


def _fold_dynamic_grid(kn: Kernel, per_dim: int) -> Kernel:
    """fold_grid for a grid whose size is known only at run time: always two dimensions, sized when the
    kernel is dispatched, min(count, per_dim) by ceil(count / per_dim) (one row while the count fits)."""
    count = kn.workgroup_count[0]
    y = (count + (per_dim - 1)) // per_dim
    x = k.minimum(count, per_dim)
    wg = kn.workgroup_vars[0]
    index = k.Binary("add", k.Binary("mul", Var("rt_wgy"), x), Var("rt_wgx"))
    body = [Assign(wg, index), If(Compare("lt", Var(wg), count), kn.body)]
    return replace(kn, body=body, workgroup_count=(x, y, 1), workgroup_vars=("rt_wgx", "rt_wgy"),
                   schedule={**kn.schedule, "grid": f"2-D, up to {per_dim} a side"})


def _over_one(d) -> bool:
    """Whether dimension d may exceed 1: a symbolic one may."""
    return isinstance(d, Sym) or d > 1


def _ragged(size, tile: int) -> bool:
    """Whether tiles of `tile` can overhang `size` (always, for a size known only at run time)."""
    return isinstance(size, Sym) or size % tile != 0


def _grid(count, per_group: int):
    """Workgroups of `per_group` threads covering `count` items: at least one."""
    return max(1, -(-count // per_group)) if isinstance(count, int) else ceil_div(count, per_group)


def _ceil(a, b: int):
    return -(-a // b) if isinstance(a, int) else ceil_div(a, b)


def _count(shape):
    """Elements of a shape: an int, or a Sym when it has symbolic dimensions."""
    return int(np.prod(shape, dtype=np.int64)) if all(isinstance(d, int) for d in shape) else math.prod(shape)


def strides(shape) -> list[int]:
    out, step = [], 1
    for d in reversed(shape):
        out.append(step)
        step *= d
    return out[::-1]


def linearize(idx: list[Expr], shape) -> Expr:
    total: Expr = k.const(0)
    for i, s in zip(idx, strides(shape)):
        total = total + i * s
    return total


def _delinearize(flat: Expr, shape) -> list[Expr]:
    # the outermost symbolic dimension (after unit ones) takes no remainder: `flat` is below the whole count,
    # and a remainder by a run-time size costs a division
    outer = next((n for n, d in enumerate(shape) if d != 1), None)
    return [k.const(0) if d == 1 else flat // s if n == outer and isinstance(d, Sym) else (flat // s) % d
            for n, (s, d) in enumerate(zip(strides(shape), shape))]


def _broadcast_index(idx: list[Expr], shape, out_shape) -> list[Expr]:
    lead = len(out_shape) - len(shape)
    return [k.const(0) if d == 1 and out_shape[lead + i] != 1 else idx[lead + i] for i, d in enumerate(shape)]


def _clamp(i: Expr, size: int) -> Expr:
    return k.minimum(k.maximum(i, 0), size - 1)


def _in_range(i: Expr, size: int) -> Expr:
    return k.Binary("and", Compare("ge", i, k.const(0)), Compare("lt", i, k.const(size)))


def _all(conds: list[Expr]) -> Expr | None:
    out = None
    for c in conds:
        out = c if out is None else k.Binary("and", out, c)
    return out


def _unaliased_rows(row_bytes: int) -> int:
    """The most rows, `row_bytes` apart, whose streams a tile reads at once without more of them sharing a
    first-level cache set than it has ways. A conv's weight rows of 1024 input channels x 3x3 are 36 KB apart, a
    multiple of 4 KB: every row falls in one set, and a tile of 12 channels evicted its own weights at every
    step (1024 -> 1024 channels at 13x13: 50 GFLOP/s a core; in tiles of 8, 101)."""
    rows = 1
    while rows < 64:
        sets = [(r * row_bytes // LINE_BYTES) % L1_SETS for r in range(rows + 1)]
        if max(sets.count(s) for s in sets) > L1_WAYS:
            return rows
        rows += 1
    return rows


class _Lowering:
    def __init__(self, fn: Function, desc: TargetDesc):
        self.fn, self.desc = fn, desc
        self.inputs = {a: f"in{i}" for i, a in enumerate(fn.args)}
        self.out = fn.returns[0]
        self.names = 0
        self.grid = 1
        self.schedule: dict = {}
        lanes = max(1, desc.extra.get("vector_bits", 256) // (8 * max(1, self.out.type.dtype.itemsize)))
        self.tile = min(2 * lanes, 32)
        self.override: dict[Value, Expr] = {}
        # One workgroup per core the target declares (else this machine's), so each core gets one call.
        self.max_groups = min(MAX_WORKGROUPS, desc.extra.get("cores") or os.cpu_count() or 1)
        self.ranges = fn.symbols  # symbolic dimensions: schedules plan for `hint`, code holds for all sizes

    def hint(self, d) -> int:
        """A representative size for `d` (itself when static), for choices that only affect speed."""
        return hint(d, self.ranges)

    def fresh(self, prefix: str) -> str:
        self.names += 1
        return f"{prefix}{self.names}"

    # -- the kernel ------------------------------------------------------------------------------
    def kernel(self) -> Kernel:
        roots = [op for op in self.fn.ops if op.name in ROOTS]
        if len(roots) > 1:
            raise UnsupportedOpError(f"dispatch {self.fn.name} has {len(roots)} loop ops; fusion keeps one")
        root = roots[0] if roots else None
        body = getattr(self, "_" + root.name.removeprefix("rt."))(root) if root else self._elementwise()
        params = [Param(name, a.type.dtype, a.type.num_elements, "read") for a, name in self.inputs.items()]
        params.append(Param("out0", self.out.type.dtype, self.out.type.num_elements, "write"))
        self.schedule["strategy"] = root.name.removeprefix("rt.") if root else "elementwise"
        self.schedule["workgroups"] = self.grid
        return self.finish(params, body)

    def finish(self, params, body) -> Kernel:
        return Kernel(self.fn.name, params, body, (self.grid, 1, 1), ("wg",) if _over_one(self.grid) else (),
                      schedule=self.schedule)

    def store(self, idx: list[Expr]) -> Store:
        return Store("out0", linearize(idx, self.out.type.shape), self.value(self.out, idx))

    # -- expressions ----------------------------------------------------------------------------
    def value(self, v: Value, idx: list[Expr]) -> Expr:
        if v in self.override:
            return self.override[v]
        if v in self.inputs:
            return Load(self.inputs[v], linearize(idx, v.type.shape), v.type.dtype)
        op = v.owner
        name = op.name.removeprefix("rt.")
        shape, dt = v.type.shape, v.type.dtype

        def operand(i, at=None):
            src = op.operands[i]
            return self.value(src, _broadcast_index(at if at is not None else idx, src.type.shape, shape))

        if name == "constant":
            flat = op.attrs["value"].array.reshape(-1)
            return k.const(flat[0].item(), dt)
        if name in k.UNARY_OPS:
            return k.Unary(name, operand(0))
        if name in k.BINARY_OPS:
            return k.Binary(name, operand(0), operand(1))
        if name == "cmp":
            return Compare(op.attrs["predicate"], operand(0), operand(1))
        if name == "select":
            return Select(operand(0), operand(1), operand(2))
        if name == "cast":
            return Cast(operand(0), dt)
        if name == "broadcast":
            return operand(0)
        if name == "iota":
            return Cast(idx[op.attrs["axis"]], dt)
        if name == "dequantize":
            return quant.dequantized(self, op, idx)
        src = op.operands[0] if op.operands else None
        if name == "reshape":
            return self.value(src, _delinearize(linearize(idx, shape), src.type.shape))
        if name == "transpose":
            at = [None] * len(idx)
            for i, p in enumerate(op.attrs["perm"]):
                at[p] = idx[i]
            return self.value(src, at)
        if name == "slice":
            return self.value(src, [s + i * st for i, s, st in zip(idx, op.attrs["start"], op.attrs["stride"])])
        if name == "pad":
            at = [i - lo for i, lo in zip(idx, op.attrs["low"])]
            conds = [_in_range(i, d) for i, d, lo, hi in zip(at, src.type.shape, op.attrs["low"], op.attrs["high"])
                     if lo or hi]
            inner = self.value(src, [_clamp(i, d) if (lo or hi) else i for i, d, lo, hi in
                                     zip(at, src.type.shape, op.attrs["low"], op.attrs["high"])])
            cond = _all(conds)
            return inner if cond is None else Select(cond, inner, k.const(op.attrs["value"], dt))
        if name == "concat":
            axis = op.attrs["axis"]
            pieces, offset = [], 0
            for piece in op.operands:
                size = piece.type.shape[axis]
                at = list(idx)
                at[axis] = _clamp(idx[axis] - offset, size)
                pieces.append((offset + size, self.value(piece, at)))
                offset += size
            out = pieces[-1][1]
            for end, expr in reversed(pieces[:-1]):
                out = Select(Compare("lt", idx[axis], k.const(end)), expr, out)
            return out
        if name == "gather":
            data, indices = op.operands
            axis, r = op.attrs["axis"], indices.type.rank
            position = Cast(self.value(indices, idx[axis:axis + r]), INDEX)
            return self.value(data, idx[:axis] + [_clamp(position, data.type.shape[axis])] + idx[axis + r:])
        raise UnsupportedOpError(f"kernel lowering does not handle {op.describe()} inside a fused dispatch")

    # -- loop building ----------------------------------------------------------------------------
    def loops(self, extents, inner_kind="vector"):
        """(vars, wrap): index vars for `extents`, and a function that wraps a body in their loops."""
        names = [self.fresh("i") for _ in extents]

        def wrap(body):
            for n, (name, extent) in enumerate(reversed(list(zip(names, extents)))):
                kind = inner_kind if n == 0 and _over_one(extent) else "serial"
                body = [Loop(name, extent, body, kind)]
            return body

        return [Var(n) for n in names], wrap

    def parallel(self, count: int, work: int, body_fn, tail=None) -> list:
        """`body_fn(i)` for i in [0, count), spread over workgroups when the work is large enough;
        `tail` statements run once, in the last workgroup."""
        if isinstance(count, Sym) or isinstance(work, Sym):
            return self._parallel_symbolic(count, work, body_fn, tail)
        groups = min(count, self.max_groups) if work >= MIN_PARALLEL_WORK else 1
        chunk = -(-count // groups) if groups else 0
        groups = -(-count // chunk) if chunk else 1
        if groups <= 1:
            t = self.fresh("p")
            out = [Loop(t, count, body_fn(Var(t)))] if count else []
            return out + (tail or [])
        self.grid = groups
        wg, t = Var("wg"), self.fresh("p")
        item = wg * chunk + Var(t)
        guarded = body_fn(item) if count % chunk == 0 else [If(Compare("lt", item, k.const(count)), body_fn(item))]
        out = [Loop(t, chunk, guarded)]
        if tail:
            out.append(If(Compare("eq", wg, k.const(groups - 1)), tail))
        return out

    def _reaches_parallel_work(self, work):
        """1 where `work` reaches MIN_PARALLEL_WORK, else 0: decided here where the symbols' ranges decide it, and
        otherwise a size the host computes. `c * n` is tested as n // ceil(MIN / c), so that the product (billions
        of multiply-adds at a batch's upper bound) is never formed in 32-bit index arithmetic."""
        lowest, highest = bounds(work, self.fn.symbols)
        if lowest >= MIN_PARALLEL_WORK:
            return 1
        if highest is not None and highest < MIN_PARALLEL_WORK:
            return 0
        if isinstance(work, Sym) and len(work.terms) == 1:
            (monomial, coefficient), = work.terms
            if len(monomial) == 1 and isinstance(monomial[0], str) and coefficient > 0:
                return dim_min(1, sym(monomial[0]) // ceil_div(MIN_PARALLEL_WORK, coefficient))
        return dim_min(1, work // MIN_PARALLEL_WORK)

    def _parallel_symbolic(self, count, work, body_fn, tail) -> list:
        """`parallel` for a count or work known only at run time. The number of workgroups is a size the
        host computes per call, by the static rule (min(count, max_groups) once the work reaches
        MIN_PARALLEL_WORK, else one), so a small call runs in one workgroup as its static module would;
        each workgroup takes a chunk of the count, sized at run time, each index guarded."""
        if count == 0:
            return list(tail or [])
        spread = self._reaches_parallel_work(work)  # 0 below the threshold, else 1
        most = dim_min(count, self.max_groups)  # count may be 0 (a batch of 1 in blocks of 4): at least one group
        groups = 1 + (most - dim_min(most, 1)) * spread
        if isinstance(groups, int) and groups <= 1:
            t = self.fresh("p")
            return [Loop(t, count, body_fn(Var(t)))] + (tail or [])
        self.grid = groups
        wg, t, size = Var("wg"), self.fresh("p"), self.fresh("chunk")
        groups_e = k.dim_expr(groups) if isinstance(groups, Sym) else k.const(groups)
        item = wg * Var(size) + Var(t)
        out = [Assign(size, (k.const(count) + groups_e - 1) // groups_e),
               Loop(t, Var(size), [If(Compare("lt", item, k.const(count)), body_fn(item))])]
        if tail:
            out.append(If(Compare("eq", wg, groups_e - 1), tail))
        return out

    def parallel_span(self, shape, outer: int, limit: int) -> int:
        """The last dimension to spread over workgroups with dimension `outer`: `outer` itself when its
        size is static; when it is symbolic (a batch that may be 1), up to the next static dimension
        above 1 before `limit`, so that a small batch still fills the workgroups."""
        if isinstance(shape[outer], int):
            return outer
        for d in range(outer + 1, limit):
            if isinstance(shape[d], int) and shape[d] > 1:
                return d
        return outer

    def parallel_index(self, shape, outer: int, last: int, body):
        """(count, function of the parallel index i -> body(index of dims outer..last))."""
        if last == outer:
            return shape[outer], lambda i: body([i])
        dims = shape[outer:last + 1]
        return _count(dims), lambda i: body(_delinearize(i, dims))

    # -- strategies ----------------------------------------------------------------------------------
    def _elementwise(self) -> list:
        shape = self.out.type.shape
        if not shape:
            return [self.store([])]
        outer = next((d for d in range(len(shape) - 1) if _over_one(shape[d])), None)
        if outer is None:  # one long row: split it into vector-tile chunks
            n, tile = shape[-1], self.tile
            lead = [k.const(0)] * (len(shape) - 1)

            def chunk(c):
                j = self.fresh("j")
                return [Loop(j, tile, [self.store(lead + [c * tile + Var(j)])], "vector")]

            tail_start = n - n % tile
            j = self.fresh("j")
            tail = [Loop(j, n % tile, [self.store(lead + [Var(j) + tail_start])], "vector")] \
                if isinstance(n, Sym) or n % tile else []
            return self.parallel(n // tile, n * self._ops_per_element(), chunk, tail)
        last = self.parallel_span(shape, outer, len(shape) - 1)
        rest, wrap = self.loops(shape[last + 1:])
        lead = [k.const(0)] * outer
        count, body = self.parallel_index(shape, outer, last, lambda at: wrap([self.store(lead + at + rest)]))
        return self.parallel(count, self.out.type.num_elements * self._ops_per_element(), body)

    def _ops_per_element(self) -> int:
        """An elementwise dispatch's work per element: its ops, as a fused chain of them (a tree ensemble's step of
        gathers and compares: ~25) costs that many times one op's."""
        return max(1, sum(op.name != "rt.constant" for op in self.fn.ops))

    def _reduce(self, op) -> list:
        kind, axes = op.attrs["kind"], tuple(op.attrs["axes"])
        keep = op.attrs.get("keepdims", False)
        src = op.operands[0]
        acc_dt = _accumulator(src.type.dtype) if kind in ("sum", "prod") else src.type.dtype
        out_shape = op.result.type.shape
        kept = [d for d in range(src.type.rank) if d not in axes]
        red, wrap_red = self.loops([src.type.shape[a] for a in axes],
                                   "vector" if axes and axes[-1] == src.type.rank - 1 else "serial")
        acc = self.fresh("acc")
        self.schedule["reduction"] = kind

        def element(out_idx):
            at = [None] * src.type.rank
            for n, d in enumerate(kept):
                at[d] = out_idx[d] if keep else out_idx[n]
            for var, a in zip(red, axes):
                at[a] = var
            x = self.value(src, at)
            x = Cast(x, acc_dt) if x.dtype != acc_dt else x
            combine = {"sum": "add", "prod": "mul", "max": "max", "min": "min", "and": "and", "or": "or"}[kind]
            self.override[op.result] = Cast(Var(acc, acc_dt), op.result.type.dtype) \
                if acc_dt != op.result.type.dtype else Var(acc, acc_dt)
            return [Assign(acc, k.const(_identity(kind, acc_dt), acc_dt)),
                    *wrap_red([Assign(acc, k.Binary(combine, Var(acc, acc_dt), x))]),
                    self.store(out_idx)]

        return self._over_output(out_shape, element, work=src.type.num_elements)

    def _argmax(self, op) -> list:
        src, axis = op.operands[0], op.attrs["axis"]
        keep = op.attrs.get("keepdims", False)
        out_shape = op.result.type.shape
        best, where, r = self.fresh("best"), self.fresh("arg"), self.fresh("r")
        dt = src.type.dtype

        def element(out_idx):
            at = list(out_idx) if keep else out_idx[:axis] + [None] + out_idx[axis:]
            at[axis] = Var(r)
            x = self.value(src, at)
            better = Compare("gt", x, Var(best, dt))
            if dt.is_float:  # NaN is larger than every number, as torch and numpy take it: the first NaN wins
                better = Select(Compare("ne", x, x), Compare("eq", Var(best, dt), Var(best, dt)), better)
            self.override[op.result] = Var(where, op.result.type.dtype)
            first = list(at)
            first[axis] = k.const(0)
            return [Assign(best, self.value(src, first)), Assign(where, k.const(0, op.result.type.dtype)),
                    Loop(r, src.type.shape[axis], [
                        Assign(where, Select(better, Cast(Var(r), op.result.type.dtype),
                                             Var(where, op.result.type.dtype))),
                        Assign(best, Select(better, x, Var(best, dt)))])]

        def with_store(out_idx):
            return element(out_idx) + [self.store(out_idx)]

        return self._over_output(out_shape, with_store, work=src.type.num_elements)

    def _segment_reduce(self, op) -> list:
        """Each segment's rows combined in order, from the segment's start to its end, both read from their buffers
        and clipped to the rows: a loop whose extent is data, so each invocation reads only its own rows. A GPU
        takes an invocation per output element (`SPLIT_COLUMNS`: a warp's threads read a row together); a CPU one
        per segment, combining whole rows into a private row of accumulators (vector loops)."""
        values, starts, ends = op.operands
        kind, rows = op.attrs["kind"], values.type.shape[0]
        tail = values.type.shape[1:]
        width = _count(tail)
        acc_dt = _accumulator(values.type.dtype) if kind in ("sum", "prod") else values.type.dtype
        out_dt = op.result.type.dtype
        self.schedule["segments"] = kind

        def clipped(segment: Expr) -> tuple[list, Expr, Expr]:
            """(assignments, first row, extent) of `segment`; a row past the last one is never read (`inside`)."""
            lo, hi = self.fresh("lo"), self.fresh("hi")

            def bound(v):
                x = self.value(v, [segment])
                return k.minimum(k.maximum(x if x.dtype == INDEX else Cast(x, INDEX), 0), k.const(rows))

            return [Assign(lo, bound(starts)), Assign(hi, bound(ends))], Var(lo), Var(hi) - Var(lo)

        def combined(acc: Expr, row: Expr, rest: list) -> Expr:
            x = self.value(values, [row] + rest)
            return k.Binary(SPLIT_REDUCTIONS[kind], acc, Cast(x, acc_dt) if x.dtype != acc_dt else x)

        def result(acc: Expr) -> Expr:
            return Cast(acc, out_dt) if acc_dt != out_dt else acc

        identity = k.const(_identity(kind, acc_dt), acc_dt)
        if self.SPLIT_COLUMNS or not tail or not isinstance(width, int):
            def element(out_idx):
                bounds, first, extent = clipped(out_idx[0])
                acc, t = self.fresh("acc"), self.fresh("t")
                row = first + Var(t)
                self.override[op.result] = result(Var(acc, acc_dt))
                return [Assign(acc, identity), *bounds,
                        Loop(t, extent, [If(Compare("lt", row, k.const(rows)),
                                            [Assign(acc, combined(Var(acc, acc_dt), row, out_idx[1:]))])]),
                        self.store(out_idx)]

            return self._over_output(op.result.type.shape, element, work=values.type.num_elements)

        def per_segment(segment: Expr) -> list:
            bounds, first, extent = clipped(segment)
            acc, t, w = self.fresh("acc"), self.fresh("t"), self.fresh("w")
            row = first + Var(t)
            rest = _delinearize(Var(w), tail)
            self.override[op.result] = result(Load(acc, Var(w), acc_dt))
            return [*bounds, Local(acc, width, acc_dt),
                    Loop(w, width, [Store(acc, Var(w), identity)], "vector"),
                    Loop(t, extent, [If(Compare("lt", row, k.const(rows)), [
                        Loop(w, width, [Store(acc, Var(w), combined(Load(acc, Var(w), acc_dt), row, rest))],
                             "vector")])]),
                    Loop(w, width, [self.store([segment] + rest)], "vector")]

        return self.over_invocations(starts.type.shape[0], per_segment, work=values.type.num_elements)

    def _scatter(self, op) -> list:
        """One invocation per (row, chunk of `span` positions, column): it copies data's chunk into the output,
        then walks the row's indices in order and writes (or combines into) the positions of its own chunk, each
        a whole row of the trailing dims (contiguous) where there are some. Each position is written by one
        invocation only, in index order: deterministic, without atomics. The chunks make enough invocations for
        the target (`scatter_invocations`), each re-reading the row's indices. A GPU gives each column of the
        trailing dims its own invocation (`SPLIT_COLUMNS`; a warp's threads then read the same indices and write
        one row together), and every target reads `SCATTER_WALK` indices at once, so that their loads overlap
        instead of each waiting on the last (a serial walk from L2 is latency-bound)."""
        data, index, updates = op.operands
        axis = index.type.rank - 1
        lead, size, count = data.type.shape[:axis], data.type.shape[axis], index.type.shape[-1]
        tail = data.type.shape[axis + 1:]
        rows, width, dt = _count(lead), _count(tail), data.type.dtype
        columns = width if self.SPLIT_COLUMNS and tail else 1
        wanted = self.scatter_invocations(self.hint(rows) * (size + count) * width)
        chunks = max(1, min(size, -(-wanted // max(1, self.hint(rows) * columns))))
        span = -(-size // chunks)
        chunks = -(-size // span)
        ragged = size % span != 0
        reduction = op.attrs["reduction"]
        self.schedule["scatter"] = (f"{reduction}, {chunks} chunks of {span} a row"
                                    + (f", rows of {width}" if tail else "")
                                    + (", a column an invocation" if columns > 1 else ""))

        def invocation(i: Expr):
            """(copy, walk) of invocation `i`: its chunk's copy, and `walk(j, read)`, the visit of index `j` (read
            as `read(j)`, an index) that writes update `j` where it lands in this chunk, as (read, put) statements."""
            column, i = (i % columns, i // columns) if columns > 1 else (None, i)
            row, base = (i // chunks, (i % chunks) * span) if chunks > 1 else (i, k.const(0))
            at = _delinearize(row, lead)

            def across(flat_position: Expr, fill) -> list:
                """`fill(flat element, index within the trailing dims)` for this invocation's elements at
                `flat_position`: its column, or every one."""
                if not tail:
                    return fill(flat_position, [])
                if column is not None:
                    return fill(flat_position * width + column, _delinearize(column, tail))
                w = self.fresh("w")
                return [Loop(w, width, fill(flat_position * width + Var(w), _delinearize(Var(w), tail)),
                             self.SCATTER_COPY)]

            p = self.fresh("p")
            position = base + Var(p)
            copy = across(row * size + position,
                          lambda flat, rest: [Store("out0", flat, self.value(data, at + [position] + rest))])
            if ragged:
                copy = [If(Compare("lt", position, k.const(size)), copy)]
            copy_kind = "serial" if ragged or tail else self.SCATTER_COPY

            def walk(j: Expr, read=None, guard: Expr | None = None) -> tuple[Assign, If]:
                """Index `j` into a fresh `q`, clamped to [-1, size] (either end: out of range) so that it is index
                arithmetic, 32-bit where the kernel's indices are (`index32`); update `j` written where it lands in
                this chunk (and `guard` holds)."""
                q = self.fresh("q")
                where = read(j) if read else self.value(index, at + [j])
                if chunks == 1:
                    mine = [Compare("ge", Var(q), k.const(0)), Compare("lt", Var(q), k.const(size))]
                else:
                    mine = [Compare("ge", Var(q), base), Compare("lt", Var(q), base + span)]
                    if ragged:
                        mine.append(Compare("lt", Var(q), k.const(size)))

                def put(flat, rest):
                    value = self.value(updates, at + [j] + rest)
                    if reduction != "none":
                        value = k.Binary(SPLIT_REDUCTIONS[reduction], Load("out0", flat, dt), value)
                    return [Store("out0", flat, value)]

                wide = where if where.dtype == INDEX else Cast(where, INDEX)
                return (Assign(q, k.minimum(k.maximum(wide, -1), k.const(size))),
                        If(_all(mine + ([guard] if guard is not None else [])), across(row * size + Var(q), put)))

            return [Loop(p, span, copy, copy_kind)], walk

        def element(i: Expr) -> list:
            copy, walk = invocation(i)
            return copy + self.walk_in_steps(count, walk)

        total = rows * chunks * columns
        if self.hint(rows) == 1 and isinstance(count, int) and count >= self.scatter_stage_from:
            self.schedule["scatter"] += ", indices staged a tile at a time"
            return self.staged_scatter(total, invocation, index, count, size)
        return self.over_invocations(total, element, work=rows * (size + chunks * count) * width)

    def walk_in_steps(self, count: int, walk, start: Expr | int = 0) -> list:
        """Visits of indices start + 0 .. count - 1 in order, `SCATTER_WALK` a step: a step's reads first, so that
        their loads overlap, then its writes in order."""
        step = max(1, min(self.SCATTER_WALK, count))
        blocks, left = divmod(count, step)
        jb, j = self.fresh("jb"), self.fresh("j")
        visits = [walk(start + Var(jb) * step + u) for u in range(step)]
        out = [Loop(jb, blocks, [read for read, _ in visits] + [put for _, put in visits])]
        if left:
            out.append(Loop(j, left, list(walk(start + k.const(blocks * step) + Var(j)))))
        return out

    scatter_stage_from = 1 << 62  # indices from which a one-row scatter reads them through workgroup memory (GPU)

    def staged_scatter(self, total, invocation, index, count: int, size: int) -> list:
        raise NotImplementedError  # only where scatter_stage_from is reachable

    SCATTER_COPY = "vector"  # how a scatter invocation copies its chunk
    SPLIT_COLUMNS = False  # an invocation per column of the rows a scatter or a segment reduction moves
    SCATTER_WALK = 8  # indices a scatter invocation reads at once

    def scatter_invocations(self, work) -> int:
        """Invocations a scatter of `work` (elements copied and indices read) wants: one per core, once worth it."""
        return self.max_groups if work >= MIN_PARALLEL_WORK else 1

    def over_invocations(self, count, element, work) -> list:
        """`element(i)` for each of `count` invocations, spread over the workgroups."""
        return self.parallel(count, work, element)

    def _over_output(self, shape, element, work: int) -> list:
        """A loop nest over `shape` (the first non-unit dim in parallel), `element(idx)` inside."""
        if not shape:
            return element([])
        outer = next((d for d in range(len(shape)) if _over_one(shape[d])), 0)
        last = self.parallel_span(shape, outer, len(shape))
        rest, wrap = self.loops(shape[last + 1:], "serial")
        lead = [k.const(0)] * outer
        count, body = self.parallel_index(shape, outer, last, lambda at: wrap(element(lead + at + rest)))
        return self.parallel(count, work, body)

    def _quantized_matmul(self, op) -> list:
        return quant.quantized_matmul(self, op)

    def _matmul(self, op) -> list:
        packed = quant.packed_matmul(self, op)
        if packed is not None:
            return packed
        a, b = op.operands
        out = op.result.type
        *batch, m, n = out.shape
        kk = a.type.shape[-1]
        acc_dt = _accumulator(out.dtype)
        bvars, wrap_batch = self.loops(batch, "serial")
        static = not any(isinstance(d, Sym) for d in (m, n, kk))
        # a matrix of many rows takes the taller tile of pointwise convolutions (12 accumulators)
        rows = min(POINTWISE_ROWS if static and m >= 2 * POINTWISE_ROWS else MATMUL_ROWS, m) \
            if not isinstance(m, Sym) else MATMUL_ROWS
        tile = self.tile if isinstance(n, Sym) else min(self.tile, n)
        self.schedule.update(tile_m=rows, tile_n=tile)

        def tile_code(m0: Expr, mr: int, n0: Expr, nt: int, depth: tuple | None = None) -> list:
            """The mr x nt tile at (m0, n0) over the whole reduction, or over `depth` = (k0, steps, first,
            last): a block of it, which starts from the partial sums in the output unless first, and leaves
            them there unless last (the output is then the accumulator's type)."""
            acc, kv, r, j = self.fresh("acc"), self.fresh("k"), self.fresh("r"), self.fresh("j")
            a_val = self.fresh("a")
            k0, steps, first, last = depth or (k.const(0), kk, True, True)

            def a_at(row):
                return self.value(a, _broadcast_index(bvars + [m0 + row, k0 + Var(kv)], a.type.shape, out.shape))

            def b_at(col):
                return self.value(b, _broadcast_index(bvars + [k0 + Var(kv), n0 + col], b.type.shape, out.shape))

            cell = Var(r) * nt + Var(j)
            at = linearize(bvars + [m0 + Var(r), n0 + Var(j)], out.shape)
            self.override[op.result] = Cast(Load(acc, cell, acc_dt), out.dtype) if acc_dt != out.dtype \
                else Load(acc, cell, acc_dt)
            start = k.const(0, acc_dt) if first else Load("out0", at, acc_dt)
            return [
                Local(acc, mr * nt, acc_dt),
                Loop(r, mr, [Loop(j, nt, [Store(acc, cell, start)], REG)], "unroll"),
                Loop(kv, steps, [Loop(r, mr, [
                    Assign(a_val, _widen(a_at(Var(r)), acc_dt)),
                    Loop(j, nt, [Store(acc, cell, k.Binary("add", Load(acc, cell, acc_dt),
                                                           k.Binary("mul", Var(a_val, acc_dt),
                                                                    _widen(b_at(Var(j)), acc_dt))))],
                         REG)], "unroll")]),
                Loop(r, mr, [Loop(j, nt, [self.store(bvars + [m0 + Var(r), n0 + Var(j)]) if last else
                                          Store("out0", at, Load(acc, cell, acc_dt))], REG)], "unroll"),
            ]

        def columns(m0: Expr, mr: int) -> list:
            c = self.fresh("c")
            if isinstance(n, Sym):  # full tiles, then the last n % tile columns one at a time
                j = self.fresh("cj")
                return [Loop(c, n // tile, tile_code(m0, mr, Var(c) * tile, tile)),
                        Loop(j, n % tile, tile_code(m0, mr, Var(j) + (n - n % tile), 1))]
            body = [Loop(c, n // tile, tile_code(m0, mr, Var(c) * tile, tile))] if n >= tile else []
            if n % tile:
                body += tile_code(m0, mr, k.const(n - n % tile), n % tile)
            return body

        row_blocks, tail_rows = m // rows, m % rows
        batches = _count(batch)
        work = m * n * kk * (batches if isinstance(batches, Sym) else max(1, batches))
        if isinstance(m, Sym):  # full row blocks, then the last m % rows rows one at a time
            r = self.fresh("mr")
            tail = [Loop(r, tail_rows, columns(Var(r) + (m - tail_rows), 1))]
            body = self.parallel(row_blocks, work, lambda i: columns(i * rows, rows), tail)
        elif static and row_blocks >= 2 and (n // tile) * tile * kk * b.type.dtype.itemsize > CACHED_OPERAND_BYTES:
            # partial sums wait in the output between reduction blocks: only where it holds the accumulator's type
            depth = MATMUL_DEPTH_BLOCK if acc_dt == out.dtype and kk > MATMUL_DEPTH_BLOCK else 0
            body = self._matmul_in_slabs(tile_code, m, n, rows, tile, kk * b.type.dtype.itemsize, work, kk, depth)
        elif isinstance(n, Sym) or row_blocks >= 2 or n < 2 * tile:
            tail = columns(k.const(m - tail_rows), tail_rows) if tail_rows else None
            body = self.parallel(row_blocks, work, lambda i: columns(i * rows, rows), tail)
        else:  # few rows (a batch-1 linear layer): spread the columns instead, in tiles as wide as the
            # register tile allows: each row of B is read in runs of several cache lines, not one per page
            wide = min(n, tile * max(1, MATMUL_ROWS // rows))
            self.schedule["tile_n"] = wide
            c_tail = n % wide
            body = []
            for start in range(0, m - tail_rows, rows):
                body += self.parallel(n // wide, work, lambda c, s=start: tile_code(k.const(s), rows, c * wide, wide),
                                      tile_code(k.const(start), rows, k.const(n - c_tail), c_tail) if c_tail else None)
            if tail_rows:
                body += columns(k.const(m - tail_rows), tail_rows)
        return wrap_batch(body)

    def _matmul_in_slabs(self, tile_code, m: int, n: int, rows: int, tile: int, column_bytes: int, work: int,
                         kk: int, depth: int) -> list:
        """A matmul whose B is too large to stay in cache, in slabs of columns that do: every row block goes
        over one slab before the next slab starts, so each tile reads its B columns from cache, not memory.
        With `depth`, each slab goes in blocks of that many reduction steps, all row blocks each, so that the
        block of B in use stays in the first-level cache, and the partial sums wait in the output."""
        per_slab = max(1, CACHED_OPERAND_BYTES // (tile * column_bytes))  # column tiles
        full, tail_cols = n // tile, n % tile
        row_blocks, tail_rows = m // rows, m % rows
        self.schedule["slab_tiles"] = per_slab
        if depth:
            self.schedule["depth_block"] = depth

        def piece(first: Expr, count: int, width: int) -> list:  # `count` tiles of `width` columns from `first`
            def phase(step) -> list:
                def tiles(m0: Expr, mr: int) -> list:
                    if count == 1:
                        return tile_code(m0, mr, first, width, step)
                    c = self.fresh("c")
                    return [Loop(c, count, tile_code(m0, mr, first + Var(c) * width, width, step))]

                tail = tiles(k.const(m - tail_rows), tail_rows) if tail_rows else None
                return self.parallel(row_blocks, work, lambda i: tiles(i * rows, rows), tail)

            return self._in_depth_blocks(kk, depth, phase)

        slab = self.fresh("slab")
        body = [Loop(slab, full // per_slab, piece(Var(slab) * (per_slab * tile), per_slab, tile))]
        if full % per_slab:
            body += piece(k.const(full - full % per_slab) * tile, full % per_slab, tile)
        if tail_cols:
            body += piece(k.const(n - tail_cols), 1, tail_cols)
        return body

    def _in_depth_blocks(self, kk: int, depth: int, phase) -> list:
        """`phase(step)` over a reduction of `kk` steps: once for all of it (step None) without `depth`, else
        once per block of `depth` steps, step = (first step, steps, first block?, last block?): the first and
        last blocks on their own, the ones between in a loop."""
        if not depth:
            return phase(None)
        blocks, kb = -(-kk // depth), self.fresh("kb")
        out = phase((k.const(0), depth, True, False))
        if blocks > 2:
            out.append(Loop(kb, blocks - 2, phase((Var(kb) * depth, depth, False, False)), start=1))
        last = (blocks - 1) * depth
        return out + phase((k.const(last), kk - last, False, True))

    def _register_tiled_matmul(self, op, plan: RegisterTiles) -> list:
        """The SIMT tiled matmul (`_staged_matmul` stages the operands, A k-major): thread (tr, tc) of a
        thread_rows x thread_cols workgroup accumulates `rows` x `cols` outputs of the tile in registers,
        its rows in runs of `group` (see `RegisterTiles.offset`), its columns likewise. Each reduction
        step it reads its rows of the staged A and its columns of the staged B into registers, then does
        rows x cols multiply-adds: each shared-memory read feeds `cols` (or `rows`) of them. The epilogue
        stores straight from the registers."""
        out = op.result.type
        *_, m, n = out.shape
        dt = plan.dtype
        self.schedule.update(register_tile=f"{plan.rows}x{plan.cols}", register_group=plan.group,
                             threads_mn=f"{plan.thread_rows}x{plan.thread_cols}")
        tid = Var("tid")
        trow, tcol, acc, av, bv, kv = (self.fresh(p) for p in ("trow", "tcol", "acc", "av", "bv", "ks"))
        i, j = self.fresh("i"), self.fresh("j")

        def setup(tiles: _Tiles) -> list:
            return [Assign(trow, (tid // plan.thread_cols) * plan.group),
                    Assign(tcol, (tid % plan.thread_cols) * plan.group),
                    Local(acc, plan.rows * plan.cols, dt),
                    Local(av, plan.rows, dt),
                    Local(bv, plan.cols, dt),
                    Loop(i, plan.rows * plan.cols, [Store(acc, Var(i), k.const(0, dt))], "unroll")]

        def multiply(tiles: _Tiles, step: Expr) -> list:
            a_col = tiles.a_at(step) + Var(kv) * tiles.a_stride + Var(trow)
            b_col = tiles.b_at(step) + Var(kv) * tiles.b_stride + Var(tcol)
            product = k.Binary("mul", Load(av, Var(i), dt), Load(bv, Var(j), dt))
            at = Var(i) * plan.cols + Var(j)
            return [Loop(kv, plan.tile_k, [
                Loop(i, plan.rows, [Store(av, Var(i), Load(tiles.a_tile, a_col + plan.offset(Var(i), plan.thread_rows),
                                                           dt))], "unroll"),
                Loop(j, plan.cols, [Store(bv, Var(j), Load(tiles.b_tile, b_col + plan.offset(Var(j), plan.thread_cols),
                                                           dt))], "unroll"),
                Loop(i, plan.rows, [Loop(j, plan.cols, [
                    Store(acc, at, k.Binary("add", Load(acc, at, dt), product))], "unroll")], "unroll"),
            ], "unroll")]

        def epilogue(tiles: _Tiles) -> list:
            row = Var(tiles.m0) + Var(trow) + plan.offset(Var(i), plan.thread_rows)
            col = Var(tiles.n0) + Var(tcol) + plan.offset(Var(j), plan.thread_cols)
            self.override[op.result] = _narrow(Load(acc, Var(i) * plan.cols + Var(j), dt), out.dtype)
            inside = _all(([Compare("lt", row, k.const(m))] if _ragged(m, plan.tile_m) else []) +
                          ([Compare("lt", col, k.const(n))] if _ragged(n, plan.tile_n) else []))
            store = self.store(tiles.bvars + [row, col])
            return [Loop(i, plan.rows, [Loop(j, plan.cols, [If(inside, [store]) if inside is not None else store],
                                             "unroll")], "unroll")]

        return self._staged_matmul(op, plan.tiles(), setup, multiply, epilogue, "registers")

    def _conv2d(self, op) -> list:
        x, w = op.operands
        if all(isinstance(d, int) for d in (*op.result.type.shape[1:], *x.type.shape[1:], *w.type.shape)):
            if self._pointwise(op):  # a batch known only at run time is fine: it is the outermost loop
                return self._pointwise_conv(op)
            direct = self._windowed_conv(op)
            if direct is not None:
                return direct
        x, w = op.operands
        out = op.result.type
        n_, o_, oh, ow = out.shape
        _, c_, h, wd = x.type.shape
        _, cg, kh, kw = w.type.shape
        sh, sw = op.attrs.get("strides", (1, 1))
        dh, dw = op.attrs.get("dilations", (1, 1))
        pt, _pb, pl, _pr = op.attrs.get("pad", (0, 0, 0, 0))
        per_group = o_ // op.attrs.get("groups", 1)
        acc_dt = _accumulator(out.dtype)
        ob = min(MATMUL_ROWS, o_)
        padded_h = any(op.attrs.get("pad", (0, 0, 0, 0))[:2])
        padded_w = any(op.attrs.get("pad", (0, 0, 0, 0))[2:])
        # A 1x1 convolution is a matmul over channels: its rows are one contiguous run of oh*ow pixels,
        # indexed as row 0 of a wider image, so that vector tiles are full width whatever the image width.
        flat = self._pointwise(op)
        rows_out, cols_out = (1, oh * ow) if flat else (oh, ow)
        tile = self.tile if isinstance(cols_out, Sym) else min(self.tile, cols_out)
        self.schedule.update(tile_channels=ob, tile_x=tile)
        if flat:
            self.schedule["pixels"] = "flat"
        nv = self.fresh("n")

        def tile_code(o0: Expr, nb: int, y: Expr, x0: Expr, nt: int) -> list:
            acc, cv, ky, kx, r, j = (self.fresh(p) for p in ("acc", "c", "ky", "kx", "r", "j"))
            wv = self.fresh("w")
            o = o0 + Var(r)
            iy = y * sh + Var(ky) * dh - pt
            ix = (x0 + Var(j)) * sw + Var(kx) * dw - pl
            ci = Var(cv) if per_group == o_ else (o // per_group) * cg + Var(cv)
            load = self.value(x, [Var(nv), ci, _clamp(iy, h) if padded_h else iy, _clamp(ix, wd) if padded_w else ix])
            conds = ([_in_range(iy, h)] if padded_h else []) + ([_in_range(ix, wd)] if padded_w else [])
            cond = _all(conds)
            pixel = _widen(load, acc_dt) if cond is None else Select(cond, _widen(load, acc_dt), k.const(0, acc_dt))
            cell = Var(r) * nt + Var(j)
            self.override[op.result] = Cast(Load(acc, cell, acc_dt), out.dtype) if acc_dt != out.dtype \
                else Load(acc, cell, acc_dt)
            return [
                Local(acc, nb * nt, acc_dt),
                Loop(r, nb, [Loop(j, nt, [Store(acc, cell, k.const(0, acc_dt))], REG)], "unroll"),
                Loop(cv, cg, [Loop(ky, kh, [Loop(kx, kw, [Loop(r, nb, [
                    Assign(wv, _widen(self.value(w, [o, Var(cv), Var(ky), Var(kx)]), acc_dt)),
                    Loop(j, nt, [Store(acc, cell, k.Binary("add", Load(acc, cell, acc_dt),
                                                           k.Binary("mul", Var(wv, acc_dt), pixel)))], REG),
                ], "unroll")])])]),
                Loop(r, nb, [Loop(j, nt, [self.store([Var(nv), o, y, x0 + Var(j)])], REG)], "unroll"),
            ]

        def rows_of(o0: Expr, nb: int) -> list:
            y, c = self.fresh("y"), self.fresh("x")
            if isinstance(cols_out, Sym):  # an image size known at run time: full tiles, then pixel by pixel
                j = self.fresh("xj")
                tail_start = cols_out - cols_out % tile
                full = Loop(c, cols_out // tile, tile_code(o0, nb, Var(y), Var(c) * tile, tile))
                return [Loop(y, rows_out, [full, Loop(j, cols_out % tile,
                                                      tile_code(o0, nb, Var(y), Var(j) + tail_start, 1))])]
            inner = [Loop(c, cols_out // tile, tile_code(o0, nb, Var(y), Var(c) * tile, tile))] \
                if cols_out >= tile else []
            if cols_out % tile:
                inner += tile_code(o0, nb, Var(y), k.const(cols_out - cols_out % tile), cols_out % tile)
            return [Loop(y, rows_out, inner)]

        blocks, tail = o_ // ob, o_ % ob
        work = n_ * o_ * oh * ow * cg * kh * kw
        body = self.parallel(blocks, work, lambda i: rows_of(i * ob, ob),
                             rows_of(k.const(o_ - tail), tail) if tail else None)
        return [Loop(nv, n_, body)]

    def _windowed_conv(self, op) -> list | None:
        """A convolution of static sizes with a small window, as rows of vector tiles (`tile_channels`
        output channels by `tile_x` pixels), the window unrolled (a dense conv's window rows looped). Each
        tap of a tile reads the image plainly where the tile's window stays inside it, which is most tiles:
        the chunk loop of interior rows. The first and last chunk of each row, whose lanes past the edge read
        zeros through masked loads, are emitted on their own, and so are the border rows (above and below the
        interior, one loop), whose taps on a row outside the image read a clamped row and zero it. The last
        outputs of a row take a chunk of the next power of two, overlapping the one before by its excess (it
        recomputes a few outputs), and the last block of channels overlaps the one before it. None for a large
        window (a depthwise 7x7): the general loop nest handles those, and convolutions whose sizes other than
        the batch are known only at run time. A strided conv's row narrower than a vector is one chunk of the
        next power of two: its lanes past the row are computed and not stored.

        Where rows would leave vector lanes idle (ResNet's 7x7 and 14x14 rows are narrower than a vector, its
        28- and 56-wide ones overlap their last chunk), a stride-1 conv reads its pixels as one flat run
        instead (`_flat_pixel_chunks`): a chunk spans several rows, each tap is a run of the flat input at a
        constant offset, and the lanes whose tap falls outside the image (a column past the edge, a row above
        or below) are masked, by constant masks where the chunk's position is a constant."""
        x, w = op.operands
        out = op.result.type
        n_, o_, oh, ow = out.shape
        h, wd = x.type.shape[2:]
        _, cg, kh, kw = w.type.shape
        # A dense conv already loops over its input channels; looping over the window's rows too costs little
        # next to that and keeps its kernel small. A depthwise conv's whole window is unrolled, and so is a
        # conv of few input channels (an RGB stem's 3x3).
        window_rows_looped = kh > 1 and cg * kh * kw > MAX_UNROLLED_WINDOW
        if (kw if window_rows_looped else kh * kw) > MAX_UNROLLED_TAPS:
            return None
        sh, sw = op.attrs.get("strides", (1, 1))
        dh, dw = op.attrs.get("dilations", (1, 1))
        pt, _pb, pl, _pr = op.attrs.get("pad", (0, 0, 0, 0))
        per_group = o_ // op.attrs.get("groups", 1)
        acc_dt = _accumulator(out.dtype)
        pieces = _column_pieces(ow, wd, kw, sw, dw, pl, self.tile)
        flat = self._flat_pixel_chunks(op, pieces) if kh * kw <= MAX_UNROLLED_TAPS else None
        if flat:  # one row of oh * ow pixels, every tap unrolled
            window_rows_looped = False
            rows, border_rows, pieces = (0, 1), [], flat
            self.schedule["pixels"] = "flat"
        else:
            rows = _inside(oh, h, kh, sh, dh, pt)
            border_rows = [y for y in range(oh) if not rows[0] <= y < rows[1]]
            if 1 < ow < self.tile and ow & (ow - 1) and pieces[0][1] < self.tile // 2:
                # a row whose chunks would be narrower than a vector, in one chunk of the next power of two:
                # its lanes past the row compute what nobody stores (their reads stay inside the image or are
                # masked), where two overlapping chunks would each fill part of a vector
                pieces = [(0, _power_of_two_from(ow), None)]
        # Channels of one group share the pixels they read; a depthwise conv's channels share nothing, and one
        # channel per tile leaves registers for its whole window's weights. A flat or padded chunk narrower than
        # the tile takes twice the channels: 12 accumulators (independent FMA chains) either way. (Rows of
        # overlapping chunks keep 6: ResNet's 56 -> 28 downsampling ran 11% slower with 12.)
        chunk = max(p[1] for p in pieces)
        wide = chunk < self.tile and (flat or len(pieces) == 1)
        ob = self._channel_block(min(per_group, o_), WINDOW_ROWS * (2 if wide else 1), 2 if chunk == self.tile else 1,
                                 _unaliased_rows(cg * kh * kw * w.type.dtype.itemsize))
        self.schedule.update(tile_channels=ob, tile_x=max(p[1] for p in pieces), border_rows=len(border_rows))
        stored = oh * ow if flat else ow  # lanes of a chunk past this are computed, not stored
        nv = self.fresh("n")

        def flat_inside(p0: int, ky: int, kx: int, j: int) -> bool:
            p = p0 + j
            return 0 <= p // ow + ky * dh - pt < h and 0 <= p % ow + kx * dw - pl < wd

        def taps_at(x0: int | None, width: int) -> list[tuple[int, int, bool]]:
            """(ky, kx, masked) for the taps of a tile at columns x0.. (flat pixels: at pixels x0..; None: a
            chunk of a loop, inside the image along x, or for flat pixels anywhere) that read the image;
            `masked` where only some of its lanes do."""
            out_taps = []
            for ky in range(kh):
                for kx in range(kw):
                    if x0 is None:
                        inside = [not flat or (ky * dh, kx * dw) == (pt, pl), True]  # flat: masked but the centre
                    elif flat:
                        inside = [flat_inside(x0, ky, kx, j) for j in range(width)]
                    else:
                        inside = [0 <= (x0 + j) * sw + kx * dw - pl < wd for j in range(width)]
                    if any(inside):
                        out_taps.append((ky, kx, not all(inside)))
            return out_taps

        def flat_pixel(ci: Expr, x0: Expr, j: Expr, width: int, ky: int, kx: int, masked: bool) -> Expr:
            """The flat input run of tap (ky, kx) for the chunk at pixel x0 (stride 1 and ow == wd, so output
            pixel p reads input pixel p + a constant), lanes outside the image zero. A lane's row and column
            come from the chunk's first pixel and the rows its lanes wrap past: compares, not divisions."""
            plane = h * wd
            at = x0 + j + ((ky * dh - pt) * wd + kx * dw - pl)
            base = (Var(nv) * x.type.shape[1] + ci) * plane
            if not masked:
                return _widen(Load(self.inputs[x], base + at, x.type.dtype), acc_dt)
            column = x0 % ow + j
            wraps = k.const(0)
            for t in range(1, (ow + width - 2) // ow + 1):
                wraps = wraps + Select(Compare("ge", column, k.const(t * ow)), k.const(1), k.const(0))
            inside = _all([_in_range(x0 // ow + wraps + (ky * dh - pt), h),
                           _in_range(column - wraps * ow + (kx * dw - pl), wd), _in_range(at, plane)])
            return Select(inside, _widen(Load(self.inputs[x], base + _clamp(at, plane), x.type.dtype), acc_dt),
                          k.const(0, acc_dt))

        # rows of the window that some border row finds outside the image: read through a clamped row, then zeroed
        outside = {ky for ky in range(kh) for y in border_rows if not 0 <= y * sh + ky * dh - pt < h}

        self.schedule["window"] = "rows looped" if window_rows_looped else "unrolled"

        def tile_code(o0: Expr, nb: int, y: Expr, x0: Expr, chunk: int, taps, border: bool) -> list:
            acc, cv, r, j, wv, kyv = (self.fresh(p) for p in ("acc", "c", "r", "j", "w", "ky"))
            o = o0 + Var(r)
            ci = Var(cv) if per_group == o_ else (o // per_group) * cg + Var(cv)
            cell = Var(r) * chunk + Var(j)
            self.override[op.result] = _narrow(Load(acc, cell, acc_dt), out.dtype)
            if window_rows_looped:  # one tap per column of the window, its row the loop's
                taps = list({kx: (Var(kyv), kx, masked) for ky, kx, masked in taps}.values())
            steps = []
            for ky, kx, masked in taps:
                if flat:
                    pixel = flat_pixel(ci, x0, Var(j), chunk, ky, kx, masked)
                else:
                    iy, ix = y * sh + (ky * dh - pt), (x0 + Var(j)) * sw + (kx * dw - pl)
                    row_masked = border and (window_rows_looped or ky in outside)
                    pixel = _widen(self.value(x, [Var(nv), ci, _clamp(iy, h) if row_masked else iy,
                                                  _clamp(ix, wd) if masked else ix]), acc_dt)
                    if masked:
                        pixel = Select(_in_range(ix, wd), pixel, k.const(0, acc_dt))
                    if row_masked:  # the same for every lane: a select after a plain load
                        pixel = Select(_in_range(iy, h), pixel, k.const(0, acc_dt))
                steps.append(Loop(r, nb, [
                    Assign(wv, _widen(self.value(w, [o, Var(cv), _lift_index(ky), k.const(kx)]), acc_dt)),
                    Loop(j, chunk, [Store(acc, cell, k.Binary("add", Load(acc, cell, acc_dt),
                                                              k.Binary("mul", Var(wv, acc_dt), pixel)))], REG),
                ], "unroll"))
            if window_rows_looped and steps:
                steps = [Loop(kyv, kh, steps)]
            return [
                Local(acc, nb * chunk, acc_dt),
                Loop(r, nb, [Loop(j, chunk, [Store(acc, cell, k.const(0, acc_dt))], REG)], "unroll"),
                *([Loop(cv, cg, steps)] if steps else []),
                Loop(r, nb, [Loop(j, min(chunk, stored), [self.store([Var(nv), o, y, x0 + Var(j)])], REG)], "unroll"),
            ]

        def row(o0: Expr, nb: int, y: Expr, border: bool) -> list:
            body = []
            for x0, width, count in pieces:
                if count is None:
                    body += tile_code(o0, nb, y, k.const(x0), width, taps_at(x0, width), border)
                else:
                    c = self.fresh("x")
                    body.append(Loop(c, count, tile_code(o0, nb, y, Var(c) * width + x0, width, taps_at(None, width),
                                                         border)))
            return body

        def block(o0: Expr, nb: int) -> list:
            y, t = self.fresh("y"), self.fresh("t")
            lo, hi = rows
            body = [Loop(y, hi - lo, row(o0, nb, Var(y), False), start=lo)] if hi > lo else []
            if border_rows:  # the rows above and below the interior, as one loop
                at = Var(t) if hi == oh else Var(t) + hi if lo == 0 else \
                    Select(Compare("lt", Var(t), k.const(lo)), Var(t), Var(t) + (hi - lo))
                body.append(Loop(t, len(border_rows), row(o0, nb, at, True)))
            return body

        # the last block overlaps the one before when ob does not divide the channels (it recomputes a few)
        # rather than repeat the whole loop nest for a short block
        blocks = -(-o_ // ob)
        work = n_ * o_ * oh * ow * cg * kh * kw
        first = (lambda i: i * ob) if o_ % ob == 0 else (lambda i: k.minimum(i * ob, o_ - ob))
        return [Loop(nv, n_, self.parallel(blocks, work, lambda i: block(first(i), ob)))]

    def _channel_block(self, channels: int, target: int, vectors: int, most_rows: int = 1 << 30) -> int:
        """Output channels of a tile of `vectors` vectors a channel: near `target`, the one that wastes fewest
        channels in the last block (which overlaps the one before), within what the registers hold (32 vector
        registers with AVX-512, else 16; four left for pixels and weights) and `most_rows`. 64 channels in
        blocks of 12 compute 72; in 16, 64."""
        most = min(((32 if self.desc.extra.get("vector_bits", 256) >= 512 else 16) - 4) // vectors, most_rows)
        target = min(target, most)
        options = range(max(1, target * 2 // 3), most + 1) if channels > target else [channels]

        return min(options, key=lambda b: (-(-channels // b) * b - channels, abs(b - target), -b))

    def _flat_pixel_chunks(self, op, row_pieces: list) -> list | None:
        """The chunks, as `_column_pieces` gives them, that cover a conv's output pixels as one flat run where
        that takes fewer vector operations than rows (`row_pieces`): rows narrower than a vector leave lanes
        idle, and a row that is not a multiple of the chunk overlaps its last chunk. Only for a stride-1 window
        with ow == wd (a tap is then a run of the input at a constant offset) of a dispatch input, writing
        flat pixels (`_flat_epilogue`). The width is the tile or half of it, whichever takes fewer operations
        (half on a tie: a chunk of one vector has 12 channels, their weights broadcast inside the FMAs). The
        chunks run in a loop, masks from each chunk's position, where the conv's reduction is deep enough to
        hide that cost; else up to FLAT_CONSTANT_CHUNKS chunks are each their own code, with constant masks
        (a loop would cost compile time: a constant chunk of 16 channels is thousands of instructions)."""
        x, w = op.operands
        oh, ow = op.result.type.shape[2:]
        lanes, pixels = self.tile // 2, oh * ow
        if (pixels < lanes or tuple(op.attrs.get("strides", (1, 1))) != (1, 1) or ow != x.type.shape[3]
                or x not in self.inputs or not self._flat_epilogue(op)):
            return None
        row_ops = oh * sum(-(-width // lanes) * (count or 1) for _, width, count in row_pieces)
        width = min((c for c in (self.tile, lanes) if c <= pixels), key=lambda c: (-(-pixels // c) * c // lanes, c))
        if -(-pixels // width) * width // lanes >= row_ops:
            return None
        # the last pixels in a chunk of the next power of two (overlapping the one before by its excess): a
        # narrower vector, or a scalar, takes one FMA port where a full one takes both (Zen 4's 512 bits)
        rest = _power_of_two_from(pixels % width)
        full, last = pixels // width, [(pixels - rest, rest, None)] if rest else []
        if w.type.shape[1] >= FLAT_LOOP_MIN_CHANNELS:  # deep enough to pay for each chunk's masks: one loop
            return [(0, width, full)] + last if full > 1 else [(0, width, None)] * full + last
        if full + len(last) <= FLAT_CONSTANT_CHUNKS:  # else each chunk its own code, masks constant
            return [(p0, width, None) for p0 in range(0, full * width, width)] + last
        return None

    def _pointwise_conv(self, op) -> list:
        """A 1x1 convolution (see `_pointwise`) as the matmul weights (O x C) times image (C x pixels), the
        pixels one flat run: register tiles of `tile_channels` x `tile_x` outputs, the short last tile in
        power-of-two vector pieces. Which operand's loop runs outside follows their sizes: the smaller one
        is re-read once per tile of the other, so it should be the one that stays in cache."""
        x, w = op.operands
        out = op.result.type
        n_, o_, oh, ow = out.shape
        cg = w.type.shape[1]
        pixels = oh * ow
        acc_dt = _accumulator(out.dtype)
        ob = min(POINTWISE_ROWS, o_)
        tile = min(self.tile, pixels)
        # Pixels outside when the image is too large to stay in cache while every channel block re-reads it,
        # and the outputs are few enough channels that writing a pixel tile of each is few store streams.
        pixels_outside = cg * pixels * x.type.dtype.itemsize > CACHED_OPERAND_BYTES and o_ <= MAX_STORE_STREAMS
        self.schedule.update(tile_channels=ob, tile_x=tile, pixels="flat",
                             outer="pixels" if pixels_outside else "channels")
        nv = self.fresh("n")

        def tile_code(o0: Expr, nb: int, p0: Expr, nt: int, depth: tuple | None = None) -> list:
            acc, cv, r, j, wv = (self.fresh(p) for p in ("acc", "c", "r", "j", "w"))
            c0, steps, first, last = depth or (k.const(0), cg, True, True)  # see _in_depth_blocks
            o = o0 + Var(r)
            cell = Var(r) * nt + Var(j)
            pixel = _widen(self.value(x, [Var(nv), c0 + Var(cv), k.const(0), p0 + Var(j)]), acc_dt)
            self.override[op.result] = _narrow(Load(acc, cell, acc_dt), out.dtype)
            at = linearize([Var(nv), o, k.const(0), p0 + Var(j)], out.shape)
            return [
                Local(acc, nb * nt, acc_dt),
                Loop(r, nb, [Loop(j, nt, [Store(acc, cell, k.const(0, acc_dt) if first else Load("out0", at, acc_dt))],
                                  REG)], "unroll"),
                Loop(cv, steps, [Loop(r, nb, [
                    Assign(wv, _widen(self.value(w, [o, c0 + Var(cv), k.const(0), k.const(0)]), acc_dt)),
                    Loop(j, nt, [Store(acc, cell, k.Binary("add", Load(acc, cell, acc_dt),
                                                           k.Binary("mul", Var(wv, acc_dt), pixel)))], REG),
                ], "unroll")]),
                Loop(r, nb, [Loop(j, nt, [self.store([Var(nv), o, k.const(0), p0 + Var(j)]) if last else
                                          Store("out0", at, Load(acc, cell, acc_dt))], REG)], "unroll"),
            ]

        def channels(p0: Expr, nt: int) -> list:  # every channel block, at one pixel tile
            c = self.fresh("o")
            body = [Loop(c, o_ // ob, tile_code(Var(c) * ob, ob, p0, nt))] if o_ >= ob else []
            return body + (tile_code(k.const(o_ - o_ % ob), o_ % ob, p0, nt) if o_ % ob else [])

        def pixel_tiles(o0: Expr, nb: int, depth) -> list:  # every pixel tile, at one channel block
            c = self.fresh("x")
            body = [Loop(c, pixels // tile, tile_code(o0, nb, Var(c) * tile, tile, depth))]
            return body + (tile_code(o0, nb, k.const(pixels - pixels % tile), pixels % tile, depth)
                           if pixels % tile else [])

        work = n_ * o_ * pixels * cg
        if pixels_outside:
            tail = channels(k.const(pixels - pixels % tile), pixels % tile) if pixels % tile else None
            body = self.parallel(pixels // tile, work, lambda i: channels(i * tile, tile), tail)
        else:
            # a deep reduction goes in blocks, each over every channel block: the image's rows of a block
            # stay in the first-level cache while the weights stream, and partial sums wait in the output
            depth = MATMUL_DEPTH_BLOCK if acc_dt == out.dtype and cg > MATMUL_DEPTH_BLOCK else 0
            if depth:
                self.schedule["depth_block"] = depth

            def phase(step) -> list:
                tail = pixel_tiles(k.const(o_ - o_ % ob), o_ % ob, step) if o_ % ob else None
                return self.parallel(o_ // ob, work, lambda i: pixel_tiles(i * ob, ob, step), tail)

            body = self._in_depth_blocks(cg, depth, phase)
        return [Loop(nv, n_, body)]

    def _pointwise(self, op) -> bool:
        """Whether conv `op` reads and writes pixels as flat runs: a 1x1, stride-1, unpadded, ungrouped
        convolution of a dispatch input, whose epilogue is elementwise with per-pixel or per-channel
        operands, so that the index (n, c, 0, p) linearizes to pixel p of every operand."""
        x, w = op.operands
        if w.type.shape[2:] != (1, 1) or x not in self.inputs or op.attrs.get("groups", 1) != 1:
            return False
        if tuple(op.attrs.get("strides", (1, 1))) != (1, 1) or any(op.attrs.get("pad", (0, 0, 0, 0))):
            return False
        return self._flat_epilogue(op)

    def _flat_epilogue(self, op) -> bool:
        """Whether every other op of the dispatch is elementwise with per-pixel or per-channel operands of
        conv `op`'s output, so that the index (n, c, 0, p) linearizes to pixel p of each of them."""
        plane = tuple(op.result.type.shape[2:])
        elementwise = set(k.UNARY_OPS) | set(k.BINARY_OPS) | {"cmp", "select", "cast", "constant"}
        for other in self.fn.ops:
            if other is op:
                continue
            if other.name.removeprefix("rt.") not in elementwise:
                return False
            for v in (*other.operands, *other.results):
                if v.type.rank and (v.type.rank != 4 or tuple(v.type.shape[2:]) not in (plane, (1, 1))):
                    return False
        return True

    def _max_pool2d(self, op) -> list:
        return self._pool(op, "max")

    def _avg_pool2d(self, op) -> list:
        return self._pool(op, "avg")

    def _pool(self, op, kind: str) -> list:
        x = op.operands[0]
        out = op.result.type
        n_, c_, oh, ow = out.shape
        h, wd = x.type.shape[2:]
        kh, kw = op.attrs["kernel"]
        sh, sw = op.attrs.get("strides", (1, 1))
        dh, dw = op.attrs.get("dilations", (1, 1))
        pad = op.attrs.get("pad", (0, 0, 0, 0))
        acc_dt = _accumulator(out.dtype) if kind == "avg" else out.dtype
        include_pad = op.attrs.get("count_include_pad", False)
        padded = any(pad)
        windowed = self._windowed_pool(op, kind, acc_dt, kind == "max" or include_pad or not padded)
        if windowed is not None:
            return windowed

        def element(idx):
            nv, cv, y, xo = idx
            acc, count, ky, kx = self.fresh("acc"), self.fresh("count"), self.fresh("ky"), self.fresh("kx")
            iy, ix = y * sh + Var(ky) * dh - pad[0], xo * sw + Var(kx) * dw - pad[2]
            v = _widen(self.value(x, [nv, cv, _clamp(iy, h) if padded else iy, _clamp(ix, wd) if padded else ix]),
                       acc_dt)
            inside = _all([_in_range(iy, h), _in_range(ix, wd)]) if padded else None
            if kind == "max":
                lowest = -math.inf if acc_dt.is_float else int(np.iinfo(acc_dt.np_dtype).min)
                v = v if inside is None else Select(inside, v, k.const(lowest, acc_dt))
                update = [Assign(acc, k.Binary("max", Var(acc, acc_dt), v))]
                init = [Assign(acc, k.const(lowest, acc_dt))]
                result = Var(acc, acc_dt)
            else:
                v = v if inside is None else Select(inside, v, k.const(0, acc_dt))
                update = [Assign(acc, k.Binary("add", Var(acc, acc_dt), v))]
                init = [Assign(acc, k.const(0, acc_dt))]
                if include_pad or not padded:
                    result = k.Binary("mul", Var(acc, acc_dt), k.const(1.0 / (kh * kw), acc_dt))
                else:
                    update.append(Assign(count, k.Binary("add", Var(count, acc_dt),
                                                          Select(inside, k.const(1, acc_dt), k.const(0, acc_dt)))))
                    init.append(Assign(count, k.const(0, acc_dt)))
                    result = k.Binary("div", Var(acc, acc_dt), Var(count, acc_dt))
            self.override[op.result] = Cast(result, out.dtype) if acc_dt != out.dtype else result
            return [*init, Loop(ky, kh, [Loop(kx, kw, update)]), self.store(idx)]

        return self._over_output(out.shape, element, work=out.num_elements * kh * kw)

    def _windowed_pool(self, op, kind: str, acc_dt: DType, fixed_count: bool) -> list | None:
        """A pool of static sizes on a CPU, as rows of vector chunks (`_column_pieces`, as a windowed conv's):
        each tap of the window is a (strided) vector load, masked where it leaves the image. None where the
        general loop nest serves: GPUs (their threads cover the outputs), sizes known at run time, windows
        larger than `MAX_UNROLLED_TAPS`, and an average whose divisor changes with the padding it meets."""
        x = op.operands[0]
        out = op.result.type
        n_, c_, oh, ow = out.shape
        h, wd = x.type.shape[2:]
        kh, kw = op.attrs["kernel"]
        if (isinstance(self, _GpuLowering) or not fixed_count or kh * kw > MAX_UNROLLED_TAPS
                or not all(isinstance(d, int) for d in (*out.shape, *x.type.shape))):
            return None
        sh, sw = op.attrs.get("strides", (1, 1))
        dh, dw = op.attrs.get("dilations", (1, 1))
        pt, _pb, pl, _pr = op.attrs.get("pad", (0, 0, 0, 0))
        pieces = _column_pieces(ow, wd, kw, sw, dw, pl, self.tile)
        lowest = -math.inf if acc_dt.is_float else int(np.iinfo(acc_dt.np_dtype).min)
        combine, start = ("max", lowest) if kind == "max" else ("add", 0)
        self.schedule.update(tile_x=max(p[1] for p in pieces))

        def chunk_code(plane: Expr, y: Expr, x0: Expr, width: int, at: int | None) -> list:
            acc, j = self.fresh("acc"), self.fresh("j")
            body = []
            for ky in range(kh):
                for kx in range(kw):
                    iy, ix = y * sh + (ky * dh - pt), (x0 + Var(j)) * sw + (kx * dw - pl)
                    # at None: a chunk of the interior loop, inside the image along x
                    inside = [True] if at is None else [0 <= (at + i) * sw + kx * dw - pl < wd for i in range(width)]
                    if not any(inside):
                        continue
                    masked = not all(inside)
                    v = _widen(self.value(x, [plane // c_, plane % c_, _clamp(iy, h),
                                              _clamp(ix, wd) if masked else ix]), acc_dt)
                    cond = _all([_in_range(iy, h)] + ([_in_range(ix, wd)] if masked else []))
                    body.append(Loop(j, width, [Store(acc, Var(j), k.Binary(
                        combine, Load(acc, Var(j), acc_dt), Select(cond, v, k.const(start, acc_dt))))], REG))
            result = Load(acc, Var(j), acc_dt)
            if kind == "avg":
                result = k.Binary("mul", result, k.const(1.0 / (kh * kw), acc_dt))
            self.override[op.result] = Cast(result, out.dtype) if acc_dt != out.dtype else result
            return [Local(acc, width, acc_dt), Loop(j, width, [Store(acc, Var(j), k.const(start, acc_dt))], REG),
                    *body, Loop(j, min(width, ow), [self.store([plane // c_, plane % c_, y, x0 + Var(j)])], REG)]

        def plane_rows(plane: Expr) -> list:
            y, body = self.fresh("y"), []
            for x0, width, count in pieces:
                if count is None:
                    body += chunk_code(plane, Var(y), k.const(x0), width, x0)
                else:
                    c = self.fresh("x")
                    body.append(Loop(c, count, chunk_code(plane, Var(y), Var(c) * width + x0, width, None)))
            return [Loop(y, oh, body)]

        return self.parallel(n_ * c_, out.num_elements * kh * kw, plane_rows)


def _power_of_two_from(n: int) -> int:
    """The least power of two at least `n` (0 for 0): the width of a chunk that covers n last outputs."""
    return 1 << (n - 1).bit_length() if n else 0


def _column_pieces(ow: int, wd: int, kw: int, sw: int, dw: int, pl: int, tile: int) -> list:
    """How a windowed convolution covers a row of `ow` outputs with chunks of a power-of-two width (at most
    `tile`), and where `ow` is not a multiple, its last outputs with a chunk of the next power of two that
    overlaps the one before by its excess: (x0, width, count) pieces in order, count None for one chunk at x0,
    else a loop of `count` chunks from x0 whose windows stay inside the image along x."""
    lo, hi = _inside(ow, wd, kw, sw, dw, pl)
    chunk = 1 << (min(tile, ow).bit_length() - 1)
    starts = list(range(0, ow - chunk + 1, chunk))
    looped = [s for s in starts if s >= lo and s + chunk <= hi]
    out = []
    for s in starts:
        if s not in looped:
            out.append((s, chunk, None))
        elif s == looped[0]:
            out.append((s, chunk, len(looped)))
    rest = _power_of_two_from(ow % chunk)
    return out + ([(ow - rest, rest, None)] if rest else [])


def _lift_index(i) -> Expr:
    return i if isinstance(i, Expr) else k.const(i)


def _inside(out: int, size: int, window: int, stride: int, dilation: int, pad: int) -> tuple[int, int]:
    """[lo, hi): the outputs along one axis whose whole window lies inside the input (lo == hi: none)."""
    lo = min(out, -(-pad // stride))
    hi = (size - 1 - (window - 1) * dilation + pad) // stride + 1
    return lo, max(lo, min(out, hi))


def _accumulator(dt: DType) -> DType:
    """Half-precision sums accumulate in f32."""
    from ..ir.dtypes import f32

    return f32 if dt.is_float and dt.bits < 32 else dt


def _widen(e: Expr, dt: DType) -> Expr:
    return e if e.dtype == dt else Cast(e, dt)


SPLIT_REDUCTIONS = {"sum": "add", "prod": "mul", "max": "max", "min": "min"}  # reduce kind -> combining op


def _identity(kind: str, dt: DType):
    if kind == "sum" or kind == "or":
        return 0
    if kind == "prod" or kind == "and":
        return 1
    if dt.is_float:
        return -math.inf if kind == "max" else math.inf
    info = np.iinfo(dt.np_dtype) if dt.kind != "bool" else None
    if info is None:
        return 0 if kind == "max" else 1
    return info.min if kind == "max" else info.max


# -- matrix fragments (see the module docstring) --------------------------------------------------------

FRAGMENT_TYPES = ("f32", "f16", "bf16")  # float matmuls only: integer ones wrap in their own type, as vmvx does
HELD_EXACTLY_BY = {"f32": ("f32",), "f16": ("f16", "f32"), "bf16": ("bf16", "f32")}  # operand -> fragment types
# Large tiles, largest first: (subgroup rows, subgroup columns, fragment rows, fragment columns of each subgroup).
# One is taken when it fits the target and its tiles give every multiprocessor FILL_WORKGROUPS of them; each
# subgroup then loads 4 + 2 fragments for 8 multiply-accumulates, and each staged element feeds 128 or 64 of them.
# A target measured to do better with others lists its own in `extra["large_fragment_plans"]`, each with its
# fragment k-slices per step (a fifth number).
LARGE_FRAGMENT_PLANS = ((2, 4, 4, 2), (2, 2, 4, 2))
# NVIDIA's tensor cores (wmma, KHR cooperative matrices), with 48 KB of shared memory and staging in runs of 16
# bytes: 4 subgroups of 64x64 with 64-deep steps in one staged copy first (H100, f16 4096^3: 319 TFLOP/s through
# wmma and 313 through Vulkan, against 266 and 204 for the plans above; benchmarks/NOTES.md). The cuda and
# vulkan-spirv targets list these as their `large_fragment_plans`.
NVIDIA_FRAGMENT_PLANS = ((2, 2, 4, 4, 4), (2, 4, 4, 2, 2), (2, 2, 4, 2, 2))
FILL_WORKGROUPS = 2
# Else (small matrices, small targets): (subgroups a workgroup, fragments along each side of a subgroup's
# block), the first that fits the target wins.
FRAGMENT_PLANS = ((4, 2), (2, 2), (1, 2), (1, 1))
FRAGMENT_K_STEPS = 2  # fragment k-slices per staged step of the reduction
# How a tiled matmul's loops are spelled, where a target's compiler does better with another spelling (its
# `extra` says so): the fragment k-slices of a step unrolled (or "serial": a loop), and the reduction's last step
# inside the loop behind a test (or after it, so that the loop loads and stores without one, for the schedules
# "fragments" and "registers" that `extra["peel_last_step"]` lists). NVIDIA's Vulkan compiler takes both for both
# (246 registers and no spill instead of 255 and a spill: H100, f16 4096^3 339 TFLOP/s against 320); NVRTC takes
# both for the fragment matmul (352 against 271-319) and does worse with the peel for register tiles (f32 41
# against 46). benchmarks/NOTES.md.
FRAGMENT_K_LOOP = "unroll"
PEEL_LAST_STEP = ()
VECTOR_STAGING = True  # stage in runs of the target's `vector_copy_bytes` where it has them (`_vector_lanes`)
PAD_BYTES = 16  # rows of the staged tiles are padded by this much, so that a fragment's rows fall in different banks
DEFAULT_MULTIPROCESSORS = 64  # when the target does not say (a named arch, not `host`)


@dataclass(frozen=True)
class FragmentShape:
    """One entry of `TargetDesc.extra["fragments"]` (A and B of one type)."""

    m: int
    n: int
    k: int
    dtype: DType  # A and B
    acc: DType
    width: int

    @property
    def name(self) -> str:
        return f"{self.m}x{self.n}x{self.k}.{self.dtype}.{self.acc}"


def fragment_shapes(desc: TargetDesc) -> list[FragmentShape]:
    """The shapes `desc` advertises, in its order; entries whose A and B types differ are skipped (the
    tiled matmul stages both operands in one type)."""
    out = []
    for entry in desc.extra.get("fragments") or ():
        if entry["a"] != entry["b"]:
            continue
        width = int(entry.get("width") or desc.subgroup_size or 32)
        out.append(FragmentShape(int(entry["m"]), int(entry["n"]), int(entry["k"]), DTYPES[entry["a"]],
                                 DTYPES[entry["acc"]], width))
    return out


def _padded(elements: int, dt: DType) -> int:
    return elements + max(1, PAD_BYTES // dt.itemsize)


@dataclass(frozen=True)
class FragmentTiles:
    """The tiled fragment matmul's plan: a workgroup of `sg_rows` x `sg_cols` subgroups computes a
    `tile_m` x `tile_n` block of the output, each subgroup `frag_rows` x `frag_cols` accumulator
    fragments of it; the reduction steps by `tile_k`, staging A and B tiles in shared memory, in
    `stages` copies (2: the next step is stored while this one is multiplied). Staged rows are
    `a_stride` and `b_stride` elements apart, and each subgroup has an m x n scratch (rows `c_stride`
    apart) through which its accumulators reach the epilogue one at a time."""

    shape: FragmentShape
    sg_rows: int
    sg_cols: int
    frag_rows: int
    frag_cols: int
    k_steps: int
    stages: int = 1

    @property
    def tile_m(self) -> int:
        return self.sg_rows * self.frag_rows * self.shape.m

    @property
    def tile_n(self) -> int:
        return self.sg_cols * self.frag_cols * self.shape.n

    @property
    def tile_k(self) -> int:
        return self.k_steps * self.shape.k

    @property
    def subgroups(self) -> int:
        return self.sg_rows * self.sg_cols

    @property
    def threads(self) -> int:
        return self.subgroups * self.shape.width

    @property
    def a_stride(self) -> int:
        return _padded(self.tile_k, self.shape.dtype)

    @property
    def b_stride(self) -> int:
        return _padded(self.tile_n, self.shape.dtype)

    @property
    def c_stride(self) -> int:
        return _padded(self.shape.n, self.shape.acc)

    @property
    def stage_elements(self) -> tuple[int, int]:
        """Elements of one staged copy of A and of B."""
        return self.tile_m * self.a_stride, self.tile_k * self.b_stride

    @property
    def shared_bytes(self) -> int:
        """The staged A and B tiles and the scratch. Every backend keeps arrays that fragments load in
        their own type, halves as halves, whether it spells the fragments or expands them."""
        staged = self.stages * sum(self.stage_elements) * self.shape.dtype.itemsize
        return staged + self.subgroups * self.shape.m * self.c_stride * self.shape.acc.itemsize


def fragment_tiles(shape: FragmentShape, desc: TargetDesc, rows: int, cols: int = 0,
                   batches: int = 1) -> FragmentTiles | None:
    """The plan for a `batches` x `rows` x `cols` output: the first of `LARGE_FRAGMENT_PLANS` that fits
    `desc`'s workgroup size and shared memory and fills its multiprocessors, else the first of
    `FRAGMENT_PLANS` that fits (a short matrix puts its subgroups side by side); two staged copies where
    the shared memory holds them. None if nothing fits."""
    def fits(plan: FragmentTiles) -> FragmentTiles | None:
        if plan.threads > desc.max_workgroup_size:
            return None
        double = replace(plan, stages=2)
        for p in (double, plan):
            if p.shared_bytes <= desc.shared_memory_bytes:
                return p
        return None

    multiprocessors = desc.extra.get("multiprocessors") or DEFAULT_MULTIPROCESSORS
    large = desc.extra.get("large_fragment_plans") or [(*p, FRAGMENT_K_STEPS) for p in LARGE_FRAGMENT_PLANS]
    for sg_rows, sg_cols, frag_rows, frag_cols, k_steps in large:
        plan = fits(FragmentTiles(shape, sg_rows, sg_cols, frag_rows, frag_cols, k_steps))
        if plan is not None and \
                batches * -(-rows // plan.tile_m) * -(-cols // plan.tile_n) >= FILL_WORKGROUPS * multiprocessors:
            return plan
    for subgroups, frags in FRAGMENT_PLANS:
        sg_rows = 2 if subgroups == 4 and rows > frags * shape.m else 1
        plan = fits(FragmentTiles(shape, sg_rows, subgroups // sg_rows, frags, frags, FRAGMENT_K_STEPS))
        if plan is not None:
            return plan
    return None


def matmul_fragments(fn: Function, desc: TargetDesc) -> FragmentTiles | None:
    """The tiled fragment matmul's plan for dispatch `fn` on `desc`, or None when `fn`'s root is not a
    matmul that fits one of the target's fragment shapes (then the GPU lowering's own matmul runs). A
    shape of the operands' own type comes first, then one they widen into exactly, in the target's order."""
    roots = [op for op in fn.ops if op.name in ROOTS]
    if desc.max_workgroup_size <= 1 or len(roots) != 1 or roots[0].name != "rt.matmul":
        return None
    op = roots[0]
    a, b = op.operands
    *batch, m, n = op.result.type.shape
    kk = a.type.shape[-1]
    if op.result.type.dtype.name not in FRAGMENT_TYPES or not all(isinstance(d, int) for d in (*batch, m, n, kk)):
        return None  # sizes known only at run time: the plain schedule (its kernel says so)
    fits = [s for s in fragment_shapes(desc)
            if s.acc.name == "f32" and m >= s.m and n >= s.n and kk >= s.k
            and all(s.dtype.name in HELD_EXACTLY_BY.get(x.type.dtype.name, ()) for x in (a, b))]
    fits.sort(key=lambda s: s.dtype != a.type.dtype)
    batches = int(np.prod(batch, dtype=np.int64)) if batch else 1
    for shape in fits:
        plan = fragment_tiles(shape, desc, m, n, batches)
        if plan is not None:
            return plan
    return None


@dataclass(frozen=True)
class _Spread:
    """How the first `used` threads of a workgroup cover a rows x cols block in `count` elements each,
    consecutive threads on consecutive rows (`along_rows`) or columns: element e of thread t is at
    (row + offset(e)[0], col + offset(e)[1]), `row` and `col` being the thread's own (expressions of t,
    computed once), the offsets expressions of e alone (constants once unrolled)."""

    row: Expr
    col: Expr
    rows: int
    cols: int
    threads: int
    used: int
    count: int
    along_rows: bool

    def offset(self, e: Expr) -> tuple[Expr, Expr]:
        fast = self.rows if self.along_rows else self.cols
        if self.used >= fast:
            slow, quick = e * (self.used // fast), k.const(0)
        else:
            slow, quick = (e * self.used) // fast, (e * self.used) % fast
        return (quick, slow) if self.along_rows else (slow, quick)

    def holds(self, t: Expr, e: Expr) -> Expr | None:
        """Whether thread t holds element e; None when every thread holds every element."""
        conds = [Compare("lt", t, k.const(self.used))] if self.used < self.threads else []
        if (self.rows * self.cols) % self.used:
            conds.append(Compare("lt", t + e * self.used, k.const(self.rows * self.cols)))
        return _all(conds)


def _times(e: Expr, factor: int) -> Expr:
    """e * factor, a constant factor of e folded into it (e * 8 * 40 prints as e * 320)."""
    if isinstance(e, k.Binary) and e.op == "mul" and isinstance(e.b, k.Const) and e.dtype == INDEX:
        return e.a * (e.b.value * factor)
    return e * factor


def _spread(rows: int, cols: int, threads: int, t: Expr, along_rows: bool) -> _Spread:
    """The threads in order over the block, `along_rows` or along the columns: the first `used` of them,
    a multiple or a divisor of the contiguous side, so that each element's offsets are constants."""
    fast = rows if along_rows else cols
    used = (threads // fast) * fast if threads >= fast else max(d for d in range(1, threads + 1) if fast % d == 0)
    if used >= fast:
        slow_t, fast_t = t // fast, t % fast
    else:
        slow_t, fast_t = k.const(0), t
    row, col = (fast_t, slow_t) if along_rows else (slow_t, fast_t)
    return _Spread(row, col, rows, cols, threads, used, -(-rows * cols // used), along_rows)


@dataclass
class _Tiles:
    """The staged tiles of one tiled matmul: tile_m x tile_k of A and tile_k x tile_n of B per step, in
    `stages` copies, rows `a_stride` / `b_stride` elements apart, staged in `dtype` by `threads` threads.
    `_staged_matmul` names the rest (the tile origin, the shared arrays, the batch index variables)."""

    tile_m: int
    tile_n: int
    tile_k: int
    stages: int
    a_stride: int
    b_stride: int
    dtype: DType
    threads: int
    a_transposed: bool = False  # A staged k-major (tile_k rows of tile_m), a_stride apart
    vector: bool = False  # interior tiles may stage in runs of the target's `vector_copy_bytes`
    m0: str = ""
    n0: str = ""
    a_tile: str = ""
    b_tile: str = ""
    bvars: list = None

    @property
    def stage_elements(self) -> tuple[int, int]:
        return (self.tile_k if self.a_transposed else self.tile_m) * self.a_stride, self.tile_k * self.b_stride

    def a_at(self, step: Expr) -> Expr:
        """Where step `step`'s copy of the A tile starts."""
        return (step % self.stages) * self.stage_elements[0]

    def b_at(self, step: Expr) -> Expr:
        return (step % self.stages) * self.stage_elements[1]


# The register-tiled matmul (float matmuls on GPUs without fragment shapes for their type, f32 above all):
# (threads along M, threads along N, rows and columns each thread holds, tile_k, group), largest first. A
# thread's rows come in runs of `group` consecutive rows, the runs `threads along M` runs apart, and so do its
# columns: a warp's reads of the staged tiles are runs of consecutive words (vector loads where the language
# makes them: 4 words a load for a group of 4) and its stores of C coalesce. A is staged k-major, so a thread's
# rows of one k are consecutive too.
REGISTER_TILE_PLANS = ((16, 16, 8, 8, 8, 4), (16, 16, 4, 4, 16, 4), (8, 16, 4, 4, 16, 4))
REGISTER_TILE_MIN_WAVES = 1  # a plan is taken when its tiles give each multiprocessor at least this many


@dataclass(frozen=True)
class RegisterTiles:
    thread_rows: int
    thread_cols: int
    rows: int  # of the output, per thread
    cols: int
    tile_k: int
    group: int  # consecutive rows (and columns) in each run of a thread's
    stages: int
    dtype: DType  # what the tiles are staged in

    @property
    def tile_m(self) -> int:
        return self.thread_rows * self.rows

    @property
    def tile_n(self) -> int:
        return self.thread_cols * self.cols

    @property
    def threads(self) -> int:
        return self.thread_rows * self.thread_cols

    def tiles(self) -> _Tiles:
        return _Tiles(self.tile_m, self.tile_n, self.tile_k, self.stages, _padded(self.tile_m, self.dtype),
                      _padded(self.tile_n, self.dtype), self.dtype, self.threads, a_transposed=True)

    @property
    def shared_bytes(self) -> int:
        return self.stages * sum(self.tiles().stage_elements) * self.dtype.itemsize

    def offset(self, i: Expr, threads: int) -> Expr:
        """Where element `i` of a thread's rows (or columns) is, past the thread's own first one."""
        if self.group == 1:
            return _times(i, threads)
        return _times(i // self.group, threads * self.group) + i % self.group


def matmul_register_tiles(fn: Function, desc: TargetDesc) -> RegisterTiles | None:
    """The register-tiled matmul's plan for dispatch `fn` on `desc`: the first of `REGISTER_TILE_PLANS`
    that fits the target's workgroup size and shared memory (two staged copies where they fit) and gives
    its multiprocessors `REGISTER_TILE_MIN_WAVES` tiles each, or None (small matrices keep the split
    reduction, which spreads fewer outputs over more threads)."""
    roots = [op for op in fn.ops if op.name in ROOTS]
    if desc.max_workgroup_size <= 1 or not desc.shared_memory_bytes or len(roots) != 1 \
            or roots[0].name != "rt.matmul" or not roots[0].result.type.dtype.is_float:
        return None
    op = roots[0]
    *batch, m, n = op.result.type.shape
    kk = op.operands[0].type.shape[-1]
    # Sizes known only at run time are planned for at their hint (the range's top); the kernel guards every
    # edge tile, so any size computes (see _staged_matmul).
    m, n, kk = (hint(d, fn.symbols) for d in (m, n, kk))
    batches = hint(_count(batch), fn.symbols) if batch else 1
    multiprocessors = desc.extra.get("multiprocessors") or DEFAULT_MULTIPROCESSORS
    dt = _accumulator(op.result.type.dtype)
    for thread_rows, thread_cols, rows, cols, tk, group in REGISTER_TILE_PLANS:
        for stages in (2, 1):
            plan = RegisterTiles(thread_rows, thread_cols, rows, cols, tk, group, stages, dt)
            if plan.threads > desc.max_workgroup_size or plan.shared_bytes > desc.shared_memory_bytes:
                continue
            if m < plan.tile_m // 2 or n < plan.tile_n // 2 or kk < tk:
                break
            if batches * -(-m // plan.tile_m) * -(-n // plan.tile_n) >= REGISTER_TILE_MIN_WAVES * multiprocessors:
                return plan
            break
    return None


class _Staged:
    """One operand of a tiled matmul, staged through registers into a shared tile of `rows` x `cols`
    (rows `stride` elements apart; with `transposed`, stored column by column, columns `stride` apart);
    `k_side` ("row" or "col") is the side the reduction steps along, and the tile's other side starts at
    `origin`. With `lanes` > 1 (interior tiles only, the operand an input contiguous along the tile's
    columns), each thread moves runs of `lanes` consecutive elements with `VectorCopy`s instead of single
    elements."""

    def __init__(self, lowering: _GpuLowering, x: Value, rows: int, cols: int, stride: int, tile: str,
                 k_side: str, origin: Expr, out_shape, bvars: list[Expr], transposed: bool = False, lanes: int = 1):
        self.lowering, self.x, self.rows, self.cols, self.stride, self.tile = lowering, x, rows, cols, stride, tile
        self.transposed, self.lanes = transposed, lanes
        self.k_side, self.origin, self.bvars, self.out_shape = k_side, origin, bvars, out_shape
        self.layout = lowering.strided_operand(x, len(out_shape))
        names = ("r", "base", "kb", "tr", "tc", "so", "e")
        self.regs, self.base, self.step_base, self.row_t, self.col_t, self.shared_at, self.e = \
            (lowering.fresh(p) for p in names)

    def declare(self, threads: int, dt: DType, unguarded: bool) -> list:
        """The registers and the thread's offsets (and with `unguarded`, its base address, if any)."""
        strides = self.layout[1] if self.layout else None
        along_rows = strides is not None and strides[-2] == 1 and strides[-1] != 1
        self.spread = _spread(self.rows, self.cols // self.lanes, threads, Var("tid"), along_rows)
        out = [Local(self.regs, self.spread.count * self.lanes, dt),
               Assign(self.row_t, self.spread.row),
               Assign(self.col_t, self.spread.col * self.lanes if self.lanes > 1 else self.spread.col),
               Assign(self.shared_at, Var(self.col_t) * self.stride + Var(self.row_t) if self.transposed
                      else Var(self.row_t) * self.stride + Var(self.col_t))]
        if unguarded and strides is not None:
            row, col = self.at(k.const(0), k.const(0), k.const(0))
            offset: Expr = k.const(0)
            for v, stride in zip(self.bvars, strides):
                offset = offset + v * stride if isinstance(stride, Sym) or stride else offset
            out.append(Assign(self.base, offset + row * strides[-2] + col * strides[-1]))
        return out

    def at(self, k0: Expr, dr: Expr, dc: Expr) -> tuple[Expr, Expr]:
        """(row, column) of an element in the operand, the step starting at `k0`."""
        row0, col0 = (self.origin, k0) if self.k_side == "col" else (k0, self.origin)
        return row0 + Var(self.row_t) + dr, col0 + Var(self.col_t) + dc

    def value_at(self, row: Expr, col: Expr) -> Expr:
        index = _broadcast_index(self.bvars + [row, col], self.x.type.shape, self.out_shape)
        return self.lowering.value(self.x, index)

    def element_loop(self, body) -> list:
        e = Var(self.e)
        holds = self.spread.holds(Var("tid"), e)
        stmts = body(e)
        return [Loop(self.e, self.spread.count, [If(holds, stmts)] if holds is not None else stmts, "unroll")]

    def load(self, step: Expr, tk: int, unguarded: bool, sizes: tuple[int, int, int], dt: DType) -> list:
        """Registers = this thread's elements of reduction step `step`."""
        m, kk, n = sizes
        row_limit, col_limit = (m, kk) if self.k_side == "col" else (kk, n)
        # Only the sides that a tile can cross need guards: M or N where the tiles overhang, K where it is ragged.
        check_rows = row_limit % (self.rows if self.k_side == "col" else tk) != 0
        check_cols = col_limit % (self.cols if self.k_side == "row" else tk) != 0
        out = []
        if unguarded and self.layout is not None:
            buffer, strides, src = self.layout
            k_stride = strides[-1] if self.k_side == "col" else strides[-2]
            out.append(Assign(self.step_base, Var(self.base) + step * (tk * k_stride)))

            def element(e):
                dr, dc = self.spread.offset(e)
                if self.lanes > 1:  # runs of the row: strides[-1] is 1
                    at = Var(self.step_base) + (_times(dr, strides[-2]) + _times(dc, self.lanes))
                    return [VectorCopy(self.regs, _times(e, self.lanes), buffer, at, self.lanes)]
                at = Var(self.step_base) + (_times(dr, strides[-2]) + _times(dc, strides[-1]))
                return [Store(self.regs, e, _widen(Load(buffer, at, src), dt))]
        else:
            def element(e):
                row, col = self.at(step * tk, *self.spread.offset(e))
                if unguarded:
                    return [Store(self.regs, e, _widen(self.value_at(row, col), dt))]
                value = _widen(self.value_at(k.minimum(row, row_limit - 1) if check_rows else row,
                                             k.minimum(col, col_limit - 1) if check_cols else col), dt)
                inside = _all(([Compare("lt", row, k.const(row_limit))] if check_rows else []) +
                              ([Compare("lt", col, k.const(col_limit))] if check_cols else []))
                return [Store(self.regs, e, value if inside is None else Select(inside, value, k.const(0, dt)))]
        return out + self.element_loop(element)

    def store(self, offset: Expr, dt: DType) -> list:
        """The shared tile (its copy at element `offset`) = the registers."""
        def element(e):
            dr, dc = self.spread.offset(e)
            if self.lanes > 1:
                at = offset + Var(self.shared_at) + (_times(dr, self.stride) + _times(dc, self.lanes))
                return [VectorCopy(self.tile, at, self.regs, _times(e, self.lanes), self.lanes)]
            step = _times(dc, self.stride) + dr if self.transposed else _times(dr, self.stride) + dc
            return [Store(self.tile, offset + Var(self.shared_at) + step, Load(self.regs, e, dt))]

        return self.element_loop(element)


class _GpuLowering(_Lowering):
    """Threads cover the output, consecutive threads on its innermost dim so that loads and stores
    coalesce. Convolutions and matmuls run as reductions with two choices made from the target's
    data and the dispatch's shape:

    - a register tile: a thread of a big ungrouped convolution computes `CHANNELS_PER_THREAD` output
      channels of one pixel, so each input pixel it loads feeds that many multiply-adds;
    - split reductions: when the outputs are too few to keep the multiprocessors busy, `slices`
      threads of a block share each output's reduction (input channels, or k) and add their
      partial sums through shared memory.

    Everything else (elementwise, pools, reduce, argmax) is one thread per output element."""

    CHANNELS_PER_THREAD = 4
    TILE_THREADS_PER_SM = 256  # a convolution takes the register tile while it leaves this many threads per SM
    BUSY_THREADS_PER_SM = 1024  # threads in flight per multiprocessor before more parallelism stops paying
    MIN_SLICE_STEPS = 8  # reduction steps each slice keeps at least
    # A convolution too small for the register tile at one thread per tile (under TILE_THREADS_PER_SM) keeps
    # it all the same (SMALL_TILE_CONVS), and splits its sums over up to SMALL_TILE_SLICES threads while fewer
    # than SMALL_TILE_BUSY_PER_SM threads per multiprocessor are at work: the tile's shared pixel loads and
    # the split's parallelism both pay (H100: ResNet-18 -34%, MobileNetV2 -15% device time; NOTES.md).
    SMALL_TILE_CONVS = True
    SMALL_TILE_SLICES = 16
    SMALL_TILE_BUSY_PER_SM = 4096

    def __init__(self, fn: Function, desc: TargetDesc):
        super().__init__(fn, desc)
        self.threads = min(256, desc.max_workgroup_size)
        self.multiprocessors = desc.extra.get("multiprocessors") or DEFAULT_MULTIPROCESSORS
        self.busy = self.multiprocessors * self.BUSY_THREADS_PER_SM
        # Split reductions combine through shared memory: only where the target has it; so do staged scatters.
        self.max_slices = min(desc.subgroup_size or 32, self.threads) if desc.shared_memory_bytes else 1
        if desc.shared_memory_bytes >= 4 * self.threads * self.SCATTER_WALK:
            self.scatter_stage_from = self.SCATTER_STAGE_FROM

    def finish(self, params, body) -> Kernel:
        self.schedule["threads"] = self.threads
        return Kernel(self.fn.name, params, body, (self.grid, 1, 1), ("wg",), (self.threads, 1, 1), ("tid",),
                      schedule=self.schedule)

    def _over_output(self, shape, element, work: int) -> list:
        count = _count(shape)
        self.grid = _grid(count, self.threads)
        gid = self.fresh("gid")
        names = [self.fresh("i") for _ in shape]
        coords = [Assign(n, e) for n, e in zip(names, _delinearize(Var(gid), shape))]
        return [Assign(gid, Var("wg") * self.threads + Var("tid")),
                If(Compare("lt", Var(gid), k.const(count)), coords + element([Var(n) for n in names]))]

    def _elementwise(self) -> list:
        return self._over_output(self.out.type.shape, lambda idx: [self.store(idx)], self.out.type.num_elements)

    SCATTER_COPY = "serial"
    SPLIT_COLUMNS = True

    def scatter_invocations(self, work) -> int:
        """A thread per (row, chunk), enough to fill every multiprocessor's threads once."""
        return self.multiprocessors * self.threads

    def over_invocations(self, count, element, work) -> list:
        return self._over_output((count,), lambda idx: element(idx[0]), work)

    SCATTER_STAGE_FROM = 4096

    def staged_scatter(self, total, invocation, index, count: int, size: int) -> list:
        """A scatter of one row, whose invocations all walk the same indices: a workgroup reads them together, a
        tile of `SCATTER_WALK` a thread at a time, into workgroup memory (clamped to [-1, size], so i32), and each
        thread walks the tile from there. Each index is read from global memory once a workgroup instead of once
        a thread, and the walk waits on workgroup memory, not on L2. Threads past the last invocation fill the
        tiles and meet the barriers, and copy and write nothing."""
        tile = self.threads * self.SCATTER_WALK
        self.grid = _grid(total, self.threads)
        gid, stage, tb, e, jj = (self.fresh(p) for p in ("gid", "stage", "tb", "e", "jj"))
        tid = Var("tid")
        in_range = Compare("lt", Var(gid), k.const(total))
        copy, walk = invocation(Var(gid))
        read = self.value(index, [k.const(0)] * (index.type.rank - 1) + [Var(jj)])
        wide = read if read.dtype == INDEX else Cast(read, INDEX)
        slot = Var(e) * self.threads + tid
        fill = [Assign(jj, Var(tb) * tile + slot),
                If(Compare("lt", Var(jj), k.const(count)),
                   [Store(stage, slot, Cast(k.minimum(k.maximum(wide, -1), k.const(size)), I32))]),
                If(Compare("ge", Var(jj), k.const(count)), [Store(stage, slot, k.const(-1, I32))])]
        first = Var(tb) * tile

        def visit(offset: Expr):
            j = first + offset
            return walk(j, read=lambda _: Load(stage, offset, I32),
                        guard=Compare("lt", j, k.const(count)) if count % tile else None)

        return [Assign(gid, Var("wg") * self.threads + tid), If(in_range, copy), Local(stage, tile, I32, shared=True),
                Loop(tb, -(-count // tile), [k.Barrier(), Loop(e, self.SCATTER_WALK, fill, "unroll"), k.Barrier(),
                                             If(in_range, self.walk_in_steps(tile, visit))])]

    def _split_reduction(self, op, tile_axis: int | None, tile: int, length: int, steps, *,
                         max_slices: int | None = None, busy: int | None = None, combine: str = "add",
                         identity=0) -> list:
        """Threads over the output (`tile` consecutive indices of `tile_axis` per thread), each output's
        reduction of `length` steps split over `slices` threads of a block (at most `max_slices`, while
        fewer than `busy` threads are at work, `self.busy` by default). `steps(idx, c, acc)` adds
        reduction step `c` into `acc[0..tile)`, for the outputs at `idx` + r along `tile_axis`; the
        accumulators start at `identity`, and the slices' partial results meet through `combine`."""
        out = op.result.type
        acc_dt = _accumulator(out.dtype)
        tiled = list(out.shape)
        if tile_axis is not None:
            tiled[tile_axis] //= tile
        count = _count(tiled)
        slices = 1  # a symbolic count or length: chosen for their hints, correct for every size (guards)
        limit, busy = min(self.max_slices, max_slices or self.max_slices), busy or self.busy
        while (self.hint(count) * slices < busy and 2 * slices <= limit
               and self.hint(length) >= 2 * slices * self.MIN_SLICE_STEPS):
            slices *= 2
        width = self.threads // slices
        self.grid = _grid(count, width)
        self.schedule.update(slices=slices, tile=tile, busy_threads=busy)
        tid = Var("tid")
        gid, acc, j, r, s = (self.fresh(p) for p in ("gid", "acc", "j", "r", "s"))
        names = [self.fresh("i") for _ in tiled]
        body = [Assign(gid, Var("wg") * width + (tid % width if slices > 1 else tid))]
        body += [Assign(n, e) for n, e in zip(names, _delinearize(Var(gid), tiled))]
        idx = [Var(n) for n in names]
        if tile_axis is not None:
            idx[tile_axis] = idx[tile_axis] * tile
        c = Var(j) * slices + tid // width if slices > 1 else Var(j)
        update = steps(idx, c, acc)
        if slices > 1 and (isinstance(length, Sym) or length % slices):
            update = [If(Compare("lt", c, k.const(length)), update)]
        in_range = Compare("lt", Var(gid), k.const(count))
        body += [Local(acc, tile, acc_dt),
                 Loop(r, tile, [Store(acc, Var(r), k.const(identity, acc_dt))], "unroll"),
                 If(in_range, [Loop(j, _ceil(length, slices), update)])]

        def at(rv):
            return [i + rv if a == tile_axis else i for a, i in enumerate(idx)]

        self.override[op.result] = _narrow(Load(acc, Var(r), acc_dt), out.dtype)
        stores = [Loop(r, tile, [self.store(at(Var(r)))], "unroll")]
        if slices == 1:
            return body + [If(in_range, stores)]
        part = self.fresh("part")
        merge = [Loop(r, tile, [Loop(s, slices - 1, [
            Store(acc, Var(r), k.Binary(combine, Load(acc, Var(r), acc_dt),
                                        Load(part, Var(r) * self.threads + Var(s) * width + tid, acc_dt)))],
            "unroll", start=1)], "unroll")]
        return body + [Local(part, tile * self.threads, acc_dt, shared=True),
                       Loop(r, tile, [Store(part, Var(r) * self.threads + tid, Load(acc, Var(r), acc_dt))], "unroll"),
                       k.Barrier(),
                       If(k.Binary("and", in_range, Compare("lt", tid, k.const(width))), merge + stores)]

    def _reduce(self, op) -> list:
        """A sum, product, max or min with too few outputs to keep the multiprocessors busy (a row norm's
        mean, a softmax's max): each output's reduction is split over threads of a block, as convolutions'
        are, instead of one thread walking a whole row. Others: one thread per output (the base's)."""
        kind, axes = op.attrs["kind"], sorted(op.attrs["axes"])
        src, out = op.operands[0], op.result.type
        shapes = (*src.type.shape, *out.shape)
        if kind not in SPLIT_REDUCTIONS or not axes or not all(isinstance(d, int) for d in shapes):
            return super()._reduce(op)
        reduced = [src.type.shape[a] for a in axes]
        length = _count(reduced)
        if out.num_elements * 2 > self.busy or length < 4 * self.MIN_SLICE_STEPS:
            return super()._reduce(op)
        keep = op.attrs.get("keepdims", False)
        kept = [d for d in range(src.type.rank) if d not in axes]
        acc_dt = _accumulator(src.type.dtype) if kind in ("sum", "prod") else src.type.dtype

        def steps(idx, c, acc):
            at = [None] * src.type.rank
            for n, d in enumerate(kept):
                at[d] = idx[d] if keep else idx[n]
            for a, i in zip(axes, _delinearize(c, reduced)):
                at[a] = i
            x = _widen(self.value(src, at), acc_dt)
            return [Store(acc, k.const(0), k.Binary(SPLIT_REDUCTIONS[kind], Load(acc, k.const(0), acc_dt), x))]

        self.schedule["reduction"] = kind
        return self._split_reduction(op, None, 1, length, steps, combine=SPLIT_REDUCTIONS[kind],
                                     identity=_identity(kind, acc_dt))

    def _matmul(self, op) -> list:
        packed = quant.packed_matmul(self, op)
        if packed is not None:
            return packed
        plan = matmul_fragments(self.fn, self.desc)
        if plan is not None:
            return self._fragment_matmul(op, plan)
        tiled = matmul_register_tiles(self.fn, self.desc)
        if tiled is not None:
            return self._register_tiled_matmul(op, tiled)
        if not op.result.type.is_static and (fragment_shapes(self.desc) or self.desc.shared_memory_bytes):
            self.schedule["fallback"] = "sizes known at run time: split reduction, not a tiled matmul"
        a, b = op.operands
        out = op.result.type
        acc_dt = _accumulator(out.dtype)

        def steps(idx, c, acc):
            batch, m, n = idx[:-2], idx[-2], idx[-1]
            av = self.value(a, _broadcast_index(batch + [m, c], a.type.shape, out.shape))
            bv = self.value(b, _broadcast_index(batch + [c, n], b.type.shape, out.shape))
            product = k.Binary("mul", _widen(av, acc_dt), _widen(bv, acc_dt))
            return [Store(acc, k.const(0), k.Binary("add", Load(acc, k.const(0), acc_dt), product))]

        return self._split_reduction(op, None, 1, a.type.shape[-1], steps)

    def strided_operand(self, x: Value, rank: int) -> tuple[str, list[int], DType] | None:
        """(buffer, strides, its type) when operand `x` of a matmul with a rank-`rank` output is an input
        of the dispatch seen through broadcasts and transposes only: x at output index idx (batch..., row,
        col) is buffer[sum(idx[p] * strides[p])]. None for any other operand (a prologue computes it)."""
        shape = x.type.shape
        lead = rank - len(shape)
        axes = [None if d == 1 else lead + j for j, d in enumerate(shape)]  # output position feeding each axis
        v = x
        while v not in self.inputs:
            op = v.owner
            if v in self.override or op is None or op.name not in ("rt.broadcast", "rt.transpose"):
                return None
            src = op.operands[0]
            if op.name == "rt.broadcast":
                lead = len(v.type.shape) - len(src.type.shape)
                axes = [None if d == 1 else axes[lead + j] for j, d in enumerate(src.type.shape)]
            else:
                at = [None] * len(axes)
                for i, p in enumerate(op.attrs["perm"]):
                    at[p] = axes[i]
                axes = at
            v = src
        out = [0] * rank
        for position, stride in zip(axes, strides(v.type.shape)):
            if position is not None:
                out[position] += stride
        return self.inputs[v], out, v.type.dtype

    def _fragment_matmul(self, op, plan: FragmentTiles) -> list:
        """The tiled fragment matmul (`_staged_matmul` stages the operands): each subgroup owns
        frag_rows x frag_cols accumulator fragments of the workgroup's output tile and multiplies them
        out of the staged tiles with fragment statements. Then each subgroup stores its accumulators, one
        at a time, to its own m x n scratch in shared memory, and its threads write them through the
        epilogue (bias, activation, cast), guarded by the bounds where tiles can cross them."""
        shape = plan.shape
        tm, tn, tk, width = plan.tile_m, plan.tile_n, plan.tile_k, shape.width
        self.schedule.update(fragments=shape.name, fragment_width=width,
                             subgroups=f"{plan.sg_rows}x{plan.sg_cols}",
                             subgroup_fragments=f"{plan.frag_rows}x{plan.frag_cols}")
        tid = Var("tid")
        sg, lane, sr, sc, a_frag, kv = (self.fresh(p) for p in ("sg", "lane", "sr", "sc", "af", "ks"))
        c_tile = self.fresh("c_tile")
        acc, frag_a, frag_b = [], [], []

        def setup(tiles: _Tiles) -> list:
            body = [Assign(sg, tid // width),
                    Assign(lane, tid % width),
                    Assign(sr, (Var(sg) // plan.sg_cols) * (plan.frag_rows * shape.m)),
                    Assign(sc, (Var(sg) % plan.sg_cols) * (plan.frag_cols * shape.n)),
                    Assign(a_frag, Var(sr) * plan.a_stride),
                    Local(c_tile, plan.subgroups * shape.m * plan.c_stride, shape.acc, shared=True)]

            def fragment(role: str, fill=None) -> str:
                name = self.fresh({"a": "fa", "b": "fb", "acc": "acc"}[role])
                body.append(Fragment(name, role, shape.m, shape.n, shape.k, shape.dtype, shape.acc, shape.width, fill))
                return name

            acc.extend([fragment("acc", 0.0) for _ in range(plan.frag_cols)] for _ in range(plan.frag_rows))
            frag_a.extend(fragment("a") for _ in range(plan.frag_rows))
            frag_b.extend(fragment("b") for _ in range(plan.frag_cols))
            return body

        def mma(tiles: _Tiles, step: Expr) -> list:
            a_at, b_at = tiles.a_at(step), tiles.b_at(step)
            loads = [FragmentLoad(frag_a[i], tiles.a_tile, a_at + Var(a_frag) + Var(kv) * shape.k
                                  + i * shape.m * plan.a_stride, plan.a_stride) for i in range(plan.frag_rows)]
            loads += [FragmentLoad(frag_b[j], tiles.b_tile, b_at + Var(kv) * (shape.k * plan.b_stride)
                                   + Var(sc) + j * shape.n, plan.b_stride) for j in range(plan.frag_cols)]
            loads += [FragmentMma(acc[i][j], frag_a[i], frag_b[j], acc[i][j])
                      for i in range(plan.frag_rows) for j in range(plan.frag_cols)]
            return [Loop(kv, plan.k_steps, loads, self.desc.extra.get("fragment_k_loop", FRAGMENT_K_LOOP))]

        def epilogue(tiles: _Tiles) -> list:
            return self._fragment_epilogue(op, plan, acc, c_tile, tiles.bvars, Var(tiles.m0) + Var(sr),
                                           Var(tiles.n0) + Var(sc), Var(sg), Var(lane))

        return self._staged_matmul(op, _Tiles(tm, tn, tk, plan.stages, plan.a_stride, plan.b_stride, shape.dtype,
                                              plan.threads, vector=True), setup, mma, epilogue, "fragments")

    def _vector_lanes(self, x: Value, cols: int, stride: int, tiles: _Tiles, rank: int) -> int:
        """Elements a `VectorCopy` of operand `x` moves when staging its rows of `cols` elements (rows `stride`
        apart in the tile): the target's `vector_copy_bytes` of them where `x` is an input of the staged type,
        contiguous along those rows, with every row and tile aligned to such a run; else 1."""
        vector_bytes = (self.desc.extra.get("vector_copy_bytes") or 0) if VECTOR_STAGING else 0
        lanes = vector_bytes // tiles.dtype.itemsize
        layout = self.strided_operand(x, rank)
        if not tiles.vector or lanes <= 1 or layout is None or layout[2] != tiles.dtype:
            return 1
        strides = layout[1]
        if strides[-1] != 1 or any(not isinstance(s, int) or s % lanes for s in strides[:-1]) \
                or cols % lanes or stride % lanes:
            return 1
        return lanes

    def _staged_matmul(self, op, tiles: _Tiles, setup, compute, epilogue, schedule: str) -> list:
        """The skeleton every tiled matmul shares. Each workgroup computes one tile_m x tile_n output tile
        of one batch element, stepping the reduction by tile_k: `setup(tiles)` declares the schedule's
        own state, `compute(tiles, step)` multiplies step `step` out of the staged A and B tiles, and
        `epilogue(tiles)` writes the output tile (its origin `tiles.m0`, `tiles.n0`); `schedule` ("fragments" or
        "registers") names the caller, for the target's loop spelling (`PEEL_LAST_STEP`).

        Each thread loads its share of the next step's A (tile_m x tile_k) and B (tile_k x tile_n)
        elements into registers before `compute` runs on the current step, and stores them into shared
        memory afterwards (into the other staged copy when there are two, else after a barrier): global
        loads overlap the arithmetic. Consecutive threads read consecutive elements of each operand's
        contiguous side, so loads coalesce.

        Interior tiles (inside M and N, with K a multiple of tile_k) stage each element unguarded: an
        operand that is an input of the dispatch (through broadcasts and transposes only) from a per-thread
        base address computed once, plus a constant; any other operand through the dispatch's own
        expression (the prologue inlined). Edge tiles clamp every index and put zeros past the edges, so any
        M, N, K work. A uniform `If` on the workgroup id picks the path, so barriers stay legal inside."""
        a, b = op.operands
        out = op.result.type
        *batch, m, n = out.shape
        kk = a.type.shape[-1]
        tm, tn, tk = tiles.tile_m, tiles.tile_n, tiles.tile_k
        tiles_m, tiles_n, steps = _ceil(m, tm), _ceil(n, tn), _ceil(kk, tk)
        full_m, full_n = m // tm, n // tn
        symbolic = not all(isinstance(d, int) for d in (*batch, m, n, kk))
        # a symbolic size: which tiles are interior is known at run time; both paths are compiled
        interior = None if symbolic else full_m * full_n if kk % tk == 0 else 0
        batches = _count(batch) if batch else 1
        self.threads = tiles.threads
        self.grid = batches * tiles_m * tiles_n
        self.schedule.update(tile_m=tm, tile_n=tn, tile_k=tk, stages=tiles.stages,
                             interior_tiles="at run time" if symbolic else f"{interior}/{tiles_m * tiles_n}")

        wg = Var("wg")
        tile, bi, tr, tc = (self.fresh(p) for p in ("tile", "b", "tr", "tc"))
        tiles.m0, tiles.n0 = self.fresh("m0"), self.fresh("n0")
        tiles.a_tile, tiles.b_tile = self.fresh("a_tile"), self.fresh("b_tile")
        body: list = [Assign(tile, wg % (tiles_m * tiles_n))] if batch else [Assign(tile, wg)]
        if batch:
            body.append(Assign(bi, wg // (tiles_m * tiles_n)))
        a_elements, b_elements = tiles.stage_elements
        body += [
            Assign(tr, Var(tile) // tiles_n),
            Assign(tc, Var(tile) % tiles_n),
            Assign(tiles.m0, Var(tr) * tm),
            Assign(tiles.n0, Var(tc) * tn),
            Local(tiles.a_tile, tiles.stages * a_elements, tiles.dtype, shared=True),
            Local(tiles.b_tile, tiles.stages * b_elements, tiles.dtype, shared=True),
        ]
        tiles.bvars = [Var(name) for name in (self.fresh("bb") for _ in batch)]
        body += [Assign(v.name, e) for v, e in zip(tiles.bvars, _delinearize(Var(bi), batch))]
        body += setup(tiles)

        runs = not symbolic and interior == tiles_m * tiles_n  # runs only where no tile needs guards
        staged = [_Staged(self, x, rows, cols, stride, name, k_side, origin, out.shape, tiles.bvars, transposed,
                          self._vector_lanes(x, cols, stride, tiles, len(out.shape)) if runs and not transposed else 1)
                  for x, rows, cols, stride, name, k_side, origin, transposed in (
                      (a, tm, tk, tiles.a_stride, tiles.a_tile, "col", Var(tiles.m0), tiles.a_transposed),
                      (b, tk, tn, tiles.b_stride, tiles.b_tile, "row", Var(tiles.n0), False))]
        if any(st.lanes > 1 for st in staged):
            self.schedule["staging"] = "+".join(f"{st.lanes}x{tiles.dtype}" for st in staged)
        for st in staged:
            body += st.declare(tiles.threads, tiles.dtype, symbolic or interior > 0)
        kt = self.fresh("kt")

        def pipeline(unguarded: bool) -> list:
            def load(step: Expr) -> list:
                return [s for st in staged for s in st.load(step, tk, unguarded, (m, kk, n), tiles.dtype)]

            def store(step: Expr) -> list:
                return [s for st, at in zip(staged, (tiles.a_at, tiles.b_at)) for s in st.store(at(step), tiles.dtype)]

            out_stmts = load(k.const(0)) + store(k.const(0)) + [k.Barrier()]
            if isinstance(steps, int) and steps == 1:
                return out_stmts + compute(tiles, k.const(0))
            following = Var(kt) + 1
            # peeled: the loop runs all but the last step, so its next step always exists; else a test guards it
            peel = schedule in self.desc.extra.get("peel_last_step", PEEL_LAST_STEP) and isinstance(steps, int)
            more = Compare("lt", following, k.const(steps))

            def next_step(stmts: list) -> list:
                return stmts if peel else [If(more, stmts)]

            loop = [*next_step(load(following)), *compute(tiles, Var(kt))]
            loop += [k.Barrier()] if tiles.stages == 1 else []
            loop += [*next_step(store(following)), k.Barrier()]
            if peel:
                return out_stmts + [Loop(kt, steps - 1, loop)] + compute(tiles, k.const(steps - 1))
            return out_stmts + [Loop(kt, steps, loop)]

        if symbolic and isinstance(kk, int) and kk % tk:
            body += pipeline(False)  # no tile is interior: K leaves a partial step everywhere
        elif symbolic:  # test at run time only what is not known now
            # (interior when, edge when, a, b): a tile row or column inside M or N, and K a multiple of tile_k
            tests = [("lt", "ge", Var(v), k.const(full)) for v, full, size, tile in
                     ((tr, full_m, m, tm), (tc, full_n, n, tn)) if not isinstance(size, int) or size % tile]
            tests += [] if isinstance(kk, int) else [("eq", "ne", k.const(kk % tk), k.const(0))]
            if not tests:
                body += pipeline(True)
            else:
                inside = _all([Compare(when, a, b) for when, _, a, b in tests])
                edge = None
                for _, when, a, b in tests:
                    c = Compare(when, a, b)
                    edge = c if edge is None else k.Binary("or", edge, c)
                body += [If(inside, pipeline(True)), If(edge, pipeline(False))]
        elif interior == tiles_m * tiles_n:
            body += pipeline(True)
        elif interior == 0:
            body += pipeline(False)
        else:
            inside = _all([Compare("lt", Var(v), k.const(full)) for v, full, count in
                           ((tr, full_m, tiles_m), (tc, full_n, tiles_n)) if full < count])
            edge = None
            for v, full, count in ((tr, full_m, tiles_m), (tc, full_n, tiles_n)):
                if full < count:
                    c = Compare("ge", Var(v), k.const(full))
                    edge = c if edge is None else k.Binary("or", edge, c)
            body += [If(inside, pipeline(True)), If(edge, pipeline(False))]
        return body + epilogue(tiles)

    def _fragment_epilogue(self, op, plan: FragmentTiles, acc, c_tile: str, bvars, row0: Expr, col0: Expr,
                           sg: Expr, lane: Expr) -> list:
        """Each subgroup's accumulators, one at a time, through its own scratch in `c_tile` to the output
        (its block starts at `row0`, `col0`), the epilogue applied, guarded where tiles cross the bounds."""
        shape, out = plan.shape, op.result.type
        *_, m, n = out.shape
        spread = _spread(shape.m, shape.n, shape.width, lane, along_rows=False)
        base, rows, cols, at, e = (self.fresh(p) for p in ("cb", "er", "ec", "ce", "e"))
        body = [Assign(base, sg * (shape.m * plan.c_stride)),
                Assign(rows, row0 + spread.row),
                Assign(cols, col0 + spread.col),
                Assign(at, Var(base) + spread.row * plan.c_stride + spread.col)]
        dr, dc = spread.offset(Var(e))
        pairs = [(i, j) for i in range(plan.frag_rows) for j in range(plan.frag_cols)]
        for i, j in pairs:
            gm, gn = Var(rows) + (dr + i * shape.m), Var(cols) + (dc + j * shape.n)
            scratch = Load(c_tile, Var(at) + (_times(dr, plan.c_stride) + dc), shape.acc)
            self.override[op.result] = _narrow(scratch, out.dtype)
            holds = spread.holds(lane, Var(e))
            inside = _all(([holds] if holds is not None else []) +
                          ([Compare("lt", gm, k.const(m))] if m % plan.tile_m else []) +
                          ([Compare("lt", gn, k.const(n))] if n % plan.tile_n else []))
            store = self.store(bvars + [gm, gn])
            body += [FragmentStore(acc[i][j], c_tile, Var(base), plan.c_stride), k.Barrier(),
                     Loop(e, spread.count, [If(inside, [store]) if inside is not None else store], "unroll")]
            if (i, j) != pairs[-1]:
                body.append(k.Barrier())  # the scratch is written again
        return body

    def _conv2d(self, op) -> list:
        x, w = op.operands
        out = op.result.type
        h, wd = x.type.shape[2:]
        _, cg, kh, kw = w.type.shape
        sh, sw = op.attrs.get("strides", (1, 1))
        dh, dw = op.attrs.get("dilations", (1, 1))
        pad = op.attrs.get("pad", (0, 0, 0, 0))
        groups = op.attrs.get("groups", 1)
        per_group = out.shape[1] // groups
        acc_dt = _accumulator(out.dtype)
        tile = self.CHANNELS_PER_THREAD
        split: dict = {}
        if groups != 1 or out.shape[1] % tile:
            tile = 1
        elif self.hint(out.num_elements) // tile < self.multiprocessors * self.TILE_THREADS_PER_SM:
            if self.SMALL_TILE_CONVS:
                split = {"max_slices": self.SMALL_TILE_SLICES,
                         "busy": self.multiprocessors * self.SMALL_TILE_BUSY_PER_SM}
            else:
                tile = 1
        window = "unroll" if kh * kw <= 25 else "serial"

        def steps(idx, c, acc):
            nv, o0, y, xo = idx
            ky, kx, r, pv = (self.fresh(p) for p in ("ky", "kx", "r", "px"))
            iy, ix = y * sh + Var(ky) * dh - pad[0], xo * sw + Var(kx) * dw - pad[2]
            ci = c if groups == 1 else (o0 // per_group) * cg + c
            pixel = _widen(self.value(x, [nv, ci, _clamp(iy, h), _clamp(ix, wd)] if any(pad) else [nv, ci, iy, ix]),
                           acc_dt)
            if any(pad):
                pixel = Select(_all([_in_range(iy, h), _in_range(ix, wd)]), pixel, k.const(0, acc_dt))
            weight = _widen(self.value(w, [o0 + Var(r), c, Var(ky), Var(kx)]), acc_dt)
            update = Store(acc, Var(r), k.Binary("add", Load(acc, Var(r), acc_dt),
                                                 k.Binary("mul", weight, Var(pv, acc_dt))))
            return [Loop(ky, kh, [Loop(kx, kw, [Assign(pv, pixel), Loop(r, tile, [update], "unroll")], window)],
                         window)]

        return self._split_reduction(op, 1, tile, cg, steps, **split)


def _narrow(e: Expr, dt: DType) -> Expr:
    return e if e.dtype == dt else Cast(e, dt)
