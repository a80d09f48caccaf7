import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import fake_cuda  # noqa: E402


@pytest.fixture(scope="session")
def cuda_device():
    """The first CUDA GPU, or a skip that says why there is none."""
    from retarget_cuda.driver import CUDA

    infos = CUDA.enumerate()
    available = [d for d in infos if d.available]
    if not available:
        pytest.skip(f"no CUDA device: {'; '.join(d.reason for d in infos)}")
    device = CUDA.create(available[0].id)
    yield device
    device.close()


@pytest.fixture(scope="session")
def nvrtc():
    """NVRTC, or a skip that says why it cannot load."""
    from retarget_cuda.compile import CudaCompileError, nvrtc_version

    try:
        return nvrtc_version()
    except CudaCompileError as e:
        pytest.skip(f"NVRTC cannot load: {e}")


@pytest.fixture
def cu(monkeypatch, nvrtc):
    """The cuda driver on a stand-in for the CUDA driver API (fake_cuda.py) with one "H100": the fake itself,
    which counts what is alive and what was issued. Kernels do not run."""
    from retarget.protocols import DeviceInfo
    from retarget_cuda import driver

    fake = fake_cuda.Cuda()
    info = DeviceInfo("cuda", "0", "stand-in H100", properties={"arch": "sm_90", "compute_capability": "9.0"})
    monkeypatch.setattr(driver, "_cu", lambda: fake)
    monkeypatch.setattr(driver.CUDA, "enumerate", lambda: [info])
    monkeypatch.setenv("RETARGET_CUDA_MODE", "graph")
    return fake
