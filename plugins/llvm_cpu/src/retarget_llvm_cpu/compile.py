"""Kernels -> ExecutableBinary: one object holding every kernel, through the cache."""

from __future__ import annotations

from retarget.ir.core import TensorType
from retarget.kernel.ir import Kernel, entry_point, expr_dim, print_kernel
from retarget.protocols import Binding, ExecutableBinary, TargetDesc

from . import FORMAT, cache, codegen


def compile_kernels(kernels: list[Kernel], desc: TargetDesc, bindings: list[tuple[Binding, ...]] | None = None,
                    *, use_cache: bool = True) -> ExecutableBinary:
    """`bindings[i]` describes kernel i's params as tensors; without it each param is a flat 1-D tensor."""
    triple, cpu = desc.extra["triple"], desc.extra["cpu"]
    texts = [print_kernel(kn) for kn in kernels]
    key = cache.key(texts, triple, cpu, desc.features)
    data = cache.get(key) if use_cache else None
    if data is None:
        data = codegen.emit_object(kernels, triple, cpu, desc.features)
        if use_cache:
            cache.put(key, data)
    if bindings is None:
        bindings = [tuple(Binding(TensorType((expr_dim(p.size),), p.dtype), p.access) for p in kn.params)
                    for kn in kernels]
    entries = [entry_point(kn, b) for kn, b in zip(kernels, bindings)]
    return ExecutableBinary(FORMAT, desc, data, entries, listing="\n\n".join(texts))
