"""Code objects built without ROCm (clang + LLVM + lld): HIP from the core's shared renderer, compiled
for each gfx, and checked as ELF by pyelftools: EM_AMDGPU, the row's gfx in e_flags and in the
metadata note, a kernel descriptor per kernel, and the wavefront the generation runs."""

import numpy as np
import pytest
import retarget
from retarget.errors import RetargetError, UnsupportedOpError
from retarget.ir import dtypes
from retarget.kernel import ir as k
from retarget.kernel.c_renderer import HIP, render_module
from retarget.kernel.lower import lower_dispatch
from retarget.protocols import Binding, EntryPoint, TensorType
from retarget.testing.graphs import mlp_module
from retarget_rocm import FORMAT, codeobject, targets, toolchain
from retarget_rocm.compile import RocmCompileError, back_end, compile_entries, compile_kernels

ADD = r'''#include <hip/hip_runtime.h>
extern "C" __global__ void __launch_bounds__(256) add(const float *__restrict__ a, const float *__restrict__ b,
                                                      float *__restrict__ out) {
  long long i = (long long)blockIdx.x * 256 + threadIdx.x;
  if (i < 1000) out[i] = a[i] + b[i];
}
'''
ADD_ENTRY = EntryPoint("add", tuple(Binding(TensorType((1000,), dtypes.f32), a) for a in ("read", "read", "write")),
                       (256, 1, 1), (4, 1, 1))


def test_a_kernel_compiles_to_a_code_object_for_every_row(no_rocm_compiler, check_code_object):
    from concurrent.futures import ThreadPoolExecutor

    descs = [targets.describe_row(row) for row in targets.TABLE]
    with ThreadPoolExecutor(2) as pool:  # LLVM runs in child processes
        binaries = list(pool.map(lambda desc: compile_entries(ADD, [ADD_ENTRY], desc), descs))
    for desc, binary in zip(descs, binaries):
        assert binary.format == FORMAT and binary.target.arch == desc.arch
        facts = check_code_object(binary.data, desc.arch, desc.extra["mach"], ["add"])
        assert facts["waves"] == {desc.subgroup_size}, desc.arch
        assert facts["code_object_version"] == toolchain.code_object_version(toolchain.lld())


def test_the_mlp_compiles_to_one_code_object_holding_every_entry_point(no_rocm_compiler, check_code_object):
    module, _, _ = mlp_module()
    art = retarget.compile(module, "rocm:mi300x")
    (exe,) = art.manifest["executables"]
    assert exe["format"] == FORMAT and exe["target"]["arch"] == "gfx942"
    names = [e["name"] for e in exe["entry_points"]]
    check_code_object(bytes(art.entries[exe["path"]]), "gfx942", 0x4C, names)


def test_the_listing_is_the_core_s_hip_rendering(no_rocm_compiler):
    module, _, _ = mlp_module()
    desc = targets.parse("gfx90a")
    kernels = [lower_dispatch(d, desc) for d in _dispatches(module)]
    binary = compile_kernels(kernels, desc)
    source = render_module(kernels, HIP)
    assert binary.listing.endswith(source) and "#include <hip/hip_runtime.h>" in source
    assert "clang" in binary.listing.splitlines()[0] and "LLVM" in binary.listing.splitlines()[0]


def _dispatches(module):
    from retarget.testing.conformance.kit import dispatches

    return [d.function for d in dispatches(module)]


def test_every_scalar_op_case_compiles_through_the_stand_in_headers(no_rocm_compiler, check_code_object):
    from retarget.testing.op_cases import op_cases

    kernels = [kern for kern, _, _ in op_cases().values()]
    binary = compile_kernels(kernels, targets.parse("gfx942"))
    check_code_object(binary.data, "gfx942", 0x4C, [kn.name for kn in kernels])


def test_workgroup_memory_and_barriers_reach_the_code_object(no_rocm_compiler, check_code_object, note_ints):
    from retarget.testing.kernels import THREADS, shared_kernel

    binary = compile_kernels([shared_kernel("flip", THREADS)], targets.parse("gfx1100"))
    check_code_object(binary.data, "gfx1100", 0x41, ["flip"])
    assert note_ints(binary.data, ".group_segment_fixed_size") == [THREADS * 4]
    assert "__syncthreads();" in binary.listing


def _f64_kernel(op):
    f64 = dtypes.DTYPES["f64"]
    i = k.Var("i")
    params = [k.Param("in0", f64, 8, "read"), k.Param("out0", f64, 8, "write")]
    return k.Kernel(f"f64_{op}", params, [k.Loop("i", 8, [k.Store("out0", i, k.Unary(op, k.Load("in0", i, f64)))])])


def test_f64_transcendentals_need_rocm_and_say_so(no_rocm_compiler):
    with pytest.raises(UnsupportedOpError) as e:
        compile_kernels([_f64_kernel("exp")], targets.parse("gfx942"))
    assert "f64 exp" in str(e.value) and "ROCm" in str(e.value) and "f32" in str(e.value)


def test_f64_sqrt_floor_and_abs_compile_without_rocm(no_rocm_compiler, check_code_object):
    kernels = [_f64_kernel(op) for op in ("sqrt", "floor", "abs")]
    binary = compile_kernels(kernels, targets.parse("gfx90a"))
    check_code_object(binary.data, "gfx90a", 0x3F, [kn.name for kn in kernels])


def test_a_clang_error_carries_the_log(no_rocm_compiler):
    broken = '#include <hip/hip_runtime.h>\nextern "C" __global__ void add(float *x) { x[0] = undefined_name; }\n'
    with pytest.raises(RocmCompileError) as e:
        compile_entries(broken, [ADD_ENTRY], targets.parse("gfx942"))
    assert "undefined_name" in e.value.log and "undefined_name" in str(e.value) and e.value.source == broken


def test_a_crash_of_llvm_s_code_generator_is_an_error_not_an_abort(clang_route):
    with pytest.raises(RocmCompileError, match="LLVM could not generate code for gfx942"):
        back_end(b"this is not bitcode", "gfx942", 5)


def test_lld_14_links_code_object_v4_and_lld_15_v5(monkeypatch, no_rocm_compiler, check_code_object):
    import shutil

    linkers = {v: shutil.which(f"ld.lld-{v}") for v in (14, 15)}
    if not all(linkers.values()):
        pytest.skip(f"needs both ld.lld-14 and ld.lld-15 to compare; have {linkers}")
    desc = targets.parse("gfx942")
    try:
        for version, expected in ((14, 4), (15, 5)):
            monkeypatch.setenv("RETARGET_ROCM_LLD", linkers[version])
            toolchain.lld.cache_clear()
            facts = check_code_object(compile_entries(ADD, [ADD_ENTRY], desc).data, "gfx942", 0x4C, ["add"])
            assert facts["code_object_version"] == expected
    finally:
        monkeypatch.undo()
        toolchain.lld.cache_clear()


def test_a_row_newer_than_the_installed_llvm_is_refused_naming_the_llvm_it_needs(no_rocm_compiler, monkeypatch):
    monkeypatch.setattr(toolchain, "llvm_major", lambda: 19)
    with pytest.raises(RocmCompileError) as e:
        compile_entries(ADD, [ADD_ENTRY], targets.parse("gfx950"))
    assert "gfx950 needs LLVM 20" in str(e.value) and "LLVM 19" in str(e.value)


def test_without_clang_or_lld_compiling_says_what_to_install(monkeypatch):
    monkeypatch.setenv("RETARGET_ROCM_COMPILER", "clang")
    monkeypatch.setattr(toolchain, "clang", lambda: None)
    monkeypatch.setattr(toolchain, "lld", lambda: None)
    with pytest.raises(RocmCompileError) as e:
        compile_entries(ADD, [ADD_ENTRY], targets.parse("gfx942"))
    assert "clang" in str(e.value) and "ld.lld" in str(e.value) and "apt-get install" in str(e.value)


def test_hiprtc_is_the_route_where_rocm_is_installed_unless_clang_is_asked_for(monkeypatch):
    monkeypatch.delenv("RETARGET_ROCM_COMPILER", raising=False)
    monkeypatch.setattr(toolchain, "hiprtc_version", lambda: "6.4")
    assert toolchain.route() == "hiprtc"
    monkeypatch.setenv("RETARGET_ROCM_COMPILER", "clang")
    assert toolchain.route() == "clang"
    monkeypatch.delenv("RETARGET_ROCM_COMPILER")
    monkeypatch.setattr(toolchain, "hiprtc_version", lambda: None)
    assert toolchain.route() == "clang"


def test_the_code_object_reader_rejects_other_elf_files_and_truncation(no_rocm_compiler):
    data = compile_entries(ADD, [ADD_ENTRY], targets.parse("gfx942")).data
    assert codeobject.read(data).kernels == ("add",) and codeobject.read(data).gfx == "gfx942"
    with pytest.raises(RetargetError, match="EM_AMDGPU"):
        codeobject.read(data[:18] + bytes([62, 0]) + data[20:])  # EM_X86_64
    with pytest.raises(RetargetError, match="truncated"):
        codeobject.read(data[:len(data) // 2])
    with pytest.raises(RetargetError, match="no ELF header"):
        codeobject.read(b"RTCUBIN1" + data)


def test_a_clang_offload_bundle_gives_up_the_code_object_of_its_gfx():
    def bundle(entries):
        header = codeobject.BUNDLE_MAGIC + len(entries).to_bytes(8, "little")
        index_size = sum(24 + len(name) for name, _ in entries)
        offset, index, payload = len(header) + index_size, b"", b""
        for name, blob in entries:
            index += offset.to_bytes(8, "little") + len(blob).to_bytes(8, "little") + len(name).to_bytes(8, "little")
            index += name.encode()
            offset, payload = offset + len(blob), payload + blob
        return header + index + payload

    data = bundle([("host-x86_64-unknown-linux-gnu-", b""), ("hipv4-amdgcn-amd-amdhsa--gfx90a", b"\x7fELF90a"),
                   ("hipv4-amdgcn-amd-amdhsa--gfx942:xnack-", b"\x7fELF942")])
    assert codeobject.unbundle(data, "gfx942") == b"\x7fELF942"
    assert codeobject.unbundle(data, "gfx90a") == b"\x7fELF90a"
    with pytest.raises(RetargetError, match="no code object for gfx1100"):
        codeobject.unbundle(data, "gfx1100")


def test_clang_s_target_guesses_are_dropped_and_the_code_object_version_set():
    from retarget_rocm.llvm_codegen import retarget_ir

    ir = ('define amdgpu_kernel void @k() #0 {\n  ret void\n}\n'
          'attributes #0 = { convergent noinline optnone "target-cpu"="gfx900" '
          '"target-features"="+dpp,+s-memtime-inst" "uniform-work-group-size"="true" }\n'
          '!llvm.module.flags = !{!0}\n!0 = !{i32 1, !"wchar_size", i32 4}\n')
    out = retarget_ir(ir, 5)
    assert "target-cpu" not in out and "target-features" not in out and "noinline" not in out
    assert "optnone" not in out and '"uniform-work-group-size"="true"' in out and "convergent" in out
    assert '!llvm.module.flags = !{!1, !0}' in out and '!1 = !{i32 1, !"amdhsa_code_object_version", i32 500}' in out


# -- the zoo ---------------------------------------------------------------------------------------

EVERY_MODEL = ("gfx942", "gfx1100")  # the CI targets: the whole zoo
SMALL_MODELS = ("mlp", "small_cnn")
EVERY_GENERATION = ("gfx90a", "gfx950", "gfx1030", "gfx1201")  # CDNA2, CDNA4, RDNA2, RDNA4


@pytest.fixture(scope="module")
def compiled_zoo(clang_route):
    """{(model, gfx): (entry names, code object)}: each model imported once, its dispatches compiled for
    each gfx by the target, two at a time (LLVM runs in child processes; CI has two cores)."""
    pytest.importorskip("torch")
    from concurrent.futures import ThreadPoolExecutor

    from retarget.compiler import import_model
    from retarget.testing import zoo
    from retarget.testing.conformance.kit import dispatches, prepare
    from retarget_rocm import RocmTarget

    kernels = {}
    for name in zoo.MODELS:
        model, inputs = zoo.make(name)
        kernels[name] = [d.function for d in dispatches(prepare(import_model(model, example_inputs=inputs)))]
    jobs = [(name, gfx) for name in zoo.MODELS
            for gfx in EVERY_MODEL + (EVERY_GENERATION if name in SMALL_MODELS else ())]
    with pytest.MonkeyPatch.context() as mp, ThreadPoolExecutor(2) as pool:
        mp.setenv("RETARGET_ROCM_COMPILER", "clang")
        binaries = pool.map(lambda job: RocmTarget().compile(kernels[job[0]], targets.parse(job[1])), jobs)
        return {job: ([e.name for e in b.entry_points], b.data) for job, b in zip(jobs, binaries)}


@pytest.mark.parametrize("gfx", EVERY_MODEL)
def test_the_whole_zoo_compiles(compiled_zoo, check_code_object, gfx):
    from retarget.testing import zoo

    desc = targets.parse(gfx)
    for name in zoo.MODELS:
        entries, data = compiled_zoo[name, gfx]
        assert entries, name
        facts = check_code_object(data, gfx, desc.extra["mach"], entries)
        assert facts["waves"] == {desc.subgroup_size}, name


@pytest.mark.parametrize("gfx", EVERY_GENERATION)
def test_small_models_compile_for_every_generation(compiled_zoo, check_code_object, gfx):
    desc = targets.parse(gfx)
    for name in SMALL_MODELS:
        entries, data = compiled_zoo[name, gfx]
        facts = check_code_object(data, gfx, desc.extra["mach"], entries)
        assert facts["waves"] == {desc.subgroup_size}, name


def test_wave64_and_wave32_code_objects_differ_for_the_same_model(compiled_zoo):
    assert compiled_zoo["mlp", "gfx942"][1] != compiled_zoo["mlp", "gfx1100"][1]
    assert np.frombuffer(compiled_zoo["mlp", "gfx942"][1][:4], np.uint8).tobytes() == b"\x7fELF"


# -- matrix cores ------------------------------------------------------------------------------------


def _matmul_dispatch(a_shape, b_shape, dt):
    """The one dispatch of relu(a @ b + bias)."""
    from retarget.ir import Builder, Function, Value
    from retarget.passes.dispatch import form_dispatches

    args = [Value(TensorType(a_shape, dt)), Value(TensorType(b_shape, dt))]
    fn = Function("main", args)
    bld = Builder(fn)
    bias = bld.constant(np.linspace(-1, 1, b_shape[-1]).astype(dt.np_dtype))
    y = bld.op("rt.add", [bld.op("rt.matmul", args), bias])
    fn.returns = [bld.op("rt.max", [y, bld.constant(np.zeros((), dt.np_dtype))])]
    (d,) = form_dispatches(fn)
    return d.function


def _disassembly(data: bytes, gfx: str, tmp_path) -> str:
    import shutil
    import subprocess

    tool = next(filter(None, (shutil.which(f"llvm-objdump-{v}") for v in range(30, 13, -1))), None)
    tool = tool or shutil.which("llvm-objdump")
    if tool is None:
        pytest.skip("no llvm-objdump to disassemble the code object (apt-get install llvm)")
    path = tmp_path / "kernels.hsaco"
    path.write_bytes(data)
    result = subprocess.run([tool, "-d", f"--mcpu={gfx}", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize("dt, instruction", [("f16", "v_mfma_f32_16x16x16f16"),
                                             ("bf16", "v_mfma_f32_16x16x16bf16_1k")])
def test_half_matmuls_on_cdna_run_on_the_matrix_cores(no_rocm_compiler, check_code_object, tmp_path, dt,
                                                      instruction):
    desc = targets.parse("mi250x")
    kernel = lower_dispatch(_matmul_dispatch((100, 72), (72, 90), dtypes.DTYPES[dt]), desc)
    assert kernel.schedule["fragments"] == f"16x16x16.{dt}.f32" and kernel.workgroup_size == (256, 1, 1)
    binary = compile_kernels([kernel], desc)
    assert "#include <retarget_mfma.h>" in binary.listing and "rt_mfma_mma(" in binary.listing
    check_code_object(binary.data, "gfx90a", 0x3F, [kernel.name])
    assert instruction in _disassembly(binary.data, "gfx90a", tmp_path)


@pytest.mark.parametrize("gfx", ["gfx942", "gfx950"])
def test_half_matmuls_compile_with_mfma_for_cdna3_and_cdna4(no_rocm_compiler, check_code_object, gfx):
    desc = targets.parse(gfx)
    kernels = [lower_dispatch(_matmul_dispatch((64, 48), (48, 40), dtypes.DTYPES[dt]), desc) for dt in ("f16", "bf16")]
    for kernel, dt in zip(kernels, ("f16", "bf16")):
        kernel.name = f"mm_{dt}"
        assert kernel.schedule["fragments"] == f"16x16x16.{dt}.f32"
    binary = compile_kernels(kernels, desc)
    check_code_object(binary.data, gfx, desc.extra["mach"], ["mm_f16", "mm_bf16"])


def test_f32_matmuls_rdna_and_bf16_on_cdna1_keep_the_plain_gpu_matmul():
    from retarget.kernel.lower import matmul_fragments

    f16, bf16 = dtypes.DTYPES["f16"], dtypes.DTYPES["bf16"]
    assert matmul_fragments(_matmul_dispatch((64, 64), (64, 64), dtypes.f32), targets.parse("gfx942")) is None
    assert matmul_fragments(_matmul_dispatch((64, 64), (64, 64), f16), targets.parse("gfx1100")) is None
    assert matmul_fragments(_matmul_dispatch((64, 64), (64, 64), f16), targets.parse("gfx906")) is None
    assert matmul_fragments(_matmul_dispatch((64, 64), (64, 64), bf16), targets.parse("gfx908")) is None
    assert matmul_fragments(_matmul_dispatch((64, 64), (64, 64), f16), targets.parse("gfx908")) is not None


def test_a_dynamic_module_compiles_to_a_code_object_taking_its_sizes(no_rocm_compiler, check_code_object):
    from retarget.testing import dynamic

    art = retarget.compile(dynamic.module("matmul_tails"), "rocm:mi300x")
    (exe,) = art.manifest["executables"]
    assert [e["scalars"] for e in exe["entry_points"]] == [["k", "m", "n"]]
    check_code_object(bytes(art.entries[exe["path"]]), "gfx942", 0x4C, [e["name"] for e in exe["entry_points"]])


def test_an_unchanged_program_comes_from_the_compile_cache(no_rocm_compiler, monkeypatch, tmp_path):
    from retarget_rocm import compile as rocm_compile

    monkeypatch.setenv("RETARGET_CACHE_DIR", str(tmp_path))
    desc = targets.parse("gfx942")
    first = compile_entries(ADD, [ADD_ENTRY], desc)
    assert [f.suffix for f in (tmp_path / "rocm").iterdir()] == [".hsaco"]

    def llvm_must_not_run(*args):
        raise AssertionError("LLVM ran for a program already in the cache")

    monkeypatch.setattr(rocm_compile, "back_end", llvm_must_not_run)
    assert compile_entries(ADD, [ADD_ENTRY], desc).data == first.data
    for source, arch in ((ADD.replace("a[i] + b[i]", "a[i] - b[i]"), "gfx942"), (ADD, "gfx90a")):
        with pytest.raises(AssertionError, match="already in the cache"):
            compile_entries(source, [ADD_ENTRY], targets.parse(arch))
