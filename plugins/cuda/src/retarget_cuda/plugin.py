"""Entry point `cuda`: the `cuda` target and the `cuda` driver."""

from retarget.hookspecs import hookimpl

RETARGET_PLUGIN_API = 1


@hookimpl
def retarget_targets():
    from . import CudaTarget

    return [CudaTarget()]


@hookimpl
def retarget_drivers():
    from .driver import CUDA

    return [CUDA]
