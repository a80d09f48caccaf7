"""The graph IR: tensor ops in functions, with MLIR-syntax text in and out."""

from .core import Builder, DenseAttr, Function, Location, Module, Operation, TensorType, Value
from .dtypes import DTYPES, DType, dtype, from_numpy
from .ops import OPS, infer_types
from .parser import parse_module
from .printer import print_module
from .verifier import verify

__all__ = [
    "Builder", "DenseAttr", "Function", "Location", "Module", "Operation", "TensorType", "Value",
    "DTYPES", "DType", "dtype", "from_numpy", "OPS", "infer_types", "parse_module", "print_module", "verify",
]
