"""Kernels -> ExecutableBinary: one OpenCL C program holding every kernel, in a JSON container.

The program is rendered by the core's shared renderer with its OpenCL C table
(`retarget.kernel.c_renderer.OPENCL`); this plugin changes only how a buffer is passed. The
runtime places tensors at 64-byte offsets inside one buffer, and OpenCL sub-buffers need
CL_DEVICE_MEM_BASE_ADDR_ALIGN (often 128 bytes or more), so a kernel takes each buffer as bytes
plus a byte offset, `x_bytes` and `x_offset`, and its first lines make the typed pointer `x`.
The driver binds (buffer, offset) pairs in that order.

The device's driver compiles the source when the executable is loaded, so no OpenCL is needed
to compile: only to run.

Sizes known at run time (dynamic shapes): a kernel's scalars are `long` arguments after its
buffers (the shared table's `scalar_param`), which the driver sets at each dispatch.
"""

from __future__ import annotations

import json
from dataclasses import replace

from retarget.errors import RetargetError, UnsupportedOpError
from retarget.ir.core import TensorType
from retarget.kernel.c_renderer import OPENCL, render_module
from retarget.kernel.ir import entry_point, expr_dim
from retarget.protocols import Binding, ExecutableBinary, TargetDesc

from . import FORMAT

MAGIC = "retarget-opencl-c"
VERSION = 1
PRAGMAS = {"cl_khr_fp16": "#pragma OPENCL EXTENSION cl_khr_fp16 : enable",
           "cl_khr_fp64": "#pragma OPENCL EXTENSION cl_khr_fp64 : enable"}
NEEDS = {"f16": "cl_khr_fp16", "f64": "cl_khr_fp64"}


def dialect(desc: TargetDesc):
    """The OpenCL C table, with buffers passed as (bytes, offset) and only the extensions `desc` allows."""
    return replace(
        OPENCL,
        param="__global {const}uchar *{name}_bytes, const long {name}_offset",
        prologue="__global {const}{T} *restrict {name} = (__global {const}{T} *)({name}_bytes + {name}_offset);",
        preamble="\n".join(PRAGMAS[e] for e in desc.features if e in PRAGMAS),
    )


def support(desc: TargetDesc):
    """What this profile cannot run: the core's OpenCL C table's gaps (`support_table`), and f16/f64
    without their extension (`NEEDS`), as `_check_types` refuses them."""
    from retarget.kernel.c_renderer import support_table
    from retarget.protocols import SupportTable

    table = support_table(dialect(desc))
    missing = {name: f"needs {ext}, and profile {desc.arch} does not assume it"
               for name, ext in NEEDS.items() if ext not in desc.features}
    return SupportTable(table.ops, {**table.dtypes, **missing})


def _check_types(kernel, desc: TargetDesc) -> None:
    for p in kernel.params:
        extension = NEEDS.get(p.dtype.name)
        if extension and extension not in desc.features:
            raise UnsupportedOpError(
                f"opencl:{desc.arch}: kernel {kernel.name} has a {p.dtype} buffer (%{p.name}), which needs "
                f"{extension}, and this profile does not assume it",
                hint="compile for opencl:host on a device that has it, or cast the model to f32")


def compile_kernels(kernels, desc: TargetDesc, bindings: list[tuple[Binding, ...]] | None = None) -> ExecutableBinary:
    """Kernel IR -> one OpenCL C program -> one executable. `bindings[i]` describes kernel i's params as
    tensors; without it each param is a flat 1-D tensor."""
    for kernel in kernels:
        _check_types(kernel, desc)
    source = render_module(kernels, dialect(desc))
    if bindings is None:
        bindings = [tuple(Binding(TensorType((expr_dim(p.size),), p.dtype), p.access) for p in kn.params)
                    for kn in kernels]
    entries = [entry_point(kn, b) for kn, b in zip(kernels, bindings)]
    container = {"magic": MAGIC, "version": VERSION, "profile": desc.arch, "source": source,
                 "kernels": [kn.name for kn in kernels]}
    return ExecutableBinary(FORMAT, desc, json.dumps(container).encode(), entries, listing=source)


def unpack(data: bytes) -> dict:
    try:
        doc = json.loads(data)
        ok = doc.get("magic") == MAGIC and isinstance(doc.get("source"), str)
    except (ValueError, AttributeError):
        ok = False
    if not ok:
        raise RetargetError("this is not a retarget OpenCL executable", hint="recompile with --target opencl")
    if doc["version"] != VERSION:
        raise RetargetError(f"OpenCL executable version {doc['version']}; this plugin reads {VERSION}",
                            hint="recompile with --target opencl")
    return doc
