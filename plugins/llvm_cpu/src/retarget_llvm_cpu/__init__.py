"""retarget's `llvm-cpu` target: kernel IR compiled by LLVM into one native object
per module for one CPU (`targets.py`), run in-process on the `local-sync` and
`local-task` drivers by the loader (`loader.py`)."""

from __future__ import annotations

__version__ = "0.1.0"
FORMAT = "llvm-cpu-object"


class LlvmCpuTarget:
    name = "llvm-cpu"
    drivers = ("local-task", "local-sync")

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

        return targets.host()

    def support(self, desc):
        """What the LLVM code generator refuses (float math of integers, bitwise ops of floats, i4)."""
        from .codegen import support_table

        return support_table()

    def compile(self, dispatches, desc):
        """One graph function per dispatch -> kernel IR (the core's lowering) -> one object."""
        from retarget.protocols import Binding

        from .compile import compile_kernels

        try:
            from retarget.kernel.lower import lower_dispatch
        except ImportError as e:
            from retarget.errors import UnsupportedOpError

            raise UnsupportedOpError(f"llvm-cpu needs retarget.kernel.lower, which this retarget lacks: {e}",
                                     hint="install a retarget with kernel lowering, or use --target vmvx") from e
        kernels = [lower_dispatch(fn, desc) for fn in dispatches]
        bindings = [
            tuple([Binding(a.type, "read") for a in fn.args] + [Binding(r.type, "write") for r in fn.returns])
            for fn in dispatches
        ]
        return compile_kernels(kernels, desc, bindings)
