"""A module's WGSL, laid out for a browser: one .wgsl file per kernel, the constant pool, and
`manifest.json`, which says everything a small JS loader needs (README: "Running in a browser").

    folder/
      manifest.json        kernels (file, bindings, workgroup counts), functions (host programs)
      constants.bin        the constant pool, uploaded once
      kernels/NAME.wgsl    one module per kernel, entry point NAME

A host program is a list of commands; a dispatch names its kernel and, per binding, the buffer
("arena" or "const"), the byte offset and the byte size. The loader binds the range as
compile.py describes: `rt_base` (binding len(groups), a uniform of vec4<i32>) holds, per
parameter, its offset in elements from the start of the bound range.
"""

from __future__ import annotations

import json
from pathlib import Path

from .compile import unpack


def export(artifact, folder, target: str | None = None) -> Path:
    """Write the WGSL executable of `artifact` (the first, or the one whose arch is `target`) to `folder`;
    returns the manifest's path."""
    from retarget.errors import RetargetError

    executables = [e for e in artifact.manifest["executables"] if e["format"] == "wgsl"
                   and (target is None or e["arch"] == target or f"{e['backend']}:{e['arch']}" == target)]
    if not executables:
        held = ", ".join(f"{e['backend']}:{e['arch']}" for e in artifact.manifest["executables"]) or "none"
        which = f" for {target}" if target else ""
        raise RetargetError(f"the module holds no WGSL executable{which} (it holds {held})",
                            hint="compile with --target webgpu-spirv")
    dynamic = [name for name, plan in artifact.manifest["functions"].items() if "symbols" in plan]
    if dynamic:  # the loader's host programs are static: sizes are placed once
        raise RetargetError(f"function {', '.join(dynamic)} has sizes known only at run time; the browser loader "
                            "runs static host programs", hint="compile with --dim NAME=SIZE for each symbolic "
                            "dimension to export a static module")
    exe = executables[0]
    kernels = unpack(bytes(artifact.entries[exe["path"]]))
    folder = Path(folder)
    (folder / "kernels").mkdir(parents=True, exist_ok=True)
    constants = artifact.constants()
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
    manifest = {
        "format": "retarget-webgpu-export",
        "version": 1,
        "target": exe["target"],
        "limits": exe["target"]["extra"]["limits"],  # requiredLimits for requestDevice
        "features": list(exe["target"]["features"]),  # requiredFeatures
        "constants": {"file": "constants.bin", "size": int(constants.nbytes)},
        "kernels": entries,
        "functions": artifact.manifest["functions"],
    }
    out = folder / "manifest.json"
    out.write_text(json.dumps(manifest, indent=1))
    return out
