"""Kernels -> ExecutableBinary: every kernel rendered into one HIP source by the core's shared renderer
(its HIP table, `retarget.kernel.c_renderer.HIP`, with CDNA's MFMA spelling the fragment intrinsics),
compiled into one AMDGPU code object (hsaco) for the row's gfx, through ROCm's hiprtc or, without
ROCm, clang + LLVM + lld (see toolchain.py).

The HIP source is the same on both routes; only the headers behind `#include <hip/hip_runtime.h>`
differ: ROCm's, or the plugin's stand-ins (include/hip), whose math has no f64 transcendentals, so
kernels needing those are refused on the clang route with the fix. Every code object is checked
before it is returned: an ELF for EM_AMDGPU, for the row's gfx, with a kernel descriptor per kernel.

The executable's data is the code object itself, which hipModuleLoadData loads as it is.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import llvmlite
from retarget import cache
from retarget.errors import RetargetError, UnsupportedOpError
from retarget.ir.core import TensorType
from retarget.kernel.ir import entry_point, expr_dim
from retarget.protocols import Binding, EntryPoint, ExecutableBinary, TargetDesc

from . import FORMAT, __version__, codeobject, toolchain

CACHE_NAME = "rocm"  # its directory in the compile cache (retarget.cache)

INCLUDE = Path(__file__).parent / "include"
MFMA_HEADER = "retarget_mfma.h"  # on both routes: hiprtc gets it as a named header
FRONT_END_ARCH = "gfx90a"  # what clang parses for: known to every clang >= 14, with the MFMA builtins; LLVM 22
#                            generates the code for the real gfx
CLANG_FLAGS = ("-x", "hip", "--cuda-device-only", "-nogpuinc", "-nogpulib", f"--offload-arch={FRONT_END_ARCH}",
               "-std=c++17", "-O0", "-Xclang", "-disable-O0-optnone", "-fno-math-errno", "-w", "-emit-llvm", "-c")
HIPRTC_FLAGS = ("-O3", "-std=c++17")
# Math the stand-in headers define for f32 only (ROCm's device library has the f64 versions).
F64_NEEDS_ROCM = {"exp", "log", "tanh", "sin", "cos", "tan", "atan", "erf", "log1p", "expm1", "sigmoid", "pow",
                  "rem", "atan2"}


class RocmCompileError(RetargetError):
    """A compiler rejected the generated HIP; `log` is its output and `source` the program."""

    def __init__(self, message: str, *, log: str = "", source: str = "", hint: str | None = None):
        self.log, self.source = log, source
        super().__init__(message + (f":\n{log.strip()}" if log.strip() else ""), hint=hint)


def dialect():
    """The core's HIP table, with CDNA's matrix cores spelling the fragment intrinsics (retarget_mfma.h).
    Only rows that list fragments (targets.FRAGMENTS) get fragment statements; the others render as
    the core's HIP exactly."""
    from dataclasses import replace

    from retarget.kernel.c_renderer import HIP, FragmentSpelling

    mfma = FragmentSpelling(
        shapes=((16, 16, 16, "f16", "f32"), (16, 16, 16, "bf16", "f32")),
        width=64,
        include=f"#include <{MFMA_HEADER}>",
        types={"a": "rt_mfma_a<{T}>", "b": "rt_mfma_b<{T}>", "acc": "rt_mfma_acc"},
        fill="rt_mfma_fill({name}, {value});",
        load={"a": "rt_mfma_load_a({name}, {pointer}, {stride});", "b": "rt_mfma_load_b({name}, {pointer}, {stride});",
              "acc": "rt_mfma_load_acc({name}, {pointer}, {stride});"},
        mma="rt_mfma_mma({d}, {a}, {b}, {c});",
        store="rt_mfma_store({pointer}, {name}, {stride});",
        array="{shared} __attribute__((aligned(16))) {T} {name}[{size}];",
    )
    return replace(HIP, fragments=mfma)


def render(kernels) -> str:
    from retarget.kernel.c_renderer import render_module

    return render_module(kernels, dialect())


def compile_kernels(kernels, desc: TargetDesc, bindings: list[tuple[Binding, ...]] | None = None) -> ExecutableBinary:
    """Kernel IR -> one HIP source -> one code object. `bindings[i]` describes kernel i's params as
    tensors; without it each param is a flat 1-D tensor."""
    for kn in kernels:
        threads = kn.workgroup_size[0] * kn.workgroup_size[1] * kn.workgroup_size[2]
        if threads > desc.max_workgroup_size:
            raise UnsupportedOpError(f"kernel {kn.name} wants {threads} threads a workgroup; {desc.arch} allows "
                                     f"{desc.max_workgroup_size}")
    route = toolchain.route()
    if route == "clang":
        for kn in kernels:
            _check_f64_math(kn, desc)
    source = render(kernels)
    if bindings is None:
        bindings = [tuple(Binding(TensorType((expr_dim(p.size),), p.dtype), p.access) for p in kn.params)
                    for kn in kernels]
    entries = [entry_point(kn, b) for kn, b in zip(kernels, bindings)]
    return compile_entries(source, entries, desc)


def compile_entries(source: str, entries: list[EntryPoint], desc: TargetDesc) -> ExecutableBinary:
    """HIP source whose `extern "C" __global__` kernels are `entries` -> ExecutableBinary."""
    route = toolchain.route()
    gfx = desc.extra["gfx"]
    hsaco = compile_with_hiprtc(source, gfx) if route == "hiprtc" else compile_with_clang(source, gfx, desc)
    check(hsaco, desc, [e.name for e in entries])
    listing = f"// {desc.arch}: {toolchain.describe()}\n{source}"
    return ExecutableBinary(FORMAT, desc, hsaco, list(entries), listing=listing)


def check(hsaco: bytes, desc: TargetDesc, kernel_names: list[str]) -> codeobject.CodeObject:
    """The code object's facts, after checking that it is for desc's gfx and holds every kernel."""
    co = codeobject.read(hsaco)
    if co.mach != desc.extra["mach"] or (co.gfx and co.gfx != desc.extra["gfx"]):
        raise RocmCompileError(f"the compiler made a code object for {co.gfx or hex(co.mach)}, not {desc.arch}")
    absent = [n for n in kernel_names if n not in co.kernels]
    if absent:
        raise RocmCompileError(f"the code object lacks the kernel descriptors of {', '.join(absent)}")
    return co


def support(desc: TargetDesc):
    """The HIP table's gaps (the core's renderer), plus, when this machine compiles without ROCm, the f64
    math of `F64_NEEDS_ROCM` (refused by `_check_f64_math` too)."""
    from retarget.kernel.c_renderer import support_table
    from retarget.protocols import SupportTable

    table = support_table(dialect())
    if toolchain.route() != "clang":
        return table
    why = "needs ROCm's device library, and this machine compiles without ROCm (clang + LLVM)"
    return SupportTable({**table.ops, **{f"rt.{op}:f64": why for op in sorted(F64_NEEDS_ROCM)}}, table.dtypes)


def _check_f64_math(kn, desc: TargetDesc) -> None:
    from retarget.kernel import ir as k

    for e in k.walk_exprs(kn.body):
        if isinstance(e, (k.Unary, k.Binary)) and e.op in F64_NEEDS_ROCM and e.dtype.name == "f64":
            raise UnsupportedOpError(
                f"rocm:{desc.arch}: kernel {kn.name} computes f64 {e.op}, which needs ROCm's device library, and "
                "this machine compiles without ROCm (clang + LLVM)",
                hint="compile where ROCm is installed (hiprtc), or run the model in f32")


# -- the clang route ---------------------------------------------------------------------------------


def _require_clang_route(gfx: str, desc: TargetDesc):
    absent = toolchain.missing()
    if absent:
        raise RocmCompileError(f"cannot build code objects for {gfx} here: " + "; ".join(absent),
                               hint=toolchain.APT_HINT)
    llvm = toolchain.llvm_major()
    if llvm < desc.extra["llvm"]:
        raise RocmCompileError(
            f"{gfx} needs LLVM {desc.extra['llvm']} or newer, and this llvmlite has LLVM {llvm}",
            hint="pip install llvmlite==0.50.0 (LLVM 22), or install a ROCm whose hiprtc targets it")
    return toolchain.clang(), toolchain.lld()


@functools.lru_cache(maxsize=16)
def front_end(source: str, clang_path: str) -> bytes:
    """clang: HIP source -> LLVM bitcode, for no gfx in particular (llvm_codegen retargets it)."""
    result = subprocess.run([clang_path, *CLANG_FLAGS, "-I", str(INCLUDE), "-o", "-", "-"], input=source.encode(),
                            capture_output=True)
    if result.returncode:
        raise RocmCompileError(f"clang could not compile the generated HIP ({Path(clang_path).name})",
                               log=result.stderr.decode(errors="replace"), source=source)
    return result.stdout


def back_end(bitcode: bytes, gfx: str, code_object_version: int) -> bytes:
    """LLVM (llvmlite), in a child process: bitcode -> a relocatable AMDGPU object for `gfx`."""
    command = [sys.executable, "-m", "retarget_rocm.llvm_codegen", "--cpu", gfx,
               "--code-object-version", str(code_object_version)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).parent.parent),
                                                                     os.environ.get("PYTHONPATH")]))}
    result = subprocess.run(command, input=bitcode, capture_output=True, env=env)
    if result.returncode or not result.stdout:
        raise RocmCompileError(f"LLVM could not generate code for {gfx}", log=result.stderr.decode(errors="replace"))
    return result.stdout


def link(obj: bytes, linker: toolchain.Tool) -> bytes:
    """ld.lld: a relocatable object -> a code object (an ELF shared object)."""
    with tempfile.TemporaryDirectory(prefix="retarget-rocm-") as tmp:
        src, out = Path(tmp, "kernels.o"), Path(tmp, "kernels.hsaco")
        src.write_bytes(obj)
        result = subprocess.run([linker.path, "-shared", "--no-undefined", "-o", str(out), str(src)],
                                capture_output=True, text=True)
        if result.returncode:
            raise RocmCompileError(f"ld.lld {linker.major} could not link the code object", log=result.stderr)
        return out.read_bytes()


def compile_with_clang(source: str, gfx: str, desc: TargetDesc) -> bytes:
    clang, linker = _require_clang_route(gfx, desc)
    return _clang_route(source, gfx, clang, linker)


def _clang_route(source: str, gfx: str, clang: toolchain.Tool, linker: toolchain.Tool) -> bytes:
    """The code object of `source` for `gfx`, through the compile cache (a module compiled again, as tests
    and benchmarks do, costs nothing)."""
    version = toolchain.code_object_version(linker)
    entry = cache.key(source, gfx, _identity(clang.path), _identity(linker.path), str(version), llvmlite.__version__,
                      __version__, cache.source_fingerprint(Path(__file__).parent),
                      *(f.read_bytes() for f in sorted(INCLUDE.rglob("*.h"))))
    return cache.cached(CACHE_NAME, entry, lambda: link(back_end(front_end(source, clang.path), gfx, version), linker),
                        suffix=".hsaco")


@functools.cache
def _identity(tool_path: str) -> str:
    """A tool's real path, size and time, for the cache's key: another clang or lld under the same name misses."""
    real = os.path.realpath(tool_path)
    st = os.stat(real)
    return f"{real}:{st.st_size}:{st.st_mtime_ns}"


# -- the hiprtc route ----------------------------------------------------------------------------------


def compile_with_hiprtc(source: str, gfx: str) -> bytes:
    """ROCm's hiprtc: HIP source -> the code object for `gfx` (unbundled, where hiprtc bundles it)."""
    try:
        from hip import hiprtc
    except Exception as e:
        raise RocmCompileError(f"hiprtc is not importable ({type(e).__name__}: {e})",
                               hint="pip install hip-python, or RETARGET_ROCM_COMPILER=clang") from e

    def ok(result, what: str):
        err, *values = result if isinstance(result, tuple) else (result,)
        if err != hiprtc.hiprtcResult.HIPRTC_SUCCESS:
            raise RocmCompileError(f"{what} failed: {getattr(err, 'name', err)}", source=source)
        return values[0] if len(values) == 1 else values

    header = (INCLUDE / MFMA_HEADER).read_bytes()
    program = ok(hiprtc.hiprtcCreateProgram(source.encode(), b"retarget.hip", 1, [header], [MFMA_HEADER.encode()]),
                 "hiprtcCreateProgram")
    try:
        options = [f"--offload-arch={gfx}".encode(), *(o.encode() for o in HIPRTC_FLAGS)]
        (err,) = hiprtc.hiprtcCompileProgram(program, len(options), options)
        size = ok(hiprtc.hiprtcGetProgramLogSize(program), "hiprtcGetProgramLogSize")
        log = bytearray(max(size, 1))
        if size:
            ok(hiprtc.hiprtcGetProgramLog(program, log), "hiprtcGetProgramLog")
        if err != hiprtc.hiprtcResult.HIPRTC_SUCCESS:
            raise RocmCompileError(f"hiprtc {toolchain.hiprtc_version()} could not compile the kernels for {gfx}",
                                   log=log.decode(errors="replace").rstrip("\0 "), source=source,
                                   hint="RETARGET_ROCM_COMPILER=clang compiles without ROCm")
        size = ok(hiprtc.hiprtcGetCodeSize(program), "hiprtcGetCodeSize")
        code = bytearray(size)
        ok(hiprtc.hiprtcGetCode(program, code), "hiprtcGetCode")
    finally:  # it takes the program's address (hiprtcProgram *), as hip-python's own examples pass it
        hiprtc.hiprtcDestroyProgram(program.createRef() if hasattr(program, "createRef") else program)
    return codeobject.unbundle(bytes(code), gfx)
