"""VK_NV_cooperative_matrix2, which the `vulkan` package's bindings predate: its three structs and one query,
declared here with cffi and linked into the package's pNext chains by address.

What retarget uses of it: cooperative matrices of workgroup scope with flexible dimensions, which the driver
stages through workgroup memory itself (`retarget.kernel.lower.WorkgroupTiles`). The device description
lists them as `cooperative_matrix_workgroup`; `targets.workgroup_fragments` turns that into the lowering's
`workgroup_fragments`."""

from __future__ import annotations

import cffi

EXTENSION = "VK_NV_cooperative_matrix2"
FEATURES_STYPE, FLEXIBLE_DIMENSIONS_STYPE, PROPERTIES_STYPE = 1000593000, 1000593001, 1000593002
FEATURE_NAMES = ("cooperativeMatrixWorkgroupScope", "cooperativeMatrixFlexibleDimensions",
                 "cooperativeMatrixReductions", "cooperativeMatrixConversions",
                 "cooperativeMatrixPerElementOperations", "cooperativeMatrixTensorAddressing",
                 "cooperativeMatrixBlockLoads")
USED_FEATURES = FEATURE_NAMES[:2]  # what generated code needs; enabled on the VkDevice when present
QUERY = "vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV"

_ffi = cffi.FFI()
_ffi.cdef("""
typedef struct { int32_t sType; void* pNext; %s } Matrix2Features;
typedef struct { int32_t sType; void* pNext; uint32_t cooperativeMatrixWorkgroupScopeMaxWorkgroupSize;
                 uint32_t cooperativeMatrixFlexibleDimensionsMaxDimension;
                 uint32_t cooperativeMatrixWorkgroupScopeReservedSharedMemory; } Matrix2Properties;
typedef struct { int32_t sType; void* pNext; uint32_t MGranularity; uint32_t NGranularity; uint32_t KGranularity;
                 int32_t AType; int32_t BType; int32_t CType; int32_t ResultType; uint32_t saturatingAccumulation;
                 int32_t scope; uint32_t workgroupInvocations; } FlexibleDimensions;
""" % " ".join(f"uint32_t {name};" for name in FEATURE_NAMES))


def features(enable=()):
    """A fresh features struct (the names in `enable` set, for vkCreateDevice)."""
    return _ffi.new("Matrix2Features*", {"sType": FEATURES_STYPE, **{name: 1 for name in enable}})


def properties():
    return _ffi.new("Matrix2Properties*", {"sType": PROPERTIES_STYPE})


def link(vk_ffi, struct):
    """`struct` as the `vulkan` package's `void*`, for a pNext field (keep `struct` alive meanwhile)."""
    return vk_ffi.cast("void*", int(_ffi.cast("uintptr_t", struct)))


def feature_values(struct) -> dict[str, bool]:
    return {name: bool(getattr(struct, name)) for name in FEATURE_NAMES}


def limits(struct) -> dict[str, int]:
    return {"max_workgroup_size": int(struct.cooperativeMatrixWorkgroupScopeMaxWorkgroupSize),
            "max_dimension": int(struct.cooperativeMatrixFlexibleDimensionsMaxDimension),
            "reserved_shared_memory": int(struct.cooperativeMatrixWorkgroupScopeReservedSharedMemory)}


def flexible_dimensions(vk_ffi, address, physical_handle, component_names: dict, scope_names: dict) -> list[dict]:
    """Every shape the device lists through `address` (the query's function pointer, from
    vkGetInstanceProcAddr), with its types and scope by name."""
    query = _ffi.cast("int32_t(*)(void*, uint32_t*, FlexibleDimensions*)", int(vk_ffi.cast("uintptr_t", address)))
    handle = _ffi.cast("void*", int(vk_ffi.cast("uintptr_t", physical_handle)))
    count = _ffi.new("uint32_t*")
    if query(handle, count, _ffi.NULL) not in (0, 5) or not count[0]:  # VK_SUCCESS, VK_INCOMPLETE
        return []
    items = _ffi.new("FlexibleDimensions[]", count[0])
    for item in items:
        item.sType = FLEXIBLE_DIMENSIONS_STYPE
    if query(handle, count, items) not in (0, 5):
        return []

    def component(t):
        return component_names.get(int(t), f"type{int(t)}")

    return [{"M": int(s.MGranularity), "N": int(s.NGranularity), "K": int(s.KGranularity), "a": component(s.AType),
             "b": component(s.BType), "c": component(s.CType), "result": component(s.ResultType),
             "saturating": bool(s.saturatingAccumulation), "scope": scope_names.get(int(s.scope), str(int(s.scope))),
             "workgroup_invocations": int(s.workgroupInvocations)} for s in items[0:count[0]]]
