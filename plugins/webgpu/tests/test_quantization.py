"""Quantized layers on a live WebGPU adapter (lavapipe here) match the numpy model of the same quantization;
f16 needs shader-f16, and bf16 is refused with the reason (WGSL has no type to hold it)."""

import pytest
import retarget
from retarget.errors import UnsupportedOpError
from retarget.testing import quant_model as qm


@pytest.mark.parametrize("case", ["gemv", "rows12", "ragged", "conv1x1"])
@pytest.mark.parametrize("scheme", qm.BACKEND_SCHEMES)
def test_quantized_layer_matches_the_numpy_model(webgpu_device, scheme, case):
    qm.check("webgpu-spirv", "webgpu", scheme, case)


def test_int4_layer_in_f16_matches_the_model_where_the_adapter_has_shader_f16(webgpu_device):
    if "shader-f16" not in webgpu_device.info.properties["features"]:
        pytest.skip("this adapter has no shader-f16")
    qm.check("webgpu-spirv:host", "webgpu", "int4-g32", "gemv", "f16")


def test_bf16_is_refused_with_the_reason():
    module, *_ = qm.linear_layer(1, 16, 8)
    with pytest.raises(UnsupportedOpError, match="WGSL has no bf16"):
        retarget.compile(module, "webgpu-spirv", precision="bf16")
