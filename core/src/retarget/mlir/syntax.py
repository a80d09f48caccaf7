"""MLIR text syntax: the lexer and the generic parser, shared by every MLIR reader.

`parse(text, filename)` returns the file's top-level ops as `MOp` trees, exactly as
written: no dialect is interpreted here. Ops in MLIR's generic form
(`"dialect.op"(%a) {attrs} : (types) -> types`) parse on their own; an op in its
pretty form needs an entry in `CUSTOM_SYNTAX`, registered by the code that
understands that dialect (our own IR in `ir/parser.py`, the frontends in
`importers/mlir/`). Errors carry file:line:col.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import ParseError
from ..ir.core import DenseAttr, Location, TensorType
from ..ir.dtypes import DType
from ..ir.dtypes import dtype as lookup_dtype
from ..registry import registrar


@dataclass
class OpaqueType:
    """A type retarget does not model (`!tosa.shape<4>`, `index` vectors, ...), kept as text."""

    text: str

    def __str__(self) -> str:
        return self.text


@dataclass
class FunctionType:
    inputs: list
    results: list


@dataclass(frozen=True)
class AffineMap:
    """`affine_map<(d0, d1)[s0] -> (d0 + s0, 0)>`; results are expression trees.

    An expression is ("dim", i), ("sym", i), ("const", c) or (op, lhs, rhs) with op
    in add, mul, floordiv, ceildiv, mod.
    """

    num_dims: int
    num_symbols: int
    results: tuple

    def dim_positions(self) -> list[int | None]:
        """For each result, the dim it reads when it is a plain dim, else None."""
        return [r[1] if r[0] == "dim" else None for r in self.results]


@dataclass
class OpaqueAttr:
    """An attribute kept as its text, e.g. `#tosa<...>` or a dialect enum."""

    text: str


@dataclass
class SymbolRef:
    name: str


@dataclass
class MBlock:
    args: list[tuple[str, object]] = field(default_factory=list)
    ops: list[MOp] = field(default_factory=list)
    label: str | None = None


@dataclass
class MOp:
    """An op as written: value ids, types and attributes, before any meaning."""

    name: str
    loc: Location
    results: list[str] = field(default_factory=list)
    operands: list[str] = field(default_factory=list)
    operand_types: list = field(default_factory=list)
    result_types: list = field(default_factory=list)
    attrs: dict = field(default_factory=dict)
    regions: list[list[MBlock]] = field(default_factory=list)


# Pretty-form parsers, keyed by op name. Each reads what follows the op name and
# fills in `op` (operands, types, attrs, regions).
CUSTOM_SYNTAX: dict[str, Callable[[Parser, MOp], None]] = {}


custom_syntax = registrar(CUSTOM_SYNTAX)


_BARE_ID = re.compile(r"[A-Za-z_][A-Za-z0-9_$.]*")
_SUFFIX_ID = re.compile(r"[A-Za-z0-9_$.\-]+")
_NUMBER = re.compile(r"[-+]?(0x[0-9A-Fa-f]+|\d+(\.\d*)?([eE][-+]?\d+)?|\.\d+([eE][-+]?\d+)?)")
_DIMS = re.compile(r"((?:\d+|\?)x)*")
_SCALAR_TYPE = re.compile(r"(bf16|f16|f32|f64|tf32|f[48]E\w+|i\d+|si\d+|ui\d+|index|none)\b")

# Brackets, types and regions inside each other: deeper text is refused with a ParseError
# rather than running out of Python stack (real models nest a dozen levels at most).
MAX_NESTING = 100
# A splat (`dense<0.0> : tensor<...>`) is a few bytes of text for any size; larger ones are refused.
MAX_SPLAT_BYTES = 1 << 30
MAX_DIM = 2**63 - 1  # MLIR dimensions are int64


class _TooDeep(ParseError):
    """Nesting past MAX_NESTING: reported as it is, not as whatever an enclosing rule expected."""


class Parser:
    def __init__(self, text: str, filename: str = "<string>"):
        self.text = text
        self.filename = filename
        self.pos = 0
        self._line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self.attr_aliases: dict[str, object] = {}
        self.type_aliases: dict[str, object] = {}
        self.resources: dict[str, bytes] = {}
        self.depth = 0  # of brackets, types and regions being read

    # -- positions and errors -------------------------------------------------------
    def location(self, pos: int | None = None) -> Location:
        pos = self.pos if pos is None else pos
        line = bisect.bisect_right(self._line_starts, pos) - 1
        return Location(self.filename, line + 1, pos - self._line_starts[line] + 1)

    def error(self, message: str, pos: int | None = None, hint: str | None = None) -> ParseError:
        return ParseError(message, location=str(self.location(pos)), hint=hint)

    def enter(self) -> None:
        """One level deeper (a bracket, a type, a region); pair it with `leave` in a `finally`."""
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise _TooDeep(f"nested more than {MAX_NESTING} levels deep", location=str(self.location()),
                           hint="brackets, types or regions inside each other; is a bracket unclosed?")

    def leave(self) -> None:
        self.depth -= 1

    # -- characters ------------------------------------------------------------------
    def skip(self):
        text, n = self.text, len(self.text)
        while self.pos < n:
            c = text[self.pos]
            if c in " \t\r\n":
                self.pos += 1
            elif text.startswith("//", self.pos):
                end = text.find("\n", self.pos)
                self.pos = n if end < 0 else end + 1
            else:
                break

    def at_end(self) -> bool:
        self.skip()
        return self.pos >= len(self.text)

    def peek(self, s: str) -> bool:
        self.skip()
        return self.text.startswith(s, self.pos)

    def peek_keyword(self, word: str) -> bool:
        self.skip()
        m = _BARE_ID.match(self.text, self.pos)
        return bool(m) and m.group() == word

    def accept(self, s: str) -> bool:
        if self.peek(s):
            self.pos += len(s)
            return True
        return False

    def accept_keyword(self, word: str) -> bool:
        if self.peek_keyword(word):
            self.pos += len(word)
            return True
        return False

    def expect(self, s: str):
        if not self.accept(s):
            raise self.error(f"expected '{s}', found {self.found()}")

    def expect_keyword(self, word: str):
        if not self.accept_keyword(word):
            raise self.error(f"expected '{word}', found {self.found()}")

    def found(self) -> str:
        self.skip()
        if self.pos >= len(self.text):
            return "end of file"
        return repr(self.text[self.pos:self.pos + 12].split("\n")[0])

    def _match(self, pattern: re.Pattern) -> str | None:
        self.skip()
        m = pattern.match(self.text, self.pos)
        if not m or not m.group():
            return None
        self.pos = m.end()
        return m.group()

    # -- tokens ------------------------------------------------------------------------
    def bare_id(self) -> str:
        word = self._match(_BARE_ID)
        if word is None:
            raise self.error(f"expected an identifier, found {self.found()}")
        return word

    def string(self) -> str:
        self.skip()
        if not self.peek('"'):
            raise self.error(f"expected a string, found {self.found()}")
        start = self.pos
        self.pos += 1
        out = []
        while self.pos < len(self.text):
            c = self.text[self.pos]
            if c == '"':
                self.pos += 1
                return "".join(out)
            if c == "\\":
                nxt = self.text[self.pos + 1:self.pos + 3]
                if nxt[:1] in ('"', "\\"):
                    out.append(nxt[0])
                    self.pos += 2
                elif nxt[:1] == "n":
                    out.append("\n")
                    self.pos += 2
                elif re.fullmatch(r"[0-9A-Fa-f]{2}", nxt):
                    out.append(chr(int(nxt, 16)))
                    self.pos += 3
                else:
                    raise self.error(f"invalid escape '\\{nxt[:1]}' in a string", self.pos,
                                     hint='escapes are \\", \\\\, \\n and two hex digits such as \\0A')
                continue
            out.append(c)
            self.pos += 1
        raise self.error("unterminated string", start)

    def number(self) -> int | float:
        tok = self._match(_NUMBER)
        if tok is None:
            raise self.error(f"expected a number, found {self.found()}")
        body = tok.lstrip("+-")
        if body.startswith("0x"):
            value = int(body, 16)
            return -value if tok.startswith("-") else value
        if any(c in tok for c in ".eE"):
            return float(tok)
        return int(tok)

    def integer(self) -> int:
        start = self.pos
        value = self.number()
        if not isinstance(value, int):
            raise self.error(f"expected an integer, found {value}", start)
        return value

    def value_id(self) -> str:
        self.skip()
        if not self.peek("%"):
            raise self.error(f"expected an SSA value like %0, found {self.found()}")
        self.pos += 1
        name = self._match(_SUFFIX_ID)
        if name is None:
            raise self.error("expected a value name after '%'")
        ident = "%" + name
        if self.text.startswith("#", self.pos):
            self.pos += 1
            ident += "#" + str(self.integer())
        return ident

    def symbol(self) -> str:
        self.expect("@")
        if self.peek('"'):
            return self.string()
        name = self._match(_SUFFIX_ID)
        if name is None:
            raise self.error("expected a symbol name after '@'")
        return name

    def comma_list(self, item, close: str | None = None) -> list:
        """Items separated by commas; stops before `close` when given (which may follow at once)."""
        if close is not None and self.peek(close):
            return []
        items = [item()]
        while self.accept(","):
            items.append(item())
        return items

    def delimited(self, open_: str, item, close: str) -> list:
        self.expect(open_)
        self.enter()
        try:
            items = self.comma_list(item, close)
        finally:
            self.leave()
        self.expect(close)
        return items

    # -- types -------------------------------------------------------------------------
    def function_type(self) -> FunctionType:
        """`(inputs) -> results`, and nothing else."""
        self.skip()
        pos = self.pos
        t = self.type()
        if not isinstance(t, FunctionType):
            raise self.error(f"expected a function type '(inputs) -> results', found {_describe(t)}", pos)
        return t

    def type(self):
        self.skip()
        start = self.pos
        if self.peek("("):
            inputs = self.delimited("(", self.type, ")")
            if self.accept("->"):
                results = self.delimited("(", self.type, ")") if self.peek("(") else [self.type()]
                return FunctionType(inputs, results)
            return inputs  # a parenthesised type list
        if self.accept("!"):
            name = self._match(_SUFFIX_ID) or ""
            if name in self.type_aliases:
                return self.type_aliases[name]
            body = self._balanced("<", ">") if self.peek("<") else ""
            return OpaqueType("!" + name + body)
        if self.accept_keyword("tensor") or self.accept_keyword("vector") or self.accept_keyword("memref"):
            kind = self.text[start:self.pos].strip()
            self.enter()
            try:
                return self._shaped(kind, start)
            finally:
                self.leave()
        word = self._match(_SCALAR_TYPE)
        if word is None:
            raise self.error(f"expected a type, found {self.found()}")
        if word == "none":
            return OpaqueType("none")
        return self._scalar(word, start)

    def _scalar(self, word: str, pos: int) -> DType:
        try:
            return lookup_dtype(word)
        except KeyError as e:
            raise self.error(str(e.args[0]), pos) from None

    def _shaped(self, kind: str, start: int):
        self.expect("<")
        self.skip()
        if self.accept("*"):
            raise self.error(f"unranked {kind} types are not supported; give the shape", start)
        dims_text = _DIMS.match(self.text, self.pos).group()
        dims = tuple(None if d == "?" else int(d) for d in dims_text.split("x")[:-1])
        if math.prod(d for d in dims if d) > MAX_DIM // 8:  # numpy indexes bytes with int64, zeros or not
            raise self.error(f"{kind}<{dims_text}...> has more elements than fit in 64 bits", start)
        self.pos += len(dims_text)
        elem_pos = self.pos
        elem = self.type()
        if not isinstance(elem, DType):
            raise self.error(f"unsupported element type {elem}", elem_pos)
        if self.accept(","):  # an encoding or layout: kept out of the type
            self.attribute()
        self.expect(">")
        if kind != "tensor":
            return OpaqueType(self.text[start:self.pos])
        return TensorType(dims, elem)

    def _balanced(self, open_: str, close: str) -> str:
        """Raw text from `open_` to its matching `close`, strings respected."""
        self.skip()
        start = self.pos
        depth = 0
        pairs = {"<": ">", "(": ")", "[": "]", "{": "}"}
        closers = {v: k for k, v in pairs.items()}
        while self.pos < len(self.text):
            c = self.text[self.pos]
            if c == '"':
                self.string()
                continue
            if c == "-" and self.text.startswith("->", self.pos):
                self.pos += 2
                continue
            if c in pairs:
                depth += 1
            elif c in closers:
                depth -= 1
                if depth == 0:
                    self.pos += 1
                    return self.text[start:self.pos]
            self.pos += 1
        raise self.error(f"unbalanced '{open_}'", start)

    # -- attributes ---------------------------------------------------------------------
    def attribute(self, expected_type=None):
        self.skip()
        start = self.pos
        c = self.text[self.pos:self.pos + 1]
        if c == '"':
            value = self.string()
            if self.accept(":"):
                self.type()
            return value
        if c == "[":
            return self.delimited("[", self.attribute, "]")
        if c == "{":
            return self.attr_dict()
        if c == "@":
            return SymbolRef(self.symbol())
        if c == "#":
            self.pos += 1
            name = self._match(_SUFFIX_ID) or ""
            if name in self.attr_aliases and not self.peek("<"):
                return self.attr_aliases[name]
            body = self._balanced("<", ">") if self.peek("<") else ""
            return _enum_value(name, body)
        if c in "-+0123456789.":
            value = self.number()
            if self.accept(":"):
                return _typed_number(value, self.type(), self, start)
            return value
        if self.peek_keyword("true") or self.peek_keyword("false"):
            return self.bare_id() == "true"
        if self.peek_keyword("unit"):
            self.bare_id()
            return True
        if self.peek_keyword("dense"):
            return self._dense(start)
        if self.peek_keyword("dense_resource"):
            self.bare_id()
            self.expect("<")
            name = self._match(_SUFFIX_ID)
            self.expect(">")
            self.expect(":")
            return _ResourceRef(name, self._type_of_elements())
        if self.peek_keyword("array"):
            self.bare_id()
            self.expect("<")
            elem = self.type()
            values = []
            if self.accept(":"):
                values = self.comma_list(self.number, ">")
            self.expect(">")
            if isinstance(elem, DType) and elem.is_float:
                return tuple(float(v) for v in values)
            if isinstance(elem, DType) and elem.kind == "bool":
                return tuple(bool(v) for v in values)
            return tuple(int(v) for v in values)
        if self.peek_keyword("affine_map"):
            self.bare_id()
            return self._affine_map()
        if self.peek_keyword("loc"):
            self.bare_id()
            return OpaqueAttr("loc" + self._balanced("(", ")"))
        if self.peek_keyword("sparse") or self.peek_keyword("strided") or self.peek_keyword("distinct"):
            word = self.bare_id()
            return OpaqueAttr(word + self._balanced("<", ">"))
        try:
            return self.type()  # a type attribute
        except _TooDeep:
            raise
        except ParseError:
            raise self.error(f"expected an attribute, found {self.found()}", start) from None

    def attr_dict(self) -> dict:
        attrs = {}

        def entry():
            key = self.string() if self.peek('"') else self.bare_id()
            attrs[key] = self.attribute() if self.accept("=") else True

        self.delimited("{", entry, "}")
        return attrs

    def optional_attrs(self, op: MOp) -> None:
        """An attribute dictionary `{...}` if one follows, merged into `op.attrs`."""
        if self.peek("{"):
            op.attrs.update(self.attr_dict())

    def _type_of_elements(self) -> TensorType:
        self.skip()
        pos = self.pos
        # a vector-typed constant (older linalg strides/dilations) holds the same elements
        t = self._shaped("tensor", pos) if self.accept_keyword("vector") else self.type()
        if not isinstance(t, TensorType):
            raise self.error(f"expected a tensor type for the elements, found {t}", pos)
        return t

    def _dense(self, start: int):
        self.bare_id()
        self.expect("<")
        self.skip()
        if self.peek('"'):
            literal = ("hex", self.string())
        elif self.peek(">"):
            literal = ("list", [])
        else:
            literal = ("list", self._dense_literal())
        self.expect(">")
        self.expect(":")
        ttype = self._type_of_elements()
        return DenseAttr(_dense_array(literal, ttype, self, start))

    def _dense_literal(self):
        self.skip()
        if self.peek("["):
            return self.delimited("[", self._dense_literal, "]")
        if self.peek("("):  # complex numbers
            raise self.error("complex constants are not supported")
        if self.peek_keyword("true") or self.peek_keyword("false"):
            return self.bare_id() == "true"
        if self.peek_keyword("inf") or self.peek_keyword("nan"):
            return float(self.bare_id())
        start = self.pos
        value = self.number()
        if isinstance(value, int) and self.text[start:self.pos].lstrip("+-").startswith("0x"):
            return _HexBits(value)  # a float's bit pattern, e.g. dense<0xFF800000> : tensor<f32> is -inf
        return value

    def _affine_map(self) -> AffineMap:
        self.expect("<")
        dims = self.delimited("(", self.bare_id, ")")
        syms = self.delimited("[", self.bare_id, "]") if self.peek("[") else []
        self.expect("->")
        names = {d: ("dim", i) for i, d in enumerate(dims)} | {s: ("sym", i) for i, s in enumerate(syms)}
        results = self.delimited("(", lambda: self._affine_expr(names), ")")
        self.expect(">")
        return AffineMap(len(dims), len(syms), tuple(results))

    _AFFINE_OPS = {"+": ("add", 1), "-": ("sub", 1), "*": ("mul", 2), "floordiv": ("floordiv", 2),
                   "ceildiv": ("ceildiv", 2), "mod": ("mod", 2)}

    def _affine_expr(self, names, min_prec=1):
        lhs = self._affine_atom(names)
        while True:
            self.skip()
            op = next((o for o in self._AFFINE_OPS if (self.peek_keyword(o) if o.isalpha() else self.peek(o))), None)
            if op is None or (op == "-" and self.peek("->")):
                return lhs
            kind, prec = self._AFFINE_OPS[op]
            if prec < min_prec:
                return lhs
            self.pos += len(op)
            rhs = self._affine_expr(names, prec + 1)
            lhs = ("add", lhs, ("mul", rhs, ("const", -1))) if kind == "sub" else (kind, lhs, rhs)

    def _affine_atom(self, names):
        self.skip()
        if self.peek("(") or self.peek("-"):
            self.enter()
            try:
                if self.accept("("):
                    e = self._affine_expr(names)
                    self.expect(")")
                    return e
                self.expect("-")
                return ("mul", self._affine_atom(names), ("const", -1))
            finally:
                self.leave()
        if self.text[self.pos:self.pos + 1].isdigit():
            return ("const", self.integer())
        pos = self.pos
        name = self.bare_id()
        if name not in names:
            raise self.error(f"unknown affine identifier '{name}'", pos)
        return names[name]

    # -- ops, blocks, regions --------------------------------------------------------------
    def op(self) -> MOp:
        self.skip()
        start = self.pos
        results = []
        if self.peek("%"):
            for rid in self.comma_list(self.value_id):
                if self.accept(":"):
                    count = self.integer()
                    results += [f"{rid}#{i}" for i in range(count)]
                else:
                    results.append(rid)
            self.expect("=")
        self.skip()
        op_pos = self.pos
        if self.peek('"'):
            op = MOp(self.string(), self.location(op_pos), results)
            self._generic_body(op)
        else:
            name = self.bare_id()
            op = MOp(name, self.location(op_pos), results)
            handler = CUSTOM_SYNTAX.get(name) or CUSTOM_SYNTAX.get(name.split(".")[0] + ".*")
            if handler is None:
                dialect = name.split(".")[0] if "." in name else name
                raise self.error(
                    f"unsupported op '{name}'",
                    op_pos,
                    hint=f"no reader for the '{dialect}' dialect's op '{name}'; "
                    "core/README.md's 'What the importers cover' lists the supported ops",
                )
            handler(self, op)
        self._trailing_location()
        if start == self.pos:
            raise self.error(f"expected an op, found {self.found()}")
        return op

    def _trailing_location(self):
        if self.peek_keyword("loc"):
            self.bare_id()
            self._balanced("(", ")")

    def _generic_body(self, op: MOp):
        op.operands = self.delimited("(", self.value_id, ")")
        if self.peek("["):  # successors
            self._balanced("[", "]")
        if self.peek("<"):  # properties
            self.expect("<")
            op.attrs.update(self.attr_dict())
            self.expect(">")
        if self.accept("("):
            op.regions = self.comma_list(self.region, ")")
            self.expect(")")
        if self.peek("{"):
            op.attrs.update(self.attr_dict())
        self.expect(":")
        ftype = self.function_type()
        op.operand_types, op.result_types = ftype.inputs, ftype.results

    def region(self) -> list[MBlock]:
        self.expect("{")
        self.enter()
        try:
            return self._region_body()
        finally:
            self.leave()

    def _region_body(self) -> list[MBlock]:
        blocks = [MBlock()]
        while not self.accept("}"):
            if self.at_end():
                raise self.error("unterminated region: missing '}'")
            if self.peek("^"):
                self.pos += 1
                label = self._match(_SUFFIX_ID)
                args = []
                if self.accept("("):
                    args = self.comma_list(self.typed_value, ")")
                    self.expect(")")
                self.expect(":")
                block = MBlock(args, [], label)
                if blocks[-1].ops or blocks[-1].args or blocks[-1].label:
                    blocks.append(block)
                else:
                    blocks[-1] = block
                continue
            blocks[-1].ops.append(self.op())
        return blocks

    def typed_value(self) -> tuple[str, object]:
        vid = self.value_id()
        self.expect(":")
        t = self.type()
        self._trailing_location()
        return vid, t

    # -- top level ----------------------------------------------------------------------------
    def parse_top(self) -> list[MOp]:
        ops = []
        while not self.at_end():
            if self.peek("{-#"):
                self._resources()
            elif self.peek("#") or self.peek("!"):
                self._alias()
            elif self.peek_keyword("module") or self.peek_keyword("builtin.module"):
                pos = self.pos
                self.bare_id()
                if self.peek("@"):
                    self.symbol()
                if self.accept_keyword("attributes"):
                    self.attr_dict()
                for block in self.region():
                    ops.extend(block.ops)
                self._trailing_location()
                del pos
            else:
                ops.append(self.op())
        return ops

    def _alias(self):
        is_type = self.peek("!")
        self.pos += 1
        name = self._match(_SUFFIX_ID)
        self.expect("=")
        if is_type:
            self.type_aliases[name] = self.type()
        else:
            self.attr_aliases[name] = self.attribute()

    def _resources(self):
        self.expect("{-#")
        while not self.accept("#-}"):
            if self.at_end():
                raise self.error("unterminated '{-#' resource section")
            key = self.bare_id()
            self.expect(":")
            self.expect("{")
            while not self.accept("}"):
                dialect = self.bare_id()
                self.expect(":")
                self.expect("{")

                def blob(key=key):
                    name = self._match(_SUFFIX_ID) if not self.peek('"') else self.string()
                    self.expect(":")
                    pos = self.pos
                    text = self.string()
                    if key == "dialect_resources":
                        self.resources[name] = _hex_bytes(text, self, pos)[4:]  # alignment header

                self.comma_list(blob, "}")
                self.expect("}")
                self.accept(",")
                del dialect
            self.accept(",")


@dataclass
class _ResourceRef:
    """A `dense_resource<name>` before the `{-# ... #-}` section has been read."""

    name: str
    type: TensorType


def _describe(t) -> str:
    return f"the type list ({', '.join(map(str, t))})" if isinstance(t, list) else f"'{t}'"


def _enum_value(name: str, body: str):
    """`#linalg.iterator_type<parallel>` -> 'parallel'; other dialect attributes stay opaque."""
    inner = body[1:-1].strip() if body else ""
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", inner):
        return inner
    return OpaqueAttr("#" + name + body)


def _typed_number(value, t, parser: Parser, pos: int):
    if isinstance(t, DType):
        if t.is_float:
            if isinstance(value, int) and parser.text[pos:].lstrip("-+").startswith("0x"):
                return _float_of_bits(value, t, parser, pos)
            return float(value)
        if t.kind == "bool":
            return bool(value)
        return int(value)
    return value


def _hex_bytes(text: str, parser: Parser, pos: int) -> bytes:
    if not text.startswith("0x"):
        raise parser.error("expected a hex string starting with 0x", pos)
    try:
        return bytes.fromhex(text[2:])
    except ValueError:
        raise parser.error("malformed hex string", pos) from None


class _HexBits(int):
    """An integer written in hex inside `dense<...>`: for float elements it is the bit pattern."""


def _has_hex_bits(payload) -> bool:
    if isinstance(payload, list):
        return any(_has_hex_bits(p) for p in payload)
    return isinstance(payload, _HexBits)


def _hex_bits_to_float(payload, dt: DType, parser: Parser, pos: int):
    if isinstance(payload, list):
        return [_hex_bits_to_float(p, dt, parser, pos) for p in payload]
    return _float_of_bits(int(payload), dt, parser, pos) if isinstance(payload, _HexBits) else payload


def _float_of_bits(bits: int, dt: DType, parser: Parser, pos: int) -> float:
    """The float of `dt` whose bit pattern is `bits` (MLIR's `0x7F800000 : f32`)."""
    if not 0 <= bits < 1 << dt.bits:
        raise parser.error(f"the bit pattern {bits:#x} does not fit a {dt.bits}-bit {dt.name}", pos)
    uint = {4: np.uint8, 8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}[dt.bits]
    return float(np.array(bits, dtype=uint).view(dt.np_dtype))


def _dense_array(literal, ttype: TensorType, parser: Parser, pos: int) -> np.ndarray:
    np_dtype = ttype.dtype.np_dtype
    if not ttype.is_static:
        raise parser.error(f"constant of dynamic type {ttype}", pos)
    kind, payload = literal
    if kind == "hex":
        raw = _hex_bytes(payload, parser, pos)
        return _array_from_bytes(raw, ttype, parser, pos)
    if ttype.dtype.is_float and _has_hex_bits(payload):
        payload = _hex_bits_to_float(payload, ttype.dtype, parser, pos)
    try:
        data = np.array(payload, dtype=np.float64 if ttype.dtype.is_float else object)
    except (ValueError, OverflowError, TypeError):  # ragged rows, or integers past float64
        raise parser.error(f"the literal is not a {ttype.rank}-d array of numbers for {ttype}", pos) from None
    try:
        data = data.astype(np_dtype)
    except (ValueError, OverflowError, TypeError):
        raise parser.error(f"values do not fit {ttype.dtype}", pos) from None
    if data.shape == ():
        return _splat(data, ttype, parser, pos)
    if data.shape != ttype.shape:
        if data.size == ttype.num_elements and data.ndim == 1 and ttype.rank == 0:
            return data.reshape(())
        raise parser.error(f"literal of shape {list(data.shape)} does not match {ttype}", pos)
    return data


def _splat(value, ttype: TensorType, parser: Parser, pos: int) -> np.ndarray:
    if ttype.nbytes > MAX_SPLAT_BYTES:
        raise parser.error(f"the splat constant {ttype} would take {ttype.nbytes:,} bytes, more than the "
                           f"{MAX_SPLAT_BYTES:,} retarget materializes", pos,
                           hint="feed a tensor this large as a function argument")
    try:
        return np.full(ttype.shape, value, dtype=ttype.dtype.np_dtype)
    except (ValueError, MemoryError) as e:  # numpy's own limits, e.g. 0x(2^62)x4 overflows its index type
        raise parser.error(f"cannot make the splat constant {ttype}: {e}", pos) from None


def _array_from_bytes(raw: bytes, ttype: TensorType, parser: Parser, pos: int) -> np.ndarray:
    np_dtype = ttype.dtype.np_dtype
    if ttype.dtype.kind == "bool":
        flat = np.frombuffer(raw, dtype=np.uint8).astype(np.bool_)
    elif ttype.dtype.bits in (2, 4):  # packed, the first element in the low bits
        bits = ttype.dtype.bits
        packed = np.frombuffer(raw, dtype=np.uint8)
        shifts = bits * np.arange(8 // bits, dtype=np.uint8)
        flat = ((packed[:, None] >> shifts) & ((1 << bits) - 1)).astype(np.uint8).reshape(-1).view(np_dtype)
    else:
        if len(raw) % np_dtype.itemsize:
            raise parser.error(f"{len(raw)} bytes is not a whole number of {ttype.dtype} elements", pos)
        flat = np.frombuffer(raw, dtype=np_dtype)
    if flat.size == 1 and ttype.num_elements != 1:
        return _splat(flat[0], ttype, parser, pos)
    if flat.size < ttype.num_elements:
        raise parser.error(f"constant holds {flat.size} elements, {ttype} needs {ttype.num_elements}", pos)
    return flat[: ttype.num_elements].reshape(ttype.shape).copy()


def resolve_resources(ops: list[MOp], parser: Parser):
    """Replace each `dense_resource<name>` with its array, now that the blobs are read."""

    def fix(value):
        if isinstance(value, _ResourceRef):
            raw = parser.resources.get(value.name)
            if raw is None:
                raise ParseError(
                    f"dense_resource<{value.name}> has no blob in the file's dialect_resources",
                    location=parser.filename,
                    hint="the file was probably printed with elided resources; print it with them",
                )
            return DenseAttr(_array_from_bytes(raw, value.type, parser, 0), resource=value.name)
        if isinstance(value, list):
            return [fix(v) for v in value]
        if isinstance(value, dict):
            return {k: fix(v) for k, v in value.items()}
        return value

    def walk(op_list):
        for op in op_list:
            op.attrs = fix(op.attrs)
            for region in op.regions:
                for block in region:
                    walk(block.ops)

    walk(ops)


def read_source(path) -> str:
    """A source file's text. Bytes that are not UTF-8 are a ParseError at their line and column."""
    data = Path(path).read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        col = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise ParseError(f"byte 0x{data[e.start]:02X} is not UTF-8 text", location=f"{path}:{line}:{col}",
                         hint="MLIR files are UTF-8") from None


def parse_type(text: str, filename: str = "<string>"):
    """One type, e.g. `tensor<2x3xf32>`, that is the whole of `text`."""
    parser = Parser(text, filename)
    t = parser.type()
    if not parser.at_end():
        raise parser.error(f"unexpected {parser.found()} after the type")
    return t


def parse(text: str, filename: str = "<string>") -> tuple[list[MOp], Parser]:
    """Parse MLIR text into top-level `MOp`s; the parser keeps aliases and resources."""
    parser = Parser(text, filename)
    ops = parser.parse_top()
    resolve_resources(ops, parser)
    return ops, parser


# -- func: every MLIR file has functions ---------------------------------------------------


@custom_syntax("func.func")
def _func(p: Parser, op: MOp):
    if p.peek_keyword("private") or p.peek_keyword("public") or p.peek_keyword("nested"):
        op.attrs["sym_visibility"] = p.bare_id()
    op.attrs["sym_name"] = p.symbol()
    p.expect("(")
    args, arg_attrs = [], []

    def arg():
        if p.peek("%"):
            args.append(p.typed_value())
        else:
            args.append((None, p.type()))
        arg_attrs.append(p.attr_dict() if p.peek("{") else {})
        p._trailing_location()

    p.comma_list(arg, ")")
    p.expect(")")
    results = []
    if p.accept("->"):
        def result():
            results.append(p.type())
            if p.peek("{"):
                p.attr_dict()

        if p.accept("("):
            p.comma_list(result, ")")
            p.expect(")")
        else:
            results.append(p.type())  # a lone result cannot carry attributes
    op.attrs["function_type"] = FunctionType([t for _, t in args], results)
    op.attrs["arg_attrs"] = arg_attrs
    if p.accept_keyword("attributes"):
        op.attrs.update(p.attr_dict())
    if p.peek("{"):
        op.regions = [p.region()]
        op.regions[0][0].args = args


@custom_syntax("func.return", "return")
def _return(p: Parser, op: MOp):
    if not p.peek("%"):
        return
    op.operands = p.comma_list(p.value_id)
    p.expect(":")
    op.operand_types = p.comma_list(p.type)
