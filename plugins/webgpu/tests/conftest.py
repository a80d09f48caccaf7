import pytest


@pytest.fixture(scope="session")
def webgpu_device():
    """The first WebGPU adapter's device (lavapipe on a machine without a GPU), or a skip that says why."""
    from retarget_webgpu.driver import WEBGPU

    infos = WEBGPU.enumerate()
    available = [d for d in infos if d.available]
    if not available:
        pytest.skip(f"no WebGPU adapter: {'; '.join(d.reason for d in infos)}")
    return WEBGPU.create(available[0].id)
