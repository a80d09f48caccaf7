"""Quantized layers and half precision on a live Vulkan device (lavapipe here) match the numpy model of the
same quantization."""

import pytest
from retarget.testing import quant_model as qm


@pytest.mark.parametrize("case", ["gemv", "rows12", "ragged", "conv1x1"])
@pytest.mark.parametrize("scheme", qm.BACKEND_SCHEMES)
def test_quantized_layer_matches_the_numpy_model(vulkan_device, scheme, case):
    qm.check("vulkan-spirv", "vulkan", scheme, case)


@pytest.mark.parametrize("precision", ["f16", "bf16"])
def test_int4_layer_in_half_precision_matches_the_model(vulkan_device, precision):
    qm.check("vulkan-spirv", "vulkan", "int4-g32", "gemv", precision)
