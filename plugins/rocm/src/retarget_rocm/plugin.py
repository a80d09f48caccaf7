"""Entry point `rocm`: the `rocm` target and the `hip` driver."""

from retarget.hookspecs import hookimpl

RETARGET_PLUGIN_API = 1


@hookimpl
def retarget_targets():
    from . import RocmTarget

    return [RocmTarget()]


@hookimpl
def retarget_drivers():
    from .driver import HIP

    return [HIP]
