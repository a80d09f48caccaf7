"""The cuda backend's wgmma schedule for large half-precision matmuls on Hopper (`hopper_gemm`): which
dispatches take it and that NVRTC compiles it (no GPU needed), what the driver does to launch it (on the
stand-in driver), and on an sm_90 GPU that it computes the right numbers."""

import numpy as np
import pytest
import retarget
from retarget.errors import RetargetError
from retarget.ir import Builder, Function, Module, Value, dtypes
from retarget.protocols import TensorType
from retarget_cuda import hopper_gemm
from retarget_cuda.compile import unpack
from retarget_cuda.driver import CudaError, _launch_needs, kernel_params, tensor_map

rng = np.random.default_rng(0)


def matmul_module(m, n, k, dt="f16", bias=None, relu=False) -> Module:
    """C = A @ B, plus `bias` (an array of n) if given, then a ReLU if `relu`."""
    dtype = dtypes.DTYPES[dt]
    args = [Value(TensorType((m, k), dtype)), Value(TensorType((k, n), dtype))]
    fn = Function("main", args)
    bld = Builder(fn)
    y = bld.op("rt.matmul", args)
    if bias is not None:
        y = bld.op("rt.add", [y, bld.constant(np.asarray(bias, dtype.np_dtype))])
    if relu:
        y = bld.op("rt.max", [y, bld.constant(np.zeros((), dtype.np_dtype))])
    fn.returns = [y]
    return Module({"main": fn})


def _kernel(art):
    """(entry point, its launch needs as JSON or None, the CUDA C) of a one-dispatch module."""
    (exe,) = art.manifest["executables"]
    header, _ = unpack(bytes(art.entries[exe["path"]]))
    (entry,) = exe["entry_points"]
    return entry, header.get("launch", {}).get(entry["name"]), art


def test_a_large_half_matmul_for_hopper_takes_the_wgmma_schedule_with_its_tensor_maps(nvrtc):
    art = retarget.compile(matmul_module(2048, 4096, 1024), "cuda:h100")
    entry, launch, _ = _kernel(art)
    assert tuple(entry["workgroup_size"]) == (hopper_gemm.THREADS, 1, 1)
    assert launch["shared_bytes"] > 48 * 1024  # more than a kernel gets without opting in
    a_map, b_map = launch["tensor_maps"]
    assert (a_map["binding"], a_map["dims"], a_map["row_bytes"], a_map["box"]) == (0, [1024, 2048], 2048, [64, 128])
    # B: 1024 rows of N, read in boxes of 64 columns
    assert (b_map["binding"], b_map["dims"], b_map["row_bytes"], b_map["box"]) == (1, [4096, 1024], 8192, [64, 64])
    # the grid covers the output: 16 x 16 tiles of 128 x 256
    assert tuple(entry["workgroup_count"]) == (16 * 16, 1, 1)


def test_a_linear_layer_s_bias_is_added_by_the_wgmma_kernel(nvrtc, monkeypatch):
    from retarget_cuda import targets

    bias = rng.standard_normal(4096)  # (a bias of one value stays a constant inside the dispatch: the core's)
    art = retarget.compile(matmul_module(2048, 4096, 1024, bias=bias), "cuda:h100")
    entry, launch, _ = _kernel(art)
    assert tuple(entry["workgroup_size"]) == (hopper_gemm.THREADS, 1, 1) and launch is not None
    captured = []
    monkeypatch.setattr(hopper_gemm, "plan", lambda fn, desc, real=hopper_gemm.plan: captured.append(fn)
                        or real(fn, desc))
    retarget.compile(matmul_module(2048, 4096, 1024, bias=bias), "cuda:h100")
    (fn,) = captured
    plan = hopper_gemm.plan(fn, targets.parse("h100"))
    (at,) = [i for i, x in enumerate(fn.args) if x.type.shape == (4096,)]
    assert plan.bias_arg == at
    # the product rounded to f16, then the bias added, as the graph computes it
    source = hopper_gemm.kernel(plan, "k", fn).source
    assert f"__half2float(__float2half_rn(d[i + 0])) + __half2float(in{at}[c + 0])" in source


@pytest.mark.parametrize("target, module", [
    ("cuda:a100", matmul_module(2048, 4096, 1024)),  # no wgmma before Hopper
    ("cuda:sm_90", matmul_module(2048, 4096, 1024)),  # nor in sm_90's portable code
    ("cuda:h100", matmul_module(2048, 4096, 1024, dt="f32")),  # f32 keeps the core's register tiles
    ("cuda:h100", matmul_module(2048, 4096, 1024, bias=rng.standard_normal(4096), relu=True)),  # beyond a bias
    ("cuda:h100", matmul_module(256, 256, 256)),  # too few tiles to fill the GPU
    ("cuda:h100", matmul_module(2048, 4096, 1028)),  # rows of A not 16-byte aligned: TMA cannot read them
], ids=["ampere", "sm_90", "f32", "epilogue", "small", "unaligned"])
def test_other_matmuls_keep_the_core_schedule(nvrtc, target, module):
    entry, launch, _ = _kernel(retarget.compile(module, target))
    assert launch is None and tuple(entry["workgroup_size"]) != (hopper_gemm.THREADS, 1, 1)


def test_kernel_params_put_words_first_and_each_tensor_map_on_a_64_byte_boundary():
    maps = [bytes(range(128)), bytes(range(128, 256))]
    values, offsets = kernel_params([7, 8, 9], maps)
    assert offsets == [0, 8, 16, 64, 192] and values.ctypes.data % 64 == 0
    assert list(values[:24].view(np.uint64)) == [7, 8, 9]
    assert bytes(values[64:192]) == maps[0] and bytes(values[192:320]) == maps[1]


def test_an_operand_off_a_16_byte_boundary_is_refused_with_the_fix():
    m = hopper_gemm.TensorMap(1, "f16", (64, 64), 128, (64, 64))
    with pytest.raises(CudaError, match="16-byte boundary; binding 1") as e:
        tensor_map(m, 0x1008)
    assert "contiguous" in e.value.hint


@pytest.mark.parametrize("launch", [
    {"shared_bytes": 1024, "tensor_maps": [{"binding": 3, "dtype": "f16", "dims": [64, 64], "row_bytes": 128,
                                             "box": [64, 64]}]},  # a binding the entry lacks
    {"shared_bytes": "lots"},
    {"tensor_maps": [{"binding": 0}]},
], ids=["binding", "shared", "fields"])
def test_a_malformed_launch_header_is_refused_by_name(launch):
    from retarget.protocols import Binding, EntryPoint

    f16 = TensorType((64, 64), dtypes.DTYPES["f16"])
    entry = EntryPoint("k", (Binding(f16, "read"), Binding(f16, "write")))
    with pytest.raises(RetargetError, match="launch header for k is malformed"):
        _launch_needs({"launch": {"k": launch}}, [entry])
    assert _launch_needs({}, [entry]) == [None]


def test_the_driver_opts_in_to_the_shared_memory_and_encodes_tensor_maps_at_the_buffers(cu):
    """On the stand-in driver (kernels do not run): one opt-in per kernel, and each recorded launch has its
    dynamic shared memory and two tensor maps at the bound buffers' addresses."""
    art = retarget.compile(matmul_module(2048, 4096, 1024), "cuda:h100")
    _, launch, _ = _kernel(art)
    loaded = retarget.load(art, device="cuda")
    a = np.zeros((2048, 1024), np.float16)
    b = np.zeros((1024, 4096), np.float16)
    loaded.main(a, b)
    ((_, attribute, value),) = cu.attributes
    assert attribute == "max dynamic shared" and value == launch["shared_bytes"]
    (kernel,) = [x for x in cu.launches if x["block"] == (hopper_gemm.THREADS, 1, 1)]
    assert kernel["shared"] == launch["shared_bytes"]
    assert [(t["dims"], t["box"], t["strides"]) for t in cu.tensor_maps] == [
        ([1024, 2048], [64, 128], [2048]), ([4096, 1024], [64, 64], [8192])]
    assert all(t["swizzle"] == "CU_TENSOR_MAP_SWIZZLE_128B" and t["address"] % 16 == 0 for t in cu.tensor_maps)
    assert cu.tensor_maps[0]["address"] != cu.tensor_maps[1]["address"]


# -- on an sm_90 GPU -------------------------------------------------------------------------------------------


@pytest.fixture
def hopper(cuda_device):
    if cuda_device.compute_capability != (9, 0):
        pytest.skip(f"the wgmma schedule needs an sm_90 GPU; this is {cuda_device.info.name}")
    return cuda_device


@pytest.mark.parametrize("m, n, k, dt, bias", [
    (1024, 2048, 512, "f16", False),
    (300, 520, 136, "f16", False),  # every edge ragged: TMA fills zeros past them, the stores are guarded
    (512, 512, 512, "bf16", False),
    (384, 640, 4160, "bf16", False),  # 65 steps of the reduction: the ring of slots wraps many times
    (1024, 2048, 512, "f16", True),  # a linear layer's bias
    (300, 520, 136, "bf16", True),
])
@pytest.mark.parametrize("mode", ["graph", "stream"])
def test_the_wgmma_schedule_matches_numpy(hopper, monkeypatch, m, n, k, dt, bias, mode):
    monkeypatch.setattr(hopper_gemm, "MIN_WAVES", 0)  # small shapes take it too
    dtype = dtypes.DTYPES[dt].np_dtype
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    c = rng.standard_normal(n).astype(dtype) if bias else None
    art = retarget.compile(matmul_module(m, n, k, dt, bias=c), "cuda:host")
    assert _kernel(art)[1] is not None, "the module did not take the wgmma schedule"
    out = retarget.load(art, device="cuda", mode=mode).main(a, b)
    expected = a.astype(np.float32) @ b.astype(np.float32)
    if bias:  # as the graph computes it: the product in the output's type, plus the bias
        expected = expected.astype(dtype).astype(np.float32) + c.astype(np.float32)
    scale = np.abs(expected).max()
    np.testing.assert_allclose(out.astype(np.float32), expected, rtol=0, atol=1e-2 * scale)
    assert np.abs(out.astype(np.float32) - expected).mean() < 2e-3 * scale
