"""Kernels -> ExecutableBinary: one WGSL module per kernel, in a JSON container (never pickle).

Binding model. WebGPU binds storage buffers at offsets that are multiples of
minStorageBufferOffsetAlignment (256 bytes by default), and the core's host program places
tensors at 64-byte boundaries. So the code does not assume where a binding starts: each
buffer parameter reads and writes `p[p_base + i]`, and `p_base` (elements) comes from a small
uniform, `rt_base`. The driver binds each tensor's range rounded down to the alignment and
puts the remainder in `rt_base`, so any 64-byte-aligned (indeed itemsize-aligned) tensor works,
and a binding never needs to exceed the tensor by more than the alignment.

Packing. A kernel with more buffer parameters than the target's
max-storage-buffers-per-shader-stage (8 by default) is *packed*: it declares one binding per
element type (`rt_mem_f32`), and each parameter is a window of it at `p_base`. The driver binds
one range that covers all of a group's tensors when they share a buffer (the runtime's case:
one arena, one constant pool), and copies them into a scratch buffer when they do not.

Grid. More than max-compute-workgroups-per-dimension workgroups become a 2-D grid; the kernel
folds (x, y) back into its 1-D workgroup index and skips the few extra workgroups.

Types. WGSL has f32, i32, u32 and (with shader-f16) f16 in buffers. bf16 and bool have no WGSL type
that a buffer can hold: their buffers are u32 words of two bf16 (unpacked to f32 as they are read) or
four bools (numpy's bytes); a written one is an array of atomic words, since threads may write the
other parts of one word (an atomicAnd and an atomicOr per element). i64 and ui64 data is a vec2<u32> (low
word, high word) computed exactly by the shared renderer's helpers, and such a buffer an array of them (numpy's
bytes). Index arithmetic (the kernel IR's i64) is i32 in every kernel: a buffer of 2^31 elements or more is
refused, by the compiler where its size is static and by the driver at each dispatch where it is known only
at run time. f64 buffers are refused by name; the narrow types (float8, float4, the 4- and 2-bit integers) are
bytes by the time a kernel is rendered (`retarget.kernel.narrow`).

Sizes known at run time. A kernel's scalars (`Kernel.scalars`) follow the element bases in `rt_base`,
as i32 (sizes, never negative): the driver writes them at each dispatch, and the workgroup count is computed
from them.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace

from retarget.errors import RetargetError, UnsupportedOpError
from retarget.ir.core import TensorType
from retarget.ir.symbolic import dims_from_json, dims_to_json
from retarget.kernel import ir as k
from retarget.kernel.lower import fold_grid
from retarget.protocols import Binding, EntryPoint, ExecutableBinary, TargetDesc

from . import FORMAT

MAGIC = "retarget-wgsl"
VERSION = 1
# dtype -> (WGSL element type, bytes an element of `rt_base` counts). bf16 and the 16-bit integers sit two to a
# u32 word, bool and the 8-bit integers four (the shared renderer's `word_parts`): their bases count words, and
# tensors start on words. An i64 or ui64 is a vec2<u32> (the renderer's `emulated`).
STORAGE_TYPES = {"f32": ("f32", 4), "i32": ("i32", 4), "ui32": ("u32", 4), "f16": ("f16", 2), "bf16": ("u32", 4),
                 "i1": ("u32", 4), "i64": ("vec2<u32>", 8), "ui64": ("vec2<u32>", 8), "i8": ("u32", 4),
                 "ui8": ("u32", 4), "i16": ("u32", 4), "ui16": ("u32", 4)}
INDEX_LIMIT = 2**31  # elements a buffer may hold: WGSL kernels index in i32


def _dialect(packed: bool, shader_f16: bool):
    """WGSL for this kernel: without shader-f16 no code may name f16, so a value rounded to f16 inside a kernel is
    rounded in f32 arithmetic (`rt_round_f16`)."""
    from retarget.kernel.c_renderer import WGSL

    wgsl = WGSL if shader_f16 else replace(WGSL, from_storage={**WGSL.from_storage, "f16": "{0}"},
                                           to_storage={**WGSL.to_storage, "f16": "rt_round_f16({0})"})
    prologue = "let {name}_base: i32 = rt_base[{i} / 4][{i} % 4];"
    # after the bases; {T} is the index type, i64 (two u32 words): a size is not negative, so its high word is 0
    scalar = "let {name}: {T} = {T}(bitcast<u32>(rt_base[{i} / 4][{i} % 4]), 0u);"
    if packed:  # every bf16 (or bool) parameter shares one array, written by some: atomic words throughout
        parts = {name: {**table, "word": table["atomic_word"]} for name, table in wgsl.word_parts.items()}
        return replace(wgsl, global_param="", element="rt_mem_{D}[{name}_base + {index}]", prologue=prologue,
                       word_parts=parts, scalar_prologue=scalar)
    return replace(wgsl, element="{name}[{name}_base + {index}]", prologue=prologue, scalar_prologue=scalar)


# Why a buffer of a type outside STORAGE_TYPES is refused (else BUFFER_TYPES_NOTE).
REFUSED_BUFFERS = {"f64": "WGSL has no f64; use f32"}
BUFFER_TYPES_NOTE = ("WGSL buffers hold f32, i32, u32, (with shader-f16) f16, and here bf16, bool and the 8- and "
                     "16-bit integers in u32 words and i64 and ui64 in pairs of them")
SHADER_F16_NOTE = "f16 needs the shader-f16 feature, which this target does not assume"


def support(desc: TargetDesc):
    """What webgpu-spirv cannot run: the WGSL renderer table's gaps (the core's: f64, bf16, 8/16-bit integers,
    `exp` of integers, ...), and buffers of the types `_check_types` refuses (not the narrow types: `lower_dispatch`
    makes them bytes)."""
    from retarget.ir.dtypes import DTYPES
    from retarget.kernel.c_renderer import WGSL, support_table
    from retarget.kernel.narrow import NARROW_TYPES
    from retarget.protocols import SupportTable

    table = support_table(WGSL)
    buffers = {name: REFUSED_BUFFERS.get(name, BUFFER_TYPES_NOTE) for name in DTYPES
               if name not in STORAGE_TYPES and name not in NARROW_TYPES}  # those are bytes by then (ui8)
    if "shader-f16" not in desc.features:
        buffers["f16"] = SHADER_F16_NOTE
    return SupportTable(table.ops, table.dtypes, buffers)


def _check_types(kn: k.Kernel, desc: TargetDesc) -> None:
    for p in kn.params:
        if p.dtype.name not in STORAGE_TYPES:
            why = REFUSED_BUFFERS.get(p.dtype.name, BUFFER_TYPES_NOTE)
            raise UnsupportedOpError(f"webgpu-spirv: kernel {kn.name} has a {p.dtype} buffer (%{p.name}): {why}",
                                     hint="cast the model to f32/i32, or use another target")
        if p.dtype.name == "f16" and "shader-f16" not in desc.features:
            raise UnsupportedOpError(
                f"webgpu-spirv:{desc.arch}: kernel {kn.name} has an f16 buffer, and {SHADER_F16_NOTE}",
                hint="compile for webgpu-spirv:host on a device with shader-f16, or a profile that has it")
        if isinstance(p.size, int) and p.size >= INDEX_LIMIT:
            raise UnsupportedOpError(f"webgpu-spirv: buffer %{p.name} of kernel {kn.name} has {p.size} elements; "
                                     f"WGSL kernels index in i32, so at most 2^31 - 1")


def _shared_bytes(stmts) -> int:
    total = 0
    for s in stmts:
        if isinstance(s, k.Local) and s.shared:
            total += s.size * (8 if s.dtype.name in ("i64", "ui64") else 4)  # 32-bit types, and vec2<u32>
        elif isinstance(s, (k.Loop, k.If)):
            total += _shared_bytes(s.body)
    return total


def _check_limits(kn: k.Kernel, desc: TargetDesc) -> None:
    limits = desc.extra["limits"]
    wx, wy, wz = kn.workgroup_size
    if wx * wy * wz > limits["max-compute-invocations-per-workgroup"] or \
            any(a > b for a, b in zip(kn.workgroup_size, desc.max_workgroup_dims)):
        raise UnsupportedOpError(f"kernel {kn.name} wants a {wx}x{wy}x{wz} workgroup; webgpu-spirv:{desc.arch} "
                                 f"allows {limits['max-compute-invocations-per-workgroup']} invocations, "
                                 f"at most {desc.max_workgroup_dims}")
    shared = _shared_bytes(kn.body)
    if shared > limits["max-compute-workgroup-storage-size"]:
        raise UnsupportedOpError(f"kernel {kn.name} needs {shared} bytes of workgroup memory; webgpu-spirv:"
                                 f"{desc.arch} allows {limits['max-compute-workgroup-storage-size']}")


def render(kn: k.Kernel, desc: TargetDesc) -> dict:
    """One kernel -> {"name", "wgsl", "groups", ...}: the WGSL module and how its bindings are laid out."""
    from retarget.kernel.c_renderer import WGSL, render_module

    _check_types(kn, desc)
    _check_limits(kn, desc)
    kn = fold_grid(kn, desc.extra["limits"]["max-compute-workgroups-per-dimension"])
    limit = desc.extra["limits"]["max-storage-buffers-per-shader-stage"]
    packed = len(kn.params) > limit
    if packed:
        order = list(dict.fromkeys(p.dtype.name for p in kn.params))
        groups = [[i for i, p in enumerate(kn.params) if p.dtype.name == t] for t in order]
        if len(groups) > limit:
            raise UnsupportedOpError(f"kernel {kn.name} has buffers of {len(groups)} element types; "
                                     f"webgpu-spirv:{desc.arch} binds at most {limit} storage buffers")
        element = {name: "atomic<u32>" if name in WGSL.word_parts else wgsl
                   for name, (wgsl, _) in STORAGE_TYPES.items()}
        decls = [f"@group(0) @binding({g}) var<storage, read_write> rt_mem_{t}: array<{element[t]}>;"
                 for g, t in enumerate(order)]
    else:
        groups = [[i] for i in range(len(kn.params))]
        decls = []
    shader_f16 = "shader-f16" in desc.features
    source = render_module([kn], _dialect(packed, shader_f16))
    words = len(kn.params) + len(kn.scalars)
    uniform = (f"@group(0) @binding({len(groups)}) var<uniform> rt_base: "
               f"array<vec4<i32>, {max(1, -(-words // 4))}>;")
    # f16 buffers, or a value rounded to f16 inside the kernel (`f16(x)`)
    enable = ["enable f16;"] if shader_f16 and re.search(r"\bf16\b", source) else []
    wgsl = "\n".join([*enable, *decls, uniform, "", source])
    return {
        "name": kn.name,
        "wgsl": wgsl,
        "packed": packed,
        "groups": groups,  # binding g holds params groups[g]; binding len(groups) is the uniform rt_base
        "storage_types": [STORAGE_TYPES[p.dtype.name][0] for p in kn.params],
        "itemsizes": [STORAGE_TYPES[p.dtype.name][1] for p in kn.params],
        "workgroup_size": list(kn.workgroup_size),
        "workgroup_count": dims_to_json(k.expr_dim(c) for c in kn.workgroup_count),
        "scalars": list(kn.scalars),
    }


def pack(kernels: list[dict], desc: TargetDesc) -> bytes:
    return json.dumps({"magic": MAGIC, "version": VERSION, "profile": desc.arch, "kernels": kernels},
                      indent=1).encode()


def unpack(data: bytes) -> list[dict]:
    try:
        doc = json.loads(data)
        ok = doc.get("magic") == MAGIC and isinstance(doc.get("kernels"), list)
    except (ValueError, AttributeError):
        ok = False
    if not ok:
        raise RetargetError("this is not a retarget WGSL executable", hint="recompile with --target webgpu-spirv")
    if doc["version"] != VERSION:
        raise RetargetError(f"WGSL executable version {doc['version']}; this plugin reads {VERSION}",
                            hint="recompile with --target webgpu-spirv")
    return doc["kernels"]


def compile_kernels(kernels, desc: TargetDesc, bindings: list[tuple[Binding, ...]] | None = None) -> ExecutableBinary:
    """Kernel IR -> one WGSL module per kernel -> one executable. `bindings[i]` describes kernel i's params as
    tensors; without it each param is a flat 1-D tensor."""
    rendered = [render(kn, desc) for kn in kernels]
    if bindings is None:
        bindings = [tuple(Binding(TensorType((k.expr_dim(p.size),), p.dtype), p.access) for p in kn.params)
                    for kn in kernels]
    entries = [EntryPoint(r["name"], tuple(b), tuple(r["workgroup_size"]), dims_from_json(r["workgroup_count"]),
                          tuple(r.get("scalars", ()))) for r, b in zip(rendered, bindings)]
    listing = "\n\n".join(f"// ---- {r['name']}{' (packed)' if r['packed'] else ''}\n{r['wgsl']}" for r in rendered)
    return ExecutableBinary(FORMAT, desc, pack(rendered, desc), entries, listing=listing)
