"""`linalg` on tensors: named ops map onto graph ops; `linalg.generic` is evaluated over
its iteration space.

A generic's iteration space has one axis per loop dim. Each input is transposed and
reshaped so that its axes line up with the dims its indexing map reads (size 1 for the
dims it does not read); the scalar body then runs as broadcasting tensor ops. Results
are reduced over the reduction dims with the kind of the op that combines the body's
value with the `outs` accumulator, then combined with the `outs` init itself.
Named ops accumulate into `outs` too: `C = init + A @ B`; a zero init adds nothing.
"""

from __future__ import annotations

import numpy as np

from ...errors import UnsupportedOpError
from ...ir.core import DenseAttr, TensorType, Value
from ...mlir.syntax import AffineMap, MBlock, MOp, Parser, custom_syntax
from .contract import contract
from .convert import Converter, broadcast, cast, converts, is_splat, reshape, transpose

ELEMENTWISE_UNARY = {
    "exp": "rt.exp", "log": "rt.log", "abs": "rt.abs", "ceil": "rt.ceil", "floor": "rt.floor",
    "negf": "rt.neg", "reciprocal": "rt.reciprocal", "round": "rt.round", "sqrt": "rt.sqrt",
    "rsqrt": "rt.rsqrt", "tanh": "rt.tanh", "erf": "rt.erf",
}
ELEMENTWISE_BINARY = {"add": "rt.add", "sub": "rt.sub", "mul": "rt.mul", "div": "rt.div", "max": "rt.max",
                      "min": "rt.min", "powf": "rt.pow"}
COMBINERS = {
    "arith.addf": "sum", "arith.addi": "sum", "arith.mulf": "prod", "arith.muli": "prod",
    "arith.maximumf": "max", "arith.maxnumf": "max", "arith.maxsi": "max",
    "arith.minimumf": "min", "arith.minnumf": "min", "arith.minsi": "min",
    "arith.ori": "or", "arith.andi": "and",
}
COMBINE_OP = {"sum": "rt.add", "prod": "rt.mul", "max": "rt.max", "min": "rt.min", "or": "rt.or", "and": "rt.and"}
NAMED = ("fill matmul batch_matmul matvec vecmat dot matmul_transpose_b batch_matmul_transpose_b "
         "conv_2d_nhwc_hwcf conv_2d_nchw_fchw depthwise_conv_2d_nhwc_hwc depthwise_conv_2d_nhwc_hwcm "
         "pooling_nhwc_max pooling_nhwc_sum pooling_nhwc_min pooling_nchw_max pooling_nchw_sum "
         "generic reduce map transpose broadcast copy square select").split()


# -- syntax -----------------------------------------------------------------------------------


def _operands_with_types(p: Parser):
    p.expect("(")
    names = p.comma_list(p.value_id, ":")
    types = []
    if p.accept(":"):
        types = p.comma_list(p.type)
    p.expect(")")
    return names, types


def _brace_kind(p: Parser) -> str:
    """What a `{` starts here: an attribute dict, a region, or a short-form body `{ arith.addf }`."""
    save = p.pos
    p.expect("{")
    p.skip()
    try:
        if p.peek("}"):
            return "attrs"
        if p.peek("^") or p.peek("%"):
            return "region"
        word = p.bare_id() if not p.peek('"') else p.string()
        if p.peek("="):
            return "attrs"
        if p.peek("}") and "." in word:
            return "short"
        return "region"
    finally:
        p.pos = save


@custom_syntax(*(f"linalg.{n}" for n in NAMED + list(ELEMENTWISE_UNARY) + list(ELEMENTWISE_BINARY)))
def _structured_syntax(p: Parser, op: MOp):
    ins, outs, in_types, out_types, region_args = [], [], [], [], None
    while True:
        if p.peek("{"):
            kind = _brace_kind(p)
            if kind == "attrs":
                op.attrs.update(p.attr_dict())
            elif kind == "short":
                p.expect("{")
                op.attrs["short_body"] = p.bare_id()
                p.expect("}")
            else:
                region = p.region()
                if region_args is not None:
                    region[0].args = region_args
                op.regions = [region]
        elif p.accept_keyword("ins"):
            ins, in_types = _operands_with_types(p)
        elif p.accept_keyword("outs"):
            outs, out_types = _operands_with_types(p)
        elif p.accept_keyword("attrs"):
            p.expect("=")
            op.attrs.update(p.attr_dict())
        elif p.peek("("):
            p.expect("(")
            region_args = p.comma_list(p.typed_value, ")")
            p.expect(")")
        elif p.accept("->"):
            op.result_types = p.comma_list(p.type)
        elif p.peek("%") or p.peek('"') or p.at_end():
            break
        else:
            save = p.pos
            p.skip()
            m = p._match(__import__("re").compile(r"[A-Za-z_][A-Za-z0-9_]*"))
            if m is None or not p.accept("="):
                p.pos = save
                break
            op.attrs[m] = p.attribute()
    op.operands = ins + outs
    op.operand_types = in_types + out_types
    op.attrs["num_inputs"] = len(ins)
    if not op.result_types:
        op.result_types = [t for t in out_types if isinstance(t, TensorType)]


@custom_syntax("linalg.yield")
def _yield_syntax(p: Parser, op: MOp):
    if p.peek("%"):
        op.operands = p.comma_list(p.value_id)
        p.expect(":")
        op.operand_types = p.comma_list(p.type)


@custom_syntax("linalg.index")
def _index_syntax(p: Parser, op: MOp):
    op.attrs["dim"] = p.integer()
    p.expect(":")
    op.result_types = [p.type()]


# -- helpers -----------------------------------------------------------------------------------


def _split(cv: Converter, op: MOp):
    n_in = op.attrs.get("num_inputs")
    if n_in is None:
        n_in = op.attrs["operandSegmentSizes"][0]
    values = cv.values(op)
    return values[:n_in], values[n_in:]


def _ints(value) -> tuple:
    if isinstance(value, DenseAttr):
        return tuple(int(v) for v in value.array.reshape(-1))
    if isinstance(value, (int, np.integer)):
        return (int(value),) * 2
    return tuple(int(v) for v in value)


def accumulate(cv: Converter, result: Value, init: Value, kind: str = "sum") -> Value:
    """`init (+) result`, skipping an init that is the identity of the combination."""
    identity = {"sum": 0, "prod": 1, "max": -np.inf, "min": np.inf}.get(kind)
    if identity is not None and is_splat(init, identity):
        return result
    if kind == "max" and result.type.dtype.is_float and is_splat(init, np.finfo(np.float32).min):
        return result
    if kind == "min" and result.type.dtype.is_float and is_splat(init, np.finfo(np.float32).max):
        return result
    return cv.b.op(COMBINE_OP[kind], [init, cast(cv.b, result, init.type.dtype)])


# -- named ops -----------------------------------------------------------------------------------


@converts("linalg.fill")
def _fill(cv: Converter, op: MOp):
    (value,), (out,) = _split(cv, op)
    return broadcast(cv.b, reshape(cv.b, cast(cv.b, value, out.type.dtype), ()), out.type.shape)


@converts("linalg.copy")
def _copy(cv: Converter, op: MOp):
    (x,), (out,) = _split(cv, op)
    return cast(cv.b, x, out.type.dtype)


@converts("linalg.matmul", "linalg.batch_matmul", "linalg.matvec", "linalg.vecmat", "linalg.dot",
          "linalg.matmul_transpose_b", "linalg.batch_matmul_transpose_b")
def _matmul(cv: Converter, op: MOp):
    (a, b_), (init,) = _split(cv, op)
    if "indexing_maps" in op.attrs:
        return _contraction_from_maps(cv, op, a, b_, init)
    dtype = init.type.dtype
    a, b_ = cast(cv.b, a, dtype), cast(cv.b, b_, dtype)
    kind = op.name.split(".")[1]
    if kind.endswith("transpose_b"):
        b_ = transpose(cv.b, b_, list(range(b_.type.rank - 2)) + [b_.type.rank - 1, b_.type.rank - 2])
    if kind == "matvec":
        y = reshape(cv.b, cv.b.op("rt.matmul", [a, reshape(cv.b, b_, (b_.type.shape[0], 1))]), init.type.shape)
    elif kind == "vecmat":
        y = reshape(cv.b, cv.b.op("rt.matmul", [reshape(cv.b, a, (1, a.type.shape[0])), b_]), init.type.shape)
    elif kind == "dot":
        y = cv.b.op("rt.reduce", [cv.b.op("rt.mul", [a, b_])], {"kind": "sum", "axes": (0,)})
    else:
        y = cv.b.op("rt.matmul", [a, b_])
    return accumulate(cv, y, init)


def _contraction_from_maps(cv: Converter, op: MOp, a: Value, b_: Value, init: Value) -> Value:
    maps = op.attrs["indexing_maps"]
    labels = [_plain_dims(cv, op, m) for m in maps]
    dtype = init.type.dtype
    y = contract(cv.b, cast(cv.b, a, dtype), labels[0], cast(cv.b, b_, dtype), labels[1], labels[2])
    return accumulate(cv, y, init)


def _plain_dims(cv: Converter, op: MOp, m: AffineMap) -> list[int]:
    dims = m.dim_positions()
    if None in dims:
        raise UnsupportedOpError(f"'{op.name}': indexing map with expressions {m.results} is not supported",
                                 location=str(op.loc), hint="only projected permutations (plain dims) are")
    return dims


def _nhwc_to_nchw(cv, v):
    return transpose(cv.b, v, (0, 3, 1, 2))


def _nchw_to_nhwc(cv, v):
    return transpose(cv.b, v, (0, 2, 3, 1))


@converts("linalg.conv_2d_nhwc_hwcf", "linalg.conv_2d_nchw_fchw", "linalg.depthwise_conv_2d_nhwc_hwc",
          "linalg.depthwise_conv_2d_nhwc_hwcm")
def _conv(cv: Converter, op: MOp):
    (x, w), (init,) = _split(cv, op)
    b = cv.b
    dtype = init.type.dtype
    x, w = cast(b, x, dtype), cast(b, w, dtype)
    attrs = {"strides": _ints(op.attrs.get("strides", (1, 1))), "dilations": _ints(op.attrs.get("dilations", (1, 1)))}
    kind = op.name.split(".")[1]
    if kind == "conv_2d_nchw_fchw":
        return accumulate(cv, b.op("rt.conv2d", [x, w], attrs), init)
    if kind == "conv_2d_nhwc_hwcf":
        w = transpose(b, w, (3, 2, 0, 1))
    else:
        kh, kw, c = w.type.shape[:3]
        m = w.type.shape[3] if w.type.rank == 4 else 1
        w = reshape(b, transpose(b, reshape(b, w, (kh, kw, c * m)), (2, 0, 1)), (c * m, 1, kh, kw))
        attrs["groups"] = c
    y = _nchw_to_nhwc(cv, b.op("rt.conv2d", [_nhwc_to_nchw(cv, x), w], attrs))
    return accumulate(cv, reshape(b, y, init.type.shape), init)


@converts("linalg.pooling_nhwc_max", "linalg.pooling_nhwc_sum", "linalg.pooling_nhwc_min",
          "linalg.pooling_nchw_max", "linalg.pooling_nchw_sum")
def _pool(cv: Converter, op: MOp):
    (x, window), (init,) = _split(cv, op)
    b = cv.b
    if _ints(op.attrs.get("dilations", (1, 1))) != (1, 1):
        raise UnsupportedOpError(f"'{op.name}': dilated pooling is not supported", location=str(op.loc))
    kernel = tuple(window.type.shape)
    attrs = {"kernel": kernel, "strides": _ints(op.attrs.get("strides", (1, 1)))}
    layout, kind = op.name.split("_")[1], op.name.split("_")[2]
    if layout == "nhwc":
        x = _nhwc_to_nchw(cv, x)
    if kind == "min":
        x = b.op("rt.neg", [x])
    if kind == "sum":
        y = b.op("rt.avg_pool2d", [x], attrs)
        y = b.op("rt.mul", [y, b.constant(np.array(kernel[0] * kernel[1], dtype=y.type.dtype.np_dtype))])
    else:
        y = b.op("rt.max_pool2d", [x], attrs)
    if kind == "min":
        y = b.op("rt.neg", [y])
    if layout == "nhwc":
        y = _nchw_to_nhwc(cv, y)
    return accumulate(cv, y, init, kind)


def _elementwise_named(cv: Converter, op: MOp):
    ins, (out,) = _split(cv, op)
    kind = op.name.split(".")[1]
    if kind == "square":
        y = cv.b.op("rt.mul", [ins[0], ins[0]])
    elif kind == "select":
        y = cv.b.op("rt.select", ins)
    elif kind in ELEMENTWISE_UNARY:
        y = cv.b.op(ELEMENTWISE_UNARY[kind], ins)
    else:
        y = cv.b.op(ELEMENTWISE_BINARY[kind], ins)
    return broadcast(cv.b, cast(cv.b, y, out.type.dtype), out.type.shape)


for _k in list(ELEMENTWISE_UNARY) + list(ELEMENTWISE_BINARY) + ["square", "select"]:
    converts(f"linalg.{_k}")(_elementwise_named)


@converts("linalg.transpose")
def _transpose(cv: Converter, op: MOp):
    (x,), (out,) = _split(cv, op)
    return transpose(cv.b, x, op.attrs["permutation"])


@converts("linalg.broadcast")
def _broadcast(cv: Converter, op: MOp):
    (x,), (out,) = _split(cv, op)
    added = set(op.attrs["dimensions"])
    shape = [1 if d in added else s for d, s in enumerate(out.type.shape)]
    return broadcast(cv.b, reshape(cv.b, x, shape), out.type.shape)


# -- generic, reduce, map ------------------------------------------------------------------------


def _short_body(op: MOp, n_args: int, arg_types) -> MBlock:
    """`{ arith.addf }`: a block that applies that op to all the block arguments."""
    args = [(f"%short{i}", t) for i, t in enumerate(arg_types[:n_args])]
    body = MOp(op.attrs["short_body"], op.loc, ["%short_result"], [a for a, _ in args], [t for _, t in args],
               [arg_types[0]])
    yield_ = MOp("linalg.yield", op.loc, [], ["%short_result"])
    return MBlock(args, [body, yield_])


def _identity(rank: int) -> AffineMap:
    return AffineMap(rank, 0, tuple(("dim", d) for d in range(rank)))


@converts("linalg.generic")
def _generic(cv: Converter, op: MOp):
    ins, outs = _split(cv, op)
    iters = [str(t) for t in op.attrs["iterator_types"]]
    return structured(cv, op, ins, outs, list(op.attrs["indexing_maps"]), iters, op.regions[0][0])


@converts("linalg.reduce")
def _reduce(cv: Converter, op: MOp):
    ins, outs = _split(cv, op)
    rank = ins[0].type.rank
    dims = set(op.attrs["dimensions"])
    kept = AffineMap(rank, 0, tuple(("dim", d) for d in range(rank) if d not in dims))
    maps = [_identity(rank)] * len(ins) + [kept] * len(outs)
    iters = ["reduction" if d in dims else "parallel" for d in range(rank)]
    block = op.regions[0][0] if op.regions else _short_body(op, 2, op.operand_types)
    return structured(cv, op, ins, outs, maps, iters, block)


@converts("linalg.map")
def _map(cv: Converter, op: MOp):
    ins, outs = _split(cv, op)
    rank = outs[0].type.rank
    block = op.regions[0][0] if op.regions else _short_body(op, len(ins), op.operand_types)
    # a map's body has no argument for the output: give it one that nobody reads
    block = MBlock(list(block.args) + [("%map_out", None)], block.ops, block.label)
    return structured(cv, op, ins, outs, [_identity(rank)] * (len(ins) + 1), ["parallel"] * rank, block)


def structured(cv: Converter, op: MOp, ins, outs, maps, iters, block: MBlock):
    b = cv.b
    nd = len(iters)
    operands = list(ins) + list(outs)
    if len(maps) != len(operands):
        raise cv.error(op, f"has {len(operands)} operands but {len(maps)} indexing maps")
    sizes: list = [None] * nd
    for v, m in zip(operands, maps):
        if len(m.results) != v.type.rank:
            raise cv.error(op, f"indexing map with {len(m.results)} results for operand of type {v.type}")
        for r, s in zip(m.results, v.type.shape):
            if r[0] == "dim":
                if sizes[r[1]] not in (None, s):
                    raise cv.error(op, f"loop dim d{r[1]} is {sizes[r[1]]} for one operand and {s} for another")
                sizes[r[1]] = s
    if None in sizes:
        raise cv.error(op, f"loop dims {[d for d, s in enumerate(sizes) if s is None]} have no static size")
    space = tuple(sizes)

    def to_space(v: Value, m: AffineMap) -> Value:
        v, present = read_through_map(cv, op, v, m, space)
        v = transpose(b, v, sorted(range(len(present)), key=lambda k: present[k]))
        return reshape(b, v, [s if d in present else 1 for d, s in enumerate(space)])

    args = [a for a, _ in block.args]
    if len(args) != len(operands):
        raise cv.error(op, f"body has {len(args)} arguments for {len(operands)} operands")
    yield_op = block.ops[-1] if block.ops else None
    if yield_op is None or yield_op.name != "linalg.yield" or len(yield_op.operands) != len(outs):
        raise cv.error(op, "the body must end in linalg.yield of one value per output")
    reduction = [d for d in range(nd) if iters[d] == "reduction"]
    if any(t not in ("parallel", "reduction") for t in iters):
        raise cv.error(op, f"unknown iterator types {iters}", UnsupportedOpError)
    out_args = args[len(ins):]

    # find, for each output, the op that folds the body's value into the accumulator
    combiners: dict[int, tuple[str, str]] = {}
    if reduction:
        producers = {r: o for o in block.ops for r in o.results}
        for k, vid in enumerate(yield_op.operands):
            comb = producers.get(vid)
            if comb is None or comb.name not in COMBINERS or out_args[k] not in comb.operands:
                raise UnsupportedOpError(
                    f"'{op.name}': reduction body must combine the output accumulator with one of "
                    f"{', '.join(sorted(COMBINERS))}", location=str(op.loc))
            other = [o for o in comb.operands if o != out_args[k]]
            combiners[k] = (COMBINERS[comb.name], other[0] if other else out_args[k])
    skip = {id(producers[yield_op.operands[k]]) for k in combiners} if combiners else set()
    body = [o for o in block.ops[:-1] if id(o) not in skip]
    if reduction and any(a in o.operands for o in body for a in out_args):
        raise UnsupportedOpError(f"'{op.name}': a reduction body may read the accumulator only to combine",
                                 location=str(op.loc))

    saved_env, saved_body = cv.env, cv.in_body
    cv.env = dict(cv.env)
    cv.in_body = True
    cv.env["__space__"] = space
    try:
        if reduction and len(outs) == 1 and len(ins) == 2 and combiners[0][0] == "sum":
            fast = _as_contraction(cv, op, body, combiners[0][1], args, ins, outs, maps)
            if fast is not None:
                return [fast]
        for a, v, m in zip(args, operands, maps):
            if a in (out_args if reduction else ()):
                continue
            cv.env[a] = to_space(v, m)
        cv.run_block(body)
        results = []
        for k, out in enumerate(outs):
            om = maps[len(ins) + k]
            if reduction:
                kind, vid = combiners[k]
                y = broadcast(b, cv.get(yield_op, vid), space)
                y = b.op("rt.reduce", [y], {"kind": kind, "axes": tuple(reduction)})
                remaining = [d for d in range(nd) if d not in reduction]
            else:
                y = broadcast(b, cv.get(yield_op, yield_op.operands[k]), space)
                remaining = list(range(nd))
            od = [r[1] for r in om.results if r[0] == "dim"]
            if sorted(od) != remaining:
                raise UnsupportedOpError(f"'{op.name}': output map {_map_text(om)} must name every parallel dim once",
                                         location=str(op.loc))
            y = transpose(b, y, [remaining.index(d) for d in od])
            y = reshape(b, cast(b, y, out.type.dtype), out.type.shape)
            results.append(accumulate(cv, y, out, combiners[k][0]) if reduction else y)
        return results
    finally:
        cv.env, cv.in_body = saved_env, saved_body


def _as_contraction(cv: Converter, op: MOp, body, contribution: str, args, ins, outs, maps):
    """`out += a * b`: one rt.matmul instead of a broadcast product (after gathering the windows that
    conv-style maps such as `d1 * 2 + d4` read: im2col)."""
    if len(body) != 1 or body[0].name not in ("arith.mulf", "arith.muli") or body[0].results != [contribution]:
        return None
    if sorted(body[0].operands) != sorted(args[:2]) or body[0].operands[0] == body[0].operands[1]:
        return None
    if None in maps[2].dim_positions():
        return None
    space = cv.env["__space__"]
    (a, la), (c, lc) = (read_through_map(cv, op, v, m, space) for v, m in zip(ins, maps))
    out = outs[0]
    z = contract(cv.b, cast(cv.b, a, out.type.dtype), la, cast(cv.b, c, out.type.dtype), lc, maps[2].dim_positions())
    return accumulate(cv, z, out)


def read_through_map(cv: Converter, op: MOp, v: Value, m: AffineMap, space) -> tuple[Value, list[int]]:
    """`v` read through map `m`, with one axis per loop dim it reads, and those dims: an axis the map
    indexes by an expression (`d1 * 2 + d4`, a constant) becomes a gather of the constant indices the
    expression takes over its dims, which replaces that axis by one axis per dim."""
    b = cv.b
    labels: list[list[int]] = []
    for k, r in reversed(list(enumerate(m.results))):
        if r[0] == "dim":
            labels.insert(0, [r[1]])
            continue
        dims = sorted(_dims_in(r))
        if np.prod([space[d] for d in dims], dtype=np.float64) > 2**26:
            raise UnsupportedOpError(f"'{op.name}': indexing map expression {_expr(r)} spans too many positions",
                                     location=str(op.loc), hint="at most 2**26 per expression")
        grids = np.meshgrid(*[np.arange(space[d]) for d in dims], indexing="ij") if dims else []
        index = np.asarray(_evaluate(cv, op, r, dict(zip(dims, grids))), dtype=np.int64)
        if index.size and (index.min() < 0 or index.max() >= v.type.shape[k]):
            raise cv.error(op, f"indexing map expression {_expr(r)} reads [{index.min()}, {index.max()}] of a dim "
                               f"of size {v.type.shape[k]}")
        v = b.op("rt.gather", [v, b.constant(index)], {"axis": k})
        labels.insert(0, dims)
    present = [d for ds in labels for d in ds]
    if len(set(present)) != len(present):
        raise UnsupportedOpError(f"'{op.name}': a map that reads one dim twice ({_map_text(m)}) is not supported",
                                 location=str(op.loc))
    return v, present


def _dims_in(e) -> set[int]:
    if e[0] == "dim":
        return {e[1]}
    if e[0] in ("const", "sym"):
        return set()
    return _dims_in(e[1]) | _dims_in(e[2])


def _evaluate(cv: Converter, op: MOp, e, grids: dict):
    kind = e[0]
    if kind == "dim":
        return grids[e[1]]
    if kind == "const":
        return e[1]
    if kind == "sym":
        raise UnsupportedOpError(f"'{op.name}': symbols in indexing maps are not supported", location=str(op.loc))
    lhs, rhs = _evaluate(cv, op, e[1], grids), _evaluate(cv, op, e[2], grids)
    return {"add": np.add, "mul": np.multiply, "floordiv": np.floor_divide, "mod": np.mod,
            "ceildiv": lambda a, c: -np.floor_divide(-a, c)}[kind](lhs, rhs)


@converts("linalg.index")
def _index(cv: Converter, op: MOp):
    space = cv.env.get("__space__")
    if space is None:
        raise cv.error(op, "is only valid inside a linalg body")
    d = op.attrs["dim"]
    shape = tuple(s if k == d else 1 for k, s in enumerate(space))
    return cv.b.op("rt.iota", [], {"shape": shape, "axis": d, "dtype": "i64"})


def _expr(e) -> str:
    if e[0] == "dim":
        return f"d{e[1]}"
    if e[0] == "sym":
        return f"s{e[1]}"
    if e[0] == "const":
        return str(e[1])
    sym = {"add": "+", "mul": "*"}.get(e[0], f" {e[0]} ")
    return f"{_expr(e[1])} {sym.strip() if len(sym) == 1 else e[0]} {_expr(e[2])}"


def _map_text(m: AffineMap) -> str:
    dims = ", ".join(f"d{i}" for i in range(m.num_dims))
    return f"({dims}) -> ({', '.join(_expr(r) for r in m.results)})"

