"""Kernels -> ExecutableBinary: one object holding every kernel, through the cache."""

from __future__ import annotations

from pathlib import Path

import llvmlite
from retarget import cache
from retarget.ir.core import TensorType
from retarget.kernel.ir import Kernel, entry_point, expr_dim, print_kernel
from retarget.protocols import Binding, ExecutableBinary, TargetDesc

from . import FORMAT, __version__, codegen

CACHE_NAME = "llvm-cpu"  # its directory in the compile cache (retarget.cache)


def compile_kernels(kernels: list[Kernel], desc: TargetDesc, bindings: list[tuple[Binding, ...]] | None = None,
                    *, use_cache: bool = True) -> ExecutableBinary:
    """`bindings[i]` describes kernel i's params as tensors; without it each param is a flat 1-D tensor."""
    triple, cpu = desc.extra["triple"], desc.extra["cpu"]
    texts = [print_kernel(kn) for kn in kernels]

    def make() -> bytes:
        return codegen.emit_object(kernels, triple, cpu, desc.features)

    # the key: everything that decides the object's bytes, the code generator's own source included
    data = cache.cached(CACHE_NAME, cache.key(*texts, triple, cpu, ",".join(desc.features), llvmlite.__version__,
                                              __version__, cache.source_fingerprint(Path(__file__).parent)),
                        make, suffix=".o") if use_cache else make()
    if bindings is None:
        bindings = [tuple(Binding(TensorType((expr_dim(p.size),), p.dtype), p.access) for p in kn.params)
                    for kn in kernels]
    entries = [entry_point(kn, b) for kn, b in zip(kernels, bindings)]
    return ExecutableBinary(FORMAT, desc, data, entries, listing="\n\n".join(texts))
