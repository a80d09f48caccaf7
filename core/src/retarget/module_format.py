"""The .rtm module file: a stored (uncompressed) zip with a JSON manifest.

Entries: `manifest.json`, `constants.bin` (every constant, 64-byte aligned, so it
can be memory-mapped) and `executables/<target>.bin`. The manifest records the
format version, the producer versions, the functions with their host programs,
the executable variants and the SHA-256 of every other entry. Reading checks all
of it before anything runs; nothing stored in a module is ever executed as
Python (no pickle, no eval).
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .errors import ModuleFormatError

FORMAT = "retarget-module"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
CONSTANTS = "constants.bin"
ALIGN = 64
_PAD_FIELD = 0xD935  # a private zip extra-field id used to align entry data


@dataclass
class Artifact:
    """A compiled module in memory: the manifest and the raw entries."""

    manifest: dict
    entries: dict[str, bytes | np.ndarray] = field(default_factory=dict)
    path: str | None = None

    def save(self, path: str | os.PathLike) -> Path:
        path = Path(path)
        manifest = dict(self.manifest)
        manifest["entries"] = {
            name: {"size": len(_bytes(data)), "sha256": hashlib.sha256(_bytes(data)).hexdigest()}
            for name, data in self.entries.items()
        }
        tmp = path.with_name(path.name + ".tmp")
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED) as zf:
            zf.writestr(MANIFEST, json.dumps(manifest, indent=1, sort_keys=True))
            for name, data in self.entries.items():
                _write_aligned(zf, name, _bytes(data))
        os.replace(tmp, path)
        self.manifest, self.path = manifest, str(path)
        return path

    @property
    def functions(self) -> dict:
        return self.manifest["functions"]

    def constants(self) -> np.ndarray:
        data = self.entries.get(CONSTANTS, b"")
        return data if isinstance(data, np.ndarray) else np.frombuffer(data, dtype=np.uint8)


def _bytes(data) -> bytes:
    return data.tobytes() if isinstance(data, np.ndarray) else data


def _write_aligned(zf: zipfile.ZipFile, name: str, data: bytes) -> None:
    info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_STORED
    header_end = zf.fp.tell() + 30 + len(name.encode()) + 4
    pad = (-header_end) % ALIGN
    info.extra = struct.pack("<HH", _PAD_FIELD, pad) + b"\0" * pad
    zf.writestr(info, data)


def read(path: str | os.PathLike, *, mmap: bool = True) -> Artifact:
    """Open and check a .rtm file; raises ModuleFormatError naming what is wrong."""
    path = Path(path)
    if not path.exists():
        raise ModuleFormatError(f"{path}: no such module file", hint="compile one with `retarget compile MODEL -o FILE.rtm`")
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as e:
        raise ModuleFormatError(f"{path} is not a retarget module, or it is truncated ({e})",
                                hint="recompile it with `retarget compile`") from None
    with zf:
        manifest = _manifest(zf, path)
        entries = {}
        for name, meta in manifest["entries"].items():
            info = _entry_info(zf, name, path)
            if info.compress_type != zipfile.ZIP_STORED or info.file_size != meta.get("size"):
                raise ModuleFormatError(f"{path}: entry '{name}' has the wrong size or is compressed",
                                        hint="the file was modified after compilation; recompile it")
            if mmap and name == CONSTANTS and info.file_size:
                data = np.memmap(path, dtype=np.uint8, mode="r", offset=_data_offset(zf, info, path), shape=(info.file_size,))
            else:
                data = _read_entry(zf, name, path)
            if hashlib.sha256(data).hexdigest() != meta.get("sha256"):
                raise ModuleFormatError(f"{path}: checksum mismatch in entry '{name}'",
                                        hint="the file is corrupt or was tampered with; recompile it")
            entries[name] = data
    artifact = Artifact(manifest, entries, str(path))
    _check_bounds(artifact, path)
    return artifact


def _manifest(zf: zipfile.ZipFile, path: Path) -> dict:
    if MANIFEST not in zf.namelist():
        raise ModuleFormatError(f"{path} is a zip file but not a retarget module (no manifest.json)",
                                hint="compile one with `retarget compile`")
    try:
        manifest = json.loads(_read_entry(zf, MANIFEST, path))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ModuleFormatError(f"{path}: manifest.json is not valid JSON ({e})", hint="recompile the module") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ModuleFormatError(f"{path} is a zip file but not a retarget module", hint="compile one with `retarget compile`")
    version = manifest.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        producer = manifest.get("producer", {}).get("retarget", "a newer retarget")
        raise ModuleFormatError(
            f"{path} uses module format {version}, this retarget reads up to {FORMAT_VERSION}",
            hint=f"it was written by retarget {producer}; upgrade retarget, or recompile the model with this one",
        )
    for key in ("functions", "executables", "entries"):
        if not isinstance(manifest.get(key), (dict, list)):
            raise ModuleFormatError(f"{path}: manifest has no '{key}'", hint="recompile the module")
    return manifest


def _entry_info(zf: zipfile.ZipFile, name: str, path: Path) -> zipfile.ZipInfo:
    try:
        return zf.getinfo(name)
    except KeyError:
        raise ModuleFormatError(f"{path}: entry '{name}' is missing", hint="the file is incomplete; recompile it") from None


def _read_entry(zf: zipfile.ZipFile, name: str, path: Path) -> bytes:
    _entry_info(zf, name, path)
    try:
        return zf.read(name)
    except (zipfile.BadZipFile, OSError, EOFError) as e:
        raise ModuleFormatError(f"{path}: cannot read entry '{name}' ({e})", hint="the file is truncated; recompile it") from None


def _data_offset(zf: zipfile.ZipFile, info: zipfile.ZipInfo, path: Path) -> int:
    with open(path, "rb") as f:
        f.seek(info.header_offset)
        header = f.read(30)
    if len(header) != 30 or header[:4] != b"PK\x03\x04":
        raise ModuleFormatError(f"{path}: bad local header for '{info.filename}'", hint="recompile the module")
    name_len, extra_len = struct.unpack("<HH", header[26:30])
    offset = info.header_offset + 30 + name_len + extra_len
    if offset + info.file_size > os.path.getsize(path):
        raise ModuleFormatError(f"{path}: entry '{info.filename}' runs past the end of the file", hint="recompile the module")
    return offset


def _check_bounds(artifact: Artifact, path: Path) -> None:
    size = len(artifact.constants())
    for item in artifact.manifest.get("constants", {}).get("items", []):
        if not (0 <= item["offset"] and item["offset"] + item["nbytes"] <= size):
            raise ModuleFormatError(f"{path}: a constant lies outside constants.bin", hint="recompile the module")
    for fname, fn in artifact.functions.items():
        for cmd in fn.get("program", []):
            for kind, offset, nbytes in cmd.get("bindings", []):
                limit = size if kind == "const" else fn.get("arena_bytes", 0)
                if kind not in ("const", "arena") or offset < 0 or nbytes < 0 or offset + nbytes > limit:
                    raise ModuleFormatError(f"{path}: function '{fname}' binds bytes outside its buffers",
                                            hint="the manifest is corrupt; recompile the module")
