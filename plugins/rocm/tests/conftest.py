"""Fixtures: the AMD GPU (or a skip), the compiler route without ROCm (or a skip), and the code-object
checks, which read ELF through pyelftools rather than the plugin's own reader."""

import io
import re

import pytest


@pytest.fixture(scope="session")
def hip_device():
    """The first AMD GPU, or a skip that says why there is none."""
    from retarget_rocm.driver import HIP

    infos = HIP.enumerate()
    available = [d for d in infos if d.available]
    if not available:
        pytest.skip(f"no AMD GPU: {'; '.join(d.reason for d in infos)}")
    device = HIP.create(available[0].id)
    yield device
    device.close()


@pytest.fixture(scope="session")
def clang_route():
    """The compiler route without ROCm (clang + LLVM + lld), or a skip that says what is missing."""
    from retarget_rocm import toolchain

    absent = toolchain.missing()
    if absent:
        pytest.skip("cannot build code objects without ROCm here: " + "; ".join(absent))
    return toolchain


@pytest.fixture
def no_rocm_compiler(monkeypatch, clang_route):
    """Compile through clang + LLVM + lld even where ROCm's hiprtc is installed."""
    monkeypatch.setenv("RETARGET_ROCM_COMPILER", "clang")
    return clang_route


EM_AMDGPU = 224
ELFOSABI_AMDGPU_HSA = 64


def metadata(elf) -> bytes:
    """The NT_AMDGPU_METADATA note's msgpack bytes."""
    for section in elf.iter_sections():
        if section.header.sh_type == "SHT_NOTE":
            for note in section.iter_notes():
                if note.n_name == "AMDGPU" and note.n_type == 32:
                    return note.n_desc if isinstance(note.n_desc, bytes) else note.n_desc.encode("latin-1")
    return b""


def assert_code_object(data: bytes, gfx: str, mach: int, kernels) -> dict:
    """`data` is a code object for `gfx` (EF_AMDGPU_MACH `mach`) with a kernel descriptor per kernel;
    returns what the checks read (wavefront sizes per kernel, code object version)."""
    from elftools.elf.elffile import ELFFile

    elf = ELFFile(io.BytesIO(data))
    assert elf.elfclass == 64 and elf.little_endian
    assert elf.header.e_machine == "EM_AMDGPU" and data[18] == EM_AMDGPU
    assert elf.header.e_type == "ET_DYN"
    assert data[7] == ELFOSABI_AMDGPU_HSA
    assert elf.header.e_flags & 0xFF == mach, f"e_flags {elf.header.e_flags:#x} is not {gfx} ({mach:#x})"
    symbols = {s.name: s for s in elf.get_section_by_name(".dynsym").iter_symbols()}
    for name in kernels:
        kd = symbols.get(f"{name}.kd")
        assert kd is not None, f"no kernel descriptor for {name}"
        assert kd.entry.st_info.type == "STT_OBJECT" and kd.entry.st_size == 64
        assert symbols[name].entry.st_info.type == "STT_FUNC"
    note = metadata(elf)
    assert re.search(rb"amdgcn-amd-amdhsa--" + gfx.encode() + rb"(?![0-9a-f])", note), "the note names another target"
    waves = [b[0] for b in re.findall(rb"\.wavefront_size(.)", note, re.S)]
    assert len(waves) == len(list(kernels))
    return {"waves": set(waves), "code_object_version": elf.header.e_ident.EI_ABIVERSION + 2}


@pytest.fixture(scope="session")
def check_code_object():
    """assert_code_object(data, gfx, mach, kernels): the checks every code-object test makes."""
    pytest.importorskip("elftools.elf.elffile", reason="pyelftools is not installed (pip install pyelftools)")
    return assert_code_object


def metadata_int(note: bytes, key: str) -> list[int]:
    """Every integer value of `key` (e.g. ".group_segment_fixed_size") in a metadata note's msgpack."""
    out = []
    for match in re.finditer(re.escape(key.encode()), note):
        at = match.end()
        tag = note[at]
        if tag < 0x80:
            out.append(tag)
        elif tag in (0xCC, 0xCD, 0xCE):
            width = {0xCC: 1, 0xCD: 2, 0xCE: 4}[tag]
            out.append(int.from_bytes(note[at + 1:at + 1 + width], "big"))
    return out


@pytest.fixture(scope="session")
def note_ints():
    """note_ints(data, key) -> every integer value of `key` in code object `data`'s metadata note."""
    from elftools.elf.elffile import ELFFile

    return lambda data, key: metadata_int(metadata(ELFFile(io.BytesIO(data))), key)
