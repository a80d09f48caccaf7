"""Entry point `vulkan_spirv`: the `vulkan-spirv` target and the `vulkan` driver."""

from retarget.hookspecs import hookimpl

RETARGET_PLUGIN_API = 1


@hookimpl
def retarget_targets():
    from . import VulkanSpirvTarget

    return [VulkanSpirvTarget()]


@hookimpl
def retarget_drivers():
    from .driver import VULKAN

    return [VULKAN]
