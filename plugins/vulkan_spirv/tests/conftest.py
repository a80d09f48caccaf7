import pytest


@pytest.fixture(scope="session")
def vulkan_device():
    """The best Vulkan device, as `--device vulkan` opens it (lavapipe on a machine without a GPU), or a skip that
    says why."""
    from retarget_vulkan_spirv.driver import VULKAN

    infos = VULKAN.enumerate()
    available = [d for d in infos if d.available]
    if not available:
        pytest.skip(f"no Vulkan device: {'; '.join(d.reason for d in infos)}")
    return VULKAN.create(available[0].id)
