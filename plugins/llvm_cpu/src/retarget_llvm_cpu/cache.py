"""Compiled objects on disk, so that recompiling unchanged kernels is instant.

The key is the sha256 of everything that decides the object's bytes: the printed
kernels, the triple, CPU and features, the llvmlite and plugin versions, and a hash
of the code generator's own source.
The directory is `$RETARGET_CACHE_DIR` (objects go in its `llvm-cpu/`), else
`~/.cache/retarget/llvm-cpu`. A cache that cannot be written is skipped silently:
it only ever saves time.
"""

from __future__ import annotations

import functools
import hashlib
import os
import tempfile
from pathlib import Path

import llvmlite

from . import __version__


def directory() -> Path:
    root = os.environ.get("RETARGET_CACHE_DIR")
    return Path(root) / "llvm-cpu" if root else Path.home() / ".cache" / "retarget" / "llvm-cpu"


@functools.cache
def _codegen_fingerprint() -> str:
    """A hash of the code generator's own source, so that any change to it misses the cache."""
    here = Path(__file__).parent
    h = hashlib.sha256()
    for f in sorted(here.glob("*.py")):
        h.update(f.read_bytes())
    return h.hexdigest()


def key(kernel_texts: list[str], triple: str, cpu: str, features: tuple[str, ...]) -> str:
    h = hashlib.sha256()
    for part in (*kernel_texts, triple, cpu, ",".join(features), llvmlite.__version__, __version__,
                 _codegen_fingerprint()):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def get(k: str) -> bytes | None:
    try:
        return (directory() / f"{k}.o").read_bytes()
    except OSError:
        return None


def put(k: str, data: bytes) -> None:
    d = directory()
    try:
        d.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, d / f"{k}.o")  # atomic: a concurrent reader sees all or nothing
    except OSError:
        pass
