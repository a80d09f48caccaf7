"""retarget's `opencl` target and driver, written against retarget's public plugin API only:
kernel IR rendered to OpenCL C by the core's shared renderer (`targets.py`, `compile.py`), and
run through pyopencl on any OpenCL device, such as PoCL on a CPU (`driver.py`)."""

from __future__ import annotations

__version__ = "0.1.0"
FORMAT = "opencl-c"


class OpenClTarget:
    name = "opencl"
    drivers = ("opencl",)

    def names(self):
        from . import targets

        return targets.names()

    def parse(self, spec: str):
        from . import targets

        return targets.parse(spec)

    def default(self):
        from . import targets

        return targets.default()

    def describe(self, device):
        from . import targets

        return targets.describe_device(device.info)

    def support(self, desc):
        """The OpenCL C renderer table's gaps, and f16/f64 where the profile lacks their extension."""
        from .compile import support

        return support(desc)

    def compile(self, dispatches, desc):
        """One graph function per dispatch -> kernel IR (the core's lowering) -> one OpenCL C program."""
        from retarget.kernel.lower import lower_dispatch
        from retarget.protocols import Binding

        from .compile import compile_kernels

        kernels = [lower_dispatch(fn, desc) for fn in dispatches]
        bindings = [
            tuple([Binding(a.type, "read") for a in fn.args] + [Binding(r.type, "write") for r in fn.returns])
            for fn in dispatches
        ]
        return compile_kernels(kernels, desc, bindings)
