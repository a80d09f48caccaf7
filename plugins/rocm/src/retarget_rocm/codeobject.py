"""Reading AMDGPU code objects (hsaco): the ELF facts that say what a code object is and what it holds.

A code object is a 64-bit little-endian ELF shared object for EM_AMDGPU (224), OS ABI
ELFOSABI_AMDGPU_HSA (64), whose ABI version is the code object version less 2 (v4: 2, v5: 3).
The low byte of e_flags is the gfx (EF_AMDGPU_MACH, see targets.py), its bits 8-11 the xnack and
sramecc settings. Each kernel `k` has a symbol `k` (its code) and `k.kd` (its 64-byte kernel
descriptor, which the runtime launches). The NT_AMDGPU_METADATA note (a msgpack map) names the
target, e.g. "amdgcn-amd-amdhsa--gfx942". Only what retarget checks is read here.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

from retarget.errors import RetargetError

EM_AMDGPU = 224
ELFOSABI_AMDGPU_HSA = 64
ET_DYN = 3
SHT_SYMTAB, SHT_NOTE, SHT_DYNSYM = 2, 7, 11
NT_AMDGPU_METADATA = 32
TARGET_ID = re.compile(rb"amdgcn-amd-amdhsa--(gfx[0-9a-f]+(?::(?:xnack|sramecc)[+-])*)")
BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"


@dataclass(frozen=True)
class CodeObject:
    machine: int
    elf_type: int
    os_abi: int
    abi_version: int
    flags: int
    target_id: str  # from the metadata note, e.g. "gfx90a:xnack-"; "" without one
    kernels: tuple[str, ...]  # names with a kernel descriptor `name.kd` among the dynamic symbols

    @property
    def mach(self) -> int:
        return self.flags & 0xFF

    @property
    def gfx(self) -> str:
        return self.target_id.split(":", 1)[0]

    @property
    def code_object_version(self) -> int:
        return self.abi_version + 2


def _fail(why: str) -> RetargetError:
    return RetargetError(f"this is not an AMDGPU code object: {why}", hint="recompile with --target rocm")


def read(data: bytes) -> CodeObject:
    """The facts of code object `data`; a RetargetError for anything that is not one."""
    if len(data) < 64 or data[:4] != b"\x7fELF":
        raise _fail("no ELF header")
    if data[4] != 2 or data[5] != 1:
        raise _fail("not a 64-bit little-endian ELF")
    elf_type, machine = struct.unpack_from("<HH", data, 16)
    (shoff,) = struct.unpack_from("<Q", data, 40)
    (flags,) = struct.unpack_from("<I", data, 48)
    shentsize, shnum = struct.unpack_from("<HH", data, 58)
    if machine != EM_AMDGPU:
        raise _fail(f"its ELF machine is {machine}, not EM_AMDGPU ({EM_AMDGPU})")
    if shoff + shnum * shentsize > len(data) or (shnum and shentsize < 64):
        raise _fail("its section headers lie outside the file (truncated?)")
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]

    def contents(section) -> bytes:
        offset, size = section[4], section[5]
        if offset + size > len(data):
            raise _fail("a section lies outside the file (truncated?)")
        return data[offset:offset + size]

    target_id, kernels = "", []
    for section in sections:
        kind = section[1]
        if kind == SHT_NOTE:
            target_id = target_id or _note_target(contents(section))
        elif kind == SHT_DYNSYM:
            strings = contents(sections[section[6]])
            for name in _symbol_names(contents(section), strings):
                if name.endswith(".kd"):
                    kernels.append(name[:-3])
    return CodeObject(machine, elf_type, data[7], data[8], flags, target_id, tuple(kernels))


def _symbol_names(table: bytes, strings: bytes):
    for offset in range(0, len(table) - 23, 24):
        (name,) = struct.unpack_from("<I", table, offset)
        if name:
            yield strings[name:strings.index(b"\0", name)].decode()


def _note_target(notes: bytes) -> str:
    offset = 0
    while offset + 12 <= len(notes):
        namesz, descsz, kind = struct.unpack_from("<III", notes, offset)
        name_end = offset + 12 + namesz
        desc_start = name_end + (-namesz % 4)
        desc = notes[desc_start:desc_start + descsz]
        if notes[offset + 12:name_end].rstrip(b"\0") == b"AMDGPU" and kind == NT_AMDGPU_METADATA:
            match = TARGET_ID.search(desc)
            if match:
                return match.group(1).decode()
        offset = desc_start + descsz + (-descsz % 4)
    return ""


def unbundle(data: bytes, gfx: str) -> bytes:
    """The code object for `gfx` from a clang offload bundle (what some hiprtc versions return), or
    `data` itself when it is already an ELF."""
    if data[:4] == b"\x7fELF":
        return data
    if not data.startswith(BUNDLE_MAGIC):
        raise _fail("neither an ELF nor a clang offload bundle")
    (count,) = struct.unpack_from("<Q", data, len(BUNDLE_MAGIC))
    offset, found = len(BUNDLE_MAGIC) + 8, []
    for _ in range(count):
        start, size, id_size = struct.unpack_from("<QQQ", data, offset)
        entry_id = data[offset + 24:offset + 24 + id_size].decode(errors="replace")
        offset += 24 + id_size
        found.append(entry_id)
        if "amdgcn-amd-amdhsa" in entry_id and re.search(rf"-{gfx}(?::|$)", entry_id):
            return data[start:start + size]
    raise _fail(f"the offload bundle holds {', '.join(found) or 'nothing'}, no code object for {gfx}")
