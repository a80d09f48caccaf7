"""retarget's `webgpu-spirv` target and `webgpu` driver: kernel IR rendered to WGSL by the core's
shared renderer (`targets.py`, `compile.py`), run through wgpu-py (`driver.py`), or exported for a
browser (`web.py`). The name follows IREE's target; the output is WGSL, not SPIR-V."""

from __future__ import annotations

__version__ = "0.1.0"
FORMAT = "wgsl"


class WebGpuTarget:
    name = "webgpu-spirv"
    drivers = ("webgpu",)

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
        """WGSL's gaps: the renderer table's (no f64, bf16, 8/16-bit integers in code), and buffers of
        anything but f32, i32, u32 and (with shader-f16) f16."""
        from .compile import support

        return support(desc)

    def compile(self, dispatches, desc):
        """One graph function per dispatch -> kernel IR (the core's GPU lowering) -> one WGSL module each."""
        from retarget.kernel.lower import lower_dispatch
        from retarget.protocols import Binding

        from .compile import compile_kernels

        kernels = [lower_dispatch(fn, desc) for fn in dispatches]
        bindings = [
            tuple([Binding(a.type, "read") for a in fn.args] + [Binding(r.type, "write") for r in fn.returns])
            for fn in dispatches
        ]
        return compile_kernels(kernels, desc, bindings)

    def export(self, artifact, folder, arch: str | None = None):
        """`retarget export`: the module's WGSL of `arch` (or the first), with a manifest, the JS loader and a
        page, as a folder a web page loads (web.py); returns the manifest's path."""
        return export(artifact, folder, arch)


def export(artifact, folder, target: str | None = None):
    """Write a module's WGSL executable as one .wgsl per kernel, the constants, `manifest.json`, the loader
    `retarget.js` and a page `index.html`, for a browser (see web.py); returns the manifest's path."""
    from .web import export as _export

    return _export(artifact, folder, target)
