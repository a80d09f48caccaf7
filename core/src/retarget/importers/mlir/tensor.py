"""`tensor`: shape plumbing (slices, pads, reshapes, concatenation); sizes known only at run time
(`tensor.dim`, `tensor.empty(%d)`, dynamic slice sizes) come through dims.py."""

from __future__ import annotations

import math

import numpy as np

from ...errors import UnsupportedOpError
from ...ir.core import TensorType, Value
from ...ir.symbolic import Sym
from ...mlir.syntax import MOp, Parser, custom_syntax
from .. import compose as C
from .convert import Converter, bitcast, broadcast, constant_value, converts, reshape
from .pretty import cast_syntax, functional

# -- syntax ------------------------------------------------------------------------------------


def _mixed_list(p: Parser, op: MOp, key: str):
    """`[0, %i, 2]`: static entries are ints, dynamic ones the SSA names."""
    items = p.delimited("[", lambda: p.value_id() if p.peek("%") else p.integer(), "]")
    op.attrs[key] = items


@custom_syntax("tensor.empty")
def _empty_syntax(p: Parser, op: MOp):
    op.operands = p.delimited("(", p.value_id, ")")
    p.optional_attrs(op)
    p.expect(":")
    op.result_types = [p.type()]


@custom_syntax("tensor.extract_slice")
def _extract_slice_syntax(p: Parser, op: MOp):
    op.operands = [p.value_id()]
    for key in ("offsets", "sizes", "strides"):
        _mixed_list(p, op, key)
    p.optional_attrs(op)
    p.expect(":")
    op.operand_types = [p.type()]
    p.expect_keyword("to")
    op.result_types = [p.type()]


@custom_syntax("tensor.insert_slice")
def _insert_slice_syntax(p: Parser, op: MOp):
    op.operands = [p.value_id()]
    p.expect_keyword("into")
    op.operands.append(p.value_id())
    for key in ("offsets", "sizes", "strides"):
        _mixed_list(p, op, key)
    p.optional_attrs(op)
    p.expect(":")
    src = p.type()
    p.expect_keyword("into")
    dst = p.type()
    op.operand_types, op.result_types = [src, dst], [dst]


@custom_syntax("tensor.pad")
def _pad_syntax(p: Parser, op: MOp):
    op.operands = [p.value_id()]
    p.accept_keyword("nofold")  # a folding hint; nothing to keep
    p.expect_keyword("low")
    _mixed_list(p, op, "low")
    p.expect_keyword("high")
    _mixed_list(p, op, "high")
    op.regions = [p.region()]
    p.optional_attrs(op)
    p.expect(":")
    op.operand_types = [p.type()]
    p.expect_keyword("to")
    op.result_types = [p.type()]


def _reassociation_syntax(p: Parser, op: MOp):
    op.operands = [p.value_id()]
    op.attrs["reassociation"] = p.delimited("[", lambda: p.delimited("[", p.integer, "]"), "]")
    if p.accept_keyword("output_shape"):
        _mixed_list(p, op, "output_shape")
    p.optional_attrs(op)
    p.expect(":")
    op.operand_types = [p.type()]
    p.expect_keyword("into")
    op.result_types = [p.type()]


custom_syntax("tensor.collapse_shape", "tensor.expand_shape")(_reassociation_syntax)


@custom_syntax("tensor.concat")
def _concat_syntax(p: Parser, op: MOp):
    p.expect_keyword("dim")
    p.expect("(")
    op.attrs["dim"] = p.integer()
    p.expect(")")
    functional(p, op)


@custom_syntax("tensor.reshape")
def _reshape_syntax(p: Parser, op: MOp):
    op.operands = [p.value_id()]
    p.expect("(")
    op.operands.append(p.value_id())
    p.expect(")")
    p.optional_attrs(op)
    p.expect(":")
    t = p.function_type()
    op.operand_types, op.result_types = t.inputs, t.results


@custom_syntax("tensor.extract")
def _extract_syntax(p: Parser, op: MOp):
    op.operands = [p.value_id()]
    op.operands += p.delimited("[", p.value_id, "]")
    p.optional_attrs(op)
    p.expect(":")
    op.operand_types = [p.type()]


@custom_syntax("tensor.splat")
def _splat_syntax(p: Parser, op: MOp):
    op.operands = [p.value_id()]
    p.optional_attrs(op)
    p.expect(":")
    op.result_types = [p.type()]


@custom_syntax("tensor.yield")
def _yield_syntax(p: Parser, op: MOp):
    op.operands = p.comma_list(p.value_id)
    p.expect(":")
    op.operand_types = p.comma_list(p.type)


# -- converters -------------------------------------------------------------------------------


def dim_list(cv: Converter, op: MOp, key: str) -> list:
    """A mixed list of sizes (`[0, %d, 2]`): its dynamic entries may be sizes known at run time."""
    return [cv.env[item] if isinstance(item, str) and isinstance(cv.env.get(item), Sym) else item
            for item in static_list(cv, op, key, allow_sizes=True)]


def static_list(cv: Converter, op: MOp, key: str, allow_sizes: bool = False) -> list:
    out = []
    for item in op.attrs[key]:
        if allow_sizes and isinstance(item, str) and isinstance(cv.get(op, item), Sym):
            out.append(item)
            continue
        if isinstance(item, str):
            array = constant_value(cv.get(op, item))
            if array is None:
                raise UnsupportedOpError(f"'{op.name}': {key} entry {item} is not a constant",
                                         location=str(op.loc), hint="only static offsets and sizes are supported")
            item = int(array)
        out.append(int(item))
    return out


def _require_static(cv: Converter, op: MOp, t: TensorType):
    if not t.is_static:
        raise UnsupportedOpError(f"'{op.name}': dynamic shape {t} is not supported", location=str(op.loc),
                                 hint="give every dimension a static size")


converts("tensor.bitcast")(bitcast)
custom_syntax("tensor.bitcast")(cast_syntax)


@converts("tensor.splat")
def _splat(cv: Converter, op: MOp):
    t = cv.result_type(op)
    return broadcast(cv.b, cv.value(op, 0), t.shape)


def _slice_attrs(offsets, sizes, strides):
    limits = [o + (n - 1) * s + 1 if isinstance(n, Sym) or n else o for o, n, s in zip(offsets, sizes, strides)]
    return {"start": tuple(offsets), "limit": tuple(limits), "stride": tuple(strides)}


@converts("tensor.extract_slice")
def _extract_slice(cv: Converter, op: MOp):
    x = cv.value(op, 0)
    offsets, strides = (static_list(cv, op, k) for k in ("offsets", "strides"))
    sizes = dim_list(cv, op, "sizes")
    sliced = cv.b.op("rt.slice", [x], _slice_attrs(offsets, sizes, strides))
    # rank-reducing slices drop unit dims
    return reshape(cv.b, sliced, [d for d in sizes if not isinstance(d, int) or d != 1]
                   if cv.result_type(op).rank < len(sizes) else sizes)


def insert_slice(cv: Converter, op: MOp, src: Value, dst: Value, offsets, strides) -> Value:
    """`dst` with `src` written at `offsets`, spelled as slices and concatenations (every `strides[d]` th
    element: `src` dilated and padded to `dst`'s shape, and selected where a constant mask says)."""
    b = cv.b
    if any(s != 1 for s in strides):
        return _strided_insert(cv, op, src, dst, offsets, strides)

    def place(src: Value, dst: Value, dim: int) -> Value:
        if dim == dst.type.rank:
            return src
        size, total, off = src.type.shape[dim], dst.type.shape[dim], offsets[dim]
        if off < 0 or off + size > total:
            raise cv.error(op, f"slice [{off}:{off + size}] out of bounds for dim {dim} of size {total}")

        def part(lo, hi):
            start = [0] * dst.type.rank
            limit = list(dst.type.shape)
            start[dim], limit[dim] = lo, hi
            return b.op("rt.slice", [dst],
                        {"start": tuple(start), "limit": tuple(limit), "stride": (1,) * dst.type.rank})

        middle = place(src, part(off, off + size) if size != total else dst, dim + 1)
        pieces = ([part(0, off)] if off else []) + [middle] + ([part(off + size, total)] if off + size < total else [])
        return pieces[0] if len(pieces) == 1 else b.op("rt.concat", pieces, {"axis": dim})

    return place(src, dst, 0)


def _strided_insert(cv: Converter, op: MOp, src: Value, dst: Value, offsets, strides) -> Value:
    b, mask = cv.b, None
    for d, (n, total, off, step) in enumerate(zip(src.type.shape, dst.type.shape, offsets, strides)):
        if n and (off < 0 or off + (n - 1) * step >= total):
            raise cv.error(op, f"slice from {off} by {step} for {n} out of bounds for dim {d} of size {total}")
        hit = np.zeros(total, bool)
        hit[off:off + (n - 1) * step + 1:step] = n > 0
        axis = b.constant(hit.reshape([total if e == d else 1 for e in range(dst.type.rank)]))
        mask = axis if mask is None else b.op("rt.and", [mask, axis])
    if src.type.num_elements == 0:
        return dst
    spread = C.dilate(b, src, [s - 1 for s in strides])
    placed = C.pad_signed(b, spread, offsets, [t - o - n for t, o, n in zip(dst.type.shape, offsets,
                                                                              spread.type.shape)])
    return b.op("rt.select", [broadcast(b, mask, dst.type.shape), placed, dst])


@converts("tensor.insert_slice")
def _insert_slice(cv: Converter, op: MOp):
    src, dst = cv.value(op, 0), cv.value(op, 1)
    offsets, sizes, strides = (static_list(cv, op, k) for k in ("offsets", "sizes", "strides"))
    _require_static(cv, op, dst.type)
    # a rank-reducing insert: put back the unit dims the source dropped
    src = reshape(cv.b, src, sizes)
    return insert_slice(cv, op, src, dst, offsets, strides)


@converts("tensor.pad")
def _pad(cv: Converter, op: MOp):
    x = cv.value(op, 0)
    low, high = static_list(cv, op, "low"), static_list(cv, op, "high")
    region = op.regions[0]
    if len(region) != 1 or region[0].ops[-1].name != "tensor.yield":
        raise cv.error(op, "the pad body must be one block ending in tensor.yield")
    saved = dict(cv.env)
    cv.in_body = True
    try:
        (value,) = cv.run_block(region[0].ops, terminators=("tensor.yield",))
    finally:
        cv.in_body = False
        cv.env = saved
    array = constant_value(value)
    if array is None:
        raise UnsupportedOpError(f"'{op.name}': only padding with a constant is supported", location=str(op.loc))
    return cv.b.op("rt.pad", [x], {"low": tuple(low), "high": tuple(high), "value": array.reshape(-1)[0].item()})


@converts("tensor.collapse_shape", "tensor.expand_shape")
def _reshape(cv: Converter, op: MOp):
    """The result's sizes: static ones as declared; a collapsed `?` is the product of its group, an
    expanded one comes from `output_shape` (or is what its group's size leaves)."""
    x = cv.value(op, 0)
    t = cv.result_type(op)
    if t.is_static:
        return reshape(cv.b, x, t.shape)
    groups = [list(g) for g in op.attrs["reassociation"]]
    shape = list(t.shape)
    if op.name == "tensor.collapse_shape":
        for out, group in enumerate(groups):
            shape[out] = math.prod(x.type.shape[d] for d in group)
    elif "output_shape" in op.attrs:
        shape = dim_list(cv, op, "output_shape")
    else:
        for src, group in enumerate(groups):
            unknown = [d for d in group if shape[d] is None]
            if len(unknown) == 1:
                known = math.prod(shape[d] for d in group if d not in unknown)
                shape[unknown[0]] = x.type.shape[src] // known
    if any(d is None for d in shape):
        _require_static(cv, op, t)
    return reshape(cv.b, x, shape)


@converts("tensor.concat")
def _concat(cv: Converter, op: MOp):
    return cv.b.op("rt.concat", cv.values(op), {"axis": int(op.attrs["dim"])})


@converts("tensor.extract")
def _extract(cv: Converter, op: MOp):
    x = cv.value(op, 0)
    idx = [int(cv.static(op, i, "index")) for i in range(1, len(op.operands))]
    if not idx:
        return x
    one = cv.b.op("rt.slice", [x], {"start": tuple(idx), "limit": tuple(i + 1 for i in idx), "stride": (1,) * len(idx)})
    return reshape(cv.b, one, ())

