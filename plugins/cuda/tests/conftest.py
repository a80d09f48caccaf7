import pytest


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
