"""retarget's `vulkan-spirv` target and `vulkan` driver: kernel IR to binary SPIR-V by our own
emitter (`spirv.py`, `codegen.py`), device-exact targets (`targets.py`), and a driver over the
`vulkan` cffi binding with reusable recorded command buffers (`driver.py`)."""

from __future__ import annotations

__version__ = "0.1.0"
FORMAT = "spirv"


class VulkanSpirvTarget:
    name = "vulkan-spirv"
    drivers = ("vulkan",)

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
        """What the SPIR-V code generator cannot do for this architecture: its ops by kind, and the
        element types whose storage or compute capability the architecture lacks."""
        from .codegen import support_table

        return support_table(desc.features)

    def compile(self, dispatches, desc):
        """One graph function per dispatch -> kernel IR (the core's GPU lowering) -> one SPIR-V module each."""
        from retarget.kernel.lower import lower_dispatch
        from retarget.protocols import Binding

        from .compile import compile_kernels

        kernels = [lower_dispatch(fn, desc) for fn in dispatches]
        bindings = [
            tuple([Binding(a.type, "read") for a in fn.args] + [Binding(r.type, "write") for r in fn.returns])
            for fn in dispatches
        ]
        return compile_kernels(kernels, desc, bindings)
