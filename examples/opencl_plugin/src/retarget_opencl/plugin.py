"""Entry point `opencl`: the `opencl` target and the `opencl` driver.

Imported whenever retarget loads its plugins, so it imports nothing heavy: pyopencl is imported
by the driver when it is first used, and its absence is reported by `enumerate`, not raised here.
"""

from retarget.hookspecs import hookimpl

RETARGET_PLUGIN_API = 1


@hookimpl
def retarget_targets():
    from . import OpenClTarget

    return [OpenClTarget()]


@hookimpl
def retarget_drivers():
    from .driver import OPENCL

    return [OPENCL]
