"""retarget's `rocm` target and `hip` driver: kernel IR rendered to HIP by the core's shared renderer,
compiled into one AMDGPU code object (hsaco) per gfx target, through ROCm's hiprtc or, without ROCm,
clang + LLVM + lld (`targets.py`, `compile.py`, `toolchain.py`), and run through the HIP module API
of hip-python (`driver.py`)."""

from __future__ import annotations

__version__ = "0.1.0"
FORMAT = "rocm-hsaco"


class RocmTarget:
    name = "rocm"
    drivers = ("hip",)

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

        props = device.info.properties
        return targets.describe_device(props["target_id"], "host", props.get("compute_units"))

    def support(self, desc):
        """The HIP renderer table's gaps, and on the clang route (no ROCm here) the f64 math that only
        ROCm's device library has."""
        from .compile import support

        return support(desc)

    def compile(self, dispatches, desc):
        """One graph function per dispatch -> kernel IR (the core's GPU lowering) -> HIP -> one code object."""
        from retarget.kernel.lower import lower_dispatch
        from retarget.protocols import Binding

        from .compile import compile_kernels

        kernels = [lower_dispatch(fn, desc) for fn in dispatches]
        bindings = [
            tuple([Binding(a.type, "read") for a in fn.args] + [Binding(r.type, "write") for r in fn.returns])
            for fn in dispatches
        ]
        return compile_kernels(kernels, desc, bindings)
