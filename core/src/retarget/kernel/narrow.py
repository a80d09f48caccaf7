"""The narrow types (float8 in its four flavours, the E8M0 scale, float4 E2M1, 4- and 2-bit integers) as bytes and
integer arithmetic, so that every target moves and casts them although no code generator spells them.

A tensor of a narrow type holds one element per byte (ml_dtypes' layout: a sub-byte value sits in the byte's low
bits). `expand_narrow_types` rewrites a kernel so that no expression, variable, array or parameter has such a type:
buffers and arrays become `ui8` (the same bytes), a load is decoded into the type's value as f32 (floats) or i32
(integers), and a store encodes one. Only casts and moves touch these types (`DType.storage`), so that is all this
handles, exactly as `ml_dtypes`' astype (the reference, and ONNX's Cast): floats round to nearest even; past the
largest finite value E5M2 gives inf, the FN types NaN, FNUZ its one NaN (0x80) and E2M1 (no NaN) the largest value;
integers keep their low bits, and a float cast to them is truncated and keeps its low bits (0 past i32 and for NaN).
E8M0 (OCP MX's scale: 2^(code - 127), no sign, zero nor infinity, 0xFF NaN) rounds to the nearest power of two with
ties up, and anything between 2^-127 and 2^-126 up; 0, negatives and infinities become NaN (ONNX's round modes are the
importer's, composed around this cast). Its code 0 reads as 2^-127, an f32 subnormal, written as a constant so that a
target that flushes subnormal results still gives it.
Two differences, both of signs that no arithmetic reads (only a bitcast of the result, `rt.bitcast`, shows them; the
kernel IR has no bitcast to test a sign bit with): -0.0 itself becomes +0 (a negative value that rounds to zero keeps
its sign), and every NaN becomes the type's NaN of positive sign.

The arithmetic is exact on every device: powers of two come from selects and products (no exp2, whose precision a
driver may relax), and only compares, integer bit operations, round-to-even and multiplication by powers of two are
used.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..ir.dtypes import DTYPES, DType
from .ir import (
    FRAGMENT_STATEMENTS,
    Assign,
    Binary,
    Cast,
    Compare,
    Const,
    Expr,
    If,
    Kernel,
    Load,
    Local,
    Loop,
    Select,
    Store,
    Unary,
    Var,
    walk_stmts,
)

F32, I32, UI8 = DTYPES["f32"], DTYPES["i32"], DTYPES["ui8"]


@dataclass(frozen=True)
class FloatFormat:
    exponent: int  # bits
    mantissa: int  # bits
    bias: int
    largest: int  # the code of the largest finite magnitude
    overflow: int  # what a magnitude past it becomes (with the value's sign, unless `fnuz`)
    nan: int  # NaN's code
    fnuz: bool = False  # no -0 and no infinity: 0x80 is the one NaN
    infinity: bool = False  # the code past `largest` is infinity (E5M2, as IEEE)

    @property
    def sign(self) -> int:
        return 1 << (self.exponent + self.mantissa)

    @property
    def emin(self) -> int:  # the exponent of the smallest normal value (and of the subnormals' step, less mantissa)
        return 1 - self.bias

    @property
    def emax(self) -> int:  # the exponent of the largest finite value
        return (1 << self.exponent) - 1 - self.infinity - self.bias


@dataclass(frozen=True)
class ScaleFormat:
    """A power of two and nothing else (E8M0): `exponent` bits, no sign, zero nor infinity; the all-ones code is NaN."""

    exponent: int
    bias: int

    @property
    def nan(self) -> int:
        return (1 << self.exponent) - 1


@dataclass(frozen=True)
class IntFormat:
    bits: int
    signed: bool


FORMATS = {
    "f8E4M3FN": FloatFormat(4, 3, 7, largest=0x7E, overflow=0x7F, nan=0x7F),
    "f8E4M3FNUZ": FloatFormat(4, 3, 8, largest=0x7F, overflow=0x80, nan=0x80, fnuz=True),
    "f8E5M2": FloatFormat(5, 2, 15, largest=0x7B, overflow=0x7C, nan=0x7E, infinity=True),
    "f8E5M2FNUZ": FloatFormat(5, 2, 16, largest=0x7F, overflow=0x80, nan=0x80, fnuz=True),
    "f4E2M1FN": FloatFormat(2, 1, 1, largest=0x7, overflow=0x7, nan=0x8),
    "f8E8M0FNU": ScaleFormat(8, 127),
    "i4": IntFormat(4, True), "ui4": IntFormat(4, False), "i2": IntFormat(2, True), "ui2": IntFormat(2, False),
}
NARROW_TYPES = frozenset(FORMATS)  # what `expand_narrow_types` takes away: a code generator never sees them


def is_narrow(dt: DType) -> bool:
    return dt.name in FORMATS


def wide(dt: DType) -> DType:
    """The type a narrow type's values are computed in."""
    return F32 if dt.is_float else I32


# -- building blocks ------------------------------------------------------------------------------


def _i(v: int) -> Const:
    return Const(int(v), I32)


def _f(v: float) -> Const:
    return Const(float(v), F32)


def _bit(e: Expr, j: int) -> Expr:
    return Compare("eq", Binary("and", Binary("shr", e, _i(j)), _i(1)), _i(1))


def _same(e: Expr) -> Expr:
    return e


def decode(bits: Expr, dt: DType, let=_same) -> Expr:
    """The value (f32 or i32) of a `dt` element whose byte is `bits` (any integer type). `let` names a value used
    more than once (a variable; by default the expression is repeated)."""
    fmt = FORMATS[dt.name]
    c = Cast(bits, I32)
    if isinstance(fmt, IntFormat):
        c = Binary("and", c, _i((1 << fmt.bits) - 1))
        half = 1 << (fmt.bits - 1)
        return Binary("sub", Binary("xor", c, _i(half)), _i(half)) if fmt.signed else c
    if isinstance(fmt, ScaleFormat):
        return _decode_scale(c, fmt, let)
    c = let(Binary("and", c, _i(2 * fmt.sign - 1)))
    magnitude = let(Binary("and", c, _i(fmt.sign - 1)))
    field = let(Binary("shr", magnitude, _i(fmt.mantissa)))
    mantissa = Binary("and", magnitude, _i((1 << fmt.mantissa) - 1))
    subnormal = Compare("eq", field, _i(0))
    significand = Cast(Select(subnormal, mantissa, Binary("add", mantissa, _i(1 << fmt.mantissa))), F32)
    exponent = let(Binary("max", field, _i(1)))  # a subnormal's exponent is the smallest normal one
    scale: Expr = _f(2.0 ** (-fmt.bias - fmt.mantissa))
    for j in range(fmt.exponent):  # 2^exponent as a product of its binary digits' powers
        scale = Binary("mul", scale, Select(_bit(exponent, j), _f(2.0 ** (1 << j)), _f(1.0)))
    value = let(Binary("mul", significand, scale))
    negative = Compare("ge", c, _i(fmt.sign))
    value = Select(negative, Unary("neg", value), value)
    if fmt.fnuz:
        return Select(Compare("eq", c, _i(0x80)), _f(np.nan), value)
    special = _f(np.nan)
    if fmt.infinity:
        special = Select(Compare("eq", magnitude, _i(fmt.overflow)), Select(negative, _f(-np.inf), _f(np.inf)), special)
    return Select(Compare("gt", magnitude, _i(fmt.largest)), special, value)


def encode(x: Expr, dt: DType, let=_same) -> Expr:
    """The byte (as i32) of `x`, a value of any number type, cast to `dt` (`let` as `decode`'s)."""
    fmt = FORMATS[dt.name]
    if isinstance(fmt, IntFormat):  # the low bits: integers wrap, and floats truncate and wrap (ONNX's Cast)
        v = x if x.dtype == I32 else Cast(x, I32)
        if x.dtype.is_float:  # past i32 (and NaN) ml_dtypes reads INT_MIN, whose low bits are 0
            x = let(x)
            v = Select(Compare("lt", Unary("abs", x), Const(2.0 ** 31, x.dtype)), Cast(x, I32), _i(0))
        return Binary("and", v, _i((1 << fmt.bits) - 1))
    if isinstance(fmt, ScaleFormat):
        return _encode_scale(let(x if x.dtype == F32 else Cast(x, F32)), fmt, let)  # f64 through f32, as ml_dtypes
    x = let(x if x.dtype == F32 else Cast(x, F32))  # f64 through f32, as ml_dtypes: 1 + 2^-4 + 2^-30 is the
    # tie 1.0625 there, so 1.0 in E4M3 (not 1.125, its nearest)
    a = let(Binary("min", Unary("abs", x), _f(2.0 ** (fmt.emax + 2))))  # past it, all overflows: no inf below
    count: Expr = _i(0)  # the exponent less emin (0 for subnormals), from one compare per power of two
    scale: Expr = _f(2.0 ** (fmt.mantissa - fmt.emin))
    for e in range(fmt.emin + 1, fmt.emax + 1):
        above = Compare("ge", a, _f(2.0 ** e))
        count = Binary("add", count, Select(above, _i(1), _i(0)))
        scale = Binary("mul", scale, Select(above, _f(0.5), _f(1.0)))
    # a * scale is a * 2^(mantissa - exponent), in [2^mantissa, 2^(mantissa + 1)) (or below, subnormal): rounded, it
    # is the significand, and a carry to 2^(mantissa + 1) lands on the next exponent's code by itself
    significand = Cast(Unary("round", Binary("mul", a, scale)), I32)
    magnitude = let(Binary("add", Binary("mul", count, _i(1 << fmt.mantissa)), significand))
    past = Compare("gt", magnitude, _i(fmt.largest))
    negative = Compare("lt", x, _f(0.0))
    if fmt.fnuz:
        signed = Binary("and", negative, Compare("ne", magnitude, _i(0)))  # no -0: a negative zero is +0
        code = Select(past, _i(fmt.overflow), Select(signed, Binary("add", magnitude, _i(fmt.sign)), magnitude))
    else:
        magnitude = Select(past, _i(fmt.overflow), magnitude)
        code = Select(negative, Binary("add", magnitude, _i(fmt.sign)), magnitude)
    return Select(Compare("ne", x, x), _i(fmt.nan), code)


def _decode_scale(c: Expr, fmt: ScaleFormat, let) -> Expr:
    """2^(code - bias) as one product of two powers of two, each picked from a table by a digit of the code in base
    `step`: a chain of products would leave f32's range once reassociated (llvm-cpu allows that)."""
    step = 1 << (fmt.exponent // 2)
    c = let(Binary("and", c, _i(fmt.nan)))
    high = let(Binary("shr", c, _i(fmt.exponent // 2)))
    low = let(Binary("and", c, _i(step - 1)))
    value = Binary("mul", _table(high, [2.0 ** (h * step + 1 - fmt.bias) for h in range(step)]),
                   _table(low, [2.0 ** (d - 1) for d in range(step)]))  # both normal: only code 0 is not
    smallest = Select(Compare("eq", c, _i(0)), _f(2.0 ** -fmt.bias), value)  # f32 subnormal: a constant, never flushed
    return Select(Compare("eq", c, _i(fmt.nan)), _f(np.nan), smallest)


def _table(index: Expr, values: list) -> Expr:
    out: Expr = _f(values[0])
    for i, v in enumerate(values[1:], 1):
        out = Select(Compare("eq", index, _i(i)), _f(v), out)
    return out


def _encode_scale(x: Expr, fmt: ScaleFormat, let) -> Expr:
    """ml_dtypes' rounding: a code per power of two reached, and one more at 1.5 times it (ties up), found in two
    digits of base `step`, one compare per value of each, so that `x` is read a few dozen times, not once per code."""
    step = 1 << (fmt.exponent // 2)
    coarse: Expr = _i(0)
    scale: Expr = _f(2.0 ** fmt.bias)
    for i in range(1, (1 << fmt.exponent) // step):  # selects, not a chain of products (see `_decode_scale`)
        above = Compare("ge", x, _f(2.0 ** (i * step - fmt.bias)))
        coarse, scale = Select(above, _i(i), coarse), Select(above, _f(2.0 ** (fmt.bias - i * step)), scale)
    y = let(Binary("mul", x, scale))  # x * 2^(bias - step * coarse): in [1, 2^step), or (0, 2^step) where coarse is 0
    # below 2^-126 (all f32 subnormals) ml_dtypes rounds anything past 2^-127 up: the tie there is 1, not 1.5
    first = Select(Compare("ge", x, _f(2.0 ** (step - fmt.bias))), _f(1.5), _f(np.nextafter(np.float32(1), 2)))
    fine: Expr = Select(Compare("ge", y, first), _i(1), _i(0))
    for m in range(2, step + 1):
        fine = Binary("add", fine, Select(Compare("ge", y, _f(1.5 * 2.0 ** (m - 1))), _i(1), _i(0)))
    code = Binary("min", Binary("add", Binary("mul", coarse, _i(step)), fine), _i(fmt.nan))  # past the largest: NaN
    return Select(Compare("gt", x, _f(0.0)), code, _i(fmt.nan))  # 0, negatives and NaN: NaN


def _constant_bits(value, dt: DType) -> int:
    return int(np.array([value]).astype(dt.np_dtype).view(np.uint8)[0])


# -- the rewrite ----------------------------------------------------------------------------------


def expand_narrow_types(kernel: Kernel) -> Kernel:
    """`kernel` with its narrow types as bytes and integer arithmetic (see the module docstring)."""
    if not _mentions_narrow(kernel):
        return kernel
    params = [replace(p, dtype=UI8) if is_narrow(p.dtype) else p for p in kernel.params]
    return replace(kernel, params=params, body=_Rewrite().stmts(kernel.body))


def _mentions_narrow(kernel: Kernel) -> bool:
    if any(is_narrow(p.dtype) for p in kernel.params):
        return True
    for s in walk_stmts(kernel.body):
        if isinstance(s, Local) and is_narrow(s.dtype):
            return True
        if any(is_narrow(e.dtype) for e in _exprs_of(s)):
            return True
    return False


def _exprs_of(s):
    stack = [getattr(s, f) for f in ("value", "index", "cond", "extent") if isinstance(getattr(s, f, None), Expr)]
    while stack:
        e = stack.pop()
        yield e
        stack.extend(v for v in vars(e).values() if isinstance(v, Expr))


class _Rewrite:
    """Statements rewritten one at a time; a value that encoding or decoding reads several times becomes a variable
    assigned just before the statement (`pre`), except inside a select's arms, which a C-like target evaluates only
    when chosen (a guarded load must stay guarded)."""

    def __init__(self):
        self.pre: list = []
        self.lazy = 0
        self.count = 0

    def let(self, e: Expr) -> Expr:
        if self.lazy or isinstance(e, (Var, Const)):
            return e
        self.count += 1
        name = f"narrow{self.count}"
        self.pre.append(Assign(name, e))
        return Var(name, e.dtype)

    def stmts(self, body: list) -> list:
        out = []
        for s in body:
            self.pre = []
            if isinstance(s, Store):
                index = self.value(s.index)
                value = self.bits(s.value) if is_narrow(s.value.dtype) else self.value(s.value)
                s = Store(s.buffer, index, value)
            elif isinstance(s, Assign):
                s = Assign(s.var, self.bits(s.value) if is_narrow(s.value.dtype) else self.value(s.value))
            elif isinstance(s, Local):
                s = replace(s, dtype=UI8) if is_narrow(s.dtype) else s
            elif isinstance(s, Loop):
                extent = self.value(s.extent) if isinstance(s.extent, Expr) else s.extent
                pre, self.pre = self.pre, []
                s = replace(s, extent=extent, body=self.stmts(s.body))
                self.pre = pre
            elif isinstance(s, If):
                cond = self.value(s.cond)
                pre, self.pre = self.pre, []
                s = If(cond, self.stmts(s.body))
                self.pre = pre
            elif isinstance(s, FRAGMENT_STATEMENTS) and is_narrow(getattr(s, "dtype", F32)):
                raise ValueError(f"{s}: fragments of a narrow type")  # no lowering makes them (DType.storage)
            out.extend(self.pre)
            out.append(s)
        return out

    def children(self, e: Expr) -> Expr:
        if isinstance(e, Select):
            return self.select(e, self.value)
        return replace(e, **{f: self.value(v) for f, v in vars(e).items() if isinstance(v, Expr)})

    def select(self, e: Select, arm) -> Select:
        """`e` with its condition's value and `arm` of each arm, which nothing is hoisted out of, unless the select is
        itself evaluated and the arm loads only what the condition loads (and divides no integer): then an E8M0 cast
        chosen by a test of its own input stays a few dozen statements, not a tree of thousands of nodes."""
        cond = self.value(e.cond)
        loaded = None if self.lazy else set(_loads(e.cond))
        return Select(cond, self.arm(e.a, arm, loaded), self.arm(e.b, arm, loaded))

    def arm(self, e: Expr, arm, loaded: set | None) -> Expr:
        if loaded is not None and _may_hoist(e, loaded):
            return arm(e)
        self.lazy += 1
        try:
            return arm(e)
        finally:
            self.lazy -= 1

    def value(self, e: Expr) -> Expr:
        """`e` with nothing narrow inside; a narrow `e` becomes its value, in `wide(e.dtype)`."""
        dt = e.dtype
        if not is_narrow(dt):
            if isinstance(e, Cast):
                a = self.value(e.a)
                return a if a.dtype == dt else Cast(a, dt)
            return self.children(e) if isinstance(e, (Unary, Binary, Compare, Select, Load)) else e
        if isinstance(e, Const):
            return Const(_round(e.value, dt), wide(dt))
        if isinstance(e, Select):
            return self.children(e)
        return decode(self.bits(e), dt, self.let)

    def bits(self, e: Expr) -> Expr:
        """The byte (ui8) of a narrow `e`."""
        dt = e.dtype
        if isinstance(e, Load):
            return Load(e.buffer, self.value(e.index), UI8)
        if isinstance(e, Var):
            return Var(e.name, UI8)
        if isinstance(e, Const):
            return Const(_constant_bits(e.value, dt), UI8)
        if isinstance(e, Select):
            return self.select(e, self.bits)
        if isinstance(e, Cast):
            return Cast(encode(self.value(e.a), dt, self.let), UI8)
        # arithmetic in a narrow type (no lowering makes it): in the wide type, rounded once
        return Cast(encode(self.children(e), dt, self.let), UI8)


def _subexprs(e: Expr):
    stack = [e]
    while stack:
        e = stack.pop()
        yield e
        stack.extend(v for v in vars(e).values() if isinstance(v, Expr))


def _loads(e: Expr) -> list:
    return [x for x in _subexprs(e) if isinstance(x, Load)]


def _may_hoist(e: Expr, loaded: set) -> bool:
    """Whether evaluating `e` unguarded is safe: no load that its guard did not make, and no integer division (which
    traps on a zero the guard excluded)."""
    for x in _subexprs(e):
        if isinstance(x, Load) and x not in loaded:
            return False
        if isinstance(x, Binary) and x.op in ("div", "rem") and not x.dtype.is_float:
            return False
    return True


def _round(value, dt: DType):
    rounded = np.array([value]).astype(dt.np_dtype).astype(np.float64 if dt.is_float else np.int64)[0]
    return float(rounded) if dt.is_float else int(rounded)


__all__ = ["FORMATS", "NARROW_TYPES", "FloatFormat", "IntFormat", "ScaleFormat", "decode", "encode",
           "expand_narrow_types", "is_narrow", "wide"]
