"""The `vulkan` HAL driver, through the `vulkan` package (cffi over the system's libvulkan.so.1).

The process has one VkInstance (made on first use; Vulkan 1.3 requested, or what the loader has)
and one device per GPU: `create(id)` opens a VkDevice with one compute queue the first time and
returns that same device afterwards, as CUDA's primary context does. Every call goes straight to
`vulkan.lib` with structs built by `vulkan.ffi`, and a failed call raises `VulkanError` naming
the call and its VkResult.

- Buffers are device-local storage buffers. When their memory is also host-visible and coherent
  (lavapipe; a GPU with resizable BAR) it stays mapped and `write` is a memcpy; otherwise it goes
  through a host-visible staging buffer and a one-shot copy that is waited on. `read` is a memcpy
  from memory the host caches (lavapipe); other memory (a GPU's, which the host reads at tens of
  MB/s through the BAR) is read through a copy into cached memory, and a range read right after a
  command buffer ran is learned: that command buffer's later submits copy it too, in the same
  vkQueueSubmit, so a function's outputs cost a memcpy.
- An executable is one compute pipeline per kernel (made through the device's VkPipelineCache),
  laid out as container.py says: descriptor set 0 holds one storage buffer per param and the
  push constants one u32 element base per param.
- A command buffer records straight into a VkCommandBuffer that can be submitted many times.
  `dispatch` binds each tensor's range, rounded down to minStorageBufferOffsetAlignment, from a
  descriptor set that repeated bindings share, and pushes the element bases. `barrier` is one
  global memory barrier; the recording also starts and ends with one, which orders it after the
  host's writes and before the host's reads. A whole function replays with one vkQueueSubmit and
  one fence wait.
- `wait` polls the fences (vkGetFenceStatus) for up to 10 ms before it sleeps in vkWaitForFences:
  on an H100 a sleeping wait made a MobileNetV2 call take 1.6 ms instead of 0.4 ms. On a CPU
  device (lavapipe) it sleeps at once. RETARGET_VULKAN_SPIN_US sets the time; `spin_wait_s` too.
- `time(cb, repeats)` measures a command buffer on the device with timestamp queries, and
  `timed_submit(cb)` is one such run, for `retarget.bench`.

Threads: a device may be used from several threads at once. One lock serialises the queue, the
staging and transfer buffers, and the fences; a read learns a readback only for the command buffer
the reading thread itself submitted last, so threads never teach each other's command buffers to copy
their outputs. `device.live` counts what the device holds (memory bytes and allocations, pipelines,
command buffers), for leak checks.

Validation: with RETARGET_VULKAN_VALIDATION=1 in the environment (read once, when the instance is
made) the instance enables VK_LAYER_KHRONOS_validation (Debian: apt-get install
vulkan-validationlayers) and a VK_EXT_debug_utils messenger. Its warnings and errors are printed
to stderr and kept in `VULKAN.validation_messages` as {"severity", "id", "message"} dicts. A layer
older than 1.3.255 does not know VK_KHR_cooperative_matrix, so under it a device is described and
opened without that extension (one line on stderr says so).

Statistics: with RETARGET_VULKAN_PIPELINE_STATISTICS=1 (read when a device is opened) and a driver with
VK_KHR_pipeline_executable_properties, each pipeline's statistics as its compiler names them (registers,
spills, shared memory...) go to stderr as it is made; with a folder as the value, each kernel's statistics
(`<kernel>.json`) and the driver's internal representations (`<kernel>.<n>.txt`, its assembly where it
gives one) are written there instead. For tuning a schedule; timings are unchanged.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import weakref
from pathlib import Path

import numpy as np
from retarget.errors import RetargetError, UnknownDeviceError, no_such_device
from retarget.protocols import DeviceInfo, ExecutableBinary, TargetDesc

from . import FORMAT, container
from .targets import best_first

NAME = "vulkan"
INSTALL = "apt-get install mesa-vulkan-drivers libvulkan1"
VALIDATION_ENV = "RETARGET_VULKAN_VALIDATION"
VALIDATION_LAYER = "VK_LAYER_KHRONOS_validation"
OFF = ("", "0", "false", "no", "off")  # values that leave a RETARGET_VULKAN_* switch off
ON = ("1", "true", "yes", "on")
SPIN_ENV = "RETARGET_VULKAN_SPIN_US"  # microseconds `wait` polls the fences before it sleeps
DEFAULT_GPU_SPIN_US = 10_000  # 0 on a CPU device (lavapipe)
HOST_TARGET_HINT = "recompile with --target vulkan-spirv:host"
SPIRV_MAGIC = 0x07230203
WAIT_FOREVER = WHOLE_SIZE = 2**64 - 1  # UINT64_MAX: a timeout, and VK_WHOLE_SIZE


INDEX_LIMIT = 2**31  # elements a binding may span: kernels index in 32 bits (codegen.py), whatever their sizes


def beyond_32_bit_indices(name: str, params, bases, nbytes) -> str | None:
    """Why a dispatch cannot run, or None: a binding whose last element lies at 2^31 or beyond (its element base
    in the shared binding plus its length). A kernel whose sizes are known only at run time is compiled on this
    promise, so the check is made at every dispatch; the compiler refuses static sizes itself."""
    for i, (param, base, size) in enumerate(zip(params, bases, nbytes)):
        end = base + size // int(param["itemsize"])
        if end > INDEX_LIMIT:
            return (f"{name}: binding {i} spans {end} elements of {param['dtype']}; Vulkan kernels index in 32 bits, "
                    f"so at most {INDEX_LIMIT}")
    return None


class VulkanError(RetargetError):
    """A Vulkan call failed; `result` is the VkResult's name (VK_ERROR_...)."""

    def __init__(self, message: str, result: str = "", hint: str | None = None):
        self.result = result
        super().__init__(message, hint=hint)


def _vk():
    import vulkan

    return vulkan


RESULT_HINTS = {
    "VK_ERROR_OUT_OF_DEVICE_MEMORY": "the device is out of memory",
    "VK_ERROR_OUT_OF_HOST_MEMORY": "the host is out of memory",
    "VK_ERROR_DEVICE_LOST": "the GPU hung or was reset; a kernel may have run out of bounds",
    "VK_ERROR_INITIALIZATION_FAILED": "the Vulkan driver failed to start",
    "VK_ERROR_INCOMPATIBLE_DRIVER": f"no Vulkan driver (ICD) supports this; {INSTALL}",
}


def check(result: int, what: str) -> None:
    """Raise VulkanError, naming `what` was being done, unless `result` is VK_SUCCESS."""
    if result != 0:
        ffi = _vk().ffi
        name = ffi.string(ffi.cast("VkResult", result))
        raise VulkanError(f"{what} failed: {name}", result=name, hint=RESULT_HINTS.get(name))


def make_version(major: int, minor: int, patch: int = 0) -> int:
    return (major << 22) | (minor << 12) | patch


def version_text(version: int) -> str:
    return f"{(version >> 22) & 0x7F}.{(version >> 12) & 0x3FF}.{version & 0xFFF}"


V1_1, V1_2, V1_3 = make_version(1, 1), make_version(1, 2), make_version(1, 3)
STATISTICS_ENV, STATISTICS_EXTENSION = "RETARGET_VULKAN_PIPELINE_STATISTICS", "VK_KHR_pipeline_executable_properties"
CAPTURE_STATISTICS, CAPTURE_INTERNALS = 0x40, 0x80  # VkPipelineCreateFlagBits
COOPERATIVE_MATRIX_LAYER = make_version(1, 3, 255)  # the first validation layer that knows VK_KHR_cooperative_matrix


def binding_count(kernel: dict) -> int:
    """Descriptor bindings of a container kernel: one per param, unless params share them (container.py)."""
    slots = kernel.get("slots")
    return max(slots) + 1 if slots else len(kernel["params"])


def _round_up(n: int, to: int) -> int:
    return -(-n // to) * to


def _new(ctype: str, stype: str | None = None, **fields):
    """An owning `ctype*` with sType = VK_STRUCTURE_TYPE_<stype> and `fields` set."""
    vk = _vk()
    if stype is not None:
        fields["sType"] = getattr(vk, "VK_STRUCTURE_TYPE_" + stype)
    return vk.ffi.new(ctype + "*", fields)


def _strings(names):
    """A `char*[]` of `names`, and what keeps its strings alive."""
    ffi = _vk().ffi
    owned = [ffi.new("char[]", n.encode()) for n in names]
    return ffi.new("char*[]", owned), owned


def _chain(head, links):
    """Point each struct's pNext at the next one: head -> links[0] -> links[1] ..."""
    previous = head
    for link in links:
        previous.pNext = link
        previous = link


def _plain(value, ctype):
    """A cffi field as JSON data: char arrays as text, byte arrays as hex, structs as dicts."""
    ffi = _vk().ffi
    if ctype.kind == "array":
        if ctype.item.cname == "char":
            return ffi.string(value).decode(errors="replace")
        if ctype.item.cname == "uint8_t":
            return bytes(value).hex()
        return [_plain(v, ctype.item) for v in value]
    if ctype.kind == "struct":
        return _fields(value)
    if ctype.kind == "pointer":
        return None
    return value


def _fields(struct) -> dict:
    """A struct (or an owning pointer to one) as a dict, without sType and pNext."""
    ffi = _vk().ffi
    if ffi.typeof(struct).kind == "pointer":
        struct = struct[0]
    return {name: _plain(getattr(struct, name), field.type)
            for name, field in ffi.typeof(struct).fields if name not in ("sType", "pNext")}


def _enumerated(fn, ctype: str, *args) -> list:
    """Vulkan's two-call idiom: count, then fill. A list of `ctype` structs (their sType set, if any)."""
    vk = _vk()
    count = vk.ffi.new("uint32_t*")
    result = fn(*args, count, vk.ffi.NULL)
    if result not in (0, vk.VK_INCOMPLETE):
        check(result, fn.__name__ if hasattr(fn, "__name__") else "enumerate")
    items = vk.ffi.new(f"{ctype}[]", max(count[0], 1))
    item_type = vk.ffi.typeof(ctype)
    if item_type.kind == "struct" and "sType" in dict(item_type.fields):
        stype = STRUCTURE_TYPES.get(ctype)
        for item in items:
            item.sType = stype
    result = fn(*args, count, items)
    if result not in (0, vk.VK_INCOMPLETE):
        check(result, "enumerate")
    return [items[i] for i in range(count[0])]


STRUCTURE_TYPES: dict[str, int] = {}  # filled by _instance(): list-item struct -> its sType

# -- the schema's names for Vulkan's bits -------------------------------------------------

DEVICE_TYPES = {0: "other", 1: "integrated-gpu", 2: "discrete-gpu", 3: "virtual-gpu", 4: "cpu"}
SUBGROUP_OPERATIONS = ("basic", "vote", "arithmetic", "ballot", "shuffle", "shuffle_relative", "clustered", "quad")
QUEUE_FLAGS = ("graphics", "compute", "transfer", "sparse_binding", "protected", "video_decode", "video_encode",
               "optical_flow")
QUEUE_FLAG_BITS = (0x1, 0x2, 0x4, 0x8, 0x10, 0x20, 0x40, 0x100)
MEMORY_FLAGS = ("device_local", "host_visible", "host_coherent", "host_cached", "lazily_allocated", "protected")
COMPONENT_TYPES = {0: "f16", 1: "f32", 2: "f64", 3: "i8", 4: "i16", 5: "i32", 6: "i64", 7: "u8", 8: "u16", 9: "u32",
                   10: "u64", 1000141000: "bf16", 1000491002: "f8e4m3", 1000491003: "f8e5m2"}
SCOPES = {1: "device", 2: "workgroup", 3: "subgroup", 5: "queue_family"}

LIMITS = ("maxComputeWorkGroupInvocations", "maxComputeWorkGroupSize", "maxComputeWorkGroupCount",
          "maxComputeSharedMemorySize", "maxStorageBufferRange", "maxPushConstantsSize",
          "maxPerStageDescriptorStorageBuffers", "minStorageBufferOffsetAlignment", "timestampPeriod")
FEATURES = ("shaderFloat16", "shaderInt8", "shaderInt16", "shaderInt64", "shaderFloat64", "storageBuffer16BitAccess",
            "storageBuffer8BitAccess", "subgroupSizeControl", "computeFullSubgroups", "cooperativeMatrix",
            "bufferDeviceAddress", "vulkanMemoryModel", "shaderSignedZeroInfNanPreserveFloat32")
FLOAT_CONTROLS = "VK_KHR_shader_float_controls"
# Enabled on the VkDevice when present: the schema's features, and two that code using them needs.
ENABLED_FEATURES = FEATURES + ("vulkanMemoryModelDeviceScope", "shaderSubgroupExtendedTypes")


def _feature_links(api: int, extensions) -> list[tuple[str, str, str | None]]:
    """(struct, sType, extension to enable) of each VkPhysicalDeviceFeatures2 chain link this device has."""
    links = []
    if api >= V1_2:
        links += [("VkPhysicalDeviceVulkan11Features", "PHYSICAL_DEVICE_VULKAN_1_1_FEATURES", None),
                  ("VkPhysicalDeviceVulkan12Features", "PHYSICAL_DEVICE_VULKAN_1_2_FEATURES", None)]
    else:
        links.append(("VkPhysicalDevice16BitStorageFeatures", "PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES", None))
        for struct, stype, extension in (
            ("VkPhysicalDevice8BitStorageFeatures", "PHYSICAL_DEVICE_8BIT_STORAGE_FEATURES", "VK_KHR_8bit_storage"),
            ("VkPhysicalDeviceShaderFloat16Int8Features", "PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES",
             "VK_KHR_shader_float16_int8"),
            ("VkPhysicalDeviceBufferDeviceAddressFeatures", "PHYSICAL_DEVICE_BUFFER_DEVICE_ADDRESS_FEATURES",
             "VK_KHR_buffer_device_address"),
            ("VkPhysicalDeviceVulkanMemoryModelFeatures", "PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES",
             "VK_KHR_vulkan_memory_model"),
            ("VkPhysicalDeviceShaderSubgroupExtendedTypesFeatures",
             "PHYSICAL_DEVICE_SHADER_SUBGROUP_EXTENDED_TYPES_FEATURES", "VK_KHR_shader_subgroup_extended_types"),
        ):
            if extension in extensions:
                links.append((struct, stype, extension))
    if api >= V1_3:
        links.append(("VkPhysicalDeviceVulkan13Features", "PHYSICAL_DEVICE_VULKAN_1_3_FEATURES", None))
    elif "VK_EXT_subgroup_size_control" in extensions:
        links.append(("VkPhysicalDeviceSubgroupSizeControlFeatures", "PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES",
                      "VK_EXT_subgroup_size_control"))
    if "VK_KHR_cooperative_matrix" in extensions:
        links.append(("VkPhysicalDeviceCooperativeMatrixFeaturesKHR",
                      "PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR", "VK_KHR_cooperative_matrix"))
    return links


def _feature_chain(api: int, extensions):
    """A fresh VkPhysicalDeviceFeatures2 chain: (head, [(struct, extension)])."""
    head = _new("VkPhysicalDeviceFeatures2", "PHYSICAL_DEVICE_FEATURES_2")
    links = [(_new(struct, stype), extension) for struct, stype, extension in _feature_links(api, extensions)]
    _chain(head, [s for s, _ in links])
    return head, links


# -- the instance ---------------------------------------------------------------------------


class _Instance:
    """The process's VkInstance, its physical devices, and what the loader offered."""

    def __init__(self, handle, api_version: int, validation_layer_version: int, keep: list):
        self.handle = handle
        self.api_version = api_version
        self.validation = bool(validation_layer_version)
        self.validation_layer_version = validation_layer_version  # 0 without validation
        self.keep = keep  # the messenger, its callback, and the strings vkCreateInstance saw
        vk = _vk()
        self.physical_devices = list(_enumerated(vk.lib.vkEnumeratePhysicalDevices, "VkPhysicalDevice", handle))

    def proc(self, name: str):
        """An instance-level extension function, cast to its PFN type, or None."""
        vk = _vk()
        address = vk.lib.vkGetInstanceProcAddr(self.handle, name.encode())
        return None if address == vk.ffi.NULL else vk.ffi.cast("PFN_" + name, address)


_instance_lock = threading.Lock()
_instance_state: tuple[_Instance | None, str] | None = None


def _instance() -> tuple[_Instance | None, str]:
    """(the instance, "") or (None, why Vulkan cannot be used here and how to fix it). Made once."""
    global _instance_state
    with _instance_lock:
        if _instance_state is None:
            try:
                _instance_state = _create_instance()
            except Exception as e:  # anything the loader or a layer throws: report, never raise
                _instance_state = (None, f"Vulkan failed to start ({type(e).__name__}: {e})".replace("\n", " "))
        return _instance_state


def _create_instance() -> tuple[_Instance | None, str]:
    try:
        vk = _vk()
    except ImportError as e:
        return None, f"the `vulkan` package is not importable ({e}); pip install vulkan==1.3.275.1"
    except OSError as e:  # vulkan's import dlopens libvulkan.so.1
        return None, f"libvulkan.so.1 (the Vulkan loader) cannot be loaded ({e}); {INSTALL}".replace("\n", " ")
    ffi, lib = vk.ffi, vk.lib
    STRUCTURE_TYPES.update({
        "VkCooperativeMatrixPropertiesKHR": vk.VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR,
        "VkPipelineExecutablePropertiesKHR": vk.VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_PROPERTIES_KHR,
        "VkPipelineExecutableStatisticKHR": vk.VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR,
        "VkPipelineExecutableInternalRepresentationKHR":
            vk.VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INTERNAL_REPRESENTATION_KHR,
    })
    # Mesa's drivers that are not conformant (older lavapipe) print a warning on every start.
    os.environ.setdefault("MESA_VK_IGNORE_CONFORMANCE_WARNING", "1")
    try:
        version = ffi.new("uint32_t*")
        check(lib.vkEnumerateInstanceVersion(version), "vkEnumerateInstanceVersion")
        loader_version = version[0]
    except (AttributeError, NotImplementedError):  # a Vulkan 1.0 loader lacks the call
        loader_version = make_version(1, 0)
    if loader_version < V1_1:
        return None, (f"the Vulkan loader is version {version_text(loader_version)}; retarget needs 1.1 or newer "
                      f"({INSTALL})")
    api_version = min(V1_3, loader_version)

    validation = os.environ.get(VALIDATION_ENV, "").strip().lower() not in OFF
    layers, extensions, keep = [], [], []
    messenger_info = None
    layer_version = 0
    if validation:
        available = {ffi.string(p.layerName).decode(): int(p.specVersion)
                     for p in _enumerated(lib.vkEnumerateInstanceLayerProperties, "VkLayerProperties")}
        layer_version = available.get(VALIDATION_LAYER, 0)
        if VALIDATION_LAYER not in available:
            return None, (f"{VALIDATION_ENV}=1 asks for {VALIDATION_LAYER}, which is not installed "
                          f"(apt-get install vulkan-validationlayers, or unset {VALIDATION_ENV})")
        layers.append(VALIDATION_LAYER)
        extensions.append("VK_EXT_debug_utils")
        callback = ffi.callback("PFN_vkDebugUtilsMessengerCallbackEXT", _on_validation_message)
        messenger_info = _new(
            "VkDebugUtilsMessengerCreateInfoEXT", "DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT",
            messageSeverity=vk.VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT
            | vk.VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
            messageType=vk.VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT
            | vk.VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT | vk.VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT,
            pfnUserCallback=callback)
        keep += [callback, messenger_info]

    app_name = ffi.new("char[]", b"retarget")
    app = _new("VkApplicationInfo", "APPLICATION_INFO", pApplicationName=app_name, applicationVersion=1,
               pEngineName=app_name, engineVersion=1, apiVersion=api_version)
    layer_names, layer_keep = _strings(layers)
    extension_names, extension_keep = _strings(extensions)
    create_info = _new("VkInstanceCreateInfo", "INSTANCE_CREATE_INFO", pApplicationInfo=app,
                       enabledLayerCount=len(layers), ppEnabledLayerNames=layer_names,
                       enabledExtensionCount=len(extensions), ppEnabledExtensionNames=extension_names)
    if messenger_info is not None:  # also catches what vkCreateInstance itself reports
        create_info.pNext = messenger_info
    handle = ffi.new("VkInstance*")
    result = lib.vkCreateInstance(create_info, ffi.NULL, handle)
    override = driver_files_override(os.environ)
    if result == vk.VK_ERROR_INCOMPATIBLE_DRIVER:
        return None, "the Vulkan loader found no driver (ICD); " + (
            override or f"for a CPU device install Mesa's lavapipe: {INSTALL}")
    if result != 0 and override:  # a manifest the loader cannot parse fails as VK_ERROR_OUT_OF_HOST_MEMORY
        name = ffi.string(ffi.cast("VkResult", result))
        return None, f"vkCreateInstance failed ({name}); {override}"
    check(result, "vkCreateInstance")
    keep += [app_name, app, layer_names, layer_keep, extension_names, extension_keep]
    instance = _Instance(handle[0], api_version, layer_version, keep)
    if validation:
        create_messenger = instance.proc("vkCreateDebugUtilsMessengerEXT")
        messenger = ffi.new("VkDebugUtilsMessengerEXT*")
        check(create_messenger(instance.handle, messenger_info, ffi.NULL, messenger), "vkCreateDebugUtilsMessengerEXT")
        keep.append(messenger)
    if not instance.physical_devices:
        return None, "the Vulkan loader found drivers but no device; " + (
            override or f"for a CPU device install lavapipe: {INSTALL}")
    return instance, ""


# The loader's variables that replace (or add to) the installed drivers' manifests, newest spelling first.
DRIVER_FILE_VARIABLES = ("VK_DRIVER_FILES", "VK_ICD_FILENAMES", "VK_ADD_DRIVER_FILES")
ICD_FOLDERS = ("/usr/share/vulkan/icd.d", "/etc/vulkan/icd.d", "/usr/local/share/vulkan/icd.d")


def driver_files_override(environ) -> str:
    """'' unless a driver-manifest variable is set; else what it names and how to undo it. Such a variable
    replaces the installed drivers, so when the loader finds none it is the first thing to blame."""
    named = {var: environ[var] for var in DRIVER_FILE_VARIABLES if environ.get(var)}
    if not named:
        return ""
    paths = [path for value in named.values() for path in value.split(os.pathsep) if path]
    missing = [path for path in paths if not os.path.exists(path)]
    installed = sorted(str(f) for folder in ICD_FOLDERS if os.path.isdir(folder)
                       for f in Path(folder).glob("*.json"))
    return (" and ".join(f"{var}={value}" for var, value in named.items())
            + (f" name{'s' if len(named) == 1 else ''} what does not exist ({', '.join(missing)})" if missing
               else f" name{'s' if len(named) == 1 else ''} a driver manifest the loader cannot use")
            + f"; unset {'it' if len(named) == 1 else 'them'} to use the installed drivers"
            + (f" ({', '.join(installed)}), or point {'it' if len(named) == 1 else 'them'} at one of those"
               if installed else f", or install one: {INSTALL}"))


def _on_validation_message(severity, types, data, user_data):
    """VK_EXT_debug_utils callback: keep and print the message. Never raises into C."""
    try:
        vk = _vk()
        ffi = vk.ffi
        level = "error" if severity & vk.VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT else "warning"
        message = ffi.string(data.pMessage).decode(errors="replace") if data.pMessage != ffi.NULL else ""
        ident = ffi.string(data.pMessageIdName).decode(errors="replace") if data.pMessageIdName != ffi.NULL else ""
        VULKAN.validation_messages.append({"severity": level, "id": ident, "message": message})
        print(f"retarget: vulkan validation {level}: {message}", file=sys.stderr, flush=True)
    except Exception:
        pass
    return 0


# -- physical devices -----------------------------------------------------------------------


class _PhysicalDevice:
    """One VkPhysicalDevice, queried once: its DeviceInfo, its dump, and what create() needs."""

    def __init__(self, instance: _Instance, index: int, handle):
        vk = _vk()
        ffi, lib = vk.ffi, vk.lib
        self.instance, self.index, self.handle = instance, index, handle
        basic = ffi.new("VkPhysicalDeviceProperties*")
        lib.vkGetPhysicalDeviceProperties(handle, basic)
        self.device_api = basic.apiVersion
        self.name = ffi.string(basic.deviceName).decode(errors="replace")
        self.api = min(instance.api_version, self.device_api)
        self.extensions = sorted(ffi.string(e.extensionName).decode() for e in _enumerated(
            lib.vkEnumerateDeviceExtensionProperties, "VkExtensionProperties", handle, ffi.NULL))
        # What create() enables and the description offers: a validation layer older than an extension
        # reports its structs as errors, so under such a layer the device is described without it.
        self.usable_extensions = set(self.extensions)
        if 0 < instance.validation_layer_version < COOPERATIVE_MATRIX_LAYER and \
                "VK_KHR_cooperative_matrix" in self.usable_extensions:
            self.usable_extensions.discard("VK_KHR_cooperative_matrix")
            print(f"retarget: vulkan validation layer {version_text(instance.validation_layer_version)} predates "
                  f"VK_KHR_cooperative_matrix; describing and opening {self.name} without it", file=sys.stderr)
        self.reason = "" if self.device_api >= V1_1 else (
            f"{self.name} supports Vulkan {version_text(self.device_api)}; retarget needs 1.1 or newer")
        if self.reason:
            self.info = DeviceInfo(NAME, str(index), self.name, available=False, reason=self.reason)
            self.details = {}
            return
        self._query()

    def _query(self) -> None:
        vk = _vk()
        ffi, lib = vk.ffi, vk.lib
        has = self.usable_extensions
        # Properties: the core, subgroups, subgroup size control, the driver.
        head = _new("VkPhysicalDeviceProperties2", "PHYSICAL_DEVICE_PROPERTIES_2")
        subgroup = _new("VkPhysicalDeviceSubgroupProperties", "PHYSICAL_DEVICE_SUBGROUP_PROPERTIES")
        links = [subgroup]
        size_control = driver = float_controls = None
        if self.api >= V1_3 or "VK_EXT_subgroup_size_control" in has:
            size_control = _new("VkPhysicalDeviceSubgroupSizeControlProperties",
                                "PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES")
            links.append(size_control)
        if self.api >= V1_2 or "VK_KHR_driver_properties" in has:
            driver = _new("VkPhysicalDeviceDriverProperties", "PHYSICAL_DEVICE_DRIVER_PROPERTIES")
            links.append(driver)
        if self.api >= V1_2 or FLOAT_CONTROLS in has:  # a property, listed with the features the schema names
            float_controls = _new("VkPhysicalDeviceFloatControlsProperties",
                                  "PHYSICAL_DEVICE_FLOAT_CONTROLS_PROPERTIES")
            links.append(float_controls)
        _chain(head, links)
        lib.vkGetPhysicalDeviceProperties2(self.handle, head)
        props = head.properties

        features_head, feature_links = _feature_chain(self.api, has)
        lib.vkGetPhysicalDeviceFeatures2(self.handle, features_head)
        features = {name: bool(value) for name, value in _fields(features_head.features).items()}
        for struct, _ in feature_links:
            features.update({name: bool(value) for name, value in _fields(struct).items()})
        features["shaderSignedZeroInfNanPreserveFloat32"] = bool(
            float_controls is not None and float_controls.shaderSignedZeroInfNanPreserveFloat32)
        self.features = features

        memory = ffi.new("VkPhysicalDeviceMemoryProperties*")
        lib.vkGetPhysicalDeviceMemoryProperties(self.handle, memory)
        heaps = [{"size": int(memory.memoryHeaps[i].size), "device_local": bool(memory.memoryHeaps[i].flags & 1)}
                 for i in range(memory.memoryHeapCount)]
        self.memory_types = [(int(memory.memoryTypes[i].propertyFlags), int(memory.memoryTypes[i].heapIndex))
                             for i in range(memory.memoryTypeCount)]
        families = _enumerated(lambda *a: lib.vkGetPhysicalDeviceQueueFamilyProperties(*a) or 0,
                               "VkQueueFamilyProperties", self.handle)
        self.queue_families = [(int(f.queueFlags), int(f.queueCount), int(f.timestampValidBits)) for f in families]

        self.cooperative_matrix = self._cooperative_matrix_shapes() if features.get("cooperativeMatrix") else []
        limits = props.limits
        subgroup_size = int(subgroup.subgroupSize)
        size_range = ([int(size_control.minSubgroupSize), int(size_control.maxSubgroupSize)]
                      if size_control is not None else [subgroup_size, subgroup_size])
        self.required_size_stages = int(size_control.requiredSubgroupSizeStages) if size_control is not None else 0
        driver_name = ffi.string(driver.driverName).decode(errors="replace") if driver is not None else self.name
        properties = {
            "arch": "host",
            "api_version": version_text(self.device_api),
            "driver_name": driver_name,
            "vendor_id": int(props.vendorID),
            "device_id": int(props.deviceID),
            "device_type": DEVICE_TYPES.get(int(props.deviceType), "other"),
            "subgroup_size": subgroup_size,
            "subgroup_size_range": size_range,
            "subgroup_operations": [name for bit, name in enumerate(SUBGROUP_OPERATIONS)
                                    if subgroup.supportedOperations & (1 << bit)],
            "limits": {name: _plain(getattr(limits, name), dict(ffi.typeof(limits).fields)[name].type)
                       for name in LIMITS},
            "features": {name: features.get(name, False) for name in FEATURES},
            "extensions": list(self.extensions),
            "cooperative_matrix": self.cooperative_matrix,
            "memory_heaps": heaps,
            "queues": [{"flags": [n for n, bit in zip(QUEUE_FLAGS, QUEUE_FLAG_BITS) if flags & bit], "count": count}
                       for flags, count, _ in self.queue_families],
        }
        self.info = DeviceInfo(NAME, str(self.index), self.name, properties=properties)
        self.details = {
            "device_name": self.name,
            "driver_properties": _fields(driver) if driver is not None else {},
            "all_limits": _fields(limits),
            "all_features": features,
            "subgroup": {"size": subgroup_size, "supported_stages": int(subgroup.supportedStages),
                         "quad_operations_in_all_stages": bool(subgroup.quadOperationsInAllStages),
                         **({"min_size": size_range[0], "max_size": size_range[1],
                             "max_compute_workgroup_subgroups": int(size_control.maxComputeWorkgroupSubgroups),
                             "required_size_stages": self.required_size_stages} if size_control is not None else {})},
            "memory_types": [{"heap": heap, "flags": [n for bit, n in enumerate(MEMORY_FLAGS) if flags & (1 << bit)]}
                             for flags, heap in self.memory_types],
            "queue_families": [{"flags": [n for n, bit in zip(QUEUE_FLAGS, QUEUE_FLAG_BITS) if flags & bit],
                                "count": count, "timestamp_valid_bits": bits}
                               for flags, count, bits in self.queue_families],
            "pipeline_cache_uuid": bytes(props.pipelineCacheUUID).hex(),
            "instance_api_version": version_text(self.instance.api_version),
            "validation": self.instance.validation,
        }

    def _cooperative_matrix_shapes(self) -> list[dict]:
        query = self.instance.proc("vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR")
        if query is None:
            return []
        shapes = _enumerated(query, "VkCooperativeMatrixPropertiesKHR", self.handle)

        def component(t):
            return COMPONENT_TYPES.get(int(t), f"type{int(t)}")

        return [{"M": int(s.MSize), "N": int(s.NSize), "K": int(s.KSize), "a": component(s.AType),
                 "b": component(s.BType), "c": component(s.CType), "result": component(s.ResultType),
                 "saturating": bool(s.saturatingAccumulation), "scope": SCOPES.get(int(s.scope), str(int(s.scope)))}
                for s in shapes]


_physical_lock = threading.Lock()
_physical: list[_PhysicalDevice] | None = None


def _physical_devices() -> tuple[list[_PhysicalDevice], str]:
    """Every physical device, queried once per process, or ([], why there is none)."""
    global _physical
    instance, reason = _instance()
    if instance is None:
        return [], reason
    with _physical_lock:
        if _physical is None:
            _physical = [_PhysicalDevice(instance, i, h) for i, h in enumerate(instance.physical_devices)]
        return _physical, ""


# -- the driver -----------------------------------------------------------------------------


class VulkanDriver:
    name = NAME

    def __init__(self):
        self.validation_messages: list[dict] = []  # filled when RETARGET_VULKAN_VALIDATION=1
        self._devices: dict[str, VulkanDevice] = {}
        self._lock = threading.Lock()

    def enumerate(self) -> list[DeviceInfo]:
        """Every physical device, best first (`best_first`), each with its index in the loader's order as its id;
        or one unavailable entry saying why. Never raises."""
        try:
            physical, reason = _physical_devices()
        except Exception as e:  # a broken driver must not take `retarget devices` down
            physical, reason = [], f"querying Vulkan devices failed ({type(e).__name__}: {e})".replace("\n", " ")
        if not physical:
            return [DeviceInfo(NAME, "0", "Vulkan device", available=False, reason=reason)]
        return best_first([p.info for p in physical])

    def create(self, device_id: str) -> VulkanDevice:
        """The process's device for `device_id` (when empty, the best available one: the device that
        `vulkan-spirv:host` compiles for), opened on first use."""
        with self._lock:
            infos = self.enumerate()
            device_id = device_id or next((d.id for d in infos if d.available), "0")
            if device_id not in self._devices:
                available = {d.id: d for d in infos if d.available}
                if device_id not in available:
                    raise no_such_device("vulkan", device_id, infos)
                self._devices[device_id] = VulkanDevice(_physical_devices()[0][int(device_id)])
            return self._devices[device_id]

    def dump(self, device_id: str) -> dict:
        infos = self.enumerate()
        device_id = device_id or infos[0].id  # the best device, as create() opens it
        info = {d.id: d for d in infos}.get(device_id)
        if info is None:
            raise UnknownDeviceError(f"vulkan has no device '{device_id}'",
                                     hint=f"its devices: {', '.join(d.id for d in infos)}")
        out = {"driver": NAME, "id": info.id, "name": info.name, "available": info.available}
        if not info.available:
            return {**out, "reason": info.reason}
        physical = _physical_devices()[0][int(device_id)]
        out.update(info.properties)
        out.update(physical.details)
        out["executable_formats"] = [FORMAT]
        return out


# -- memory -----------------------------------------------------------------------------------

DEVICE_LOCAL, HOST_VISIBLE, HOST_COHERENT, HOST_CACHED = 0x1, 0x2, 0x4, 0x8
MAPPABLE = HOST_VISIBLE | HOST_COHERENT


class VulkanBuffer:
    """A VkBuffer of `nbytes` (its memory rounded up to 4 bytes), bound to its own VkDeviceMemory.

    `mapped` is a uint8 view of the whole buffer when its memory is host-visible and coherent;
    `cached` says whether that memory is also host-cached (else the host reads it slowly)."""

    def __init__(self, device: VulkanDevice, nbytes: int, memory_types: list[int], usage: int):
        vk = _vk()
        ffi, lib = vk.ffi, vk.lib
        self.device, self.nbytes = device, nbytes
        self.size = max(4, _round_up(nbytes, 4))
        self.handle = self.memory = None
        self.mapped = None
        self.cached = False  # whether the host reads `mapped` at memory speed
        info = _new("VkBufferCreateInfo", "BUFFER_CREATE_INFO", size=self.size, usage=usage,
                    sharingMode=vk.VK_SHARING_MODE_EXCLUSIVE)
        handle = ffi.new("VkBuffer*")
        check(lib.vkCreateBuffer(device.handle, info, ffi.NULL, handle), f"vkCreateBuffer({nbytes} bytes)")
        self.handle = handle[0]
        needs = ffi.new("VkMemoryRequirements*")
        lib.vkGetBufferMemoryRequirements(device.handle, self.handle, needs)
        memory = ffi.new("VkDeviceMemory*")
        if not any(needs.memoryTypeBits & (1 << t) for t in memory_types):
            self.release()
            raise VulkanError(f"{device.info.name} has no suitable memory type for a buffer "
                              f"(memoryTypeBits {needs.memoryTypeBits:#x})")
        result = vk.VK_ERROR_OUT_OF_DEVICE_MEMORY
        for type_index in (t for t in memory_types if needs.memoryTypeBits & (1 << t)):
            allocate = _new("VkMemoryAllocateInfo", "MEMORY_ALLOCATE_INFO", allocationSize=needs.size,
                            memoryTypeIndex=type_index)
            result = lib.vkAllocateMemory(device.handle, allocate, ffi.NULL, memory)
            if result == 0:
                break
            if result not in (vk.VK_ERROR_OUT_OF_DEVICE_MEMORY, vk.VK_ERROR_OUT_OF_HOST_MEMORY):
                break  # not a full heap: report it rather than try another type
        if result != 0:
            self.release()
            check(result, f"vkAllocateMemory({needs.size} bytes)")
        self.memory = memory[0]
        self.memory_bytes = int(needs.size)
        device.count("memory_bytes", self.memory_bytes)
        device.count("allocations", 1)
        check(lib.vkBindBufferMemory(device.handle, self.handle, self.memory, 0), "vkBindBufferMemory")
        if device.memory_flags[type_index] & MAPPABLE == MAPPABLE:
            pointer = ffi.new("void**")
            check(lib.vkMapMemory(device.handle, self.memory, 0, WHOLE_SIZE, 0, pointer), "vkMapMemory")
            self.mapped = np.frombuffer(ffi.buffer(pointer[0], self.size), dtype=np.uint8)
            self.cached = bool(device.memory_flags[type_index] & HOST_CACHED)

    def release(self) -> None:
        lib, device = _vk().lib, self.device.handle
        self.mapped = None
        if self.handle is not None:
            lib.vkDestroyBuffer(device, self.handle, _vk().ffi.NULL)
            self.handle = None
        if self.memory is not None:
            lib.vkFreeMemory(device, self.memory, _vk().ffi.NULL)
            self.memory = None
            self.device.count("memory_bytes", -self.memory_bytes)
            self.device.count("allocations", -1)

    def __del__(self):
        if sys.is_finalizing():  # at exit the process's memory goes anyway; the library may be half gone
            return
        try:
            self.release()
        except Exception:
            pass


# -- executables ------------------------------------------------------------------------------


class VulkanExecutable:
    def __init__(self, device: VulkanDevice, entry_points, kernels, pipelines, pipeline_layouts, set_layouts):
        self.device = device
        self.entry_points = entry_points
        self.kernels = kernels  # the container's per-kernel metadata (params, push constants)
        self.pipelines = pipelines  # one VkPipeline per entry point
        self.pipeline_layouts = pipeline_layouts  # shared through the device's cache
        self.set_layouts = set_layouts

    def __del__(self):
        if sys.is_finalizing():
            return
        try:
            vk = _vk()
            for pipeline in self.pipelines:
                vk.lib.vkDestroyPipeline(self.device.handle, pipeline, vk.ffi.NULL)
                self.device.count("pipelines", -1)
            self.pipelines = []
        except Exception:
            pass


# -- command buffers ------------------------------------------------------------------------

SETS_PER_POOL = 32
DESCRIPTORS_PER_SET = 8


class VulkanCommandBuffer:
    """A VkCommandBuffer being recorded (until `end`), then submitted as often as wanted.

    It keeps alive what its commands reference: buffers, executables, descriptor sets."""

    def __init__(self, device: VulkanDevice):
        vk = _vk()
        ffi, lib = vk.ffi, vk.lib
        self.device = device
        self.pool = self.fence = None
        self.descriptor_pools: list = []
        self._sets_left = self._descriptors_left = 0
        self.descriptor_sets: dict[tuple, object] = {}  # ((id(buffer), offset, size), ...) -> VkDescriptorSet[1]
        self.keep: list = []
        self.ended = False
        self.submitted = False
        self.dispatches = 0
        self._bound_pipeline = None
        self.readback: _Readback | None = None
        self.run_epoch = None  # the device's epoch right after this command buffer was last submitted
        self.readback_ran = False  # whether that submit ran the readback
        pool = ffi.new("VkCommandPool*")
        check(lib.vkCreateCommandPool(device.handle, _new("VkCommandPoolCreateInfo", "COMMAND_POOL_CREATE_INFO",
                                                          queueFamilyIndex=device.queue_family), ffi.NULL, pool),
              "vkCreateCommandPool")
        self.pool = pool[0]
        device.count("command_buffers", 1)
        self.handles = ffi.new("VkCommandBuffer[1]")
        check(lib.vkAllocateCommandBuffers(device.handle, _new(
            "VkCommandBufferAllocateInfo", "COMMAND_BUFFER_ALLOCATE_INFO", commandPool=self.pool,
            level=vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY, commandBufferCount=1), self.handles), "vkAllocateCommandBuffers")
        self.handle = self.handles[0]
        fence = ffi.new("VkFence[1]")
        check(lib.vkCreateFence(device.handle, _new("VkFenceCreateInfo", "FENCE_CREATE_INFO"), ffi.NULL, fence),
              "vkCreateFence")
        self.fences, self.fence = fence, fence[0]
        self.submit_info = _new("VkSubmitInfo", "SUBMIT_INFO", commandBufferCount=1, pCommandBuffers=self.handles)
        # Reusable: no ONE_TIME_SUBMIT, and no SIMULTANEOUS_USE (submit waits for the previous run).
        check(lib.vkBeginCommandBuffer(self.handle, _new("VkCommandBufferBeginInfo", "COMMAND_BUFFER_BEGIN_INFO")),
              "vkBeginCommandBuffer")
        device.record_barrier(self.handle, "from_host")

    def _recording(self) -> None:
        if self.ended:
            raise RuntimeError("command buffer already ended; record a new one")

    def dispatch(self, executable: VulkanExecutable, entry: int, bindings, *, scalars=(),
                 workgroup_count=None) -> None:
        """`scalars` and `workgroup_count`: a dynamic entry point's sizes for this dispatch; the scalars
        follow the element bases in the push constants (container.py)."""
        self._recording()
        vk = _vk()
        ffi, lib = vk.ffi, vk.lib
        device = self.device
        ep, kernel = executable.entry_points[entry], executable.kernels[entry]
        if len(bindings) != len(ep.bindings):
            raise ValueError(f"{ep.name} takes {len(ep.bindings)} bindings, got {len(bindings)}")
        if len(scalars) != len(ep.scalars):
            raise ValueError(f"{ep.name} takes {len(ep.scalars)} scalars, got {len(scalars)}")
        types = ep.binding_types(scalars)
        for i, ((buf, offset, nbytes), t, param) in enumerate(zip(bindings, types, kernel["params"])):
            if nbytes < t.nbytes or offset < 0 or offset + nbytes > buf.nbytes:
                raise ValueError(f"{ep.name}: binding {i} of {nbytes} bytes at {offset} in a buffer of {buf.nbytes} "
                                 f"cannot hold {t}")
            item = int(param["itemsize"])
            if offset % item:
                raise ValueError(f"{ep.name}: binding {i} at byte {offset} is not aligned to its {item}-byte elements")
        slots = kernel.get("slots") or list(range(len(bindings)))
        ranges, bases, gather, scatter = [], [0] * len(bindings), [], []
        for slot in range(binding_count(kernel)):
            members = [i for i, s in enumerate(slots) if s == slot]
            if len({id(bindings[i][0]) for i in members}) > 1:  # one binding, several buffers: gather them
                members_ranges = self._gathered(ep, kernel, bindings, members, gather, scatter)
            else:
                members_ranges = [bindings[i] for i in members]
            buf = members_ranges[0][0]
            low = min(offset for _, offset, _ in members_ranges)
            high = max(offset + nbytes for _, offset, nbytes in members_ranges)
            start = low - low % device.offset_alignment
            size = min(_round_up(max(high - start, 4), 4), buf.size - start)
            if size > device.max_storage_range:
                raise VulkanError(f"{ep.name}: binding {slot} spans {size} bytes, over this device's "
                                  f"maxStorageBufferRange ({device.max_storage_range})")
            ranges.append((buf, start, size))
            for i, (_, offset, _) in zip(members, members_ranges):
                bases[i] = (offset - start) // int(kernel["params"][i]["itemsize"])
        if too_large := beyond_32_bit_indices(ep.name, kernel["params"], bases, [n for _, _, n in bindings]):
            raise VulkanError(too_large, hint="split the batch, or compile for a target with 64-bit indices "
                                              "(cuda, llvm-cpu)")
        for command in gather:
            self.copy(*command)
        if gather:
            self.barrier()
        counts = tuple(int(c) for c in (workgroup_count or ep.workgroup_count))
        limit = device.info.properties["limits"]["maxComputeWorkGroupCount"]
        if any(c > m for c, m in zip(counts, limit)):
            raise VulkanError(f"{ep.name}: {counts} workgroups exceed this device's maxComputeWorkGroupCount {limit}",
                              hint=HOST_TARGET_HINT)
        descriptor_set = self._descriptor_set(executable.set_layouts[entry], ranges)
        layout = executable.pipeline_layouts[entry]
        pipeline = executable.pipelines[entry]
        if pipeline != self._bound_pipeline:
            lib.vkCmdBindPipeline(self.handle, vk.VK_PIPELINE_BIND_POINT_COMPUTE, pipeline)
            self._bound_pipeline = pipeline
        lib.vkCmdBindDescriptorSets(self.handle, vk.VK_PIPELINE_BIND_POINT_COMPUTE, layout, 0, 1, descriptor_set,
                                    0, ffi.NULL)
        if bases or scalars:
            values = np.array(bases + [int(v) for v in scalars], dtype=np.uint32)
            lib.vkCmdPushConstants(self.handle, layout, vk.VK_SHADER_STAGE_COMPUTE_BIT, 0, values.nbytes,
                                   ffi.from_buffer(values))
        if all(counts):
            lib.vkCmdDispatch(self.handle, *counts)
        self.keep.append((executable, [buf for buf, _, _ in ranges]))
        self.dispatches += 1
        if scatter:
            self.barrier()
            for command in scatter:
                self.copy(*command)

    def _gathered(self, ep, kernel, bindings, members, gather, scatter) -> list[tuple]:
        """Params that share one binding but live in different buffers, placed side by side in a new scratch
        buffer: copies in before the dispatch (`gather`) for the ones it reads, out after (`scatter`) for the
        ones it writes. Only kernels with more params than the device's storage buffers per stage get here."""
        starts, size = [], 0
        for i in members:
            starts.append(size)
            size += _round_up(bindings[i][2], 16)
        scratch = self.device.allocate(size)
        self.keep.append(scratch)
        placed = []
        for i, start in zip(members, starts):
            buf, offset, nbytes = bindings[i]
            copy = _round_up(nbytes, 4)
            if offset % 4 or offset + copy > buf.size:
                raise ValueError(f"{ep.name}: binding {i} at byte {offset} shares a binding with tensors of other "
                                 "buffers, and must be 4-byte aligned to be gathered")
            if kernel["params"][i]["access"] == "write":
                scatter.append((scratch, start, buf, offset, copy))
            else:
                gather.append((buf, offset, scratch, start, copy))
            placed.append((scratch, start, nbytes))
        return placed

    def _descriptor_set(self, layout, ranges):
        """A descriptor set binding `ranges`, shared by every dispatch that binds the same ranges."""
        key = tuple((id(buf), start, size) for buf, start, size in ranges)
        found = self.descriptor_sets.get(key)
        if found is not None:
            return found
        vk = _vk()
        ffi, lib = vk.ffi, vk.lib
        count = len(ranges)
        if self._sets_left < 1 or self._descriptors_left < count:
            self._grow_descriptor_pool(count)
        handle = ffi.new("VkDescriptorSet[1]")
        layouts = ffi.new("VkDescriptorSetLayout[1]", [layout])
        check(lib.vkAllocateDescriptorSets(self.device.handle, _new(
            "VkDescriptorSetAllocateInfo", "DESCRIPTOR_SET_ALLOCATE_INFO", descriptorPool=self.descriptor_pools[-1],
            descriptorSetCount=1, pSetLayouts=layouts), handle), "vkAllocateDescriptorSets")
        self._sets_left -= 1
        self._descriptors_left -= count
        if count:
            infos = ffi.new("VkDescriptorBufferInfo[]", [{"buffer": buf.handle, "offset": start, "range": size}
                                                         for buf, start, size in ranges])
            writes = ffi.new("VkWriteDescriptorSet[]", [
                {"sType": vk.VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, "dstSet": handle[0], "dstBinding": i,
                 "descriptorCount": 1, "descriptorType": vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                 "pBufferInfo": infos + i} for i in range(count)])
            lib.vkUpdateDescriptorSets(self.device.handle, count, writes, 0, ffi.NULL)
        self.descriptor_sets[key] = handle
        return handle

    def _grow_descriptor_pool(self, at_least: int) -> None:
        """A new pool, twice the last one, with room for a set of `at_least` buffers."""
        vk = _vk()
        ffi, lib = vk.ffi, vk.lib
        sets = SETS_PER_POOL << min(len(self.descriptor_pools), 8)
        descriptors = max(sets * DESCRIPTORS_PER_SET, at_least)
        size = ffi.new("VkDescriptorPoolSize*", {"type": vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                                 "descriptorCount": descriptors})
        pool = ffi.new("VkDescriptorPool*")
        check(lib.vkCreateDescriptorPool(self.device.handle, _new(
            "VkDescriptorPoolCreateInfo", "DESCRIPTOR_POOL_CREATE_INFO", maxSets=sets, poolSizeCount=1,
            pPoolSizes=size), ffi.NULL, pool), "vkCreateDescriptorPool")
        self.descriptor_pools.append(pool[0])
        self._sets_left, self._descriptors_left = sets, descriptors

    def copy(self, src: VulkanBuffer, src_offset: int, dst: VulkanBuffer, dst_offset: int, nbytes: int) -> None:
        self._recording()
        if min(src_offset, dst_offset, nbytes) < 0:
            raise ValueError(f"copy offsets and size must not be negative ({src_offset}, {dst_offset}, {nbytes})")
        if src_offset + nbytes > src.nbytes or dst_offset + nbytes > dst.nbytes:
            raise ValueError(f"copying {nbytes} bytes from byte {src_offset} of a buffer of {src.nbytes} to byte "
                             f"{dst_offset} of a buffer of {dst.nbytes} overflows one of them")
        if src is dst and src_offset < dst_offset + nbytes and dst_offset < src_offset + nbytes:
            raise ValueError(f"copying {nbytes} bytes from {src_offset} to {dst_offset} of one buffer overlaps")
        if nbytes == 0:
            return
        vk = _vk()
        region = vk.ffi.new("VkBufferCopy*", {"srcOffset": src_offset, "dstOffset": dst_offset, "size": nbytes})
        vk.lib.vkCmdCopyBuffer(self.handle, src.handle, dst.handle, 1, region)
        self.keep.append((src, dst))

    def fill(self, buffer: VulkanBuffer, offset: int, nbytes: int, value: int) -> None:
        self._recording()
        if offset % 4 or nbytes % 4 or offset < 0 or nbytes < 0:
            raise ValueError(f"Vulkan fills whole 4-byte words: offset {offset} and size {nbytes} must be "
                             "non-negative multiples of 4")
        if offset + nbytes > buffer.size:
            raise ValueError(f"filling {nbytes} bytes at {offset} overflows a buffer of {buffer.nbytes}")
        if nbytes == 0:
            return
        pattern = (value & 0xFF) * 0x01010101  # vkCmdFillBuffer writes a u32: the byte in each of its lanes
        _vk().lib.vkCmdFillBuffer(self.handle, buffer.handle, offset, nbytes, pattern)
        self.keep.append(buffer)

    def barrier(self) -> None:
        """Make every earlier dispatch's and copy's writes visible to every later one."""
        self._recording()
        self.device.record_barrier(self.handle, "between")

    def end(self) -> None:
        self._recording()
        self.device.record_barrier(self.handle, "to_host")
        check(_vk().lib.vkEndCommandBuffer(self.handle), "vkEndCommandBuffer")
        self.ended = True

    def learn_readback(self, buffer: VulkanBuffer, offset: int, nbytes: int) -> None:
        """From the next submit on, also copy this range into cached host memory after the work."""
        if self.readback is not None and self.readback.find(buffer, offset, nbytes, copy=False) is not None:
            return
        ranges = (self.readback.ranges if self.readback is not None else []) + [(buffer, offset, nbytes)]
        if len(ranges) > MAX_READBACK_RANGES:  # not a function's outputs: someone browsing memory
            return
        self.readback = _Readback(self.device, ranges)
        self.readback_ran = False
        handles = _vk().ffi.new("VkCommandBuffer[2]", [self.handle, self.readback.commands.handle])
        self.submit_with_readback = _new("VkSubmitInfo", "SUBMIT_INFO", commandBufferCount=2,
                                         pCommandBuffers=handles)
        self.readback.keep = handles

    def release(self) -> None:
        vk = _vk()
        ffi, lib, device = vk.ffi, vk.lib, self.device.handle
        for pool in self.descriptor_pools:
            lib.vkDestroyDescriptorPool(device, pool, ffi.NULL)
        self.descriptor_pools = []
        self.descriptor_sets = {}
        if self.pool is not None:
            lib.vkDestroyCommandPool(device, self.pool, ffi.NULL)  # frees the command buffer too
            self.pool = None
            self.device.count("command_buffers", -1)
        if self.fence is not None:
            lib.vkDestroyFence(device, self.fence, ffi.NULL)
            self.fence = None

    def __del__(self):
        if sys.is_finalizing():
            return
        try:
            self.release()
        except Exception:
            pass


class _Readback:
    """Copies of the ranges the host reads after a command buffer runs, into cached host memory.

    Recorded once into their own command buffer, which is submitted together with the work."""

    def __init__(self, device: VulkanDevice, ranges: list[tuple[VulkanBuffer, int, int]]):
        self.ranges = ranges
        self.starts: dict[tuple[int, int, int], int] = {}  # (id(buffer), offset, nbytes) -> where in staging
        total = 0
        for buffer, offset, nbytes in ranges:
            self.starts[(id(buffer), offset, nbytes)] = total
            total += _round_up(nbytes, 64)
        self.staging = VulkanBuffer(device, total, device.staging_memory_types, TRANSFER_USAGE)
        self.commands = VulkanCommandBuffer(device)
        for buffer, offset, nbytes in ranges:
            self.commands.copy(buffer, offset, self.staging, self.starts[(id(buffer), offset, nbytes)], nbytes)
        self.commands.end()

    def find(self, buffer: VulkanBuffer, offset: int, nbytes: int, copy: bool = True) -> np.ndarray | None:
        start = self.starts.get((id(buffer), offset, nbytes))
        if start is None:
            return None
        view = self.staging.mapped[start:start + nbytes]
        return view.copy() if copy else view


# -- the device -----------------------------------------------------------------------------

STAGE_HOST, STAGE_TRANSFER, STAGE_COMPUTE, STAGE_ALL_COMMANDS = 0x4000, 0x1000, 0x800, 0x10000
SHADER_READ, SHADER_WRITE, TRANSFER_READ, TRANSFER_WRITE = 0x20, 0x40, 0x800, 0x1000
HOST_READ, HOST_WRITE = 0x2000, 0x4000
DEVICE_ACCESS = SHADER_READ | SHADER_WRITE | TRANSFER_READ | TRANSFER_WRITE
DEVICE_WRITES = SHADER_WRITE | TRANSFER_WRITE
# name -> (source stages, source accesses, destination stages, destination accesses)
BARRIERS = {
    "from_host": (STAGE_HOST | STAGE_COMPUTE | STAGE_TRANSFER, HOST_WRITE | DEVICE_WRITES,
                  STAGE_COMPUTE | STAGE_TRANSFER, DEVICE_ACCESS),
    "between": (STAGE_COMPUTE | STAGE_TRANSFER, DEVICE_WRITES, STAGE_COMPUTE | STAGE_TRANSFER, DEVICE_ACCESS),
    "to_host": (STAGE_COMPUTE | STAGE_TRANSFER, DEVICE_WRITES, STAGE_HOST, HOST_READ),
}
REQUIRE_FULL_SUBGROUPS = 0x2  # VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_SUBGROUPS_BIT
TRANSFER_USAGE = 0x1 | 0x2  # TRANSFER_SRC | TRANSFER_DST
STORAGE_USAGE = 0x20 | TRANSFER_USAGE  # and STORAGE_BUFFER
# The host reads uncached (write-combined) device memory at about 30 MB/s (H100 through its BAR): a
# read larger than this goes through a copy into cached memory instead.
UNCACHED_READ_LIMIT = 1024
MAX_READBACK_RANGES = 64


def statistics_setting(value: str, extensions, device_name: str) -> str | None:
    """RETARGET_VULKAN_PIPELINE_STATISTICS as the device will use it: None (off), "1" (on: stderr) or a folder.
    Set on a device whose driver cannot report statistics, it says so once instead of staying silent."""
    word = value.strip().lower()
    if word in OFF:
        return None
    if word in ON:
        value = "1"
    if STATISTICS_EXTENSION not in extensions:
        print(f"retarget: {STATISTICS_ENV}={value}: {device_name} lacks {STATISTICS_EXTENSION}, so its driver "
              "reports no pipeline statistics", file=sys.stderr)
        return None
    return value


def spin_microseconds(value: str, default: int) -> float:
    """RETARGET_VULKAN_SPIN_US: how long `wait` polls the fences, in microseconds (empty: `default`)."""
    if not value.strip():
        return default
    try:
        spin = float(value)
    except ValueError:
        spin = -1
    if not 0 <= spin < float("inf"):
        raise RetargetError(f"{SPIN_ENV}={value} is not a number of microseconds",
                            hint=f"set it to e.g. 0 (sleep at once) or {DEFAULT_GPU_SPIN_US}, or unset it")
    return spin


class VulkanDevice:
    formats = (FORMAT,)

    def __init__(self, physical: _PhysicalDevice):
        vk = _vk()
        ffi, lib = vk.ffi, vk.lib
        self.physical = physical
        self.info = physical.info
        limits = self.info.properties["limits"]
        self.offset_alignment = max(1, int(limits["minStorageBufferOffsetAlignment"]))
        self.max_storage_range = int(limits["maxStorageBufferRange"])
        self.timestamp_period_ns = float(limits["timestampPeriod"])
        self.queue_family = self._pick_queue_family()
        self.timestamp_bits = physical.queue_families[self.queue_family][2]

        features_head, links = _feature_chain(physical.api, physical.usable_extensions)
        core = features_head.features
        core_names = {name for name, _ in ffi.typeof(core).fields}
        for name in ENABLED_FEATURES:
            if not physical.features.get(name):
                continue
            if name in core_names:
                setattr(core, name, 1)
            for struct, _ in links:
                if name in dict(ffi.typeof(struct[0]).fields):
                    setattr(struct[0], name, 1)
        extensions = {ext for _, ext in links if ext}
        if physical.api < V1_2 and FLOAT_CONTROLS in physical.usable_extensions:
            extensions.add(FLOAT_CONTROLS)  # modules may declare SignedZeroInfNanPreserve
        self.statistics = statistics_setting(os.environ.get(STATISTICS_ENV, ""), physical.extensions, self.info.name)
        if self.statistics:  # the driver's own statistics of each pipeline (see the module docstring)
            executables = _new("VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR",
                               "PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR", pipelineExecutableInfo=1)
            (links[-1][0] if links else features_head).pNext = executables
            extensions.add(STATISTICS_EXTENSION)
        extensions = sorted(extensions)
        self.enabled_extensions = extensions
        self.subgroup_size_control = bool(physical.features.get("subgroupSizeControl")
                                          and physical.required_size_stages & vk.VK_SHADER_STAGE_COMPUTE_BIT)
        self.full_subgroups = bool(physical.features.get("computeFullSubgroups"))
        priorities = ffi.new("float[]", [1.0])
        queue_info = _new("VkDeviceQueueCreateInfo", "DEVICE_QUEUE_CREATE_INFO", queueFamilyIndex=self.queue_family,
                          queueCount=1, pQueuePriorities=priorities)
        names, names_keep = _strings(extensions)
        create_info = _new("VkDeviceCreateInfo", "DEVICE_CREATE_INFO", pNext=features_head, queueCreateInfoCount=1,
                           pQueueCreateInfos=queue_info, enabledExtensionCount=len(extensions),
                           ppEnabledExtensionNames=names)
        handle = ffi.new("VkDevice*")
        check(lib.vkCreateDevice(physical.handle, create_info, ffi.NULL, handle), f"vkCreateDevice({self.info.name})")
        self.handle = handle[0]
        queue = ffi.new("VkQueue*")
        lib.vkGetDeviceQueue(self.handle, self.queue_family, 0, queue)
        self.queue = queue[0]

        cache = ffi.new("VkPipelineCache*")
        check(lib.vkCreatePipelineCache(self.handle, _new("VkPipelineCacheCreateInfo", "PIPELINE_CACHE_CREATE_INFO"),
                                        ffi.NULL, cache), "vkCreatePipelineCache")
        self.pipeline_cache = cache[0]
        self.memory_flags = [flags for flags, _ in physical.memory_types]
        self.storage_memory_types, self.staging_memory_types = self._memory_type_preferences()
        self.barriers = {name: (src_stages, dst_stages, vk.ffi.new("VkMemoryBarrier*", {
            "sType": vk.VK_STRUCTURE_TYPE_MEMORY_BARRIER, "srcAccessMask": src_access, "dstAccessMask": dst_access}))
            for name, (src_stages, src_access, dst_stages, dst_access) in BARRIERS.items()}

        self.live = {"memory_bytes": 0, "allocations": 0, "pipelines": 0, "command_buffers": 0}
        self._live_lock = threading.Lock()  # objects are freed by the garbage collector, in any thread
        self._lock = threading.RLock()  # the queue, the staging buffer, the transfer command buffer
        self._layouts_lock = threading.Lock()
        self._set_layouts: dict[int, object] = {}
        self._pipeline_layouts: dict[tuple[int, int], object] = {}
        self._pending: list[VulkanCommandBuffer] = []
        self._epoch = 0  # counts what changes device memory: writes and submits
        self._mine = threading.local()  # .run: weakref to the command buffer this thread submitted last
        self._staging: VulkanBuffer | None = None
        self._transfer: VulkanCommandBuffer | None = None
        self._timer = None
        # On a GPU a sleeping fence wait can wake up a millisecond late (seen on an H100 in a VM), so
        # `wait` polls first; on a CPU device polling would take a core from the work itself.
        default_spin_us = 0 if self.info.properties["device_type"] == "cpu" else DEFAULT_GPU_SPIN_US
        self.spin_wait_s = spin_microseconds(os.environ.get(SPIN_ENV, ""), default_spin_us) / 1e6

    def count(self, what: str, change: int) -> None:
        with self._live_lock:
            self.live[what] += change

    def memory_in_use(self) -> int:
        """Bytes of VkDeviceMemory this device holds now (every buffer's, staging and readbacks included)."""
        return self.live["memory_bytes"]

    # -- setup ------------------------------------------------------------------------------

    def _pick_queue_family(self) -> int:
        """A compute-only family when there is one (it has the GPU's async compute engines), else the first."""
        families = self.physical.queue_families
        compute = [i for i, (flags, _, _) in enumerate(families) if flags & 0x2]
        dedicated = [i for i in compute if not families[i][0] & 0x1 and families[i][2]]
        return (dedicated or compute)[0]

    def _memory_type_preferences(self) -> tuple[list[int], list[int]]:
        """Memory type indices to try, best first: for storage buffers, then for the staging buffer.

        Storage prefers device-local memory the host can map, but only on the main device heap
        (resizable BAR): the small 256 MiB window some GPUs expose is left to others."""
        types = self.physical.memory_types
        heaps = self.info.properties["memory_heaps"]
        local_heaps = [i for i, h in enumerate(heaps) if h["device_local"]] or list(range(len(heaps)))
        main_heap = max(local_heaps, key=lambda i: heaps[i]["size"])

        def ranked(*wanted):
            order = []
            for test in wanted:
                order += [i for i, (flags, heap) in enumerate(types) if test(flags, heap) and i not in order]
            return order

        storage = ranked(lambda f, h: f & (DEVICE_LOCAL | MAPPABLE) == DEVICE_LOCAL | MAPPABLE and h == main_heap,
                         lambda f, h: f & DEVICE_LOCAL, lambda f, h: True)
        staging = ranked(lambda f, h: f & (MAPPABLE | HOST_CACHED) == MAPPABLE | HOST_CACHED,
                         lambda f, h: f & MAPPABLE == MAPPABLE)
        return storage, staging

    def _set_layout(self, count: int):
        """The descriptor-set layout of `count` storage buffers (bindings 0..count-1), one per count."""
        with self._layouts_lock:
            if count not in self._set_layouts:
                vk = _vk()
                ffi, lib = vk.ffi, vk.lib
                bindings = ffi.new("VkDescriptorSetLayoutBinding[]", [
                    {"binding": i, "descriptorType": vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, "descriptorCount": 1,
                     "stageFlags": vk.VK_SHADER_STAGE_COMPUTE_BIT} for i in range(count)] or 1)
                layout = ffi.new("VkDescriptorSetLayout*")
                check(lib.vkCreateDescriptorSetLayout(self.handle, _new(
                    "VkDescriptorSetLayoutCreateInfo", "DESCRIPTOR_SET_LAYOUT_CREATE_INFO", bindingCount=count,
                    pBindings=bindings), ffi.NULL, layout), "vkCreateDescriptorSetLayout")
                self._set_layouts[count] = layout[0]
            return self._set_layouts[count]

    def _pipeline_layout(self, count: int, push_bytes: int):
        set_layout = self._set_layout(count)
        with self._layouts_lock:
            if (count, push_bytes) not in self._pipeline_layouts:
                vk = _vk()
                ffi, lib = vk.ffi, vk.lib
                set_layouts = ffi.new("VkDescriptorSetLayout[1]", [set_layout])
                push = ffi.new("VkPushConstantRange*", {"stageFlags": vk.VK_SHADER_STAGE_COMPUTE_BIT, "offset": 0,
                                                        "size": push_bytes})
                layout = ffi.new("VkPipelineLayout*")
                check(lib.vkCreatePipelineLayout(self.handle, _new(
                    "VkPipelineLayoutCreateInfo", "PIPELINE_LAYOUT_CREATE_INFO", setLayoutCount=1,
                    pSetLayouts=set_layouts, pushConstantRangeCount=1 if push_bytes else 0,
                    pPushConstantRanges=push), ffi.NULL, layout), "vkCreatePipelineLayout")
                self._pipeline_layouts[(count, push_bytes)] = layout[0]
            return self._pipeline_layouts[(count, push_bytes)]

    # -- what this device runs --------------------------------------------------------------

    def can_load(self, format: str, target: TargetDesc) -> str | None:
        if format != FORMAT:
            return f"the vulkan driver loads {FORMAT}, not {format}"
        reasons = self._target_reasons(target)
        if not reasons:
            return None
        return f"{target.name} assumes more than {self.info.name} has ({'; '.join(reasons)}); {HOST_TARGET_HINT}"

    def _target_reasons(self, target: TargetDesc, required_subgroup_size: int | None = None) -> list[str]:
        """The target table's word on whether code for `target` (pinning that subgroup size) runs here."""
        from .targets import unsupported

        return unsupported(target, self.info, required_subgroup_size)

    def subgroup_size_refusal(self, size: int) -> str | None:
        """None when a kernel can be made to run with subgroups of exactly `size` lanes here, else why not."""
        low, high = self.info.properties["subgroup_size_range"]
        if self.subgroup_size_control and low <= size <= high and size & (size - 1) == 0:
            return None
        if low == high == size:  # the only size this device has
            return None
        control = "" if self.subgroup_size_control else ", and it cannot require a size (no subgroupSizeControl)"
        return (f"a kernel needs subgroups of {size} lanes; {self.info.name} runs subgroups of "
                f"{low if low == high else f'{low} to {high}'} lanes{control}")

    def _kernel_refusals(self, kernel: dict) -> list[str]:
        """Why this device cannot run `kernel`, from its own limits (the target table's check comes first)."""
        limits = self.info.properties["limits"]
        name, reasons = kernel["name"], []
        size = kernel.get("required_subgroup_size")
        if size:
            reason = self.subgroup_size_refusal(int(size))
            if reason:
                reasons.append(f"{name}: {reason}")
        wg = [int(x) for x in kernel["workgroup_size"]]
        if any(w > m for w, m in zip(wg, limits["maxComputeWorkGroupSize"])) or \
                int(np.prod(wg)) > limits["maxComputeWorkGroupInvocations"]:
            reasons.append(f"{name}: workgroup {wg} exceeds maxComputeWorkGroupSize "
                           f"{limits['maxComputeWorkGroupSize']} / maxComputeWorkGroupInvocations "
                           f"{limits['maxComputeWorkGroupInvocations']}")
        if int(kernel.get("shared_bytes", 0)) > limits["maxComputeSharedMemorySize"]:
            reasons.append(f"{name}: {kernel['shared_bytes']} bytes of workgroup memory exceed "
                           f"maxComputeSharedMemorySize {limits['maxComputeSharedMemorySize']}")
        if int(kernel["push_constant_bytes"]) > limits["maxPushConstantsSize"]:
            reasons.append(f"{name}: {kernel['push_constant_bytes']} bytes of push constants exceed "
                           f"maxPushConstantsSize {limits['maxPushConstantsSize']}")
        if binding_count(kernel) > limits["maxPerStageDescriptorStorageBuffers"]:
            reasons.append(f"{name}: {binding_count(kernel)} buffers exceed maxPerStageDescriptorStorageBuffers "
                           f"{limits['maxPerStageDescriptorStorageBuffers']}")
        return reasons

    def load_executable(self, binary: ExecutableBinary) -> VulkanExecutable:
        target = binary.target
        refused = f"{self.info.uri} ({self.info.name}) cannot run {target.name}"
        if binary.format != FORMAT:
            raise UnknownDeviceError(f"{refused}: the vulkan driver loads {FORMAT}, not {binary.format}",
                                     hint=HOST_TARGET_HINT)
        reasons = self._target_reasons(target)
        kernels = container.unpack(binary.data)
        if [k["name"] for k in kernels] != [e.name for e in binary.entry_points]:
            raise RetargetError("the SPIR-V executable's kernels do not match its entry points",
                                hint="recompile with --target vulkan-spirv")
        pinned: dict[int, list[str]] = {}
        for kernel in kernels:
            if kernel.get("required_subgroup_size"):
                pinned.setdefault(int(kernel["required_subgroup_size"]), []).append(kernel["name"])
        for size, names in sorted(pinned.items()):
            reasons += [f"{', '.join(names)}: {reason}" for reason in self._target_reasons(target, size)
                        if reason not in reasons]
        if not reasons:  # the device's own limits, for what the target's description does not say
            for kernel in kernels:
                reasons += self._kernel_refusals(kernel)
        if reasons:
            raise UnknownDeviceError(f"{refused}: {'; '.join(reasons)}", hint=HOST_TARGET_HINT)
        pipelines, pipeline_layouts, set_layouts = [], [], []
        try:
            for kernel, ep in zip(kernels, binary.entry_points):
                if len(kernel["params"]) != len(ep.bindings):
                    raise RetargetError(f"kernel {kernel['name']} has {len(kernel['params'])} params but its entry "
                                        f"point has {len(ep.bindings)} bindings",
                                        hint="recompile with --target vulkan-spirv")
                count = len(kernel["params"]) + len(kernel.get("scalars", ()))
                push_bytes = int(kernel["push_constant_bytes"])
                if push_bytes < 4 * count:
                    raise RetargetError(f"kernel {kernel['name']} declares {push_bytes} bytes of push constants; its "
                                        f"{count} element bases and sizes need {4 * count}",
                                        hint="recompile with --target vulkan-spirv")
                layout = self._pipeline_layout(binding_count(kernel), push_bytes)
                pipelines.append(self._pipeline(kernel, layout))
                pipeline_layouts.append(layout)
                set_layouts.append(self._set_layout(binding_count(kernel)))
        except BaseException:
            for pipeline in pipelines:
                _vk().lib.vkDestroyPipeline(self.handle, pipeline, _vk().ffi.NULL)
                self.count("pipelines", -1)
            raise
        return VulkanExecutable(self, list(binary.entry_points), kernels, pipelines, pipeline_layouts, set_layouts)

    def _pipeline(self, kernel: dict, layout):
        vk = _vk()
        ffi, lib = vk.ffi, vk.lib
        name = kernel["name"]
        code = container.words(kernel)
        if len(code) % 4 or len(code) < 20 or int.from_bytes(code[:4], "little") != SPIRV_MAGIC:
            raise RetargetError(f"kernel {name} is not a SPIR-V binary ({len(code)} bytes)",
                                hint="recompile with --target vulkan-spirv")
        words = np.frombuffer(code, dtype=np.uint32).copy()
        module = ffi.new("VkShaderModule*")
        check(lib.vkCreateShaderModule(self.handle, _new(
            "VkShaderModuleCreateInfo", "SHADER_MODULE_CREATE_INFO", codeSize=len(code),
            pCode=ffi.cast("uint32_t*", ffi.from_buffer(words))), ffi.NULL, module),
            f"vkCreateShaderModule({name})")
        try:
            entry_name = ffi.new("char[]", name.encode())
            stage = {"sType": vk.VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                     "stage": vk.VK_SHADER_STAGE_COMPUTE_BIT, "module": module[0], "pName": entry_name}
            required = kernel.get("required_subgroup_size")
            subgroup = None
            if required and self.subgroup_size_control:
                subgroup = _new("VkPipelineShaderStageRequiredSubgroupSizeCreateInfo",
                                "PIPELINE_SHADER_STAGE_REQUIRED_SUBGROUP_SIZE_CREATE_INFO",
                                requiredSubgroupSize=int(required))
                stage["pNext"] = subgroup
                if self.full_subgroups and int(kernel["workgroup_size"][0]) % int(required) == 0:
                    stage["flags"] = REQUIRE_FULL_SUBGROUPS
            info = _new("VkComputePipelineCreateInfo", "COMPUTE_PIPELINE_CREATE_INFO", stage=stage, layout=layout)
            if self.statistics:
                info.flags = CAPTURE_STATISTICS | (CAPTURE_INTERNALS if self.statistics != "1" else 0)
            pipeline = ffi.new("VkPipeline*")
            check(lib.vkCreateComputePipelines(self.handle, self.pipeline_cache, 1, info, ffi.NULL, pipeline),
                  f"vkCreateComputePipelines({name})")
            self.count("pipelines", 1)
        finally:
            lib.vkDestroyShaderModule(self.handle, module[0], ffi.NULL)  # the pipeline has what it needs
        if self.statistics:
            self._report_statistics(pipeline[0], name)
        return pipeline[0]

    def _report_statistics(self, pipeline, name: str) -> None:
        """The driver's statistics of `pipeline` (and, with a folder, its internal representations there)."""
        vk = _vk()
        ffi, lib = vk.ffi, vk.lib

        def device_proc(fn: str):
            return ffi.cast("PFN_" + fn, lib.vkGetDeviceProcAddr(self.handle, fn.encode()))

        stats, texts = {}, []
        executables = _enumerated(device_proc("vkGetPipelineExecutablePropertiesKHR"),
                                  "VkPipelineExecutablePropertiesKHR", self.handle,
                                  _new("VkPipelineInfoKHR", "PIPELINE_INFO_KHR", pipeline=pipeline))
        for index in range(len(executables)):
            which = _new("VkPipelineExecutableInfoKHR", "PIPELINE_EXECUTABLE_INFO_KHR", pipeline=pipeline,
                         executableIndex=index)
            for stat in _enumerated(device_proc("vkGetPipelineExecutableStatisticsKHR"),
                                    "VkPipelineExecutableStatisticKHR", self.handle, which):
                field = {0: "b32", 1: "i64", 2: "u64", 3: "f64"}[int(stat.format)]
                stats[ffi.string(stat.name).decode()] = getattr(stat.value, field)
            if self.statistics != "1":
                internals = device_proc("vkGetPipelineExecutableInternalRepresentationsKHR")
                listed = _enumerated(internals, "VkPipelineExecutableInternalRepresentationKHR", self.handle, which)
                keep = [ffi.new("char[]", max(int(r.dataSize), 1)) for r in listed]
                for r, data in zip(listed, keep):
                    r.pData = data
                count = ffi.new("uint32_t*", len(listed))
                items = ffi.new("VkPipelineExecutableInternalRepresentationKHR[]", listed)
                internals(self.handle, which, count, items)
                texts += [ffi.string(ffi.cast("char*", r.pData)).decode(errors="replace") if r.isText
                          else bytes(ffi.buffer(r.pData, r.dataSize)).hex() for r in items]
        if self.statistics == "1":
            print(f"retarget: vulkan pipeline {name}: " + ", ".join(f"{k} {v}" for k, v in stats.items()),
                  file=sys.stderr)
            return
        try:  # a diagnostic: a folder it cannot write to is said, and the module loads all the same
            os.makedirs(self.statistics, exist_ok=True)
            with open(os.path.join(self.statistics, f"{name}.json"), "w") as f:
                json.dump(stats, f, indent=1)
            for i, text in enumerate(texts):
                with open(os.path.join(self.statistics, f"{name}.{i}.txt"), "w") as f:
                    f.write(text)
        except OSError as e:
            print(f"retarget: {STATISTICS_ENV}={self.statistics}: cannot write {name}'s statistics there ({e}); "
                  "set it to 1 for stderr, or to a folder you can write to", file=sys.stderr)

    # -- memory -----------------------------------------------------------------------------

    def allocate(self, nbytes: int) -> VulkanBuffer:
        if nbytes < 0:
            raise ValueError(f"cannot allocate {nbytes} bytes")
        largest = max(h["size"] for h in self.info.properties["memory_heaps"])
        if nbytes > largest:
            raise VulkanError(f"a buffer of {nbytes} bytes is larger than {self.info.name}'s largest memory heap "
                              f"({largest} bytes)", result="VK_ERROR_OUT_OF_DEVICE_MEMORY")
        return VulkanBuffer(self, nbytes, self.storage_memory_types, STORAGE_USAGE)

    def write(self, buffer: VulkanBuffer, offset: int, data: np.ndarray) -> None:
        """Copy `data`'s bytes to `buffer` at `offset`, after the work submitted so far."""
        raw = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        if offset < 0 or offset + raw.nbytes > buffer.nbytes:
            raise ValueError(f"writing {raw.nbytes} bytes at {offset} overflows a buffer of {buffer.nbytes}")
        if raw.nbytes == 0:
            return
        with self._lock:
            self._epoch += 1  # device memory changes: what a readback copied before is stale
            if self._pending:
                self.wait()
            if buffer.mapped is not None:
                buffer.mapped[offset:offset + raw.nbytes] = raw
                return
            staging = self._staging_for(raw.nbytes)
            staging.mapped[:raw.nbytes] = raw
            self._copy_now(staging, 0, buffer, offset, raw.nbytes)

    def read(self, buffer: VulkanBuffer, offset: int, nbytes: int) -> np.ndarray:
        """A new uint8 array of `nbytes` from `buffer` at `offset`, after the work submitted so far.

        Memory the host reads slowly (device-local, uncached or not mapped) is read through a copy
        into cached host memory. A range read right after a command buffer ran is learned: from then
        on that command buffer's submit also runs the copy (a `_Readback`), and reading is a memcpy."""
        if offset < 0 or nbytes < 0 or offset + nbytes > buffer.nbytes:
            raise ValueError(f"reading {nbytes} bytes at {offset} overflows a buffer of {buffer.nbytes}")
        if nbytes == 0:
            return np.empty(0, dtype=np.uint8)
        with self._lock:
            if self._pending:
                self.wait()
            if buffer.mapped is not None and buffer.cached:
                return buffer.mapped[offset:offset + nbytes].copy()
            mine = getattr(self._mine, "run", None)
            last = mine() if mine is not None else None
            fresh = last is not None and last.run_epoch == self._epoch  # nothing has touched memory since it ran
            if fresh and last.readback_ran:
                found = last.readback.find(buffer, offset, nbytes)
                if found is not None:
                    return found
            if buffer.mapped is not None and nbytes <= UNCACHED_READ_LIMIT:
                data = buffer.mapped[offset:offset + nbytes].copy()
            else:
                staging = self._staging_for(nbytes)
                self._copy_now(buffer, offset, staging, 0, nbytes)
                data = staging.mapped[:nbytes].copy()
            if fresh:
                last.learn_readback(buffer, offset, nbytes)
            return data

    def _staging_for(self, nbytes: int) -> VulkanBuffer:
        if self._staging is None or self._staging.nbytes < nbytes:
            size = max(_round_up(nbytes, 1 << 16), 2 * (self._staging.nbytes if self._staging else 0))
            self._staging = None  # free the old one first: it may be large
            self._staging = VulkanBuffer(self, size, self.staging_memory_types, TRANSFER_USAGE)
        return self._staging

    def _copy_now(self, src: VulkanBuffer, src_offset: int, dst: VulkanBuffer, dst_offset: int, nbytes: int) -> None:
        """One copy through the transfer command buffer, submitted and waited for (caller holds the lock)."""
        lib = _vk().lib
        if self._transfer is not None:
            check(lib.vkResetCommandPool(self.handle, self._transfer.pool, 0), "vkResetCommandPool")
            check(lib.vkBeginCommandBuffer(self._transfer.handle, _new(
                "VkCommandBufferBeginInfo", "COMMAND_BUFFER_BEGIN_INFO")), "vkBeginCommandBuffer")
            self.record_barrier(self._transfer.handle, "from_host")
            self._transfer.ended = False
        else:
            self._transfer = VulkanCommandBuffer(self)
        self._transfer.copy(src, src_offset, dst, dst_offset, nbytes)
        self._transfer.end()
        self._transfer.keep.clear()
        self._queue_submit(self._transfer, self._transfer.submit_info)
        self.wait()

    # -- work ---------------------------------------------------------------------------------

    def record_barrier(self, command_buffer, name: str) -> None:
        src_stages, dst_stages, barrier = self.barriers[name]
        ffi = _vk().ffi
        _vk().lib.vkCmdPipelineBarrier(command_buffer, src_stages, dst_stages, 0, 1, barrier, 0, ffi.NULL, 0, ffi.NULL)

    def command_buffer(self) -> VulkanCommandBuffer:
        return VulkanCommandBuffer(self)

    def submit(self, command_buffer: VulkanCommandBuffer) -> None:
        """Queue one run of an ended command buffer (and its learned readback): one vkQueueSubmit."""
        if not command_buffer.ended:
            raise RuntimeError("end() the command buffer before submitting it")
        with self._lock:
            ran_readback = command_buffer.readback is not None
            self._queue_submit(command_buffer, command_buffer.submit_with_readback if ran_readback
                               else command_buffer.submit_info)
            self._epoch += 1
            command_buffer.run_epoch, command_buffer.readback_ran = self._epoch, ran_readback
            self._mine.run = weakref.ref(command_buffer)

    def _queue_submit(self, command_buffer: VulkanCommandBuffer, submit_info) -> None:
        """vkQueueSubmit of `submit_info`, signalling `command_buffer`'s fence (caller holds the lock)."""
        lib = _vk().lib
        if command_buffer in self._pending:  # still running from the last submit: it cannot run twice at once
            self.wait()
        if command_buffer.submitted:
            check(lib.vkResetFences(self.handle, 1, command_buffer.fences), "vkResetFences")
        check(lib.vkQueueSubmit(self.queue, 1, submit_info, command_buffer.fence), "vkQueueSubmit")
        command_buffer.submitted = True
        self._pending.append(command_buffer)

    def wait(self) -> None:
        """Block until every submitted command buffer has finished: poll the fences for up to
        `spin_wait_s` seconds (a sleeping wait wakes up late), then sleep in vkWaitForFences."""
        with self._lock:
            if not self._pending:
                return
            vk = _vk()
            if self.spin_wait_s > 0:
                deadline = time.perf_counter() + self.spin_wait_s
                while time.perf_counter() < deadline:
                    if all(self._fence_signalled(cb) for cb in self._pending):
                        self._pending.clear()
                        return
            if len(self._pending) == 1:
                fences = self._pending[0].fences
            else:
                fences = vk.ffi.new("VkFence[]", [cb.fence for cb in self._pending])
            check(vk.lib.vkWaitForFences(self.handle, len(self._pending), fences, 1, WAIT_FOREVER), "vkWaitForFences")
            self._pending.clear()

    def _fence_signalled(self, command_buffer: VulkanCommandBuffer) -> bool:
        result = _vk().lib.vkGetFenceStatus(self.handle, command_buffer.fence)
        if result < 0:
            check(result, "vkGetFenceStatus")
        return result == 0

    def time(self, command_buffer: VulkanCommandBuffer, repeats: int = 1) -> list[float]:
        """Seconds of device time for each of `repeats` submits of `command_buffer`.

        Each run is one vkQueueSubmit of three command buffers: a timestamp, the work, a timestamp;
        a timestamp is written when all the work before it in the queue has finished."""
        if not command_buffer.ended:
            raise RuntimeError("end() the command buffer before timing it")
        if not self.timestamp_bits:
            raise VulkanError(f"{self.info.name}'s compute queue has no timestamps (timestampValidBits is 0)")
        vk = _vk()
        ffi, lib = vk.ffi, vk.lib
        with self._lock:
            if self._timer is None:
                self._timer = self._make_timer()
            pool, before, after, _ = self._timer
            handles = ffi.new("VkCommandBuffer[3]", [before.handle, command_buffer.handle, after.handle])
            submit = _new("VkSubmitInfo", "SUBMIT_INFO", commandBufferCount=3, pCommandBuffers=handles)
            stamps = np.zeros(2, dtype=np.uint64)
            mask = (1 << self.timestamp_bits) - 1 if self.timestamp_bits < 64 else (1 << 64) - 1
            seconds = []
            for _ in range(repeats):
                self._queue_submit(command_buffer, submit)
                self._epoch += 1
                self.wait()
                check(lib.vkGetQueryPoolResults(self.handle, pool, 0, 2, stamps.nbytes, ffi.from_buffer(stamps), 8,
                                                vk.VK_QUERY_RESULT_64_BIT | vk.VK_QUERY_RESULT_WAIT_BIT),
                      "vkGetQueryPoolResults")
                ticks = (int(stamps[1]) - int(stamps[0])) & mask
                seconds.append(ticks * self.timestamp_period_ns * 1e-9)
        return seconds

    def timed_submit(self, command_buffer: VulkanCommandBuffer) -> float:
        """One timed run: what `retarget.bench` asks a device for its own time."""
        return self.time(command_buffer, 1)[0]

    def _make_timer(self):
        """A query pool of two timestamps, and the two command buffers that write them."""
        vk = _vk()
        ffi, lib = vk.ffi, vk.lib
        pool = ffi.new("VkQueryPool*")
        check(lib.vkCreateQueryPool(self.handle, _new("VkQueryPoolCreateInfo", "QUERY_POOL_CREATE_INFO",
                                                      queryType=vk.VK_QUERY_TYPE_TIMESTAMP, queryCount=2),
                                    ffi.NULL, pool), "vkCreateQueryPool")
        before, after = VulkanCommandBuffer(self), VulkanCommandBuffer(self)
        lib.vkCmdResetQueryPool(before.handle, pool[0], 0, 2)
        lib.vkCmdWriteTimestamp(before.handle, STAGE_ALL_COMMANDS, pool[0], 0)
        lib.vkCmdWriteTimestamp(after.handle, STAGE_ALL_COMMANDS, pool[0], 1)
        before.end()
        after.end()
        return pool[0], before, after, pool


VULKAN = VulkanDriver()
