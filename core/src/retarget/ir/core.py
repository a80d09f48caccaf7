"""The graph IR: modules of functions of tensor ops, in SSA form.

A `Module` holds `Function`s. A function has arguments (`Value`s), a flat list of
`Operation`s and the values it returns. Every value has a `TensorType`. Ops are
named `rt.<op>`; `ops.py` defines what each one means and how its result type
follows from its operands. The text form is MLIR's generic syntax (`printer.py`),
and `parser.py` reads it back exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .dtypes import DType
from .symbolic import Sym, SymbolRange, sanitize, substitute, sym, symbols_of

SHAPE_ATTR_KEYS = ("shape", "start", "limit")  # ops.SHAPE_ATTRS (ops.py imports this module)

# A dimension: an int, a symbolic `Sym` (known when the function is called; see symbolic.py), or
# None (unknown, only in MLIR types as parsed, before an importer names it). Both print `?`.
Dim = int | Sym | None


@dataclass(frozen=True)
class TensorType:
    shape: tuple[Dim, ...]
    dtype: DType

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(self.shape))

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        return all(isinstance(d, int) for d in self.shape)

    @property
    def num_elements(self) -> int:
        return math.prod(self.shape)  # Python ints: a huge shape cannot overflow

    @property
    def nbytes(self) -> int:
        """Bytes in memory: one numpy item per element (i1 and i4 take a byte each)."""
        return self.num_elements * self.dtype.itemsize

    def __str__(self) -> str:
        dims = "".join((str(d) if isinstance(d, int) else "?") + "x" for d in self.shape)
        return f"tensor<{dims}{self.dtype}>"


@dataclass(frozen=True)
class Location:
    file: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


@dataclass(eq=False)
class Value:
    type: TensorType
    owner: Operation | None = None  # None for a function argument
    index: int = 0  # result number in the owner, or argument number
    name_hint: str | None = None

    def __repr__(self) -> str:
        return f"Value({self.name_hint or '?'}: {self.type})"


@dataclass(eq=False)
class Operation:
    name: str
    operands: list[Value]
    results: list[Value] = field(default_factory=list)
    attrs: dict = field(default_factory=dict)
    loc: Location | None = None

    @property
    def result(self) -> Value:
        assert len(self.results) == 1, f"{self.name} has {len(self.results)} results"
        return self.results[0]

    def describe(self) -> str:
        where = f" at {self.loc}" if self.loc else ""
        return f"'{self.name}'{where}"


@dataclass(eq=False)
class Function:
    name: str
    args: list[Value]
    ops: list[Operation] = field(default_factory=list)
    returns: list[Value] = field(default_factory=list)
    arg_names: list[str] | None = None  # user-facing names, kept in the manifest
    # The symbolic dimensions of the signature and their ranges (symbolic.py); empty when static.
    symbols: dict[str, SymbolRange] = field(default_factory=dict)

    @property
    def input_types(self) -> list[TensorType]:
        return [a.type for a in self.args]

    @property
    def result_types(self) -> list[TensorType]:
        return [v.type for v in self.returns]

    def symbols_used(self) -> frozenset[str]:
        """The symbolic dimensions of its arguments, its results and every op's results: each is a size that code
        running it must be told, even where no argument or result has it (a broadcast reduced back to a static
        shape)."""
        return symbols_of(*[v.type.shape for v in self.args + self.returns],
                          *[r.type.shape for op in self.ops for r in op.results])

    def users(self) -> dict[Value, list[Operation]]:
        uses: dict[Value, list[Operation]] = {}
        for op in self.ops:
            for v in op.operands:
                uses.setdefault(v, []).append(op)
        return uses


@dataclass(eq=False)
class Module:
    functions: dict[str, Function] = field(default_factory=dict)

    def add(self, fn: Function) -> Function:
        self.functions[fn.name] = fn
        return fn


class Builder:
    """Appends ops to a function, inferring each result type from `ops.py`.

    Where an op needs two dimensions equal and one is a symbol (`ops.DimMismatch`), the builder
    unifies them: the symbol is replaced, in the whole function so far and in every later op's
    shape attributes, by the other dimension, whose range becomes the intersection of both."""

    MAX_UNIFICATIONS = 16  # per op: each one removes a symbol

    def __init__(self, fn: Function, loc: Location | None = None):
        self.fn = fn
        self.loc = loc
        self.substitutions: dict = {}  # symbol name -> the dimension that replaced it

    def op(self, name: str, operands, attrs: dict | None = None, loc: Location | None = None) -> Value:
        return self.op_multi(name, operands, attrs, loc)[0]

    def op_multi(self, name, operands, attrs=None, loc=None) -> list[Value]:
        from .ops import DimMismatch, infer_types, normalize_shape_attrs

        attrs = normalize_shape_attrs(attrs or {})
        operands = list(operands)
        for attempt in range(self.MAX_UNIFICATIONS + 1):
            if self.substitutions:
                attrs = {key: substitute(v, self.substitutions) for key, v in attrs.items()}
            try:
                types = infer_types(name, [v.type for v in operands], attrs, loc or self.loc)
                break
            except DimMismatch as e:
                if attempt == self.MAX_UNIFICATIONS or not self.unify(*e.dims, loc or self.loc):
                    raise
        op = Operation(name, operands, [], attrs, loc or self.loc)
        op.results = [Value(t, op, i) for i, t in enumerate(types)]
        self.fn.ops.append(op)
        return op.results

    def constant(self, array, dtype: DType | None = None) -> Value:
        array = np.asarray(array, dtype=dtype.np_dtype if dtype else None)
        return self.op("rt.constant", [], {"value": DenseAttr(array)})

    # -- symbolic dimensions ----------------------------------------------------------------------
    def symbol(self, name: str, rng: SymbolRange | None = None) -> Sym | int:
        """The function's symbol `name`, made with range `rng` if new (a known one's range is narrowed
        by `rng`); the dimension that replaced it if it was unified away."""
        if name in self.substitutions:
            return self.substitutions[name]
        old = self.fn.symbols.get(name)
        self.fn.symbols[name] = (rng or SymbolRange()) if old is None else old.intersect(rng or SymbolRange())
        return sym(name)

    def fresh_symbol(self, base: str, rng: SymbolRange | None = None) -> Sym:
        """A new symbol named `base` (or `base_2`, ... when taken)."""
        name, n = sanitize(base), 1
        while name in self.fn.symbols or name in self.substitutions:
            n += 1
            name = f"{sanitize(base)}_{n}"
        return self.symbol(name, rng)

    def unify(self, a, b, loc: Location | None = None) -> bool:
        """Make dimensions a and b one: replace a plain symbol by the other dimension (an int first,
        else the newer symbol by the older). False when neither is a plain symbol."""
        order = list(self.fn.symbols)
        choices = [(x, y) for x, y in ((a, b), (b, a))
                   if isinstance(x, Sym) and x.name and not (isinstance(y, Sym) and x.name in y.symbols)]
        if not choices:
            return False
        choices.sort(key=lambda c: (not isinstance(c[1], int), -order.index(c[0].name) if c[0].name in order else 0))
        old, new = choices[0]
        self.replace_symbol(old.name, new, loc)
        return True

    def replace_symbol(self, name: str, new, loc: Location | None = None) -> None:
        """Replace symbol `name` by dimension `new` in every type and shape attribute of the function."""
        from ..errors import VerificationError

        rng = self.fn.symbols.pop(name, SymbolRange())
        where = f" at {loc}" if loc else ""
        if isinstance(new, int) and new not in rng:
            raise VerificationError(f"dimension '{name}' must be {new}{where}, outside its range {rng}",
                                    hint="widen the range you gave for it, or fix the model's shapes")
        if isinstance(new, Sym) and new.name:
            merged = self.fn.symbols.get(new.name, SymbolRange()).intersect(rng)
            if merged.empty:
                raise VerificationError(f"dimensions '{name}' and '{new.name}' must be equal{where}, and their "
                                        "ranges do not overlap", hint="check the ranges you gave for them")
            self.fn.symbols[new.name] = merged
        mapping = {name: new}
        self.substitutions = {k: substitute(v, mapping) for k, v in self.substitutions.items()}
        self.substitutions[name] = new
        for v in self.fn.args:
            v.type = TensorType(substitute(v.type.shape, mapping), v.type.dtype)
        for op in self.fn.ops:
            for r in op.results:
                r.type = TensorType(substitute(r.type.shape, mapping), r.type.dtype)
            for key in SHAPE_ATTR_KEYS:
                if key in op.attrs and isinstance(op.attrs[key], tuple):
                    op.attrs[key] = substitute(op.attrs[key], mapping)
            if op.attrs.get("count") == name:  # a host op's data-dependent size (ops.py): now `new`'s
                op.attrs["count"] = new if isinstance(new, int) else str(new)


@dataclass(eq=False)
class DenseAttr:
    """A constant tensor. `resource` names its blob when it is printed out of line."""

    array: np.ndarray
    resource: str | None = None

    @property
    def type(self) -> TensorType:
        from .dtypes import from_numpy

        return TensorType(self.array.shape, from_numpy(self.array.dtype))

    def __eq__(self, other) -> bool:
        return (
            isinstance(other, DenseAttr)
            and self.array.dtype == other.array.dtype
            and self.array.shape == other.array.shape
            and self.array.tobytes() == other.array.tobytes()
        )

    __hash__ = None
