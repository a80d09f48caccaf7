"""The vulkan-spirv target table: one row per architecture or profile; every spelling resolves through it.

A row is written as a device would report itself to the `vulkan` driver (`DeviceInfo.properties`):
Vulkan feature bits, subgroup operations, subgroup sizes, limits and cooperative-matrix shapes.
`describe` turns such a record into a TargetDesc, so a table row and a live device (`host`) go
through the same code, and `unsupported` checks a record against a live device the same way.

Rows hold what every current driver of the architecture reports; where drivers differ, the smaller
value (sources: vulkan.gpuinfo.org reports, Khronos Vulkan-Profiles, IREE's KnownTargets.cpp and
its Vulkan TargetTriple.cpp). Limits a row does not know are the Vulkan spec's required minimums.
`vulkan-1.1` is exactly the spec minimum, and the default when there is no device.

Spellings: the row's name, its aliases (code names, IREE's names, gfx/sm numbers) and its products,
and the products IREE names by a rule (`PRODUCT_RULES`: any `adreno-NNN`); case, spaces, `_` and `-`
do not matter. IREE's old triples `<arch>-<product>-<os>` resolve by
their product (or by their arch when the product is `unknown`); the two must agree, and the os
part is checked but changes nothing: each row already holds the facts its drivers share.
The canonical name (`TargetDesc.arch`) is always the row's name: a product builds exactly the
code of its architecture, and is kept in `extra["product"]`.

Subgroup size: `subgroup_sizes` lists every size the architecture can run. Code that depends on
the size must pin one: with more than one size that needs VK_EXT_subgroup_size_control (listed in
`extra["extensions"]` where the architecture has it), otherwise the code must not depend on it.
`unsupported` refuses a device that cannot run the pinned size.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from retarget.errors import UnknownTargetError, closest, suggestion
from retarget.kernel.lower import NVIDIA_FRAGMENT_PLANS
from retarget.protocols import DeviceInfo, TargetDesc

from . import FORMAT

BACKEND = "vulkan-spirv"
KB = 1024

# The Vulkan spec's "Required Limits" table: what every Vulkan device has.
SPEC_MINIMUM_LIMITS = {
    "maxComputeWorkGroupInvocations": 128,
    "maxComputeWorkGroupSize": [128, 128, 64],
    "maxComputeWorkGroupCount": [65535, 65535, 65535],
    "maxComputeSharedMemorySize": 16 * KB,
    "maxStorageBufferRange": 2**27,
    "maxPushConstantsSize": 128,
    "maxPerStageDescriptorStorageBuffers": 4,
    "minStorageBufferOffsetAlignment": 256,  # an upper bound: a device may need less
}
LIMIT_KEYS = tuple(SPEC_MINIMUM_LIMITS)

# SPIR-V capability -> the Vulkan feature bit (driver schema name) that grants it.
CAPABILITY_FEATURES = {
    "Float16": "shaderFloat16",
    "Float64": "shaderFloat64",
    "Int8": "shaderInt8",
    "Int16": "shaderInt16",
    "Int64": "shaderInt64",
    "StorageBuffer16BitAccess": "storageBuffer16BitAccess",
    "StorageBuffer8BitAccess": "storageBuffer8BitAccess",
    "CooperativeMatrixKHR": "cooperativeMatrix",
    "SignedZeroInfNanPreserve": "shaderSignedZeroInfNanPreserveFloat32",  # a property of VK_KHR_shader_float_controls
}
# SPIR-V capability -> the subgroup operation (driver schema name) that grants it.
CAPABILITY_SUBGROUP_OPS = {
    "GroupNonUniform": "basic",
    "GroupNonUniformArithmetic": "arithmetic",
    "GroupNonUniformShuffle": "shuffle",
    "GroupNonUniformBallot": "ballot",
}
CAPABILITIES = ("Float16", "Float64", "Int8", "Int16", "Int64", "StorageBuffer16BitAccess",
                "StorageBuffer8BitAccess", "GroupNonUniform", "GroupNonUniformArithmetic",
                "GroupNonUniformShuffle", "GroupNonUniformBallot", "CooperativeMatrixKHR", "SignedZeroInfNanPreserve")

# The device extension each capability needs (before the Vulkan version that made it core).
CAPABILITY_EXTENSIONS = {
    "Float16": "VK_KHR_shader_float16_int8",
    "Int8": "VK_KHR_shader_float16_int8",
    "StorageBuffer16BitAccess": "VK_KHR_16bit_storage",
    "StorageBuffer8BitAccess": "VK_KHR_8bit_storage",
    "CooperativeMatrixKHR": "VK_KHR_cooperative_matrix",
    "SignedZeroInfNanPreserve": "VK_KHR_shader_float_controls",
}
SUBGROUP_SIZE_CONTROL = "VK_EXT_subgroup_size_control"
# Extensions promoted to core: a device of that version need not list them.
PROMOTED = {
    "VK_KHR_16bit_storage": (1, 1),
    "VK_KHR_8bit_storage": (1, 2),
    "VK_KHR_shader_float16_int8": (1, 2),
    "VK_KHR_shader_float_controls": (1, 2),
    SUBGROUP_SIZE_CONTROL: (1, 3),
}
VULKAN_VERSIONS = ("1.1", "1.2", "1.3", "1.4")

VENDORS = {0x10DE: "NVIDIA", 0x1002: "AMD", 0x8086: "Intel", 0x13B5: "ARM", 0x5143: "Qualcomm",
           0x106B: "Apple", 0x10005: "Mesa", 0x1AE0: "Google"}
DEVICE_TYPE_PREFERENCE = ("discrete-gpu", "integrated-gpu", "virtual-gpu", "cpu", "other")


def limits(invocations: int, size: tuple[int, int, int], shared: int, **known) -> dict:
    """A row's limits: the compute ones given, the rest known (by their Vulkan names) or the spec minimum."""
    unknown = set(known) - set(LIMIT_KEYS)
    assert not unknown, f"not a limit: {unknown}"
    row = {**SPEC_MINIMUM_LIMITS, **known, "maxComputeWorkGroupInvocations": invocations,
           "maxComputeWorkGroupSize": list(size), "maxComputeSharedMemorySize": shared}
    row["maxComputeWorkGroupCount"] = list(row["maxComputeWorkGroupCount"])
    return row


def coopmat(m: int, n: int, k: int, ab: str, acc: str) -> dict:
    return {"M": m, "N": n, "K": k, "a": ab, "b": ab, "c": acc, "result": acc, "scope": "subgroup"}


@dataclass(frozen=True)
class Arch:
    name: str
    vendor: str
    device_type: str
    vulkan_version: str
    features: frozenset[str]  # Vulkan feature bits, as DeviceInfo.properties["features"] names them
    subgroup_ops: tuple[str, ...]
    subgroup_size: int | None  # the default; None where the row does not know it
    subgroup_sizes: tuple[int, ...]
    limits: dict = field(hash=False)
    cooperative_matrix: tuple[dict, ...] = field(default=(), hash=False)
    aliases: tuple[str, ...] = ()  # code names and other compilers' names for the architecture
    products: tuple[str, ...] = ()
    note: str = ""


NUMERIC = frozenset({"shaderFloat16", "shaderFloat64", "shaderInt8", "shaderInt16", "shaderInt64"})
STORAGE = frozenset({"storageBuffer16BitAccess", "storageBuffer8BitAccess"})
SIZE_CONTROL = frozenset({"subgroupSizeControl", "computeFullSubgroups"})
DESKTOP = NUMERIC | STORAGE | SIZE_CONTROL
ALL_OPS = ("basic", "vote", "arithmetic", "ballot", "shuffle", "shuffle_relative", "clustered", "quad")

# NVIDIA, every architecture (current drivers; RTX 5090 report): 48 KB shared, 1024 invocations.
NVIDIA_LIMITS = limits(1024, (1024, 1024, 64), 48 * KB, maxComputeWorkGroupCount=[2**31 - 1, 65535, 65535],
                       maxStorageBufferRange=2**32 - 1, maxPushConstantsSize=256,
                       maxPerStageDescriptorStorageBuffers=1048576, minStorageBufferOffsetAlignment=16)
NVIDIA_COOPMAT = (coopmat(16, 16, 16, "f16", "f16"), coopmat(16, 16, 16, "f16", "f32"))
# AMD RDNA (RADV RX 7800 XT report); push constants: AMD's own driver reports 128, RADV 256.
AMD_LIMITS = limits(1024, (1024, 1024, 1024), 64 * KB, maxStorageBufferRange=2**32 - 1,
                    maxPerStageDescriptorStorageBuffers=8388606, minStorageBufferOffsetAlignment=4)
AMD_COOPMAT = (coopmat(16, 16, 16, "f16", "f16"), coopmat(16, 16, 16, "f16", "f32"), coopmat(16, 16, 16, "i8", "i32"))
# Intel (Arc A770 Windows report; Mesa ANV reports 65535 groups and 128 push-constant bytes).
INTEL_LIMITS = limits(1024, (1024, 1024, 64), 32 * KB, maxStorageBufferRange=1073741820,
                      maxPerStageDescriptorStorageBuffers=1024, minStorageBufferOffsetAlignment=64)
INTEL_FEATURES = frozenset({"shaderFloat16", "shaderInt8", "shaderInt16"}) | STORAGE | SIZE_CONTROL
MOBILE_NUMERIC = frozenset({"shaderFloat16", "shaderInt8", "shaderInt16"})


def _nvidia(name: str, coop: bool, aliases: tuple[str, ...], products: tuple[str, ...], note: str = "") -> Arch:
    return Arch(name, "NVIDIA", "discrete-gpu", "1.3", DESKTOP | ({"cooperativeMatrix"} if coop else set()),
                ALL_OPS, 32, (32,), NVIDIA_LIMITS, NVIDIA_COOPMAT if coop else (), aliases, products,
                note or f"NVIDIA {name.capitalize()}")


def _amd(name: str, wave32: bool, coop: bool, aliases: tuple[str, ...], products: tuple[str, ...],
         note: str) -> Arch:
    return Arch(name, "AMD", "discrete-gpu", "1.3", DESKTOP | ({"cooperativeMatrix"} if coop else set()),
                ALL_OPS, 64, (32, 64) if wave32 else (64,),
                AMD_LIMITS, AMD_COOPMAT if coop else (), aliases, products, note)


def _intel(name: str, aliases: tuple[str, ...], products: tuple[str, ...], note: str) -> Arch:
    return Arch(name, "Intel", "integrated-gpu" if name != "xe-hpg" else "discrete-gpu", "1.3", INTEL_FEATURES,
                ALL_OPS, 32, (8, 16, 32), INTEL_LIMITS, (), aliases, products, note)


def _profile(name: str, features: frozenset[str], aliases: tuple[str, ...], note: str, version: str = "1.1") -> Arch:
    return Arch(name, "Khronos", "other", version, features, (), None, (), limits(128, (128, 128, 64), 16 * KB),
                (), aliases, (), note)


TABLE: tuple[Arch, ...] = (
    _nvidia("pascal", False, ("sm_60", "sm_61", "sm_62"),
            ("gtx1050", "gtx1060", "gtx1070", "gtx1080", "gtx1080ti", "titan-xp", "p100", "p40", "p4")),
    _nvidia("volta", False, ("sm_70", "sm_72"), ("v100", "titan-v"),
            "NVIDIA Volta; its tensor cores are not assumed reachable through VK_KHR_cooperative_matrix"),
    _nvidia("turing", True, ("sm_75",),
            ("rtx2060", "rtx2070", "rtx2080", "rtx2080ti", "titan-rtx", "t4", "gtx1650", "gtx1660")),
    _nvidia("ampere", True, ("sm_80", "sm_86", "sm_87"),
            ("a100", "a30", "a10", "a40", "rtx-a6000", "rtx3050", "rtx3060", "rtx3070", "rtx3070ti", "rtx3080",
             "rtx3080ti", "rtx3090", "rtx3090ti")),
    _nvidia("ada", True, ("lovelace", "ada-lovelace", "sm_89"),
            ("l4", "l40", "l40s", "rtx6000-ada", "rtx4060", "rtx4070", "rtx4080", "rtx4090")),
    _nvidia("hopper", True, ("sm_90", "sm_90a"), ("h100", "h200", "h800", "h20", "gh200")),
    _nvidia("blackwell", True, ("sm_100", "sm_100a", "sm_120"),
            ("b100", "b200", "gb200", "rtx5060", "rtx5070", "rtx5070ti", "rtx5080", "rtx5090", "rtx-pro-6000")),
    _amd("rdna1", True, False, ("gfx1010", "gfx1011", "gfx1012", "gfx1013", "navi10"),
         ("5700xt", "rx5700xt", "5700", "rx5700", "5600xt", "rx5600xt", "5500xt", "rx5500xt"), "AMD RDNA 1"),
    _amd("rdna2", True, False, ("gfx1030", "gfx1031", "gfx1032", "gfx1033", "gfx1034", "gfx1035", "gfx1036",
                                "navi21"),
         ("6900xt", "rx6900xt", "6800xt", "rx6800xt", "6800", "rx6800", "6700xt", "rx6700xt", "6600xt", "rx6600xt",
          "6600", "rx6600", "steam-deck"), "AMD RDNA 2"),
    _amd("rdna3", True, True, ("gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "navi31"),
         ("7900xtx", "rx7900xtx", "7900xt", "rx7900xt", "7800xt", "rx7800xt", "7700xt", "rx7700xt", "7600",
          "rx7600", "w7900", "w7800", "v710", "phoenix", "780m", "strix-point", "strix-halo"),
         "AMD RDNA 3 (and 3.5): WMMA through VK_KHR_cooperative_matrix"),
    _amd("rdna4", True, True, ("gfx1200", "gfx1201", "navi48"),
         ("9070xt", "rx9070xt", "9070", "rx9070", "9060xt", "rx9060xt", "r9700"), "AMD RDNA 4"),
    _amd("cdna1", False, False, ("gfx908",), ("mi100",),
         "AMD CDNA 1, wave64 only; few Vulkan drivers expose CDNA (no graphics pipeline): check with `host`"),
    _amd("cdna2", False, False, ("gfx90a",), ("mi210", "mi250", "mi250x"),
         "AMD CDNA 2, wave64 only; few Vulkan drivers expose CDNA (no graphics pipeline): check with `host`"),
    _amd("cdna3", False, False, ("gfx942",), ("mi300x", "mi300a", "mi325x"),
         "AMD CDNA 3, wave64 only; few Vulkan drivers expose CDNA (no graphics pipeline): check with `host`"),
    _intel("gen9", ("skylake", "kabylake", "coffeelake"), ("uhd620", "uhd630", "hd620", "hd630"),
           "Intel Gen9 integrated graphics"),
    _intel("xe-lp", ("xe", "gen12", "tigerlake", "alderlake"), ("uhd", "uhd730", "uhd750", "uhd770", "iris-xe"),
           "Intel Xe-LP integrated graphics"),
    _intel("xe-hpg", ("arc", "alchemist", "dg2"), ("a770", "arc-a770", "a750", "arc-a750", "a580", "a380"),
           "Intel Arc (Xe-HPG); VK_KHR_cooperative_matrix shapes need subgroup size 8, not assumed"),
    Arch("valhall", "ARM", "integrated-gpu", "1.1", MOBILE_NUMERIC | STORAGE,
         ("basic", "vote", "arithmetic", "ballot", "clustered", "quad"), 16, (16,),
         limits(512, (512, 512, 512), 32 * KB, maxPerStageDescriptorStorageBuffers=16), (),
         ("valhall1", "valhall2", "valhall3", "valhall4"),
         ("mali-g57", "g57", "mali-g77", "g77", "mali-g68", "g68", "mali-g78", "g78", "mali-g310", "g310",
          "mali-g510", "g510", "mali-g610", "g610", "mali-g710", "g710", "mali-g615", "g615", "mali-g715", "g715",
          "immortalis-g715", "mali-g620", "g620", "mali-g720", "g720", "immortalis-g720"),
         "ARM Mali Valhall (and the G720 generation): 16-wide; subgroup shuffles need Android 12, not assumed"),
    Arch("bifrost", "ARM", "integrated-gpu", "1.1", frozenset({"shaderFloat16", "shaderInt16",
                                                              "storageBuffer16BitAccess"}),
         ("basic",), 8, (8,), limits(256, (256, 256, 256), 32 * KB, maxPerStageDescriptorStorageBuffers=16), (),
         (), ("mali-g52", "g52", "mali-g76", "g76"),
         "ARM Mali Bifrost with 8-wide warps (G52, G76; G71/G72 are 4-wide and not covered)"),
    Arch("adreno", "Qualcomm", "integrated-gpu", "1.1", MOBILE_NUMERIC | {"storageBuffer16BitAccess"},
         ("basic", "vote", "arithmetic", "ballot", "shuffle", "shuffle_relative", "quad"), 64, (64, 128),
         limits(1024, (1024, 1024, 64), 32 * KB, maxPerStageDescriptorStorageBuffers=16), (), (),
         ("adreno-640", "a640", "adreno-650", "a650", "adreno-660", "a660", "adreno-730", "adreno-740",
          "adreno-750"),
         "Qualcomm Adreno 6xx/7xx: waves of 64 or 128 with no size control assumed, so code must not depend on it"),
    Arch("apple", "Apple", "integrated-gpu", "1.2", NUMERIC - {"shaderFloat64"} | STORAGE | SIZE_CONTROL, ALL_OPS, 32,
         (32,), limits(1024, (1024, 1024, 1024), 32 * KB, maxComputeWorkGroupCount=[2**30] * 3,
                       maxStorageBufferRange=2**32 - 1, maxPushConstantsSize=4096,
                       maxPerStageDescriptorStorageBuffers=31, minStorageBufferOffsetAlignment=16), (),
         ("apple-m1", "apple-m2", "apple-m3", "apple-m4", "moltenvk"), ("m1", "m2", "m3", "m4"),
         "Apple GPUs through MoltenVK (Vulkan 1.2 or newer): 32-wide SIMD-groups"),
    Arch("llvmpipe", "Mesa", "cpu", "1.3", DESKTOP, ALL_OPS[:6] + ("quad",), 8, (8,),
         limits(1024, (1024, 1024, 1024), 32 * KB, maxPushConstantsSize=128, maxPerStageDescriptorStorageBuffers=32,
                minStorageBufferOffsetAlignment=16), (), ("lavapipe", "llvmpipe-256"), (),
         "Mesa lavapipe on a CPU with 256-bit vectors (AVX2): 8-wide subgroups"),
    Arch("llvmpipe-128", "Mesa", "cpu", "1.3", DESKTOP, ALL_OPS[:6] + ("quad",), 4, (4,),
         limits(1024, (1024, 1024, 1024), 32 * KB, maxPushConstantsSize=128, maxPerStageDescriptorStorageBuffers=32,
                minStorageBufferOffsetAlignment=16), (), ("lavapipe-128",), (),
         "Mesa lavapipe on a CPU with 128-bit vectors (SSE, NEON): 4-wide subgroups"),
    Arch("swiftshader", "Google", "cpu", "1.1", frozenset(), ALL_OPS[:6], 4, (4,),
         limits(128, (128, 128, 64), 16 * KB), (), (), (),
         "Google SwiftShader on a CPU: 4-wide subgroups, spec-minimum limits"),
    _profile("vulkan-1.1", frozenset(), ("baseline", "vulkan", "vulkan1.1", "spec-minimum"),
             "Vulkan 1.1 with the spec's minimum limits and no optional capabilities: runs on every device"),
    _profile("vulkan-1.3", SIZE_CONTROL, ("vulkan1.3",),
             "Vulkan 1.3 with the spec's minimum limits; subgroup size control, which 1.3 requires", "1.3"),
    _profile("vp_android_baseline_2021", frozenset(), (),
             "Khronos VP_ANDROID_baseline_2021 (the profile itself asks only Vulkan 1.0; retarget needs 1.1)"),
    _profile("vp_android_baseline_2022", frozenset({"shaderInt16"}), (),
             "Khronos VP_ANDROID_baseline_2022: Vulkan 1.1, the spec's minimum limits, shaderInt16"),
)

HOST_SPELLINGS = ("host", "native")
BASELINE = "vulkan-1.1"
TRIPLE_OS = re.compile(r"^(unknown|linux|windows|macos|ios|android\d*)$")
TRIPLE_OS_NAMES = ("unknown", "linux", "windows", "macos", "ios", "android30", "android31", "android33")  # to suggest
TRIPLE_CPU_ARCH = "cpu"  # IREE's triples name every software device `cpu-<product>-<os>`


def _key(spec: str) -> str:
    """'Mali G78', 'VP_ANDROID_baseline_2022', 'SM_80' -> the table's spelling."""
    return re.sub(r"[\s_]+", "-", spec.strip().lower())


def _compact(key: str) -> str:
    return key.replace("-", "")


BY_NAME: dict[str, tuple[Arch, str | None]] = {}  # key -> (row, the product it names, if any)
for _row in TABLE:
    for _spelling, _product in ((_row.name, None), *((a, None) for a in _row.aliases),
                                *((p, p) for p in _row.products)):
        BY_NAME[_key(_spelling)] = (_row, _product)
BY_COMPACT = {_compact(k): v for k, v in BY_NAME.items()}  # 'rtx 4090' -> 'rtx-4090' -> 'rtx4090'
# Products named by a rule rather than listed, as IREE names them: any Adreno `adreno-NNN` (also `adreno-aNNN`, as
# Qualcomm abbreviates it; a trailing `l` for the lite parts) of the generations the row holds, 6xx to 8xx.
PRODUCT_RULES = ((re.compile(r"^adreno-?a?[678]\d\dl?$"), "adreno"),)
BY_ARCH = {row.name: row for row in TABLE}


def names() -> list[str]:
    """Every spelling: `host`, the architectures and profiles (what `retarget targets` shows first), then
    their aliases and products."""
    return [*HOST_SPELLINGS, *(row.name for row in TABLE), *(n for row in TABLE for n in (*row.aliases, *row.products))]


def _hint(key: str) -> str:
    """The closest spellings; with none close, the architectures (not every product)."""
    return suggestion(key, names() if closest(key, names()) else [row.name for row in TABLE])


# -- records -> TargetDesc --------------------------------------------------------------------


def capabilities(features, subgroup_ops) -> tuple[str, ...]:
    """The SPIR-V capabilities that these Vulkan feature bits and subgroup operations grant."""
    granted = {cap for cap, bit in CAPABILITY_FEATURES.items() if bit in features}
    granted |= {cap for cap, op in CAPABILITY_SUBGROUP_OPS.items() if op in subgroup_ops}
    return tuple(cap for cap in CAPABILITIES if cap in granted)


def extensions_for(caps, features) -> list[str]:
    """The device extensions that code using `caps` (and pinning a subgroup size) needs enabled."""
    needed = {CAPABILITY_EXTENSIONS[cap] for cap in caps if cap in CAPABILITY_EXTENSIONS}
    if "subgroupSizeControl" in features:
        needed.add(SUBGROUP_SIZE_CONTROL)
    return sorted(needed)


def _version(text: str) -> tuple[int, int]:
    major, minor = (int(part) for part in str(text).split(".")[:2])
    return major, minor


def _powers_of_two(low: int, high: int) -> tuple[int, ...]:
    return tuple(1 << b for b in range(max(low, 1).bit_length() - 1, high.bit_length()) if low <= 1 << b <= high)


# The tiled fragment matmul's large plans for a vendor's cooperative matrices, where measured better than the
# core's (`retarget.kernel.lower.LARGE_FRAGMENT_PLANS`): (subgroup rows, subgroup columns, fragment rows, fragment
# columns, k-slices per step). NVIDIA: H100, f16 4096^3 (benchmarks/gpu/gemm.py --variants), 313 TFLOP/s against
# 204 for the core's.
LARGE_FRAGMENT_PLANS = {"NVIDIA": list(NVIDIA_FRAGMENT_PLANS)}
# How the tiled matmuls' loops are spelled for a vendor's compiler (`retarget.kernel.lower.PEEL_LAST_STEP` and
# `FRAGMENT_K_LOOP`). NVIDIA's Vulkan compiler allocates 246 registers and spills nothing with the last step peeled
# and the k-slices in a loop, where the unrolled loop took 255 and spilled (H100: f16 4096^3 339 TFLOP/s against
# 320, f32 35.7 against 34.4; RETARGET_VULKAN_PIPELINE_STATISTICS shows the counts).
LOOP_SPELLING = {"NVIDIA": {"peel_last_step": ["fragments", "registers"], "fragment_k_loop": "serial"}}


def describe(arch: str, *, spec: str, vendor: str, device_type: str, vulkan_version: str, features,
             subgroup_ops, subgroup_size: int | None, subgroup_sizes: tuple[int, ...], reported_limits: dict,
             cooperative_matrix=(), extensions=None, product: str | None = None, note: str = "") -> TargetDesc:
    """A TargetDesc from a device-shaped record (a table row, or a live device's properties)."""
    lim = {key: reported_limits.get(key, SPEC_MINIMUM_LIMITS[key]) for key in LIMIT_KEYS}
    lim = {key: list(value) if isinstance(value, (list, tuple)) else int(value) for key, value in lim.items()}
    caps = capabilities(features, subgroup_ops)
    if "CooperativeMatrixKHR" in caps and not cooperative_matrix:
        caps = tuple(c for c in caps if c != "CooperativeMatrixKHR")  # the feature without a shape is unusable
    return TargetDesc(
        backend=BACKEND,
        arch=arch,
        format=FORMAT,
        spec=spec or arch,
        features=caps,
        subgroup_size=subgroup_size,
        subgroup_sizes=tuple(subgroup_sizes),
        max_workgroup_size=lim["maxComputeWorkGroupInvocations"],
        max_workgroup_dims=tuple(lim["maxComputeWorkGroupSize"]),
        shared_memory_bytes=lim["maxComputeSharedMemorySize"],
        fp16="Float16" in caps and "StorageBuffer16BitAccess" in caps,
        int8="Int8" in caps and "StorageBuffer8BitAccess" in caps,
        matrix_units=("coopmat-khr",) if "CooperativeMatrixKHR" in caps else (),
        extra={
            "limits": lim,
            "extensions": extensions_for(caps, features) if extensions is None else sorted(extensions),
            "vulkan_version": vulkan_version,
            "cooperative_matrix": [dict(shape) for shape in cooperative_matrix] if "CooperativeMatrixKHR" in caps
            else [],
            "fragments": fragments(cooperative_matrix, caps, features, vulkan_version, subgroup_size,
                                   subgroup_sizes),
            # the tiled fragment matmul stages runs of 16 bytes, moved as uvec4 words (codegen.py)
            "vector_copy_bytes": 16,
            **({"large_fragment_plans": [list(p) for p in LARGE_FRAGMENT_PLANS[vendor]]}
               if vendor in LARGE_FRAGMENT_PLANS else {}),
            **LOOP_SPELLING.get(vendor, {}),
            "vendor": vendor,
            "device_type": device_type,
            "product": product,
            "note": note,
        },
    )


def fragments(shapes, caps, features, vulkan_version: str, subgroup_size: int | None,
              subgroup_sizes: tuple[int, ...]) -> list[dict]:
    """The matrix fragments the core's lowering may use (`retarget.kernel.lower`), from the cooperative-matrix
    shapes codegen can spell: f16 A and B, f32 accumulators, subgroup scope. Such code depends on the subgroup
    size, so it needs one the device can pin (a single size, or subgroup size control), and the Vulkan memory
    model (required from Vulkan 1.3)."""
    if "CooperativeMatrixKHR" not in caps or "Float16" not in caps or not subgroup_size:
        return []
    if len(subgroup_sizes) > 1 and "subgroupSizeControl" not in features:
        return []
    if "vulkanMemoryModel" not in features and _version(vulkan_version) < (1, 3):
        return []
    return [{"m": s["M"], "n": s["N"], "k": s["K"], "a": "f16", "b": "f16", "acc": "f32", "width": subgroup_size}
            for s in shapes if (s["a"], s["b"], s["c"], s["result"]) == ("f16", "f16", "f32", "f32")
            and s.get("scope", "subgroup") == "subgroup"]


def describe_row(row: Arch, spec: str = "", product: str | None = None) -> TargetDesc:
    return describe(row.name, spec=spec, vendor=row.vendor, device_type=row.device_type,
                    vulkan_version=row.vulkan_version, features=row.features, subgroup_ops=row.subgroup_ops,
                    subgroup_size=row.subgroup_size, subgroup_sizes=row.subgroup_sizes, reported_limits=row.limits,
                    cooperative_matrix=row.cooperative_matrix, product=product, note=row.note)


def describe_device(info: DeviceInfo) -> TargetDesc:
    """The `host` row: the target that matches a live device, from its `DeviceInfo.properties`."""
    props = info.properties
    features = {name for name, on in props.get("features", {}).items() if on}
    default_size = props.get("subgroup_size")
    low, high = props.get("subgroup_size_range") or (default_size, default_size)
    sizes = _powers_of_two(low, high) if low and high else ()
    version = "{}.{}".format(*_version(props.get("api_version", "1.1")))
    caps = capabilities(features, props.get("subgroup_operations", ()))
    device_extensions = set(props.get("extensions", ()))
    # Only what the device lists: an extension promoted to core need not be enabled by name.
    wanted = [ext for ext in extensions_for(caps, features) if ext in device_extensions]
    return describe("host", spec="host", vendor=VENDORS.get(props.get("vendor_id"), props.get("driver_name", "")),
                    device_type=props.get("device_type", "other"), vulkan_version=version, features=features,
                    subgroup_ops=props.get("subgroup_operations", ()), subgroup_size=default_size,
                    subgroup_sizes=sizes, reported_limits=props.get("limits", {}),
                    cooperative_matrix=props.get("cooperative_matrix", ()), extensions=wanted,
                    note=f"the device {info.name}")


# -- what code built for a TargetDesc needs from a device -------------------------------------


def unsupported(desc: TargetDesc, info: DeviceInfo, required_subgroup_size: int | None = None) -> list[str]:
    """Why code compiled for `desc` cannot run on the live device `info`: one short clause per reason,
    none when it can. `required_subgroup_size` is the size the code pinned, if any."""
    props = info.properties
    device_features = {name for name, on in props.get("features", {}).items() if on}
    device_ops = set(props.get("subgroup_operations", ()))
    reasons = []

    for cap in desc.features:
        if cap in CAPABILITY_FEATURES and CAPABILITY_FEATURES[cap] not in device_features:
            reasons.append(f"no {cap} (the device lacks {CAPABILITY_FEATURES[cap]})")
        if cap in CAPABILITY_SUBGROUP_OPS and CAPABILITY_SUBGROUP_OPS[cap] not in device_ops:
            reasons.append(f"no {cap} (the device lacks {CAPABILITY_SUBGROUP_OPS[cap]} subgroup operations)")

    have, need = props.get("limits", {}), desc.extra.get("limits", {})
    for key, what in (("maxComputeWorkGroupInvocations", "workgroup invocations"),
                      ("maxComputeSharedMemorySize", "bytes of workgroup memory"),
                      ("maxPushConstantsSize", "push-constant bytes"),
                      ("maxPerStageDescriptorStorageBuffers", "storage buffers per stage")):
        if key in need and key in have and need[key] > have[key]:
            reasons.append(f"{need[key]} {what} assumed, the device has {have[key]}")
    if "maxComputeWorkGroupSize" in need and "maxComputeWorkGroupSize" in have:
        if any(n > h for n, h in zip(need["maxComputeWorkGroupSize"], have["maxComputeWorkGroupSize"])):
            reasons.append(f"workgroup size up to {tuple(need['maxComputeWorkGroupSize'])} assumed, "
                           f"the device allows {tuple(have['maxComputeWorkGroupSize'])}")

    device_version = _version(props.get("api_version", "1.0"))
    if "vulkan_version" in desc.extra and _version(desc.extra["vulkan_version"]) > device_version:
        reasons.append(f"Vulkan {desc.extra['vulkan_version']} needed, the device has "
                       f"{device_version[0]}.{device_version[1]}")
    device_extensions = set(props.get("extensions", ()))
    for ext in desc.extra.get("extensions", ()):
        if ext not in device_extensions and not device_version >= PROMOTED.get(ext, (99, 0)):
            reasons.append(f"no {ext}")

    if "CooperativeMatrixKHR" in desc.features:
        device_shapes = [_shape(s) for s in props.get("cooperative_matrix", ())]
        for shape in desc.extra.get("cooperative_matrix", ()):
            if _shape(shape) not in device_shapes:
                reasons.append(f"no {shape['M']}x{shape['N']}x{shape['K']} {shape['a']}->{shape['result']} "
                               "cooperative matrix")

    if required_subgroup_size is not None:
        reasons += _subgroup_reasons(required_subgroup_size, props, device_features)
    return reasons


def _shape(s: dict) -> tuple:
    return tuple(s.get(k) for k in ("M", "N", "K", "a", "b", "c", "result", "scope"))


def _subgroup_reasons(size: int, props: dict, device_features: set[str]) -> list[str]:
    default = props.get("subgroup_size")
    low, high = props.get("subgroup_size_range") or (default, default)
    if default is None:
        return [f"subgroup size {size} required, the device does not report its subgroup size"]
    if size not in _powers_of_two(low, high):
        where = f"{low}" if low == high else f"{low}..{high}"
        return [f"subgroup size {size} required, the device runs {where}"]
    if low != high and "subgroupSizeControl" not in device_features:
        # The size may vary between pipelines: without control, nothing pins it to `size`.
        return [f"subgroup size {size} required, the device varies it ({low}..{high}) and lacks "
                "subgroupSizeControl to pin it"]
    return []


# -- spellings -> TargetDesc ------------------------------------------------------------------


def _lookup(key: str) -> tuple[Arch, str | None] | None:
    hit = BY_NAME.get(key) or BY_COMPACT.get(_compact(key))
    if hit is None:
        hit = next(((BY_ARCH[arch], key) for rule, arch in PRODUCT_RULES if rule.match(key)), None)
    return hit


def _product_of(arch_hit, arch_part: str, product_part: str) -> tuple[Arch, str | None] | None:
    """The product of a triple, read in its arch's context first (`adreno-740-android33`: `adreno-740`; and
    `adreno-a750-android33` is an Adreno 750, not Intel's Arc A750)."""
    if arch_hit is not None:
        hit = _lookup(f"{arch_part}-{product_part}")
        if hit is not None and hit[0] is arch_hit[0]:
            return hit[0], product_part
    return _lookup(product_part)


def _triple(spec: str, key: str) -> TargetDesc | None:
    """IREE's `<arch>-<product>-<os>`, or None when `key` is not shaped like one."""
    parts = key.split("-")
    if len(parts) < 3:
        return None
    arch_part, product_part, os_part = parts[0], "-".join(parts[1:-1]), parts[-1]
    if not (arch_part and product_part and os_part):
        raise UnknownTargetError(f"the triple '{spec}' has an empty part",
                                 hint="write <arch>-<product>-<os>, e.g. valhall-g78-android30, with unknown for "
                                      "a part you do not know")
    arch_hit = None if arch_part in (TRIPLE_CPU_ARCH, "unknown") else _lookup(arch_part)
    product_hit = None if product_part == "unknown" else _product_of(arch_hit, arch_part, product_part)
    if not TRIPLE_OS.match(os_part):
        if arch_hit is None and arch_part not in (TRIPLE_CPU_ARCH, "unknown"):
            return None  # not a triple at all
        close = closest(os_part, TRIPLE_OS_NAMES)
        raise UnknownTargetError(f"the triple '{spec}' names an unknown os '{os_part}'",
                                 hint=(f"did you mean {', '.join(close)}? " if close else "")
                                 + "the os is one of linux, windows, macos, ios, android<API level>, unknown")
    if arch_part not in (TRIPLE_CPU_ARCH, "unknown") and arch_hit is None:
        raise UnknownTargetError(f"vulkan-spirv has no architecture '{arch_part}' (in the triple '{spec}')",
                                 hint=_hint(arch_part))
    if product_part != "unknown" and product_hit is None:
        unknown = f"write {arch_part}-unknown-{os_part}"
        if arch_hit is None:
            hint = f"{_hint(product_part)} (or {unknown})"
        else:  # the arch's own products: an Adreno triple should not suggest NVIDIA's A40
            row = arch_hit[0]
            close = closest(product_part, row.products)
            hint = (f"did you mean {', '.join(close)}? (or {unknown})" if close else
                    f"{row.name}'s products: {', '.join(row.products)} (or {unknown})" if row.products else unknown)
        raise UnknownTargetError(f"vulkan-spirv has no product '{product_part}' (in the triple '{spec}')", hint=hint)
    if product_hit is None:
        if arch_part == TRIPLE_CPU_ARCH:
            raise UnknownTargetError(f"the triple '{spec}' names a CPU device without saying which",
                                     hint="use cpu-llvmpipe-<os> or cpu-swiftshader-<os>")
        row = arch_hit[0] if arch_hit else BY_ARCH[BASELINE]  # IREE: an unknown arch is the baseline
        return describe_row(row, spec)
    row, product = product_hit[0], product_hit[1] or product_part
    consistent = (arch_part == "unknown" or (arch_part == TRIPLE_CPU_ARCH and row.device_type == "cpu")
                  or (arch_hit is not None and arch_hit[0] is row))
    if not consistent:
        raise UnknownTargetError(f"in the triple '{spec}', '{product_part}' is {row.name}, not '{arch_part}'",
                                 hint=f"write {row.name}-{product_part}-{os_part}, or just {product_part}")
    return describe_row(row, spec, product)


def _enumerate() -> list[DeviceInfo]:
    try:
        from .driver import VULKAN
    except ImportError as e:
        reason = f"the vulkan driver cannot load: {e}"
        return [DeviceInfo("vulkan", "-", "vulkan driver", available=False, reason=reason)]
    return VULKAN.enumerate()


def best_first(infos: list[DeviceInfo]) -> list[DeviceInfo]:
    """`infos` ordered as `host` and a bare `--device vulkan` prefer them (`DEVICE_TYPE_PREFERENCE`; the loader's
    order within a kind): loaders differ in the order they list devices."""
    rank = {kind: i for i, kind in enumerate(DEVICE_TYPE_PREFERENCE)}
    return sorted(infos, key=lambda d: rank.get(d.properties.get("device_type"), len(rank)))


def _available_devices() -> tuple[list[DeviceInfo], str]:
    """The `vulkan` driver's available devices, best first, and why there are none."""
    infos = _enumerate()
    devices = [d for d in best_first(infos) if d.available]
    return devices, "; ".join(d.reason for d in infos if d.reason) or "no Vulkan device"


def host() -> TargetDesc:
    """The target of this machine's best Vulkan device (a discrete GPU before an integrated one before a CPU)."""
    devices, reason = _available_devices()
    if not devices:
        raise UnknownTargetError(f"vulkan-spirv:host needs a Vulkan device, and there is none here: {reason}",
                                 hint=f"name an architecture instead, e.g. --target vulkan-spirv:{BASELINE} "
                                      "(runs everywhere) or vulkan-spirv:ampere")
    return describe_device(devices[0])


def parse(spec: str) -> TargetDesc:
    key = _key(spec)
    if key in ("",) + HOST_SPELLINGS:
        return host()
    hit = _lookup(key)
    if hit is not None:
        return describe_row(hit[0], spec, hit[1])
    desc = _triple(spec, key)
    if desc is not None:
        return desc
    raise UnknownTargetError(f"vulkan-spirv has no architecture '{spec}'",
                             hint=_hint(key) + " (`host` compiles for this machine's Vulkan device)")


def default() -> tuple[TargetDesc, str]:
    devices, reason = _available_devices()
    if devices:
        desc = describe_device(devices[0])
        return desc, (f"vulkan-spirv: no target given, compiling for this machine's Vulkan device ({devices[0].name}, "
                      f"subgroup size {desc.subgroup_size}); use --target vulkan-spirv:{BASELINE} (or an "
                      "architecture) for code that runs on other devices")
    desc = describe_row(BY_ARCH[BASELINE], BASELINE)
    return desc, (f"vulkan-spirv: warning: no target given and no Vulkan device here ({reason}); compiling for "
                  f"{BASELINE}, the spec's minimum limits without optional capabilities: it runs on any device "
                  "but slowly; name the device's architecture (e.g. --target vulkan-spirv:ampere) for fast code")
