"""The vulkan-spirv target table: every spelling resolves to a complete row, IREE's names and triples work,
live devices describe themselves, and `unsupported` says why code cannot run on a device."""

import math

import pytest
from retarget.errors import UnknownTargetError
from retarget.protocols import DeviceInfo
from retarget_vulkan_spirv import FORMAT, targets

COOPMAT_TYPES = {"f16", "f32", "i8", "i32", "bf16"}


def _table_spellings():
    return [n for n in targets.names() if n not in targets.HOST_SPELLINGS]


def _device(name="test device", **overrides) -> DeviceInfo:
    """A DeviceInfo as the vulkan driver reports one; the defaults are the Vulkan 1.1 spec minimum."""
    properties = {
        "arch": "host", "api_version": "1.1.0", "driver_name": "test", "vendor_id": 0, "device_id": 0,
        "device_type": "discrete-gpu", "subgroup_size": None, "subgroup_size_range": None,
        "subgroup_operations": ["basic"], "limits": dict(targets.SPEC_MINIMUM_LIMITS, timestampPeriod=1.0),
        "features": {}, "extensions": [], "cooperative_matrix": [],
        "memory_heaps": [{"size": 2**30, "device_local": True}], "queues": [{"flags": ["compute"], "count": 1}],
    }
    properties.update(overrides)
    return DeviceInfo("vulkan", "0", name, properties=properties)


def _device_like(row: targets.Arch, **overrides) -> DeviceInfo:
    """A device that reports exactly what a table row says."""
    sizes = row.subgroup_sizes or (32,)
    reported = dict(api_version=f"{row.vulkan_version}.0", subgroup_size=row.subgroup_size or sizes[0],
                    subgroup_size_range=[min(sizes), max(sizes)], subgroup_operations=list(row.subgroup_ops),
                    limits=dict(row.limits), features={f: True for f in row.features},
                    extensions=targets.extensions_for(targets.capabilities(row.features, row.subgroup_ops),
                                                      row.features),
                    cooperative_matrix=[dict(s) for s in row.cooperative_matrix])
    return _device(row.name, **{**reported, **overrides})


NVIDIA_FEATURES = {"shaderFloat16": True, "shaderInt8": True, "shaderInt16": True, "shaderInt64": True,
                   "shaderFloat64": True, "storageBuffer16BitAccess": True, "storageBuffer8BitAccess": True,
                   "subgroupSizeControl": True, "computeFullSubgroups": True, "cooperativeMatrix": True,
                   "bufferDeviceAddress": True, "vulkanMemoryModel": True,
                   "shaderSignedZeroInfNanPreserveFloat32": True}
NVIDIA_LIMITS = {"maxComputeWorkGroupInvocations": 1024, "maxComputeWorkGroupSize": [1024, 1024, 64],
                 "maxComputeWorkGroupCount": [2147483647, 65535, 65535], "maxComputeSharedMemorySize": 49152,
                 "maxStorageBufferRange": 4294967295, "maxPushConstantsSize": 256,
                 "maxPerStageDescriptorStorageBuffers": 1048576, "minStorageBufferOffsetAlignment": 16,
                 "timestampPeriod": 1.0}
ALL_OPS = ["basic", "vote", "arithmetic", "ballot", "shuffle", "shuffle_relative", "clustered", "quad"]


def _nvidia_rtx3080():
    return _device("NVIDIA GeForce RTX 3080", api_version="1.3.277", driver_name="NVIDIA", vendor_id=0x10DE,
                   subgroup_size=32, subgroup_size_range=[32, 32], subgroup_operations=ALL_OPS,
                   limits=NVIDIA_LIMITS, features=NVIDIA_FEATURES,
                   extensions=["VK_EXT_subgroup_size_control", "VK_KHR_16bit_storage", "VK_KHR_8bit_storage",
                               "VK_KHR_cooperative_matrix", "VK_KHR_shader_float16_int8"],
                   cooperative_matrix=[
                       {"M": 16, "N": 16, "K": 16, "a": "f16", "b": "f16", "c": "f16", "result": "f16",
                        "saturating": False, "scope": "subgroup"},
                       {"M": 16, "N": 16, "K": 16, "a": "f16", "b": "f16", "c": "f32", "result": "f32",
                        "saturating": False, "scope": "subgroup"},
                       {"M": 16, "N": 8, "K": 16, "a": "f16", "b": "f16", "c": "f32", "result": "f32",
                        "saturating": False, "scope": "subgroup"}])


def _radv_rdna2(**features):
    return _device("AMD Radeon RX 6800 XT (RADV NAVI21)", api_version="1.3.260", driver_name="radv",
                   vendor_id=0x1002, subgroup_size=64, subgroup_size_range=[32, 64], subgroup_operations=ALL_OPS,
                   limits=dict(targets.BY_ARCH["rdna2"].limits, maxPushConstantsSize=256),
                   features={**NVIDIA_FEATURES, "cooperativeMatrix": False, **features},
                   extensions=["VK_EXT_subgroup_size_control", "VK_KHR_16bit_storage", "VK_KHR_8bit_storage",
                               "VK_KHR_shader_float16_int8"])


def _lavapipe():
    return _device("llvmpipe (LLVM 15.0.6, 256 bits)", api_version="1.3.230", driver_name="llvmpipe",
                   vendor_id=0x10005, device_type="cpu", subgroup_size=8, subgroup_size_range=[8, 8],
                   subgroup_operations=["basic", "vote", "arithmetic", "ballot", "shuffle", "shuffle_relative", "quad"],
                   limits=dict(targets.BY_ARCH["llvmpipe"].limits, timestampPeriod=1.0),
                   features={**NVIDIA_FEATURES, "cooperativeMatrix": False},
                   extensions=["VK_EXT_subgroup_size_control", "VK_KHR_16bit_storage", "VK_KHR_8bit_storage",
                               "VK_KHR_shader_float16_int8", "VK_KHR_spirv_1_4"])


# -- the table --------------------------------------------------------------------------------


def test_every_spelling_resolves_to_a_complete_self_consistent_description():
    minimum = targets.SPEC_MINIMUM_LIMITS
    for spelling in _table_spellings():
        desc = targets.parse(spelling)
        row = targets.BY_ARCH[desc.arch]
        assert desc.backend == "vulkan-spirv" and desc.format == FORMAT == "spirv" and desc.spec == spelling
        extra = desc.extra
        assert {"limits", "extensions", "vulkan_version", "cooperative_matrix", "vendor", "note"} <= set(extra)
        assert extra["vendor"] and extra["note"] and extra["vulkan_version"] in targets.VULKAN_VERSIONS

        limits = extra["limits"]
        assert set(limits) == set(targets.LIMIT_KEYS), spelling
        for key in ("maxComputeWorkGroupInvocations", "maxComputeSharedMemorySize", "maxStorageBufferRange",
                    "maxPushConstantsSize", "maxPerStageDescriptorStorageBuffers"):
            assert limits[key] >= minimum[key], (spelling, key)
        for key in ("maxComputeWorkGroupSize", "maxComputeWorkGroupCount"):
            assert len(limits[key]) == 3 and all(h >= m for h, m in zip(limits[key], minimum[key])), (spelling, key)
        align = limits["minStorageBufferOffsetAlignment"]
        assert align <= 256 and align & (align - 1) == 0
        assert desc.max_workgroup_size == limits["maxComputeWorkGroupInvocations"]
        assert desc.max_workgroup_dims == tuple(limits["maxComputeWorkGroupSize"])
        assert desc.shared_memory_bytes == limits["maxComputeSharedMemorySize"]
        assert desc.max_workgroup_size <= math.prod(desc.max_workgroup_dims)

        if desc.subgroup_sizes:
            assert desc.subgroup_size in desc.subgroup_sizes
            assert list(desc.subgroup_sizes) == sorted(desc.subgroup_sizes)
            assert all(s & (s - 1) == 0 for s in desc.subgroup_sizes)
        else:
            assert desc.subgroup_size is None, spelling

        caps = desc.features
        assert set(caps) <= set(targets.CAPABILITIES) and list(caps) == [c for c in targets.CAPABILITIES if c in caps]
        if any(c.startswith("GroupNonUniform") for c in caps):
            assert "GroupNonUniform" in caps
        assert desc.fp16 == ("Float16" in caps and "StorageBuffer16BitAccess" in caps)
        assert desc.int8 == ("Int8" in caps and "StorageBuffer8BitAccess" in caps)

        has_coopmat = "CooperativeMatrixKHR" in caps
        assert desc.matrix_units == (("coopmat-khr",) if has_coopmat else ())
        assert bool(extra["cooperative_matrix"]) == has_coopmat
        for shape in extra["cooperative_matrix"]:
            assert set(shape) == {"M", "N", "K", "a", "b", "c", "result", "scope"}
            assert {shape["a"], shape["b"], shape["c"], shape["result"]} <= COOPMAT_TYPES
            assert shape["scope"] == "subgroup"

        for cap, ext in targets.CAPABILITY_EXTENSIONS.items():
            assert (cap in caps) <= (ext in extra["extensions"]), (spelling, cap)
        justified = {targets.CAPABILITY_EXTENSIONS[c] for c in caps if c in targets.CAPABILITY_EXTENSIONS}
        justified |= {targets.SUBGROUP_SIZE_CONTROL} if "subgroupSizeControl" in row.features else set()
        assert set(extra["extensions"]) == justified, spelling
        if extra["vulkan_version"] >= "1.3":  # 1.3 requires subgroup size control
            assert targets.SUBGROUP_SIZE_CONTROL in extra["extensions"], spelling


def test_each_spelling_belongs_to_exactly_one_row():
    keys = [targets._key(n) for row in targets.TABLE for n in (row.name, *row.aliases, *row.products)]
    assert len(keys) == len(set(keys))
    assert not set(keys) & {targets._key(h) for h in targets.HOST_SPELLINGS}
    compact = {}
    for row in targets.TABLE:
        for name in (row.name, *row.aliases, *row.products):
            assert compact.setdefault(targets._compact(targets._key(name)), row.name) == row.name, name


def test_every_row_describes_code_that_runs_on_a_device_reporting_that_row():
    for row in targets.TABLE:
        device = _device_like(row)
        assert targets.unsupported(targets.describe_row(row), device) == [], row.name
        host = targets.describe_device(device)
        assert host.features == targets.describe_row(row).features, row.name
        assert host.extra["limits"] == targets.describe_row(row).extra["limits"], row.name


def test_the_table_covers_current_gpus_and_products():
    expected = {
        "pascal": "pascal", "gtx1080": "pascal", "volta": "volta", "v100": "volta", "turing": "turing",
        "rtx2080": "turing", "t4": "turing", "ampere": "ampere", "rtx3080": "ampere", "rtx3090": "ampere",
        "a100": "ampere", "ada": "ada", "rtx4090": "ada", "l4": "ada", "hopper": "hopper", "h100": "hopper",
        "h200": "hopper", "blackwell": "blackwell", "rtx5090": "blackwell", "b200": "blackwell",
        "rdna1": "rdna1", "5700xt": "rdna1", "rdna2": "rdna2", "6800xt": "rdna2", "6900xt": "rdna2",
        "rdna3": "rdna3", "7900xtx": "rdna3", "rx7900xtx": "rdna3", "gfx1100": "rdna3", "rdna4": "rdna4",
        "rx9070xt": "rdna4", "cdna1": "cdna1", "mi100": "cdna1", "cdna2": "cdna2", "mi210": "cdna2",
        "mi250": "cdna2", "cdna3": "cdna3", "mi300x": "cdna3", "gfx942": "cdna3",
        "xe-hpg": "xe-hpg", "arc": "xe-hpg", "a770": "xe-hpg", "xe": "xe-lp", "uhd": "xe-lp", "uhd630": "gen9",
        "mali-g77": "valhall", "mali-g78": "valhall", "mali-g710": "valhall", "mali-g715": "valhall",
        "mali-g720": "valhall", "mali-g52": "bifrost", "mali-g76": "bifrost",
        "adreno": "adreno", "adreno-640": "adreno", "adreno-650": "adreno", "adreno-660": "adreno",
        "adreno-730": "adreno", "adreno-740": "adreno", "adreno-750": "adreno",
        "m1": "apple", "m3": "apple", "moltenvk": "apple", "llvmpipe": "llvmpipe", "lavapipe": "llvmpipe",
        "swiftshader": "swiftshader", "vp_android_baseline_2021": "vp_android_baseline_2021",
        "vp_android_baseline_2022": "vp_android_baseline_2022", "vulkan-1.1": "vulkan-1.1",
        "vulkan-1.3": "vulkan-1.3",
    }
    assert {name: targets.parse(name).arch for name in expected} == expected


def test_architectures_differ_where_the_hardware_does():
    assert targets.parse("rdna3").subgroup_sizes == (32, 64) and targets.parse("rdna3").subgroup_size == 64
    assert targets.parse("cdna3").subgroup_sizes == (64,)
    assert targets.parse("ampere").subgroup_sizes == (32,)
    assert targets.parse("xe-hpg").subgroup_sizes == (8, 16, 32)
    assert targets.parse("mali-g78").subgroup_sizes == (16,)
    assert targets.parse("adreno").subgroup_sizes == (64, 128)
    assert targets.parse("llvmpipe").subgroup_sizes == (8,) and targets.parse("llvmpipe-128").subgroup_sizes == (4,)
    assert targets.parse("rdna3").matrix_units == ("coopmat-khr",) and targets.parse("rdna2").matrix_units == ()
    assert targets.parse("turing").matrix_units == ("coopmat-khr",) and targets.parse("pascal").matrix_units == ()
    assert targets.parse("ampere").shared_memory_bytes == 48 * 1024
    assert targets.parse("rdna3").shared_memory_bytes == 64 * 1024
    assert targets.parse("mali-g78").max_workgroup_size == 512
    assert "Float64" in targets.parse("ampere").features and "Float64" not in targets.parse("m1").features
    assert targets.parse("adreno").fp16 and not targets.parse("adreno").int8


# -- spellings --------------------------------------------------------------------------------


@pytest.mark.parametrize("spec, arch, product", [
    ("valhall-g78-android30", "valhall", "g78"),
    ("adreno-unknown-android30", "adreno", None),
    ("rdna1-5700xt-linux", "rdna1", "5700xt"),
    ("ampere-rtx3080-windows", "ampere", "rtx3080"),
    ("cpu-swiftshader-unknown", "swiftshader", "swiftshader"),
    ("mali-g78", "valhall", "mali-g78"),
    ("adreno", "adreno", None),
    ("rdna3", "rdna3", None),
    ("ampere", "ampere", None),
    ("llvmpipe", "llvmpipe", None),
    ("vp_android_baseline_2022", "vp_android_baseline_2022", None),
])
def test_every_spelling_in_the_issue_resolves(spec, arch, product):
    desc = targets.parse(spec)
    assert (desc.arch, desc.extra["product"], desc.spec) == (arch, product, spec)


def test_a_product_builds_exactly_the_code_of_its_architecture():
    product, arch = targets.parse("rtx3080"), targets.parse("ampere")
    assert product.arch == arch.arch == "ampere" and product.extra["product"] == "rtx3080"
    assert (product.features, product.subgroup_sizes, product.extra["limits"]) == (
        arch.features, arch.subgroup_sizes, arch.extra["limits"])


def test_spellings_ignore_case_spaces_and_separators():
    assert targets.parse("RTX 4090").arch == "ada"
    assert targets.parse("Mali G78").arch == "valhall"
    assert targets.parse("VP_ANDROID_baseline_2022").arch == "vp_android_baseline_2022"
    assert targets.parse("vp-android-baseline-2022").arch == "vp_android_baseline_2022"
    assert targets.parse("SM_80").arch == "ampere"
    assert targets.parse("Adreno 740").arch == "adreno"


def test_a_triple_checks_its_os_and_ignores_it():
    linux, android = targets.parse("ampere-rtx3080-linux"), targets.parse("ampere-rtx3080-android31")
    assert linux.arch == android.arch == "ampere" and linux.extra["limits"] == android.extra["limits"]
    assert targets.parse("m1-moltenvk-macos").arch == "apple"
    with pytest.raises(UnknownTargetError, match="unknown os 'beos'"):
        targets.parse("ampere-rtx3080-beos")


def test_a_triple_whose_arch_and_product_disagree_is_refused():
    with pytest.raises(UnknownTargetError, match="'rtx5090' is blackwell, not 'ampere'"):
        targets.parse("ampere-rtx5090-linux")
    with pytest.raises(UnknownTargetError, match="without saying which"):
        targets.parse("cpu-unknown-linux")
    with pytest.raises(UnknownTargetError, match="no product 'rtx9999'") as e:
        targets.parse("ampere-rtx9999-linux")
    assert "rtx" in str(e.value)


def test_a_triple_with_an_empty_part_says_so():
    for spec in ("valhall--android30", "-g78-android30", "valhall-g78-"):
        with pytest.raises(UnknownTargetError, match="has an empty part") as e:
            targets.parse(spec)
        assert "<arch>-<product>-<os>" in e.value.hint


def test_a_misspelled_triple_os_gets_the_close_ones():
    with pytest.raises(UnknownTargetError, match="unknown os 'andriod30'") as e:
        targets.parse("valhall-g78-andriod30")
    assert e.value.hint.startswith("did you mean android30")
    with pytest.raises(UnknownTargetError) as e:
        targets.parse("ampere-rtx3080-widows")
    assert e.value.hint.startswith("did you mean windows")


def test_any_adreno_of_the_rows_generations_resolves_as_iree_names_them():
    for spec in ("adreno-830", "adreno-618", "adreno-750l", "Adreno 735"):
        desc = targets.parse(spec)
        assert desc.arch == "adreno" and desc.extra["product"] == targets._key(spec)
    assert targets.parse("adreno-unknown-android31").arch == "adreno"
    with pytest.raises(UnknownTargetError, match="no architecture 'adreno-530'"):
        targets.parse("adreno-530")  # Adreno 5xx predates what the row holds


def test_a_triples_product_is_read_in_its_arch_first():
    for spec, product in (("adreno-a740-android33", "a740"), ("adreno-740-android33", "740"),
                          ("adreno-a750-android33", "a750")):  # Adreno 750, though a bare a750 is Intel's Arc
        desc = targets.parse(spec)
        assert (desc.arch, desc.extra["product"]) == ("adreno", product), spec
    assert targets.parse("a750").arch == "xe-hpg"
    assert targets.parse("adreno-a740").arch == "adreno"
    assert targets.parse("ampere-a40-linux").extra["product"] == "a40"
    with pytest.raises(UnknownTargetError, match="no product 'x999'") as e:
        targets.parse("adreno-x999-android33")
    assert "adreno-740" in e.value.hint and "a40," not in e.value.hint  # not NVIDIA's A40
    assert e.value.hint.endswith("(or write adreno-unknown-android33)")


def test_the_architectures_are_listed_before_their_aliases_and_products():
    rows = [row.name for row in targets.TABLE]
    assert targets.names()[:len(targets.HOST_SPELLINGS) + len(rows)] == [*targets.HOST_SPELLINGS, *rows]


def test_a_triple_of_unknowns_is_the_baseline():
    assert targets.parse("unknown-unknown-unknown").arch == targets.BASELINE


def test_an_unknown_name_raises_with_the_closest_names():
    with pytest.raises(UnknownTargetError) as e:
        targets.parse("h1000")
    assert "h100" in str(e.value)
    with pytest.raises(UnknownTargetError) as e:
        targets.parse("mali-g79")
    assert "mali-g78" in str(e.value)
    with pytest.raises(UnknownTargetError) as e:
        targets.parse("vp_android_baseline_2023")
    assert "vp_android_baseline_2022" in str(e.value)


def test_a_name_with_nothing_close_lists_the_architectures_not_every_product():
    with pytest.raises(UnknownTargetError) as e:
        targets.parse("zzzz")
    assert "rdna3" in str(e.value) and "rtx3080" not in str(e.value)


# -- the baseline and the default --------------------------------------------------------------


def test_the_baseline_is_the_vulkan_spec_minimum():
    desc = targets.parse("vulkan-1.1")
    assert desc.extra["limits"] == {
        "maxComputeWorkGroupInvocations": 128, "maxComputeWorkGroupSize": [128, 128, 64],
        "maxComputeWorkGroupCount": [65535, 65535, 65535], "maxComputeSharedMemorySize": 16384,
        "maxStorageBufferRange": 2**27, "maxPushConstantsSize": 128, "maxPerStageDescriptorStorageBuffers": 4,
        "minStorageBufferOffsetAlignment": 256}
    assert desc.features == () and desc.extra["extensions"] == [] and desc.extra["vulkan_version"] == "1.1"
    assert desc.subgroup_size is None and desc.subgroup_sizes == ()
    assert not desc.fp16 and not desc.int8 and desc.matrix_units == ()


def test_without_a_device_the_default_is_the_baseline_with_a_one_line_warning(monkeypatch):
    monkeypatch.setattr(targets, "_enumerate", lambda: [
        DeviceInfo("vulkan", "-", "vulkan", available=False, reason="libvulkan.so.1 is missing")])
    desc, note = targets.default()
    assert desc.arch == "vulkan-1.1"
    assert "\n" not in note and "warning" in note and "libvulkan.so.1 is missing" in note


def test_with_a_device_the_default_is_that_device(monkeypatch):
    monkeypatch.setattr(targets, "_enumerate", lambda: [_nvidia_rtx3080()])
    desc, note = targets.default()
    assert desc.arch == "host" and desc.subgroup_size == 32 and "RTX 3080" in note and "\n" not in note


def test_host_prefers_a_gpu_to_a_cpu(monkeypatch):
    monkeypatch.setattr(targets, "_enumerate", lambda: [_lavapipe(), _radv_rdna2()])
    assert targets.parse("host").extra["vendor"] == "AMD"


def test_host_without_a_device_says_why_and_what_to_use_instead(monkeypatch):
    monkeypatch.setattr(targets, "_enumerate", lambda: [
        DeviceInfo("vulkan", "-", "vulkan", available=False, reason="no ICD found")])
    with pytest.raises(UnknownTargetError, match="no ICD found") as e:
        targets.parse("host")
    assert "vulkan-spirv:vulkan-1.1" in str(e.value)


# -- live devices ------------------------------------------------------------------------------


def test_an_nvidia_device_describes_itself():
    desc = targets.describe_device(_nvidia_rtx3080())
    assert desc.arch == "host" and desc.spec == "host" and desc.extra["vendor"] == "NVIDIA"
    assert desc.subgroup_size == 32 and desc.subgroup_sizes == (32,)
    assert desc.max_workgroup_size == 1024 and desc.max_workgroup_dims == (1024, 1024, 64)
    assert desc.shared_memory_bytes == 49152 and desc.fp16 and desc.int8
    assert desc.matrix_units == ("coopmat-khr",) and len(desc.extra["cooperative_matrix"]) == 3
    assert desc.extra["vulkan_version"] == "1.3"
    assert "timestampPeriod" not in desc.extra["limits"]
    assert set(desc.features) == set(targets.CAPABILITIES)


def test_nan_semantics_are_declared_only_where_the_device_keeps_them():
    """SignedZeroInfNanPreserve (VK_KHR_shader_float_controls' shaderSignedZeroInfNanPreserveFloat32) goes into every
    module for a device that has it, so that no driver may assume that floats hold no NaN or infinity; for a device
    without it, it is left out; and a device without it refuses code built for one with it."""
    import numpy as np
    from retarget.testing.kernels import sum_kernel
    from retarget_vulkan_spirv import container
    from retarget_vulkan_spirv.compile import compile_kernels

    lacking = {**NVIDIA_FEATURES, "shaderSignedZeroInfNanPreserveFloat32": False}
    with_it = targets.describe_device(_nvidia_rtx3080())
    without = targets.describe_device(_device("old", features=lacking))
    assert "SignedZeroInfNanPreserve" in with_it.features and "SignedZeroInfNanPreserve" not in without.features
    for desc, declared in ((with_it, True), (without, False)):
        [kernel] = container.unpack(compile_kernels([sum_kernel("add", 2, 64)], desc).data)
        words = np.frombuffer(container.words(kernel), np.uint32).tolist()
        capability = any(words[i:i + 2] == [(2 << 16) | 17, 4466] for i in range(len(words)))  # OpCapability
        mode = any(words[i] == (4 << 16) | 16 and words[i + 2:i + 4] == [4461, 32] for i in range(len(words) - 3))
        assert capability == mode == declared
    assert any("SignedZeroInfNanPreserve" in r for r in targets.unsupported(with_it, _device("old", features=lacking)))


def test_an_rdna_device_runs_every_size_in_its_range():
    desc = targets.describe_device(_radv_rdna2())
    assert desc.subgroup_size == 64 and desc.subgroup_sizes == (32, 64)
    assert desc.matrix_units == () and "CooperativeMatrixKHR" not in desc.features
    assert targets.SUBGROUP_SIZE_CONTROL in desc.extra["extensions"]


def test_lavapipe_describes_itself_with_8_wide_subgroups():
    desc = targets.describe_device(_lavapipe())
    assert desc.subgroup_size == 8 and desc.subgroup_sizes == (8,) and desc.extra["vendor"] == "Mesa"
    assert "GroupNonUniformShuffle" in desc.features and desc.extra["device_type"] == "cpu"


def test_a_device_lists_only_the_extensions_it_has():
    info = _device(api_version="1.3.0", features={"shaderFloat16": True, "storageBuffer16BitAccess": True},
                   extensions=["VK_KHR_16bit_storage"])  # float16_int8 is core in 1.2: not listed here
    assert targets.describe_device(info).extra["extensions"] == ["VK_KHR_16bit_storage"]


def test_a_cooperative_matrix_feature_without_shapes_is_not_a_capability():
    info = _device(features={"cooperativeMatrix": True}, cooperative_matrix=[])
    assert "CooperativeMatrixKHR" not in targets.describe_device(info).features


def test_subgroup_capabilities_follow_the_reported_operations():
    info = _device(subgroup_size=16, subgroup_size_range=[16, 16], subgroup_operations=["basic", "ballot"])
    assert targets.describe_device(info).features == ("GroupNonUniform", "GroupNonUniformBallot")


# -- unsupported ------------------------------------------------------------------------------


@pytest.mark.parametrize("info", [_nvidia_rtx3080(), _radv_rdna2(), _lavapipe()], ids=["nvidia", "rdna", "lavapipe"])
def test_code_for_a_device_runs_on_that_device(info):
    assert targets.unsupported(targets.describe_device(info), info) == []


def test_a_missing_capability_is_named_with_its_feature_bit():
    info = _device_like(targets.BY_ARCH["valhall"], features={"shaderInt8": True, "shaderInt16": True,
                                                              "storageBuffer16BitAccess": True,
                                                              "storageBuffer8BitAccess": True})
    assert targets.unsupported(targets.parse("mali-g78"), info) == ["no Float16 (the device lacks shaderFloat16)"]


def test_a_missing_subgroup_operation_is_named():
    info = _device_like(targets.BY_ARCH["adreno"], subgroup_operations=["basic", "vote", "arithmetic", "ballot"])
    assert targets.unsupported(targets.parse("adreno"), info) == [
        "no GroupNonUniformShuffle (the device lacks shuffle subgroup operations)"]


def test_too_little_workgroup_memory_is_refused():
    small = _device_like(targets.BY_ARCH["rdna2"], limits=dict(targets.BY_ARCH["rdna2"].limits,
                                                               maxComputeSharedMemorySize=32768))
    assert targets.unsupported(targets.parse("rdna2"), small) == [
        "65536 bytes of workgroup memory assumed, the device has 32768"]


def test_each_assumed_limit_the_device_lacks_is_a_reason():
    reasons = targets.unsupported(targets.parse("ampere"), _lavapipe())
    assert "49152 bytes of workgroup memory assumed, the device has 32768" in reasons
    assert "256 push-constant bytes assumed, the device has 128" in reasons
    assert "1048576 storage buffers per stage assumed, the device has 32" in reasons
    assert "no CooperativeMatrixKHR (the device lacks cooperativeMatrix)" in reasons
    assert "no VK_KHR_cooperative_matrix" in reasons
    assert "no 16x16x16 f16->f32 cooperative matrix" in reasons
    mali = _device_like(targets.BY_ARCH["valhall"])
    assert ("workgroup size up to (1024, 1024, 64) assumed, the device allows (512, 512, 512)"
            in targets.unsupported(targets.parse("ampere"), mali))
    assert "1024 workgroup invocations assumed, the device has 512" in targets.unsupported(
        targets.parse("ampere"), mali)


def test_each_reason_is_one_short_clause():
    for reason in targets.unsupported(targets.parse("ampere"), _device(), required_subgroup_size=32):
        assert "\n" not in reason and ";" not in reason and len(reason) < 120


def test_an_older_vulkan_is_refused():
    info = _device_like(targets.BY_ARCH["rdna2"], api_version="1.2.198")
    assert "Vulkan 1.3 needed, the device has 1.2" in targets.unsupported(targets.parse("rdna2"), info)


def test_a_missing_extension_is_refused_unless_the_device_has_it_in_core():
    old = _device_like(targets.BY_ARCH["valhall"], extensions=["VK_KHR_16bit_storage", "VK_KHR_shader_float16_int8"])
    assert targets.unsupported(targets.parse("valhall"), old) == ["no VK_KHR_8bit_storage"]
    core = _device_like(targets.BY_ARCH["valhall"], api_version="1.2.0", extensions=[])
    assert targets.unsupported(targets.parse("valhall"), core) == []


def test_a_subgroup_size_outside_the_device_range_is_refused():
    desc = targets.describe_device(_radv_rdna2())
    assert targets.unsupported(desc, _radv_rdna2(), required_subgroup_size=32) == []
    assert targets.unsupported(desc, _radv_rdna2(), required_subgroup_size=64) == []
    assert targets.unsupported(desc, _radv_rdna2(), required_subgroup_size=16) == [
        "subgroup size 16 required, the device runs 32..64"]
    assert targets.unsupported(targets.parse("llvmpipe"), _lavapipe(), required_subgroup_size=32) == [
        "subgroup size 32 required, the device runs 8"]


def test_a_pinned_size_on_a_varying_device_needs_subgroup_size_control():
    device = _radv_rdna2(subgroupSizeControl=False)
    desc = targets.describe_device(device)
    assert targets.unsupported(desc, device) == []  # code that does not pin a size runs
    assert targets.unsupported(desc, device, required_subgroup_size=64) == [
        "subgroup size 64 required, the device varies it (32..64) and lacks subgroupSizeControl to pin it"]


def test_a_fixed_size_device_needs_no_control_to_run_its_own_size():
    mali = _device_like(targets.BY_ARCH["valhall"])
    assert "subgroupSizeControl" not in {k for k, on in mali.properties["features"].items() if on}
    assert targets.unsupported(targets.parse("valhall"), mali, required_subgroup_size=16) == []
    assert targets.unsupported(targets.parse("valhall"), mali, required_subgroup_size=32) == [
        "subgroup size 32 required, the device runs 16"]


def test_a_pinned_size_on_a_device_that_does_not_report_one_is_refused():
    assert targets.unsupported(targets.parse("vulkan-1.1"), _device(), required_subgroup_size=32) == [
        "subgroup size 32 required, the device does not report its subgroup size"]


# -- the real driver ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def live_device():
    try:
        from retarget_vulkan_spirv.driver import VULKAN
    except ImportError as e:
        pytest.skip(f"the vulkan driver does not import: {e}")
    infos = VULKAN.enumerate()
    available = [d for d in infos if d.available]
    if not available:
        pytest.skip(f"no Vulkan device: {'; '.join(d.reason for d in infos)}")
    return available[0]


def test_host_describes_the_live_device(live_device):
    desc = targets.describe_device(live_device)
    props = live_device.properties
    assert desc.subgroup_size == props["subgroup_size"]
    assert min(desc.subgroup_sizes) == props["subgroup_size_range"][0]
    assert max(desc.subgroup_sizes) == props["subgroup_size_range"][1]
    assert desc.max_workgroup_size == props["limits"]["maxComputeWorkGroupInvocations"]
    assert desc.shared_memory_bytes == props["limits"]["maxComputeSharedMemorySize"]
    assert targets.unsupported(desc, live_device) == []
    assert targets.unsupported(desc, live_device, required_subgroup_size=props["subgroup_size"]) == []
    assert targets.unsupported(targets.parse("vulkan-1.1"), live_device) == []


def test_the_llvmpipe_row_matches_a_live_256_bit_lavapipe(live_device):
    if live_device.properties["driver_name"] != "llvmpipe" or "256 bits" not in live_device.name:
        pytest.skip(f"the live device is {live_device.name}, not a 256-bit lavapipe")
    assert targets.describe_device(live_device).subgroup_size == 8
    assert targets.unsupported(targets.parse("llvmpipe"), live_device, required_subgroup_size=8) == []
    assert targets.unsupported(targets.parse("llvmpipe-128"), live_device, required_subgroup_size=4) == [
        "subgroup size 4 required, the device runs 8"]


def test_the_plugin_contributes_the_target():
    from retarget.compiler import resolve_target
    from retarget.plugin_manager import manager

    assert "vulkan-spirv" in manager().by_name("retarget_targets")
    _, desc, note = resolve_target("vulkan-spirv:mali-g78")
    assert desc.arch == "valhall" and note is None


def test_nvidia_rows_carry_the_plans_and_the_loop_spelling_measured_on_nvidias_driver():
    from retarget.kernel.lower import NVIDIA_FRAGMENT_PLANS

    nvidia, amd = targets.parse("h100"), targets.parse("rdna3")
    assert nvidia.extra["large_fragment_plans"] == [list(p) for p in NVIDIA_FRAGMENT_PLANS]
    assert nvidia.extra["peel_last_step"] == ["fragments", "registers"] and nvidia.extra["fragment_k_loop"] == "serial"
    assert not {"large_fragment_plans", "peel_last_step", "fragment_k_loop"} & set(amd.extra)
