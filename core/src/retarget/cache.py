"""Compiled code on disk, for the backends: recompiling what has not changed is instant.

A backend keys each entry by everything that decides its bytes (`key`: the kernels' text or source, the
architecture and features, its compiler's version, and `source_fingerprint` of its own code generator) and
asks `cached(backend, key, make)`. Entries live in `$RETARGET_CACHE_DIR/<backend>`, else
`~/.cache/retarget/<backend>`; `RETARGET_CACHE_DIR=off` turns the cache off. A cache that cannot be read or
written is skipped silently: it only ever saves time. `retarget cache` shows and clears it.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

OFF = "off"


def root() -> Path | None:
    """The cache's directory; None when `RETARGET_CACHE_DIR=off`."""
    configured = os.environ.get("RETARGET_CACHE_DIR")
    if configured == OFF:
        return None
    return Path(configured) if configured else Path.home() / ".cache" / "retarget"


def directory(backend: str) -> Path | None:
    base = root()
    return None if base is None else base / backend


def key(*parts: str | bytes) -> str:
    """A sha256 of `parts`, each delimited, so that ("ab", "c") and ("a", "bc") differ."""
    h = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


@functools.cache
def source_fingerprint(package_dir: str | Path) -> str:
    """A hash of a package's Python sources, so that any change to a code generator misses its old entries."""
    h = hashlib.sha256()
    for f in sorted(Path(package_dir).glob("*.py")):
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def get(backend: str, entry: str, suffix: str = ".bin") -> bytes | None:
    d = directory(backend)
    if d is None:
        return None
    try:
        return (d / f"{entry}{suffix}").read_bytes()
    except OSError:
        return None


def put(backend: str, entry: str, data: bytes, suffix: str = ".bin") -> None:
    d = directory(backend)
    if d is None:
        return
    tmp = None
    try:
        d.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, d / f"{entry}{suffix}")  # atomic: a concurrent reader sees all or nothing
    except OSError:  # a full disk or a read-only directory: no entry, and no half-written file left behind
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def cached(backend: str, entry: str, make: Callable[[], bytes], suffix: str = ".bin") -> bytes:
    """The bytes stored under `entry`, else `make()`'s, stored. A `make` that raises stores nothing."""
    data = get(backend, entry, suffix)
    if data is None:
        data = make()
        put(backend, entry, data, suffix)
    return data


def usage() -> list[dict]:
    """Each backend's entries: {"backend", "path", "entries", "bytes"}."""
    base = root()
    if base is None or not base.is_dir():
        return []
    out = []
    for d in sorted(p for p in base.iterdir() if p.is_dir()):
        files = [f for f in d.iterdir() if f.is_file() and f.suffix != ".tmp"]
        out.append({"backend": d.name, "path": str(d), "entries": len(files),
                    "bytes": sum(f.stat().st_size for f in files)})
    return out


def clear(backend: str | None = None) -> int:
    """Removes the entries of `backend` (every backend's if None); returns the bytes freed."""
    freed = 0
    for row in usage():
        if backend in (None, row["backend"]):
            freed += row["bytes"]
            shutil.rmtree(row["path"], ignore_errors=True)
    return freed
