"""The MLIR frontend: func, arith, math, tensor, linalg, tosa, stablehlo (and chlo), check
files, and our own graph IR, from MLIR text to a verified graph `Module`.

One module per dialect; each registers its pretty syntax and its converters. The
walk and the op table are in `convert.py`.
"""

from __future__ import annotations

from pathlib import Path

from ...ir.core import Module
from ...ir.verifier import verify
from ...mlir.syntax import parse, read_source
from . import arith, check, dims, linalg, stablehlo, tensor, tosa  # noqa: F401  (they register themselves)
from .check import Check, evaluate_checks
from .convert import module_from_mops, supported_ops

__all__ = ["import_mlir", "import_check_file", "evaluate_checks", "Check", "MlirImporter", "supported_ops"]


def import_mlir(text: str, filename: str = "<string>") -> Module:
    """MLIR text (func/arith/math/tensor/linalg/tosa/stablehlo, or graph IR) to a graph module."""
    top, _ = parse(text, filename)
    return verify(module_from_mops(top))


def import_check_file(text: str, filename: str = "<string>") -> tuple[Module, dict[str, list[Check]]]:
    """Like `import_mlir`, for files with `check.expect_*` ops: each check's operands become
    extra results of its function, and `checks[fn_name]` says how to compare them."""
    top, _ = parse(text, filename)
    checks: dict[str, list[Check]] = {}
    module = verify(module_from_mops(top, checks))
    return module, checks


class MlirImporter:
    """Reads `.mlir` files."""

    name = "mlir"
    suffixes = (".mlir",)

    def accepts(self, source) -> bool:
        return isinstance(source, (str, Path)) and Path(source).suffix in self.suffixes

    def load(self, source, **options) -> Module:
        path = Path(source)
        return import_mlir(read_source(path), str(path))
