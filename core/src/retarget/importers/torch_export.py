"""torch.export frontend: an `ExportedProgram` (or an `nn.Module` and example inputs) to graph IR.

torch.export's training IR imports as it stands when every node of it can
(`torch_training_ir.plan`: the zoo, PT2E models, most inference modules); any other program is
decomposed to core ATen (`run_decompositions()`) first, which costs a retrace of the whole
program (seconds for a CNN). Parameters, buffers and lifted constants become `rt.constant`;
user inputs become function arguments, named as in `forward`. Shapes come from each node's
`meta["val"]`, so views and expands never guess.

Dynamic dimensions (`torch.export.Dim`) are symbolic dimensions (`ir.symbolic`): each of torch's
symbols becomes one of ours, named after its `Dim` when retarget exports the module itself
(`dynamic_shapes=`), else `<input>_dim<axis>` after where it first appears, with the range
torch recorded (`range_constraints`); torch's size expressions (`2*s0`, `(s0 - 1)//2 + 1`)
become ours.
"""

from __future__ import annotations

import functools
import math
import operator
import os
import re
from typing import Any

import numpy as np

from ..errors import InputError, RetargetError, UnsupportedOpError
from ..ir.core import Builder, Function, Location, Module, Value
from ..ir.dtypes import DTYPES, DType
from ..ir.ops import broadcast_shapes
from ..ir.symbolic import Sym, SymbolRange, bounds, ceil_div, sanitize
from ..registry import registrar
from . import compose as C


def _is_torch_object(source) -> bool:
    """True for instances of torch classes (or user subclasses of them), without importing torch."""
    return any((cls.__module__ or "").split(".")[0] == "torch" for cls in type(source).__mro__)


class TorchImporter:
    """Reads a `torch.nn.Module` (with `example_inputs`), an `ExportedProgram`, or a saved `.pt2`."""

    name = "torch"
    suffixes = (".pt2",)

    def accepts(self, source: Any) -> bool:
        if isinstance(source, (str, os.PathLike)):
            return str(source).endswith(self.suffixes)
        return _is_torch_object(source)

    def load(self, source: Any, example_inputs=None, function_name: str = "main", dynamic_shapes=None,
             decompose: bool = False, **options) -> Module:
        """`dynamic_shapes` goes to `torch.export.export` with a module (e.g. `({0: Dim("batch")},)`);
        its `Dim`s name the symbolic dimensions. `decompose=True` always decomposes the program to
        core ATen first, as the importer did before it read the training IR."""
        program = _export(source, example_inputs, dynamic_shapes)
        if not decompose:
            plan = torch_training_ir.plan(program)
            if plan.reason is None:
                try:
                    return _Converter(program, function_name, _dim_names(program, dynamic_shapes),
                                      plan.writes).run()
                except RetargetError:
                    pass  # an argument that no handler covers as it stands: core ATen imports it, or says why not
        program = _decompose(program)
        return _Converter(program, function_name, _dim_names(program, dynamic_shapes)).run()


# -- export ----------------------------------------------------------------------------------


def _export(source, example_inputs, dynamic_shapes=None):
    import torch

    if isinstance(source, (str, os.PathLike)):
        if not os.path.exists(source):
            raise InputError(f"no such file: {source}")
        try:
            program = torch.export.load(str(source))
        except Exception as e:
            raise InputError(f"{source} is not a torch.export archive: {_first_line(e)}",
                             hint="save it with torch.export.save") from e
    elif isinstance(source, torch.export.ExportedProgram):
        program = source
    elif isinstance(source, torch.nn.Module):
        if example_inputs is None:
            raise InputError("a torch.nn.Module needs example_inputs to be exported",
                             hint="pass example_inputs=(tensor, ...), or export it yourself with torch.export.export")
        if not isinstance(example_inputs, (tuple, list)):
            example_inputs = (example_inputs,)
        try:
            program = torch.export.export(source.eval(), tuple(example_inputs), dynamic_shapes=dynamic_shapes)
        except Exception as e:
            raise RetargetError(f"torch.export could not trace {type(source).__name__}: {_first_line(e)}",
                                hint="it must export with torch.export.export(model, example_inputs)") from e
    else:
        raise InputError(f"the torch importer cannot read a {type(source).__name__}",
                         hint="pass a torch.nn.Module, a torch.export.ExportedProgram or a .pt2 path")
    return program


def _decompose(program):
    try:
        return program.run_decompositions()
    except Exception as e:
        raise RetargetError(f"decomposing the exported program to core ATen failed: {_first_line(e)}") from e


def _first_line(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


def _dim_names(program, dynamic_shapes) -> dict:
    """torch's symbol -> the name of the `Dim` the user gave it, from `dynamic_shapes` (per input:
    {axis: Dim} or [Dim or None, ...]) and where each input's symbols sit."""
    if dynamic_shapes is None:
        return {}
    users = [n for n in program.graph.nodes if n.op == "placeholder"
             and program.graph_signature.input_specs[[s.arg.name for s in program.graph_signature.input_specs]
                                                     .index(n.name)].kind.name == "USER_INPUT"]
    specs = list(dynamic_shapes.values()) if isinstance(dynamic_shapes, dict) else list(dynamic_shapes)
    names = {}
    for node, spec in zip(users, specs):
        axes = spec.items() if isinstance(spec, dict) else enumerate(spec or ())
        val = node.meta.get("val")
        for axis, dim in axes:
            name = getattr(dim, "__name__", None)
            if name and val is not None and axis < len(val.shape):
                expr = getattr(getattr(val.shape[axis], "node", None), "expr", None)
                if expr is not None and getattr(expr, "is_Symbol", False):
                    names.setdefault(expr, name)
    return names


# -- conversion ------------------------------------------------------------------------------

_TORCH_DTYPES = {
    "float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16",
    "int64": "i64", "int32": "i32", "int16": "i16", "int8": "i8", "uint8": "ui8", "bool": "i1",
}


def _dtype(torch_dtype) -> DType:
    name = str(torch_dtype).removeprefix("torch.")
    if name not in _TORCH_DTYPES:
        raise UnsupportedOpError(f"torch dtype {torch_dtype} has no retarget element type",
                                 hint=f"supported: {', '.join(_TORCH_DTYPES)}")
    return DTYPES[_TORCH_DTYPES[name]]


def to_numpy(t) -> np.ndarray:
    import torch

    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        import ml_dtypes

        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


_TRACE_FILE = re.compile(r'File "([^"]+)", line (\d+)')


def node_location(node) -> Location | None:
    """The user's source line of an FX node: the last frame of `meta["stack_trace"]`."""
    trace = node.meta.get("stack_trace") or ""
    frames = _TRACE_FILE.findall(trace)
    if not frames:
        return None
    file, line = frames[-1]
    return Location(file, int(line), 0)


class _Multi(tuple):
    """The results of a multi-output ATen op; None marks a result we do not compute."""


class _Converter:
    def __init__(self, program, function_name: str, dim_names: dict | None = None, writes: dict | None = None):
        self.program = program
        self.writes = writes or {}  # in-place node -> (its functional op's handler, the nodes that are its tensor)
        self.fn = Function(function_name, [])
        self.b = Builder(self.fn)
        self.env: dict = {}
        self.dim_names = dim_names or {}  # torch's symbol -> the user's Dim name
        self.symbols: dict = {}  # torch's symbol -> ours
        self.pool_windows: dict[Value, C.PoolWindows] = {}  # a max pool's indices -> its windows (`_max_unpool`)

    def run(self) -> Module:
        sig = self.program.graph_signature
        specs = {s.arg.name: s for s in sig.input_specs}
        names = []
        for node in self.program.graph.nodes:
            self.b.loc = node_location(node)
            if node.op == "placeholder":
                self.env[node] = self._placeholder(node, specs.get(node.name), names)
            elif node.op == "call_function":
                self.env[node] = self._call(node)
            elif node.op == "output":
                self._output(node, sig)
            else:
                raise UnsupportedOpError(f"FX node kind '{node.op}' ({node.name}) is not supported")
        self.fn.arg_names = names
        return Module({self.fn.name: self.fn})

    def _placeholder(self, node, spec, names):
        kind = spec.kind.name if spec is not None else "USER_INPUT"
        if kind in ("PARAMETER", "BUFFER"):
            tensor = self.program.state_dict.get(spec.target)  # a buffer that is not persistent is a constant
            return self.b.constant(to_numpy(self.program.constants[spec.target] if tensor is None else tensor))
        if kind == "CONSTANT_TENSOR":
            return self.b.constant(to_numpy(self.program.constants[spec.target]))
        if kind != "USER_INPUT":
            raise UnsupportedOpError(f"input '{node.name}' of kind {kind} is not supported")
        import torch

        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            raise UnsupportedOpError(f"input '{node.name}' is a {type(val).__name__}, not a tensor",
                                     hint="only tensor inputs are supported; bind other arguments before export")
        from ..ir.core import TensorType

        for axis, d in enumerate(val.shape):  # name the symbols where they first appear
            expr = getattr(getattr(d, "node", None), "expr", None)
            if expr is not None and getattr(expr, "is_Symbol", False) and expr not in self.symbols:
                self.symbols[expr] = self.b.symbol(sanitize(self.dim_names.get(expr, f"{node.name}_dim{axis}")),
                                                   _symbol_range(self.program, expr))
        shape = tuple(self.dim(d, node) for d in val.shape)
        arg = Value(TensorType(shape, _dtype(val.dtype)), None, len(self.fn.args), node.name)
        self.fn.args.append(arg)
        names.append(node.name)
        return arg

    def _output(self, node, sig):
        outs = node.args[0]
        outs = outs if isinstance(outs, (tuple, list)) else (outs,)
        for spec, out in zip(sig.output_specs, outs, strict=False):
            if spec.kind.name != "USER_OUTPUT":
                continue  # buffer mutations: nothing to do at inference
            value = self.env.get(out) if out is not None else None
            if not isinstance(value, Value):
                raise UnsupportedOpError(f"output '{getattr(out, 'name', out)}' is not a tensor")
            self.fn.returns.append(value)

    def _call(self, node):
        if node.target in _SIZE_ARITHMETIC:  # arithmetic on sizes (SymInts): done here, on our dimensions
            args = [self._arg(a) for a in node.args]
            if not all(isinstance(a, (int, Sym, Value)) for a in args):
                raise UnsupportedOpError(f"'{node.target.__name__}' (node '{node.name}') of {args} is not supported",
                                         location=_loc_str(node))
            if not any(isinstance(a, Value) for a in args):
                try:
                    return node.target(*args)
                except TypeError:  # a division by a symbol, which no dimension expresses: computed at run time
                    pass
            # a size as data (a rank-0 i64 tensor): it can feed arithmetic on tensors, not a shape
            x, y = (self.tensor(a, DTYPES["i64"]) for a in args)
            return _SIZE_ARITHMETIC[node.target](self.b, x, y)
        if node.target in _SIZE_COMPARISONS:  # torch's runtime checks of a data-dependent size (u0 >= 0)
            if all(str(user.target) == "aten._assert_scalar.default" for user in node.users):
                return None  # the runtime checks each host op's size against the model's shapes itself
            raise UnsupportedOpError(f"a comparison of sizes (node '{node.name}') used as data is not supported",
                                     location=_loc_str(node))
        if node.target is operator.getitem:
            seq, i = self.env[node.args[0]], node.args[1]
            item = seq[i]
            if item is None:
                source = node.args[0]
                raise UnsupportedOpError(f"result {i} of '{source.target}' ({source.name}) is not supported",
                                         location=_loc_str(node), hint="only the first result is computed")
            return item
        target = str(node.target)
        write = self.writes.get(node)
        key = write[0] if write else handler_key(target)
        handler = HANDLERS.get(key)
        if handler is None:
            raise UnsupportedOpError(
                f"aten op '{target}' (node '{node.name}') is not supported by the torch importer",
                location=_loc_str(node), hint=f"supported aten ops: {', '.join(sorted(HANDLERS))}")
        args = [self._arg(a) for a in node.args]
        kwargs = {k: self._arg(v) for k, v in node.kwargs.items()}
        try:
            result = handler(self, node, *args, **kwargs)
            for alias in write[1] if write else ():  # later reads of the tensor written in place read the result
                self.env[alias] = result
            return result
        except RetargetError as e:
            if e.location is None:
                e.location = _loc_str(node)
                e.args = (e.oneline(),)
            raise
        except Exception as e:  # a shape or argument this handler does not cover
            raise UnsupportedOpError(
                f"aten op '{target}' (node '{node.name}') with these arguments is not supported: {_first_line(e)}",
                location=_loc_str(node)) from e

    def _arg(self, a):
        import torch.fx

        if isinstance(a, torch.fx.Node):
            return self.env[a]
        if isinstance(a, (list, tuple)):
            return type(a)(self._arg(x) for x in a)
        return a

    # helpers used by the handlers

    def out_type(self, node, i=None):
        val = node.meta["val"]
        if i is not None:
            val = val[i]
        return tuple(self.dim(d, node) for d in val.shape), _dtype(val.dtype)

    def dim(self, d, node):
        """A torch size (an int, or a SymInt) as our dimension."""
        if isinstance(d, int):
            return d
        expr = getattr(getattr(d, "node", None), "expr", None)
        if expr is None:
            return _static(d, node)
        try:
            return _from_sympy(expr, self.symbols)
        except (KeyError, TypeError, ValueError) as e:
            raise UnsupportedOpError(f"node '{node.name}' has a size {d} that retarget cannot express ({e})",
                                     location=_loc_str(node),
                                     hint="sizes may be sums, products and floor divisions of input sizes") from None

    def tensor(self, x, dtype: DType) -> Value:
        """`x` (a Value or a Python number) as a tensor of `dtype`."""
        if isinstance(x, Value):
            return x if x.type.dtype == dtype else self.b.op("rt.cast", [x], {"dtype": dtype.name})
        if isinstance(x, Sym):  # a size used as data
            return C.size_value(self.b, x, dtype.name)
        if isinstance(x, int) and not isinstance(x, bool) and dtype.kind in ("int", "uint"):
            return self.b.constant(np.array(x, np.int64).astype(dtype.np_dtype))  # wraps, as torch's x // -2 on uint8
        return self.b.constant(np.array(x, dtype=dtype.np_dtype))

    def reshape(self, x: Value, shape) -> Value:
        shape = tuple(shape)
        return x if x.type.shape == shape else self.b.op("rt.reshape", [x], {"shape": shape})


def _size_arithmetic():
    """Python's operators on sizes, each with its spelling on rank-0 tensors (where a size is known only as data)."""
    def on(name):
        return lambda b, x, y: b.op(name, [x, y])

    return {operator.add: on("rt.add"), operator.sub: on("rt.sub"), operator.mul: on("rt.mul"),
            operator.floordiv: C.floor_div, operator.mod: C.floor_mod}


_SIZE_ARITHMETIC = _size_arithmetic()
_SIZE_COMPARISONS = (operator.ge, operator.gt, operator.le, operator.lt, operator.eq, operator.ne)


def _static(d, node) -> int:
    try:
        return int(d)
    except Exception:
        raise UnsupportedOpError(f"node '{node.name}' has a dynamic dimension ({d})",
                                 location=_loc_str(node), hint="export with static shapes") from None


def _symbol_range(program, expr) -> SymbolRange:
    """The range torch.export recorded for a symbol (`range_constraints`), as ours."""
    vr = program.range_constraints.get(expr)
    if vr is None:
        return SymbolRange()
    # Bounds are sympy Integers, or torch's int_oo for none (which claims is_finite; only is_Integer tells).
    lo = int(vr.lower) if getattr(vr.lower, "is_Integer", False) else 0
    hi = int(vr.upper) if getattr(vr.upper, "is_Integer", False) else None
    return SymbolRange(max(lo, 1), hi)  # a symbolic size is at least 1 (torch allows 0)


def _from_sympy(expr, symbols: dict):
    """A sympy size expression of torch's (sums, products, integer powers, floor divisions, mods)."""
    if expr.is_Integer:
        return int(expr)
    if expr.is_Symbol:
        return symbols[expr]
    args = [_from_sympy(a, symbols) for a in expr.args]
    kind = type(expr).__name__
    if expr.is_Add:
        return sum(args[1:], args[0])
    if expr.is_Mul:
        out = args[0]
        for a in args[1:]:
            out = out * a
        return out
    if expr.is_Pow and isinstance(args[1], int) and args[1] >= 1:
        out = args[0]
        for _ in range(args[1] - 1):
            out = out * args[0]
        return out
    if kind in ("FloorDiv", "IntTrueDiv") and isinstance(args[1], int):
        return args[0] // args[1]
    if kind == "CeilDiv" and isinstance(args[1], int):
        return ceil_div(args[0], args[1])
    if kind in ("Mod", "PythonMod") and isinstance(args[1], int):
        return args[0] % args[1]
    raise TypeError(f"{kind} is not supported")


def handler_key(target: str) -> str:
    """The HANDLERS key of an op: an aten op's name without its overload, else the whole name."""
    parts = target.split(".")
    return parts[1] if len(parts) >= 2 and parts[0] == "aten" else target


def _loc_str(node) -> str | None:
    loc = node_location(node)
    return f"{loc.file}:{loc.line}" if loc else None


# -- handlers: (converter, node, *args, **kwargs) -> Value | _Multi ----------------------------

HANDLERS: dict = {}


handles = registrar(HANDLERS)


def _elementwise(rt_name):
    def handler(cv, node, *args, **kwargs):
        _, dtype = cv.out_type(node)
        return cv.b.op(rt_name, [cv.tensor(a, dtype) for a in args[:2 if rt_name not in _UNARY_RT else 1]])

    return handler


_UNARY_RT = set()
for _aten, _rt in {
    "neg": "neg", "abs": "abs", "exp": "exp", "log": "log", "sqrt": "sqrt", "rsqrt": "rsqrt", "tanh": "tanh",
    "sigmoid": "sigmoid", "erf": "erf", "floor": "floor", "ceil": "ceil", "sin": "sin", "cos": "cos", "tan": "tan",
    "atan": "atan", "reciprocal": "reciprocal", "sign": "sign", "log1p": "log1p", "expm1": "expm1", "round": "round",
    "logical_not": "not", "bitwise_not": "not",
}.items():
    _UNARY_RT.add(f"rt.{_rt}")
    HANDLERS[_aten] = _elementwise(f"rt.{_rt}")
for _aten, _rt in {"mul": "mul", "maximum": "max", "minimum": "min", "pow": "pow", "fmod": "rem",
                   "atan2": "atan2", "bitwise_and": "and", "bitwise_or": "or",
                   "bitwise_xor": "xor", "logical_and": "and", "logical_or": "or", "logical_xor": "xor"}.items():
    HANDLERS[_aten] = _elementwise(f"rt.{_rt}")


def _float_composite(compose):
    """A composite (`compose.asin`, `compose.lgamma`, ...) of its operands in the result's float type, as torch
    promotes integers and bools; a half float computed in f32 and rounded once, as torch's kernels compute it."""
    def handler(cv, node, *args):
        _, dtype = cv.out_type(node)
        return cv.tensor(compose(cv.b, *(C.widen(cv.b, cv.tensor(a, dtype)) for a in args)), dtype)

    return handler


for _aten, _compose in {
    "asin": C.asin, "acos": C.acos, "asinh": C.asinh, "acosh": C.acosh, "atanh": C.atanh, "sinh": C.sinh,
    "cosh": C.cosh, "erfinv": C.erfinv, "lgamma": C.lgamma, "digamma": C.digamma, "hypot": C.hypot,
    "log2": lambda b, x: C.log_base(b, x, 2), "log10": lambda b, x: C.log_base(b, x, 10),
}.items():
    HANDLERS[_aten] = _float_composite(_compose)


@handles("trunc", "fix")
def _trunc(cv, node, x):
    return C.trunc(cv.b, x)


@handles("frac")
def _frac(cv, node, x):
    """x - trunc(x), as torch's kernel: NaN for +-inf."""
    return cv.b.op("rt.sub", [x, C.trunc(cv.b, x)])


@handles("copysign")
def _copysign(cv, node, x, other):
    """copysign.Tensor (`compose.copysign`) and .Scalar, whose sign is known here."""
    _, dtype = cv.out_type(node)
    x = cv.tensor(x, dtype)
    if isinstance(other, Value):
        return C.copysign(cv.b, x, cv.tensor(other, dtype))
    magnitude = cv.b.op("rt.abs", [x])
    return cv.b.op("rt.neg", [magnitude]) if math.copysign(1.0, other) < 0 else magnitude


@handles("add", "sub", "rsub")
def _add_sub(cv, node, a, b, alpha=1):
    _, dtype = cv.out_type(node)
    a, b = cv.tensor(a, dtype), cv.tensor(b, dtype)
    if str(node.target).startswith("aten.rsub"):
        a, b = b, a
    if alpha != 1:
        b = cv.b.op("rt.mul", [b, cv.tensor(alpha, dtype)])
    return cv.b.op("rt.sub" if "sub" in str(node.target) else "rt.add", [a, b])


@handles("__rshift__", "bitwise_right_shift", "__lshift__", "bitwise_left_shift")
def _shift(cv, node, a, b):
    _, dtype = cv.out_type(node)
    if not isinstance(b, Value) and not isinstance(a, Value):
        raise UnsupportedOpError(f"'{node.target}' of two numbers is not supported", location=_loc_str(node))
    return C.shift(cv.b, cv.tensor(a, dtype), b, left="lshift" in str(node.target) or "left" in str(node.target))


@handles("remainder")
def _remainder(cv, node, a, b):
    _, dtype = cv.out_type(node)
    return C.floor_mod(cv.b, cv.tensor(a, dtype), cv.tensor(b, dtype))


@handles("div")
def _div(cv, node, a, b, rounding_mode=None):
    _, dtype = cv.out_type(node)
    a, b = cv.tensor(a, dtype), cv.tensor(b, dtype)
    if rounding_mode == "floor" and not dtype.is_float:
        return C.floor_div(cv.b, a, b)
    q = cv.b.op("rt.div", [a, b])
    if rounding_mode is None or not dtype.is_float:
        return q
    if rounding_mode == "floor":
        return cv.b.op("rt.floor", [q])
    return cv.b.op("rt.mul", [cv.b.op("rt.sign", [q]), cv.b.op("rt.floor", [cv.b.op("rt.abs", [q])])])


_CMP = {"eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge"}


def _cmp_handler(pred):
    def handler(cv, node, a, b):
        dtype = _compared_as(node)
        return cv.b.op("rt.cmp", [cv.tensor(a, dtype), cv.tensor(b, dtype)], {"predicate": pred})

    return handler


def _compared_as(node) -> DType:
    """The type torch compares a comparison's operands in: its own promotion (int8 against int64 is int64, an
    integer tensor against a float number float32, a float16 tensor against an int64 one float16)."""
    import torch

    a, b = (x.meta["val"] if isinstance(x, torch.fx.Node) else x for x in node.args[:2])
    return _dtype(torch.result_type(a, b))


for _name, _pred in _CMP.items():
    HANDLERS[_name] = _cmp_handler(_pred)


@handles("isnan")
def _isnan(cv, node, x):
    return cv.b.op("rt.cmp", [x, x], {"predicate": "ne"})


@handles("isinf")
def _isinf(cv, node, x):
    return cv.b.op("rt.cmp", [cv.b.op("rt.abs", [x]), cv.tensor(float("inf"), x.type.dtype)], {"predicate": "eq"})


@handles("where")
def _where(cv, node, cond, a, b):
    _, dtype = cv.out_type(node)
    return cv.b.op("rt.select", [cv.tensor(cond, DTYPES["i1"]), cv.tensor(a, dtype), cv.tensor(b, dtype)])


@handles("clamp", "clip")
def _clamp(cv, node, x, lo=None, hi=None):
    _, dtype = cv.out_type(node)
    x = cv.tensor(x, dtype)
    if lo is not None:
        x = cv.b.op("rt.max", [x, cv.tensor(lo, dtype)])
    if hi is not None:
        x = cv.b.op("rt.min", [x, cv.tensor(hi, dtype)])
    return x


@handles("clamp_min")
def _clamp_min(cv, node, x, lo):
    return _clamp(cv, node, x, lo)


@handles("clamp_max")
def _clamp_max(cv, node, x, hi):
    return _clamp(cv, node, x, None, hi)


@handles("relu")
def _relu(cv, node, x):
    return C.relu(cv.b, x)


@handles("hardtanh")
def _hardtanh(cv, node, x, lo=-1.0, hi=1.0):
    return C.clamp(cv.b, x, lo, hi)


@handles("gelu")
def _gelu(cv, node, x, approximate="none"):
    return C.gelu(cv.b, x, approximate)


@handles("silu")
def _silu(cv, node, x):
    return C.swish(cv.b, x)


@handles("rms_norm")
def _rms_norm(cv, node, x, normalized_shape, weight=None, eps=None):
    """torch's own: without eps, the input type's machine epsilon."""
    if eps is None:
        eps = float(np.finfo(x.type.dtype.np_dtype).eps)
    axes = tuple(range(x.type.rank - len(normalized_shape), x.type.rank))
    return C.rms_norm(cv.b, x, axes, weight if isinstance(weight, Value) else None, eps)


@handles("leaky_relu")
def _leaky_relu(cv, node, x, slope=0.01):
    return C.leaky_relu(cv.b, x, slope)


@handles("hardsigmoid")
def _hardsigmoid(cv, node, x):
    return C.hard_sigmoid(cv.b, x, 1 / 6, 0.5)


@handles("hardswish")
def _hardswish(cv, node, x):
    return cv.b.op("rt.mul", [x, C.hard_sigmoid(cv.b, x, 1 / 6, 0.5)])


@handles("elu")
def _elu(cv, node, x, alpha=1.0, scale=1.0, input_scale=1.0):
    if scale != 1.0 or input_scale != 1.0:
        raise UnsupportedOpError("elu with scale or input_scale is not supported")
    return C.elu(cv.b, x, alpha)


@handles("_softmax", "softmax")
def _softmax(cv, node, x, dim, *_):
    return C.softmax(cv.b, cv.tensor(x, cv.out_type(node)[1]), dim)  # softmax.int's dtype: cast first


@handles("_log_softmax", "log_softmax")
def _log_softmax(cv, node, x, dim, *_):
    return C.log_softmax(cv.b, cv.tensor(x, cv.out_type(node)[1]), dim)


@handles("native_layer_norm")
def _layer_norm(cv, node, x, normalized_shape, weight, bias, eps):
    axes = tuple(range(x.type.rank - len(normalized_shape), x.type.rank))
    return _Multi((C.layer_norm(cv.b, x, axes, weight, bias, eps), None, None))


@handles("_native_batch_norm_legit_no_training")
def _batch_norm(cv, node, x, weight, bias, mean, var, momentum, eps):
    return _Multi((inference_batch_norm(cv, x, weight, bias, mean, var, eps), None, None))


@handles("_native_batch_norm_legit")
def _batch_stats_norm(cv, node, x, weight, bias, *args):
    """`.no_stats`: normalized by the batch's own statistics; F.instance_norm exports to it, over the input
    viewed as one sample of N * C channels."""
    if not str(node.target).endswith(".no_stats"):
        raise UnsupportedOpError(f"'{node.target}' is not supported (of its overloads only .no_stats is)",
                                 hint="a batch norm in training mode: export the model in eval mode")
    training, momentum, eps = args
    return _Multi((C.batch_stats_norm(cv.b, x, weight, bias, eps), None, None))


@handles("native_group_norm")
def _native_group_norm(cv, node, x, weight, bias, n, c, positions, groups, eps):
    return _Multi((C.group_norm(cv.b, x, groups, weight, bias, eps), None, None))


def inference_batch_norm(cv, x, weight, bias, mean, var, eps):
    c = x.type.shape[1]
    dtype = x.type.dtype
    weight = weight if weight is not None else cv.b.constant(np.ones(c, dtype.np_dtype))
    bias = bias if bias is not None else cv.b.constant(np.zeros(c, dtype.np_dtype))
    return C.batch_norm(cv.b, x, weight, bias, mean, var, eps)


@handles("convolution")
def _convolution(cv, node, x, w, bias, stride, padding, dilation, transposed, output_padding, groups):
    rank = x.type.rank
    if rank not in (3, 4, 5):
        raise UnsupportedOpError(f"convolution of rank {rank} is not supported (1-D, 2-D and 3-D: rank 3 to 5, are)")
    if rank == 3:  # 1-D: a 2-D conv over H=1
        x = cv.reshape(x, x.type.shape[:2] + (1,) + x.type.shape[2:])
        w = cv.reshape(w, w.type.shape[:2] + (1,) + w.type.shape[2:])
        stride, padding, dilation = (1, *stride), (0, *padding), (1, *dilation)
        output_padding = (0, *output_padding)
    if transposed:  # the output padding extends the far side: a smaller crop there
        pad = tuple(q for p, op in zip(padding, output_padding, strict=True) for q in (p, p - op))
        compose = C.conv_transpose3d if rank == 5 else C.conv_transpose2d
    else:
        pad = tuple(q for p in padding for q in (p, p))
        compose = C.conv3d if rank == 5 else C.conv2d
    y = compose(cv.b, x, w, bias, strides=tuple(stride), pad=pad, dilations=tuple(dilation), groups=groups)
    if rank == 3:
        y = cv.reshape(y, cv.out_type(node)[0])
    return y


@handles("addmm")
def _addmm(cv, node, bias, a, b, beta=1, alpha=1):
    y = cv.b.op("rt.matmul", [a, b])
    if alpha != 1:
        y = cv.b.op("rt.mul", [y, C.scalar(cv.b, alpha, y)])
    if beta != 1:
        bias = cv.b.op("rt.mul", [bias, C.scalar(cv.b, beta, bias)])
    return cv.b.op("rt.add", [y, bias]) if beta != 0 else y


@handles("mm", "bmm", "matmul")
def _matmul(cv, node, a, b):
    shape, _ = cv.out_type(node)
    if a.type.rank == 1:
        a = cv.reshape(a, (1,) + a.type.shape)
    if b.type.rank == 1:
        b = cv.reshape(b, b.type.shape + (1,))
    return cv.reshape(cv.b.op("rt.matmul", [a, b]), shape)


@handles("linear")
def _linear(cv, node, x, w, bias=None):
    wt = cv.b.op("rt.transpose", [w], {"perm": (1, 0)})
    return C.linear(cv.b, x, wt, bias)


@handles("view", "_unsafe_view", "reshape", "flatten", "unflatten", "squeeze", "unsqueeze", "view_as", "_reshape_alias")
def _view(cv, node, x, *args, **kwargs):
    if str(node.target) == "aten.view.dtype":  # x.view(torch.int32): the same bytes as another type
        try:
            return C.bitcast(cv.b, x, cv.out_type(node)[1])
        except UnsupportedOpError as e:
            raise UnsupportedOpError(f"aten op '{node.target}' (node '{node.name}'): {e.message}") from None
    return cv.reshape(x, cv.out_type(node)[0])


@handles("permute")
def _permute(cv, node, x, dims):
    perm = tuple(C.normalize_axis(d, x.type.rank) for d in dims)
    return x if perm == tuple(range(x.type.rank)) else cv.b.op("rt.transpose", [x], {"perm": perm})


@handles("transpose", "t", "numpy_T")
def _transpose(cv, node, x, d0=0, d1=1):
    rank = x.type.rank
    if rank < 2:
        return x
    perm = list(range(rank))
    d0, d1 = C.normalize_axis(d0, rank), C.normalize_axis(d1, rank)
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return cv.b.op("rt.transpose", [x], {"perm": tuple(perm)})


@handles("expand", "expand_as", "broadcast_to")
def _expand(cv, node, x, *args, **kwargs):
    shape, _ = cv.out_type(node)
    return x if x.type.shape == shape else cv.b.op("rt.broadcast", [x], {"shape": shape})


@handles("clone", "contiguous", "alias", "detach", "lift_fresh_copy", "dropout", "_to_copy", "to", "type_as")
def _identity_or_cast(cv, node, x, *args, **kwargs):
    _, dtype = cv.out_type(node)
    return cv.tensor(x, dtype)


@handles("sym_size")
def _sym_size(cv, node, x, dim):
    return cv.dim(node.meta["val"], node)


@handles("_assert_tensor_metadata", "_assert_scalar", "sym_constrain_range_for_size")
def _no_value(cv, node, *args, **kwargs):
    return None


def _reduce(kind):
    def handler(cv, node, x, dim=None, keepdim=False, dtype=None):
        axes = _axes(dim, x.type.rank)
        if kind in ("sum", "prod", "mean"):  # torch reduces in the result's type: `dtype`, or int64 for bool/ints
            x = cv.tensor(x, cv.out_type(node)[1])
        if kind == "mean":
            y = C.mean(cv.b, x, axes, keepdims=keepdim)
        else:
            y = cv.b.op("rt.reduce", [x], {"kind": kind, "axes": axes, "keepdims": bool(keepdim)})
        return cv.tensor(y, cv.out_type(node)[1])

    return handler


def _axes(dim, rank):
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return tuple(range(rank))
    dims = dim if isinstance(dim, (list, tuple)) else [dim]
    return tuple(sorted(C.normalize_axis(d, rank) for d in dims))


HANDLERS["mean"] = _reduce("mean")
HANDLERS["sum"] = _reduce("sum")
HANDLERS["amax"] = _reduce("max")
HANDLERS["amin"] = _reduce("min")
HANDLERS["prod"] = _reduce("prod")
HANDLERS["any"] = _reduce("or")
HANDLERS["all"] = _reduce("and")


@handles("max", "min")
def _max_min(cv, node, x, dim=None, keepdim=False):
    kind = "max" if str(node.target).startswith("aten.max") else "min"
    if isinstance(dim, Value):  # max.other: elementwise
        _, dtype = cv.out_type(node)
        return cv.b.op(f"rt.{kind}", [cv.tensor(x, dtype), cv.tensor(dim, dtype)])
    if dim is None:
        return cv.b.op("rt.reduce", [x], {"kind": kind, "axes": tuple(range(x.type.rank)), "keepdims": False})
    values = cv.b.op("rt.reduce", [x], {"kind": kind, "axes": _axes(dim, x.type.rank), "keepdims": bool(keepdim)})
    axis = C.normalize_axis(dim, x.type.rank)
    if kind == "max":
        index = cv.b.op("rt.argmax", [x], {"axis": axis, "keepdims": bool(keepdim)})
    else:
        index = C.argmin(cv.b, x, axis, bool(keepdim))
    return _Multi((values, index))


@handles("argmax", "argmin")
def _argmax(cv, node, x, dim=None, keepdim=False):
    if dim is None:
        x, dim = cv.reshape(x, (x.type.num_elements,)), 0
    axis = C.normalize_axis(dim, x.type.rank)
    if str(node.target).startswith("aten.argmin"):
        y = C.argmin(cv.b, x, axis, bool(keepdim))
    else:
        y = cv.b.op("rt.argmax", [x], {"axis": axis, "keepdims": bool(keepdim)})
    return cv.reshape(y, cv.out_type(node)[0])


@handles("sort", "topk")
def _sort(cv, node, x, *args, **kwargs):
    """sort, sort.stable (`C.sort` is stable, so `stable` changes nothing) and topk, always sorted (torch allows it
    for sorted=False); equal values come in their order along `dim`."""
    bound = _named_arguments(node)
    if x.type.rank == 0:
        return _Multi((x, cv.tensor(0, DTYPES["i64"])))
    dim = C.normalize_axis(bound["dim"], x.type.rank)
    if "k" in bound:  # topk
        return _Multi(C.sort(cv.b, x, dim, descending=bool(bound["largest"]), k=int(bound["k"])))
    return _Multi(C.sort(cv.b, x, dim, descending=bool(bound["descending"])))


@handles("cumsum")
def _cumsum(cv, node, x, dim, dtype=None):
    x = cv.tensor(x, cv.out_type(node)[1])  # integers and bools sum in int64, as torch's do, or in `dtype`
    return C.cumulative_sum(cv.b, x, C.normalize_axis(dim, x.type.rank)) if x.type.rank else x


@handles("var")
def _var(cv, node, x, dim=None, correction=None, keepdim=False, unbiased=None, **kwargs):
    """var.correction, and the training IR's var.dim, whose third argument `unbiased` (a bool) lands in
    `correction` when positional: True is a correction of 1, False of 0."""
    variance, _ = _variance(cv, x, dim, correction, keepdim, unbiased)
    return C.narrow_to(cv.b, variance, x)


@handles("var_mean", "std_mean")
def _var_mean(cv, node, x, *args, **kwargs):
    """(variance or standard deviation, mean): var_mean.correction and std_mean.correction, and the training IR's
    .dim overloads, which take `unbiased` instead of a correction."""
    bound = _named_arguments(node)
    variance, mean = _variance(cv, x, bound.get("dim"), bound.get("correction"), bound.get("keepdim", False),
                               bound.get("unbiased"))
    if str(node.target).startswith("aten.std_mean"):
        variance = cv.b.op("rt.sqrt", [variance])
    return _Multi((C.narrow_to(cv.b, variance, x), C.narrow_to(cv.b, mean, x)))


def _variance(cv, x, dim, correction, keepdim, unbiased) -> tuple[Value, Value]:
    """(variance, mean) over `dim`, in f32 for a half float (its squares are summed there); the variance divided
    by n - correction."""
    axes = _axes(dim, x.type.rank)
    n = math.prod(x.type.shape[a] for a in axes)
    correction = int(unbiased) if unbiased is not None else 1 if correction is None else correction
    wide = C.widen(cv.b, x)
    mu = C.mean(cv.b, wide, axes, keepdims=True)
    d = cv.b.op("rt.sub", [wide, mu])
    total = cv.b.op("rt.reduce", [cv.b.op("rt.mul", [d, d])], {"kind": "sum", "axes": axes, "keepdims": bool(keepdim)})
    mean = mu if keepdim else cv.reshape(mu, total.type.shape)
    if isinstance(n, Sym):  # known at run time: divided by max(n - correction, 0), as torch divides (0 gives inf/NaN)
        dof = C.size_value(cv.b, n - correction, wide.type.dtype.name)
        dof = cv.b.op("rt.max", [dof, C.scalar(cv.b, 0, dof)])
        return cv.b.op("rt.div", [total, dof]), mean
    scale = C.scalar(cv.b, 1.0 / max(n - correction, 0) if n > correction else math.inf, wide)
    return cv.b.op("rt.mul", [total, scale]), mean


@handles("cumprod")
def _cumprod(cv, node, x, dim, dtype=None):
    x = cv.tensor(x, cv.out_type(node)[1])  # integers and bools multiply in int64, as torch's do, or in `dtype`
    return C.cumulative(cv.b, x, C.normalize_axis(dim, x.type.rank), "prod") if x.type.rank else x


@handles("cummax", "cummin")
def _cummax(cv, node, x, dim):
    """Values and indices (`compose.cumulative_extreme`: torch's tie rule, the latest equal element)."""
    if x.type.rank == 0:
        return _Multi((x, cv.tensor(0, DTYPES["i64"])))
    largest = str(node.target).startswith("aten.cummax")
    return _Multi(C.cumulative_extreme(cv.b, x, C.normalize_axis(dim, x.type.rank), largest))


@handles("logcumsumexp")
def _logcumsumexp(cv, node, x, dim):
    if x.type.rank == 0:
        return x
    wide = C.widen(cv.b, x)
    return C.narrow_to(cv.b, C.cumulative(cv.b, wide, C.normalize_axis(dim, x.type.rank), "logsumexp"), x)


@handles("median", "kthvalue")
def _median(cv, node, x, *args):
    """median.default (of every element), median.dim (values and indices) and kthvalue: the k-th smallest
    (`compose.kth_smallest`), the lower median (place (n - 1) // 2) for median; a median of a row with a NaN is
    NaN, its index the first NaN's, as torch's. Of equal values torch's CPU kernels return whichever index
    their selection leaves there (torch documents it as not determined); here the first in sort order, so indices
    equal torch's where the chosen value is not repeated."""
    bound = _named_arguments(node)
    whole = "dim" not in bound
    if whole:
        x = cv.reshape(x, (x.type.num_elements,))
    if x.type.rank == 0:
        return _Multi((x, cv.tensor(0, DTYPES["i64"])))
    axis = 0 if whole else C.normalize_axis(bound["dim"], x.type.rank)
    keepdim = bool(bound.get("keepdim", False))
    n = x.type.shape[axis]
    median = "k" not in bound
    value, index = C.kth_smallest(cv.b, x, axis, (n - 1) // 2 if median else int(bound["k"]) - 1, keepdim)
    if median and x.type.dtype.is_float:
        nan = cv.b.op("rt.cmp", [x, x], {"predicate": "ne"})
        first_nan = cv.b.op("rt.argmax", [cv.b.op("rt.cast", [nan], {"dtype": "i32"})],
                            {"axis": axis, "keepdims": keepdim})
        some = cv.b.op("rt.reduce", [nan], {"kind": "or", "axes": (axis,), "keepdims": keepdim})
        value = cv.b.op("rt.select", [some, C.scalar(cv.b, math.nan, value), value])
        index = cv.b.op("rt.select", [some, first_nan, index])
    return value if whole else _Multi((value, index))


@handles("histc")
def _histc(cv, node, x, bins=100, low=0, high=0):
    """torch.histc as its CPU kernel bins: [low, high] cut into `bins` (where low equals high, as by default, the
    data's least and greatest values instead, each moved out by 1 if those are equal too); an element in it goes
    to bin trunc((v - low) * bins / (high - low)), computed in x's type, the last bin for v = high; NaN and
    values outside count nowhere. The counts are a scatter-add of ones."""
    b = cv.b
    flat = cv.reshape(x, (x.type.num_elements,))
    if isinstance(flat.type.shape[0], Sym):
        raise UnsupportedOpError("histc of a tensor whose size is known only at run time",
                                 hint="export with a static shape")
    if low == high:  # torch's default (0, 0), or any empty range: the data's own
        low, high = (b.op("rt.reduce", [flat], {"kind": kind, "axes": (0,), "keepdims": False})
                     for kind in ("min", "max"))
        same = b.op("rt.cmp", [low, high], {"predicate": "eq"})
        low = b.op("rt.select", [same, b.op("rt.sub", [low, C.scalar(b, 1, low)]), low])
        high = b.op("rt.select", [same, b.op("rt.add", [high, C.scalar(b, 1, high)]), high])
    low, high = cv.tensor(low, x.type.dtype), cv.tensor(high, x.type.dtype)
    inside = b.op("rt.and", [b.op("rt.cmp", [flat, low], {"predicate": "ge"}),
                             b.op("rt.cmp", [flat, high], {"predicate": "le"})])
    scaled = b.op("rt.div", [b.op("rt.mul", [b.op("rt.sub", [flat, low]), C.scalar(b, bins, flat)]),
                             b.op("rt.sub", [high, low])])
    position = b.op("rt.cast", [C.clamp(b, scaled, 0, bins - 1)], {"dtype": "i32"})
    ones = b.op("rt.select", [inside, C.scalar(b, 1, flat), C.scalar(b, 0, flat)])
    zeros = b.op("rt.broadcast", [C.scalar(b, 0, flat)], {"shape": (bins,)})
    return C.scatter_elements(b, zeros, 0, position, ones, "sum")


@handles("linalg_vector_norm")
def _vector_norm(cv, node, x, ord=2, dim=None, keepdim=False, *, dtype=None):
    """Every order (`compose.vector_norm`), over `dim` (all of x for None or []), in `dtype` where given; a half
    float's sum is taken in f32."""
    x = cv.tensor(x, cv.out_type(node)[1])
    norm = C.vector_norm(cv.b, C.widen(cv.b, x), _axes(dim, x.type.rank), float(ord), bool(keepdim))
    return C.narrow_to(cv.b, norm, x)


@handles("dist")
def _dist(cv, node, x, other, p=2):
    """The `p`-norm of x - other over every element."""
    _, dtype = cv.out_type(node)
    difference = C.widen(cv.b, cv.b.op("rt.sub", [cv.tensor(x, dtype), cv.tensor(other, dtype)]))
    norm = C.vector_norm(cv.b, difference, tuple(range(difference.type.rank)), float(p))
    return cv.tensor(norm, dtype)


@handles("cosine_similarity")
def _cosine_similarity(cv, node, x1, x2, dim=1, eps=1e-8):
    """The training IR's op, as torch's composite computes it: both operands broadcast together, each divided by
    its 2-norm along `dim` (at least eps), the products summed along `dim`."""
    _, dtype = cv.out_type(node)
    x1, x2 = cv.tensor(x1, dtype), cv.tensor(x2, dtype)
    shape = broadcast_shapes(x1.type.shape, x2.type.shape)
    axis = C.normalize_axis(dim, len(shape))
    units = []
    for x in (x1, x2):
        x = cv.reshape(x, (1,) * (len(shape) - x.type.rank) + x.type.shape)
        x = x if x.type.shape == shape else cv.b.op("rt.broadcast", [x], {"shape": shape})
        norm = C.narrow_to(cv.b, C.vector_norm(cv.b, C.widen(cv.b, x), (axis,), 2, keepdims=True), x)
        units.append(cv.b.op("rt.div", [x, C.clamp(cv.b, norm, lo=eps)]))
    product = cv.b.op("rt.mul", units)
    return cv.b.op("rt.reduce", [product], {"kind": "sum", "axes": (axis,), "keepdims": False})


@handles("diagonal")
def _diagonal(cv, node, x, offset=0, dim1=0, dim2=1):
    return C.diagonal(cv.b, x, offset, dim1, dim2)


_EUCLIDEAN_BY_MATMUL = 1  # cdist's compute_mode: 0 (None) by matmul past 25 rows, 1 always, 2 never


@handles("_cdist_forward", "cdist")
def _cdist(cv, node, x1, x2, p=2.0, compute_mode=None):
    """torch.cdist (`compose.pairwise_distance`); for p = 2 by a matmul where torch's kernel uses one:
    compute_mode 1, or None (0) with more than 25 rows in either operand. A number of rows known only at run time
    counts as more unless its range keeps it to 25 (the direct form holds rows x rows x features differences)."""
    mode = 0 if compute_mode is None else compute_mode
    most = [bounds(x.type.shape[-2], cv.fn.symbols)[1] for x in (x1, x2)]
    by_matmul = p == 2 and (mode == _EUCLIDEAN_BY_MATMUL or (mode == 0 and any(m is None or m > 25 for m in most)))
    _, dtype = cv.out_type(node)
    return C.pairwise_distance(cv.b, cv.tensor(x1, dtype), cv.tensor(x2, dtype), p, by_matmul)


@handles("_pdist_forward", "pdist")
def _pdist(cv, node, x, p=2.0):
    """The distances between the rows of x [N, M] for each pair i < j, in row-major order: every pair's
    distance (`compose.pairwise_distance`, as torch's kernel computes it: directly), then those above the
    diagonal gathered."""
    n = x.type.shape[0]
    if isinstance(n, Sym):
        raise UnsupportedOpError("pdist of a number of rows known only at run time",
                                 hint="export with a static number of rows")
    square = C.pairwise_distance(cv.b, x, x, p)
    rows, columns = np.triu_indices(n, 1)
    flat = cv.reshape(square, (n * n,))
    return cv.b.op("rt.gather", [flat, cv.b.constant((rows * n + columns).astype(np.int32))], {"axis": 0})


@handles("searchsorted", "bucketize")
def _searchsorted(cv, node, *args, **kwargs):
    """searchsorted (.Tensor, .Scalar; `right` or side="right", out_int32, sorter) and bucketize (.Tensor,
    .Scalar, whose boundaries come second): `compose.search_sorted`, torch's binary search."""
    bound = _named_arguments(node)
    if str(node.target).startswith("aten.bucketize"):
        sequence, values, sorter = args[1], args[0], None
    else:
        sequence, values, sorter = args[0], args[1], kwargs.get("sorter")
    right = bool(bound.get("right")) or bound.get("side") == "right"
    shape, dtype = cv.out_type(node)
    values = cv.tensor(values, sequence.type.dtype)
    found = C.search_sorted(cv.b, sequence, values, right, sorter, dtype.name)
    return cv.reshape(found, shape)


@handles("_adaptive_avg_pool3d", "adaptive_avg_pool3d")
def _adaptive_avg_pool3d(cv, node, x, output_size):
    return C.adaptive_avg_pool(cv.b, x, cv.out_type(node)[0][-3:])


@handles("masked_scatter")
def _masked_scatter(cv, node, x, mask, source):
    return C.masked_scatter(cv.b, x, cv.tensor(mask, DTYPES["i1"]), cv.tensor(source, x.type.dtype))


@handles("_linalg_det", "linalg_det", "det")
def _det(cv, node, x):
    """The determinant (`compose.determinant`); of _linalg_det's results (det, LU, pivots) only the first."""
    det = C.determinant(cv.b, x)
    return _Multi((det, None, None)) if str(node.target).startswith("aten._linalg_det") else det


@handles("rrelu_with_noise_functional", "rrelu")
def _rrelu(cv, node, x, *args, **kwargs):
    """In eval mode a leaky ReLU of slope (lower + upper) / 2, the noise left as it is; training mode draws a
    slope an element at random, which a compiled module cannot."""
    bound = _named_arguments(node)
    if bound["training"]:
        raise UnsupportedOpError(f"'{node.target}' in training mode draws random slopes",
                                 hint="export the model in eval mode (model.eval())")
    y = C.leaky_relu(cv.b, x, (bound["lower"] + bound["upper"]) / 2)
    return _Multi((y, args[0])) if "noise" in str(node.target) else y


@handles("max_pool1d", "max_pool1d_with_indices", "max_pool2d", "max_pool2d_with_indices", "max_pool3d",
         "max_pool3d_with_indices")
def _max_pool(cv, node, x, kernel, stride=(), padding=0, dilation=1, ceil_mode=False):
    """With indices (the *_with_indices ops), also where each maximum lies: its flat index within its (n, c)
    plane, as torch's CPU kernel picks it (`C.max_pool_indices`); the pool's windows are recorded for an unpool of
    these indices."""
    dims = _pool_dims(node)
    kernel, stride, padding, dilation = _pool_args(dims, kernel, stride, padding, dilation)
    with_indices = "with_indices" in str(node.target)

    def pool(x):
        pad = _pool_pad(x, kernel, stride, padding, ceil_mode, dilation)
        y = C.pool(cv.b, x, "rt.max_pool2d", kernel, stride, dilation, pad[0::2], pad[1::2])
        if not with_indices:
            return y
        return y, C.max_pool_indices(cv.b, x, y, kernel, stride, dilation, pad[0::2], pad[1::2], plane_offset=False,
                                     column_major=False)

    y = _batched(cv, dims, pool, x)
    if not with_indices:
        return y
    cv.pool_windows[y[1]] = C.PoolWindows(tuple(kernel), tuple(stride), tuple(dilation), tuple(padding),
                                          tuple(padding), x.type.shape[-dims:], plane_offset=False, column_major=False)
    return _Multi(y)


@handles("max_unpool2d", "max_unpool3d")
def _max_unpool(cv, node, x, indices, output_size, stride=None, padding=None):
    """nn.MaxUnpool2d/3d: zeros of `output_size` a (n, c) plane, with x's values at `indices`, flat positions
    within the plane (as max pooling gives them); `C.max_unpool`, linear where the indices are a max pool's of this
    graph (`_pool_windows_of`), else the composed scatter. An index outside the plane, on which torch raises,
    writes nothing: checking would take a test at run time. Where indices repeat, the last of x's values wins
    (torch's CPU kernel leaves that to its threads). max_unpool3d's stride and padding only check sizes."""
    dims = _pool_dims(node)
    size = cv.out_type(node)[0][-dims:]
    windows = _pool_windows_of(cv, indices)
    return _batched(cv, dims, lambda x, indices: C.max_unpool(cv.b, x, indices, size, plane_offset=False,
                                                              windows=windows), x, indices)


def _pool_windows_of(cv, indices: Value) -> C.PoolWindows | None:
    """The windows of the max pool of this graph that made `indices`, also through the trailing unit dim that
    max_unpool1d adds (it unpools as 2-D); None for any other indices."""
    if indices in cv.pool_windows:
        return cv.pool_windows[indices]
    source = indices.owner.operands[0] if indices.owner is not None and indices.owner.name == "rt.reshape" else None
    if source not in cv.pool_windows:
        return None
    rank, shape = source.type.rank, indices.type.shape
    if shape[:rank] != source.type.shape or any(d != 1 for d in shape[rank:]):
        return None
    return cv.pool_windows[source].with_unit_dims(len(shape) - rank)


@handles("avg_pool2d", "avg_pool3d")
def _avg_pool(cv, node, x, kernel, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
              divisor_override=None):
    """torch divides each window's sum by `divisor_override`, else by the number of its positions inside the
    image (count_include_pad=False), else inside the padded image, never counting those past it that ceil_mode
    adds, where rt.avg_pool2d counts the whole kernel: a constant factor per output position mends those."""
    dims = _pool_dims(node)
    kernel, stride, padding, ones = _pool_args(dims, kernel, stride, padding)
    by_kernel = bool(count_include_pad) or divisor_override is not None  # then rt.avg_pool2d's divisor is the kernel's

    def pool(x):
        pad = _pool_pad(x, kernel, stride, padding, ceil_mode)
        y = C.pool(cv.b, x, "rt.avg_pool2d", kernel, stride, ones, pad[0::2], pad[1::2], by_kernel and any(pad))
        if divisor_override is not None:
            return cv.b.op("rt.mul", [y, C.scalar(cv.b, math.prod(kernel) / divisor_override, y)])
        if count_include_pad and pad != _pool_pad(x, kernel, stride, padding):  # windows past the padded image
            inside = [np.minimum(np.arange(out) * s - p + k, size + p) - (np.arange(out) * s - p)
                      for out, size, k, s, p in zip(y.type.shape[2:], x.type.shape[2:], kernel, stride, padding)]
            factor = math.prod(kernel) / functools.reduce(np.multiply.outer, inside)
            y = cv.b.op("rt.mul", [y, cv.b.constant(factor.astype(y.type.dtype.np_dtype))])
        return y

    return _batched(cv, dims, pool, x)


def _pool_dims(node) -> int:
    """The spatial dims of a torch pool or unpool: 1, 2 or 3, as its name says."""
    return int(re.search(r"pool([123])d", str(node.target)).group(1))


def _batched(cv, dims, pool, *xs):
    """`pool` (of N, C, spatial... values, to one or a tuple of them) applied to xs, which torch's pools also take
    without the batch."""
    if xs[0].type.rank == dims + 2:
        return pool(*xs)
    ys = pool(*(cv.reshape(x, (1,) + x.type.shape) for x in xs))
    if isinstance(ys, tuple):
        return tuple(cv.reshape(y, y.type.shape[1:]) for y in ys)
    return cv.reshape(ys, ys.type.shape[1:])


def _spatial(v, dims):
    v = tuple(v) if isinstance(v, (list, tuple)) else (v,)
    return v * dims if len(v) == 1 else v


def _pool_args(dims, kernel, stride, padding, dilation=1):
    """kernel, stride (the kernel's when empty), padding and dilation, one a spatial dim."""
    kernel = _spatial(kernel, dims)
    stride = _spatial(stride, dims) if stride else kernel
    return kernel, stride, _spatial(padding, dims), _spatial(dilation, dims)


def _pool_pad(x, kernel, stride, padding, ceil_mode=False, dilation=None):
    """(begin, end) pads a spatial dim in turn: `padding`, with ceil_mode's extra windows at the end."""
    pads = []
    for d, (k, s, p) in enumerate(zip(kernel, stride, padding, strict=True)):
        size = x.type.shape[2 + d]
        span = (dilation[d] if dilation else 1) * (k - 1) + 1
        extra = 0
        if ceil_mode:
            out = -(-(size + 2 * p - span) // s) + 1
            if (out - 1) * s >= size + p:  # the last window must start inside the input or left padding
                out -= 1
            extra = max(0, (out - 1) * s + span - (size + 2 * p))
        pads += [p, p + extra]
    return tuple(pads)


@handles("_adaptive_avg_pool2d", "adaptive_avg_pool2d")
def _adaptive_avg_pool2d(cv, node, x, output_size):
    return C.adaptive_avg_pool2d(cv.b, x, cv.out_type(node)[0][-2:])


@handles("adaptive_max_pool2d")
def _adaptive_max_pool2d(cv, node, x, output_size):
    return _Multi(C.adaptive_max_pool2d(cv.b, x, cv.out_type(node, 0)[0][-2:], indices=True))


@handles("grid_sampler_2d", "grid_sampler_3d", "grid_sampler")
def _grid_sampler(cv, node, x, grid, interpolation_mode, padding_mode, align_corners):
    """torch numbers the modes: bilinear 0, nearest 1, bicubic 2; and the paddings: zeros 0, border 1,
    reflection 2."""
    return C.grid_sample(cv.b, x, grid, C.GRID_SAMPLE_MODES[(1, 0, 2)[interpolation_mode]],
                         C.GRID_SAMPLE_PADDINGS[padding_mode], bool(align_corners))


@handles("cat", "concat")
def _cat(cv, node, tensors, dim=0):
    shape, dtype = cv.out_type(node)
    tensors = [cv.tensor(t, dtype) for t in tensors
               if isinstance(t.type.num_elements, Sym) or t.type.num_elements > 0 or t.type.rank == len(shape)]
    if len(tensors) == 1:
        return tensors[0]
    return cv.b.op("rt.concat", tensors, {"axis": C.normalize_axis(dim, len(shape))})


@handles("slice")
def _slice(cv, node, x, dim=0, start=None, end=None, step=1):
    rank = x.type.rank
    dim = C.normalize_axis(dim, rank)
    size = x.type.shape[dim]
    if isinstance(size, Sym) or isinstance(start, Sym) or isinstance(end, Sym):
        # torch has checked these bounds for every size in the range; x[a:], x[:n], x[-k:]
        start = 0 if start is None else start
        end = size if end is None or (isinstance(end, int) and end >= 2**62) else end
        start = size + start if isinstance(start, int) and start < 0 else start
        end = size + end if isinstance(end, int) and end < 0 else end
        return C.slice_axis(cv.b, x, dim, start, end, step)
    s, e, _ = slice(start, end, step).indices(size)
    return C.slice_axis(cv.b, x, dim, s, max(s, e), step)


@handles("select")
def _select(cv, node, x, dim, index):
    dim = C.normalize_axis(dim, x.type.rank)
    index = index + x.type.shape[dim] if index < 0 else index
    return cv.reshape(C.slice_axis(cv.b, x, dim, index, index + 1, 1), cv.out_type(node)[0])


@handles("split_with_sizes", "split")
def _split(cv, node, x, sizes, dim=0):
    dim = C.normalize_axis(dim, x.type.rank)
    if isinstance(sizes, int):
        n = x.type.shape[dim]
        sizes = [min(sizes, n - i) for i in range(0, n, sizes)]
    out, start = [], 0
    for size in sizes:
        out.append(C.slice_axis(cv.b, x, dim, start, start + size, 1))
        start += size
    return _Multi(out)


@handles("embedding")
def _embedding(cv, node, weight, indices, *args):
    return cv.b.op("rt.gather", [weight, indices], {"axis": 0})


@handles("_embedding_bag", "embedding_bag", "_embedding_bag_forward_only")
def _embedding_bag(cv, node, weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
                   per_sample_weights=None, include_last_offset=False, padding_idx=-1):
    """Only the bags (result 0); torch numbers the modes sum 0, mean 1, max 2, and -1 means no padding index."""
    if indices.type.rank != 1:
        raise UnsupportedOpError(f"'{node.target}' (node '{node.name}') of {indices.type} indices: 1-D indices and "
                                 "offsets are supported", hint="pass 2-D bags as 1-D indices with offsets")
    bags = C.embedding_bag(cv.b, weight, indices, offsets, ("sum", "mean", "max")[mode], per_sample_weights,
                           bool(include_last_offset), None if padding_idx is None or padding_idx < 0 else padding_idx)
    return _Multi((bags, None, None, None))


@handles("index_select")
def _index_select(cv, node, x, dim, index):
    return cv.b.op("rt.gather", [x, index], {"axis": C.normalize_axis(dim, x.type.rank)})


_TORCH_REDUCTIONS = {"sum": "sum", "add": "sum", "prod": "prod", "multiply": "prod", "mean": "mean", "amax": "max",
                     "amin": "min"}


@handles("scatter", "scatter_add", "scatter_reduce")
def _scatter(cv, node, x, dim, index, src, reduce=None, include_self=True):
    """scatter (a tensor or a number written), scatter_add, and scatter_reduce's sum, prod, mean, amax and amin
    (scatter's older reduce="add" / "multiply" too)."""
    name = str(node.target).split(".")[1]
    reduction = "sum" if name == "scatter_add" else _TORCH_REDUCTIONS[reduce] if reduce else "none"
    updates = src if isinstance(src, Value) else cv.b.op("rt.broadcast", [cv.tensor(src, x.type.dtype)],
                                                           {"shape": index.type.shape})
    return C.scatter_elements(cv.b, x, dim, index, cv.tensor(updates, x.type.dtype), reduction, bool(include_self))


@handles("index_add", "index_copy")
def _index_add(cv, node, x, dim, index, source, alpha=1):
    """x with source's slices added (or copied) at the 1-D positions `index` along `dim`."""
    dim = C.normalize_axis(dim, x.type.rank)
    spread = [1] * x.type.rank
    spread[dim] = index.type.shape[0]
    index = cv.b.op("rt.broadcast", [cv.reshape(index, spread)], {"shape": source.type.shape})
    source = cv.tensor(source, x.type.dtype)
    if alpha != 1:
        source = cv.b.op("rt.mul", [source, C.scalar(cv.b, alpha, source)])
    reduction = "sum" if "index_add" in str(node.target) else "none"
    return C.scatter_elements(cv.b, x, dim, index, source, reduction)


@handles("index_put")
def _index_put(cv, node, x, indices, values, accumulate=False):
    """x[i] = v, x[i, :, j] += v, ...: integer index tensors, as `C.advanced_index` reads them, written with
    `C.scatter_nd`: the indexed dims are brought to the front, their index tensors broadcast and stacked."""
    indexed = [axis for axis, index in enumerate(indices) if index is not None]
    if any(indices[axis].type.dtype.name in ("i1", "ui8") for axis in indexed):
        return _masked_put(cv, node, x, indices, values, accumulate)
    rest = [axis for axis in range(x.type.rank) if axis not in indexed]
    perm = indexed + rest
    moved = x if perm == list(range(x.type.rank)) else cv.b.op("rt.transpose", [x], {"perm": tuple(perm)})
    tensors = [indices[axis] for axis in indexed]
    shape = tuple(np.broadcast_shapes(*(t.type.shape for t in tensors)))
    columns = [cv.reshape(cv.b.op("rt.broadcast", [t], {"shape": shape}) if t.type.shape != shape else t,
                          shape + (1,)) for t in tensors]
    columns = [cv.tensor(c, DTYPES["i64"]) for c in columns]
    stacked = columns[0] if len(columns) == 1 else cv.b.op("rt.concat", columns, {"axis": len(shape)})
    # values broadcast to x[indices]'s shape: the index shape where the indexed dims were, if they are adjacent
    adjacent = indexed == list(range(indexed[0], indexed[0] + len(indexed)))
    before = [x.type.shape[a] for a in rest if adjacent and a < indexed[0]]
    after = [x.type.shape[a] for a in rest if not adjacent or a > indexed[0]]
    target = (*before, *shape, *after)
    values = cv.tensor(values, x.type.dtype)
    values = cv.b.op("rt.broadcast", [values], {"shape": target}) if values.type.shape != target else values
    if before:
        order = tuple(range(len(before), len(before) + len(shape))) + tuple(range(len(before))) + \
            tuple(range(len(before) + len(shape), len(target)))
        values = cv.b.op("rt.transpose", [values], {"perm": order})
    out = C.scatter_nd(cv.b, moved, stacked, values, "sum" if accumulate else "none")
    inverse = tuple(int(i) for i in np.argsort(perm))
    return out if perm == list(range(x.type.rank)) else cv.b.op("rt.transpose", [out], {"perm": inverse})


def _masked_put(cv, node, x, indices, values, accumulate):
    """x[mask] = v (or += v) where v is the same for every element the mask picks (a scalar, or values that
    broadcast over the dims after the mask's): torch.where(mask, v, x), exact. A v with one value per picked
    element needs the mask's count, known only at run time: refused."""
    where = f"'{node.target}' (node '{node.name}')"
    masks = [(axis, index) for axis, index in enumerate(indices) if index is not None]
    if len(masks) != 1:
        raise UnsupportedOpError(f"{where} mixes a boolean mask with other indices",
                                 hint="index with the mask alone, or write torch.where(mask, value, x)")
    (axis, mask), = masks
    span = mask.type.rank
    before, after = x.type.shape[:axis], x.type.shape[axis + span:]
    picked_rank = len(before) + 1 + len(after)  # x[mask]: (*before, count, *after)
    v = cv.tensor(values, x.type.dtype)
    if v.type.rank > picked_rank or (v.type.rank > len(after) and v.type.shape[v.type.rank - len(after) - 1] != 1):
        raise UnsupportedOpError(f"{where} writes {v.type} through a boolean mask, one value per picked element: "
                                 "their number is known only at run time",
                                 hint="write torch.where(mask, values, x) with values shaped like x")
    v = cv.reshape(v, (1,) * (picked_rank - v.type.rank) + v.type.shape)
    v = cv.reshape(v, v.type.shape[:len(before)] + (1,) * span + v.type.shape[len(before) + 1:])
    v = cv.b.op("rt.broadcast", [v], {"shape": x.type.shape}) if v.type.shape != x.type.shape else v
    mask = cv.tensor(mask, DTYPES["i1"])
    mask = cv.reshape(mask, (1,) * len(before) + mask.type.shape + (1,) * len(after))
    mask = cv.b.op("rt.broadcast", [mask], {"shape": x.type.shape}) if mask.type.shape != x.type.shape else mask
    if accumulate:
        zero = cv.b.op("rt.broadcast", [cv.tensor(0, x.type.dtype)], {"shape": x.type.shape})
        return cv.b.op("rt.add", [x, cv.b.op("rt.select", [mask, v, zero])])
    return cv.b.op("rt.select", [mask, v, x])


@handles("slice_scatter")
def _slice_scatter(cv, node, x, src, dim=0, start=None, end=None, step=1):
    return C.slice_scatter(cv.b, x, src, C.normalize_axis(dim, x.type.rank), start, end, step)


@handles("select_scatter")
def _select_scatter(cv, node, x, src, dim, index):
    dim = C.normalize_axis(dim, x.type.rank)
    index = index + x.type.shape[dim] if index < 0 else index
    src = cv.reshape(src, src.type.shape[:dim] + (1,) + src.type.shape[dim:])
    return C.slice_scatter(cv.b, x, src, dim, index, index + 1)


@handles("copy")
def _copy(cv, node, x, src, non_blocking=False):
    """x's shape and type, src's values (copy_ of a whole tensor, as export writes it without mutation)."""
    src = cv.tensor(src, x.type.dtype)
    return src if src.type.shape == x.type.shape else cv.b.op("rt.broadcast", [src], {"shape": x.type.shape})


@handles("gather")
def _gather(cv, node, x, dim, index, sparse_grad=False):
    """x read along `dim` at `index`, which may be shorter than x along the other dims (`C.take_along_axis`)."""
    if x.type.rank == 0:  # a scalar, read at its only index
        return x
    return C.take_along_axis(cv.b, x, index, C.normalize_axis(dim, x.type.rank))


def _data_dependent_count(cv, node, axis: int, most, base: str = "nonzero", result: int | None = None) -> str:
    """A host op's count: a new symbol, which torch's unbacked size (u0) at `axis` of the node's result (or of its
    result number `result`) names."""
    count = cv.b.fresh_symbol(base, SymbolRange(0, most if isinstance(most, int) else None))
    val = node.meta["val"] if result is None else node.meta["val"][result]
    cv.symbols[val.shape[axis].node.expr] = count
    return count.name


@handles("_unique2")
def _unique2(cv, node, x, sorted=True, return_inverse=False, return_counts=False):  # noqa: A002 - torch's name
    """torch.unique: the distinct values sorted (torch's CPU kernel sorts whatever `sorted` says), the inverse in x's
    shape, the counts; an output not asked for is empty, as torch's."""
    attrs = {"count": _data_dependent_count(cv, node, 0, x.type.num_elements, "unique", result=0), "sorted": True,
             "axis": None}
    values = cv.b.op("rt.unique", [x], {**attrs, "output": "values"})
    empty = cv.b.constant(np.zeros(0, np.int64))
    inverse = cv.reshape(cv.b.op("rt.unique", [x], {**attrs, "output": "inverse"}), x.type.shape) \
        if return_inverse else empty
    counts = cv.b.op("rt.unique", [x], {**attrs, "output": "counts"}) if return_counts else empty
    return [values, inverse, counts]


@handles("nonzero")
def _nonzero(cv, node, x):
    """[count, rank] indices of x's nonzero elements (`rt.nonzero` gives them [rank, count])."""
    count = _data_dependent_count(cv, node, 0, x.type.num_elements)
    return cv.b.op("rt.transpose", [cv.b.op("rt.nonzero", [x], {"count": count})], {"perm": (1, 0)})


def _masked(cv, node, x, mask):
    """x[mask], mask over x's leading dims: the rows where it holds, gathered at its flattened nonzero positions."""
    lead = mask.type.rank
    if mask.type.shape != x.type.shape[:lead]:
        raise UnsupportedOpError(f"'{node.target}' (node '{node.name}') indexes {x.type} with a mask {mask.type} "
                                 "that is not over its leading dims")
    rows = mask.type.num_elements
    count = _data_dependent_count(cv, node, 0, rows)
    flat = cv.b.op("rt.nonzero", [cv.reshape(mask, (rows,))], {"count": count})
    positions = cv.reshape(flat, (flat.type.shape[1],))
    return cv.b.op("rt.gather", [cv.reshape(x, (rows, *x.type.shape[lead:])), positions], {"axis": 0})


@handles("masked_select")
def _masked_select(cv, node, x, mask):
    """x.masked_select(mask): both broadcast to one shape, then x[mask] over every dim (a 1-D result)."""
    shape = broadcast_shapes(x.type.shape, mask.type.shape)
    x, mask = (v if v.type.shape == shape else cv.b.op("rt.broadcast", [v], {"shape": shape}) for v in (x, mask))
    return _masked(cv, node, x, cv.tensor(mask, DTYPES["i1"]))


@handles("index", "_unsafe_index")
def _index(cv, node, x, indices):
    """x[i], x[:, i], x[i, :, j], ...: integer index tensors (constants or inputs), as `C.advanced_index`; x[mask]
    with a boolean mask over x's leading dims, whose result's size depends on the data (`_masked`)."""
    given = [index for index in indices if index is not None]
    if any(index.type.dtype.name in ("i1", "ui8") for index in given):
        if len(indices) != 1:
            raise UnsupportedOpError(
                f"'{node.target}' (node '{node.name}') indexes with a boolean mask beside other indices",
                hint="index with the mask alone (x[mask]), or with integer positions (torch.nonzero(mask))")
        return _masked(cv, node, x, cv.tensor(indices[0], DTYPES["i1"]))
    if any(isinstance(x.type.shape[axis], Sym) for axis, index in enumerate(indices) if index is not None):
        raise UnsupportedOpError(f"'{node.target}' (node '{node.name}') indexes a dimension whose size is known "
                                 "only at run time", hint="export with static sizes for the indexed dimensions")
    return C.advanced_index(cv.b, x, indices)


def _named_arguments(node) -> dict:
    """Every argument of the node's op by its schema name, defaults filled in."""
    values = {}
    for i, argument in enumerate(node.target._schema.arguments):
        if i < len(node.args) and not argument.kwarg_only:
            values[argument.name] = node.args[i]
        elif argument.name in node.kwargs:
            values[argument.name] = node.kwargs[argument.name]
        else:
            values[argument.name] = argument.default_value if argument.has_default_value() else None
    return values


def _torch_positions(size_in: int, size_out: int, factor, align_corners: bool, mode: str, spatial: int):
    """ATen's source positions along one axis of a `spatial`-D resize, in float32 as its CPU kernels compute
    them: indices for the nearest modes, (low, high, weight) for bilinear; None where they read the axis as it is.
    The 2-D and 1-D kernels differ: only the 2-D nearest one copies a kept size and halves a doubled one, and
    1-D nearest-exact rounds once (a fused multiply-add) what 2-D rounds twice."""
    if size_in == size_out and (mode == "bilinear" or (mode == "nearest" and spatial == 2)):
        return None
    if mode == "nearest" and spatial == 2 and size_out == 2 * size_in:
        return np.arange(size_out) // 2
    j = np.arange(size_out, dtype=np.float32)
    if mode == "bilinear" and align_corners:
        scale = np.float32((size_in - 1) / (size_out - 1)) if size_out > 1 else np.float32(0)
    else:
        scale = np.float32(1.0 / factor) if factor else np.float32(size_in) / np.float32(size_out)
    if mode == "bilinear":
        src = scale * j if align_corners else np.maximum(scale * (j + np.float32(0.5)) - np.float32(0.5),
                                                          np.float32(0))
        return C.linear_neighbours(src, size_in)
    if mode == "nearest":
        positions = np.floor(j * scale)
    elif spatial == 2:  # nearest-exact: floor((j + 0.5) * scale), the product in double rounded to float
        positions = np.floor(((j + 0.5).astype(np.float64) * np.float64(scale)).astype(np.float32))
    else:  # nearest-exact: floor(max(scale * (j + 0.5) - 0.5, 0) + 0.5)
        fused = np.maximum(((j + 0.5).astype(np.float64) * np.float64(scale) - 0.5).astype(np.float32), 0)
        positions = np.floor((fused.astype(np.float64) + 0.5).astype(np.float32))
    positions = np.minimum(positions, size_in - 1).astype(np.int64)
    return None if size_in == size_out and np.array_equal(positions, np.arange(size_out)) else positions


_SCALE_NAMES = {1: ("scales",), 2: ("scales_h", "scales_w")}  # the factors' names in the non-`vec` overloads


def _resize_arguments(cv, node, x) -> tuple:
    """An upsample node's output shape, its scale factor a spatial axis (None: from the sizes) and align_corners,
    the sizes static (they are constants in the node itself)."""
    shape, _ = cv.out_type(node)
    if any(isinstance(d, Sym) for d in (*shape[2:], *x.type.shape[2:])):
        raise UnsupportedOpError(f"{node.target} with sizes known only at run time is not supported",
                                 hint="export with static image sizes")
    bound = _named_arguments(node)
    factors = bound.get("scale_factors") or [bound.get(name) for name in _SCALE_NAMES[x.type.rank - 2]]
    return shape, factors, bool(bound.get("align_corners", False))


def _upsample(mode: str):
    """upsample_nearest1d/2d, _upsample_nearest_exact1d/2d and upsample_bilinear2d (every overload): gathers
    along each spatial axis of positions computed here, so every target runs them with no op of its own."""
    def handler(cv, node, x, *args, **kwargs):
        shape, factors, align_corners = _resize_arguments(cv, node, x)
        spatial = x.type.rank - 2
        for axis, factor in zip(range(2, x.type.rank), factors):
            positions = _torch_positions(x.type.shape[axis], shape[axis], factor, align_corners, mode, spatial)
            if positions is not None:
                x = C.resample(cv.b, x, axis, *(positions if mode == "bilinear" else (positions,)))
        return x

    return handler


def _aten_filter(op, size_in: int, size_out: int, axis: int, align_corners: bool, factor) -> np.ndarray | None:
    """The [out, in] weights of ATen's antialiased resize `op` along spatial `axis` (0: height, 1: width), read
    from ATen itself: the op applied to the identity, one input position a batch, in float32 as its kernels
    weigh a float32 image. The other axis is 2 wide (ATen's kernels are wrong when it is 1: every output
    row then takes the first row's weights). None where it leaves the axis as it is."""
    import torch

    identity = torch.eye(size_in, dtype=torch.float32)
    shape, sizes, scales = [size_in, 1, 2, 2], [2, 2], [None, None]
    shape[2 + axis], sizes[axis], scales[axis] = size_in, size_out, factor
    probe = identity.reshape(size_in, 1, *([size_in, 1] if axis == 0 else [1, size_in])).expand(shape)
    out = op(probe.contiguous(), sizes, align_corners, *scales)
    matrix = (out[:, 0, :, 0] if axis == 0 else out[:, 0, 0, :]).T.double().numpy()
    return None if size_in == size_out and np.array_equal(matrix, np.eye(size_in)) else matrix


def _antialiased_upsample(mode: str):
    """_upsample_bilinear2d_aa and _upsample_bicubic2d_aa (F.interpolate's antialias=True, torchvision's Resize on
    tensors): each spatial axis filtered by ATen's own weights (`_aten_filter`), as gathers of the taps each
    output reads, or a matrix product past `compose.MAX_GATHERED_TAPS`."""
    def handler(cv, node, x, *args, **kwargs):
        import torch  # here, not at import: the importer loads without torch until a program comes

        op = getattr(torch.ops.aten, f"_upsample_{mode}2d_aa").default
        shape, factors, align_corners = _resize_arguments(cv, node, x)
        for axis in (0, 1):
            matrix = _aten_filter(op, x.type.shape[2 + axis], shape[2 + axis], axis, align_corners, factors[axis])
            if matrix is not None:
                x = C.resample_matrix(cv.b, x, 2 + axis, matrix)
        return x

    return handler


HANDLERS["upsample_nearest1d"] = HANDLERS["upsample_nearest2d"] = _upsample("nearest")
HANDLERS["_upsample_nearest_exact1d"] = HANDLERS["_upsample_nearest_exact2d"] = _upsample("nearest-exact")
HANDLERS["upsample_bilinear2d"] = _upsample("bilinear")
HANDLERS["_upsample_bilinear2d_aa"] = _antialiased_upsample("bilinear")
HANDLERS["_upsample_bicubic2d_aa"] = _antialiased_upsample("bicubic")


@handles("flip")
def _flip(cv, node, x, dims):
    return C.reverse(cv.b, x, sorted({C.normalize_axis(d, x.type.rank) for d in dims}))


@handles("repeat")
def _repeat(cv, node, x, repeats):
    x = cv.reshape(x, (1,) * (len(repeats) - x.type.rank) + x.type.shape)  # more repeats than dims: ones lead
    return C.tile(cv.b, x, repeats)


@handles("constant_pad_nd")
def _constant_pad(cv, node, x, pad, value=0):
    rank = x.type.rank
    low, high = [0] * rank, [0] * rank
    for i in range(len(pad) // 2):
        low[rank - 1 - i], high[rank - 1 - i] = pad[2 * i], pad[2 * i + 1]
    if any(p < 0 for p in low + high):
        raise UnsupportedOpError("negative padding is not supported")
    return cv.b.op("rt.pad", [x], {"low": tuple(low), "high": tuple(high), "value": float(value)})


def _filled(cv, node, value):
    shape, dtype = cv.out_type(node)
    if any(isinstance(d, Sym) for d in shape):  # as big as an input: a broadcast scalar
        return cv.b.op("rt.broadcast", [cv.b.constant(np.array(value, dtype=dtype.np_dtype))], {"shape": shape})
    return cv.b.constant(np.full(shape, value, dtype=dtype.np_dtype))


@handles("full")
def _full(cv, node, size, value, **kwargs):
    return _filled(cv, node, value)


@handles("full_like")
def _full_like(cv, node, x, value, **kwargs):
    return _filled(cv, node, value)


@handles("zeros", "zeros_like", "new_zeros", "empty", "empty_like", "new_empty", "empty_strided")
def _zeros(cv, node, *args, **kwargs):
    return _filled(cv, node, 0)


@handles("ones", "ones_like", "new_ones")
def _ones(cv, node, *args, **kwargs):
    return _filled(cv, node, 1)


@handles("scalar_tensor")
def _scalar_tensor(cv, node, value, **kwargs):
    return _filled(cv, node, value)


@handles("arange")
def _arange(cv, node, *args, **kwargs):
    shape, dtype = cv.out_type(node)
    if any(isinstance(d, Sym) for d in shape):  # a length known at run time: start + step * iota
        bounds = [a for a in args if isinstance(a, (int, float, Sym))]
        start, step = (bounds[0] if len(bounds) > 1 else 0), (bounds[2] if len(bounds) > 2 else 1)
        if isinstance(start, Sym) or isinstance(step, Sym):
            raise UnsupportedOpError("arange whose start or step is known only at run time")
        y = cv.b.op("rt.iota", [], {"shape": shape, "axis": 0, "dtype": dtype.name})
        if step != 1:
            y = cv.b.op("rt.mul", [y, C.scalar(cv.b, step, y)])
        return cv.b.op("rt.add", [y, C.scalar(cv.b, start, y)]) if start else y
    numbers = [a for a in args if isinstance(a, (int, float))]
    start, end, step = (0, numbers[0], 1) if len(numbers) == 1 else (numbers + [1])[:3]
    return cv.b.constant(np.arange(start, end, step).astype(dtype.np_dtype).reshape(shape))


@handles("scaled_dot_product_attention", "_scaled_dot_product_flash_attention_for_cpu")
def _sdpa(cv, node, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, *rest, scale=None, **kwargs):
    y = C.attention(cv.b, q, k, v, attn_mask if isinstance(attn_mask, Value) else None, is_causal, scale)
    return y if "flash" not in str(node.target) else _Multi((y, None))


# registers the handlers of PT2E's quantize/dequantize ops, and of the training IR's own ops
from . import torch_quant, torch_training_ir  # noqa: E402,F401
