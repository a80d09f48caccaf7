"""Which compiler makes code objects here: ROCm's hiprtc, or clang + LLVM (llvmlite) + lld.

- `hiprtc`: when hip-python can load ROCm's libhiprtc.so. ROCm's own compiler, headers and device
  library; it targets what that ROCm release supports.
- `clang`: without ROCm. A Debian clang (14 or newer) parses the HIP source against the plugin's
  stand-in headers (include/hip), llvmlite's LLVM optimizes and generates code for the exact gfx
  (`llvm_codegen`, in a child process), and lld links the object into a code object.

`RETARGET_ROCM_COMPILER=hiprtc|clang` picks one (default: hiprtc when it loads, else clang);
`RETARGET_ROCM_CLANG` and `RETARGET_ROCM_LLD` name the clang and ld.lld to use.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from dataclasses import dataclass

MIN_CLANG = 14
NEWEST = 30  # versioned names tried, newest first: clang-30 ... clang-14
APT_HINT = "apt-get install clang lld-15 (Debian 12; any clang >= 14 and ld.lld >= 14 do), or install ROCm"


@dataclass(frozen=True)
class Tool:
    path: str
    major: int


def rocm_path() -> str:
    return os.environ.get("ROCM_PATH") or os.environ.get("HIP_PATH") or "/opt/rocm"


def _candidates(env: str, stem: str) -> list[str]:
    named = os.environ.get(env)
    if named:
        return [named]
    names = [f"{stem}-{v}" for v in range(NEWEST, MIN_CLANG - 1, -1)] + [stem]
    found = [shutil.which(n) for n in names]
    found.append(os.path.join(rocm_path(), "llvm", "bin", stem))
    return [p for p in dict.fromkeys(found) if p and os.access(p, os.X_OK)]


def _version(path: str, pattern: str) -> int | None:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(pattern, out)
    return int(match.group(1)) if match else None


@functools.cache
def clang() -> Tool | None:
    """The newest clang of at least version 14 (any clang parses HIP; LLVM 22 generates the code)."""
    for path in _candidates("RETARGET_ROCM_CLANG", "clang"):
        major = _version(path, r"clang version (\d+)")
        if major and major >= MIN_CLANG:
            return Tool(path, major)
    return None


@functools.cache
def lld() -> Tool | None:
    """The newest ld.lld of at least version 14."""
    for path in _candidates("RETARGET_ROCM_LLD", "ld.lld"):
        major = _version(path, r"LLD (\d+)")
        if major and major >= MIN_CLANG:
            return Tool(path, major)
    return None


def code_object_version(linker: Tool) -> int:
    """v5 (ROCm 5.x and 6.x default) where lld knows it (15 and newer); lld 14 links v4 only."""
    return 5 if linker.major >= 15 else 4


@functools.cache
def llvm_major() -> int | None:
    try:
        import llvmlite.binding as llvm

        return llvm.llvm_version_info[0]
    except Exception:  # no llvmlite, or one whose library fails to load
        return None


@functools.cache
def hiprtc_version() -> str | None:
    """hiprtc's version when hip-python can load ROCm's libhiprtc.so, else None."""
    try:
        from hip import hiprtc

        err, major, minor = hiprtc.hiprtcVersion()
        return f"{major}.{minor}" if err == hiprtc.hiprtcResult.HIPRTC_SUCCESS else None
    except Exception:  # ImportError, or RuntimeError from dlopen: no ROCm here
        return None


def route() -> str:
    """'hiprtc' or 'clang', as RETARGET_ROCM_COMPILER asks, else what is installed."""
    chosen = os.environ.get("RETARGET_ROCM_COMPILER", "").strip().lower()
    if chosen in ("hiprtc", "clang"):
        return chosen
    return "hiprtc" if hiprtc_version() else "clang"


def missing() -> list[str]:
    """What the clang route lacks here, each with its fix; empty when it works."""
    out = []
    if clang() is None:
        out.append(f"no clang >= {MIN_CLANG} on PATH (apt-get install clang)")
    if lld() is None:
        out.append(f"no ld.lld >= {MIN_CLANG} on PATH (apt-get install lld-15)")
    if llvm_major() is None:
        out.append("llvmlite cannot load (pip install llvmlite==0.50.0)")
    return out


def describe() -> str:
    """One line: the compiler the rocm target uses here, for messages and listings."""
    if route() == "hiprtc":
        return f"hiprtc {hiprtc_version() or '(not loadable)'}"
    c, linker = clang(), lld()
    if c is None or linker is None or llvm_major() is None:
        return "clang + LLVM + lld: unavailable (" + "; ".join(missing()) + ")"
    return (f"clang {c.major} (front end) + LLVM {llvm_major()} (llvmlite) + ld.lld {linker.major}, "
            f"code object v{code_object_version(linker)}")
