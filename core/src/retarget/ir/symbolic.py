"""Symbolic dimensions: sizes known only when a function is called.

A dimension is an `int` or a `Sym`: a polynomial with integer coefficients over named symbols
("batch", "seq"), floor divisions of such polynomials by positive integers, and minimums of two
(a workgroup count capped by a device limit: `dim_min`), so that the shape
rules of every graph op (a convolution's `(h + 2p - k) // s + 1`, a flatten's `batch * 196`) stay
exact. Arithmetic with ints and other `Sym`s gives a `Sym`, or an `int` when the symbols cancel:
shape code written for ints runs unchanged on symbolic shapes. A `Sym` has no order and no truth
value (`<` and `if d:` raise TypeError), so code that would decide something from a size it does
not know fails loudly instead of guessing; `bounds` and `hint` answer those questions explicitly.

Text: `2*seq + 1`, `(h - 1) // 2 + 1`, `batch*seq` (`parse_dim` reads what `str` writes). In tensor
types a symbolic dimension prints as MLIR's `?`; the graph IR keeps its expression in attributes
(see `ir/printer.py`). A symbol's range, `1..64` or `1..` (no upper bound), is a `SymbolRange`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..errors import InputError

DEFAULT_MIN = 1  # a symbolic dimension is at least 1 unless its range says otherwise
SCHEDULE_HINT = 64  # the size a schedule plans for when a symbol has no upper bound


@dataclass(frozen=True)
class FloorDiv:
    """`num // den` for a polynomial `num` that `den` does not divide; an atom of a `Sym`."""

    num: Sym
    den: int

    def __str__(self) -> str:
        num = self.num.name or f"({self.num})"
        return f"({num} // {self.den})"

    @property
    def symbols(self) -> frozenset[str]:
        return self.num.symbols

    def evaluate(self, env) -> int:
        return self.num.evaluate(env) // self.den

    def substitute(self, mapping):
        return substitute(self.num, mapping) // self.den


@dataclass(frozen=True)
class Min:
    """`min(a, b)` of two dimensions that are not both ints; an atom of a `Sym`."""

    a: object  # int | Sym
    b: object

    def __str__(self) -> str:
        return f"min({self.a}, {self.b})"

    @property
    def symbols(self) -> frozenset[str]:
        return symbols_of(self.a, self.b)

    def evaluate(self, env) -> int:
        return min(evaluate(self.a, env), evaluate(self.b, env))

    def substitute(self, mapping):
        return dim_min(substitute(self.a, mapping), substitute(self.b, mapping))


def _atom_key(atom) -> tuple:
    return (0, atom) if isinstance(atom, str) else (1, str(atom))


class Sym:
    """A symbolic dimension; immutable and hashable. Build one with `sym(name)` or `parse_dim`."""

    __slots__ = ("terms", "_hash")

    def __init__(self, terms: tuple):
        self.terms = terms  # ((monomial, coefficient), ...): sorted, no zero coefficients, () is the constant
        self._hash = hash(terms)

    # -- construction -----------------------------------------------------------------------------
    @staticmethod
    def _make(coefficients: dict) -> int | Sym:
        terms = tuple(sorted(((m, c) for m, c in coefficients.items() if c),
                             key=lambda t: (len(t[0]) == 0, [_atom_key(a) for a in t[0]])))
        if not terms:
            return 0
        if len(terms) == 1 and terms[0][0] == ():
            return terms[0][1]
        return Sym(terms)

    def _dict(self) -> dict:
        return dict(self.terms)

    # -- arithmetic -------------------------------------------------------------------------------
    def __add__(self, other):
        other = _lift(other)
        if other is NotImplemented:
            return other
        out = self._dict()
        for m, c in other.terms:
            out[m] = out.get(m, 0) + c
        return Sym._make(out)

    __radd__ = __add__

    def __neg__(self):
        return Sym._make({m: -c for m, c in self.terms})

    def __sub__(self, other):
        other = _lift(other)
        return other if other is NotImplemented else self + (-other)

    def __rsub__(self, other):
        other = _lift(other)
        return other if other is NotImplemented else other + (-self)

    def __mul__(self, other):
        other = _lift(other)
        if other is NotImplemented:
            return other
        out: dict = {}
        for ma, ca in self.terms:
            for mb, cb in other.terms:
                m = tuple(sorted(ma + mb, key=_atom_key))
                out[m] = out.get(m, 0) + ca * cb
        return Sym._make(out)

    __rmul__ = __mul__

    def __floordiv__(self, other):
        if isinstance(other, Sym):
            raise TypeError(f"cannot divide {self} by the symbolic {other}")
        if not isinstance(other, int) or other <= 0:
            return NotImplemented if not isinstance(other, int) else _bad_divisor(self, other)
        if other == 1:
            return self
        exact = {m: c // other for m, c in self.terms if m and c % other == 0}
        rest = {m: c for m, c in self.terms if m and c % other}
        constant = self._dict().get((), 0)
        if not rest:
            return Sym._make(exact) + constant // other
        rest[()] = constant % other
        return Sym._make(exact) + constant // other + Sym._make({(FloorDiv(Sym._make(rest), other),): 1})

    def __rfloordiv__(self, other):
        raise TypeError(f"cannot divide {other} by the symbolic {self}")

    def __mod__(self, other):
        return self - other * (self // other)

    # -- what it is not ------------------------------------------------------------------------------
    def __bool__(self):
        raise TypeError(f"the symbolic dimension {self} has no truth value; compare it with `bounds` or `hint`")

    def _no_order(self, other):
        raise TypeError(f"cannot order the symbolic dimension {self} and {other}; use `bounds` or `hint`")

    __lt__ = __le__ = __gt__ = __ge__ = _no_order

    def __int__(self):
        raise TypeError(f"the symbolic dimension {self} is not an int")

    def __eq__(self, other) -> bool:
        return isinstance(other, Sym) and self.terms == other.terms

    def __hash__(self) -> int:
        return self._hash

    # -- inspection ---------------------------------------------------------------------------------
    @property
    def symbols(self) -> frozenset[str]:
        out = set()
        for m, _ in self.terms:
            for a in m:
                out |= {a} if isinstance(a, str) else a.symbols
        return frozenset(out)

    @property
    def name(self) -> str | None:
        """The symbol's name when this is exactly one symbol, else None."""
        if len(self.terms) == 1 and self.terms[0][1] == 1 and len(self.terms[0][0]) == 1:
            atom = self.terms[0][0][0]
            return atom if isinstance(atom, str) else None
        return None

    def evaluate(self, env: Mapping[str, int]) -> int:
        total = 0
        for m, c in self.terms:
            value = c
            for a in m:
                value *= env[a] if isinstance(a, str) else a.evaluate(env)
            total += value
        return total

    def substitute(self, mapping: Mapping[str, int | Sym]) -> int | Sym:
        total: int | Sym = 0
        for m, c in self.terms:
            value: int | Sym = c
            for a in m:
                value = value * (mapping.get(a, sym(a)) if isinstance(a, str) else a.substitute(mapping))
            total = total + value
        return total

    def __str__(self) -> str:
        out = ""
        for m, c in self.terms:
            atoms = "*".join(a if isinstance(a, str) else str(a) for a in m)
            mag = abs(c)
            text = atoms if mag == 1 and atoms else f"{mag}*{atoms}" if atoms else str(mag)
            out += (" - " if c < 0 else " + ") + text if out else ("-" if c < 0 else "") + text
        if len(self.terms) == 1 and self.terms[0][1] == 1 and len(self.terms[0][0]) == 1 \
                and isinstance(self.terms[0][0][0], FloorDiv):
            out = out[1:-1]  # one floor division alone: `seq // 2`, not `(seq // 2)`
        return out

    def __repr__(self) -> str:
        return f"Sym({str(self)!r})"


def _lift(x):
    if isinstance(x, Sym):
        return x
    if isinstance(x, int) and not isinstance(x, bool):
        return Sym((((), x),)) if x else Sym(())
    try:
        import numpy as np

        if isinstance(x, np.integer):
            return _lift(int(x))
    except ImportError:  # pragma: no cover - numpy is a dependency
        pass
    return NotImplemented


def _bad_divisor(s, d):
    raise ZeroDivisionError(f"cannot divide {s} by {d}")


Dim = int | Sym


def sym(name: str) -> Sym:
    return Sym((((name,), 1),))


def is_symbolic(d) -> bool:
    return isinstance(d, Sym)


def symbols_of(*dims_or_shapes) -> frozenset[str]:
    """Every symbol in the given dimensions, shapes (tuples) and lists of them."""
    out: set[str] = set()
    for x in dims_or_shapes:
        if isinstance(x, Sym):
            out |= x.symbols
        elif isinstance(x, (tuple, list)):
            out |= symbols_of(*x)
    return frozenset(out)


def evaluate(d, env: Mapping[str, int]) -> int:
    return d.evaluate(env) if isinstance(d, Sym) else int(d)


def evaluate_shape(shape, env: Mapping[str, int]) -> tuple[int, ...]:
    return tuple(evaluate(d, env) for d in shape)


def substitute(d, mapping: Mapping[str, int | Sym]):
    """`d` (a dimension, or a tuple/list of them) with symbols replaced."""
    if isinstance(d, Sym):
        return d.substitute(mapping)
    if isinstance(d, tuple):
        return tuple(substitute(x, mapping) for x in d)
    if isinstance(d, list):
        return [substitute(x, mapping) for x in d]
    return d


def ceil_div(a, b: int):
    return (a + b - 1) // b


def dim_min(a, b):
    """min(a, b) of two dimensions: an int when both are, else a `Sym` (its own atom)."""
    if isinstance(a, int) and isinstance(b, int):
        return min(a, b)
    if a == b:
        return a
    return Sym._make({(Min(a, b),): 1})


def divide_exactly(a, b):
    """a / b when b divides a as polynomials (a reshape's -1: `batch*seq*16 / (batch*16)`), else None."""
    if isinstance(b, int):
        if b == 0:
            return None
        if isinstance(a, int):
            return a // b if a % b == 0 else None
        return a // b if all(c % b == 0 for _, c in a.terms) else None
    if len(b.terms) != 1:
        return None
    (monomial, coefficient), = b.terms
    if isinstance(a, int):
        return None
    out = {}
    for m, c in a.terms:
        rest = list(m)
        for atom in monomial:
            if atom not in rest:
                return None
            rest.remove(atom)
        if c % coefficient:
            return None
        out[tuple(rest)] = c // coefficient
    return Sym._make(out)


# -- text --------------------------------------------------------------------------------------------

_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z0-9_]*)|(//|[-+*%(),]))")


def sanitize(name: str) -> str:
    """A symbol name from elsewhere (an ONNX dim_param) as one `parse_dim` reads: word characters only."""
    out = re.sub(r"\W", "_", name.strip()) or "dim"
    return out if not out[0].isdigit() else "_" + out


def format_dim(d) -> str:
    return str(d)


def parse_dim(text: str) -> int | Sym:
    """`2*seq + 1`, `(h - 1) // 2 + 1`, `batch`, `7` -> a dimension; ValueError on anything else."""
    tokens, pos = [], 0
    text = str(text)
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if not m:
            raise ValueError(f"'{text}' is not a dimension expression (at '{text[pos:]}')")
        tokens.append(int(m.group(1)) if m.group(1) else m.group(2) or m.group(3))
        pos = m.end()
    at = 0

    def peek():
        return tokens[at] if at < len(tokens) else None

    def take():
        nonlocal at
        at += 1
        return tokens[at - 1]

    def expr():
        value = term()
        while peek() in ("+", "-"):
            value = value + term() if take() == "+" else value - term()
        return value

    def term():
        value = factor()
        while peek() in ("*", "//", "%"):
            op, rhs = take(), factor()
            if op == "*":
                value = value * rhs
            elif isinstance(rhs, Sym) or rhs <= 0:
                raise ValueError(f"'{text}': can only divide by a positive integer")
            else:
                value = value // rhs if op == "//" else value % rhs
        return value

    def factor():
        t = take() if peek() is not None else None
        if isinstance(t, int):
            return t
        if t == "-":
            return -factor()
        if t == "(":
            value = expr()
            if peek() != ")":
                raise ValueError(f"'{text}': unbalanced parentheses")
            take()
            return value
        if t == "min" and peek() == "(":
            take()
            first = expr()
            if take() != ",":
                raise ValueError(f"'{text}': min takes two arguments")
            second = expr()
            if peek() != ")":
                raise ValueError(f"'{text}': unbalanced parentheses")
            take()
            return dim_min(first, second)
        if isinstance(t, str) and t not in ("+", "-", "*", "%", "(", ")", "//", ","):
            return sym(t)
        raise ValueError(f"'{text}' is not a dimension expression")

    if not tokens:
        raise ValueError("an empty dimension expression")
    value = expr()
    if at != len(tokens):
        raise ValueError(f"'{text}' is not a dimension expression (trailing '{tokens[at]}')")
    return value


def dims_to_json(shape) -> list:
    """A shape for a manifest: ints stay ints, symbolic dimensions become their text."""
    return [d if isinstance(d, int) else str(d) for d in shape]


def dims_from_json(values) -> tuple:
    return tuple(v if isinstance(v, int) else parse_dim(v) for v in values)


# -- ranges ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SymbolRange:
    """The values a symbol may take: `lo` to `hi` inclusive; `hi` None is unbounded."""

    lo: int = DEFAULT_MIN
    hi: int | None = None

    def __str__(self) -> str:
        return f"{self.lo}..{'' if self.hi is None else self.hi}"

    def __contains__(self, value: int) -> bool:
        return self.lo <= value and (self.hi is None or value <= self.hi)

    def intersect(self, other: SymbolRange) -> SymbolRange:
        his = [h for h in (self.hi, other.hi) if h is not None]
        return SymbolRange(max(self.lo, other.lo), min(his) if his else None)

    @property
    def empty(self) -> bool:
        return self.hi is not None and self.hi < self.lo


def parse_range(text: str) -> SymbolRange:
    """`1..64`, `1..` (no upper bound), `..64` (from 1), or `8` (exactly 8) -> SymbolRange;
    ValueError for anything else."""
    text = str(text).strip()
    m = re.fullmatch(r"(\d*)\s*\.\.\s*(\d*)", text)
    if m:
        lo = int(m.group(1)) if m.group(1) else DEFAULT_MIN
        hi = int(m.group(2)) if m.group(2) else None
    elif text.isdigit():
        lo = hi = int(text)
    else:
        raise ValueError(f"'{text}' is not a range; write LO..HI, LO.. or a number")
    r = SymbolRange(lo, hi)
    if r.empty:
        raise ValueError(f"the range {text} is empty")
    return r


def parse_dim_option(text: str) -> tuple[str, SymbolRange]:
    """`batch=1..64` (the CLI's --dim) -> ("batch", SymbolRange(1, 64)); InputError when malformed."""
    name, sep, rng = text.partition("=")
    if not sep or not name.strip():
        raise InputError(f"--dim '{text}' is not NAME=RANGE",
                         hint="e.g. --dim batch=1..64, --dim seq=1.. or --dim batch=8")
    try:
        return name.strip(), parse_range(rng)
    except ValueError as e:
        raise InputError(f"--dim '{text}': {e}", hint="e.g. --dim batch=1..64") from None


def bounds(d, ranges: Mapping[str, SymbolRange]) -> tuple[int, int | None]:
    """(lowest, highest) value of dimension `d` over the symbols' ranges (interval arithmetic;
    highest None: unbounded). Conservative: the true range lies inside."""
    if not isinstance(d, Sym):
        return int(d), int(d)
    lo_total, hi_total = 0, 0
    for m, c in d.terms:
        lo, hi = c, c  # the term's interval, starting from its coefficient
        for a in m:
            if isinstance(a, str):
                r = ranges.get(a, SymbolRange())
                alo, ahi = r.lo, r.hi
            elif isinstance(a, Min):
                (lo_a, hi_a), (lo_b, hi_b) = bounds(a.a, ranges), bounds(a.b, ranges)
                alo, ahi = min(lo_a, lo_b), min(h for h in (hi_a, hi_b) if h is not None) \
                    if hi_a is not None or hi_b is not None else None
            else:
                nlo, nhi = bounds(a.num, ranges)
                alo, ahi = nlo // a.den, None if nhi is None else nhi // a.den
            lo, hi = _interval_mul(lo, hi, alo, ahi)
        lo_total = None if lo_total is None or lo is None else lo_total + lo
        hi_total = None if hi_total is None or hi is None else hi_total + hi
    return (lo_total if lo_total is not None else -(1 << 62)), hi_total


def _interval_mul(alo, ahi, blo, bhi):
    """[alo, ahi] * [blo, bhi] with None as the unbounded end (alo None: -inf, ahi None: +inf)."""
    inf = float("inf")
    a = (-inf if alo is None else alo, inf if ahi is None else ahi)
    b = (-inf if blo is None else blo, inf if bhi is None else bhi)
    products = [x * y for x in a for y in b if not ((x == 0 and abs(y) == inf) or (y == 0 and abs(x) == inf))] or [0]
    lo, hi = min(products), max(products)
    return (None if lo == -inf else int(lo)), (None if hi == inf else int(hi))


def upper_bound(d, ranges: Mapping[str, SymbolRange]) -> int | None:
    return bounds(d, ranges)[1]


def hint(d, ranges: Mapping[str, SymbolRange] | None = None) -> int:
    """A representative value of `d` for choices that only affect speed (a schedule's tile, how many
    workgroups): each symbol at its upper bound, or `SCHEDULE_HINT` (at least its lower bound) when
    it has none. Never use it for anything that must hold at every size."""
    if not isinstance(d, Sym):
        return int(d)
    ranges = ranges or {}
    env = {}
    for s in d.symbols:
        r = ranges.get(s, SymbolRange())
        env[s] = r.hi if r.hi is not None else max(r.lo, SCHEDULE_HINT)
    return max(1, d.evaluate(env))


def bind(shapes, actual) -> dict[str, int]:
    """Symbol values read off concrete shapes: each dimension that is a plain symbol gives that
    symbol's value (the first one met wins; checking the rest is the caller's business)."""
    env: dict[str, int] = {}
    for shape, real in zip(shapes, actual):
        for d, n in zip(shape, real):
            if isinstance(d, Sym) and d.name is not None:
                env.setdefault(d.name, int(n))
    return env


def shape_text(shape) -> str:
    """`batch x 3 x 224`, for messages: a shape with its symbols by name."""
    return "[" + ", ".join(str(d) for d in shape) + "]"


def all_symbols(shapes: Iterable) -> list[str]:
    """The symbols of `shapes`, sorted: the order kernels take them in."""
    return sorted(symbols_of(*[tuple(s) for s in shapes]))
