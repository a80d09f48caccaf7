"""ONNX frontend: a `.onnx` file or an `onnx.ModelProto` to graph IR (default domain, opsets 7 to 21, and the
newer ops of opsets 23 to 28: Attention, RMSNormalization, RotaryEmbedding, Swish, SwiGLU, TensorScatter,
CausalConvWithState, LinearAttention, BitCast). Handlers read each op as opset 11 and later define it;
`onnx_legacy` reads the older versions that differ. Families of ops live in modules of their own, which register
here: `onnx_quant` (quantized ops), `onnx_recurrent` (RNN, GRU, LSTM and opset 27's recurrences), `onnx_control`
(If, Loop, Scan), `onnx_signal` (DFT, STFT, windows, MelWeightMatrix), `onnx_image` (CenterCropPad, AffineGrid,
Col2Im, RoiAlign, TensorScatter).

A graph input's `dim_param` ("batch") is a symbolic dimension of that name, shared by every
input that names it; a dimension with neither a value nor a name is a new symbol
`<input>_dim<axis>`. `input_shapes=` fixes dimensions instead. `Shape` of a tensor with symbolic
dimensions is an array of them (numpy object dtype), and the shape arithmetic exporters emit on
it (Gather, Concat, Unsqueeze, Add, Mul, Div, ...) runs here, on the symbols (`SYMBOLIC_FOLDS`).
Every tensor name maps either to a graph `Value` or to a numpy array that is known
at import time (initializers, `Constant`, `Shape` of a static tensor, and any node
whose inputs are all known). Known nodes are evaluated here, by lowering them into
a scratch function and running it on the vmvx reference kernels, so the
Shape -> Gather -> Concat -> Reshape chains that exporters emit become plain attributes.
Known arrays become `rt.constant` only where a graph op consumes them.
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np

from ..errors import InputError, RetargetError, UnsupportedOpError
from ..ir.core import Builder, Function, Module, TensorType, Value
from ..ir.dtypes import DTYPES, DType, from_numpy
from ..ir.symbolic import Sym, dim_min, divide_exactly, sanitize
from ..registry import registrar
from . import compose as C

MAX_OPSET = 21

# TensorProto.DataType -> retarget element type
_ONNX_DTYPES = {1: "f32", 2: "ui8", 3: "i8", 4: "ui16", 5: "i16", 6: "i32", 7: "i64", 9: "i1", 10: "f16",
                11: "f64", 12: "ui32", 13: "ui64", 16: "bf16", 17: "f8E4M3FN", 18: "f8E4M3FNUZ", 19: "f8E5M2",
                20: "f8E5M2FNUZ", 21: "ui4", 22: "i4", 23: "f4E2M1FN", 24: "f8E8M0FNU", 25: "ui2", 26: "i2"}


def _dtype(elem_type: int, what: str) -> DType:
    if elem_type not in _ONNX_DTYPES:
        import onnx

        known = elem_type in onnx.TensorProto.DataType.values()
        name = onnx.TensorProto.DataType.Name(elem_type) if known else elem_type
        raise UnsupportedOpError(f"{what} has element type {name}, which retarget does not support",
                                 hint="supported: float, double, float16, bfloat16, (u)int8-64, bool; and "
                                      "for Cast only: float8 (E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ), float8e8m0, "
                                      "float4, (u)int4, (u)int2")
    return DTYPES[_ONNX_DTYPES[elem_type]]


class OnnxImporter:
    """Reads an ONNX model: a path ending in `.onnx`, or an `onnx.ModelProto`."""

    name = "onnx"
    suffixes = (".onnx",)

    def accepts(self, source: Any) -> bool:
        if isinstance(source, (str, os.PathLike)):
            return str(source).endswith(self.suffixes)
        cls = type(source)
        return cls.__name__ == "ModelProto" and (cls.__module__ or "").startswith("onnx")

    def load(self, source: Any, function_name: str = "main", input_shapes: dict | None = None,
             bind_inputs: dict | None = None, dims: dict | None = None, **options) -> Module:
        """`input_shapes` fixes symbolic input dimensions; `bind_inputs` turns graph inputs
        into constants (for inputs that feed `SHAPE_OPERANDS`, such as a Reshape's shape); `dims` gives
        symbolic dimensions their ranges from the start ({"batch": (1, 64)}, as `retarget.compile`'s `dims`),
        so that ops whose form depends on a bound (a sort or a scan along a dynamic axis) import."""
        model = _read(source)
        return _Converter(model, function_name, input_shapes or {}, bind_inputs or {}, dims or {}).run()


def _read(source):
    import onnx

    if isinstance(source, (str, os.PathLike)):
        if not os.path.exists(source):
            raise InputError(f"no such file: {source}")
        try:
            model = onnx.load(str(source))
        except Exception as e:
            raise InputError(f"{source} is not a readable ONNX model: {_first_line(e)}") from e
        if not model.graph.node and not model.opset_import:  # protobuf reads any empty file as an empty model
            raise InputError(f"{source} holds no ONNX model ({os.path.getsize(source)} bytes)",
                             hint="export the model again (torch.onnx.export, or the tool that wrote it)")
    elif isinstance(source, onnx.ModelProto):
        model = source
    else:
        raise InputError(f"the onnx importer cannot read a {type(source).__name__}",
                         hint="pass a path ending in .onnx or an onnx.ModelProto")
    try:
        return onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    except Exception as e:
        raise InputError(f"ONNX shape inference rejected the model: {_first_line(e)}",
                         hint="check it with onnx.checker.check_model") from e


def _first_line(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


def _attr_value(a):
    from onnx import helper, numpy_helper

    v = helper.get_attribute_value(a)
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, list) and v and isinstance(v[0], bytes):
        return [x.decode() for x in v]
    if a.type == a.TENSOR:
        return numpy_helper.to_array(v)
    return v


def _to_array(tensor) -> np.ndarray:
    from onnx import numpy_helper

    _dtype(tensor.data_type, f"constant '{tensor.name}'")
    try:
        return np.asarray(numpy_helper.to_array(tensor))
    except (ValueError, TypeError, MemoryError) as e:  # data that does not fill its dims, or dims past memory
        raise InputError(f"constant '{tensor.name}' of dims {list(tensor.dims)} does not match its data: "
                         f"{_first_line(e)}", hint="the model is corrupt; re-export it") from None


class _Converter:
    def __init__(self, model, function_name, input_shapes, bind_inputs, dims=None):
        self.model = model
        self.dims = dims or {}  # symbol name -> its range, as `retarget.compile`'s dims give it
        self.graph = model.graph
        self.fn = Function(function_name, [])
        self.b = Builder(self.fn)
        self.env: dict[str, Value | np.ndarray] = {}
        self.materialized: dict[str, Value] = {}
        self.input_shapes = input_shapes
        self.bind_inputs = bind_inputs
        self.opset = self._opset()
        self.pool_windows: dict[Value, C.PoolWindows] = {}  # MaxPool's Indices -> its windows (`_max_unpool`)

    def _opset(self) -> int:
        versions = {o.domain: o.version for o in self.model.opset_import}
        self.opsets = versions  # every domain's, e.g. "ai.onnx.ml" (onnx_ml.py)
        version = versions.get("", versions.get("ai.onnx"))
        if version is None and not any(n.domain in ("", "ai.onnx") for n in self.graph.node):
            version = MAX_OPSET  # only other domains' ops (ai.onnx.ml's): no default opset to read
        if version is None:
            raise UnsupportedOpError("the model imports no default-domain ONNX opset")
        if version < 1:
            raise InputError(f"the model imports ONNX opset {version}, which does not exist",
                             hint="the model is corrupt; re-export it")
        return version  # each node is read by its op's version at this opset (onnx_legacy.handler_for)

    def run(self) -> Module:
        g = self.graph
        for t in g.initializer:
            self.env[t.name] = _to_array(t)
        for t in g.sparse_initializer:
            raise UnsupportedOpError(f"sparse initializer '{t.values.name}' is not supported")
        names = []
        for inp in g.input:
            if inp.name in self.bind_inputs:
                self.env[inp.name] = np.asarray(self.bind_inputs[inp.name])
                continue
            if inp.name in self.env:
                continue  # an initializer listed as an input (IR < 4)
            arg = Value(self._input_type(inp), None, len(self.fn.args), inp.name)
            self.fn.args.append(arg)
            self.env[inp.name] = arg
            names.append(inp.name)
        self.fn.arg_names = names
        for index, node in enumerate(g.node):
            self._convert(index, node)
        for out in g.output:
            if out.name not in self.env:
                raise InputError(f"graph output '{out.name}' is never produced")
            self.fn.returns.append(self.value(out.name))
        return Module({self.fn.name: self.fn})

    def _input_type(self, inp) -> TensorType:
        tt = inp.type.tensor_type
        if not inp.type.HasField("tensor_type"):
            raise UnsupportedOpError(f"graph input '{inp.name}' is not a tensor")
        dtype = _dtype(tt.elem_type, f"graph input '{inp.name}'")
        if inp.name in self.input_shapes:
            return TensorType(tuple(int(d) for d in self.input_shapes[inp.name]), dtype)
        if not tt.HasField("shape"):
            raise InputError(f"graph input '{inp.name}' has no shape", hint="pass input_shapes={name: shape}")
        dims = []
        for axis, d in enumerate(tt.shape.dim):
            if d.HasField("dim_value"):
                dims.append(d.dim_value)
            elif d.dim_param:
                name = sanitize(d.dim_param)
                dims.append(self.b.symbol(name, self._range(name)))
            else:
                dims.append(self.b.fresh_symbol(f"{inp.name}_dim{axis}", self._range(f"{inp.name}_dim{axis}")))
        return TensorType(tuple(dims), dtype)

    def _range(self, name: str):
        """The range `dims` gives symbol `name`, or None (`passes.dynamic_plan.apply_dims` checks the names)."""
        from ..passes.dynamic_plan import as_range

        return as_range(name, self.dims[name]) if name in self.dims else None

    def value(self, name: str) -> Value:
        """The graph value of tensor `name`, materializing a known array as `rt.constant` once."""
        v = self.env[name]
        if isinstance(v, Value):
            return v
        if name not in self.materialized:  # sizes known only at run time, used as data, are computed there
            self.materialized[name] = C.sizes_value(self.b, v) if _is_symbolic(v) else _constant(self.b, v)
        return self.materialized[name]

    def _convert(self, index: int, node):
        where = f"node '{node.name}' (#{index})" if node.name else f"node #{index}"
        key = op_key(node)
        if node.domain not in DOMAINS:
            raise UnsupportedOpError(f"ONNX op '{key}' ({where}) is not supported",
                                     hint=f"the supported domains: the default one and {', '.join(DOMAINS[2:])}")
        handler = HANDLERS.get(key)
        if node.domain in ("", "ai.onnx"):
            handler = onnx_legacy.handler_for(node.op_type, self.opset, handler, where)
        if handler is None and node.domain not in ("", "ai.onnx"):
            raise UnsupportedOpError(f"ONNX op '{key}' ({where}) is not supported by the onnx importer",
                                     hint=REFUSAL_HINTS.get(key) or "supported ops of that domain: " + ", ".join(
                                         sorted(k for k in HANDLERS if k.startswith(node.domain + "."))))
        if handler is None:
            raise UnsupportedOpError(f"ONNX op '{node.op_type}' ({where}) is not supported by the onnx importer",
                                     hint=f"supported ops: {', '.join(sorted(HANDLERS))}")
        for name in node.input:
            if name and name not in self.env:
                raise InputError(f"ONNX op '{node.op_type}' ({where}) reads '{name}', which is never defined")
        known = all(not n or not isinstance(self.env[n], Value) for n in node.input)
        symbolic = known and any(n and _is_symbolic(self.env[n]) for n in node.input)
        try:
            if symbolic and node.op_type in SYMBOLIC_FOLDS:
                try:
                    outs = _sizes_array(SYMBOLIC_FOLDS[node.op_type](_Node(self, node, self.b, fold=True)))
                except UnsupportedOpError:  # not a size any more (a division by a size, a cast to float): data
                    outs = handler(_Node(self, node, self.b, fold=False))
            elif symbolic and node.op_type not in _NO_FOLD:  # sizes used as data: computed at run time
                outs = handler(_Node(self, node, self.b, fold=False))
            elif known and node.op_type not in _NO_FOLD:
                outs = self._fold(node, handler)
            else:
                outs = handler(_Node(self, node, self.b, fold=False))
        except RetargetError as e:
            e.message = f"ONNX op '{node.op_type}' ({where}): {e.message}"
            e.args = (e.oneline(),)
            raise
        except Exception as e:
            raise UnsupportedOpError(
                f"ONNX op '{node.op_type}' ({where}) could not be converted: {_first_line(e)}") from e
        if not isinstance(outs, (list, tuple)):
            outs = [outs]
        for name, out in zip(node.output, outs, strict=False):
            if name and out is not None:
                self.env[name] = out
        for name in node.output[len(outs):]:
            if name:
                raise UnsupportedOpError(f"ONNX op '{node.op_type}' ({where}): output '{name}' is not supported")

    def _fold(self, node, handler):
        from ..vmvx.interpreter import run_function

        scratch = Function("fold", [])
        outs = handler(_Node(self, node, Builder(scratch), fold=True))
        outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
        scratch.returns = [o for o in outs if isinstance(o, Value)]
        results = iter(run_function(scratch, []))
        return [np.asarray(next(results)) if isinstance(o, Value) else o for o in outs]


def _is_symbolic(v) -> bool:
    """A known array that holds sizes known only at run time (numpy object dtype, some entries Sym)."""
    return isinstance(v, np.ndarray) and v.dtype == object


def _sizes_array(v) -> np.ndarray:
    """A computed array of sizes: object dtype while it holds a symbol, else int64 (then it folds as usual)."""
    v = np.asarray(v, dtype=object)
    if any(isinstance(d, Sym) for d in v.reshape(-1)):
        return v
    return v.astype(np.int64)


def _sizes(v) -> str:
    return "[" + ", ".join(str(d) for d in np.asarray(v).reshape(-1)) + "]"


MAX_RANK = 64  # numpy's: no array holds more dimensions


def _dims(values) -> list:
    """Entries of a shape operand (or of per-axis starts, ends or sizes): ints, or symbolic sizes."""
    values = np.asarray(values).reshape(-1)
    if values.size > MAX_RANK:
        raise UnsupportedOpError(f"a shape operand of {values.size} entries: at most {MAX_RANK} dimensions are "
                                 "supported (numpy's limit)")
    return [d if isinstance(d, Sym) else int(d) for d in values]


def _constant(b: Builder, array: np.ndarray) -> Value:
    try:
        from_numpy(array.dtype)
    except KeyError:
        raise UnsupportedOpError(f"constant of numpy dtype {array.dtype} is not supported") from None
    return b.constant(array)


class _Node:
    """What a handler sees of one node: its inputs, attributes and a builder."""

    def __init__(self, cv: _Converter, node, b: Builder, fold: bool):
        self.cv, self.node, self.b, self.fold = cv, node, b, fold
        self.attrs = {a.name: _attr_value(a) for a in node.attribute}
        self.opset = cv.opset
        self._local: dict[str, Value] = {}

    def attr(self, name, default=None):
        return self.attrs.get(name, default)

    def has(self, i: int) -> bool:
        return i < len(self.node.input) and bool(self.node.input[i])

    def __call__(self, i: int) -> Value:
        """Input `i` as a graph value."""
        name = self.node.input[i]
        if not self.fold:
            return self.cv.value(name)
        if name not in self._local:
            v = self.cv.env[name]
            self._local[name] = v if isinstance(v, Value) else _constant(self.b, v)
        return self._local[name]

    def inputs(self) -> list[Value]:
        return [self(i) for i in range(len(self.node.input)) if self.has(i)]

    def known(self, i: int, what: str = "") -> np.ndarray:
        """Input `i` as an array known at import time; a dynamic one is unsupported."""
        v = self.cv.env[self.node.input[i]]
        if isinstance(v, Value):
            raise UnsupportedOpError(f"input {i} ('{self.node.input[i]}'{', ' + what if what else ''}) must be known "
                                     "at import time",
                                     hint="a shape may be computed from sizes known only at run time through "
                                          f"{', '.join(sorted(SYMBOLIC_FOLDS))}; other ops make it data")
        return v

    def known_if_so(self, i: int) -> np.ndarray | None:
        """Input `i` where it is there and known at import time as numbers (an initializer, a constant), else None."""
        v = self.cv.env[self.node.input[i]] if self.has(i) else None
        return v if isinstance(v, np.ndarray) and v.dtype != object else None

    def known_or(self, i: int, default, what=""):
        return self.known(i, what) if self.has(i) else default

    def n_outputs(self) -> int:
        return sum(1 for o in self.node.output if o)

    def wants(self, i: int) -> bool:
        return i < len(self.node.output) and bool(self.node.output[i])


# -- handlers: (_Node) -> Value | ndarray | list of them ---------------------------------------------

HANDLERS: dict = {}
_NO_FOLD: set = set()

# Operands that must be known at import time (static shapes), by op: input indices.
_REDUCE_OPS = ("ReduceMean ReduceSum ReduceMax ReduceMin ReduceProd ReduceL1 ReduceL2 ReduceSumSquare "
               "ReduceLogSum ReduceLogSumExp").split()
SHAPE_OPERANDS: dict[str, tuple[int, ...]] = {
    "Reshape": (1,), "Expand": (1,), "Tile": (1,), "Slice": (1, 2, 3, 4), "Pad": (1, 3), "Resize": (1, 2, 3),
    "CumSum": (1,), "CumProd": (1,), "OneHot": (1,), "Unsqueeze": (1,), "Squeeze": (1,), "Split": (1,),
    "ConstantOfShape": (0,), "Range": (0, 1, 2), "Dropout": (1, 2), "TopK": (1,), "Trilu": (1,), "MaxUnpool": (2,),
    **{op: (1,) for op in _REDUCE_OPS},
}


handles = registrar(HANDLERS)
OLD_VERSIONS: dict[str, dict[int, Any]] = {}  # op -> {version: handler} of its older versions that differ


def handles_old(op: str, *versions: int):
    """Registers the handler of `op`'s `versions` older than opset 11's (`onnx_legacy`); 0 for an op onnx no
    longer defines."""
    def register(fn):
        for version in versions:
            OLD_VERSIONS.setdefault(op, {})[version] = fn
        return fn

    return register

DOMAINS = ("", "ai.onnx", "ai.onnx.ml")  # ops of other domains register as "DOMAIN.OpType" (onnx_ml.py)
REFUSAL_HINTS: dict[str, str] = {}  # what to do instead, for ops that are refused on purpose (by key)


def op_key(node) -> str:
    """A node's key in HANDLERS: its op type, prefixed by its domain outside the default one."""
    return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"


def _unary(rt_name):
    return lambda n: n.b.op(rt_name, [n(0)])


for _op, _rt in {"Neg": "neg", "Abs": "abs", "Exp": "exp", "Log": "log", "Sqrt": "sqrt", "Reciprocal": "reciprocal",
                 "Tanh": "tanh", "Sigmoid": "sigmoid", "Erf": "erf", "Floor": "floor", "Ceil": "ceil",
                 "Round": "round", "Sin": "sin", "Cos": "cos", "Tan": "tan", "Atan": "atan", "Sign": "sign",
                 "Not": "not", "BitwiseNot": "not"}.items():
    HANDLERS[_op] = _unary(f"rt.{_rt}")


def _binary(rt_name):
    return lambda n: n.b.op(rt_name, [n(0), n(1)])


for _op, _rt in {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "And": "and", "Or": "or", "Xor": "xor",
                 "BitwiseAnd": "and", "BitwiseOr": "or", "BitwiseXor": "xor"}.items():
    HANDLERS[_op] = _binary(f"rt.{_rt}")

for _op, _pred in {"Equal": "eq", "Less": "lt", "LessOrEqual": "le", "Greater": "gt", "GreaterOrEqual": "ge"}.items():
    HANDLERS[_op] = (lambda p: lambda n: n.b.op("rt.cmp", [n(0), n(1)], {"predicate": p}))(_pred)


@handles("Pow")
def _pow(n):
    x, y = n(0), n(1)
    if y.type.dtype != x.type.dtype:
        y = n.b.op("rt.cast", [y], {"dtype": x.type.dtype.name})
    return n.b.op("rt.pow", [x, y])


@handles("Mod")
def _mod(n):
    return n.b.op("rt.rem", [n(0), n(1)]) if n.attr("fmod", 0) else C.floor_mod(n.b, n(0), n(1))


def _variadic(rt_name, mean=False):
    def handler(n):
        xs = n.inputs()
        y = xs[0]
        for x in xs[1:]:
            y = n.b.op(rt_name, [y, x])
        if mean and len(xs) > 1:
            y = n.b.op("rt.mul", [y, C.scalar(n.b, 1 / len(xs), y)])
        return y

    return handler


HANDLERS["Max"] = _variadic("rt.max")
HANDLERS["Min"] = _variadic("rt.min")
HANDLERS["Sum"] = _variadic("rt.add")
HANDLERS["Mean"] = _variadic("rt.add", mean=True)


@handles("Identity")
def _identity(n):
    return n.cv.env[n.node.input[0]] if not n.fold else n(0)


@handles("BitCast")
def _bitcast(n):
    """Opset 26: the bits of each element as type `to`, of the same width (a view; a known input folds, as numpy's
    `view`)."""
    if n.attr("to") is None:
        raise UnsupportedOpError("BitCast has no 'to' attribute", hint="the element type to read the bits as")
    return C.bitcast(n.b, n(0), _dtype(n.attr("to"), "BitCast's 'to'"))


@handles("Dropout")
def _dropout(n):
    x = n(0)
    ratio = float(np.asarray(n.known(1, "ratio")).reshape(-1)[0]) if n.has(1) else 0.5
    if not (n.has(2) and bool(np.asarray(n.known(2, "training_mode")))) or ratio == 0:
        return [x, np.ones(x.type.shape, dtype=bool) if n.wants(1) else None]
    seed = n.attr("seed")
    if seed is None:
        raise UnsupportedOpError("Dropout in training mode without a seed is not supported",
                                 hint="its mask is fresh on every run and the graph IR has no random numbers; "
                                      "give the node a seed")
    # The spec leaves the generator to the runtime; with a seed, the mask is a constant of (seed, shape):
    # numpy's RandomState(seed), as onnx's reference draws it.
    keep = np.random.RandomState(int(seed)).uniform(0, 1.0, x.type.shape) >= ratio
    scaled = n.b.op("rt.mul", [x, n.b.constant((keep / (1 - ratio)).astype(x.type.dtype.np_dtype))])
    return [scaled, keep if n.wants(1) else None]


@handles("Relu")
def _relu(n):
    return C.relu(n.b, n(0))


@handles("LeakyRelu")
def _leaky_relu(n):
    return C.leaky_relu(n.b, n(0), n.attr("alpha", 0.01))


@handles("PRelu")
def _prelu(n):
    x, slope = n(0), n(1)
    zero = C.scalar(n.b, 0, x)
    return n.b.op("rt.select", [n.b.op("rt.cmp", [x, zero], {"predicate": "lt"}), n.b.op("rt.mul", [x, slope]), x])


@handles("Elu")
def _elu(n):
    return C.elu(n.b, n(0), n.attr("alpha", 1.0))


@handles("Selu")
def _selu(n):
    alpha, gamma = n.attr("alpha", 1.67326319217681884765625), n.attr("gamma", 1.05070102214813232421875)
    y = C.elu(n.b, n(0), alpha)
    return n.b.op("rt.mul", [y, C.scalar(n.b, gamma, y)])


@handles("HardSigmoid")
def _hard_sigmoid(n):
    return C.hard_sigmoid(n.b, n(0), n.attr("alpha", 0.2), n.attr("beta", 0.5))


@handles("HardSwish")
def _hard_swish(n):
    x = n(0)
    return n.b.op("rt.mul", [x, C.hard_sigmoid(n.b, x, 1 / 6, 0.5)])


for _op, _composite in {"Softplus": C.softplus, "Mish": C.mish, "Asin": C.asin, "Acos": C.acos, "Asinh": C.asinh,
                       "Acosh": C.acosh, "Atanh": C.atanh, "Sinh": C.sinh, "Cosh": C.cosh}.items():
    HANDLERS[_op] = (lambda f: lambda n: f(n.b, n(0)))(_composite)


@handles("Swish")
def _swish(n):
    return C.swish(n.b, n(0), n.attr("alpha", 1.0))


@handles("SwiGLU")
def _swiglu(n):
    return n.b.op("rt.mul", [C.swish(n.b, n(0), n.attr("alpha", 1.0)), n(1)])


@handles("Celu")
def _celu(n):
    return C.celu(n.b, n(0), n.attr("alpha", 1.0))


@handles("ThresholdedRelu")
def _thresholded_relu(n):
    return C.thresholded_relu(n.b, n(0), n.attr("alpha", 1.0))


@handles("Shrink")
def _shrink(n):
    """x + bias below -lambd, x - bias above lambd, 0 between; integers are computed in f64 and truncated back,
    as onnx's reference computes them (a bias of 1.5 moves an integer by 1)."""
    x = n(0)
    wide = x if x.type.dtype.is_float else n.b.op("rt.cast", [x], {"dtype": "f64"})
    bias, lambd = n.attr("bias", 0.0), n.attr("lambd", 0.5)

    def beyond(limit, predicate, shifted):
        return n.b.op("rt.cmp", [wide, C.scalar(n.b, limit, wide)], {"predicate": predicate}), \
            n.b.op("rt.add", [wide, C.scalar(n.b, shifted, wide)])

    below, low = beyond(-lambd, "lt", bias)
    above, high = beyond(lambd, "gt", -bias)
    y = n.b.op("rt.select", [below, low, n.b.op("rt.select", [above, high, C.scalar(n.b, 0, wide)])])
    return _cast_to(n, y, x.type.dtype)


@handles("IsNaN")
def _is_nan(n):
    x = n(0)
    return n.b.op("rt.cmp", [x, x], {"predicate": "ne"})


@handles("IsInf")
def _is_inf(n):
    x = n(0)
    positive, negative = n.attr("detect_positive", 1), n.attr("detect_negative", 1)
    if positive and negative:
        return n.b.op("rt.cmp", [n.b.op("rt.abs", [x]), C.scalar(n.b, np.inf, x)], {"predicate": "eq"})
    if positive or negative:
        return n.b.op("rt.cmp", [x, C.scalar(n.b, np.inf if positive else -np.inf, x)], {"predicate": "eq"})
    return n.b.op("rt.broadcast", [n.b.constant(np.array(False))], {"shape": x.type.shape})


@handles("Softsign")
def _softsign(n):
    return C.softsign(n.b, n(0))


@handles("Gelu")
def _gelu(n):
    return C.gelu(n.b, n(0), n.attr("approximate", "none"))


@handles("Clip")
def _clip(n):
    x = n(0)
    lo = n(1) if n.has(1) else None
    hi = n(2) if n.has(2) else None
    if lo is not None:
        x = n.b.op("rt.max", [x, lo])
    if hi is not None:
        x = n.b.op("rt.min", [x, hi])
    return x


def _cast_to(n, x: Value, dtype: DType) -> Value:
    if x.type.dtype == dtype:
        return x
    if dtype.name == "f8E8M0FNU":
        return _cast_to_e8m0(n, x, n.attr("round_mode", "up"), n.attr("saturate", 1))
    if dtype.name.startswith("f8") and x.type.dtype.is_float and n.attr("saturate", 1):
        import ml_dtypes  # saturate (the default): out-of-range values and infinities become the largest finite

        if x.type.dtype.storage:  # a narrow type is only cast and moved: clamp its (exact) f32 value
            x = n.b.op("rt.cast", [x], {"dtype": "f32"})
        info = ml_dtypes.finfo(dtype.np_dtype)
        x = C.clamp(n.b, x, float(info.min), float(info.max))
    return n.b.op("rt.cast", [x], {"dtype": dtype.name})


def _cast_to_e8m0(n, x: Value, round_mode: str, saturate: int) -> Value:
    """Cast-24's rounding to E8M0, as onnx's reference (`to_float8e8m0`) over every f32 (an f64 is rounded to f32
    first): the power of two of |x|'s exponent, one more where x is past it ("up"), at 1.5 times it or past
    ("nearest") or never ("down"). 0 gives code 0 (2^-127), and so do subnormals, but "up" gives them code 1 and
    "nearest" those past 2^-127; infinities and NaN give NaN, and saturate keeps a finite x that rounds past 2^127 at
    2^127 (else NaN). Composed in f32 around rt.cast, whose rounding (ml_dtypes') is "nearest" but for 0, negatives
    and saturation, so that every target and the constant folder share it."""
    if round_mode not in ("up", "down", "nearest"):
        raise UnsupportedOpError(f"Cast to FLOAT8E8M0 with round_mode '{round_mode}'",
                                 hint="round_mode is one of up, down, nearest")
    b = n.b
    f = x if x.type.dtype.name == "f32" else b.op("rt.cast", [x], {"dtype": "f32"})  # f64 rounds first, as onnx's
    a = b.op("rt.abs", [f])  # the sign is ignored

    def cmp(predicate, value):
        return b.op("rt.cmp", [a, C.scalar(b, value, a)], {"predicate": predicate})

    def select(cond, *values):
        return b.op("rt.select", [cond, *(v if isinstance(v, Value) else C.scalar(b, v, a) for v in values)])

    # (0 and subnormal x are decided from the bits below)
    if round_mode == "down":  # [2^e, 2^(e+1)) * 0.75 is [0.75, 1.5) * 2^e, all nearest 2^e (rounding stays below 1.5);
        # no product below 2^-126, which a target may flush
        y = select(cmp("lt", 2.0 ** -125), 2.0 ** -126, b.op("rt.mul", [a, C.scalar(b, 0.75, a)]))
    elif round_mode == "up":  # (2^e, 2^(e+1)) * (1.5 - 2^-23) rounds into [1.5, 3) * 2^e, 2^e itself below 1.5 * 2^e
        y = b.op("rt.mul", [a, C.scalar(b, 1.5 - 2.0 ** -23, a)])
    else:
        y = a
    if saturate:
        y = select(cmp("gt", 2.0 ** 127), select(cmp("eq", np.inf), a, 2.0 ** 127), y)
    scale = b.op("rt.cast", [y], {"dtype": "f8E8M0FNU"})
    # 0 and the subnormals from |x|'s bits, not its value: a target that flushes subnormals (NVIDIA's Vulkan) reads
    # them as 0. Down gives code 0, up code 1 but for 0, nearest code 1 past 2^-127 (a constant each: code 0 is an f32
    # subnormal, which such a target would not compute either).
    bits = b.op("rt.and", [C.bitcast(b, f, DTYPES["i32"]), b.constant(np.int32(0x7FFFFFFF))])

    def bits_are(predicate, value):
        return b.op("rt.cmp", [bits, C.scalar(b, value, bits)], {"predicate": predicate})

    code0, code1 = C.scalar(b, 2.0 ** -127, scale), C.scalar(b, 2.0 ** -126, scale)
    subnormal = bits_are("lt", 0x800000)  # or 0
    out = b.op("rt.select", [subnormal, code1 if round_mode == "up" else code0, scale])
    if round_mode == "up":
        return b.op("rt.select", [bits_are("eq", 0), code0, out])
    if round_mode == "nearest":
        past = b.op("rt.and", [subnormal, bits_are("gt", 0x400000)])
        return b.op("rt.select", [past, code1, out])
    return out


@handles("Cast")
def _cast(n):
    return _cast_to(n, n(0), _dtype(n.attr("to"), "Cast target"))


@handles("CastLike")
def _cast_like(n):
    return _cast_to(n, n(0), n(1).type.dtype)


@handles("BitShift")
def _bit_shift(n):
    return C.shift(n.b, n(0), n(1), left=n.attr("direction") == "LEFT")


@handles("Trilu")
def _trilu(n):
    return C.triangle(n.b, n(0), int(np.asarray(n.known_or(1, 0, "k"))), upper=bool(n.attr("upper", 1)))


@handles("Det")
def _det(n):
    """The determinant of each square matrix of the last two axes (`compose.determinant`: LU with partial pivoting,
    unrolled, up to 16 x 16)."""
    return C.determinant(n.b, n(0))


@handles("Einsum")
def _einsum(n):
    return C.einsum(n.b, n.attr("equation"), n.inputs())


@handles("Where")
def _where(n):
    return n.b.op("rt.select", [n(0), n(1), n(2)])


def _axis(n, x, default):
    return C.normalize_axis(n.attr("axis", default), x.type.rank)


def _coerced_2d(n, x: Value, along):
    """Opsets before 13's Softmax, LogSoftmax and Hardmax: x as [d0 * ... * d(axis-1), d(axis) * ... ] (axis 1 by
    default), `along` its last axis, and the result in x's shape; from 13 on, `along` x's `axis` (-1 by default)."""
    if n.opset >= 13:
        return along(x, _axis(n, x, -1))
    axis = _axis(n, x, 1)
    rows = math.prod(x.type.shape[:axis]) if axis else 1
    flat = n.b.op("rt.reshape", [x], {"shape": (rows, math.prod(x.type.shape[axis:]))})
    return n.b.op("rt.reshape", [along(flat, 1)], {"shape": x.type.shape})


@handles("Softmax", "LogSoftmax")
def _softmax(n):
    fn = C.softmax if n.node.op_type == "Softmax" else C.log_softmax
    return _coerced_2d(n, n(0), lambda x, axis: fn(n.b, x, axis))


@handles("LayerNormalization")
def _layer_norm(n):
    x = n(0)
    axis = _axis(n, x, -1)
    axes = tuple(range(axis, x.type.rank))
    eps = n.attr("epsilon", 1e-5)
    scale = n(1)
    bias = n(2) if n.has(2) else None
    y = C.layer_norm(n.b, x, axes, scale, bias, eps)
    outs = [y]
    if n.wants(1) or n.wants(2):  # Mean and InvStdDev, in stash_type (f32, the only one taken)
        if n.attr("stash_type", 1) != 1:
            raise UnsupportedOpError(f"stash_type {n.attr('stash_type', 1)} is not supported (1, float, is)",
                                     hint="export with the default stash_type")
        wide = C.widen(n.b, x)
        mu = C.mean(n.b, wide, axes, keepdims=True)
        d = n.b.op("rt.sub", [wide, mu])
        var = C.mean(n.b, n.b.op("rt.mul", [d, d]), axes, keepdims=True)
        outs += [mu, n.b.op("rt.rsqrt", [n.b.op("rt.add", [var, C.scalar(n.b, eps, wide)])])]
    return outs


@handles("RMSNormalization")
def _rms_norm(n):
    x = n(0)
    if n.attr("stash_type", 1) != 1:
        raise UnsupportedOpError(f"stash_type {n.attr('stash_type', 1)} is not supported (1, float, is)",
                                 hint="export with the default stash_type")
    return C.rms_norm(n.b, x, tuple(range(_axis(n, x, -1), x.type.rank)), n(1), n.attr("epsilon", 1e-5))


@handles("RotaryEmbedding")
def _rotary_embedding(n):
    """X is [batch, heads, seq, head_size], or [batch, seq, heads * head_size] with `num_heads`; the caches are
    [max_position, rotary_dim / 2] read at `position_ids` [batch, seq], or without them [batch, seq, ...]."""
    x, cos, sin = n(0), n(1), n(2)
    b = n.b
    if x.type.rank == 3:
        x = _split_heads(n, x, "num_heads")
    elif x.type.rank != 4:
        raise UnsupportedOpError(f"RotaryEmbedding of a rank-{x.type.rank} input (3 or 4 are)")
    if n.has(3):
        positions = n(3)
        cos, sin = (b.op("rt.gather", [c, positions], {"axis": 0}) for c in (cos, sin))
    y = C.rotary_embedding(b, x, cos, sin, bool(n.attr("interleaved", 0)), n.attr("rotary_embedding_dim", 0))
    return _merge_heads(b, y) if n(0).type.rank == 3 else y


@handles("Attention")
def _attention_op(n):
    """Opset 23's Attention and its later attributes: Q, K, V as [batch, heads, seq, head] or [batch, seq, hidden]
    (with q_num_heads and kv_num_heads), a key-value cache (past_key, past_value; present_key and present_value
    out), grouped-query heads, an additive or boolean mask shorter than the keys (padded), causal masking
    aligned to the cache's end, a per-batch count of valid keys (nonpad_kv_seqlen), sliding windows, softcap,
    softmax_precision, and each qk_matmul_output_mode. A query whose every key is masked gets zeros."""
    b = n.b
    q, k, v = n(0), n(1), n(2)
    mask = n(3) if n.has(3) else None
    past_key, past_value = (n(i) if n.has(i) else None for i in (4, 5))
    valid = n(6) if n.has(6) else None
    if (past_key is None) != (past_value is None):
        raise UnsupportedOpError("Attention takes past_key and past_value together")
    if q.type.rank == 3:
        q, k, v = (_split_heads(n, x, name) for x, name in
                   ((q, "q_num_heads"), (k, "kv_num_heads"), (v, "kv_num_heads")))
    elif q.type.rank != 4:
        raise UnsupportedOpError(f"Attention of rank-{q.type.rank} inputs (3 or 4 are)")
    if past_key is not None:
        k, v = (b.op("rt.concat", [past, x], {"axis": 2}) for past, x in ((past_key, k), (past_value, v)))
    present_key, present_value = k, v
    _, heads, queries, head = q.type.shape
    keys = k.type.shape[2]
    if k.type.shape[1] != heads:  # grouped-query attention: each key-value head serves heads / kv_heads queries
        if heads % k.type.shape[1] or v.type.shape[1] != k.type.shape[1]:
            raise UnsupportedOpError(f"Attention of {heads} query heads over {k.type.shape[1]} key and "
                                     f"{v.type.shape[1]} value heads (key-value heads must divide the query heads)")
        group = heads // k.type.shape[1]
        k, v = (_repeat_heads(b, x, group) for x in (k, v))
    root = math.sqrt(n.attr("scale", 1 / math.sqrt(head)))  # applied to both, as ONNX's function body does
    scores = b.op("rt.matmul", [b.op("rt.mul", [q, C.scalar(b, root, q)]),
                                b.op("rt.transpose", [b.op("rt.mul", [k, C.scalar(b, root, k)])],
                                     {"perm": (0, 1, 3, 2)})])
    softcap = n.attr("softcap", 0.0)
    if softcap > 0:
        scores = b.op("rt.mul", [b.op("rt.tanh", [b.op("rt.mul", [scores, C.scalar(b, 1 / softcap, scores)])]),
                                 C.scalar(b, softcap, scores)])
    offset = None if valid is None or past_key is not None else valid
    past = past_key.type.shape[2] if past_key is not None else 0
    bias = _attention_bias(b, scores, mask, queries, keys, bool(n.attr("is_causal", 0)), past, offset, valid,
                           n.attr("left_window_size", -1), n.attr("right_window_size", -1))
    biased = scores if bias is None else b.op("rt.add", [scores, bias])
    mode = n.attr("qk_matmul_output_mode", 0)
    logits = biased
    if n.attr("softmax_precision", None) is not None:
        logits = _cast_to(n, biased, _dtype(n.attr("softmax_precision"), "softmax_precision"))
    probabilities = _guarded_softmax(b, logits, bias)
    probabilities = C.narrow_to(b, probabilities, q)
    y = b.op("rt.matmul", [probabilities, v])
    if n(0).type.rank == 3:
        y = _merge_heads(b, y)
    qk = {0: scores, 1: scores, 2: biased, 3: probabilities}.get(mode)
    if qk is None:
        raise UnsupportedOpError(f"Attention's qk_matmul_output_mode {mode} (0 to 3 are)")
    return [y, present_key, present_value, C.narrow_to(b, qk, q)]


def _split_heads(n, x: Value, name: str) -> Value:
    """[batch, seq, heads * size] -> [batch, heads, seq, size], the heads counted by attribute `name`."""
    heads = n.attr(name, 0)
    batch, seq, hidden = x.type.shape
    if not heads or hidden % heads:
        raise UnsupportedOpError(f"{n.node.op_type} of 3-D inputs [{batch}, {seq}, {hidden}] needs {name} dividing "
                                 f"{hidden}, got {heads}", hint=f"set the {name} attribute")
    split = n.b.op("rt.reshape", [x], {"shape": (batch, seq, heads, hidden // heads)})
    return n.b.op("rt.transpose", [split], {"perm": (0, 2, 1, 3)})


def _merge_heads(b: Builder, x: Value) -> Value:
    """[batch, heads, seq, size] -> [batch, seq, heads * size] (`_split_heads` undone)."""
    batch, heads, seq, size = x.type.shape
    heads_last = b.op("rt.transpose", [x], {"perm": (0, 2, 1, 3)})
    return b.op("rt.reshape", [heads_last], {"shape": (batch, seq, heads * size)})


def _repeat_heads(b: Builder, x: Value, group: int) -> Value:
    """Each head `group` times in a row: [h0, h0, h1, h1, ...]."""
    batch, heads, seq, size = x.type.shape
    lifted = b.op("rt.reshape", [x], {"shape": (batch, heads, 1, seq, size)})
    wide = b.op("rt.broadcast", [lifted], {"shape": (batch, heads, group, seq, size)})
    return b.op("rt.reshape", [wide], {"shape": (batch, heads * group, seq, size)})


def _attention_bias(b: Builder, like: Value, mask, queries: int, keys: int, causal: bool, past: int, offset,
                    valid, left: int, right: int):
    """What is added to the scores, in their type: the mask (a boolean one as 0 where true, -inf elsewhere;
    padded with -inf to the keys), and -inf where causality, the sliding window or the count of valid keys
    forbids a key. Query i (of the block) sits at position past + i, or valid[b] - queries + i with a per-batch
    count and no cache. None when nothing is masked."""
    zero, minus = C.scalar(b, 0.0, like), C.scalar(b, -np.inf, like)
    terms = []
    if mask is not None:
        short = keys - mask.type.shape[-1]
        if short > 0:
            rank = mask.type.rank
            mask = b.op("rt.pad", [mask], {"low": (0,) * rank, "high": (0,) * (rank - 1) + (short,),
                                           "value": 0.0 if mask.type.dtype.kind == "bool" else float("-inf")})
        terms.append(b.op("rt.select", [mask, zero, minus]) if mask.type.dtype.kind == "bool" else mask)
    if causal or left >= 0 or right >= 0:
        rows = b.op("rt.iota", [], {"shape": (queries, keys), "axis": 0, "dtype": "i64"})
        cols = b.op("rt.iota", [], {"shape": (queries, keys), "axis": 1, "dtype": "i64"})
        if offset is not None:  # [batch, 1, queries, keys]
            shift = b.op("rt.sub", [b.op("rt.cast", [offset], {"dtype": "i64"}), C.scalar(b, queries, rows)])
            rows = b.op("rt.add", [rows, b.op("rt.reshape", [shift], {"shape": (shift.type.shape[0], 1, 1, 1)})])
        elif past:
            rows = b.op("rt.add", [rows, C.scalar(b, past, rows)])
        reach = b.op("rt.sub", [rows, cols])  # how far back the key is

        def forbid(cond):
            terms.append(b.op("rt.select", [cond, minus, zero]))

        if causal:
            forbid(b.op("rt.cmp", [reach, C.scalar(b, 0, reach)], {"predicate": "lt"}))
        if left >= 0:
            forbid(b.op("rt.cmp", [reach, C.scalar(b, left, reach)], {"predicate": "gt"}))
        if right >= 0:
            forbid(b.op("rt.cmp", [reach, C.scalar(b, -right, reach)], {"predicate": "lt"}))
    if valid is not None:  # keys at or past the batch's count are padding: [batch, 1, 1, keys]
        cols = b.op("rt.iota", [], {"shape": (1, keys), "axis": 1, "dtype": "i64"})
        count = b.op("rt.reshape", [b.op("rt.cast", [valid], {"dtype": "i64"})], {"shape": (valid.type.shape[0], 1)})
        padding = b.op("rt.cmp", [cols, count], {"predicate": "ge"})
        forbid_pad = b.op("rt.select", [padding, minus, zero])
        terms.append(b.op("rt.reshape", [forbid_pad], {"shape": (valid.type.shape[0], 1, 1, keys)}))
    if not terms:
        return None
    total = terms[0]
    for term in terms[1:]:
        total = b.op("rt.add", [total, term])
    return total


def _guarded_softmax(b: Builder, x: Value, bias) -> Value:
    """Softmax over the last axis, with zeros for a row whose bias is -inf at every key (no key to attend), and
    no NaN from its -inf peak."""
    if bias is None:
        return C.softmax(b, x, -1)
    peak = b.op("rt.reduce", [x], {"kind": "max", "axes": (x.type.rank - 1,), "keepdims": True})
    finite = b.op("rt.cmp", [peak, C.scalar(b, -np.inf, peak)], {"predicate": "gt"})
    peak = b.op("rt.select", [finite, peak, C.scalar(b, 0.0, peak)])
    e = b.op("rt.exp", [b.op("rt.sub", [x, peak])])
    total = b.op("rt.reduce", [e], {"kind": "sum", "axes": (x.type.rank - 1,), "keepdims": True})
    empty = b.op("rt.cmp", [total, C.scalar(b, 0.0, total)], {"predicate": "eq"})
    p = b.op("rt.div", [e, b.op("rt.select", [empty, C.scalar(b, 1.0, total), total])])
    top = b.op("rt.reduce", [bias], {"kind": "max", "axes": (bias.type.rank - 1,), "keepdims": True})
    masked = b.op("rt.cmp", [top, C.scalar(b, -np.inf, top)], {"predicate": "eq"})
    return b.op("rt.select", [masked, C.scalar(b, 0.0, p), p])


@handles("NegativeLogLikelihoodLoss")
def _nll_loss(n):
    return _nll(n, n(0), n(1), n(2) if n.has(2) else None)


@handles("SoftmaxCrossEntropyLoss")
def _softmax_cross_entropy(n):
    log_prob = C.log_softmax(n.b, n(0), 1)
    return [_nll(n, log_prob, n(1), n(2) if n.has(2) else None), log_prob]


def _nll(n, log_prob: Value, target: Value, weight: Value | None) -> Value:
    """-log_prob[n, target[n, ...], ...], weighted by weight[target] (0 where target is ignore_index), then
    reduced: `none`, `sum`, or `mean`, the sum divided by the weights' sum (the count of targets not ignored
    without weights)."""
    b = n.b
    ignore = n.attr("ignore_index", None)
    classes = log_prob.type.shape[1]
    kept = None
    if ignore is not None:
        kept = b.op("rt.cmp", [target, C.scalar(b, ignore, target)], {"predicate": "ne"})
        target = b.op("rt.select", [kept, target, C.scalar(b, 0, target)])  # any class: its loss is zeroed
    lifted = b.op("rt.reshape", [target], {"shape": (target.type.shape[0], 1, *target.type.shape[1:])})
    picked = C.take_along_axis(b, log_prob, lifted, 1)
    loss = b.op("rt.neg", [b.op("rt.reshape", [picked], {"shape": target.type.shape})])
    if weight is not None:
        w = b.op("rt.gather", [weight, C.clamp(b, target, 0, classes - 1)], {"axis": 0})
    else:
        w = b.op("rt.broadcast", [C.scalar(b, 1.0, loss)], {"shape": loss.type.shape})
    if kept is not None:
        w = b.op("rt.select", [kept, w, C.scalar(b, 0.0, w)])
    loss = b.op("rt.mul", [loss, w])
    reduction = n.attr("reduction", "mean")
    if reduction == "none":
        return loss
    axes = tuple(range(loss.type.rank))
    total = b.op("rt.reduce", [loss], {"kind": "sum", "axes": axes, "keepdims": False})
    if reduction == "sum":
        return total
    if reduction != "mean":
        raise UnsupportedOpError(f"{n.node.op_type}'s reduction '{reduction}' (none, sum and mean are)")
    return b.op("rt.div", [total, b.op("rt.reduce", [w], {"kind": "sum", "axes": axes, "keepdims": False})])


@handles("BatchNormalization")
def _batch_norm(n):
    x, scale, bias, mean, var = (n(i) for i in range(5))
    eps = n.attr("epsilon", 1e-5)
    if not n.attr("training_mode", 0):
        return C.batch_norm(n.b, x, scale, bias, mean, var, eps)
    # training: normalize by the batch's statistics (population variance); the running ones move toward them
    b, axes = n.b, (0, *range(2, x.type.rank))
    batch_mean = C.mean(b, x, axes)
    centered = b.op("rt.sub", [x, C.channel_vector(b, batch_mean, x.type.rank)])
    batch_var = C.mean(b, b.op("rt.mul", [centered, centered]), axes)
    y = C.batch_norm(b, x, scale, bias, batch_mean, batch_var, eps)
    momentum = n.attr("momentum", 0.9)

    def running(old, new):
        return b.op("rt.add", [b.op("rt.mul", [old, C.scalar(b, momentum, old)]),
                               b.op("rt.mul", [new, C.scalar(b, 1 - momentum, new)])])

    return [y, running(mean, batch_mean), running(var, batch_var)]


@handles("InstanceNormalization")
def _instance_norm(n):
    x = n(0)
    return C.group_norm(n.b, x, x.type.shape[1], n(1), n(2), n.attr("epsilon", 1e-5))


@handles("GroupNormalization")
def _group_norm(n):
    """Opset 21's scale and bias are per channel; opset 18's per group, each shared by its group's channels.
    Statistics are computed in f32 (or f64 for f64 input), whatever `stash_type` says."""
    x, scale, bias = n(0), n(1), n(2)
    groups, channels = n.attr("num_groups"), x.type.shape[1]
    if n.opset < 21:
        scale, bias = (_per_channel(n.b, v, groups, channels) for v in (scale, bias))
    return C.group_norm(n.b, x, groups, scale, bias, n.attr("epsilon", 1e-5))


def _per_channel(b: Builder, v: Value, groups: int, channels: int) -> Value:
    """A per-group vector [G] as a per-channel one [C]: each entry repeated for the C / G channels of its group."""
    if v.type.shape != (groups,):
        raise InputError(f"GroupNormalization-18's scale and bias hold one value per group ({groups}), got {v.type}",
                         hint="opset 21 and later take one per channel")
    wide = b.op("rt.broadcast", [b.op("rt.reshape", [v], {"shape": (groups, 1)})],
                {"shape": (groups, channels // groups)})
    return b.op("rt.reshape", [wide], {"shape": (channels,)})


@handles("Gemm")
def _gemm(n):
    a, b = n(0), n(1)
    if n.attr("transA", 0):
        a = n.b.op("rt.transpose", [a], {"perm": (1, 0)})
    if n.attr("transB", 0):
        b = n.b.op("rt.transpose", [b], {"perm": (1, 0)})
    y = n.b.op("rt.matmul", [a, b])
    alpha, beta = n.attr("alpha", 1.0), n.attr("beta", 1.0)
    if alpha != 1.0:
        y = n.b.op("rt.mul", [y, C.scalar(n.b, alpha, y)])
    if n.has(2) and beta != 0.0:
        c = n(2)
        if beta != 1.0:
            c = n.b.op("rt.mul", [c, C.scalar(n.b, beta, c)])
        y = n.b.op("rt.add", [y, c])
    return y


@handles("MatMul")
def _matmul(n):
    a, b = n(0), n(1)
    ra, rb = a.type.rank, b.type.rank
    if ra == 1:
        a = n.b.op("rt.reshape", [a], {"shape": (1,) + a.type.shape})
    if rb == 1:
        b = n.b.op("rt.reshape", [b], {"shape": b.type.shape + (1,)})
    y = n.b.op("rt.matmul", [a, b])
    shape = y.type.shape
    if rb == 1:
        shape = shape[:-1]
    if ra == 1:
        shape = shape[:-2] + shape[-1:] if rb != 1 else shape[:-1]
    return y if shape == y.type.shape else n.b.op("rt.reshape", [y], {"shape": shape})


def _spatial_pads(n, x, kernel, strides, dilations):
    """(top, bottom, left, right) from `pads` or `auto_pad`, for 2-D spatial dims."""
    spatial = x.type.shape[2:]
    auto = n.attr("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads_begin, pads_end = [], []
        for size, k, s, d in zip(spatial, kernel, strides, dilations, strict=False):
            out = -(-size // s)
            total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
            small, big = total // 2, total - total // 2
            pads_begin.append(small if auto == "SAME_UPPER" else big)
            pads_end.append(big if auto == "SAME_UPPER" else small)
    elif auto == "VALID":
        pads_begin = pads_end = [0] * len(spatial)
    else:
        pads = list(n.attr("pads", [0] * 2 * len(spatial)))
        pads_begin, pads_end = pads[:len(spatial)], pads[len(spatial):]
    return pads_begin, pads_end


def _lift_1d(n, x):
    """A rank-3 NCW tensor as rank-4 NC1W; rank-4 as is; others unsupported."""
    if x.type.rank == 4:
        return x
    if x.type.rank == 3:
        return n.b.op("rt.reshape", [x], {"shape": x.type.shape[:2] + (1,) + x.type.shape[2:]})
    raise UnsupportedOpError(f"{n.node.op_type} on rank-{x.type.rank} tensors is not supported (1-D, 2-D and 3-D: "
                             "rank 3 to 5, are)")


def _begin_end(begin, end) -> tuple:
    """Pads as the composed convs take them, (begin, end) a spatial dim in turn."""
    return tuple(p for pair in zip(begin, end, strict=True) for p in pair)


def _spatial_attrs(n, rank, kernel):
    k = len(kernel)
    strides = list(n.attr("strides", [1] * k))
    dilations = list(n.attr("dilations", [1] * k))
    return strides, dilations


@handles("Conv")
def _conv(n):
    x, w = n(0), n(1)
    rank = x.type.rank
    kernel = list(n.attr("kernel_shape", w.type.shape[2:]))
    strides, dilations = _spatial_attrs(n, rank, kernel)
    begin, end = _spatial_pads(n, x, kernel, strides, dilations)
    bias = n(2) if n.has(2) else None
    if rank == 5:
        return C.conv3d(n.b, x, w, bias, strides, _begin_end(begin, end), dilations, n.attr("group", 1))
    x4, w4 = _lift_1d(n, x), _lift_1d(n, w)
    if rank == 3:
        strides, dilations, begin, end = [1] + strides, [1] + dilations, [0] + begin, [0] + end
    y = C.conv2d(n.b, x4, w4, bias, strides, _begin_end(begin, end), dilations, n.attr("group", 1))
    if rank == 3:
        y = n.b.op("rt.reshape", [y], {"shape": y.type.shape[:2] + y.type.shape[3:]})
    return y


@handles("ConvTranspose")
def _conv_transpose(n):
    """Output size s * (in - 1) + output_padding + dilation * (k - 1) + 1 - pads. With `output_shape` (or
    SAME_UPPER / SAME_LOWER, whose output is in * s) the pads are what makes that size, their odd one at the
    end for SAME_UPPER and at the start otherwise; as ONNX's reference computes them, with floor division."""
    x, w = n(0), n(1)
    spatial = list(x.type.shape[2:])
    kernel = list(n.attr("kernel_shape", w.type.shape[2:]))
    strides, dilations = _spatial_attrs(n, x.type.rank, kernel)
    extra = list(n.attr("output_padding", [0] * len(kernel)))
    auto = n.attr("auto_pad", "NOTSET")
    wanted = n.attr("output_shape")
    if wanted is not None or auto in ("SAME_UPPER", "SAME_LOWER"):
        wanted = list(wanted)[-len(spatial):] if wanted is not None else [d * s for d, s in zip(spatial, strides)]
        total = [s * (d - 1) + e + dil * (k - 1) + 1 - o
                 for d, s, e, dil, k, o in zip(spatial, strides, extra, dilations, kernel, wanted, strict=True)]
        small = [t // 2 for t in total]
        big = [t - h for t, h in zip(total, small)]
        begin, end = (small, big) if auto == "SAME_UPPER" else (big, small)
    elif auto == "VALID":
        begin = end = [0] * len(spatial)
    else:
        pads = list(n.attr("pads", [0] * 2 * len(spatial)))
        begin, end = pads[:len(spatial)], pads[len(spatial):]
    end = [p - e for p, e in zip(end, extra)]  # the output padding extends the end: a smaller crop there
    bias = n(2) if n.has(2) else None
    if len(spatial) == 3:
        return C.conv_transpose3d(n.b, x, w, bias, strides, _begin_end(begin, end), dilations, n.attr("group", 1))
    x4, w4 = _lift_1d(n, x), _lift_1d(n, w)
    if len(spatial) == 1:
        strides, dilations, begin, end = [1] + strides, [1] + dilations, [0] + begin, [0] + end
    y = C.conv_transpose2d(n.b, x4, w4, bias, strides, _begin_end(begin, end), dilations, n.attr("group", 1))
    if len(spatial) == 1:
        y = n.b.op("rt.reshape", [y], {"shape": y.type.shape[:2] + y.type.shape[3:]})
    return y


def _pool_window(n, x):
    """kernel, strides, dilations, begin and end pads of a pooling node, with ceil_mode's extra end padding
    (windows that start inside the input or its padding) as a separate list."""
    kernel = list(n.attr("kernel_shape"))
    strides, dilations = _spatial_attrs(n, x.type.rank, kernel)
    begin, end = _spatial_pads(n, x, kernel, strides, dilations)
    extra = [0] * len(kernel)
    if n.attr("ceil_mode", 0):
        for d, (size, k, s, dil) in enumerate(zip(x.type.shape[2:], kernel, strides, dilations, strict=False)):
            k = dil * (k - 1) + 1  # the window's span
            out = -(-(size + begin[d] + end[d] - k) // s) + 1
            if (out - 1) * s >= size + begin[d]:
                out -= 1
            extra[d] = max(0, (out - 1) * s + k - (size + begin[d] + end[d]))
    return kernel, strides, dilations, begin, end, extra


def _pool_node(n, rt_name):
    x = n(0)
    kernel, strides, dilations, begin, end, extra = _pool_window(n, x)
    include = bool(n.attr("count_include_pad", 0)) and rt_name == "rt.avg_pool2d"
    if include and any(extra):  # pads count, ceil_mode's extra positions do not: pad explicitly, then exclude
        x = n.b.op("rt.pad", [x], {"low": (0, 0, *begin), "high": (0, 0, *end), "value": 0})
        begin, end, include = [0] * len(begin), [0] * len(end), False
    stop = [e + x_ for e, x_ in zip(end, extra, strict=True)]
    y = C.pool(n.b, x, rt_name, kernel, strides, dilations, begin, stop, include)
    if not n.wants(1):
        return y
    # Indices: over the whole tensor, as onnx's reference and onnxruntime number them
    column_major = bool(n.attr("storage_order", 0))
    indices = C.max_pool_indices(n.b, x, y, kernel, strides, dilations, begin, stop, plane_offset=True,
                                 column_major=column_major)
    n.cv.pool_windows[indices] = C.PoolWindows(tuple(kernel), tuple(strides), tuple(dilations), tuple(begin),
                                               tuple(end), x.type.shape[2:], plane_offset=True,
                                               column_major=column_major)
    return [y, indices]


HANDLERS["MaxPool"] = lambda n: _pool_node(n, "rt.max_pool2d")
HANDLERS["AveragePool"] = lambda n: _pool_node(n, "rt.avg_pool2d")


@handles("MaxUnpool")
def _max_unpool(n):
    """Zeros of `output_shape` (input 2, known at import time), else of (size - 1) * stride + kernel - pads a
    spatial dim, with X's values at I (as MaxPool's Indices: over the whole tensor); `C.max_unpool`, whose
    docstring says what an index outside its own (n, c) plane does: it writes nothing. I numbers positions of
    output_shape itself, the pool's input, as onnxruntime and torch read it; onnx's reference (and the node test
    test_maxunpool_export_with_output_shape) scatters in the inferred shape and pads its end (onnx/onnx#2398).
    Linear where I is the Indices of a MaxPool of this graph with the same kernel_shape, strides and pads (whose
    windows `C.max_unpool` then reads), else the composed scatter."""
    x = n(0)
    kernel = list(n.attr("kernel_shape"))
    strides, _ = _spatial_attrs(n, x.type.rank, kernel)
    pads = list(n.attr("pads", [0] * 2 * len(kernel)))
    if n.has(2):
        size = _dims(n.known(2, "output_shape"))[2:]
    else:
        size = [(d - 1) * s + k - lo - hi
                for d, s, k, lo, hi in zip(x.type.shape[2:], strides, kernel, pads[:len(kernel)], pads[len(kernel):],
                                           strict=True)]
    indices = n(1)
    windows = n.cv.pool_windows.get(indices)
    if windows is not None and (list(windows.kernel), list(windows.strides), list(windows.begin + windows.end)) \
            != (kernel, list(strides), pads):
        windows = None
    return C.max_unpool(n.b, x, indices, size, plane_offset=True, windows=windows)


@handles("GridSample")
def _grid_sample(n):
    """Opset 16 names the modes bilinear and bicubic, opset 20 linear and cubic (and reads any number of
    spatial dims)."""
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(n.attr("mode", "linear"), n.attr("mode", "linear"))
    padding = n.attr("padding_mode", "zeros")
    if mode not in C.GRID_SAMPLE_MODES or padding not in C.GRID_SAMPLE_PADDINGS:
        raise UnsupportedOpError(f"GridSample mode '{mode}' with padding_mode '{padding}' is not defined",
                                 hint=f"modes: {', '.join(C.GRID_SAMPLE_MODES)}; paddings: "
                                      f"{', '.join(C.GRID_SAMPLE_PADDINGS)}")
    return C.grid_sample(n.b, n(0), n(1), mode, padding, bool(n.attr("align_corners", 0)), onnx_order=True)


_ONNX_REDUCTIONS = {"none": "none", "add": "sum", "mul": "prod", "max": "max", "min": "min"}


def _scatter_reduction(n) -> str:
    reduction = n.attr("reduction", "none")
    if reduction not in _ONNX_REDUCTIONS:
        raise UnsupportedOpError(f"{n.node.op_type} reduction '{reduction}' is not defined",
                                 hint=f"reductions: {', '.join(_ONNX_REDUCTIONS)}")
    return _ONNX_REDUCTIONS[reduction]


@handles("ScatterElements")
def _scatter_elements(n):
    return C.scatter_elements(n.b, n(0), n.attr("axis", 0), n(1), n(2), _scatter_reduction(n))


@handles("ScatterND")
def _scatter_nd(n):
    return C.scatter_nd(n.b, n(0), n(1), n(2), _scatter_reduction(n))


@handles("LpPool")
def _lp_pool(n):
    """(sum of |x|^p over the window)^(1/p); padding adds zeros."""
    x = n(0)
    p = float(n.attr("p", 2))
    kernel, strides, dilations, begin, end, extra = _pool_window(n, x)
    stop = [e + x_ for e, x_ in zip(end, extra, strict=True)]
    b = n.b
    power = b.op("rt.mul", [x, x]) if p == 2 else b.op("rt.pow", [b.op("rt.abs", [x]), C.scalar(b, p, x)])
    mean = C.pool(b, power, "rt.avg_pool2d", kernel, strides, dilations, begin, stop, True)
    total = b.op("rt.mul", [mean, C.scalar(b, math.prod(kernel), mean)])
    return b.op("rt.sqrt", [total]) if p == 2 else b.op("rt.pow", [total, C.scalar(b, 1 / p, total)])


@handles("GlobalAveragePool")
def _global_avg_pool(n):
    x = n(0)
    return C.mean(n.b, x, tuple(range(2, x.type.rank)), keepdims=True)


@handles("GlobalMaxPool")
def _global_max_pool(n):
    x = n(0)
    return n.b.op("rt.reduce", [x], {"kind": "max", "axes": tuple(range(2, x.type.rank)), "keepdims": True})


def _reshape(n, x, shape):
    shape = tuple(_dims(shape)) if len(shape) else ()
    return x if x.type.shape == shape else n.b.op("rt.reshape", [x], {"shape": shape})


@handles("Flatten")
def _flatten(n):
    x = n(0)
    axis = _axis(n, x, 1)
    return _reshape(n, x, (math.prod(x.type.shape[:axis]), math.prod(x.type.shape[axis:])))


@handles("Reshape")
def _reshape_op(n):
    x = n(0)
    target = _dims(n.known(1, "shape"))
    allowzero = n.attr("allowzero", 0)
    shape = [x.type.shape[i] if d == 0 and not allowzero else d for i, d in enumerate(target)]
    if -1 in shape:
        rest = math.prod(d for d in shape if d != -1)
        whole = divide_exactly(x.type.num_elements, rest) if not isinstance(rest, int) or rest else 0
        if whole is None:
            raise UnsupportedOpError(f"cannot reshape {x.type} to {[str(d) for d in target]}: "
                                     f"{x.type.num_elements} elements are not a multiple of {rest}")
        shape[shape.index(-1)] = whole
    return _reshape(n, x, shape)


@handles("Transpose")
def _transpose(n):
    x = n(0)
    perm = tuple(n.attr("perm", list(range(x.type.rank))[::-1]))
    return x if perm == tuple(range(x.type.rank)) else n.b.op("rt.transpose", [x], {"perm": perm})


@handles("DepthToSpace")
def _depth_to_space(n):
    """Channels into b x b blocks of pixels: DCR (the default) takes the block's position from the channel's
    high part, CRD (pixel shuffle's) from its low part."""
    x, b = n(0), int(n.attr("blocksize"))
    batch, c, h, w = x.type.shape
    if n.attr("mode", "DCR") == "CRD":
        split, perm = (batch, c // (b * b), b, b, h, w), (0, 1, 4, 2, 5, 3)
    else:
        split, perm = (batch, b, b, c // (b * b), h, w), (0, 3, 4, 1, 5, 2)
    y = n.b.op("rt.transpose", [n.b.op("rt.reshape", [x], {"shape": split})], {"perm": perm})
    return n.b.op("rt.reshape", [y], {"shape": (batch, c // (b * b), h * b, w * b)})


@handles("SpaceToDepth")
def _space_to_depth(n):
    """b x b blocks of pixels into channels: DepthToSpace undone, in either mode (the block's position in the
    channel's high part, DCR, or its low part, CRD, as newer opsets allow)."""
    x, b = n(0), int(n.attr("blocksize"))
    batch, c, h, w = x.type.shape
    y = n.b.op("rt.reshape", [x], {"shape": (batch, c, h // b, b, w // b, b)})
    perm = (0, 1, 3, 5, 2, 4) if n.attr("mode", "DCR") == "CRD" else (0, 3, 5, 1, 2, 4)
    y = n.b.op("rt.transpose", [y], {"perm": perm})
    return n.b.op("rt.reshape", [y], {"shape": (batch, c * b * b, h // b, w // b)})


@handles("Concat")
def _concat(n):
    xs = n.inputs()
    axis = _axis(n, xs[0], 0)
    return xs[0] if len(xs) == 1 else n.b.op("rt.concat", xs, {"axis": axis})


@handles("Split")
def _split(n):
    x = n(0)
    axis = _axis(n, x, 0)
    size = x.type.shape[axis]
    count = n.n_outputs()
    if n.has(1):
        sizes = [int(s) for s in n.known(1, "split")]
    elif "split" in n.attrs:
        sizes = list(n.attr("split"))
    else:
        count = n.attr("num_outputs", count)
        chunk = -(-size // count)
        sizes = [min(chunk, size - i * chunk) for i in range(count)]
    outs, start = [], 0
    for s in sizes:
        outs.append(C.slice_axis(n.b, x, axis, start, start + s, 1))
        start += s
    return outs


@handles("Slice")
def _slice(n):
    x = n(0)
    rank = x.type.rank
    starts, ends = _dims(n.known(1, "starts")), _dims(n.known(2, "ends"))  # ends may be sizes (`x[:, :n]`)
    axes = [C.normalize_axis(int(a), rank) for a in n.known_or(3, range(len(starts)), "axes")]
    steps = [int(v) for v in n.known_or(4, [1] * len(starts), "steps")]
    for axis, s, e, k in zip(axes, starts, ends, steps, strict=False):
        size = x.type.shape[axis]
        if isinstance(size, Sym) or isinstance(s, Sym) or isinstance(e, Sym):
            x = _slice_symbolic(n, x, axis, s, e, k)
            continue
        s, e = max(min(s, 2**62), -(2**62)), max(min(e, 2**62), -(2**62))
        lo, hi, k = slice(s, e, k).indices(size)
        if k > 0:
            x = C.slice_axis(n.b, x, axis, lo, max(lo, hi), k)
        else:
            idx = np.arange(lo, hi, k, dtype=np.int64)
            x = n.b.op("rt.gather", [x, n.b.constant(idx)], {"axis": axis})
    return x


def _slice_symbolic(n, x, axis, start, end, step):
    """A slice where the axis's size or a bound is known only at run time: positive steps, from a start counted
    from either end, to the end (an end past any size, as exporters write `x[2:]`), to a bound counted from the
    end, or to a computed size, clamped to the axis as ONNX clamps (`x.chunk(2)` exports its second half as
    [(n + 1) // 2 : 2 * ((n + 1) // 2)]). A slice that comes out empty at some size is refused when it is called
    with that size."""
    size = x.type.shape[axis]
    if step < 0 and not isinstance(start, Sym) and not isinstance(end, Sym):  # a reversed axis, sliced forward
        def mirrored(v):  # position v of x in the reversed axis: past the end is its start, past the start its end
            if v >= 2**31 - 1 or v <= -(2**31):
                return 0 if v > 0 else size
            return -1 - v if v < 0 else size - 1 - v
        return _slice_symbolic(n, C.reverse(n.b, x, [axis]), axis, mirrored(start), mirrored(end), -step)
    if step <= 0:
        raise UnsupportedOpError(f"a slice with step {step} where sizes are known only at run time ({size}, "
                                 f"[{start}:{end}])", hint="only positive steps are supported there")

    def position(v):
        if isinstance(v, Sym):
            return dim_min(v, size)
        if v >= 2**31 - 1:
            return size
        return v if v >= 0 else size + v

    return C.slice_axis(n.b, x, axis, position(start), position(end), step)


@handles("Gather")
def _gather(n):
    x = n(0)
    axis = _axis(n, x, 0)
    size = x.type.shape[axis]
    v = n.cv.env[n.node.input[1]]
    if not isinstance(v, Value):
        idx = n.b.constant(np.where(v < 0, v + size, v).astype(np.int64))
    else:
        idx = n(1)
        zero = C.scalar(n.b, 0, idx)
        neg = n.b.op("rt.cmp", [idx, zero], {"predicate": "lt"})
        idx = n.b.op("rt.select", [neg, n.b.op("rt.add", [idx, C.scalar(n.b, size, idx)]), idx])
    return n.b.op("rt.gather", [x, idx], {"axis": axis})


def _axes_of(n, default=None, input_index=1):
    if n.has(input_index):
        return [int(a) for a in np.asarray(n.known(input_index, "axes")).reshape(-1)]  # a scalar axis too
    return list(n.attr("axes", default if default is not None else []))


@handles("Unsqueeze")
def _unsqueeze(n):
    x = n(0)
    axes = _axes_of(n)
    rank = x.type.rank + len(axes)
    axes = sorted(C.normalize_axis(a, rank) for a in axes)
    shape = list(x.type.shape)
    for a in axes:
        shape.insert(a, 1)
    return _reshape(n, x, shape)


@handles("Squeeze")
def _squeeze(n):
    x = n(0)
    axes = _axes_of(n)
    if axes:
        axes = {C.normalize_axis(a, x.type.rank) for a in axes}
    else:
        axes = {i for i, d in enumerate(x.type.shape) if d == 1}
    return _reshape(n, x, [d for i, d in enumerate(x.type.shape) if i not in axes])


def _input_shape(n, i=0):
    v = n.cv.env[n.node.input[i]]
    return v.type.shape if isinstance(v, Value) else v.shape


@handles("Shape")
def _shape(n):
    dims = _input_shape(n)
    symbolic = any(isinstance(d, Sym) for d in dims)
    shape = np.array(list(dims), dtype=object) if symbolic else np.array(dims, dtype=np.int64)
    rank = len(shape)
    start, end = n.attr("start", 0), n.attr("end", rank)
    return shape[slice(*slice(start, end).indices(rank)[:2])]


@handles("Size")
def _size(n):
    size = math.prod(_input_shape(n))
    return np.array(size, dtype=object) if isinstance(size, Sym) else np.array(size, dtype=np.int64)


@handles("Constant")
def _constant_op(n):
    for key in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        if key in n.attrs:
            v = n.attrs[key]
            if key == "value":
                return np.asarray(v)
            return np.array(v, dtype=np.float32 if "float" in key else np.int64)
    raise UnsupportedOpError(f"Constant with attribute {', '.join(n.attrs)} is not supported")


@handles("ConstantOfShape")
def _constant_of_shape(n):
    shape = tuple(_dims(n.known(0, "shape")))
    value = n.attr("value", np.zeros(1, np.float32))
    if any(isinstance(d, Sym) for d in shape):  # a splat as big as the input: a broadcast scalar
        scalar = n.b.constant(np.array(value.reshape(-1)[0], dtype=value.dtype))
        return n.b.op("rt.broadcast", [scalar], {"shape": shape}) if shape else scalar
    return np.full(shape, value.reshape(-1)[0], dtype=value.dtype)


@handles("Expand")
def _expand(n):
    x = n(0)
    target = tuple(_dims(n.known(1, "shape")))
    rank = max(len(target), x.type.rank)
    dims = [(x.type.shape[::-1] + (1,) * rank)[i] for i in range(rank)][::-1]
    wanted = [(target[::-1] + (1,) * rank)[i] for i in range(rank)][::-1]
    shape = tuple(w if d == 1 else d for d, w in zip(dims, wanted))  # Expand broadcasts both ways
    return x if shape == x.type.shape else n.b.op("rt.broadcast", [x], {"shape": shape})


@handles("Range")
def _range(n):
    start, limit, delta = (np.asarray(n.known(i)) for i in range(3))  # scalars, or tensors of one element
    return np.arange(start.item(), limit.item(), delta.item()).astype(start.dtype)


@handles("Tile")
def _tile(n):
    return C.tile(n.b, n(0), [int(r) for r in n.known(1, "repeats")])


RESIZE_COORDINATES = {  # ONNX's coordinate_transformation_mode: the input position of output x along an axis of
    # `size` elements, as onnx's reference computes it: `length` is the output's length before rounding (size *
    # scale), `out` after
    "half_pixel": lambda x, scale, size, out, length: (x + 0.5) / scale - 0.5,
    "pytorch_half_pixel": lambda x, scale, size, out, length: (x + 0.5) / scale - 0.5 if length > 1 else 0 * x,
    "align_corners": lambda x, scale, size, out, length: x * (size - 1) / (length - 1) if length > 1 else 0 * x,
    "asymmetric": lambda x, scale, size, out, length: x / scale,
    "tf_half_pixel_for_nn": lambda x, scale, size, out, length: (x + 0.5) / scale,  # opset 11's, for nearest
    "half_pixel_symmetric": lambda x, scale, size, out, length:  # centred where rounding shrank the output
        size / 2 * (1 - out / length) + (x + 0.5) / scale - 0.5,
}
RESIZE_NEAREST = {  # ONNX's nearest_mode
    "round_prefer_floor": lambda p: np.ceil(p - 0.5), "round_prefer_ceil": lambda p: np.floor(p + 0.5),
    "floor": np.floor, "ceil": np.ceil,
}


def _keys_cubic_weights(distance: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic convolution kernel (coefficient `a`) at `distance` from a sample."""
    d = np.abs(distance)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def _resize_weights(mode: str, ratio: np.ndarray, scale: float, antialias: bool, a: float) -> np.ndarray:
    """[out, taps] weights of linear or cubic interpolation at fractional offsets `ratio` (in (0, 1]) past the
    sample below, as onnx's reference defines them: antialias widens the kernel by 1 / scale when downscaling."""
    support = 1 if mode == "linear" else 2  # the kernel's half-width in samples
    stretch = min(scale, 1.0) if antialias else 1.0
    first = int(np.floor(-support / stretch) + 1)
    offsets = np.arange(first, 2 - first) - ratio[:, None]  # sample k's position past the output's source point
    if mode == "linear":
        weights = np.clip(1 - np.abs(offsets * stretch), 0, 1)
    else:
        weights = _keys_cubic_weights(offsets * stretch, a)
    return weights / weights.sum(axis=1, keepdims=True)


def _resize_taps(mode: str, position: np.ndarray, size_in: int, scale: float, antialias: bool, a: float,
                 exclude_outside: bool) -> tuple[np.ndarray, np.ndarray]:
    """(indices, weights), each [out, taps], of a linear or cubic resize along an axis of `size_in` at source
    `position`s: the taps nearest each position, the lower on a tie, edges repeated (indices clamped)."""
    below = np.floor(position)
    ratio = np.where(position == below, 1.0, position - below)  # a whole position reads the sample below at 1
    weights = _resize_weights(mode, ratio, scale, antialias, a)
    taps = weights.shape[1]
    start = np.where(position == below, below - taps // 2, below - taps // 2 + 1)  # taps is even
    indices = start.astype(np.int64)[:, None] + np.arange(taps)
    if exclude_outside:
        weights = np.where((indices < 0) | (indices >= size_in), 0.0, weights)
        total = weights.sum(axis=1, keepdims=True)
        weights = weights / np.where(total == 0, 1.0, total)
    return np.clip(indices, 0, size_in - 1), weights


def _crop_positions(out: np.ndarray, size_in: int, length: float, roi_start: float, roi_end: float) -> np.ndarray:
    """tf_crop_and_resize's source positions: the output spans [roi_start, roi_end] of the input's extent."""
    extent = size_in - 1
    if length > 1:
        return roi_start * extent + out * (roi_end - roi_start) * extent / (length - 1)
    return roi_start * extent + np.full(out.shape, (roi_end - roi_start) * extent / 2)


@handles("Resize")
def _resize(n):
    """Nearest, linear and cubic modes with every coordinate mode, antialias and exclude_outside: per axis, gathers
    of positions and a weighted sum of taps computed here, as onnx's reference computes them, so every target runs
    them with no op of its own. tf_crop_and_resize needs its roi known at import time."""
    x = n(0)
    rank = x.type.rank
    mode, coords = n.attr("mode", "nearest"), n.attr("coordinate_transformation_mode", "half_pixel")
    nearest = n.attr("nearest_mode", "round_prefer_floor")
    antialias = bool(n.attr("antialias", 0))
    crop = coords == "tf_crop_and_resize"
    if mode not in ("nearest", "linear", "cubic") or not (crop or coords in RESIZE_COORDINATES) \
            or nearest not in RESIZE_NEAREST:
        raise UnsupportedOpError(
            f"Resize with mode {mode!r}, coordinate_transformation_mode {coords!r} and nearest_mode {nearest!r} is "
            f"not supported", hint=f"modes nearest, linear and cubic with coordinate_transformation_mode "
            f"{', '.join([*RESIZE_COORDINATES, 'tf_crop_and_resize'])} are")
    if antialias and mode == "nearest":
        raise UnsupportedOpError("Resize with antialias and mode 'nearest' is not defined",
                                 hint="antialias applies to modes linear and cubic")
    if mode != "nearest" and not x.type.dtype.is_float:
        raise UnsupportedOpError(f"{mode} Resize of {x.type.dtype} is not supported", hint="resize a float tensor")
    axes = [C.normalize_axis(int(a), rank) for a in n.attr("axes", list(range(rank)))]
    sizes_in = [x.type.shape[a] for a in axes]
    dynamic = [isinstance(size, Sym) for size in sizes_in]  # such an axis must keep its size (a dynamic batch)
    if n.has(3):
        sizes = _dims(n.known(3, "sizes"))
        if any(isinstance(out, Sym) != d or (d and out != size) for out, size, d in zip(sizes, sizes_in, dynamic)):
            raise UnsupportedOpError(f"Resize of {x.type} to {_sizes(sizes)}: an axis whose size is known only at "
                                     "run time must keep it", hint="resize only axes of static size")
        scales = [1.0 if d else out / size for out, size, d in zip(sizes, sizes_in, dynamic)]
        policy = n.attr("keep_aspect_ratio_policy", "stretch")
        if policy != "stretch":  # one scale for every axis, the smaller or the larger
            if any(dynamic):
                raise UnsupportedOpError(f"Resize with keep_aspect_ratio_policy {policy!r} of {x.type}, whose sizes "
                                         "are known only at run time, is not supported")
            scale = (min if policy == "not_larger" else max)(scales)
            scales, sizes = [scale] * len(axes), [int(np.round(scale * size)) for size in sizes_in]
    else:
        scales = [float(s) for s in n.known(2, "scales")]
        if any(d and scale != 1 for d, scale in zip(dynamic, scales)):
            raise UnsupportedOpError(f"Resize of {x.type} by scales {scales}: an axis whose size is known only at "
                                     "run time must keep it (scale 1)", hint="resize only axes of static size")
        sizes = [size if d else int(np.floor(size * scale)) for size, scale, d in zip(sizes_in, scales, dynamic)]
    roi = np.asarray(n.known(1, "roi"), dtype=np.float64).reshape(-1) if crop and n.has(1) else None
    if crop and (roi is None or roi.size != 2 * len(axes)):
        raise UnsupportedOpError(f"Resize with tf_crop_and_resize needs a roi of {2 * len(axes)} values (a start and "
                                 f"an end for each resized axis)", hint="give the roi input, known at import time")
    a, exclude = float(n.attr("cubic_coeff_a", -0.75)), bool(n.attr("exclude_outside", 0))
    for k, (axis, size_in, size_out, scale, d) in enumerate(zip(axes, sizes_in, sizes, scales, dynamic)):
        if d or (size_out == size_in and scale == 1 and (not crop or tuple(roi[[k, k + len(axes)]]) == (0, 1))):
            continue
        out, length = np.arange(size_out, dtype=np.float64), size_in * scale
        if crop:
            position = _crop_positions(out, size_in, length, roi[k], roi[k + len(axes)])
        else:
            position = RESIZE_COORDINATES[coords](out, scale, size_in, size_out, length)
        if mode == "nearest":
            x = C.resample(n.b, x, axis, np.clip(RESIZE_NEAREST[nearest](position), 0, size_in - 1))
        else:
            x = C.resample_taps(n.b, x, axis, *_resize_taps(mode, position, size_in, scale, antialias, a, exclude))
        if crop and ((position < 0) | (position > size_in - 1)).any():  # outside the input: extrapolation_value
            shape = [1] * rank
            shape[axis] = size_out
            outside = n.b.constant(((position < 0) | (position > size_in - 1)).reshape(shape))
            x = n.b.op("rt.select", [outside, C.scalar(n.b, n.attr("extrapolation_value", 0.0), x), x])
    return x


@handles("Pad")
def _pad(n):
    x = n(0)
    rank = x.type.rank
    pads = [int(p) for p in n.known(1, "pads")]
    axes = [C.normalize_axis(a, rank) for a in n.known_or(3, range(rank), "axes")]
    low, high = [0] * rank, [0] * rank
    for i, a in enumerate(axes):
        low[a], high[a] = pads[i], pads[i + len(axes)]
    for a in range(rank):  # negative pads crop
        if low[a] < 0 or high[a] < 0:
            size = x.type.shape[a]
            x = C.slice_axis(n.b, x, a, max(0, -low[a]), size - max(0, -high[a]), 1)
            low[a], high[a] = max(0, low[a]), max(0, high[a])
    mode = n.attr("mode", "constant")
    if mode == "constant":
        pad = {"low": tuple(low), "high": tuple(high)}
        if n.has(2) and isinstance(n.cv.env[n.node.input[2]], Value):  # a computed fill value: pad, then select
            fill = n.b.op("rt.reshape", [n(2)], {"shape": ()})
            inside = n.b.op("rt.pad", [n.b.constant(np.ones(x.type.shape, dtype=bool))], {**pad, "value": False})
            return n.b.op("rt.select", [inside, n.b.op("rt.pad", [x], {**pad, "value": 0}), fill])
        value = np.asarray(n.known(2, "constant_value")).reshape(-1)[0] if n.has(2) else 0
        return n.b.op("rt.pad", [x], {**pad, "value": value.item() if hasattr(value, "item") else value})
    for a in range(rank):  # edge, reflect and wrap are gathers of computed indices
        if low[a] or high[a]:
            size = x.type.shape[a]
            idx = np.arange(-low[a], size + high[a])
            if mode == "edge":
                idx = np.clip(idx, 0, size - 1)
            elif mode == "reflect":
                period = 2 * (size - 1) if size > 1 else 1
                idx = np.abs(idx) % period if size > 1 else np.zeros_like(idx)
                idx = np.where(idx >= size, period - idx, idx)
            elif mode == "wrap":
                idx = idx % size
            else:
                raise UnsupportedOpError(f"Pad mode '{mode}' is not supported")
            x = n.b.op("rt.gather", [x, n.b.constant(idx.astype(np.int64))], {"axis": a})
    return x


def _reduce_axes(n, x):
    """Axes from the attribute (ReduceX before its opset-18 version) or the second input."""
    axes = _axes_of(n, input_index=1)
    if not axes:
        if n.attr("noop_with_empty_axes", 0):
            return None
        return tuple(range(x.type.rank))
    return tuple(sorted({C.normalize_axis(a, x.type.rank) for a in axes}))


_EMPTY_REDUCTION = {"max": lambda dt: C.extreme(dt, low=True), "min": lambda dt: C.extreme(dt, low=False),
                    "log_sum_exp": lambda dt: -np.inf, "log_sum": lambda dt: -np.inf,
                    "prod": lambda dt: 1, "mean": lambda dt: np.nan, "sum": lambda dt: 0, "l1": lambda dt: 0,
                    "l2": lambda dt: 0, "sum_square": lambda dt: 0}


def _reducer(kind):
    def handler(n):
        x = n(0)
        axes = _reduce_axes(n, x)
        keep = bool(n.attr("keepdims", 1))
        if axes is None:
            return x
        if any(x.type.shape[a] == 0 for a in axes):  # an empty reduction is the identity of its kind
            shape = tuple(1 if d in axes else s for d, s in enumerate(x.type.shape)) if keep else \
                tuple(s for d, s in enumerate(x.type.shape) if d not in axes)
            return np.full(shape, _EMPTY_REDUCTION[kind](x.type.dtype), dtype=x.type.dtype.np_dtype)
        if kind == "mean":
            return C.mean(n.b, x, axes, keepdims=keep)
        pre = {"sum_square": lambda v: n.b.op("rt.mul", [v, v]), "l1": lambda v: n.b.op("rt.abs", [v]),
               "l2": lambda v: n.b.op("rt.mul", [v, v])}.get(kind)
        base = {"sum_square": "sum", "l1": "sum", "l2": "sum", "log_sum": "sum", "log_sum_exp": "sum"}.get(kind, kind)
        if kind == "log_sum_exp":
            peak = n.b.op("rt.reduce", [x], {"kind": "max", "axes": axes, "keepdims": True})
            safe = n.b.op("rt.select", [n.b.op("rt.cmp", [peak, peak], {"predicate": "eq"}), peak,
                                        C.scalar(n.b, 0, peak)])
            e = n.b.op("rt.exp", [n.b.op("rt.sub", [x, safe])])
            s = n.b.op("rt.reduce", [e], {"kind": "sum", "axes": axes, "keepdims": keep})
            shift = safe if keep else _reshape(n, safe, s.type.shape)
            return n.b.op("rt.add", [n.b.op("rt.log", [s]), shift])
        y = n.b.op("rt.reduce", [pre(x) if pre else x], {"kind": base, "axes": axes, "keepdims": keep})
        if kind == "l2":
            y = n.b.op("rt.sqrt", [y])
        if kind == "log_sum":
            y = n.b.op("rt.log", [y])
        return y

    return handler


for _op, _kind in {"ReduceMean": "mean", "ReduceSum": "sum", "ReduceMax": "max", "ReduceMin": "min",
                   "ReduceProd": "prod", "ReduceL1": "l1", "ReduceL2": "l2", "ReduceSumSquare": "sum_square",
                   "ReduceLogSum": "log_sum", "ReduceLogSumExp": "log_sum_exp"}.items():
    HANDLERS[_op] = _reducer(_kind)


@handles("ArgMax", "ArgMin")
def _argmax(n):
    x = n(0)
    axis = _axis(n, x, 0)
    last = n.attr("select_last_index", 0)
    size = x.type.shape[axis]
    if last:  # the first extremum of the reversed axis
        x = C.reverse(n.b, x, (axis,))
    keepdims = bool(n.attr("keepdims", 1))
    if n.node.op_type == "ArgMin":
        y = C.argmin(n.b, x, axis, keepdims)
    else:
        y = n.b.op("rt.argmax", [x], {"axis": axis, "keepdims": keepdims})
    return n.b.op("rt.sub", [C.scalar(n.b, size - 1, y), y]) if last else y


@handles("TopK")
def _top_k(n):
    """Always sorted (the spec allows it for sorted=0); equal values come in their order along the axis."""
    x = n(0)
    k = _dims(n.known(1, "K"))[0]  # the axis's size, where an exporter sorts a dynamic axis whole
    return list(C.sort(n.b, x, _axis(n, x, -1), descending=bool(n.attr("largest", 1)), k=k))


@handles("CumSum", "CumProd")
def _cumulative(n):
    x = n(0)
    axis = C.normalize_axis(int(np.asarray(n.known(1, "axis")).reshape(-1)[0]), x.type.rank)
    kind = "sum" if n.node.op_type == "CumSum" else "prod"
    return C.cumulative(n.b, x, axis, kind, bool(n.attr("exclusive", 0)), bool(n.attr("reverse", 0)))


@handles("Hardmax")
def _hardmax(n):
    """1 at the first maximum along the axis, 0 elsewhere."""
    def along(x, axis):
        first = n.b.op("rt.cast", [n.b.op("rt.argmax", [x], {"axis": axis, "keepdims": True})], {"dtype": "i32"})
        position = n.b.op("rt.iota", [], {"shape": x.type.shape, "axis": axis, "dtype": "i32"})
        return _cast_to(n, n.b.op("rt.cmp", [position, first], {"predicate": "eq"}), x.type.dtype)

    return _coerced_2d(n, n(0), along)


@handles("EyeLike")
def _eye_like(n):
    """Ones where column - row = k: a compare of iotas, which fuses into the consumer (nothing n x m is stored)."""
    shape = tuple(_input_shape(n))
    if len(shape) != 2:
        raise UnsupportedOpError(f"EyeLike of a rank-{len(shape)} tensor is not supported (the spec takes rank 2)")
    source = n.cv.env[n.node.input[0]]
    dtype = source.type.dtype if isinstance(source, Value) else from_numpy(source.dtype)
    if n.attr("dtype") is not None:
        dtype = _dtype(n.attr("dtype"), "EyeLike's dtype")
    rows, cols = (n.b.op("rt.iota", [], {"shape": shape, "axis": a, "dtype": "i32"}) for a in (0, 1))
    on = n.b.op("rt.cmp", [n.b.op("rt.sub", [cols, rows]), n.b.constant(np.array(n.attr("k", 0), np.int32))],
                {"predicate": "eq"})
    return _cast_to(n, on, dtype)


@handles("OneHot")
def _one_hot(n):
    """values[1] where the iota along the new axis equals the index (negative ones wrapped once, so that those
    outside [-depth, depth) match nothing), values[0] elsewhere; compared in the indices' own type, so that a
    fractional float index matches nothing, as in onnx's reference."""
    indices, values = n(0), n(2)
    depth = int(np.asarray(n.known(1, "depth")).reshape(-1)[0])
    axis = C.normalize_axis(n.attr("axis", -1), indices.type.rank + 1)
    shape = indices.type.shape[:axis] + (depth,) + indices.type.shape[axis:]
    index = n.b.op("rt.reshape", [indices], {"shape": indices.type.shape[:axis] + (1,) + indices.type.shape[axis:]})
    if indices.type.dtype.kind != "uint":
        negative = n.b.op("rt.cmp", [index, C.scalar(n.b, 0, index)], {"predicate": "lt"})
        index = n.b.op("rt.select", [negative, n.b.op("rt.add", [index, C.scalar(n.b, depth, index)]), index])
    position = _cast_to(n, n.b.op("rt.iota", [], {"shape": shape, "axis": axis, "dtype": "i32"}), index.type.dtype)
    off, on = (n.b.op("rt.reshape", [C.slice_axis(n.b, values, 0, i, i + 1)], {"shape": ()}) for i in (0, 1))
    return n.b.op("rt.select", [n.b.op("rt.cmp", [position, index], {"predicate": "eq"}), on, off])


@handles("LpNormalization")
def _lp_normalization(n):
    """x / its L1 or L2 norm along the axis, 0 where the norm is 0 (x is 0 there: divided by 1); a half float's
    norm is taken in f32."""
    x, p = n(0), n.attr("p", 2)
    if p not in (1, 2):
        raise UnsupportedOpError(f"LpNormalization with p = {p} is not supported", hint="the spec takes p 1 or 2")
    wide = C.widen(n.b, x)
    norm = C.vector_norm(n.b, wide, (_axis(n, x, -1),), p, keepdims=True)
    zero = n.b.op("rt.cmp", [norm, C.scalar(n.b, 0, norm)], {"predicate": "eq"})
    norm = n.b.op("rt.select", [zero, C.scalar(n.b, 1, norm), norm])
    return C.narrow_to(n.b, n.b.op("rt.div", [wide, norm]), x)


@handles("GlobalLpPool")
def _global_lp_pool(n):
    x = n(0)
    wide = C.widen(n.b, x)
    return C.narrow_to(n.b, C.vector_norm(n.b, wide, range(2, x.type.rank), n.attr("p", 2), keepdims=True), x)


@handles("MeanVarianceNormalization")
def _mean_variance_normalization(n):
    """(x - mean) / (std + 1e-9) over `axes`, as ONNX's function body (its variance E[x^2] - E[x]^2 is taken here
    from the centred values, which is the same number without the cancellation); a half float's statistics in f32."""
    x = n(0)
    axes = tuple(sorted({C.normalize_axis(a, x.type.rank) for a in n.attr("axes", [0, 2, 3])}))
    wide = C.widen(n.b, x)
    centered = n.b.op("rt.sub", [wide, C.mean(n.b, wide, axes, keepdims=True)])
    var = C.mean(n.b, n.b.op("rt.mul", [centered, centered]), axes, keepdims=True)
    std = n.b.op("rt.add", [n.b.op("rt.sqrt", [var]), C.scalar(n.b, 1e-9, var)])
    return C.narrow_to(n.b, n.b.op("rt.div", [centered, std]), x)


@handles("LRN")
def _lrn(n):
    """x / (bias + alpha / size * the sum of x^2 over the channels c - floor((size - 1) / 2) ... c + ceil((size -
    1) / 2))^beta: the squares padded with zeros along the channels and `size` shifted slices added; a half
    float computed in f32."""
    x, size = n(0), int(n.attr("size"))
    channels = x.type.shape[1]
    if isinstance(channels, Sym):
        raise UnsupportedOpError(f"LRN of {x.type}, whose channels are known only at run time",
                                 hint="export with a static channel count")
    wide = C.widen(n.b, x)
    low = (size - 1) // 2
    pad = {"low": tuple(low if d == 1 else 0 for d in range(x.type.rank)),
           "high": tuple(size - 1 - low if d == 1 else 0 for d in range(x.type.rank)), "value": 0}
    squares = n.b.op("rt.pad", [n.b.op("rt.mul", [wide, wide])], pad)
    total = None
    for i in range(size):
        window = C.slice_axis(n.b, squares, 1, i, i + channels)
        total = window if total is None else n.b.op("rt.add", [total, window])
    scale = n.b.op("rt.add", [n.b.op("rt.mul", [total, C.scalar(n.b, n.attr("alpha", 1e-4) / size, total)]),
                              C.scalar(n.b, n.attr("bias", 1.0), total)])
    y = n.b.op("rt.div", [wide, n.b.op("rt.pow", [scale, C.scalar(n.b, n.attr("beta", 0.75), scale)])])
    return C.narrow_to(n.b, y, x)


@handles("ReverseSequence")
def _reverse_sequence(n):
    """Each batch's first sequence_lens[b] steps along the time axis reversed, the rest as they are: x read along
    the time axis at len - 1 - t where t < len, else t (one gather; the lengths may be known only at run time)."""
    x, lengths = n(0), n(1)
    rank = x.type.rank
    batch_axis, time_axis = (C.normalize_axis(n.attr(k, d), rank) for k, d in (("batch_axis", 1), ("time_axis", 0)))
    dtype = C.index_type(math.prod(x.type.shape))
    along = [1] * rank
    along[batch_axis] = x.type.shape[batch_axis]
    length = n.b.op("rt.reshape", [_cast_to(n, lengths, DTYPES[dtype])], {"shape": tuple(along)})
    along = [1] * rank
    along[time_axis] = x.type.shape[time_axis]
    t = n.b.op("rt.iota", [], {"shape": tuple(along), "axis": time_axis, "dtype": dtype})
    mirrored = n.b.op("rt.sub", [n.b.op("rt.sub", [length, C.scalar(n.b, 1, length)]), t])
    inside = n.b.op("rt.cmp", [t, length], {"predicate": "lt"})
    source = n.b.op("rt.broadcast", [n.b.op("rt.select", [inside, mirrored, t])], {"shape": x.type.shape})
    return C.take_along_axis(n.b, x, source, time_axis)


@handles("GatherElements")
def _gather_elements(n):
    x = n(0)
    return C.take_along_axis(n.b, x, n(1), _axis(n, x, 0), negative=True)


@handles("GatherND")
def _gather_nd(n):
    return C.gather_nd(n.b, n(0), n(1), int(n.attr("batch_dims", 0)))


# -- arithmetic on sizes known only at run time (the Shape -> ... -> Reshape chains of exporters) ----------


def _known_ints(n, i):
    v = n.cv.env[n.node.input[i]]
    return v if _is_symbolic(v) else np.asarray(v)


def _sym_arith(fn):
    def fold(n):
        a, b = (np.asarray(_known_ints(n, i), dtype=object) for i in (0, 1))
        try:
            return np.asarray(fn(a, b), dtype=object)
        except TypeError as e:  # e.g. a division by a symbolic size
            raise UnsupportedOpError(
                f"cannot compute {n.node.op_type} of sizes {_sizes(a)} and {_sizes(b)}: {e}") from None
    return fold


def _sym_min(n):
    """Min of sizes (a detector's k = min(count, 100)): `dim_min`'s, elementwise over the inputs."""
    from ..ir.symbolic import dim_min

    arrays = [np.asarray(_known_ints(n, i), dtype=object) for i in range(len(n.node.input))]
    out = arrays[0]
    for a in arrays[1:]:
        out = np.frompyfunc(dim_min, 2, 1)(out, a)
    return np.asarray(out, dtype=object)


def _sym_gather(n):
    data, idx = np.asarray(_known_ints(n, 0), dtype=object), np.asarray(_known_ints(n, 1)).astype(np.int64)
    axis = n.attr("axis", 0)
    return np.take(data, np.where(idx < 0, idx + data.shape[axis], idx), axis=axis)


def _sym_unsqueeze(n):
    data = np.asarray(_known_ints(n, 0), dtype=object)
    out = data
    for a in sorted(C.normalize_axis(a, data.ndim + len(_axes_of(n))) for a in _axes_of(n)):
        out = np.expand_dims(out, a)
    return out


def _sym_squeeze(n):
    data = np.asarray(_known_ints(n, 0), dtype=object)
    axes = _axes_of(n)
    return np.squeeze(data, axis=tuple(axes)) if axes else np.squeeze(data)


def _sym_concat(n):
    parts = [np.asarray(_known_ints(n, i), dtype=object) for i in range(len(n.node.input)) if n.has(i)]
    return np.concatenate(parts, axis=n.attr("axis", 0))


def _sym_slice(n):
    data = np.asarray(_known_ints(n, 0), dtype=object)
    starts, ends = (np.asarray(n.known(i)).astype(np.int64) for i in (1, 2))
    axes = [int(a) for a in n.known_or(3, range(len(starts)))]
    steps = [int(v) for v in n.known_or(4, [1] * len(starts))]
    index = [slice(None)] * data.ndim
    for a, s, e, k in zip(axes, starts, ends, steps, strict=False):
        index[a] = slice(int(s), int(min(e, 2**62)), k)
    return data[tuple(index)]


def _sym_reduce_prod(n):
    """The number of elements of a shape (exporters flatten with it): a product of sizes, symbolic or not."""
    data = np.asarray(_known_ints(n, 0), dtype=object)
    axes = n.known_or(1, n.attr("axes", None))  # an input since opset 18, an attribute before
    axes = tuple(range(data.ndim)) if axes is None or len(axes) == 0 else tuple(int(a) for a in axes)
    return np.multiply.reduce(data, axis=axes, keepdims=bool(n.attr("keepdims", 1)))  # Python's *, on Syms too


def _sym_same(n):
    return np.asarray(_known_ints(n, 0), dtype=object)


def _sym_reshape(n):
    return np.asarray(_known_ints(n, 0), dtype=object).reshape([int(d) for d in n.known(1)])


def _sym_cast(n):
    if _dtype(n.attr("to"), "Cast target").is_float:
        raise UnsupportedOpError("a size known only at run time cast to a float is not supported")
    return _sym_same(n)


SYMBOLIC_FOLDS = {
    "Add": _sym_arith(lambda a, b: a + b), "Sub": _sym_arith(lambda a, b: a - b),
    "Mul": _sym_arith(lambda a, b: a * b), "Div": _sym_arith(lambda a, b: a // b),  # sizes: trunc == floor
    "Gather": _sym_gather, "Unsqueeze": _sym_unsqueeze, "Squeeze": _sym_squeeze, "Concat": _sym_concat,
    "Slice": _sym_slice, "Identity": _sym_same, "Cast": _sym_cast, "Reshape": _sym_reshape,
    "ReduceProd": _sym_reduce_prod, "Min": _sym_min,
}


# the op families kept in modules of their own register their handlers here
from . import (  # noqa: E402,F401
    onnx_control,
    onnx_data_dependent,
    onnx_image,
    onnx_legacy,
    onnx_ml,
    onnx_quant,
    onnx_recurrent,
    onnx_signal,
)

SUPPORTED_OPS = tuple(sorted({*HANDLERS, *OLD_VERSIONS}))  # with the old ops: Upsample, Scatter, ...
