"""retarget's `metal-spirv` target and `metal` driver: kernel IR rendered to Metal Shading Language by
the core's shared C-like renderer (`targets.py`, `compile.py`; matmuls on SIMD-group matrices through
the core's fragment intrinsics), run through PyObjC's Metal bindings on macOS (`driver.py`). The name follows
IREE's target; the output is MSL, not SPIR-V. Importing this package never needs macOS."""

from __future__ import annotations

__version__ = "0.1.0"
FORMAT = "msl"


class MetalTarget:
    name = "metal-spirv"
    drivers = ("metal",)

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
        """The MSL renderer table's gaps (no double), and bf16 buffers below MSL 3.1."""
        from .compile import support

        return support(desc)

    def compile(self, dispatches, desc):
        """One graph function per dispatch -> kernel IR (the core's GPU lowering) -> one MSL library
        holding every kernel."""
        from retarget.kernel.lower import lower_dispatch
        from retarget.protocols import Binding

        from .compile import compile_kernels

        kernels = [lower_dispatch(fn, desc) for fn in dispatches]
        bindings = [
            tuple([Binding(a.type, "read") for a in fn.args] + [Binding(r.type, "write") for r in fn.returns])
            for fn in dispatches
        ]
        return compile_kernels(kernels, desc, bindings)
