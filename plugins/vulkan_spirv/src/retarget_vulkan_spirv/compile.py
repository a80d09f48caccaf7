"""Kernels -> ExecutableBinary: one SPIR-V module per kernel (codegen.py) in the JSON container
(container.py). The limits come from the TargetDesc: workgroup size and count, workgroup
memory, storage buffers per stage and push-constant bytes; a kernel that exceeds one is
refused here, with the limit named, rather than failing in a driver."""

from __future__ import annotations

from retarget.errors import UnsupportedOpError
from retarget.ir.core import TensorType
from retarget.ir.symbolic import dims_from_json, dims_to_json
from retarget.kernel import ir as k
from retarget.kernel.lower import fold_grid
from retarget.protocols import Binding, EntryPoint, ExecutableBinary, TargetDesc

from . import FORMAT, container, validate
from .codegen import generate

SPEC_MINIMUMS = {  # Vulkan's required limits, for a TargetDesc that does not say
    "maxComputeWorkGroupCount": [65535, 65535, 65535], "maxComputeSharedMemorySize": 16384,
    "maxPerStageDescriptorStorageBuffers": 4, "maxPushConstantsSize": 128,
}


def _limits(desc: TargetDesc) -> dict:
    return {**SPEC_MINIMUMS, **desc.extra.get("limits", {})}


def _check(kn: k.Kernel, desc: TargetDesc, shared_bytes: int) -> None:
    limits = _limits(desc)
    where = f"kernel {kn.name} on vulkan-spirv:{desc.arch}"
    wx, wy, wz = kn.workgroup_size
    if wx * wy * wz > desc.max_workgroup_size or any(a > b for a, b in zip(kn.workgroup_size, desc.max_workgroup_dims)):
        raise UnsupportedOpError(f"{where}: a {wx}x{wy}x{wz} workgroup exceeds the target's {desc.max_workgroup_size} "
                                 f"invocations (at most {desc.max_workgroup_dims})")
    if shared_bytes > desc.shared_memory_bytes:
        raise UnsupportedOpError(f"{where}: {shared_bytes} bytes of workgroup memory; the target has "
                                 f"{desc.shared_memory_bytes}")
    if 4 * (len(kn.params) + len(kn.scalars)) > limits["maxPushConstantsSize"]:
        raise UnsupportedOpError(f"{where}: {4 * (len(kn.params) + len(kn.scalars))} bytes of push constants; "
                                 f"the target has {limits['maxPushConstantsSize']}")


def render(kn: k.Kernel, desc: TargetDesc) -> dict:
    """One kernel -> its container entry (see container.py)."""
    kn = fold_grid(kn, min(_limits(desc)["maxComputeWorkGroupCount"]))
    generated = generate(kn, desc.features, _limits(desc)["maxPerStageDescriptorStorageBuffers"])
    _check(kn, desc, generated.shared_bytes)
    spirv_val = validate.spirv_val_path()
    if spirv_val:
        validate.check(generated.binary, kn.name, spirv_val)
    return {
        "name": kn.name,
        "spirv": container.encode_words(generated.binary),
        "workgroup_size": list(kn.workgroup_size),
        "workgroup_count": dims_to_json(k.expr_dim(c) for c in kn.workgroup_count),
        "scalars": list(kn.scalars),  # after the bases in the push constants, as i32
        "params": [{"dtype": p.dtype.name, "itemsize": p.dtype.itemsize, "access": p.access} for p in kn.params],
        "slots": list(generated.slots),
        "push_constant_bytes": 4 * (len(kn.params) + len(kn.scalars)),
        # None: the code does not depend on it (codegen.py); cooperative matrices need whole subgroups of their width
        "required_subgroup_size": generated.required_subgroup_size,
        "shared_bytes": generated.shared_bytes,
        "capabilities": list(generated.capabilities),
        "extensions": list(generated.extensions),
    }


def compile_kernels(kernels, desc: TargetDesc, bindings: list[tuple[Binding, ...]] | None = None) -> ExecutableBinary:
    """Kernel IR -> one SPIR-V module per kernel -> one executable. `bindings[i]` describes kernel i's params as
    tensors; without it each param is a flat 1-D tensor."""
    rendered = [render(kn, desc) for kn in kernels]
    if bindings is None:
        bindings = [tuple(Binding(TensorType((k.expr_dim(p.size),), p.dtype), p.access) for p in kn.params)
                    for kn in kernels]
    entries = [EntryPoint(r["name"], tuple(b), tuple(r["workgroup_size"]), dims_from_json(r["workgroup_count"]),
                          tuple(r["scalars"])) for r, b in zip(rendered, bindings)]
    listing = "\n\n".join(k.print_kernel(kn) for kn in kernels)
    return ExecutableBinary(FORMAT, desc, container.pack(rendered, desc.arch), entries, listing=listing)
