"""Entry point `webgpu`: the `webgpu-spirv` target and the `webgpu` driver."""

from retarget.hookspecs import hookimpl

RETARGET_PLUGIN_API = 1


@hookimpl
def retarget_targets():
    from . import WebGpuTarget

    return [WebGpuTarget()]


@hookimpl
def retarget_drivers():
    from .driver import WEBGPU

    return [WEBGPU]
