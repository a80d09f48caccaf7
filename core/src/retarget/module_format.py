"""The .rtm module file: a stored (uncompressed) zip with a JSON manifest.

Entries: `manifest.json`, `constants.bin` (every constant, 64-byte aligned, so it
can be memory-mapped), `executables/<target>.bin`, and `signature.json` when the
module is signed. The manifest records the format version, the producer versions,
the functions with their host programs, the executable variants and the SHA-256 of
every other entry. Reading checks all of it (every field's type, every size and
offset against its buffer, every checksum) before anything is memory-mapped or runs;
nothing stored in a module is ever executed as Python (no pickle, no eval).

Checksums find corruption, not an attacker, who can recompute them: a module's
native code runs when it is called. `read(..., trusted_keys=...)` accepts only
modules signed by one of those keys (signing.py).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import re
import struct
import types
import typing
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .errors import ModuleFormatError, RetargetError

FORMAT = "retarget-module"
# A module is written in the lowest format that holds it, so older readers keep reading what they can:
# 1 for a module whose ops run on one placement (every retarget reads it), 2 for one split across
# placements (`placements`, per-function `steps`), which a reader of format 1 refuses by its version.
FORMAT_VERSION = 2
FORMAT_VERSION_SINGLE = 1
MANIFEST = "manifest.json"
SIGNATURE = "signature.json"  # optional: who signed manifest.json (signing.py)
CONSTANTS = "constants.bin"
ALIGN = 64
_PAD_FIELD = 0xD935  # a private zip extra-field id used to align entry data
MAX_MANIFEST_BYTES = 64 << 20
MAX_BYTES = 1 << 48  # any size or offset in a manifest: past what a device holds, and far from overflowing int64
MAX_GRID_DIM = 2**31 - 1  # a workgroup count or size in one dimension, as GPUs allow
MAX_WORKGROUPS = 2**32  # in one dispatch


@dataclass
class Artifact:
    """A compiled module in memory: the manifest and the raw entries."""

    manifest: dict
    entries: dict[str, bytes | np.ndarray] = field(default_factory=dict)
    path: str | None = None
    placement: dict | None = None  # from `compile`: where each op runs and why (--explain); not saved

    def save(self, path: str | os.PathLike, *, signing_key=None) -> Path:
        """Write the module to `path`; with `signing_key` (an Ed25519 private key, or the path of its
        PEM file), sign it so that `load(..., trusted_keys=...)` can check who made it."""
        path = Path(path)
        manifest = dict(self.manifest)
        manifest["entries"] = {
            name: {"size": len(_bytes(data)), "sha256": hashlib.sha256(_bytes(data)).hexdigest()}
            for name, data in self.entries.items()
        }
        manifest_bytes = json.dumps(manifest, indent=1, sort_keys=True).encode()
        signature = None
        if signing_key is not None:
            from .signing import sign

            signature = sign(manifest_bytes, signing_key)
        tmp = path.with_name(path.name + ".tmp")
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED) as zf:
            zf.writestr(_dated(MANIFEST), manifest_bytes)
            for name, data in self.entries.items():
                _write_aligned(zf, name, _bytes(data))
            if signature is not None:
                zf.writestr(_dated(SIGNATURE), signature)
        os.replace(tmp, path)
        self.manifest, self.path = manifest, str(path)
        return path

    @property
    def functions(self) -> dict:
        return self.manifest["functions"]

    def explain(self) -> str:
        """Where each op runs and why, as `retarget compile --explain` prints it (`placement` is its JSON)."""
        from .passes.placement import explain_text

        if self.placement is None:
            raise RetargetError("this module was read from a file; the placement report comes from compiling it",
                                hint="recompile with `retarget compile ... --explain`")
        return explain_text(self.placement)

    def constants(self) -> np.ndarray:
        data = self.entries.get(CONSTANTS, b"")
        return data if isinstance(data, np.ndarray) else np.frombuffer(data, dtype=np.uint8)


def stage_functions(chain: dict) -> list[str]:
    """The functions a staged function's steps run: each stage and its zero-count variants (runtime_staged.py)."""
    return [v["function"] for step in chain["steps"] if step["op"] == "run" for v in [step, *step["variants"]]]


def public_functions(manifest: dict) -> list[str]:
    """The functions a caller sees: a function with data-dependent sizes by its own name, not its stages'."""
    staged = manifest.get("staged", {})
    stages = {name for chain in staged.values() for name in stage_functions(chain)}
    return [n for n in manifest["functions"] if n not in stages] + list(staged)


def _bytes(data) -> bytes:
    return data.tobytes() if isinstance(data, np.ndarray) else data


def _dated(name: str) -> zipfile.ZipInfo:
    """An entry with a fixed date, so that the same module is the same bytes on every build."""
    info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_STORED
    return info


def _write_aligned(zf: zipfile.ZipFile, name: str, data: bytes) -> None:
    info = _dated(name)
    header_end = zf.fp.tell() + 30 + len(name.encode()) + 4
    pad = (-header_end) % ALIGN
    info.extra = struct.pack("<HH", _PAD_FIELD, pad) + b"\0" * pad
    zf.writestr(info, data)


def read(path: str | os.PathLike, *, mmap: bool = True, trusted_keys=None) -> Artifact:
    """Open and check a .rtm file; raises ModuleFormatError naming what is wrong.

    With `trusted_keys` (Ed25519 public keys: paths or bytes of PEM files, or raw keys), the module
    must be signed by one of them (`signing.py`); that is checked before the manifest is read."""
    path = Path(path)
    if not path.exists():
        raise ModuleFormatError(f"{path}: no such module file",
                                hint="compile one with `retarget compile MODEL -o FILE.rtm`")
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError, struct.error) as e:
        raise ModuleFormatError(f"{path} is not a retarget module, or it is truncated ({e})",
                                hint="recompile it with `retarget compile`") from None
    with zf:
        manifest = _manifest(zf, path, trusted_keys)
        _check_manifest(manifest, path)
        entries = {}
        for name, meta in manifest["entries"].items():
            info = _entry_info(zf, name, path)
            if info.compress_type != zipfile.ZIP_STORED or info.file_size != meta.get("size"):
                raise ModuleFormatError(f"{path}: entry '{name}' has the wrong size or is compressed",
                                        hint="the file was modified after compilation; recompile it")
            if mmap and name == CONSTANTS and info.file_size:
                data = np.memmap(path, dtype=np.uint8, mode="r", offset=_data_offset(zf, info, path),
                                 shape=(info.file_size,))
            else:
                data = _read_entry(zf, name, path)
            if hashlib.sha256(data).hexdigest() != meta.get("sha256"):
                raise ModuleFormatError(f"{path}: checksum mismatch in entry '{name}'",
                                        hint="the file is corrupt or was tampered with; recompile it")
            entries[name] = data
    return Artifact(manifest, entries, str(path))


def _manifest(zf: zipfile.ZipFile, path: Path, trusted_keys=None) -> dict:
    names = zf.namelist()
    if MANIFEST not in names:
        raise ModuleFormatError(f"{path} is a zip file but not a retarget module (no manifest.json)",
                                hint="compile one with `retarget compile`")
    for name in (MANIFEST, SIGNATURE):
        if name in names and zf.getinfo(name).file_size > MAX_MANIFEST_BYTES:
            raise ModuleFormatError(f"{path}: {name} is larger than {MAX_MANIFEST_BYTES:,} bytes",
                                    hint="the file is corrupt; recompile the module")
    data = _read_entry(zf, MANIFEST, path)
    if trusted_keys is not None:
        from .signing import verify

        verify(data, _read_entry(zf, SIGNATURE, path) if SIGNATURE in names else None, trusted_keys, str(path))
    try:
        manifest = json.loads(data)
    except (ValueError, RecursionError) as e:  # not UTF-8, not JSON, or nested past the parser's stack
        raise ModuleFormatError(f"{path}: manifest.json is not valid JSON ({type(e).__name__}: {e})",
                                hint="recompile the module") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ModuleFormatError(f"{path} is a zip file but not a retarget module",
                                hint="compile one with `retarget compile`")
    version = manifest.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise ModuleFormatError(f"{path}: manifest field format_version is not an integer", hint="recompile the module")
    if version > FORMAT_VERSION:
        producer = manifest.get("producer")
        producer = producer.get("retarget", "a newer retarget") if isinstance(producer, dict) else "a newer retarget"
        raise ModuleFormatError(
            f"{path} uses module format {version}, this retarget reads up to {FORMAT_VERSION}",
            hint=f"it was written by retarget {producer}; upgrade retarget, or recompile the model with this one",
        )
    if version < 1:
        raise ModuleFormatError(f"{path}: module format version {version} does not exist", hint="recompile the module")
    return manifest


def _entry_info(zf: zipfile.ZipFile, name: str, path: Path) -> zipfile.ZipInfo:
    try:
        return zf.getinfo(name)
    except KeyError:
        raise ModuleFormatError(f"{path}: entry '{name}' is missing",
                                hint="the file is incomplete; recompile it") from None


def _read_entry(zf: zipfile.ZipFile, name: str, path: Path) -> bytes:
    info = _entry_info(zf, name, path)
    if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1:
        raise ModuleFormatError(f"{path}: entry '{name}' is compressed or encrypted",
                                hint="modules are stored zips; the file was modified after compilation, recompile it")
    try:
        return zf.read(name)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError, struct.error) as e:
        raise ModuleFormatError(f"{path}: cannot read entry '{name}' ({e})",
                                hint="the file is truncated; recompile it") from None


def _data_offset(zf: zipfile.ZipFile, info: zipfile.ZipInfo, path: Path) -> int:
    with open(path, "rb") as f:
        f.seek(info.header_offset)
        header = f.read(30)
    if len(header) != 30 or header[:4] != b"PK\x03\x04":
        raise ModuleFormatError(f"{path}: bad local header for '{info.filename}'", hint="recompile the module")
    name_len, extra_len = struct.unpack("<HH", header[26:30])
    offset = info.header_offset + 30 + name_len + extra_len
    if offset + info.file_size > os.path.getsize(path):
        raise ModuleFormatError(f"{path}: entry '{info.filename}' runs past the end of the file",
                                hint="recompile the module")
    return offset


# -- the manifest's schema: everything the runtime reads is checked here, before any of it is used ----------


def _check_manifest(m: dict, path: Path) -> None:
    """Check every field the runtime and the drivers read: types, ranges, and that each offset and
    size lies inside its buffer. A ModuleFormatError names the field by its path in the JSON."""
    c = _Checker(path)
    entries = c.dict(m.get("entries"), "entries")
    for name, meta in entries.items():
        meta = c.dict(meta, f"entries['{name}']")
        c.int(meta.get("size"), f"entries['{name}'].size")
        if not re.fullmatch(r"[0-9a-f]{64}", c.str(meta.get("sha256"), f"entries['{name}'].sha256")):
            c.fail(f"entries['{name}'].sha256", "is not a SHA-256 in hex")
    constants_size = entries[CONSTANTS]["size"] if CONSTANTS in entries else 0
    constants = c.dict(m.get("constants", {}), "constants")
    for i, item in enumerate(c.list(constants.get("items", []), "constants.items")):
        w = f"constants.items[{i}]"
        item = c.dict(item, w)
        offset, nbytes = c.int(item.get("offset"), f"{w}.offset"), c.int(item.get("nbytes"), f"{w}.nbytes")
        if offset + nbytes > constants_size:
            c.fail(w, f"lies outside constants.bin ({constants_size} bytes)")

    _check_staged(c, m)
    executables = c.list(m.get("executables"), "executables")
    layouts = [_check_executable(c, exe, f"executables[{i}]", entries) for i, exe in enumerate(executables)]
    if not layouts:
        c.fail("executables", "is empty: the module holds no code")
    if m["format_version"] < 2:
        for name, fn in c.dict(m.get("functions"), "functions").items():
            _check_function(c, fn, f"functions['{name}']", constants_size, layouts)
        return
    placements = c.dict(m.get("placements"), "placements")
    if not placements:
        c.fail("placements", "is empty")
    consts, by_placement = {}, {p: [] for p in placements}
    for p, meta in placements.items():
        meta = c.dict(meta, f"placements['{p}']")
        for k, target in enumerate(c.list(meta.get("targets", []), f"placements['{p}'].targets")):
            c.str(target, f"placements['{p}'].targets[{k}]")
        span = c.list(meta.get("constants"), f"placements['{p}'].constants")
        if len(span) != 2:
            c.fail(f"placements['{p}'].constants", "is not [offset, nbytes]")
        offset, nbytes = (c.int(v, f"placements['{p}'].constants") for v in span)
        if offset + nbytes > constants_size:
            c.fail(f"placements['{p}'].constants", f"lies outside constants.bin ({constants_size} bytes)")
        consts[p] = nbytes
    for i, (exe, layout) in enumerate(zip(executables, layouts)):
        p = c.str(exe.get("placement"), f"executables[{i}].placement")
        if p not in placements:
            c.fail(f"executables[{i}].placement", f"names '{p}', which is not a placement")
        by_placement[p].append((i, layout))
    for p, found in by_placement.items():
        if not found:
            c.fail(f"placements['{p}']", "has no executable")
    for name, fn in c.dict(m.get("functions"), "functions").items():
        _check_partitioned_function(c, fn, f"functions['{name}']", consts, by_placement)


def _check_staged(c: _Checker, m: dict) -> None:
    """Each function with data-dependent sizes (`staged`, runtime_staged.py): its steps run functions the module
    has, and host ops the runtime knows, on values defined before them."""
    from .ir.ops import HOST_OPS

    functions = c.dict(m.get("functions"), "functions")
    for name, chain in c.dict(m.get("staged", {}), "staged").items():
        w = f"staged['{name}']"
        chain = c.dict(chain, w)
        for key in ("inputs", "outputs"):
            for k, meta in enumerate(c.list(chain.get(key), f"{w}.{key}")):
                c.tensor(c.dict(meta, f"{w}.{key}[{k}]").get("type"), f"{w}.{key}[{k}].type", static=False)
        defined = set(range(len(chain["inputs"])))

        def read(ids, where, defined=defined):
            for i in c.list(ids, where):
                if c.int(i, where) not in defined:
                    c.fail(where, f"reads value {i} before any step defines it")

        for k, step in enumerate(c.list(chain.get("steps"), f"{w}.steps")):
            ws = f"{w}.steps[{k}]"
            step = c.dict(step, ws)
            read(step.get("inputs"), f"{ws}.inputs")
            if step.get("op") == "host":
                if step.get("name") not in HOST_OPS:
                    c.fail(f"{ws}.name", f"is not a host op ({', '.join(HOST_OPS)})")
                defined.add(c.int(step.get("output"), f"{ws}.output"))
            elif step.get("op") == "run":
                for v in [step, *c.list(step.get("variants"), f"{ws}.variants")]:
                    if c.str(v.get("function"), f"{ws}.function") not in functions:
                        c.fail(f"{ws}.function", f"names '{v['function']}', which is not a function of the module")
                defined.update(c.int(i, f"{ws}.outputs") for i in c.list(step.get("outputs"), f"{ws}.outputs"))
            else:
                c.fail(f"{ws}.op", "is not 'run' or 'host'")
        read(chain.get("returns"), f"{w}.returns")


def _check_executable(c: _Checker, exe, w: str, entries: dict) -> list[list[int]]:
    """The executable's entry points, as the byte sizes of their bindings."""
    exe = c.dict(exe, w)
    for key in ("backend", "arch", "format", "path"):
        c.str(exe.get(key), f"{w}.{key}")
    if exe["path"] not in entries:
        c.fail(f"{w}.path", f"names '{exe['path']}', which is not an entry of the module")
    target = c.dict(exe.get("target"), f"{w}.target")
    for key, hint in _target_fields().items():
        if key in target and not _json_is(target[key], hint):
            c.fail(f"{w}.target.{key}", f"is not a {hint.__name__ if isinstance(hint, type) else hint}")
    for key in ("backend", "arch", "format"):
        c.str(target.get(key), f"{w}.target.{key}")
    unknown = set(target) - set(_target_fields())
    if unknown:
        c.fail(f"{w}.target", f"has unknown fields {', '.join(sorted(unknown))}")
    layout = []
    for j, ep in enumerate(c.list(exe.get("entry_points"), f"{w}.entry_points")):
        we = f"{w}.entry_points[{j}]"
        ep = c.dict(ep, we)
        c.str(ep.get("name"), f"{we}.name")
        scalars = set(c.list(ep.get("scalars", []), f"{we}.scalars"))
        for name in scalars:
            c.str(name, f"{we}.scalars")
        sizes = []
        for k, b in enumerate(c.list(ep.get("bindings"), f"{we}.bindings")):
            b = c.dict(b, f"{we}.bindings[{k}]")
            if scalars and "shape" in b:  # a dynamic entry point's binding: its size is known per dispatch
                c.tensor(b.get("type"), f"{we}.bindings[{k}].type", static=False)
                c.dims(b["shape"], f"{we}.bindings[{k}].shape", scalars)
                sizes.append(None)
            else:
                sizes.append(c.tensor(b.get("type"), f"{we}.bindings[{k}].type").nbytes)
            if b.get("access") not in ("read", "write"):
                c.fail(f"{we}.bindings[{k}].access", "is not 'read' or 'write'")
        for key in ("workgroup_size", "workgroup_count"):
            dims = c.list(ep.get(key), f"{we}.{key}")
            if len(dims) != 3:
                c.fail(f"{we}.{key}", "does not have 3 dimensions")
            if key == "workgroup_count" and scalars:
                c.dims(dims, f"{we}.{key}", scalars)
                continue
            for d in dims:
                c.int(d, f"{we}.{key}", lo=1, hi=MAX_GRID_DIM)
        if not scalars and math.prod(ep["workgroup_count"]) > MAX_WORKGROUPS:
            c.fail(f"{we}.workgroup_count", f"asks for more than {MAX_WORKGROUPS:,} workgroups")
        layout.append(sizes)
    return layout


def _check_function(c: _Checker, fn, w: str, constants_size: int, layouts: list[list[list[int]]]) -> None:
    fn = c.dict(fn, w)
    if "symbols" in fn:
        return _check_dynamic_function(c, fn, w, constants_size, layouts)
    limits = {"arena": c.int(fn.get("arena_bytes"), f"{w}.arena_bytes"), "const": constants_size}
    for key in ("inputs", "outputs"):
        for i, arg in enumerate(c.list(fn.get(key), f"{w}.{key}")):
            wa = f"{w}.{key}[{i}]"
            arg = c.dict(arg, wa)
            if key == "inputs":
                c.str(arg.get("name"), f"{wa}.name")
                c.input_range(arg, wa)
            t = c.tensor(arg.get("type"), f"{wa}.type")
            kind, _, nbytes = c.slot(arg.get("slot"), f"{wa}.slot", limits)
            if nbytes != t.nbytes or (key == "inputs" and kind != "arena"):
                where = " in the arena" if key == "inputs" else ""
                c.fail(f"{wa}.slot", f"does not hold a {t} ({t.nbytes} bytes{where})")
    _check_program(c, fn.get("program"), f"{w}.program", limits, list(enumerate(layouts)))


def _check_program(c: _Checker, program, w: str, limits: dict, layouts: list[tuple[int, list[list[int]]]]) -> None:
    """Dispatches and barriers: each dispatch's entry point and bindings fit every executable in `layouts`
    (pairs of the executable's index and its layout)."""
    for i, cmd in enumerate(c.list(program, w)):
        wc = f"{w}[{i}]"
        cmd = c.dict(cmd, wc)
        if cmd.get("op") == "barrier":
            continue
        if cmd.get("op") != "dispatch":
            c.fail(f"{wc}.op", "is not 'dispatch' or 'barrier'")
        entry = c.int(cmd.get("entry"), f"{wc}.entry")
        slots = [c.slot(b, f"{wc}.bindings[{k}]", limits)
                 for k, b in enumerate(c.list(cmd.get("bindings"), f"{wc}.bindings"))]
        for v, layout in layouts:
            if entry >= len(layout):
                c.fail(f"{wc}.entry", f"is {entry}, and executables[{v}] has {len(layout)} entry points")
            if len(slots) != len(layout[entry]) or any(n < need for (_, _, n), need in zip(slots, layout[entry])
                                                       if need is not None):
                c.fail(f"{wc}.bindings", f"do not match the bindings of entry point {entry} of executables[{v}]")


def _check_dynamic_function(c: _Checker, fn: dict, w: str, constants_size: int, layouts) -> None:
    """A function with symbolic dimensions (passes/dynamic_plan.py): its symbols, buffers of symbolic
    sizes, and slots into them; sizes are checked against the buffers when each call is planned."""
    from .ir.symbolic import parse_range

    symbols = c.dict(fn.get("symbols"), f"{w}.symbols")
    inputs = c.list(fn.get("inputs"), f"{w}.inputs")
    for name, info in symbols.items():
        info = c.dict(info, f"{w}.symbols['{name}']")
        try:
            parse_range(c.str(info.get("range"), f"{w}.symbols['{name}'].range"))
        except ValueError as e:
            c.fail(f"{w}.symbols['{name}'].range", f"is not a range ({e})")
        where = c.list(info.get("input"), f"{w}.symbols['{name}'].input")
        if len(where) != 2 or c.int(where[0], f"{w}.symbols['{name}'].input") >= len(inputs):
            c.fail(f"{w}.symbols['{name}'].input", "is not [input, axis] of an input")
    names = set(symbols)
    buffers = c.list(fn.get("buffers"), f"{w}.buffers")
    c.dims(buffers, f"{w}.buffers", names)
    c.dims(c.list(fn.get("dims", []), f"{w}.dims"), f"{w}.dims", names)
    if "arena_bytes" in fn:
        c.int(fn["arena_bytes"], f"{w}.arena_bytes")

    def slot(value, where):
        value = c.list(value, where)
        if len(value) == 3 and value[0] == "buffer":
            if c.int(value[1], where) >= len(buffers):
                c.fail(where, f"names buffer {value[1]}, and there are {len(buffers)}")
            c.dims([value[2]], where, names)
        else:
            c.slot(value, where, {"const": constants_size})
        return value

    for key in ("inputs", "outputs"):
        for i, arg in enumerate(c.list(fn.get(key), f"{w}.{key}")):
            wa = f"{w}.{key}[{i}]"
            arg = c.dict(arg, wa)
            if key == "inputs":
                c.str(arg.get("name"), f"{wa}.name")
                c.input_range(arg, wa)
            c.tensor(arg.get("type"), f"{wa}.type", static=False)
            c.dims(c.list(arg.get("shape"), f"{wa}.shape"), f"{wa}.shape", names)
            if slot(arg.get("slot"), f"{wa}.slot")[0] != "buffer" and key == "inputs":
                c.fail(f"{wa}.slot", "of an input is not a buffer")
    for i, cmd in enumerate(c.list(fn.get("program"), f"{w}.program")):
        wc = f"{w}.program[{i}]"
        cmd = c.dict(cmd, wc)
        if cmd.get("op") != "dispatch":
            c.fail(f"{wc}.op", "is not 'dispatch'")
        entry = c.int(cmd.get("entry"), f"{wc}.entry")
        slots = [slot(b, f"{wc}.bindings[{k}]") for k, b in enumerate(c.list(cmd.get("bindings"), f"{wc}.bindings"))]
        for v, layout in enumerate(layouts):
            if entry >= len(layout) or len(slots) != len(layout[entry]):
                c.fail(f"{wc}", f"does not match entry point {entry} of executables[{v}]")


def _check_partitioned_function(c: _Checker, fn, w: str, consts: dict[str, int],
                                layouts: dict[str, list[tuple[int, list[list[int]]]]]) -> None:
    """A function of format 2: per placement an arena; inputs written to some placements, outputs read
    from one, and steps that run a placement's program or transfer bytes between two placements."""
    fn = c.dict(fn, w)
    arenas = c.dict(fn.get("arena_bytes"), f"{w}.arena_bytes")
    limits = {}
    for p in consts:
        limits[p] = {"arena": c.int(arenas.get(p, 0), f"{w}.arena_bytes['{p}']"), "const": consts[p]}
    for p in arenas:
        if p not in consts:
            c.fail(f"{w}.arena_bytes", f"names '{p}', which is not a placement")

    def placement(value, where: str) -> str:
        if not isinstance(value, str) or value not in consts:
            c.fail(where, f"is not a placement ({', '.join(consts)})")
        return value

    for i, arg in enumerate(c.list(fn.get("inputs"), f"{w}.inputs")):
        wa = f"{w}.inputs[{i}]"
        arg = c.dict(arg, wa)
        c.str(arg.get("name"), f"{wa}.name")
        c.input_range(arg, wa)
        t = c.tensor(arg.get("type"), f"{wa}.type")
        for p, slot in c.dict(arg.get("slots"), f"{wa}.slots").items():
            kind, _, nbytes = c.slot(slot, f"{wa}.slots['{placement(p, f'{wa}.slots')}']", limits[p])
            if nbytes != t.nbytes or kind != "arena":
                c.fail(f"{wa}.slots['{p}']", f"does not hold a {t} ({t.nbytes} bytes in the arena)")
    for i, out in enumerate(c.list(fn.get("outputs"), f"{w}.outputs")):
        wo = f"{w}.outputs[{i}]"
        out = c.dict(out, wo)
        t = c.tensor(out.get("type"), f"{wo}.type")
        p = placement(out.get("placement"), f"{wo}.placement")
        if c.slot(out.get("slot"), f"{wo}.slot", limits[p])[2] != t.nbytes:
            c.fail(f"{wo}.slot", f"does not hold a {t} ({t.nbytes} bytes)")
    for i, step in enumerate(c.list(fn.get("steps"), f"{w}.steps")):
        ws = f"{w}.steps[{i}]"
        step = c.dict(step, ws)
        if step.get("op") == "run":
            p = placement(step.get("placement"), f"{ws}.placement")
            _check_program(c, step.get("program"), f"{ws}.program", limits[p], layouts[p])
        elif step.get("op") == "transfer":
            src, dst = placement(step.get("from"), f"{ws}.from"), placement(step.get("to"), f"{ws}.to")
            n_src = c.slot(step.get("src"), f"{ws}.src", limits[src])[2]
            if c.slot(step.get("dst"), f"{ws}.dst", limits[dst])[2] != n_src:
                c.fail(f"{ws}.dst", f"is not {n_src} bytes, as its src")
        else:
            c.fail(f"{ws}.op", "is not 'run' or 'transfer'")


class _Checker:
    def __init__(self, path: Path):
        self.path = path

    def fail(self, where: str, what: str):
        raise ModuleFormatError(f"{self.path}: manifest field {where} {what}",
                                hint="the module is corrupt or was edited; recompile it")

    def dict(self, value, where: str) -> dict:
        if not isinstance(value, dict):
            self.fail(where, "is not an object")
        return value

    def list(self, value, where: str) -> list:
        if not isinstance(value, list):
            self.fail(where, "is not a list")
        return value

    def str(self, value, where: str) -> str:
        if not isinstance(value, str):
            self.fail(where, "is not a string")
        return value

    def int(self, value, where: str, lo: int = 0, hi: int = MAX_BYTES) -> int:
        if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
            self.fail(where, f"is not an integer from {lo} to {hi}")
        return value

    def tensor(self, value, where: str, static: bool = True):
        from .ir.core import TensorType
        from .mlir.syntax import parse_type

        try:
            t = parse_type(self.str(value, where))
        except RetargetError as e:
            self.fail(where, f"is not a type ({e.message})")
        if not isinstance(t, TensorType) or (static and not t.is_static):
            self.fail(where, f"'{value}' is not a tensor type of static shape")
        if not static:
            return t
        if t.nbytes > MAX_BYTES:
            self.fail(where, f"'{value}' is larger than {MAX_BYTES:,} bytes")
        return t

    def dims(self, values, where: str, symbols) -> list:
        """Dimensions: ints, or expressions (text) of the given symbols only."""
        from .ir.symbolic import parse_dim, symbols_of

        for v in self.list(values, where):
            if isinstance(v, str):
                try:
                    d = parse_dim(v)
                except ValueError as e:
                    self.fail(where, f"holds '{v}', which is not a dimension ({e})")
                unknown = symbols_of(d) - set(symbols)
                if unknown:
                    self.fail(where, f"uses {', '.join(sorted(unknown))}, which it does not declare")
            else:
                self.int(v, where)
        return values

    def input_range(self, arg: dict, where: str) -> None:
        """An input's optional `range`: [lo, hi, why], the values a target of its function holds."""
        if "range" not in arg:
            return
        value = self.list(arg["range"], f"{where}.range")
        if len(value) != 3 or not all(isinstance(v, int) and not isinstance(v, bool) for v in value[:2]) or \
                not isinstance(value[2], str) or value[0] > value[1]:
            self.fail(f"{where}.range", "is not [lo, hi, why] with lo <= hi")

    def slot(self, value, where: str, limits: dict) -> tuple[str, int, int]:
        """`[kind, offset, nbytes]`: bytes of the arena or of the constants."""
        value = self.list(value, where)
        if len(value) != 3 or not isinstance(value[0], str) or value[0] not in limits:
            self.fail(where, "is not [\"arena\" or \"const\", offset, nbytes]")
        kind, offset, nbytes = value[0], self.int(value[1], where), self.int(value[2], where)
        if offset + nbytes > limits[kind]:
            self.fail(where, f"reaches byte {offset + nbytes} of the {kind} buffer, which holds {limits[kind]}")
        return kind, offset, nbytes


@functools.cache
def _target_fields() -> dict:
    """TargetDesc's fields and their types, as the JSON of a manifest holds them."""
    from .protocols import TargetDesc

    return typing.get_type_hints(TargetDesc)


def _json_is(value, hint) -> bool:
    """Whether JSON `value` fits type hint `hint` (tuples are JSON lists)."""
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint in (str, dict):
        return isinstance(value, hint)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        return any(_json_is(value, a) for a in args)
    if origin is tuple:
        return isinstance(value, list) and all(_json_is(v, args[0]) for v in value)
    if origin is dict:
        return isinstance(value, dict)
    return False
