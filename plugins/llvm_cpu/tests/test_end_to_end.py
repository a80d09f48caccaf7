import importlib.util

import numpy as np
import pytest
import retarget
from retarget.testing.graphs import mlp_module

needs_lowering = pytest.mark.skipif(importlib.util.find_spec("retarget.kernel.lower") is None,
                                    reason="retarget.kernel.lower (lower_dispatch) is not written yet")


@needs_lowering
@pytest.mark.parametrize("device", ["local-task", "local-sync"])
def test_an_mlp_compiled_for_llvm_cpu_matches_numpy(device):
    module, x, expected = mlp_module()
    art = retarget.compile(module, "llvm-cpu")
    m = retarget.load(art, device=device)
    np.testing.assert_allclose(m.predict(x), expected, rtol=1e-5, atol=1e-5)
