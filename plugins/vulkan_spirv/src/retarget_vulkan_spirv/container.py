"""The `spirv` executable container: JSON with one SPIR-V module per kernel (never pickle).

    {"magic": "retarget-spirv", "version": 1, "target": "<arch>",
     "kernels": [{"name": str,                      # the entry point's name, also OpEntryPoint's
                  "spirv": str,                     # base64 of the SPIR-V words, little-endian
                  "workgroup_size": [x, y, z],      # also the module's LocalSize
                  "workgroup_count": [x, y, z],     # or, with scalars, dimensions of them ("(n + 255) // 256")
                  "scalars": [str, ...],            # symbols whose values follow the bases in the push constants
                  "params": [{"dtype": "f32", "itemsize": 4, "access": "read" | "write"}, ...],
                  "slots": [int, ...],              # the binding of each param
                  "push_constant_bytes": int,       # 4 * (len(params) + len(scalars))
                  "required_subgroup_size": int | null,
                  "shared_bytes": int,
                  "capabilities": [str, ...],       # the module's OpCapability names
                  "extensions": [str, ...]}]}       # and its OpExtension names (absent before they were listed)

Binding model: descriptor set 0, binding `slots[i]` holds param i, a storage buffer. The push
constants are one u32 per param: the element index where param i starts inside its binding;
then one i32 per scalar (a size known at run time, `Kernel.scalars`), set at each dispatch.
So the driver may bind any range that holds the tensor (rounded down to the device's
minStorageBufferOffsetAlignment, or the whole buffer) and pass the remainder there.
Usually `slots[i] == i`. A kernel with more params than the target's storage buffers per
stage shares one binding among all params of an element type: the driver binds one range
covering them when they live in one buffer, and gathers them into a scratch buffer (copies
recorded around the dispatch) when they do not.
"""

from __future__ import annotations

import base64
import json

from retarget.errors import RetargetError

MAGIC = "retarget-spirv"
VERSION = 1


def pack(kernels: list[dict], arch: str) -> bytes:
    return json.dumps({"magic": MAGIC, "version": VERSION, "target": arch, "kernels": kernels}, indent=1).encode()


def unpack(data: bytes) -> list[dict]:
    try:
        doc = json.loads(data)
        ok = doc.get("magic") == MAGIC and isinstance(doc.get("kernels"), list)
    except (ValueError, AttributeError):
        ok = False
    if not ok:
        raise RetargetError("this is not a retarget SPIR-V executable", hint="recompile with --target vulkan-spirv")
    if doc["version"] != VERSION:
        raise RetargetError(f"SPIR-V executable version {doc['version']}; this plugin reads {VERSION}",
                            hint="recompile with --target vulkan-spirv")
    return doc["kernels"]


def words(kernel: dict) -> bytes:
    """The SPIR-V binary of one kernel entry."""
    return base64.b64decode(kernel["spirv"])


def encode_words(binary: bytes) -> str:
    return base64.b64encode(binary).decode()
