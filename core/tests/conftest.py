import numpy as np
import pytest
from retarget.testing.graphs import mlp_module


@pytest.fixture
def mlp():
    """(module, x, expected) for a tiny MLP in graph IR."""
    return mlp_module()


@pytest.fixture
def mlp_rtm(tmp_path, mlp):
    import retarget

    module, x, expected = mlp
    path = tmp_path / "mlp.rtm"
    retarget.compile(module, "vmvx").save(path)
    np.save(tmp_path / "x.npy", x)
    return path, x, expected
