"""NVRTC compiles rendered kernels to cubin and PTX; needs no GPU."""

import pytest
import retarget
from retarget.ir import dtypes
from retarget.protocols import Binding, EntryPoint, TensorType
from retarget.testing.graphs import mlp_module
from retarget_cuda import FORMAT, targets
from retarget_cuda.compile import (
    EM_CUDA,
    CudaCompileError,
    compile_entries,
    cubin_machine_and_sm,
    supported_sms,
    unpack,
)

ADD = r'''
extern "C" __global__ void add(const float *__restrict__ a, const float *__restrict__ b, float *__restrict__ out) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < 1000) out[i] = a[i] + b[i];
}
'''
ADD_ENTRY = EntryPoint("add", tuple(Binding(TensorType((1000,), dtypes.f32), a) for a in ("read", "read", "write")),
                       (256, 1, 1), (4, 1, 1))


def _executable(art):
    (exe,) = art.manifest["executables"]
    return exe, unpack(bytes(art.entries[exe["path"]]))


@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", "sm_100a", "sm_120"])
def test_a_kernel_compiles_to_a_cubin_for_its_sm_and_ptx_for_its_compute_arch(nvrtc, arch):
    desc = targets.parse(arch)
    binary = compile_entries(ADD, [ADD_ENTRY], desc)
    header, parts = unpack(binary.data)
    assert binary.format == FORMAT and header["sm"] == desc.extra["sm"]
    assert cubin_machine_and_sm(parts["cubin"]) == (EM_CUDA, int(desc.extra["sm"].rstrip("a")))
    ptx = parts["ptx"].decode()
    assert f".target {desc.extra['ptx'].replace('compute_', 'sm_')}" in ptx and ".entry add(" in ptx
    assert binary.listing == ADD


def test_the_mlp_compiles_to_one_cubin_holding_every_entry_point(nvrtc):
    module, _, _ = mlp_module()
    exe, (header, parts) = _executable(retarget.compile(module, "cuda:h100"))
    assert exe["format"] == FORMAT and exe["target"]["extra"]["sm"] == "90a"
    assert cubin_machine_and_sm(parts["cubin"]) == (EM_CUDA, 90)
    names = [e["name"] for e in exe["entry_points"]]
    assert names and header["entry_points"] == names
    assert all(e["workgroup_size"] == [256, 1, 1] for e in exe["entry_points"])
    for name in names:
        assert name.encode() in parts["cubin"] and f".entry {name}(" in parts["ptx"].decode()


def test_a_conv_block_compiles_for_ampere(nvrtc):
    torch = pytest.importorskip("torch")
    from retarget.testing import zoo

    model, inputs = zoo.make("small_cnn")
    exe, (_, parts) = _executable(retarget.compile(model, "cuda:a100", example_inputs=inputs))
    assert cubin_machine_and_sm(parts["cubin"]) == (EM_CUDA, 80)
    assert torch is not None and len(exe["entry_points"]) > 1


def test_an_nvrtc_error_carries_the_log(nvrtc):
    with pytest.raises(CudaCompileError) as e:
        compile_entries('extern "C" __global__ void broken(float *x) { x[0] = undefined_name; }',
                        [ADD_ENTRY], targets.parse("sm_80"))
    assert "undefined_name" in e.value.log and "undefined_name" in str(e.value)


def test_an_arch_this_nvrtc_dropped_fails_with_the_range_it_has(nvrtc):
    if 70 in supported_sms():
        pytest.skip("this NVRTC still compiles for sm_70")
    with pytest.raises(CudaCompileError) as e:
        compile_entries(ADD, [ADD_ENTRY], targets.parse("v100"))
    assert "sm_70" in str(e.value) and f"sm_{min(supported_sms())}" in str(e.value)


def test_the_container_rejects_foreign_and_truncated_data(nvrtc):
    from retarget.errors import RetargetError

    data = compile_entries(ADD, [ADD_ENTRY], targets.parse("sm_80")).data
    with pytest.raises(RetargetError, match="bad magic"):
        unpack(b"\x7fELF" + data[4:])
    with pytest.raises(RetargetError, match="truncated"):
        unpack(data[:-10])


def test_compiling_leaves_python_s_shared_one_byte_objects_alone(nvrtc):
    # NVRTC writes into the buffers it is given: a b" " * 1 log buffer is CPython's shared b" ".
    compile_entries(ADD, [ADD_ENTRY], targets.parse("sm_80"))
    assert bytes([32]) == b"\x20" and chr(32).encode() == b"\x20"


def _matmul_dispatch(a_shape, b_shape, dt, bias_relu=False):
    """The one dispatch of y = a @ b (+ bias, relu)."""
    import numpy as np
    from retarget.ir import Builder, Function, Value
    from retarget.passes.dispatch import form_dispatches

    args = [Value(TensorType(a_shape, dt)), Value(TensorType(b_shape, dt))]
    fn = Function("main", args)
    bld = Builder(fn)
    y = bld.op("rt.matmul", args)
    if bias_relu:
        bias = bld.constant(np.linspace(-1, 1, b_shape[-1]).astype(dt.np_dtype))
        y = bld.op("rt.max", [bld.op("rt.add", [y, bias]), bld.constant(np.zeros((), dt.np_dtype))])
    fn.returns = [y]
    (d,) = form_dispatches(fn)
    return d.function


@pytest.mark.parametrize("dt", ["f16", "bf16"])
def test_a_half_matmul_for_sm_80_compiles_with_wmma_fragments(nvrtc, dt):
    from retarget.kernel.lower import lower_dispatch
    from retarget_cuda.compile import compile_kernels

    desc = targets.parse("sm_80")
    kernel = lower_dispatch(_matmul_dispatch((100, 72), (72, 90), dtypes.DTYPES[dt], bias_relu=True), desc)
    assert kernel.schedule["fragments"] == f"16x16x16.{dt}.f32" and kernel.workgroup_size == (128, 1, 1)
    binary = compile_kernels([kernel], desc)
    assert "#include <mma.h>" in binary.listing and "nvcuda::wmma::mma_sync(" in binary.listing
    _, parts = unpack(binary.data)
    assert cubin_machine_and_sm(parts["cubin"]) == (EM_CUDA, 80) and "wmma.mma.sync" in parts["ptx"].decode()


def test_a_large_half_matmul_through_wmma_compiles_in_128x128_tiles_of_4_warps_staged_in_16_byte_moves(nvrtc):
    """The core's fragment matmul with NVIDIA's plan (the cuda backend's own Hopper schedule aside): 4 warps of
    64x64, 64-deep steps, A and B staged as uint4 moves (vector loads and stores in the PTX)."""
    from retarget.kernel.lower import lower_dispatch
    from retarget_cuda.compile import compile_kernels

    desc = targets.parse("h100")
    kernel = lower_dispatch(_matmul_dispatch((4096, 4096), (4096, 4096), dtypes.DTYPES["f16"]), desc)
    schedule = kernel.schedule
    assert (schedule["tile_m"], schedule["tile_n"], schedule["tile_k"], schedule["stages"]) == (128, 128, 64, 1)
    assert schedule["staging"] == "8xf16+8xf16"
    assert kernel.workgroup_size == (128, 1, 1) and kernel.workgroup_count == (1024, 1, 1)
    binary = compile_kernels([kernel], desc)
    _, parts = unpack(binary.data)
    ptx = parts["ptx"].decode()
    assert cubin_machine_and_sm(parts["cubin"]) == (EM_CUDA, 90) and "wmma.mma.sync" in ptx
    assert "ld.global.nc.v4.u32" in ptx or "ld.global.v4.u32" in ptx
    assert "st.shared.v4.u32" in ptx


def test_f32_matmuls_and_archs_without_the_shape_keep_the_plain_gpu_matmul():
    from retarget.kernel.lower import matmul_fragments

    f16, bf16 = dtypes.DTYPES["f16"], dtypes.DTYPES["bf16"]
    assert matmul_fragments(_matmul_dispatch((64, 64), (64, 64), dtypes.f32), targets.parse("sm_90a")) is None
    assert matmul_fragments(_matmul_dispatch((64, 64), (64, 64), bf16), targets.parse("sm_75")) is None
    assert matmul_fragments(_matmul_dispatch((64, 64), (64, 64), f16), targets.parse("sm_75")) is not None
    assert matmul_fragments(_matmul_dispatch((64, 64), (64, 64), f16), targets.parse("sm_61")) is None


def test_without_mma_h_s_headers_fragments_take_the_portable_expansion_and_say_so(nvrtc, monkeypatch, capsys):
    from retarget.kernel.lower import lower_dispatch
    from retarget_cuda import compile as cuda_compile

    monkeypatch.setattr(cuda_compile, "wmma_headers", lambda: False)
    desc = targets.parse("sm_80")
    kernel = lower_dispatch(_matmul_dispatch((64, 48), (48, 40), dtypes.DTYPES["f16"]), desc)
    binary = cuda_compile.compile_kernels([kernel], desc)
    assert "wmma" not in binary.listing and "mma.h" not in binary.listing
    assert "nvidia-cuda-crt" in capsys.readouterr().err


def test_a_dynamic_module_compiles_with_its_sizes_as_kernel_arguments(nvrtc):
    """Sizes known at run time: `long long` arguments after the buffers, and a grid the host computes."""
    from retarget.ir.symbolic import evaluate, parse_dim
    from retarget.testing import dynamic

    exe, (_, parts) = _executable(retarget.compile(dynamic.module("attention"), "cuda:h100"))
    entries = exe["entry_points"]
    assert entries and all(e["scalars"] == ["s"] for e in entries)
    assert all(evaluate(parse_dim(str(c)), {"s": 17}) >= 1 for e in entries for c in e["workgroup_count"])
    ptx = parts["ptx"].decode()
    for e in entries:  # the kernel's last parameter is the 64-bit size
        params = ptx[ptx.index(f".entry {e['name']}("):].split(")")[0]
        assert params.rstrip().splitlines()[-1].strip().startswith(".param .u64")


def test_nvrtc_output_comes_from_the_compile_cache_when_nothing_changed(nvrtc, monkeypatch, tmp_path):
    from retarget_cuda import compile as cuda_compile

    monkeypatch.setenv("RETARGET_CACHE_DIR", str(tmp_path))
    first = compile_entries(ADD, [ADD_ENTRY], targets.parse("sm_80"))
    assert sorted(f.suffix for f in (tmp_path / "cuda").iterdir()) == [".cubin", ".ptx"]

    def nvrtc_must_not_run(source, arch, want):
        raise AssertionError(f"NVRTC ran for {arch} {want}, already in the cache")

    monkeypatch.setattr(cuda_compile, "_nvrtc_compile", nvrtc_must_not_run)
    assert compile_entries(ADD, [ADD_ENTRY], targets.parse("sm_80")).data == first.data
    for source, arch in ((ADD.replace("a[i] + b[i]", "a[i] - b[i]"), "sm_80"), (ADD, "sm_86")):
        with pytest.raises(AssertionError, match="already in the cache"):
            compile_entries(source, [ADD_ENTRY], targets.parse(arch))
    monkeypatch.setenv("RETARGET_CACHE_DIR", "off")  # no cache at all: NVRTC runs again
    with pytest.raises(AssertionError, match="already in the cache"):
        compile_entries(ADD, [ADD_ENTRY], targets.parse("sm_80"))


def test_a_program_nvrtc_rejects_is_not_cached(nvrtc, monkeypatch, tmp_path):
    monkeypatch.setenv("RETARGET_CACHE_DIR", str(tmp_path))
    for _ in range(2):  # the second attempt fails again, from NVRTC, not from a cached failure
        with pytest.raises(CudaCompileError, match="could not compile"):
            compile_entries("this is not CUDA", [ADD_ENTRY], targets.parse("sm_80"))
    assert not (tmp_path / "cuda").exists() or not list((tmp_path / "cuda").iterdir())
