import pytest


@pytest.fixture(scope="session")
def opencl_device():
    """The first OpenCL device (PoCL on a CPU-only machine), or a skip that says why there is none."""
    from retarget_opencl.driver import OPENCL

    infos = OPENCL.enumerate()
    available = [d for d in infos if d.available]
    if not available:
        pytest.skip(f"no OpenCL device: {'; '.join(d.reason for d in infos)}")
    return OPENCL.create(available[0].id)
