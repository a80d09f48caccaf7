"""`stablehlo` (and the few `chlo` ops JAX emits), pretty and generic forms.

Layouts are explicit in StableHLO (`dim_numbers`, reduce_window's window): converters
transpose operands into NCHW/OIHW for the graph op and the result back. Ops the graph IR
has no op for are spelled in its ops: gather and dynamic slices as `rt.gather` at computed
linear indices, sort by ranks from the comparator, reductions with any body by pairwise
halving, transposed convolutions as input dilation; `while` loops whose trip count folds at
import are unrolled.
"""

from __future__ import annotations

import re

import numpy as np

from ...errors import UnsupportedOpError
from ...ir.core import DenseAttr, Value
from ...ir.dtypes import DTYPES
from ...mlir.syntax import MOp, OpaqueAttr, Parser, custom_syntax
from .. import compose as C
from .contract import contract
from .convert import Converter, bitcast, broadcast, cast, converts, fold, is_splat, reshape, transpose
from .pretty import functional, read_types

BINARY = {"add": "rt.add", "subtract": "rt.sub", "multiply": "rt.mul", "divide": "rt.div", "maximum": "rt.max",
          "minimum": "rt.min", "power": "rt.pow", "remainder": "rt.rem", "and": "rt.and", "or": "rt.or",
          "xor": "rt.xor", "atan2": "rt.atan2"}
UNARY = {"negate": "rt.neg", "abs": "rt.abs", "exponential": "rt.exp", "log": "rt.log", "sqrt": "rt.sqrt",
         "rsqrt": "rt.rsqrt", "tanh": "rt.tanh", "logistic": "rt.sigmoid", "floor": "rt.floor", "ceil": "rt.ceil",
         "sign": "rt.sign", "sine": "rt.sin", "cosine": "rt.cos", "tan": "rt.tan", "not": "rt.not",
         "exponential_minus_one": "rt.expm1", "log_plus_one": "rt.log1p", "round_nearest_even": "rt.round"}
CHLO_UNARY = {"erf": "rt.erf", "tan": "rt.tan", "atan": "rt.atan"}
DIRECTIONS = {"EQ": "eq", "NE": "ne", "GE": "ge", "GT": "gt", "LE": "le", "LT": "lt"}
REDUCERS = {"stablehlo.add": "sum", "stablehlo.maximum": "max", "stablehlo.minimum": "min",
            "stablehlo.multiply": "prod", "stablehlo.and": "and", "stablehlo.or": "or"}

custom_syntax(*(f"stablehlo.{n}" for n in list(BINARY) + list(UNARY) + ["reshape", "convert", "bitcast_convert",
                                                                        "clamp"]))(functional)
custom_syntax(*(f"chlo.{n}" for n in list(CHLO_UNARY) + ["erfc"]))(functional)


# -- syntax -------------------------------------------------------------------------------------


def _keyword_attrs(p: Parser, op: MOp):
    """`, dims = [1], dim = 0, low = [..]`: keyword = attribute pairs after the operands."""
    while p.accept(","):
        key = p.bare_id()
        p.expect("=")
        op.attrs[key] = p.attribute()


def _tail(p: Parser, op: MOp):
    p.optional_attrs(op)
    p.expect(":")
    read_types(p, op)


@custom_syntax("stablehlo.constant")
def _constant_syntax(p: Parser, op: MOp):
    p.optional_attrs(op)
    value = p.attribute()
    op.attrs["value"] = value
    op.result_types = [value.type] if isinstance(value, DenseAttr) else []


@custom_syntax("stablehlo.broadcast_in_dim", "stablehlo.transpose", "stablehlo.concatenate", "stablehlo.pad",
               "stablehlo.dot", "stablehlo.reverse")
def _keyword_syntax(p: Parser, op: MOp):
    op.operands = [p.value_id()]
    while p.accept(","):
        if p.peek("%"):
            op.operands.append(p.value_id())
        else:
            key = p.bare_id()
            p.expect("=")
            if key == "precision":
                op.attrs[key] = _precision_or_attr(p)
            else:  # `dim = 0 : (...)` must not read the op's type as the number's type
                op.attrs[key] = p.integer() if not p.peek("[") else p.attribute()
    _tail(p, op)


def _precision_or_attr(p: Parser):
    return p.delimited("[", p.bare_id, "]")


@custom_syntax("stablehlo.dot_general")
def _dot_general_syntax(p: Parser, op: MOp):
    op.operands = [p.value_id()]
    p.expect(",")
    op.operands.append(p.value_id())
    while p.accept(","):
        key = p.bare_id()
        p.expect("=")
        if key in ("batching_dims", "contracting_dims"):
            lhs = p.delimited("[", p.integer, "]")
            p.expect_keyword("x")
            rhs = p.delimited("[", p.integer, "]")
            prefix = "batching" if key == "batching_dims" else "contracting"
            op.attrs[f"lhs_{prefix}_dimensions"], op.attrs[f"rhs_{prefix}_dimensions"] = lhs, rhs
        elif key == "precision":
            _precision_or_attr(p)
        else:
            op.attrs[key] = p.attribute()
    _tail(p, op)


@custom_syntax("stablehlo.compare")
def _compare_syntax(p: Parser, op: MOp):
    op.attrs["comparison_direction"] = p.bare_id()
    p.expect(",")
    op.operands = [p.value_id()]
    p.expect(",")
    op.operands.append(p.value_id())
    if p.accept(","):
        op.attrs["compare_type"] = p.bare_id()
    _tail(p, op)


@custom_syntax("stablehlo.select")
def _select_syntax(p: Parser, op: MOp):
    op.operands = p.comma_list(p.value_id)
    p.optional_attrs(op)
    p.expect(":")
    first = p.type()
    if p.accept(","):
        value = p.type()
        op.operand_types, op.result_types = [first, value, value], [value]
    elif hasattr(first, "inputs"):
        op.operand_types, op.result_types = first.inputs, first.results
    else:
        op.operand_types, op.result_types = [first] * 3, [first]


@custom_syntax("stablehlo.iota")
def _iota_syntax(p: Parser, op: MOp):
    p.expect_keyword("dim")
    p.expect("=")
    op.attrs["iota_dimension"] = p.integer()
    _tail(p, op)


@custom_syntax("stablehlo.slice")
def _slice_syntax(p: Parser, op: MOp):
    op.operands = [p.value_id()]
    if p.peek("["):
        starts, limits, strides = [], [], []

        def entry():
            starts.append(p.integer())
            p.expect(":")
            limits.append(p.integer())
            strides.append(p.integer() if p.accept(":") else 1)

        p.delimited("[", entry, "]")
        op.attrs.update(start_indices=starts, limit_indices=limits, strides=strides)
    _keyword_attrs(p, op)
    _tail(p, op)


@custom_syntax("stablehlo.reduce")
def _reduce_syntax(p: Parser, op: MOp):
    inits = []

    def pair():
        p.expect("(")
        op.operands.append(p.value_id())
        p.expect_keyword("init")
        p.expect(":")
        inits.append(p.value_id())
        p.expect(")")

    p.comma_list(pair)
    op.operands += inits
    if p.accept_keyword("applies"):
        op.attrs["applies"] = p.bare_id()
    p.expect_keyword("across")
    p.expect_keyword("dimensions")
    p.expect("=")
    op.attrs["dimensions"] = p.attribute()
    _tail(p, op)
    if p.accept_keyword("reducer"):
        args = []
        while p.peek("("):
            args += p.delimited("(", p.typed_value, ")")
        region = p.region()
        # the pretty form lists (lhs_i, rhs_i) pairs; block order is all lhs then all rhs
        n = len(args) // 2
        region[0].args = [args[2 * i] for i in range(n)] + [args[2 * i + 1] for i in range(n)]
        op.regions = [region]


@custom_syntax("stablehlo.convolution")
def _convolution_syntax(p: Parser, op: MOp):
    op.operands = p.delimited("(", p.value_id, ")")
    while not p.peek("{") and not p.peek(":"):
        p.accept(",")
        key = p.bare_id()
        p.expect("=")
        if key == "dim_numbers":
            p.skip()
            start = p.pos
            depth = 0
            while depth or p.text[p.pos:p.pos + 1] != ",":
                if p.pos >= len(p.text):
                    raise p.error("dim_numbers runs to the end of the file", start)
                depth += {"[": 1, "]": -1}.get(p.text[p.pos], 0)
                p.pos += 1
            op.attrs["dimension_numbers"] = OpaqueAttr(p.text[start:p.pos])
        elif key == "window":
            window = p.attr_dict()
            for short, long in (("stride", "window_strides"), ("pad", "padding"), ("lhs_dilate", "lhs_dilation"),
                                ("rhs_dilate", "rhs_dilation"), ("reverse", "window_reversal")):
                if short in window:
                    op.attrs[long] = window[short]
        else:
            op.attrs[key] = p.attribute()
    _tail(p, op)


@custom_syntax("stablehlo.dynamic_slice", "stablehlo.dynamic_update_slice")
def _dynamic_slice_syntax(p: Parser, op: MOp):
    op.operands = [p.value_id()]
    while p.accept(","):
        if p.peek("%"):
            op.operands.append(p.value_id())
        else:
            key = p.bare_id()
            p.expect("=")
            op.attrs[key] = p.attribute()
    _tail(p, op)


@custom_syntax("stablehlo.while")
def _while_syntax(p: Parser, op: MOp):
    """`stablehlo.while(%it = %init, ...) : T, ... [attributes {..}] cond { .. } do { .. }`."""
    args = []

    def pair():
        args.append(p.value_id())
        p.expect("=")
        op.operands.append(p.value_id())

    p.expect("(")
    if not p.peek(")"):
        p.comma_list(pair)
    p.expect(")")
    p.expect(":")
    types = p.comma_list(p.type)
    if p.accept_keyword("attributes"):
        op.attrs.update(p.attr_dict())
    op.operand_types = op.result_types = types
    for keyword in ("cond", "do"):
        p.expect_keyword(keyword)
        region = p.region()
        region[0].args = list(zip(args, types))
        op.regions.append(region)


@custom_syntax("stablehlo.custom_call")
def _custom_call_syntax(p: Parser, op: MOp):
    pos = p.pos
    target = p.symbol() if p.peek("@") else "?"
    raise UnsupportedOpError(f"unsupported op 'stablehlo.custom_call' (call target @{target})",
                             location=str(p.location(pos)),
                             hint="custom calls run code retarget cannot see; export the model without them")


@custom_syntax("stablehlo.return")
def _return_syntax(p: Parser, op: MOp):
    op.operands = p.comma_list(p.value_id)
    p.expect(":")
    op.operand_types = p.comma_list(p.type)


# -- converters --------------------------------------------------------------------------------


def _binary(cv: Converter, op: MOp):
    return cv.b.op(BINARY[op.name.split(".")[1]], cv.values(op))


def _unary(cv: Converter, op: MOp):
    return cv.b.op(UNARY[op.name.split(".")[1]], cv.values(op))


def _chlo_unary(cv: Converter, op: MOp):
    return cv.b.op(CHLO_UNARY[op.name.split(".")[1]], cv.values(op))


for _n in BINARY:
    converts(f"stablehlo.{_n}")(_binary)
for _n in UNARY:
    converts(f"stablehlo.{_n}")(_unary)
for _n in CHLO_UNARY:
    converts(f"chlo.{_n}")(_chlo_unary)


@converts("chlo.erfc")
def _erfc(cv: Converter, op: MOp):
    x = cv.value(op, 0)
    one = cv.b.constant(np.array(1, dtype=x.type.dtype.np_dtype))
    return cv.b.op("rt.sub", [one, cv.b.op("rt.erf", [x])])


@converts("stablehlo.custom_call")
def _custom_call(cv: Converter, op: MOp):
    raise UnsupportedOpError(f"unsupported op 'stablehlo.custom_call' (call target {op.attrs.get('call_target_name')})",
                             location=str(op.loc),
                             hint="custom calls run code retarget cannot see; export the model without them")


def _ints(v) -> list[int]:
    if isinstance(v, DenseAttr):
        return [int(x) for x in v.array.reshape(-1)]
    if isinstance(v, (int, np.integer)):
        return [int(v)]
    return [int(x) for x in np.asarray(v).reshape(-1)]


def _dims_of(attr) -> dict:
    """`#stablehlo.gather<offset_dims = [1], index_vector_dim = 1>` (or a dict) as {name: ints}."""
    if isinstance(attr, OpaqueAttr):
        return {k: [int(x) for x in v.strip("[]").split(",") if x.strip()]
                for k, v in re.findall(r"(\w+)\s*=\s*(\[[^\]]*\]|-?\d+)", attr.text)}
    return {k: _ints(v) for k, v in (attr or {}).items()}


@converts("stablehlo.reverse")
def _reverse(cv: Converter, op: MOp):
    return C.reverse(cv.b, cv.value(op, 0), _ints(op.attrs.get("dims", op.attrs.get("dimensions"))))


@converts("stablehlo.gather")
def _gather(cv: Converter, op: MOp):
    """The general gather, as one `rt.gather` of the flattened operand at each result element's linear
    index (start, clamped as the spec says, + batching index + offset); a plain `take` along one axis
    (what x[i] and embeddings lower to) is one `rt.gather` of the operand itself."""
    x, idx = cv.values(op)
    b, out = cv.b, cv.result_type(op)
    nums = _dims_of(op.attrs["dimension_numbers"]) | {k: _ints(op.attrs[k]) for k in (
        "offset_dims", "collapsed_slice_dims", "start_index_map", "index_vector_dim", "operand_batching_dims",
        "start_indices_batching_dims") if k in op.attrs}
    offset_dims, collapsed = nums.get("offset_dims", []), nums.get("collapsed_slice_dims", [])
    start_map, ivd = nums.get("start_index_map", []), nums.get("index_vector_dim", [idx.type.rank])[0]
    op_batching, idx_batching = nums.get("operand_batching_dims", []), nums.get("start_indices_batching_dims", [])
    sizes = _ints(op.attrs["slice_sizes"])
    if ivd == idx.type.rank:
        idx = reshape(b, idx, idx.type.shape + (1,))
    idx = transpose(b, idx, [d for d in range(idx.type.rank) if d != ivd] + [ivd])  # [batch..., vector]
    idx = cast(b, idx, DTYPES["i64"])
    batch_dims = [d for d in range(out.rank) if d not in offset_dims]
    kept = [d for d in range(x.type.rank) if d not in collapsed and d not in op_batching]
    if (len(start_map) == 1 and collapsed == start_map and not op_batching
            and all(sizes[d] == x.type.shape[d] for d in kept)):
        axis = start_map[0]
        y = b.op("rt.gather", [x, reshape(b, idx, idx.type.shape[:-1])], {"axis": axis})
        labels = [("offset", k) for k in kept if k < axis] + [("batch", k) for k in range(len(batch_dims))]
        labels += [("offset", k) for k in kept if k > axis]
        want = [("batch", batch_dims.index(d)) if d in batch_dims else ("offset", kept[offset_dims.index(d)])
                for d in range(out.rank)]
        return transpose(b, y, [labels.index(w) for w in want])

    def spread(v: Value, dims) -> Value:  # a value over result dims `dims` (in order), size 1 elsewhere
        return reshape(b, v, [out.shape[d] if d in dims else 1 for d in range(out.rank)])

    def iota(d: int) -> Value:
        return b.op("rt.iota", [], {"shape": tuple(out.shape[e] if e == d else 1 for e in range(out.rank)),
                                    "axis": d, "dtype": "i64"})

    linear, stride = None, 1
    for d in reversed(range(x.type.rank)):
        terms = []
        if d in start_map:
            k = start_map.index(d)
            start = b.op("rt.slice", [idx], {"start": (0,) * (idx.type.rank - 1) + (k,),
                                             "limit": idx.type.shape[:-1] + (k + 1,), "stride": (1,) * idx.type.rank})
            terms.append(spread(C.clamp(b, start, 0, x.type.shape[d] - sizes[d]), batch_dims))
        if d in op_batching:
            sd = idx_batching[op_batching.index(d)]
            terms.append(iota(batch_dims[sd if sd < ivd else sd - 1]))
        if d in kept:
            terms.append(iota(offset_dims[kept.index(d)]))
        for t in terms:
            t = t if stride == 1 else b.op("rt.mul", [t, C.scalar(b, stride, t)])
            linear = t if linear is None else b.op("rt.add", [linear, t])
        stride *= x.type.shape[d]
    flat = reshape(b, x, (x.type.num_elements,))
    if linear is None:
        linear = b.constant(np.zeros((), np.int64))
    return b.op("rt.gather", [flat, broadcast(b, linear, out.shape)], {"axis": 0})


def _starts(cv: Converter, op: MOp, first: int, shape, sizes) -> list:
    """Start indices from operand `first` on, clamped as the spec says to [0, dim - size]: ints where
    they are known at import (a loop counter), rank-0 i64 values otherwise."""
    out = []
    for d, (dim, size) in enumerate(zip(shape, sizes)):
        v = cv.value(op, first + d)
        known = fold(v, {})
        if known is not None:
            out.append(int(min(max(int(np.asarray(known).reshape(())), 0), dim - size)))
        else:
            out.append(C.clamp(cv.b, reshape(cv.b, cast(cv.b, v, DTYPES["i64"]), ()), 0, dim - size))
    return out


def _window_index(b, shape, starts, strides_of) -> Value:
    """The flat index, into a tensor of strides `strides_of`, of element (i + start) for each i of `shape`."""
    linear = None
    for d, (start, stride) in enumerate(zip(starts, strides_of)):
        t = b.op("rt.iota", [], {"shape": tuple(n if e == d else 1 for e, n in enumerate(shape)), "axis": d,
                                 "dtype": "i64"})
        t = b.op("rt.add", [t, start if isinstance(start, Value) else C.scalar(b, start, t)])
        t = b.op("rt.mul", [t, C.scalar(b, stride, t)])
        linear = t if linear is None else b.op("rt.add", [linear, t])
    return broadcast(b, linear, shape)


def _row_major_strides(shape) -> list[int]:
    return [int(np.prod(shape[d + 1:], dtype=np.int64)) for d in range(len(shape))]


@converts("stablehlo.dynamic_slice")
def _dynamic_slice(cv: Converter, op: MOp):
    x, b = cv.value(op, 0), cv.b
    sizes = _ints(op.attrs.get("sizes", op.attrs.get("slice_sizes")))
    starts = _starts(cv, op, 1, x.type.shape, sizes)
    if all(isinstance(v, int) for v in starts):
        return b.op("rt.slice", [x], {"start": tuple(starts), "limit": tuple(v + n for v, n in zip(starts, sizes)),
                                      "stride": (1,) * x.type.rank})
    index = _window_index(b, tuple(sizes), starts, _row_major_strides(x.type.shape))
    return b.op("rt.gather", [reshape(b, x, (x.type.num_elements,)), index], {"axis": 0})


@converts("stablehlo.dynamic_update_slice")
def _dynamic_update_slice(cv: Converter, op: MOp):
    x, update, b = cv.value(op, 0), cv.value(op, 1), cv.b
    starts = _starts(cv, op, 2, x.type.shape, update.type.shape)
    if all(isinstance(v, int) for v in starts):
        from .tensor import insert_slice

        return insert_slice(cv, op, update, x, starts, [1] * x.type.rank)
    # at run time: each element of x reads the update where it lies inside the window
    inside, where = None, []
    for d, (start, size) in enumerate(zip(starts, update.type.shape)):
        i = b.op("rt.iota", [], {"shape": tuple(n if e == d else 1 for e, n in enumerate(x.type.shape)), "axis": d,
                                 "dtype": "i64"})
        offset = b.op("rt.sub", [i, start if isinstance(start, Value) else C.scalar(b, start, i)])
        hit = b.op("rt.and", [b.op("rt.cmp", [offset, C.scalar(b, 0, offset)], {"predicate": "ge"}),
                              b.op("rt.cmp", [offset, C.scalar(b, size, offset)], {"predicate": "lt"})])
        inside = hit if inside is None else b.op("rt.and", [inside, hit])
        where.append(C.clamp(b, offset, 0, size - 1))
    index = None
    for offset, stride in zip(where, _row_major_strides(update.type.shape)):
        t = b.op("rt.mul", [offset, C.scalar(b, stride, offset)])
        index = t if index is None else b.op("rt.add", [index, t])
    moved = b.op("rt.gather", [reshape(b, update, (update.type.num_elements,)), broadcast(b, index, x.type.shape)],
                 {"axis": 0})
    return b.op("rt.select", [broadcast(b, inside, x.type.shape), moved, x])


def _run_region(cv: Converter, op: MOp, block, values, in_body: bool) -> list:
    """The values a region's `stablehlo.return` gives for block arguments `values`."""
    saved, saved_body = cv.env, cv.in_body
    cv.env = dict(saved) | {a: v for (a, _), v in zip(block.args, values)}
    cv.in_body = in_body or saved_body
    try:
        return cv.run_block(block.ops, terminators=("stablehlo.return",))
    finally:
        cv.env, cv.in_body = saved, saved_body


MAX_WHILE_TRIPS = 4096


@converts("stablehlo.while")
def _while(cv: Converter, op: MOp):
    """Unrolled: the condition must fold to a constant on every trip (a counted loop, as `fori_loop`
    and `scan` lower); carried values that fold are kept as constants so the counter stays one."""
    values = cv.values(op)
    cond, body = op.regions[0][0], op.regions[1][0]
    memo: dict = {}
    for _ in range(MAX_WHILE_TRIPS + 1):
        (go,) = _run_region(cv, op, cond, values, False)
        known = fold(go, memo)
        if known is None:
            raise UnsupportedOpError(f"'{op.name}': the loop condition depends on values computed at run time",
                                     location=str(op.loc),
                                     hint="only loops with a trip count known at import time are supported "
                                          "(they are unrolled)")
        if not bool(np.asarray(known).reshape(-1)[0]):
            return values
        values = _run_region(cv, op, body, values, False)
        values = [cv.b.constant(np.asarray(a)) if (a := fold(v, memo)) is not None and np.size(a) <= 64 else v
                  for v in values]
    raise UnsupportedOpError(f"'{op.name}': more than {MAX_WHILE_TRIPS} trips", location=str(op.loc),
                             hint="the loop is unrolled at import; shorten it or move it out of the model")


MAX_SORT = 4096


@converts("stablehlo.sort")
def _sort(cv: Converter, op: MOp):
    """Sorting by rank: the comparator runs on every pair (i, j) at once as broadcast tensor ops; an element's
    position is the count of those that go before it (ties by index: stable), and each operand is gathered
    in that order. Exact for any strict weak order; n^2 work along the sorted dim."""
    xs = cv.values(op)
    b = cv.b
    rank = xs[0].type.rank
    if rank == 0 or any(x.type.shape != xs[0].type.shape for x in xs):
        raise cv.error(op, f"sorts operands of shapes {', '.join(str(x.type) for x in xs)}; they must be one shape "
                           "of rank 1 or more")
    dim = int(op.attrs.get("dimension", -1)) % rank
    if xs[0].type.shape[dim] > MAX_SORT:
        raise UnsupportedOpError(f"'{op.name}': sorting {xs[0].type.shape[dim]} elements is not supported",
                                 location=str(op.loc), hint=f"the sort compares every pair; at most {MAX_SORT}")
    perm = [d for d in range(rank) if d != dim] + [dim]
    xs = [transpose(b, x, perm) for x in xs]
    lead, n = xs[0].type.shape[:-1], xs[0].type.shape[-1]
    pairs = []
    for x in xs:
        pairs += [reshape(b, x, lead + (n, 1)), reshape(b, x, lead + (1, n))]
    # the comparator's arguments are lhs0, rhs0, lhs1, rhs1, ...: element i as lhs, element j as rhs
    (before,) = _run_region(cv, op, op.regions[0][0], pairs, True)  # before[.., i, j]: i goes before j
    before = broadcast(b, before, lead + (n, n))
    swap = list(range(len(lead))) + [len(lead) + 1, len(lead)]
    after = transpose(b, before, swap)  # after[.., i, j]: j goes before i
    ties = b.op("rt.and", [b.op("rt.not", [before]), b.op("rt.not", [after])])
    earlier = b.constant(np.tril(np.ones((n, n), bool), -1))  # j < i
    ahead = b.op("rt.or", [after, b.op("rt.and", [ties, earlier])])
    position = b.op("rt.reduce", [cast(b, ahead, DTYPES["i64"])], {"kind": "sum", "axes": (len(lead) + 1,)})
    slots = b.op("rt.iota", [], {"shape": (1,) * len(lead) + (1, n), "axis": len(lead) + 1, "dtype": "i64"})
    lands = b.op("rt.cmp", [reshape(b, position, lead + (n, 1)), slots], {"predicate": "eq"})  # [.., i, k]
    source = b.op("rt.iota", [], {"shape": (1,) * len(lead) + (n, 1), "axis": len(lead), "dtype": "i64"})
    order = b.op("rt.reduce", [b.op("rt.mul", [cast(b, lands, DTYPES["i64"]), source])],
                 {"kind": "sum", "axes": (len(lead),)})  # [.., k]: the element that lands at k
    flat_index = order
    if lead:  # each row's elements start at row * n of the flattened operand
        row = b.constant((np.arange(int(np.prod(lead)), dtype=np.int64) * n).reshape(lead + (1,)))
        flat_index = b.op("rt.add", [order, row])
    inverse = [perm.index(d) for d in range(rank)]
    return [transpose(b, b.op("rt.gather", [reshape(b, x, (x.type.num_elements,)), flat_index], {"axis": 0}),
                      inverse) for x in xs]


@converts("stablehlo.constant")
def _constant(cv: Converter, op: MOp):
    return cv.b.op("rt.constant", [], {"value": op.attrs["value"]})


@converts("stablehlo.convert")
def _convert(cv: Converter, op: MOp):
    return cast(cv.b, cv.value(op, 0), cv.result_type(op).dtype)


converts("stablehlo.bitcast_convert")(bitcast)


@converts("stablehlo.reshape")
def _reshape(cv: Converter, op: MOp):
    x = cv.value(op, 0)
    return reshape(cv.b, x, cv.result_shape(op, like=x))


@converts("stablehlo.transpose")
def _transpose(cv: Converter, op: MOp):
    return transpose(cv.b, cv.value(op, 0), _ints(op.attrs.get("dims", op.attrs.get("permutation"))))


@converts("stablehlo.broadcast_in_dim")
def _broadcast_in_dim(cv: Converter, op: MOp):
    x = cv.value(op, 0)
    out = cv.result_type(op)
    dims = _ints(op.attrs.get("dims", op.attrs.get("broadcast_dimensions", [])))
    x = transpose(cv.b, x, sorted(range(len(dims)), key=lambda k: dims[k]))
    shape = [1] * out.rank
    target = list(out.shape)
    for k, d in enumerate(sorted(dims)):
        shape[d] = x.type.shape[k]
        if target[d] is None:  # a `?` of the result: the operand's size there
            target[d] = x.type.shape[k]
    if any(d is None for d in target):
        raise cv.error(op, f"result {out} has sizes its operand does not determine; use dynamic_broadcast_in_dim")
    return broadcast(cv.b, reshape(cv.b, x, shape), target)


@converts("stablehlo.concatenate")
def _concatenate(cv: Converter, op: MOp):
    return cv.b.op("rt.concat", cv.values(op), {"axis": _ints(op.attrs.get("dim", op.attrs.get("dimension")))[0]})


@converts("stablehlo.slice")
def _slice(cv: Converter, op: MOp):
    return cv.b.op("rt.slice", [cv.value(op, 0)], {
        "start": tuple(_ints(op.attrs["start_indices"])), "limit": tuple(_ints(op.attrs["limit_indices"])),
        "stride": tuple(_ints(op.attrs["strides"]))})


@converts("stablehlo.pad")
def _pad(cv: Converter, op: MOp):
    x = cv.value(op, 0)
    value = cv.static(op, 1, "padding value").reshape(-1)[0].item()
    low = _ints(op.attrs.get("low", op.attrs.get("edge_padding_low")))
    high = _ints(op.attrs.get("high", op.attrs.get("edge_padding_high")))
    interior = _ints(op.attrs.get("interior", op.attrs.get("interior_padding", [0] * x.type.rank)))
    return C.pad_signed(cv.b, C.dilate(cv.b, x, interior, value), low, high, value)


@converts("stablehlo.iota")
def _iota(cv: Converter, op: MOp):
    t = cv.result_type(op)
    return cv.b.op("rt.iota", [], {"shape": cv.result_shape(op), "axis": int(op.attrs["iota_dimension"]),
                                   "dtype": t.dtype.name})


@converts("stablehlo.clamp")
def _clamp(cv: Converter, op: MOp):
    lo, x, hi = cv.values(op)
    return cv.b.op("rt.min", [cv.b.op("rt.max", [x, lo]), hi])


@converts("stablehlo.select")
def _select(cv: Converter, op: MOp):
    return cv.b.op("rt.select", cv.values(op))


def _enum_word(v) -> str:
    return v.text.rstrip(">").split()[-1] if isinstance(v, OpaqueAttr) else str(v)


@converts("stablehlo.compare")
def _compare(cv: Converter, op: MOp):
    x, y = cv.values(op)
    direction = _enum_word(op.attrs["comparison_direction"])
    if _enum_word(op.attrs.get("compare_type", "")) == "TOTALORDER" and x.type.dtype.is_float:
        return _total_order(cv.b, x, y, DIRECTIONS[direction])
    if _enum_word(op.attrs.get("compare_type", "")) == "UNSIGNED":
        unsigned = DTYPES.get("u" + x.type.dtype.name)
        if unsigned is not None:
            x, y = cast(cv.b, x, unsigned), cast(cv.b, y, unsigned)
    return cv.b.op("rt.cmp", [x, y], {"predicate": DIRECTIONS[direction]})


def _total_order(b, x: Value, y: Value, predicate: str) -> Value:
    """IEEE totalOrder: -0 before +0, NaN after everything (NaNs of either sign, as numpy sorts them)."""
    def cmp(p, u, v):
        return b.op("rt.cmp", [u, v], {"predicate": p})

    def before(u, v):
        nan_v = b.op("rt.and", [cmp("ne", v, v), cmp("eq", u, u)])
        zeros = b.op("rt.and", [cmp("eq", u, C.scalar(b, 0, u)), cmp("eq", v, C.scalar(b, 0, v))])
        signed_zeros = b.op("rt.and", [zeros, cmp("lt", b.op("rt.reciprocal", [u]), b.op("rt.reciprocal", [v]))])
        return b.op("rt.or", [b.op("rt.or", [cmp("lt", u, v), nan_v]), signed_zeros])

    if predicate in ("lt", "gt"):
        return before(x, y) if predicate == "lt" else before(y, x)
    if predicate in ("le", "ge"):
        return b.op("rt.not", [before(y, x) if predicate == "le" else before(x, y)])
    either = b.op("rt.or", [before(x, y), before(y, x)])
    return either if predicate == "ne" else b.op("rt.not", [either])


def _dot_dims(op: MOp):
    attr = op.attrs.get("dot_dimension_numbers")
    if isinstance(attr, OpaqueAttr):  # generic form: #stablehlo.dot<lhs_batching_dimensions = [0], ...>
        for key, text in re.findall(r"(\w+_dimensions)\s*=\s*\[([^\]]*)\]", attr.text):
            op.attrs[key] = [int(v) for v in text.split(",") if v.strip()]
    return [list(_ints(op.attrs.get(f"{side}_{kind}_dimensions", [])))
            for side in ("lhs", "rhs") for kind in ("batching", "contracting")]


@converts("stablehlo.dot_general", "stablehlo.dot")
def _dot_general(cv: Converter, op: MOp):
    x, y = cv.values(op)
    dtype = cv.result_type(op).dtype
    x, y = cast(cv.b, x, dtype), cast(cv.b, y, dtype)
    if op.name == "stablehlo.dot":
        lb, lc, rb, rc = [], [x.type.rank - 1], [], [0]
    else:
        lb, lc, rb, rc = _dot_dims(op)
    x_labels = [("x", d) for d in range(x.type.rank)]
    y_labels = [("y", d) for d in range(y.type.rank)]
    for i, (a, b_) in enumerate(zip(lb, rb)):
        x_labels[a] = y_labels[b_] = ("batch", i)
    for i, (a, b_) in enumerate(zip(lc, rc)):
        x_labels[a] = y_labels[b_] = ("sum", i)
    out = [("batch", i) for i in range(len(lb))]
    out += [lab for lab in x_labels if lab[0] == "x"] + [lab for lab in y_labels if lab[0] == "y"]
    return contract(cv.b, x, x_labels, y, y_labels, out)


def _conv_layout(text: str):
    """`[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]` (or the generic `#stablehlo.conv<...>`) as three lists."""
    groups = re.findall(r"\[([^\]]*)\]", text)
    if len(groups) != 3:
        raise ValueError(f"cannot read convolution dimension numbers '{text}'")
    return [[t.strip() for t in g.split(",")] for g in groups]


@converts("stablehlo.convolution")
def _convolution(cv: Converter, op: MOp):
    x, w = cv.values(op)
    b = cv.b
    lhs, rhs, out = _conv_layout(op.attrs["dimension_numbers"].text)
    if len(lhs) != 4:
        raise UnsupportedOpError(f"'{op.name}': only 2-d convolutions are supported, got {len(lhs) - 2}-d",
                                 location=str(op.loc))
    if int(op.attrs.get("batch_group_count", 1)) != 1:
        raise UnsupportedOpError(f"'{op.name}': batch_group_count != 1 is not supported", location=str(op.loc))
    pad = _ints(op.attrs.get("padding", [0, 0, 0, 0]))
    xn = transpose(b, x, [lhs.index(k) for k in ("b", "f", "0", "1")])
    wn = transpose(b, w, [rhs.index(k) for k in ("o", "i", "0", "1")])
    # input dilation (how JAX spells a transposed convolution) is interior zeros; negative padding crops
    xn = C.dilate(b, xn, [0, 0] + [d - 1 for d in _ints(op.attrs.get("lhs_dilation", [1, 1]))])
    xn = C.pad_signed(b, xn, [0, 0, pad[0], pad[2]], [0, 0, pad[1], pad[3]])
    wn = C.reverse(b, wn, [2 + d for d, r in enumerate(op.attrs.get("window_reversal", [])) if bool(r)])
    attrs = {"strides": tuple(_ints(op.attrs.get("window_strides", [1, 1]))),
             "dilations": tuple(_ints(op.attrs.get("rhs_dilation", [1, 1]))),
             "pad": (0, 0, 0, 0), "groups": int(op.attrs.get("feature_group_count", 1))}
    y = b.op("rt.conv2d", [xn, wn], attrs)
    return transpose(b, y, [["b", "f", "0", "1"].index(k) for k in out])


def _reducer_kind(cv: Converter, op: MOp) -> str:
    if "applies" in op.attrs:
        kind = REDUCERS.get(op.attrs["applies"])
    else:
        block = op.regions[0][0]
        body = [o for o in block.ops if o.name != "stablehlo.return"]
        kind = None
        args = {a for a, _ in block.args}
        if len(body) == 1 and set(body[0].operands) == args and block.ops[-1].operands == body[0].results:
            kind = REDUCERS.get(body[0].name)
    if kind is None:
        raise UnsupportedOpError(f"'{op.name}': only reductions by one of {', '.join(REDUCERS)} are supported",
                                 location=str(op.loc))
    return kind


def _with_init(cv: Converter, y: Value, init: Value, kind: str) -> Value:
    identity = {"sum": 0, "prod": 1, "max": -np.inf, "min": np.inf, "or": False, "and": True}[kind]
    if is_splat(init, identity):
        return y
    if kind in ("max", "min") and y.type.dtype.is_integer:
        info = np.iinfo(y.type.dtype.np_dtype) if y.type.dtype.kind != "bool" else None
        if info is not None and is_splat(init, info.min if kind == "max" else info.max):
            return y
    combine = {"sum": "rt.add", "prod": "rt.mul", "max": "rt.max", "min": "rt.min", "or": "rt.or", "and": "rt.and"}
    return cv.b.op(combine[kind], [y, init])


@converts("stablehlo.reduce")
def _reduce(cv: Converter, op: MOp):
    values = cv.values(op)
    dims = tuple(_ints(op.attrs["dimensions"]))
    if len(values) == 2 and ("applies" in op.attrs or _simple_reducer(op)):
        x, init = values
        kind = _reducer_kind(cv, op)
        return _with_init(cv, cv.b.op("rt.reduce", [x], {"kind": kind, "axes": dims}), init, kind)
    return _reduce_by_body(cv, op, values[:len(values) // 2], values[len(values) // 2:], dims)


def _simple_reducer(op: MOp) -> bool:
    block = op.regions[0][0]
    body = [o for o in block.ops if o.name != "stablehlo.return"]
    return len(body) == 1 and body[0].name in REDUCERS and set(body[0].operands) == {a for a, _ in block.args} \
        and block.ops[-1].operands == body[0].results


def _reduce_by_body(cv: Converter, op: MOp, xs: list, inits: list, dims) -> list:
    """Any reducer (argmax's value-and-index pairs, ...): the reduced dims flattened into one, then halved
    by applying the body to neighbouring pairs, all at once as tensor ops (log2(n) applications), and
    last to the init. The spec leaves the order of a reduction to the implementation."""
    b = cv.b
    rank = xs[0].type.rank
    kept = [d for d in range(rank) if d not in dims]
    shape = tuple(xs[0].type.shape[d] for d in kept)
    n = int(np.prod([xs[0].type.shape[d] for d in dims], dtype=np.int64))
    xs = [reshape(b, transpose(b, x, kept + list(dims)), shape + (n,)) for x in xs]
    block = op.regions[0][0]

    def part(x, start, stop, step=1):
        return b.op("rt.slice", [x], {"start": (0,) * len(shape) + (start,), "limit": shape + (stop,),
                                      "stride": (1,) * len(shape) + (step,)})

    def apply(lhs, rhs):
        outs = _run_region(cv, op, block, lhs + rhs, True)
        return [broadcast(b, cast(b, o, x.type.dtype), x.type.shape) for o, x in zip(outs, lhs)]

    while n > 1:
        half = n // 2
        ys = apply([part(x, 0, 2 * half, 2) for x in xs], [part(x, 1, 2 * half, 2) for x in xs])
        if n % 2:
            ys = [b.op("rt.concat", [y, part(x, n - 1, n)], {"axis": len(shape)}) for y, x in zip(ys, xs)]
        xs, n = ys, half + n % 2
    inits = [broadcast(b, i, shape) for i in inits]
    if n == 0:
        return inits
    return apply(inits, [reshape(b, x, shape) for x in xs])


@converts("stablehlo.reduce_window")
def _reduce_window(cv: Converter, op: MOp):
    if len(op.operands) != 2:
        raise UnsupportedOpError(f"'{op.name}': windows over several operands are not supported", location=str(op.loc))
    x, init = cv.values(op)
    b = cv.b
    kind = _reducer_kind(cv, op)
    rank = x.type.rank
    window = _ints(op.attrs["window_dimensions"])
    strides = _ints(op.attrs.get("window_strides", [1] * rank))
    padding = _ints(op.attrs.get("padding", [0] * (2 * rank)))
    dilations = _ints(op.attrs.get("base_dilations", [1] * rank)) + _ints(op.attrs.get("window_dilations", [1] * rank))
    if rank != 4 or kind not in ("max", "sum") or any(d != 1 for d in dilations):
        raise UnsupportedOpError(f"'{op.name}': only 2-d max and sum windows without dilation are supported",
                                 location=str(op.loc))

    def trivial(d):
        return window[d] == 1 and strides[d] == 1 and padding[2 * d] == padding[2 * d + 1] == 0

    spatial = [1, 2] if trivial(0) and trivial(3) else [2, 3]
    if not all(trivial(d) for d in range(4) if d not in spatial):
        raise UnsupportedOpError(f"'{op.name}': the window must span two spatial dims", location=str(op.loc))
    rest = [d for d in range(4) if d not in spatial]
    perm = rest + spatial
    attrs = {"kernel": tuple(window[d] for d in spatial), "strides": tuple(strides[d] for d in spatial),
             "pad": (padding[2 * spatial[0]], padding[2 * spatial[0] + 1],
                     padding[2 * spatial[1]], padding[2 * spatial[1] + 1])}
    xn = transpose(b, x, perm)
    if kind == "max":
        y = b.op("rt.max_pool2d", [xn], attrs)
    else:
        attrs["count_include_pad"] = True
        y = b.op("rt.avg_pool2d", [xn], attrs)
        y = b.op("rt.mul", [y, b.constant(np.array(attrs["kernel"][0] * attrs["kernel"][1],
                                                   dtype=y.type.dtype.np_dtype))])
    y = transpose(b, y, [perm.index(d) for d in range(4)])
    return _with_init(cv, y, init, kind)

