"""retarget's `cuda` target and driver: kernel IR rendered to CUDA C, compiled by NVRTC
to a cubin (plus PTX for newer GPUs) for one SM architecture (`targets.py`, `compile.py`),
and run through the CUDA driver API, directly or replayed as a CUDA graph (`driver.py`)."""

from __future__ import annotations

__version__ = "0.1.0"
FORMAT = "cuda-cubin"


class CudaTarget:
    name = "cuda"
    drivers = ("cuda",)

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

        return targets._desc_for_device(device.info.properties["compute_capability"], "host",
                                        device.info.properties.get("multiprocessors"))

    def support(self, desc):
        """What CUDA C cannot compute here: read off the core's CUDA renderer table (`exp` of integers,
        bitwise ops of floats, i4)."""
        from retarget.kernel.c_renderer import CUDA, support_table

        return support_table(CUDA)

    def compile(self, dispatches, desc):
        """One graph function per dispatch -> kernel IR (the core's GPU lowering) -> CUDA C -> one cubin.
        Large half-precision matmuls on Hopper take this backend's own wgmma schedule (`hopper_gemm`)."""
        from retarget.kernel.lower import lower_dispatch
        from retarget.protocols import Binding

        from . import hopper_gemm
        from .compile import compile_kernels

        kernels = []
        for fn in dispatches:
            plan = hopper_gemm.plan(fn, desc)
            kernels.append(hopper_gemm.kernel(plan, fn.name, fn) if plan else lower_dispatch(fn, desc))
        bindings = [
            tuple([Binding(a.type, "read") for a in fn.args] + [Binding(r.type, "write") for r in fn.returns])
            for fn in dispatches
        ]
        return compile_kernels(kernels, desc, bindings)
