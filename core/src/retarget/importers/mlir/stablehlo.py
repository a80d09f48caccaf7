"""`stablehlo` (and the few `chlo` ops JAX emits), pretty and generic forms.

Layouts are explicit in StableHLO (`dim_numbers`, reduce_window's window): converters
transpose operands into NCHW/OIHW for the graph op and the result back.
"""

from __future__ import annotations

import re

import numpy as np

from ...errors import UnsupportedOpError
from ...ir.core import DenseAttr, Value
from ...ir.dtypes import DTYPES
from ...mlir.syntax import MOp, OpaqueAttr, Parser, custom_syntax
from .contract import contract
from .convert import Converter, broadcast, cast, converts, is_splat, reshape, transpose
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

custom_syntax(*(f"stablehlo.{n}" for n in list(BINARY) + list(UNARY) + ["reshape", "convert", "clamp"]))(functional)
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
               "stablehlo.dot")
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


@converts("stablehlo.constant")
def _constant(cv: Converter, op: MOp):
    return cv.b.op("rt.constant", [], {"value": op.attrs["value"]})


@converts("stablehlo.convert")
def _convert(cv: Converter, op: MOp):
    return cast(cv.b, cv.value(op, 0), cv.result_type(op).dtype)


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
    if any(interior):
        raise UnsupportedOpError("'stablehlo.pad': interior padding is not supported", location=str(op.loc))
    if any(v < 0 for v in low + high):
        start = [max(-v, 0) for v in low]
        limit = [s - max(-v, 0) for s, v in zip(x.type.shape, high)]
        x = cv.b.op("rt.slice", [x], {"start": tuple(start), "limit": tuple(limit), "stride": (1,) * x.type.rank})
        low, high = [max(v, 0) for v in low], [max(v, 0) for v in high]
    if not any(low + high):
        return x
    return cv.b.op("rt.pad", [x], {"low": tuple(low), "high": tuple(high), "value": value})


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
    if _enum_word(op.attrs.get("compare_type", "")) == "UNSIGNED":
        unsigned = DTYPES.get("u" + x.type.dtype.name)
        if unsigned is not None:
            x, y = cast(cv.b, x, unsigned), cast(cv.b, y, unsigned)
    return cv.b.op("rt.cmp", [x, y], {"predicate": DIRECTIONS[direction]})


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
    if _ints(op.attrs.get("lhs_dilation", [1, 1])) != [1, 1]:
        raise UnsupportedOpError(f"'{op.name}': input dilation (transposed convolution) is not supported",
                                 location=str(op.loc))
    if int(op.attrs.get("batch_group_count", 1)) != 1:
        raise UnsupportedOpError(f"'{op.name}': batch_group_count != 1 is not supported", location=str(op.loc))
    if any(bool(r) for r in op.attrs.get("window_reversal", [])):
        raise UnsupportedOpError(f"'{op.name}': window reversal is not supported", location=str(op.loc))
    pad = _ints(op.attrs.get("padding", [0, 0, 0, 0]))
    if any(v < 0 for v in pad):
        raise UnsupportedOpError(f"'{op.name}': negative padding is not supported", location=str(op.loc))
    attrs = {"strides": tuple(_ints(op.attrs.get("window_strides", [1, 1]))),
             "dilations": tuple(_ints(op.attrs.get("rhs_dilation", [1, 1]))),
             "pad": (pad[0], pad[1], pad[2], pad[3]),
             "groups": int(op.attrs.get("feature_group_count", 1))}
    xn = transpose(b, x, [lhs.index(k) for k in ("b", "f", "0", "1")])
    wn = transpose(b, w, [rhs.index(k) for k in ("o", "i", "0", "1")])
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
    if len(op.operands) != 2:
        raise UnsupportedOpError(f"'{op.name}': reductions of several operands (argmax) are not supported",
                                 location=str(op.loc))
    x, init = cv.values(op)
    kind = _reducer_kind(cv, op)
    y = cv.b.op("rt.reduce", [x], {"kind": kind, "axes": tuple(_ints(op.attrs["dimensions"]))})
    return _with_init(cv, y, init, kind)


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
             "pad": (padding[2 * spatial[0]], padding[2 * spatial[0] + 1], padding[2 * spatial[1]], padding[2 * spatial[1] + 1])}
    xn = transpose(b, x, perm)
    if kind == "max":
        y = b.op("rt.max_pool2d", [xn], attrs)
    else:
        attrs["count_include_pad"] = True
        y = b.op("rt.avg_pool2d", [xn], attrs)
        y = b.op("rt.mul", [y, b.constant(np.array(attrs["kernel"][0] * attrs["kernel"][1], dtype=y.type.dtype.np_dtype))])
    y = transpose(b, y, [perm.index(d) for d in range(4)])
    return _with_init(cv, y, init, kind)

