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

Dim = int | None  # None is a dynamic dimension, printed `?`


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
        return all(d is not None for d in self.shape)

    @property
    def num_elements(self) -> int:
        return math.prod(self.shape)  # Python ints: a huge shape cannot overflow

    @property
    def nbytes(self) -> int:
        """Bytes in memory: one numpy item per element (i1 and i4 take a byte each)."""
        return self.num_elements * self.dtype.itemsize

    def __str__(self) -> str:
        dims = "".join(("?" if d is None else str(d)) + "x" for d in self.shape)
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

    @property
    def input_types(self) -> list[TensorType]:
        return [a.type for a in self.args]

    @property
    def result_types(self) -> list[TensorType]:
        return [v.type for v in self.returns]

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
    """Appends ops to a function, inferring each result type from `ops.py`."""

    def __init__(self, fn: Function, loc: Location | None = None):
        self.fn = fn
        self.loc = loc

    def op(self, name: str, operands, attrs: dict | None = None, loc: Location | None = None) -> Value:
        return self.op_multi(name, operands, attrs, loc)[0]

    def op_multi(self, name, operands, attrs=None, loc=None) -> list[Value]:
        from .ops import infer_types

        attrs = dict(attrs or {})
        operands = list(operands)
        types = infer_types(name, [v.type for v in operands], attrs, loc or self.loc)
        op = Operation(name, operands, [], attrs, loc or self.loc)
        op.results = [Value(t, op, i) for i, t in enumerate(types)]
        self.fn.ops.append(op)
        return op.results

    def constant(self, array, dtype: DType | None = None) -> Value:
        array = np.asarray(array, dtype=dtype.np_dtype if dtype else None)
        return self.op("rt.constant", [], {"value": DenseAttr(array)})


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
