"""MSL checked and run on Linux with clang++, against the shim in msl/ (Metal's types and builtins as
C++17): `syntax_errors` type-checks a source, and `build` compiles it into a shared library whose
kernels run on the CPU (msl/msl_cpu.h runs each threadgroup's threads as fibers). Neither is Metal:
they check that the code is well-typed and computes the right numbers; a GPU runs it only on macOS."""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

SHIM = Path(__file__).parent / "msl"
CLANG = os.environ.get("RETARGET_CLANGXX", "clang++")
FLAGS = ["-std=c++17", "-x", "c++", f"-I{SHIM}", "-Werror=unknown-attributes", "-Wno-unused"]
KERNEL = re.compile(r"\bkernel void (\w+)\((.*)\) \{$", re.MULTILINE)
BUFFER = re.compile(r"device (const )?([\w ]+?) \*(\w+) \[\[buffer\((\d+)\)\]\]"
                    r"|constant ([\w ]+?) &(\w+) \[\[buffer\((\d+)\)\]\]")  # or a scalar passed with setBytes
_BUILD = Path(tempfile.mkdtemp(prefix="retarget-msl-cpu-"))


def clang() -> str | None:
    return shutil.which(CLANG)


def _file(text: str, suffix: str) -> Path:
    path = _BUILD / (hashlib.sha256(text.encode()).hexdigest()[:16] + suffix)
    path.write_text(text)
    return path


def syntax_errors(source: str) -> str:
    """clang++'s errors for `source` (MSL) against the shim, or "" when it is well-formed."""
    path = _file(source, ".metal")
    done = subprocess.run([CLANG, "-fsyntax-only", *FLAGS, str(path)], capture_output=True, text=True)
    return "" if done.returncode == 0 else done.stderr


def kernels(source: str) -> dict[str, list[str]]:
    """Each kernel's buffer parameters, in [[buffer(i)]] order: name -> [C type], a scalar's as "&T"."""
    out = {}
    for match in KERNEL.finditer(source):
        params = [(m.group(1) or "") + m.group(2) if m.group(2) else "&" + m.group(5)
                  for m in BUFFER.finditer(match.group(2))]
        out[match.group(1)] = params
    return out


def harness(source: str) -> str:
    """`source`, plus one launcher per kernel: `int rt_launch_NAME(void **buffers, grid[3], block[3])`."""
    lines = ["#include <msl_cpu.h>", "#include <metal_simdgroup_matrix>", source]
    for name, params in kernels(source).items():
        body = source[source.index(f" void {name}("):]
        barriers = "true" if "threadgroup_barrier" in body[:body.index("\n}\n")] else "false"
        args = [f"*(const {t[1:]} *)b[{i}]" if t.startswith("&") else f"({t} *)b[{i}]"
                for i, t in enumerate(params)] + ["g", "t"]
        lines.append(f'extern "C" int rt_launch_{name}(void **b, const unsigned *grid, const unsigned *block) {{\n'
                     f"  return rt_cpu::launch(grid, block, [&](uint3 g, uint3 t) {{ {name}({', '.join(args)}); }}, "
                     f"{barriers});\n}}")
    return "\n".join(lines) + "\n"


class CpuLibrary:
    """An MSL source built for the CPU; `launch(name, addresses, grid, block)` runs one dispatch."""

    def __init__(self, source: str):
        code = harness(source)
        lib = _BUILD / (hashlib.sha256(code.encode()).hexdigest()[:16] + ".so")
        if not lib.exists():
            cpp = _file(code, ".cpp")
            done = subprocess.run([CLANG, *FLAGS, "-O1", "-shared", "-fPIC", str(cpp), "-o", str(lib)],
                                  capture_output=True, text=True)
            if done.returncode != 0:
                raise RuntimeError(f"clang++ could not build the MSL for the CPU:\n{done.stderr[-4000:]}")
        self.names = list(kernels(source))
        self.dll = ctypes.CDLL(str(lib))

    def launch(self, name: str, addresses: list[int], grid, block) -> None:
        status = getattr(self.dll, f"rt_launch_{name}")((ctypes.c_void_p * max(1, len(addresses)))(*addresses),
                                                        (ctypes.c_uint * 3)(*grid), (ctypes.c_uint * 3)(*block))
        if status != 0:
            raise RuntimeError(f"kernel {name}: its threads diverged at a barrier")
