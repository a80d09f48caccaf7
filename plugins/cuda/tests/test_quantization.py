"""Quantized layers and half precision: NVRTC compiles their kernels here (no GPU needed), and on a GPU they
match the numpy model of the same quantization."""

import pytest
import retarget
from retarget.ir.core import Module
from retarget.testing import quant_model as qm
from retarget_cuda.compile import EM_CUDA, cubin_machine_and_sm, unpack

CASES = ["gemv", "rows12", "ragged", "conv1x1"]


def _every_case(scheme: str) -> Module:
    """All of `qm.cases(scheme)` as the functions of one module (one NVRTC run)."""
    functions = {}
    for name, (module, _, _) in qm.cases(scheme).items():
        (fn,) = module.functions.values()
        fn.name = name
        functions[name] = fn
    return Module(functions)


@pytest.mark.parametrize("scheme, precision", [(s, None) for s in qm.BACKEND_SCHEMES] +
                         [("int4-g32", "f16"), ("8da8w", "bf16")])
def test_quantized_kernels_compile_to_a_cubin(nvrtc, scheme, precision):
    art = retarget.compile(_every_case(scheme), "cuda:sm_90", quantize=scheme, precision=precision)
    (exe,) = art.manifest["executables"]
    _, parts = unpack(bytes(art.entries[exe["path"]]))
    assert cubin_machine_and_sm(parts["cubin"]) == (EM_CUDA, 90)
    assert len(exe["entry_points"]) >= len(CASES)


def test_a_batch_1_int4_layer_reads_its_weight_a_word_at_a_time(nvrtc):
    module, _, _ = qm.cases("int4-g32")["gemv"]
    art = retarget.compile(module, "cuda:sm_90", quantize="int4-g32")
    (exe,) = art.manifest["executables"]
    _, parts = unpack(bytes(art.entries[exe["path"]]))
    ptx = parts["ptx"].decode()
    assert "ld.global.nc.u32" in ptx or "ld.global.u32" in ptx  # the packed words, 32 bits a load
    assert "shr.u32" in ptx


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("scheme", qm.BACKEND_SCHEMES)
def test_quantized_layer_on_the_gpu_matches_the_numpy_model(cuda_device, scheme, case):
    qm.check("cuda:host", "cuda", scheme, case)


@pytest.mark.parametrize("precision", ["f16", "bf16"])
def test_int4_layer_in_half_precision_on_the_gpu_matches_the_model(cuda_device, precision):
    qm.check("cuda:host", "cuda", "int4-g32", "gemv", precision)
