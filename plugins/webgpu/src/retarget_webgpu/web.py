"""A module's WGSL, laid out for a browser: one .wgsl file per kernel, the constant pool,
`manifest.json`, which says everything a loader needs, and the loader itself (README: "Running in a
browser").

    folder/
      manifest.json        kernels (file, bindings, workgroup counts), functions (signatures, host programs)
      constants.bin        the constant pool, uploaded once
      kernels/NAME.wgsl    one module per kernel, entry point NAME
      retarget.js          the loader: `await load("manifest.json")`, then `await model.main(x)`
      index.html           a page that loads the model and runs each function once

A host program is a list of commands; a dispatch names its kernel and, per binding, the buffer
("arena" or "const"), the byte offset and the byte size. The loader binds the range as
compile.py describes: `rt_base` (binding len(groups), a uniform of vec4<i32>) holds, per
parameter, its offset in elements from the start of the bound range.

Layout. WebGPU forbids two bindings of one dispatch to overlap in a buffer when either is writable
(all of ours are read_write), and Dawn, Chrome's WebGPU, checks it. The runtime places tensors at
64-byte boundaries, so ranges rounded down to a 256-byte offset alignment would overlap. Export
therefore spreads the arena and the constant pool so that every tensor starts at a multiple of 256
bytes (`BINDING_ALIGNMENT`, the largest minStorageBufferOffsetAlignment a device may ask): each
binding is then exactly its tensor. The order and the reuse of bytes stay as planned.
"""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path

import numpy as np

from .compile import unpack

FORMAT = "retarget-webgpu-export"
VERSION = 2  # js/retarget.js reads this version only
LOADER_FILES = ("retarget.js", "index.html")
BINDING_ALIGNMENT = 256


def _spread(slots, size: int) -> tuple[dict[int, int], int]:
    """Where each byte offset of a buffer goes when every slot (offset, bytes) starts at a multiple of
    BINDING_ALIGNMENT: a monotone map that moves no two offsets closer together, so slots that were apart stay
    apart and each still fits. Returns ({old offset: new offset} for every slot's start and end, the new size)."""
    starts = {offset for offset, _ in slots}
    points = sorted(starts | {offset + nbytes for offset, nbytes in slots} | {0, size})
    where, at, previous = {}, 0, 0
    for point in points:
        at += point - previous
        if point in starts:
            at = -(-at // BINDING_ALIGNMENT) * BINDING_ALIGNMENT
        where[point], previous = at, point
    return where, where[points[-1]]


def _spread_functions(functions: dict, constants):
    """The functions with every slot moved by `_spread` (an arena per function, one constant pool), and the
    constant pool's bytes moved the same way."""
    def slots_of(fn):
        for arg in fn["inputs"] + fn["outputs"]:
            yield arg["slot"]
        for command in fn["program"]:
            yield from command.get("bindings", [])

    const_slots = [(offset, nbytes) for fn in functions.values() for kind, offset, nbytes in slots_of(fn)
                   if kind == "const"]
    const_where, const_size = _spread(const_slots, len(constants))
    spread = np.zeros(const_size, dtype=np.uint8)
    points = sorted(const_where)
    for start, end in zip(points, points[1:]):
        spread[const_where[start]:const_where[start] + end - start] = constants[start:end]

    def move(slot, where):
        kind, offset, nbytes = slot
        return [kind, where[kind][offset], nbytes]

    moved = {}
    for name, fn in functions.items():
        arena_where, arena_size = _spread([(offset, nbytes) for kind, offset, nbytes in slots_of(fn)
                                           if kind == "arena"], fn["arena_bytes"])
        where = {"arena": arena_where, "const": const_where}
        moved[name] = {
            **fn,
            "inputs": [{**a, "slot": move(a["slot"], where)} for a in fn["inputs"]],
            "outputs": [{**a, "slot": move(a["slot"], where)} for a in fn["outputs"]],
            "arena_bytes": arena_size,
            "program": [{**c, "bindings": [move(b, where) for b in c["bindings"]]} if "bindings" in c else c
                        for c in fn["program"]],
        }
    return moved, spread


def export(artifact, folder, target: str | None = None) -> Path:
    """Write the WGSL executable of `artifact` (the first, or the one whose arch is `target`) to `folder`, with the
    loader and a page; returns the manifest's path."""
    from retarget.errors import RetargetError
    from retarget.mlir.syntax import parse_type

    if "placements" in artifact.manifest:
        raise RetargetError("the module is split between devices (compiled with --fallback), and a page runs only "
                            "its WebGPU part", hint="compile it for webgpu-spirv alone, without --fallback")
    staged = list(artifact.manifest.get("staged", {}))
    if staged:  # stages with host ops between them (retarget's runtime_staged.py), which the loader does not run
        raise RetargetError(f"function {', '.join(staged)} has sizes that depend on the data (NonZero, Unique, "
                            "NonMaxSuppression, a boolean mask): it runs as stages with host ops between them, and "
                            "the browser loader runs one host program a function",
                            hint="run it with retarget, or export a model without these ops")
    dynamic = [name for name, plan in artifact.manifest["functions"].items() if "symbols" in plan]
    if dynamic:  # the loader's host programs are static: sizes are placed once
        raise RetargetError(f"function {', '.join(dynamic)} has sizes known only at run time; the browser loader "
                            "runs static host programs", hint="compile with --dim NAME=SIZE for each symbolic "
                            "dimension to export a static module")

    executables = [e for e in artifact.manifest["executables"] if e["format"] == "wgsl"
                   and (target is None or e["arch"] == target or f"{e['backend']}:{e['arch']}" == target)]
    if not executables:
        held = ", ".join(f"{e['backend']}:{e['arch']}" for e in artifact.manifest["executables"]) or "none"
        which = f" for {target}" if target else ""
        raise RetargetError(f"the module holds no WGSL executable{which} (it holds {held})",
                            hint="compile with --target webgpu-spirv")
    exe = executables[0]
    kernels = unpack(bytes(artifact.entries[exe["path"]]))
    folder = Path(folder)
    (folder / "kernels").mkdir(parents=True, exist_ok=True)
    functions, constants = _spread_functions(artifact.manifest["functions"], np.asarray(artifact.constants()))
    (folder / "constants.bin").write_bytes(constants.tobytes())
    entries = []
    for meta, entry in zip(kernels, exe["entry_points"]):
        path = f"kernels/{meta['name']}.wgsl"
        (folder / path).write_text(meta["wgsl"] + "\n")
        entries.append({
            "name": meta["name"],
            "file": path,
            "entry_point": meta["name"],
            "workgroup_size": meta["workgroup_size"],
            "workgroup_count": meta["workgroup_count"],
            # binding g is a read_write storage buffer holding parameters groups[g]; binding len(groups) is rt_base
            "groups": meta["groups"],
            "packed": meta["packed"],
            "itemsizes": meta["itemsizes"],
            "params": entry["bindings"],  # tensor type and access of each parameter, in order
        })

    def tensor(arg: dict) -> dict:
        t = parse_type(arg["type"])
        return {**arg, "shape": list(t.shape), "dtype": t.dtype.name}

    functions = {name: {**fn, "inputs": list(map(tensor, fn["inputs"])), "outputs": list(map(tensor, fn["outputs"]))}
                 for name, fn in functions.items()}
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "target": exe["target"],
        "limits": exe["target"]["extra"]["limits"],  # requiredLimits for requestDevice
        "features": list(exe["target"]["features"]),  # requiredFeatures
        "constants": {"file": "constants.bin", "size": int(constants.nbytes)},
        "kernels": entries,
        "functions": functions,
    }
    for name in LOADER_FILES:
        (folder / name).write_text(files(__package__).joinpath("js", name).read_text())
    out = folder / "manifest.json"
    out.write_text(json.dumps(manifest, indent=1))
    return out
