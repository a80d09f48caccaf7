"""The vulkan driver on a real device (lavapipe on a machine without a GPU).

The kernels here are SPIR-V assembly written by hand and assembled by spirv-as, following the
container's binding model (container.py): descriptor set 0, binding i is param i as a storage
buffer of a runtime array; the push constants hold one u32 per param, the element where it starts.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import pytest
import retarget
from retarget.errors import RetargetError, UnknownDeviceError
from retarget.ir import dtypes
from retarget.ir.core import TensorType
from retarget.protocols import Binding, EntryPoint, ExecutableBinary, TargetDesc
from retarget.testing.graphs import mlp_module
from retarget_vulkan_spirv import FORMAT, container
from retarget_vulkan_spirv.driver import (
    VULKAN,
    VulkanError,
    beyond_32_bit_indices,
    check,
    driver_files_override,
    spin_microseconds,
    statistics_setting,
)

rng = np.random.default_rng(7)
HOST = TargetDesc("vulkan-spirv", "host", FORMAT)
LOCAL_SIZE = 64
SCHEMA_LIMITS = {"maxComputeWorkGroupInvocations", "maxComputeWorkGroupSize", "maxComputeWorkGroupCount",
                 "maxComputeSharedMemorySize", "maxStorageBufferRange", "maxPushConstantsSize",
                 "maxPerStageDescriptorStorageBuffers", "minStorageBufferOffsetAlignment", "timestampPeriod"}
SCHEMA_FEATURES = {"shaderFloat16", "shaderInt8", "shaderInt16", "shaderInt64", "shaderFloat64",
                   "storageBuffer16BitAccess", "storageBuffer8BitAccess", "subgroupSizeControl",
                   "computeFullSubgroups", "cooperativeMatrix", "bufferDeviceAddress", "vulkanMemoryModel",
                   "shaderSignedZeroInfNanPreserveFloat32"}


# -- hand-written kernels -------------------------------------------------------------------------

def _header(name: str, params: int, extra_capabilities: str = "", extra_builtins: str = "") -> str:
    """Capabilities, the entry point and the binding model's decorations and types for `params` buffers."""
    interface = "%gid" + (" %subgroup_size" if extra_builtins else "")
    bindings = "\n".join(f"OpDecorate %p{i} DescriptorSet 0\nOpDecorate %p{i} Binding {i}" for i in range(params))
    offsets = "\n".join(f"OpMemberDecorate %bases {i} Offset {4 * i}" for i in range(params))
    variables = "\n".join(f"%p{i} = OpVariable %sb_block StorageBuffer" for i in range(params))
    return f"""
    OpCapability Shader
    {extra_capabilities}
    OpMemoryModel Logical GLSL450
    OpEntryPoint GLCompute %main "{name}" {interface}
    OpExecutionMode %main LocalSize {LOCAL_SIZE} 1 1
    OpDecorate %gid BuiltIn GlobalInvocationId
    {extra_builtins}
    OpDecorate %elements ArrayStride 4
    OpDecorate %block Block
    OpMemberDecorate %block 0 Offset 0
    OpDecorate %bases Block
    {offsets}
    {bindings}
    %void = OpTypeVoid
    %fn = OpTypeFunction %void
    %bool = OpTypeBool
    %uint = OpTypeInt 32 0
    %float = OpTypeFloat 32
    %uvec3 = OpTypeVector %uint 3
    %in_uvec3 = OpTypePointer Input %uvec3
    %in_uint = OpTypePointer Input %uint
    %gid = OpVariable %in_uvec3 Input
    %elements = OpTypeRuntimeArray %ELEMENT
    %block = OpTypeStruct %elements
    %sb_block = OpTypePointer StorageBuffer %block
    %sb_element = OpTypePointer StorageBuffer %ELEMENT
    {variables}
    %bases = OpTypeStruct {" ".join(["%uint"] * params)}
    %pc_bases = OpTypePointer PushConstant %bases
    %pc_uint = OpTypePointer PushConstant %uint
    %base = OpVariable %pc_bases PushConstant
    %c0 = OpConstant %uint 0
    """ + "\n".join(f"%k{i} = OpConstant %uint {i}" for i in range(params))


def _element(param: int) -> str:
    """Instructions that leave %ptr{param} pointing at element %i of param `param` (after its base)."""
    return f"""
    %base_ptr{param} = OpAccessChain %pc_uint %base %k{param}
    %base{param} = OpLoad %uint %base_ptr{param}
    %at{param} = OpIAdd %uint %base{param} %i
    %ptr{param} = OpAccessChain %sb_element %p{param} %c0 %at{param}
    """


def _guarded(n: int, body: str) -> str:
    """main(): i = the global invocation id; if i < n: body."""
    return f"""
    %n = OpConstant %uint {n}
    %main = OpFunction %void None %fn
    %entry = OpLabel
    %id = OpLoad %uvec3 %gid
    %i = OpCompositeExtract %uint %id 0
    %inside = OpULessThan %bool %i %n
    OpSelectionMerge %done None
    OpBranchConditional %inside %body %done
    %body = OpLabel
    {body}
    OpBranch %done
    %done = OpLabel
    OpReturn
    OpFunctionEnd
    """


def binary_op_asm(name: str, op: str, n: int) -> str:
    """out[i] = a[i] `op` b[i] over n f32 elements; params a, b, out."""
    body = _element(0) + _element(1) + _element(2) + f"""
    %x = OpLoad %float %ptr0
    %y = OpLoad %float %ptr1
    %z = {op} %float %x %y
    OpStore %ptr2 %z
    """
    return (_header(name, 3) + _guarded(n, body)).replace("%ELEMENT", "%float")


def subgroup_size_asm(name: str, n: int) -> str:
    """out[i] = the SubgroupSize the kernel runs with, as u32; one param."""
    body = _element(0) + """
    %size = OpLoad %uint %subgroup_size
    OpStore %ptr0 %size
    """
    header = _header(name, 1, "OpCapability GroupNonUniform", "OpDecorate %subgroup_size BuiltIn SubgroupSize")
    header += "\n%subgroup_size = OpVariable %in_uint Input\n"
    return (header + _guarded(n, body)).replace("%ELEMENT", "%uint")


def assemble(text: str) -> bytes:
    tool = shutil.which("spirv-as")
    if tool is None:
        pytest.skip("spirv-as is not installed (apt-get install spirv-tools)")
    with tempfile.TemporaryDirectory() as tmp:
        source, binary = Path(tmp, "k.spvasm"), Path(tmp, "k.spv")
        source.write_text(textwrap.dedent(text))
        subprocess.run([tool, "--target-env", "vulkan1.1", "-o", str(binary), str(source)], check=True,
                       capture_output=True, text=True)
        return binary.read_bytes()


def kernel_entry(name: str, asm: str, n: int, dtypes_: list, accesses: list, *, required_subgroup_size=None,
                 entry_name: str | None = None) -> tuple[dict, EntryPoint]:
    """A container kernel and its entry point, for `n` elements per param."""
    params = [{"dtype": dt.name, "itemsize": dt.itemsize, "access": access} for dt, access in zip(dtypes_, accesses)]
    count = -(-n // LOCAL_SIZE)
    kernel = {"name": name, "spirv": container.encode_words(assemble(asm)), "workgroup_size": [LOCAL_SIZE, 1, 1],
              "workgroup_count": [count, 1, 1], "params": params, "push_constant_bytes": 4 * len(params),
              "required_subgroup_size": required_subgroup_size, "shared_bytes": 0, "capabilities": ["Shader"]}
    entry = EntryPoint(entry_name or name, tuple(Binding(TensorType((n,), dt), access)
                                                 for dt, access in zip(dtypes_, accesses)),
                       (LOCAL_SIZE, 1, 1), (count, 1, 1))
    return kernel, entry


def binary_of(*kernels_and_entries) -> ExecutableBinary:
    kernels = [k for k, _ in kernels_and_entries]
    return ExecutableBinary(FORMAT, HOST, container.pack(kernels, "host"), [e for _, e in kernels_and_entries])


def add_kernel(n: int):
    return kernel_entry("add", binary_op_asm("add", "OpFAdd", n), n, [dtypes.f32] * 3, ["read", "read", "write"])


def mul_kernel(n: int):
    return kernel_entry("mul", binary_op_asm("mul", "OpFMul", n), n, [dtypes.f32] * 3, ["read", "read", "write"])


def _floats(n: int) -> np.ndarray:
    return rng.standard_normal(n).astype(np.float32)


def _run_once(device, cb):
    device.submit(cb)
    device.wait()


# -- enumerate and dump ---------------------------------------------------------------------------

def test_enumerate_reports_the_device_properties_in_the_schema(vulkan_device):
    info = VULKAN.enumerate()[0]
    p = info.properties
    assert info.available and info.driver == "vulkan" and info.id == "0"
    assert p["arch"] == "host" and p["api_version"].count(".") == 2 and p["api_version"] >= "1.1"
    assert p["device_type"] in ("discrete-gpu", "integrated-gpu", "cpu", "virtual-gpu", "other")
    low, high = p["subgroup_size_range"]
    assert low <= p["subgroup_size"] <= high and "basic" in p["subgroup_operations"]
    assert set(p["limits"]) == SCHEMA_LIMITS and len(p["limits"]["maxComputeWorkGroupSize"]) == 3
    assert p["limits"]["maxComputeWorkGroupInvocations"] >= 128
    assert set(p["features"]) == SCHEMA_FEATURES and all(isinstance(v, bool) for v in p["features"].values())
    assert p["extensions"] == sorted(p["extensions"]) and p["extensions"]
    assert any("compute" in q["flags"] and q["count"] >= 1 for q in p["queues"])
    assert p["memory_heaps"] and all(h["size"] > 0 for h in p["memory_heaps"])
    assert isinstance(p["cooperative_matrix"], list)
    for shape in p["cooperative_matrix"]:
        assert set(shape) >= {"M", "N", "K", "a", "b", "c", "result", "scope"}


def test_lavapipe_is_a_cpu_device_with_vulkan_1_3_features(vulkan_device):
    p = vulkan_device.info.properties
    if p["driver_name"] != "llvmpipe":
        pytest.skip(f"the first device is {p['driver_name']}, not lavapipe")
    assert p["device_type"] == "cpu" and p["vendor_id"] == 0x10005
    assert p["features"]["subgroupSizeControl"] and p["features"]["storageBuffer16BitAccess"]
    assert "VK_KHR_8bit_storage" in p["extensions"]


def test_dump_is_json_with_every_limit_feature_and_memory_type(vulkan_device):
    dump = json.loads(json.dumps(VULKAN.dump("0")))
    assert dump["driver"] == "vulkan" and dump["available"] and dump["executable_formats"] == ["spirv"]
    assert dump["all_limits"]["maxComputeSharedMemorySize"] == dump["limits"]["maxComputeSharedMemorySize"]
    assert "robustBufferAccess" in dump["all_features"]
    assert dump["memory_types"] and all(t["heap"] < len(dump["memory_heaps"]) for t in dump["memory_types"])
    assert dump["subgroup"]["size"] == dump["subgroup_size"]


def _enumerate_in_subprocess(prelude: str, env=None) -> dict:
    script = prelude + textwrap.dedent("""
        import json
        from retarget_vulkan_spirv.driver import VULKAN
        print(json.dumps([d.__dict__ for d in VULKAN.enumerate()]))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})
    assert done.returncode == 0, done.stderr
    (info,) = json.loads(done.stdout.strip().splitlines()[-1])
    return info


def test_a_driver_variable_naming_a_missing_manifest_is_the_reason_given():
    info = _enumerate_in_subprocess("", {"VK_ICD_FILENAMES": "/nonexistent/icd.json",
                                         "VK_DRIVER_FILES": "/nonexistent/icd.json"})
    assert not info["available"] and "found no driver (ICD)" in info["reason"]
    assert "VK_DRIVER_FILES=/nonexistent/icd.json and VK_ICD_FILENAMES=/nonexistent/icd.json" in info["reason"]
    assert "does not exist (/nonexistent/icd.json" in info["reason"] and "unset them" in info["reason"]


def test_a_driver_variable_naming_a_broken_manifest_is_blamed_not_host_memory(tmp_path):
    broken = tmp_path / "icd.json"
    broken.write_text("not json")
    info = _enumerate_in_subprocess("", {"VK_ICD_FILENAMES": str(broken), "VK_DRIVER_FILES": ""})
    assert not info["available"] and "(the host is out of memory)" not in info["reason"]
    assert f"VK_ICD_FILENAMES={broken} names a driver manifest the loader cannot use" in info["reason"]


def test_without_a_driver_variable_nothing_is_blamed_on_one():
    assert driver_files_override({"PATH": "/usr/bin", "VK_ICD_FILENAMES": ""}) == ""


def test_a_binding_past_2_31_elements_is_refused_at_dispatch_not_indexed_wrong():
    """Kernels index in 32 bits even where their sizes have no bound (codegen.py narrows them on this promise), so
    the driver refuses each dispatch whose binding would reach element 2^31: its base in a shared binding counts."""
    i8, f32 = {"dtype": "i8", "itemsize": 1}, {"dtype": "f32", "itemsize": 4}
    assert beyond_32_bit_indices("k", [i8, f32], [0, 0], [2**31, 2**33]) is None
    assert beyond_32_bit_indices("k", [i8, f32], [1, 0], [2**31, 8]) == (
        "k: binding 0 spans 2147483649 elements of i8; Vulkan kernels index in 32 bits, so at most 2147483648")
    assert "binding 1 spans 2147483650 elements of f32" in beyond_32_bit_indices("k", [i8, f32], [0, 2], [4, 2**33])


def test_a_spin_time_that_is_not_a_number_is_a_clear_error():
    assert spin_microseconds("", 10_000) == 10_000 and spin_microseconds(" 250 ", 0) == 250
    for bad in ("abc", "-1", "inf"):
        with pytest.raises(RetargetError, match=f"RETARGET_VULKAN_SPIN_US={bad} is not a number of microseconds"):
            spin_microseconds(bad, 0)


def test_pipeline_statistics_are_off_for_0_and_on_for_1_or_true():
    has = ["VK_KHR_pipeline_executable_properties"]
    assert [statistics_setting(v, has, "gpu") for v in ("", "0", "off", "False")] == [None] * 4
    assert [statistics_setting(v, has, "gpu") for v in ("1", "true", "on")] == ["1"] * 3
    assert statistics_setting("stats/", has, "gpu") == "stats/"


def test_pipeline_statistics_on_a_driver_without_them_say_so(capsys):
    assert statistics_setting("1", [], "llvmpipe") is None
    assert "llvmpipe lacks VK_KHR_pipeline_executable_properties" in capsys.readouterr().err


def test_enumerate_without_the_vulkan_package_says_how_to_install_it():
    info = _enumerate_in_subprocess("import sys; sys.modules['vulkan'] = None\n")
    assert not info["available"] and "pip install vulkan" in info["reason"]


def test_enumerate_without_the_vulkan_loader_says_how_to_install_it():
    prelude = textwrap.dedent("""
        import builtins
        real_import = builtins.__import__
        def no_loader(name, *args, **kwargs):
            if name == "vulkan":
                raise OSError("Cannot find Vulkan SDK version.")
            return real_import(name, *args, **kwargs)
        builtins.__import__ = no_loader
    """)
    info = _enumerate_in_subprocess(prelude)
    assert not info["available"] and "libvulkan1" in info["reason"] and "loader" in info["reason"]


def test_an_unknown_device_id_is_refused_with_the_known_ones(vulkan_device):
    with pytest.raises(UnknownDeviceError, match="vulkan has no device '7'") as e:
        VULKAN.create("7")
    assert "0" in e.value.hint
    with pytest.raises(UnknownDeviceError, match="'7'"):
        VULKAN.dump("7")


def test_create_returns_one_device_per_gpu(vulkan_device):
    assert VULKAN.create("0") is VULKAN.create("") is vulkan_device


# -- buffers --------------------------------------------------------------------------------------

def test_write_and_read_round_trip_at_odd_offsets_and_sizes(vulkan_device):
    buf = vulkan_device.allocate(1001)
    data = rng.integers(0, 255, 1001, dtype=np.uint8)
    vulkan_device.write(buf, 0, data)
    vulkan_device.write(buf, 5, np.array([1, 2, 3], dtype=np.uint8))
    vulkan_device.write(buf, 997, np.array([9, 8, 7, 6], dtype=np.uint8))
    data[5:8], data[997:] = [1, 2, 3], [9, 8, 7, 6]
    np.testing.assert_array_equal(vulkan_device.read(buf, 0, 1001), data)
    got = vulkan_device.read(buf, 7, 13)
    np.testing.assert_array_equal(got, data[7:20])
    assert got.dtype == np.uint8 and got.shape == (13,) and got.flags.owndata


def test_write_and_read_go_through_staging_when_memory_is_not_mappable(vulkan_device):
    buf = vulkan_device.allocate(301)
    buf.mapped = None  # as on a GPU whose device-local memory the host cannot map
    data = rng.integers(0, 255, 301, dtype=np.uint8)
    vulkan_device.write(buf, 0, data)
    vulkan_device.write(buf, 3, np.array([7, 7], dtype=np.uint8))
    data[3:5] = 7
    np.testing.assert_array_equal(vulkan_device.read(buf, 0, 301), data)
    np.testing.assert_array_equal(vulkan_device.read(buf, 299, 2), data[299:])


def test_a_failed_vulkan_call_raises_a_vulkan_error_naming_the_call_and_the_result(vulkan_device):
    with pytest.raises(VulkanError, match="vkAllocateMemory failed: VK_ERROR_OUT_OF_DEVICE_MEMORY") as e:
        check(-2, "vkAllocateMemory")
    assert e.value.result == "VK_ERROR_OUT_OF_DEVICE_MEMORY" and "out of memory" in e.value.hint
    check(0, "vkQueueSubmit")  # VK_SUCCESS


def test_a_buffer_larger_than_any_heap_is_refused(vulkan_device):
    largest = max(h["size"] for h in vulkan_device.info.properties["memory_heaps"])
    with pytest.raises(VulkanError, match="larger than .* largest memory heap"):
        vulkan_device.allocate(largest + 1)


def test_outputs_read_after_a_run_are_copied_to_cached_memory_by_the_next_submits(vulkan_device):
    n = 1024
    exe = vulkan_device.load_executable(binary_of(add_kernel(n)))
    arena = vulkan_device.allocate(3 * 4 * n)
    arena.cached = False  # as device-local memory mapped through a GPU's BAR, which the host reads slowly
    cb = vulkan_device.command_buffer()
    cb.dispatch(exe, 0, [(arena, 0, 4 * n), (arena, 4 * n, 4 * n), (arena, 8 * n, 4 * n)])
    cb.end()
    for run in range(3):
        a, b = _floats(n), _floats(n)
        vulkan_device.write(arena, 0, a)
        vulkan_device.write(arena, 4 * n, b)
        _run_once(vulkan_device, cb)
        assert cb.readback_ran == (run > 0)  # learned from the first run's read
        if run:
            np.testing.assert_array_equal(cb.readback.find(arena, 8 * n, 4 * n).view(np.float32), a + b)
        np.testing.assert_array_equal(vulkan_device.read(arena, 8 * n, 4 * n).view(np.float32), a + b)
    assert len(cb.readback.ranges) == 1
    vulkan_device.write(arena, 8 * n, np.zeros(4 * n, np.uint8))  # memory changed since the run: not the copy
    assert not vulkan_device.read(arena, 8 * n, 4 * n).any()


def test_ranges_outside_a_buffer_are_refused(vulkan_device):
    buf = vulkan_device.allocate(16)
    with pytest.raises(ValueError, match="writing 8 bytes at 12 overflows a buffer of 16"):
        vulkan_device.write(buf, 12, np.zeros(8, np.uint8))
    with pytest.raises(ValueError, match="reading 4 bytes at -1"):
        vulkan_device.read(buf, -1, 4)
    with pytest.raises(ValueError, match="overflows"):
        vulkan_device.read(buf, 10, 7)


def test_copy_and_fill_with_a_non_zero_byte(vulkan_device):
    src, dst = vulkan_device.allocate(64), vulkan_device.allocate(64)
    vulkan_device.write(src, 0, np.arange(16, dtype=np.int32))
    cb = vulkan_device.command_buffer()
    cb.fill(dst, 0, 64, 0x7F)
    cb.barrier()
    cb.copy(src, 0, dst, 16, 32)
    cb.copy(src, 1, dst, 49, 3)  # copies need no alignment
    cb.fill(dst, 60, 4, 0)
    cb.end()
    _run_once(vulkan_device, cb)
    got = vulkan_device.read(dst, 0, 64)
    assert (got[:16] == 0x7F).all() and got[48] == 0x7F and (got[60:] == 0).all()
    np.testing.assert_array_equal(got[16:48].view(np.int32), np.arange(8))
    np.testing.assert_array_equal(got[49:52], np.arange(16, dtype=np.int32).view(np.uint8)[1:4])


def test_fill_and_copy_refuse_unaligned_or_overflowing_ranges(vulkan_device):
    a, b = vulkan_device.allocate(64), vulkan_device.allocate(32)
    cb = vulkan_device.command_buffer()
    with pytest.raises(ValueError, match="4-byte words"):
        cb.fill(a, 2, 8, 1)
    with pytest.raises(ValueError, match="4-byte words"):
        cb.fill(a, 0, 6, 1)
    with pytest.raises(ValueError, match="overflows"):
        cb.fill(a, 32, 64, 1)
    with pytest.raises(ValueError, match="overflows"):
        cb.copy(a, 0, b, 16, 32)
    with pytest.raises(ValueError, match="overlaps"):
        cb.copy(a, 0, a, 8, 16)
    cb.end()


# -- dispatch -------------------------------------------------------------------------------------

def test_add_with_tensors_at_unaligned_offsets_in_one_arena(vulkan_device):
    n = 200
    exe = vulkan_device.load_executable(binary_of(add_kernel(n)))
    arena = vulkan_device.allocate(4096)
    offsets = [4, 1036, 2060]  # none a multiple of 16 or 256: each tensor starts past its bound range
    a, b = _floats(n), _floats(n)
    vulkan_device.write(arena, 0, np.zeros(4096, np.uint8))  # Vulkan memory starts out undefined
    vulkan_device.write(arena, offsets[0], a)
    vulkan_device.write(arena, offsets[1], b)
    cb = vulkan_device.command_buffer()
    cb.dispatch(exe, 0, [(arena, off, 4 * n) for off in offsets])
    cb.end()
    _run_once(vulkan_device, cb)
    np.testing.assert_array_equal(vulkan_device.read(arena, offsets[2], 4 * n).view(np.float32), a + b)
    # nothing outside the output was written
    assert not vulkan_device.read(arena, offsets[2] + 4 * n, 4096 - offsets[2] - 4 * n).any()


def test_two_dispatches_with_a_barrier_chain(vulkan_device):
    n = 300
    exe = vulkan_device.load_executable(binary_of(add_kernel(n), mul_kernel(n)))
    arena = vulkan_device.allocate(4 * n * 4 + 64)
    a_at, b_at, t_at, out_at = 8, 8 + 4 * n, 8 + 8 * n, 8 + 12 * n
    a, b = _floats(n), _floats(n)
    vulkan_device.write(arena, a_at, a)
    vulkan_device.write(arena, b_at, b)
    cb = vulkan_device.command_buffer()
    cb.dispatch(exe, 0, [(arena, a_at, 4 * n), (arena, b_at, 4 * n), (arena, t_at, 4 * n)])  # t = a + b
    cb.barrier()
    cb.dispatch(exe, 1, [(arena, t_at, 4 * n), (arena, a_at, 4 * n), (arena, out_at, 4 * n)])  # out = t * a
    cb.end()
    _run_once(vulkan_device, cb)
    np.testing.assert_allclose(vulkan_device.read(arena, out_at, 4 * n).view(np.float32), (a + b) * a, rtol=1e-6)


def test_one_command_buffer_replays_with_new_inputs(vulkan_device):
    n = 128
    exe = vulkan_device.load_executable(binary_of(add_kernel(n)))
    arena = vulkan_device.allocate(3 * 4 * n)
    cb = vulkan_device.command_buffer()
    cb.dispatch(exe, 0, [(arena, 0, 4 * n), (arena, 4 * n, 4 * n), (arena, 8 * n, 4 * n)])
    cb.end()
    for _ in range(3):
        a, b = _floats(n), _floats(n)
        vulkan_device.write(arena, 0, a)
        vulkan_device.write(arena, 4 * n, b)
        _run_once(vulkan_device, cb)
        np.testing.assert_array_equal(vulkan_device.read(arena, 8 * n, 4 * n).view(np.float32), a + b)


def test_wait_that_polls_the_fences_first_also_waits_for_the_work(vulkan_device):
    n = 1 << 16
    exe = vulkan_device.load_executable(binary_of(add_kernel(n), mul_kernel(n)))
    arena = vulkan_device.allocate(3 * 4 * n)
    a = _floats(n)
    vulkan_device.write(arena, 0, a)
    vulkan_device.write(arena, 4 * n, a)
    cb = vulkan_device.command_buffer()
    cb.dispatch(exe, 0, [(arena, 0, 4 * n), (arena, 4 * n, 4 * n), (arena, 8 * n, 4 * n)])  # c = a + a
    for _ in range(8):
        cb.barrier()
        cb.dispatch(exe, 1, [(arena, 8 * n, 4 * n), (arena, 0, 4 * n), (arena, 4 * n, 4 * n)])  # b = c * a
        cb.barrier()
        cb.dispatch(exe, 0, [(arena, 4 * n, 4 * n), (arena, 0, 4 * n), (arena, 8 * n, 4 * n)])  # c = b + a
    cb.end()
    spin, vulkan_device.spin_wait_s = vulkan_device.spin_wait_s, 0.05
    try:
        vulkan_device.submit(cb)
        vulkan_device.wait()
        assert not vulkan_device._pending
        expected = 2 * a
        for _ in range(8):
            expected = expected * a + a
        np.testing.assert_allclose(np.asarray(vulkan_device.read(arena, 8 * n, 4 * n).view(np.float32)), expected,
                                   rtol=1e-4, atol=1e-4)
    finally:
        vulkan_device.spin_wait_s = spin


def test_read_after_submit_waits_for_the_work(vulkan_device):
    n = 64
    exe = vulkan_device.load_executable(binary_of(add_kernel(n)))
    arena = vulkan_device.allocate(3 * 4 * n)
    a = _floats(n)
    vulkan_device.write(arena, 0, a)
    vulkan_device.write(arena, 4 * n, a)
    cb = vulkan_device.command_buffer()
    cb.dispatch(exe, 0, [(arena, 0, 4 * n), (arena, 4 * n, 4 * n), (arena, 8 * n, 4 * n)])
    cb.end()
    vulkan_device.submit(cb)
    np.testing.assert_array_equal(vulkan_device.read(arena, 8 * n, 4 * n).view(np.float32), 2 * a)


def test_many_dispatches_grow_the_descriptor_pools_and_repeated_bindings_share_a_set(vulkan_device):
    n, chunks = 64, 80
    exe = vulkan_device.load_executable(binary_of(add_kernel(n)))
    size = 4 * n * chunks
    arena = vulkan_device.allocate(3 * size)
    a, b = _floats(n * chunks), _floats(n * chunks)
    vulkan_device.write(arena, 0, a)
    vulkan_device.write(arena, size, b)
    cb = vulkan_device.command_buffer()
    for i in range(chunks):
        bindings = [(arena, base + 4 * n * i, 4 * n) for base in (0, size, 2 * size)]
        cb.dispatch(exe, 0, bindings)
        cb.dispatch(exe, 0, bindings)  # the same ranges again: the same descriptor set
    cb.end()
    _run_once(vulkan_device, cb)
    np.testing.assert_array_equal(vulkan_device.read(arena, 2 * size, size).view(np.float32), a + b)
    assert len(cb.descriptor_sets) == chunks and len(cb.descriptor_pools) > 1


def test_a_binding_smaller_than_its_tensor_is_refused(vulkan_device):
    exe = vulkan_device.load_executable(binary_of(add_kernel(64)))
    arena = vulkan_device.allocate(1024)
    cb = vulkan_device.command_buffer()
    with pytest.raises(ValueError, match="binding 2 of 128 bytes .* cannot hold tensor<64xf32>"):
        cb.dispatch(exe, 0, [(arena, 0, 256), (arena, 256, 256), (arena, 512, 128)])
    with pytest.raises(ValueError, match="binding 1 of 256 bytes at 900 in a buffer of 1024"):
        cb.dispatch(exe, 0, [(arena, 0, 256), (arena, 900, 256), (arena, 512, 256)])
    with pytest.raises(ValueError, match="takes 3 bindings, got 2"):
        cb.dispatch(exe, 0, [(arena, 0, 256), (arena, 256, 256)])


def test_a_tensor_offset_that_is_not_a_multiple_of_its_itemsize_is_refused(vulkan_device):
    exe = vulkan_device.load_executable(binary_of(add_kernel(64)))
    arena = vulkan_device.allocate(1024)
    cb = vulkan_device.command_buffer()
    with pytest.raises(ValueError, match="binding 0 at byte 2 is not aligned to its 4-byte elements"):
        cb.dispatch(exe, 0, [(arena, 2, 256), (arena, 260, 256), (arena, 516, 256)])


def test_recording_after_end_and_submitting_before_end_are_refused(vulkan_device):
    exe = vulkan_device.load_executable(binary_of(add_kernel(64)))
    arena = vulkan_device.allocate(1024)
    open_cb = vulkan_device.command_buffer()
    with pytest.raises(RuntimeError, match="end"):
        vulkan_device.submit(open_cb)
    open_cb.end()
    for record in (lambda cb: cb.dispatch(exe, 0, [(arena, 0, 256), (arena, 256, 256), (arena, 512, 256)]),
                   lambda cb: cb.barrier(), lambda cb: cb.fill(arena, 0, 4, 0), lambda cb: cb.end()):
        with pytest.raises(RuntimeError, match="already ended"):
            record(open_cb)


def test_kernels_that_do_not_match_the_entry_points_are_refused(vulkan_device):
    kernel, _ = add_kernel(64)
    _, other_entry = mul_kernel(64)
    with pytest.raises(RetargetError, match="do not match its entry points"):
        vulkan_device.load_executable(binary_of((kernel, other_entry)))


def test_a_binary_that_is_not_spirv_is_refused(vulkan_device):
    kernel, entry = add_kernel(64)
    kernel["spirv"] = container.encode_words(b"not spir-v at all")
    with pytest.raises(RetargetError, match="kernel add is not a SPIR-V binary"):
        vulkan_device.load_executable(binary_of((kernel, entry)))


def test_another_executable_format_is_refused(vulkan_device):
    assert "loads spirv, not wgsl" in vulkan_device.can_load("wgsl", HOST)
    kernel = add_kernel(64)
    wgsl = binary_of(kernel)
    wgsl.format = "wgsl"
    with pytest.raises(UnknownDeviceError, match="loads spirv, not wgsl"):
        vulkan_device.load_executable(wgsl)


# -- subgroup sizes -------------------------------------------------------------------------------

def test_a_kernel_requiring_a_subgroup_size_the_device_lacks_is_refused_with_the_fix(vulkan_device):
    low, high = vulkan_device.info.properties["subgroup_size_range"]
    size = high * 4
    kernel = kernel_entry("size", subgroup_size_asm("size", 64), 64, [dtypes.i32], ["write"],
                          required_subgroup_size=size)
    with pytest.raises(UnknownDeviceError, match=rf"cannot run vulkan-spirv:host: size: .*\b{size}\b") as e:
        vulkan_device.load_executable(binary_of(kernel))
    assert e.value.hint == "recompile with --target vulkan-spirv:host" and vulkan_device.info.name in str(e.value)


def test_the_device_refuses_a_subgroup_size_it_cannot_pin_by_itself(vulkan_device):
    low, high = vulkan_device.info.properties["subgroup_size_range"]
    assert vulkan_device.subgroup_size_refusal(high) is None
    reason = vulkan_device.subgroup_size_refusal(high * 4)
    assert f"subgroups of {high * 4} lanes" in reason and vulkan_device.info.name in reason


def test_a_kernel_requiring_the_device_subgroup_size_runs_with_it(vulkan_device):
    size = vulkan_device.info.properties["subgroup_size_range"][1]
    n = 128
    exe = vulkan_device.load_executable(binary_of(kernel_entry(
        "size", subgroup_size_asm("size", n), n, [dtypes.i32], ["write"], required_subgroup_size=size)))
    out = vulkan_device.allocate(4 * n + 20)
    cb = vulkan_device.command_buffer()
    cb.dispatch(exe, 0, [(out, 20, 4 * n)])
    cb.end()
    _run_once(vulkan_device, cb)
    np.testing.assert_array_equal(vulkan_device.read(out, 20, 4 * n).view(np.int32), size)


def test_a_module_for_a_bigger_gpu_is_refused_with_the_target_that_fits(vulkan_device):
    module, x, _ = mlp_module()
    art = retarget.compile(module, "vulkan-spirv:ampere")
    try:
        retarget.load(art, device="vulkan")
    except UnknownDeviceError as e:
        refusal = e
    else:
        pytest.skip(f"{vulkan_device.info.name} runs vulkan-spirv:ampere modules: the refusal needs a smaller "
                    "device, such as lavapipe")
    assert "vulkan-spirv:ampere assumes more than" in str(refusal)
    assert refusal.hint == "recompile for this device, e.g. --target vulkan-spirv:host"
    with pytest.raises(UnknownDeviceError, match=r"no available device .*: vulkan:0 refuses vulkan-spirv:ampere: "
                                                 r".*no CooperativeMatrixKHR"):
        retarget.load(art, device="auto")


def test_auto_says_why_the_vulkan_driver_has_no_device(monkeypatch):
    from retarget.protocols import DeviceInfo

    art = retarget.compile(mlp_module()[0], "vulkan-spirv:vulkan-1.1")
    monkeypatch.setattr(VULKAN, "enumerate", lambda: [
        DeviceInfo("vulkan", "0", "Vulkan device", available=False, reason="the Vulkan loader found no driver")])
    with pytest.raises(UnknownDeviceError, match="vulkan:0 is unavailable: the Vulkan loader found no driver"):
        retarget.load(art, device="auto")


def test_a_bare_vulkan_device_is_the_best_one_the_one_host_compiles_for(monkeypatch):
    """Loaders list devices in their own order (an integrated GPU may come first): `retarget devices vulkan`
    lists the best first, `--device vulkan` opens it, and `vulkan-spirv:host` describes it; `vulkan:N` stays the
    loader's N-th device."""
    from types import SimpleNamespace

    from retarget.protocols import DeviceInfo
    from retarget.runtime import open_device
    from retarget_vulkan_spirv import driver, targets

    def physical(index, kind, name):
        return SimpleNamespace(info=DeviceInfo("vulkan", str(index), name, properties={"device_type": kind}))

    loader_order = [physical(0, "cpu", "llvmpipe"), physical(1, "integrated-gpu", "iGPU"),
                    physical(2, "discrete-gpu", "dGPU")]
    monkeypatch.setattr(driver, "_physical_devices", lambda: (loader_order, ""))
    monkeypatch.setattr(driver, "VulkanDevice", lambda p: f"opened {p.info.name}")
    monkeypatch.setattr(VULKAN, "_devices", {})
    assert [(d.id, d.name) for d in VULKAN.enumerate()] == [("2", "dGPU"), ("1", "iGPU"), ("0", "llvmpipe")]
    assert VULKAN.create("") == "opened dGPU"
    assert VULKAN.create("0") == "opened llvmpipe"
    assert targets._available_devices()[0][0].name == "dGPU"

    class Opened(Exception):
        pass

    def create(device_id):
        raise Opened(device_id)

    monkeypatch.setattr(VULKAN, "create", create)
    with pytest.raises(Opened, match="^2$"):
        open_device("vulkan")


def test_the_host_target_of_this_device_loads(vulkan_device):
    try:
        from retarget_vulkan_spirv import targets
    except ImportError as e:
        pytest.skip(f"targets.py is not importable yet ({e})")
    desc = targets.describe_device(vulkan_device.info)
    assert vulkan_device.can_load(FORMAT, desc) is None


# -- timing, validation, exit ---------------------------------------------------------------------

def test_time_reports_device_seconds_per_submit(vulkan_device):
    n = 1 << 16
    exe = vulkan_device.load_executable(binary_of(add_kernel(n)))
    arena = vulkan_device.allocate(3 * 4 * n)
    cb = vulkan_device.command_buffer()
    for _ in range(4):
        cb.dispatch(exe, 0, [(arena, 0, 4 * n), (arena, 4 * n, 4 * n), (arena, 8 * n, 4 * n)])
        cb.barrier()
    cb.end()
    seconds = vulkan_device.time(cb, 3)
    assert len(seconds) == 3 and all(0 < s < 10 for s in seconds)
    empty = vulkan_device.command_buffer()
    empty.end()
    assert vulkan_device.timed_submit(empty) < min(seconds)


VALIDATION_SCRIPT = """
import json, sys
sys.path.insert(0, {tests!r})
import numpy as np
from retarget_vulkan_spirv.driver import VULKAN
import test_device as t

device = VULKAN.create("0")
n = 200
exe = device.load_executable(t.binary_of(t.add_kernel(n), t.mul_kernel(n)))
arena = device.allocate(4096)
a = np.arange(n, dtype=np.float32)
device.write(arena, 4, a)
device.write(arena, 1036, a)
cb = device.command_buffer()
cb.fill(arena, 2060, 4 * n, 0)
cb.barrier()
cb.dispatch(exe, 0, [(arena, 4, 4 * n), (arena, 1036, 4 * n), (arena, 2060, 4 * n)])
cb.barrier()
cb.dispatch(exe, 1, [(arena, 2060, 4 * n), (arena, 4, 4 * n), (arena, 3000, 4 * n)])
cb.copy(arena, 4, arena, 3900, 16)
cb.end()
for _ in range(2):
    device.submit(cb)
    device.wait()
device.time(cb, 1)
staged = device.allocate(64)
staged.mapped = None
device.write(staged, 0, np.ones(16, np.float32))
ok = bool((device.read(staged, 0, 64).view(np.float32) == 1).all()) and \\
    bool((device.read(arena, 2060, 4 * n).view(np.float32) == 2 * a).all())
clean = list(VULKAN.validation_messages)
# A deliberate mistake (a buffer of 0 bytes) shows that the messenger reports errors at all.
from retarget_vulkan_spirv.driver import _vk, _new
vk = _vk()
bad = vk.ffi.new("VkBuffer*")
vk.lib.vkCreateBuffer(device.handle, _new("VkBufferCreateInfo", "BUFFER_CREATE_INFO", size=0, usage=0x20),
                      vk.ffi.NULL, bad)
print(json.dumps({{"ok": ok, "clean": clean, "after_mistake": VULKAN.validation_messages[len(clean):]}}))
"""


def test_validation_layers_report_no_errors_on_a_run(vulkan_device):
    layer_files = [Path(d, "VkLayer_khronos_validation.json") for d in
                   ("/usr/share/vulkan/explicit_layer.d", "/etc/vulkan/explicit_layer.d",
                    "/usr/local/share/vulkan/explicit_layer.d")]
    if not any(f.exists() for f in layer_files) and not (os.environ.get("VK_LAYER_PATH")
                                                         or os.environ.get("VK_ADD_LAYER_PATH")):
        pytest.skip("VK_LAYER_KHRONOS_validation is not installed (apt-get install vulkan-validationlayers)")
    assemble(binary_op_asm("add", "OpFAdd", 4))  # skips here, not in the child, when spirv-as is missing
    script = VALIDATION_SCRIPT.format(tests=str(Path(__file__).parent))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "RETARGET_VULKAN_VALIDATION": "1"})
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["ok"]
    assert [m for m in result["clean"] if m["severity"] == "error"] == []
    assert any(m["severity"] == "error" for m in result["after_mistake"]), result["after_mistake"]


def test_validation_without_the_layer_installed_is_a_clear_error():
    info = _enumerate_in_subprocess("", {"RETARGET_VULKAN_VALIDATION": "1", "VK_LAYER_PATH": "/nonexistent",
                                         "VK_ADD_LAYER_PATH": "", "XDG_DATA_DIRS": "/nonexistent",
                                         "XDG_DATA_HOME": "/nonexistent", "XDG_CONFIG_DIRS": "/nonexistent",
                                         "HOME": "/nonexistent"})
    if info["available"]:
        pytest.skip("the validation layer is found outside the paths this test can hide")
    assert "VK_LAYER_KHRONOS_validation" in info["reason"] and "vulkan-validationlayers" in info["reason"]


def test_a_process_that_opens_a_device_exits_cleanly(vulkan_device):
    script = textwrap.dedent("""
        import numpy as np
        from retarget_vulkan_spirv.driver import VULKAN
        device = VULKAN.create("0")
        buf = device.allocate(64)
        device.write(buf, 0, np.arange(16, dtype=np.float32))
        cb = device.command_buffer()
        cb.fill(buf, 0, 16, 0)
        cb.end()
        device.submit(cb)
        assert (device.read(buf, 16, 48).view(np.float32) == np.arange(4, 16)).all()
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stderr == "", done.stderr


@pytest.mark.parametrize("case", ["attention", "matmul_rows"])
def test_one_dynamic_module_matches_the_reference_at_each_size(vulkan_device, case):
    from retarget.testing import dynamic

    dynamic.check("vulkan-spirv:host", "vulkan", [case])


def test_threads_on_memory_the_host_reads_slowly_get_their_answers_and_learn_only_their_own_outputs(
        vulkan_device, monkeypatch):
    """Every buffer read as a GPU's BAR is (uncached), so outputs go through learned readbacks: 16 threads
    share one module, and each function's command buffer learns only its own outputs, never another's; the
    next calls on their own learn all of them."""
    from retarget.testing.conformance import test_threads
    from retarget_vulkan_spirv import driver

    made = driver.VulkanBuffer.__init__

    def uncached(self, *args, **kwargs):
        made(self, *args, **kwargs)
        self.cached = False

    monkeypatch.setattr(driver.VulkanBuffer, "__init__", uncached)
    artifact, calls = test_threads._work(vulkan_device, "vulkan")
    module = retarget.load(artifact, device=vulkan_device.info.uri)
    problems = test_threads._run_threads(calls, lambda t: module)
    assert not problems, "; ".join(problems[:3])
    for name, function in module.functions.items():
        outputs = {(function.arena, offset, nbytes) for kind, offset, nbytes in
                   (meta["slot"] for meta in function.plan["outputs"])}
        readback = function.command_buffer.readback
        assert readback is None or set(readback.ranges) <= outputs, name
        args = next(args for mine in calls for called, args, _ in mine if called == name)
        function(*args)
        function(*args)
        assert set(function.command_buffer.readback.ranges) == outputs, name


def test_ten_thousand_calls_leak_no_host_or_device_memory(vulkan_device):
    from retarget.testing import leaks

    module, x, _ = mlp_module()
    loaded = retarget.load(retarget.compile(module, "vulkan-spirv:host"), device=vulkan_device.info.uri)
    report = leaks.call_growth(loaded.predict, (x,), 10_000, device=vulkan_device)
    assert report["device"]["total"] == 0 and report["threads"]["total"] == 0, report
    assert report["traced"]["total"] < 64 << 10, report
    assert report["rss"]["total"] is None or report["rss"]["total"] < 8 << 20, report


def test_a_hundred_loads_of_a_module_free_every_pipeline_command_buffer_and_allocation(vulkan_device):
    """What the device holds comes back to where it was. (lavapipe's own resident memory grows by about
    300 KB for each pipeline it compiles, freed or not: measured in benchmarks/NOTES.md.)"""
    import gc

    module, x, _ = mlp_module()
    artifact = retarget.compile(module, "vulkan-spirv:host")

    def load_call_drop():
        loaded = retarget.load(artifact, device=vulkan_device.info.uri)
        loaded.predict(x)  # a run and a read: the learned readback's buffers and command buffer too

    load_call_drop()
    gc.collect()
    before = dict(vulkan_device.live)
    for _ in range(100):
        load_call_drop()
    gc.collect()
    assert vulkan_device.live == before


@pytest.mark.parametrize("setting", ["1", "folder", "unwritable"])
def test_pipeline_statistics_are_reported_per_kernel_where_the_driver_gives_them(vulkan_device, tmp_path, setting):
    if "VK_KHR_pipeline_executable_properties" not in VULKAN.enumerate()[0].properties["extensions"]:
        pytest.skip(f"{VULKAN.enumerate()[0].name} lacks VK_KHR_pipeline_executable_properties")
    value = {"1": "1", "folder": str(tmp_path / "stats"), "unwritable": "/proc/stats"}[setting]
    script = textwrap.dedent("""
        import numpy as np, retarget
        from retarget.testing.graphs import mlp_module
        module, x, _ = mlp_module()
        art = retarget.compile(module, "vulkan-spirv:host")
        print(retarget.load(art, device="vulkan").predict(x).shape)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "RETARGET_VULKAN_PIPELINE_STATISTICS": value})
    assert done.returncode == 0, done.stderr
    if setting == "unwritable":  # said once a pipeline, and the model runs all the same
        assert "cannot write" in done.stderr and "RETARGET_VULKAN_PIPELINE_STATISTICS=/proc/stats" in done.stderr
    elif setting == "1":
        lines = [line for line in done.stderr.splitlines() if line.startswith("retarget: vulkan pipeline ")]
        assert lines and all(":" in line.removeprefix("retarget: vulkan pipeline ") for line in lines)
    else:
        reports = sorted((tmp_path / "stats").glob("*.json"))
        assert reports and not done.stderr.count("retarget: vulkan pipeline")
        for report in reports:
            stats = json.loads(report.read_text())
            assert stats and all(isinstance(v, (int, float, bool)) for v in stats.values())
