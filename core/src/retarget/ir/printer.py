"""Print the graph IR as MLIR generic-form text, which `parser.py` reads back exactly.

Symbolic dimensions print as `?` in types, as MLIR has it. What each `?` is, is kept beside:
an argument's `{rt.dims = ["batch"]}` lists the expressions of its `?`s in order, the function's
`attributes {rt.symbols = {batch = "1..64"}}` their symbols' ranges, and shape attributes write
symbolic entries as strings (`shape = [1, "seq", 16]`). Every other type follows from these.
"""

from __future__ import annotations

import math

import numpy as np

from .core import DenseAttr, Function, Module, TensorType
from .dtypes import from_numpy
from .symbolic import Sym

INLINE_ELEMENTS = 16  # larger constants go to the dialect_resources section


def format_attr(value, blobs: dict | None = None, elide: bool = False) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"{value} : i64"
    if isinstance(value, float):
        return f"{_float(value)} : f64"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, tuple):
        if any(isinstance(v, Sym) for v in value):  # a shape with symbolic dimensions
            return "[" + ", ".join(f'"{v}"' if isinstance(v, Sym) else str(v) for v in value) + "]"
        if all(isinstance(v, bool) for v in value) and value:
            return f"array<i1: {', '.join('true' if v else 'false' for v in value)}>"
        if all(isinstance(v, int) for v in value):
            return f"array<i64{': ' if value else ''}{', '.join(map(str, value))}>"
        return f"array<f64: {', '.join(_float(float(v)) for v in value)}>"
    if isinstance(value, list):
        return "[" + ", ".join(format_attr(v, blobs, elide) for v in value) + "]"
    if isinstance(value, dict):
        return format_attr_dict(value, blobs, elide)
    if isinstance(value, DenseAttr):
        return _dense(value, blobs, elide)
    if isinstance(value, TensorType):
        return str(value)
    raise TypeError(f"cannot print attribute {value!r}")


def format_attr_dict(attrs: dict, blobs=None, elide=False) -> str:
    items = ", ".join(f"{k} = {format_attr(attrs[k], blobs, elide)}" for k in sorted(attrs))
    return "{" + items + "}"


def _float(x: float) -> str:
    if math.isfinite(x):
        return repr(x)
    return "0x" + np.array(x, dtype=np.float64).view(np.uint64).item().to_bytes(8, "big").hex().upper()


def _dense(attr: DenseAttr, blobs, elide) -> str:
    a, t = attr.array, attr.type
    flat = a.reshape(-1)
    exotic = t.dtype.bits < 8 or (t.dtype.is_float and not np.isfinite(flat.astype(np.float64)).all())
    if flat.size and not exotic and (flat == flat[0]).all():
        return f"dense<{_scalar(flat[0], t)}> : {t}"
    if flat.size <= INLINE_ELEMENTS and not exotic:
        return f"dense<{_nested(a, t)}> : {t}"
    if blobs is None:
        return f'dense<"0x{_raw_bytes(a).hex().upper()}"> : {t}'
    if elide:
        return f"dense_resource<__elided__> : {t}"
    name = attr.resource or f"__c{len(blobs)}"
    while name in blobs and blobs[name] is not attr:
        name += "_"
    blobs[name] = attr
    return f"dense_resource<{name}> : {t}"


def _raw_bytes(a: np.ndarray) -> bytes:
    if a.dtype == np.bool_:
        return a.astype(np.uint8).tobytes()
    bits = from_numpy(a.dtype).bits if a.dtype.kind == "V" else 8
    if bits in (2, 4):  # packed as MLIR and ONNX store them: the first element in the low bits
        per_byte = 8 // bits
        low = np.ascontiguousarray(a).reshape(-1).view(np.uint8) & ((1 << bits) - 1)
        low = np.append(low, np.zeros(-low.size % per_byte, np.uint8)).reshape(-1, per_byte)
        shifted = low << (bits * np.arange(per_byte, dtype=np.uint8))
        return np.bitwise_or.reduce(shifted, axis=1).astype(np.uint8).tobytes()
    return np.ascontiguousarray(a).tobytes()


def _scalar(x, t: TensorType) -> str:
    if t.dtype.kind == "bool":
        return "true" if x else "false"
    if t.dtype.is_float:
        return repr(float(x))
    return str(int(x))


def _nested(a: np.ndarray, t: TensorType) -> str:
    if a.ndim == 0:
        return _scalar(a.item(), t)
    return "[" + ", ".join(_nested(x, t) for x in a) + "]"


def print_function(fn: Function, blobs=None, elide=False, indent="  ") -> str:
    names: dict = {}
    for i, arg in enumerate(fn.args):
        names[arg] = f"%arg{i}"
    sig = []
    for i, arg in enumerate(fn.args):
        arg_attrs = {"rt.name": fn.arg_names[i]} if fn.arg_names else {}
        if not arg.type.is_static:
            arg_attrs["rt.dims"] = [str(d) for d in arg.type.shape if not isinstance(d, int)]
        attrs = f" {format_attr_dict(arg_attrs)}" if arg_attrs else ""
        sig.append(f"{names[arg]}: {arg.type}{attrs}")
    results = ", ".join(str(t) for t in fn.result_types)
    symbols = ""
    if fn.symbols:
        symbols = f" attributes {{rt.symbols = {format_attr_dict({k: str(r) for k, r in fn.symbols.items()})}}}"
    lines = [f"{indent}func.func @{fn.name}({', '.join(sig)}) -> ({results}){symbols} {{"]
    counter = 0
    for op in fn.ops:
        if len(op.results) == 1:
            names[op.results[0]] = f"%{counter}"
            lhs = f"%{counter} = "
        elif op.results:
            for i, r in enumerate(op.results):
                names[r] = f"%{counter}#{i}"
            lhs = f"%{counter}:{len(op.results)} = "
        else:
            lhs = ""
        counter += 1
        operands = ", ".join(names[v] for v in op.operands)
        attrs = f" {format_attr_dict(op.attrs, blobs, elide)}" if op.attrs else ""
        in_types = ", ".join(str(v.type) for v in op.operands)
        out_types = ", ".join(str(r.type) for r in op.results)
        out_types = out_types if len(op.results) == 1 else f"({out_types})"
        lines.append(f'{indent * 2}{lhs}"{op.name}"({operands}){attrs} : ({in_types}) -> {out_types}')
    if fn.returns:
        ret_types = ", ".join(str(v.type) for v in fn.returns)
        lines.append(f"{indent * 2}return {', '.join(names[v] for v in fn.returns)} : {ret_types}")
    else:
        lines.append(f"{indent * 2}return")
    lines.append(f"{indent}}}")
    return "\n".join(lines)


def print_module(module: Module, elide_constants: bool = False) -> str:
    """The module as text. With `elide_constants`, large constants print as
    `dense_resource<__elided__>`: easy to read, but the text no longer parses back."""
    blobs: dict[str, DenseAttr] = {}
    body = "\n\n".join(print_function(fn, blobs, elide_constants) for fn in module.functions.values())
    text = f"module {{\n{body}\n}}\n"
    if blobs and not elide_constants:
        entries = ",\n".join(
            f'      {name}: "0x{(16).to_bytes(4, "little").hex().upper()}{_raw_bytes(a.array).hex().upper()}"'
            for name, a in blobs.items()
        )
        text += f"\n{{-#\n  dialect_resources: {{\n    builtin: {{\n{entries}\n    }}\n  }}\n#-}}\n"
    return text
