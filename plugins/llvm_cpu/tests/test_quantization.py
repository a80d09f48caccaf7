"""Quantized layers and half precision on llvm-cpu match the numpy model of the same quantization."""

import pytest
from retarget.testing import quant_model as qm


@pytest.mark.parametrize("case", ["gemv", "rows12", "ragged", "conv1x1"])
@pytest.mark.parametrize("scheme", qm.BACKEND_SCHEMES)
def test_quantized_layer_matches_the_numpy_model(scheme, case):
    qm.check("llvm-cpu", "local-task", scheme, case)


@pytest.mark.parametrize("precision", ["f16", "bf16"])
@pytest.mark.parametrize("scheme", ["int4-g32", "8da4w-g32-asym"])
def test_quantized_layer_in_half_precision_matches_the_model(scheme, precision):
    qm.check("llvm-cpu", "local-task", scheme, "gemv", precision)
