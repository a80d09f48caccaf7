"""Kernels -> ExecutableBinary: one MSL source (a Metal library) holding every kernel, in a JSON
container (never pickle).

Binding model. Kernel parameter i is `[[buffer(i)]]`, a `device T *` (`const` when read). The
driver binds each tensor with `setBuffer:offset:atIndex:` at the tensor's own byte offset: Metal
takes any offset aligned to the element type's size for `device` buffers, and the core places
tensors at 64-byte boundaries, so no offset uniform (WGSL's `rt_base`) and no copies are needed.
A dispatch binds the arena once per tensor it reads or writes; Metal allows one buffer at several
indices. The workgroup and thread ids arrive as `[[threadgroup_position_in_grid]]` and
`[[thread_position_in_threadgroup]]`; the driver dispatches `workgroup_count` threadgroups of
`workgroup_size` threads (`dispatchThreadgroups:threadsPerThreadgroup:`). Each kernel carries
`[[max_total_threads_per_threadgroup(N)]]`, so the compiler never builds a pipeline that cannot
run N threads.

Matmuls. Every row of the target table advertises 8x8 SIMD-group matrices as fragment shapes
(`TargetDesc.extra["fragments"]`), so the core's GPU lowering gives float matmuls its tiled fragment
matmul, and the core's MSL table spells the fragments as `simdgroup_float8x8` / `simdgroup_half8x8`
with `simdgroup_load`, `simdgroup_multiply_accumulate` and `simdgroup_store`. Nothing here is
specific to matmuls.

Types. MSL has no double: f64 is refused by name. bf16 (`bfloat`) needs MSL 3.1. i64 (`long`) is
the kernel IR's index type and a legal buffer type. Booleans are stored as `uchar` (0 or 1, as
numpy stores them), since `bool` has no defined size in device memory.

Math. Metal compiles with fast math on by default; this code needs NaN and infinity to behave
(max/min propagate NaN, saturating casts test `x != x`), so both the driver's runtime compile
and the offline `xcrun metal` compile turn it off.

Offline compile. On a Mac with Xcode's Metal toolchain, the source is also compiled to a
`.metallib` (`xcrun -sdk macosx metal` then `metallib`), stored base64 in the container; the
driver loads it instead of compiling the source. Elsewhere (or if xcrun fails) the container
holds the source only and the driver compiles it at load time; xcrun's log is kept in the
container and the listing.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import replace

from retarget.errors import RetargetError, UnsupportedOpError
from retarget.ir.core import TensorType
from retarget.ir.symbolic import dims_to_json
from retarget.kernel import ir as k
from retarget.protocols import Binding, ExecutableBinary, TargetDesc

from . import FORMAT
from .targets import BF16_MSL, MSL_VERSIONS

MAGIC = "retarget-msl"
VERSION = 1
ITEMSIZE = {"f32": 4, "f16": 2, "bf16": 2, "i64": 8, "i32": 4, "i16": 2, "i8": 1, "ui64": 8, "ui32": 4,
            "ui16": 2, "ui8": 1, "i1": 1}
COMPUTE_BYTES = {"f64": 8, "i64": 8, "ui64": 8, "i16": 2, "ui16": 2, "i8": 1, "ui8": 1, "i1": 1}  # else 4
MAX_BUFFERS = 31  # entries in a compute encoder's buffer argument table


def dialect():
    """The core's MSL table, with this target's kernel attribute and boolean storage."""
    from retarget.kernel.c_renderer import MSL

    return replace(
        MSL,
        kernel="[[max_total_threads_per_threadgroup({threads})]] kernel void {name}({params})",
        storage={**MSL.storage, "i1": "uchar"},
        from_storage={**MSL.from_storage, "i1": "({0} != 0)"},
        to_storage={**MSL.to_storage, "i1": "uchar({0})"},
    )


def support(desc: TargetDesc):
    """What this target cannot run: the MSL table's gaps (the core's renderer: f64, `exp` of integers, ...),
    and bf16 buffers where the target's MSL predates `bfloat` (as `check_types` refuses them)."""
    from retarget.kernel.c_renderer import support_table
    from retarget.protocols import SupportTable

    table = support_table(dialect())
    buffers = {}
    if MSL_VERSIONS[desc.extra["msl"]].key < MSL_VERSIONS[BF16_MSL].key:
        buffers["bf16"] = f"MSL's bfloat needs MSL {BF16_MSL}; this target is MSL {desc.extra['msl']}"
    return SupportTable(table.ops, table.dtypes, buffers)


def check_types(kn: k.Kernel, desc: TargetDesc) -> None:
    for p in kn.params:
        if p.dtype.name not in ITEMSIZE:
            why = "MSL has no double; use f32" if p.dtype.name == "f64" else "MSL buffers hold no such type"
            raise UnsupportedOpError(f"metal-spirv: kernel {kn.name} has a {p.dtype} buffer (%{p.name}): {why}",
                                     hint="cast the model to f32 (or f16), or use another target")
        if p.dtype.name == "bf16" and MSL_VERSIONS[desc.extra["msl"]].key < MSL_VERSIONS[BF16_MSL].key:
            raise UnsupportedOpError(
                f"metal-spirv:{desc.arch}: kernel {kn.name} has a bf16 buffer, and MSL's bfloat needs MSL "
                f"{BF16_MSL} (macOS 14, iOS 17); this target is MSL {desc.extra['msl']}",
                hint=f"compile for metal-spirv:{desc.arch.partition('+')[0]}+msl{BF16_MSL}, or a chip that ships "
                     "with it (metal-spirv:m3)")
    for e in k.walk_exprs(kn.body):
        if e.dtype.name == "f64":
            raise UnsupportedOpError(f"metal-spirv: kernel {kn.name} computes in f64, and MSL has no double",
                                     hint="cast the model to f32")


def shared_bytes(stmts) -> int:
    total = 0
    for s in stmts:
        if isinstance(s, k.Local) and s.shared:
            total += s.size * COMPUTE_BYTES.get(s.dtype.name, 4)
        elif isinstance(s, (k.Loop, k.If)):
            total += shared_bytes(s.body)
    return total


def check_limits(kn: k.Kernel, desc: TargetDesc) -> None:
    if len(kn.params) > MAX_BUFFERS:
        raise UnsupportedOpError(f"kernel {kn.name} has {len(kn.params)} buffers; a Metal kernel binds at most "
                                 f"{MAX_BUFFERS}")
    wx, wy, wz = kn.workgroup_size
    if wx * wy * wz > desc.max_workgroup_size or any(a > b for a, b in zip(kn.workgroup_size,
                                                                          desc.max_workgroup_dims)):
        raise UnsupportedOpError(f"kernel {kn.name} wants a {wx}x{wy}x{wz} threadgroup; metal-spirv:{desc.arch} "
                                 f"runs at most {desc.max_workgroup_size} threads a threadgroup")
    shared = shared_bytes(kn.body)
    if shared > desc.shared_memory_bytes:
        raise UnsupportedOpError(f"kernel {kn.name} needs {shared} bytes of threadgroup memory; "
                                 f"metal-spirv:{desc.arch} has {desc.shared_memory_bytes}")


def render_source(kernels: list[k.Kernel], desc: TargetDesc) -> str:
    """Every kernel in one MSL source."""
    from retarget.kernel.c_renderer import render_module

    for kn in kernels:
        check_types(kn, desc)
        check_limits(kn, desc)
    return render_module(kernels, dialect())


def metal_std(msl: str) -> str:
    """`xcrun metal -std=` for an MSL version: platform-prefixed before 3.0, unified since."""
    return f"macos-metal{msl}" if MSL_VERSIONS[msl].key < (3, 0) else f"metal{msl}"


def build_metallib(source: str, msl: str) -> tuple[bytes | None, str]:
    """(the .metallib, "") with Xcode's Metal toolchain, else (None, why not). Never raises."""
    if sys.platform != "darwin" or os.environ.get("RETARGET_METAL_NO_METALLIB"):
        return None, "no metallib: built only on macOS with xcrun (the driver compiles the source at load)"
    if shutil.which("xcrun") is None:
        return None, "no metallib: xcrun is not installed (xcode-select --install)"
    with tempfile.TemporaryDirectory(prefix="retarget-metal-") as tmp:
        src, air, lib = (os.path.join(tmp, f"kernels.{ext}") for ext in ("metal", "air", "metallib"))
        with open(src, "w") as f:
            f.write(source)
        steps = [["xcrun", "-sdk", "macosx", "metal", f"-std={metal_std(msl)}", "-fno-fast-math", "-c", src, "-o", air],
                 ["xcrun", "-sdk", "macosx", "metallib", air, "-o", lib]]
        for cmd in steps:
            try:
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            except (OSError, subprocess.TimeoutExpired) as e:
                return None, f"no metallib: {' '.join(cmd[:4])} failed ({e})"
            if done.returncode != 0:
                return None, f"no metallib: {' '.join(cmd[:4])} failed:\n{done.stderr.strip()}"
        with open(lib, "rb") as f:
            return f.read(), ""


def kernel_meta(kn: k.Kernel) -> dict:
    return {
        "name": kn.name,
        "workgroup_size": list(kn.workgroup_size),
        "workgroup_count": dims_to_json(k.expr_dim(c) for c in kn.workgroup_count),
        "scalars": list(kn.scalars),  # `constant long &` arguments after the buffers, set with setBytes
        "params": [{"name": p.name, "dtype": p.dtype.name, "access": p.access, "itemsize": ITEMSIZE[p.dtype.name]}
                   for p in kn.params],
        "schedule": {key: value for key, value in kn.schedule.items() if isinstance(value, (int, str, float))},
    }


def pack(source: str, kernels: list[dict], desc: TargetDesc, metallib: bytes | None, note: str) -> bytes:
    doc = {"magic": MAGIC, "version": VERSION, "arch": desc.arch, "family": desc.extra["family"],
           "msl": desc.extra["msl"], "language_version": desc.extra["language_version"], "source": source,
           "kernels": kernels, "metallib": base64.b64encode(metallib).decode() if metallib else None,
           "metallib_sdk": "macosx" if metallib else None, "metallib_note": note}
    return json.dumps(doc, indent=1).encode()


def unpack(data: bytes) -> dict:
    try:
        doc = json.loads(data)
        ok = doc.get("magic") == MAGIC and isinstance(doc.get("kernels"), list)
    except (ValueError, AttributeError):
        ok = False
    if not ok:
        raise RetargetError("this is not a retarget MSL executable", hint="recompile with --target metal-spirv")
    if doc["version"] != VERSION:
        raise RetargetError(f"MSL executable version {doc['version']}; this plugin reads {VERSION}",
                            hint="recompile with --target metal-spirv")
    return doc


def compile_kernels(kernels, desc: TargetDesc, bindings: list[tuple[Binding, ...]] | None = None) -> ExecutableBinary:
    """Kernel IR -> one MSL library -> one executable. `bindings[i]` describes kernel i's params as tensors;
    without it each param is a flat 1-D tensor."""
    kernels = list(kernels)
    source = render_source(kernels, desc)
    metallib, note = build_metallib(source, desc.extra["msl"])
    if bindings is None:
        bindings = [tuple(Binding(TensorType((k.expr_dim(p.size),), p.dtype), p.access) for p in kn.params)
                    for kn in kernels]
    entries = [k.entry_point(kn, b) for kn, b in zip(kernels, bindings)]
    data = pack(source, [kernel_meta(kn) for kn in kernels], desc, metallib, note)
    listing = f"// metal-spirv:{desc.arch}, MSL {desc.extra['msl']}; {note or 'metallib built'}\n{source}"
    return ExecutableBinary(FORMAT, desc, data, entries, listing=listing)
