"""Entry point `metal`: the `metal-spirv` target and the `metal` driver."""

from retarget.hookspecs import hookimpl

RETARGET_PLUGIN_API = 1


@hookimpl
def retarget_targets():
    from . import MetalTarget

    return [MetalTarget()]


@hookimpl
def retarget_drivers():
    from .driver import METAL

    return [METAL]
