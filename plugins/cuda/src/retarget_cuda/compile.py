"""Kernels -> ExecutableBinary: every kernel rendered into one CUDA C source, compiled by NVRTC
into a cubin for the row's SM and into PTX for its compute arch (which newer GPUs JIT-compile).

The executable's data is a small container, never pickle:

    b"RTCUBIN1" | u32 little-endian header length | JSON header | payload

The header names the payload's parts as {"cubin": [offset, size], "ptx": [offset, size]}
(offsets into the payload), with the SM and NVRTC version that made them.
"""

from __future__ import annotations

import functools
import json
import os
import struct
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from retarget import cache
from retarget.errors import RetargetError, UnsupportedOpError
from retarget.ir.core import TensorType
from retarget.protocols import Binding, EntryPoint, ExecutableBinary, TargetDesc

from . import FORMAT, __version__

CACHE_NAME = "cuda"  # its directory in the compile cache (retarget.cache)
MAGIC = b"RTCUBIN1"
EM_CUDA = 190  # the ELF machine number of a cubin
NVRTC_OPTIONS = ("--std=c++17", "--fmad=true", "-default-device")


class CudaCompileError(RetargetError):
    """NVRTC rejected the generated CUDA C; `log` is NVRTC's log and `source` the program."""

    def __init__(self, message: str, *, log: str = "", source: str = "", hint: str | None = None):
        self.log, self.source = log, source
        super().__init__(message + (f":\n{log.strip()}" if log.strip() else ""), hint=hint)


def _nvrtc():
    """cuda.bindings.nvrtc, loaded; a RetargetError saying how to get it if it cannot load."""
    try:
        from cuda.bindings import nvrtc

        result, major, minor = nvrtc.nvrtcVersion()
    except Exception as e:  # ImportError, or the pathfinder failing to find libnvrtc.so
        raise CudaCompileError(f"NVRTC cannot be loaded ({type(e).__name__}: {e})",
                               hint="pip install cuda-bindings nvidia-cuda-nvrtc") from e
    if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise CudaCompileError(f"NVRTC cannot be loaded ({result.name})", hint="pip install nvidia-cuda-nvrtc")
    return nvrtc


def nvrtc_version() -> str:
    _, major, minor = _nvrtc().nvrtcVersion()
    return f"{major}.{minor}"


def supported_sms() -> list[int]:
    """SM numbers (75, 80, ...) this NVRTC compiles for."""
    nvrtc = _nvrtc()
    return list(_check(nvrtc, nvrtc.nvrtcGetSupportedArchs(), "nvrtcGetSupportedArchs"))


def _check(nvrtc, result, what: str):
    err, *values = result
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        _, text = nvrtc.nvrtcGetErrorString(err)
        raise CudaCompileError(f"{what} failed: {text.decode() if isinstance(text, bytes) else text}")
    return values[0] if len(values) == 1 else values


def include_dirs() -> list[str]:
    """Where cuda_fp16.h and cuda_bf16.h are (the renderer includes them): the nvidia-cuda-runtime
    wheel's headers, else a CUDA toolkit's; and, where that directory lacks it, one that has
    crt/mma.h, which mma.h (wmma fragments) includes: the nvidia-cuda-crt wheel's, wherever it is on
    sys.path, else the toolkit's. NVRTC itself ships no headers."""
    import glob
    import os
    import sys

    found = []
    try:
        from cuda.pathfinder import find_nvidia_header_directory

        found.append(find_nvidia_header_directory("cudart"))
    except Exception:  # an older pathfinder, or none: look in the usual toolkit places
        pass
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    found.append(os.path.join(home, "include"))
    found += sorted(d for entry in sys.path for d in glob.glob(os.path.join(entry, "nvidia", "cu*", "include")))
    found = [d for d in dict.fromkeys(found) if d and os.path.isdir(d)]
    dirs = [d for d in found if os.path.isfile(os.path.join(d, "cuda_fp16.h"))][:1]
    if dirs and not os.path.isfile(os.path.join(dirs[0], "crt", "mma.h")):
        dirs += [d for d in found if os.path.isfile(os.path.join(d, "crt", "mma.h"))][:1]
    return dirs


def wmma_headers() -> bool:
    """Whether NVRTC will find crt/mma.h, which mma.h (wmma fragments) includes."""
    import os

    return any(os.path.isfile(os.path.join(d, "crt", "mma.h")) for d in include_dirs())


HEADERS = ("cuda_fp16.h", "cuda_fp16.hpp", "cuda_bf16.h", "cuda_bf16.hpp", "crt/mma.h", "crt/mma.hpp")


@functools.cache
def _headers_fingerprint() -> str:
    """Which headers NVRTC will find (path, size and time of each), for the cache's key: a wheel upgraded in
    place changes them."""
    seen = []
    for d in include_dirs():
        for name in HEADERS:
            try:
                st = os.stat(os.path.join(d, name))
            except OSError:
                continue
            seen.append(f"{d}/{name}:{st.st_size}:{st.st_mtime_ns}")
    return "\n".join(seen)


def _compile_once(source: str, arch: str, want: str) -> bytes:
    """NVRTC for `--gpu-architecture=arch`, through the compile cache; `want` is "cubin" (arch sm_XX) or
    "ptx" (arch compute_XX)."""
    entry = cache.key(source, arch, want, " ".join(NVRTC_OPTIONS), nvrtc_version(), _headers_fingerprint(),
                      __version__)
    return cache.cached(CACHE_NAME, entry, lambda: _nvrtc_compile(source, arch, want), suffix=f".{want}")


def _nvrtc_compile(source: str, arch: str, want: str) -> bytes:
    nvrtc = _nvrtc()
    program = _check(nvrtc, nvrtc.nvrtcCreateProgram(source.encode(), b"retarget.cu", 0, [], []),
                     "nvrtcCreateProgram")
    try:
        options = [f"--gpu-architecture={arch}".encode(), *(o.encode() for o in NVRTC_OPTIONS),
                   *(f"--include-path={d}".encode() for d in include_dirs())]
        (err,) = nvrtc.nvrtcCompileProgram(program, len(options), options)
        size = _check(nvrtc, nvrtc.nvrtcGetProgramLogSize(program), "nvrtcGetProgramLogSize")
        log = bytearray(size)
        _check(nvrtc, nvrtc.nvrtcGetProgramLog(program, log), "nvrtcGetProgramLog")
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            text = log.decode(errors="replace").rstrip("\0 ")
            hint = ("wmma fragments need mma.h's crt/mma.h: pip install nvidia-cuda-crt (the version of your "
                    "NVRTC), or set CUDA_HOME to a CUDA toolkit" if "crt/mma.h" in text else None)
            raise CudaCompileError(f"NVRTC {nvrtc_version()} could not compile the kernels for {arch} ({err.name})",
                                   log=text, source=source, hint=hint)
        get_size, get = ((nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN) if want == "cubin"
                         else (nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX))
        size = _check(nvrtc, get_size(program), get_size.__name__)
        data = bytearray(size)
        _check(nvrtc, get(program, data), get.__name__)
        return bytes(data)
    finally:
        nvrtc.nvrtcDestroyProgram(program)


def compile_source(source: str, desc: TargetDesc) -> tuple[bytes, bytes]:
    """CUDA C -> (cubin for sm_XX, PTX for compute_XX); the two NVRTC runs go side by side."""
    sm = desc.extra["sm"]
    number = int(sm.rstrip("af"))
    known = supported_sms()
    if number not in known:
        raise CudaCompileError(
            f"NVRTC {nvrtc_version()} cannot compile for sm_{sm}: it supports sm_{min(known)} to sm_{max(known)}",
            hint="choose a newer --target (e.g. cuda:sm_80), or install an NVRTC that still supports it "
                 "(CUDA 12's, for Maxwell, Pascal and Volta)")
    with ThreadPoolExecutor(2) as pool:
        cubin = pool.submit(_compile_once, source, f"sm_{sm}", "cubin")
        ptx = pool.submit(_compile_once, source, desc.extra["ptx"], "ptx")
        return cubin.result(), ptx.result().rstrip(b"\0")


def pack(parts: dict[str, bytes], **meta) -> bytes:
    payload, index = b"", {}
    for name, blob in parts.items():
        index[name] = [len(payload), len(blob)]
        payload += blob
    header = json.dumps({**meta, "parts": index}, sort_keys=True).encode()
    return MAGIC + struct.pack("<I", len(header)) + header + payload


def unpack(data: bytes) -> tuple[dict, dict[str, bytes]]:
    """(header, {part name: bytes}); a RetargetError for anything that is not our container."""
    if not data.startswith(MAGIC) or len(data) < len(MAGIC) + 4:
        raise RetargetError("this is not a retarget cuda executable (bad magic)", hint="recompile with --target cuda")
    (length,) = struct.unpack_from("<I", data, len(MAGIC))
    start = len(MAGIC) + 4
    try:
        header = json.loads(data[start:start + length])
        payload = data[start + length:]
        parts = {name: payload[offset:offset + size] for name, (offset, size) in header["parts"].items()}
    except (ValueError, KeyError, TypeError) as e:
        raise RetargetError(f"the cuda executable's header is malformed ({e})",
                            hint="recompile with --target cuda") from None
    if any(len(blob) != header["parts"][name][1] for name, blob in parts.items()):
        raise RetargetError("the cuda executable is truncated", hint="recompile with --target cuda")
    return header, parts


def compile_kernels(kernels, desc: TargetDesc, bindings: list[tuple[Binding, ...]] | None = None) -> ExecutableBinary:
    """Kernel IR (and this backend's own `hopper_gemm.NativeKernel`s, in their places) -> one CUDA C
    source -> one executable. `bindings[i]` describes kernel i's params as tensors; without it each param
    is a flat 1-D tensor."""
    try:
        from retarget.kernel.c_renderer import CUDA, render_module
        from retarget.kernel.ir import entry_point, expr_dim, has_fragments
    except ImportError as e:
        raise UnsupportedOpError(f"cuda needs retarget.kernel.c_renderer, which this retarget lacks: {e}",
                                 hint="install a retarget with the C renderer") from e
    from .hopper_gemm import NativeKernel

    native = {i: kn for i, kn in enumerate(kernels) if isinstance(kn, NativeKernel)}
    kernels = [kn for kn in kernels if not isinstance(kn, NativeKernel)]
    for kn in kernels:
        threads = kn.workgroup_size[0] * kn.workgroup_size[1] * kn.workgroup_size[2]
        if threads > desc.max_workgroup_size:
            raise UnsupportedOpError(f"kernel {kn.name} wants {threads} threads a block; {desc.arch} allows "
                                     f"{desc.max_workgroup_size}")
    dialect = CUDA
    if any(has_fragments(kn.body) for kn in kernels) and not wmma_headers():
        # Without mma.h's crt/mma.h, fragments take the core's portable expansion: right, slower, said once.
        print("retarget: cuda: crt/mma.h is not installed (pip install nvidia-cuda-crt), so f16/bf16 matmuls use "
              "plain multiply-add loops instead of wmma", file=sys.stderr, flush=True)
        dialect = replace(CUDA, fragments=None)
    source = render_module(kernels, dialect) if kernels else ""
    if bindings is None:
        bindings = [tuple(Binding(TensorType((expr_dim(p.size),), p.dtype), p.access) for p in kn.params)
                    for kn in kernels]
    else:
        bindings = [b for i, b in enumerate(bindings) if i not in native]
    entries = [entry_point(kn, b) for kn, b in zip(kernels, bindings)]
    for i, kn in sorted(native.items()):
        entries.insert(i, kn.entry)
    source = "\n".join([source, *(kn.source for kn in native.values())])
    return compile_entries(source, entries, desc, {kn.name: kn.launch.to_json() for kn in native.values()})


def compile_entries(source: str, entries: list[EntryPoint], desc: TargetDesc,
                    launch: dict | None = None) -> ExecutableBinary:
    """CUDA C whose `extern "C" __global__` kernels are `entries` -> ExecutableBinary. `launch` maps the
    kernels with needs beyond their buffers to their `hopper_gemm.LaunchInfo` (as JSON)."""
    cubin, ptx = compile_source(source, desc)
    meta = {"launch": launch} if launch else {}
    data = pack({"cubin": cubin, "ptx": ptx}, sm=desc.extra["sm"], ptx_arch=desc.extra["ptx"],
                nvrtc=nvrtc_version(), entry_points=[e.name for e in entries], **meta)
    return ExecutableBinary(FORMAT, desc, data, list(entries), listing=source)


def cubin_machine_and_sm(cubin: bytes) -> tuple[int, int]:
    """(ELF e_machine, SM number) of a 64-bit CUDA ELF. CUDA's ELF ABI version 8 keeps the SM
    in bits 8-15 of e_flags, older versions in bits 0-7."""
    if cubin[:4] != b"\x7fELF" or cubin[4] != 2:
        raise RetargetError("this is not a 64-bit ELF file, so not a cubin")
    (machine,) = struct.unpack_from("<H", cubin, 18)
    (flags,) = struct.unpack_from("<I", cubin, 48)
    return machine, (flags >> 8) & 0xFF if cubin[8] >= 8 else flags & 0xFF
