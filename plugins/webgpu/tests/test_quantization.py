"""Quantized layers on a live WebGPU adapter (lavapipe here) match the numpy model of the same quantization,
in f32, f16 (with shader-f16) and bf16 (u32 words of two elements: WGSL has no bf16)."""

import pytest
from retarget.testing import quant_model as qm


@pytest.mark.parametrize("case", ["gemv", "rows12", "ragged", "conv1x1"])
@pytest.mark.parametrize("scheme", qm.BACKEND_SCHEMES)
def test_quantized_layer_matches_the_numpy_model(webgpu_device, scheme, case):
    qm.check("webgpu-spirv", "webgpu", scheme, case)


def test_int4_layer_in_f16_matches_the_model_where_the_adapter_has_shader_f16(webgpu_device):
    if "shader-f16" not in webgpu_device.info.properties["features"]:
        pytest.skip("this adapter has no shader-f16")
    qm.check("webgpu-spirv:host", "webgpu", "int4-g32", "gemv", "f16")


@pytest.mark.parametrize("scheme", ["int4-g32", "8da8w"])
def test_quantized_layer_in_bf16_matches_the_model(webgpu_device, scheme):
    qm.check("webgpu-spirv", "webgpu", scheme, "gemv", "bf16")
