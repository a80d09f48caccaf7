"""The llvm-cpu architecture table: one row per CPU, every spelling resolves through it.

A row is plain data: the architecture family (the triple's first part; the rest
of the triple is this machine's OS, since the loader runs objects in-process),
the LLVM CPU name (as in -mcpu), the LLVM features the object may use, and the
widest vector register in bits (`vector_bits`, which lowering uses to pick
vector widths). `host` is not a row: it is detected from the running CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from retarget.errors import UnknownTargetError, suggestion
from retarget.protocols import TargetDesc

from . import FORMAT

BACKEND = "llvm-cpu"


@dataclass(frozen=True)
class Cpu:
    name: str  # canonical arch name
    family: str  # "x86_64" or "aarch64"
    cpu: str  # LLVM -mcpu name
    features: tuple[str, ...]  # LLVM feature names the object may use
    vector_bits: int
    aliases: tuple[str, ...] = ()


def _f(*groups: str) -> tuple[str, ...]:
    return tuple(sorted({f for g in groups for f in g.split()}))


# x86-64 psABI micro-architecture levels, then the named CPUs built on them.
X86_V1 = "cmov cx8 fxsr mmx sse sse2"
X86_V2 = X86_V1 + " cx16 sahf popcnt sse3 sse4.1 sse4.2 ssse3"
X86_V3 = X86_V2 + " avx avx2 bmi bmi2 f16c fma lzcnt movbe xsave"
X86_V4 = X86_V3 + " avx512f avx512bw avx512cd avx512dq avx512vl"
SKYLAKE = X86_V3 + " adx aes clflushopt pclmul prfchw rdrnd rdseed xsavec xsaveopt xsaves"
SKYLAKE_AVX512 = SKYLAKE + " " + X86_V4 + " clwb pku"
CASCADELAKE = SKYLAKE_AVX512 + " avx512vnni"
ICELAKE_SERVER = CASCADELAKE + (
    " avx512bitalg avx512ifma avx512vbmi avx512vbmi2 avx512vpopcntdq gfni rdpid sha vaes vpclmulqdq wbnoinvd"
)
SAPPHIRERAPIDS = ICELAKE_SERVER + (
    " amx-bf16 amx-int8 amx-tile avx512bf16 avx512fp16 avxvnni cldemote enqcmd movdir64b movdiri serialize"
    " tsxldtrk uintr waitpkg"
)
ZNVER2 = X86_V3 + (
    " adx aes clflushopt clwb clzero mwaitx pclmul prfchw rdpid rdrnd rdseed sha sse4a wbnoinvd xsavec xsaveopt xsaves"
)
ZNVER3 = ZNVER2 + " invpcid pku vaes vpclmulqdq"
ZNVER4 = ZNVER3 + " " + X86_V4 + (
    " avx512bf16 avx512bitalg avx512ifma avx512vbmi avx512vbmi2 avx512vnni avx512vpopcntdq gfni"
)

ARMV8 = "fp-armv8 neon"
NEOVERSE_N1 = ARMV8 + " aes crc dotprod fullfp16 lse rcpc sha2"
NEOVERSE_V1 = NEOVERSE_N1 + " bf16 i8mm sve"
NEOVERSE_V2 = NEOVERSE_V1 + " sve2"
APPLE_M1 = ARMV8 + " aes crc dotprod fp16fml fullfp16 lse rcpc sha2 sha3"

TABLE: tuple[Cpu, ...] = (
    Cpu("x86-64", "x86_64", "x86-64", _f(X86_V1), 128, ("x86_64", "amd64", "x86-64-v1")),
    Cpu("x86-64-v2", "x86_64", "x86-64-v2", _f(X86_V2), 128, ("x86_64_v2",)),
    Cpu("x86-64-v3", "x86_64", "x86-64-v3", _f(X86_V3), 256, ("x86_64_v3", "avx2")),
    Cpu("x86-64-v4", "x86_64", "x86-64-v4", _f(X86_V4), 512, ("x86_64_v4", "avx512")),
    Cpu("haswell", "x86_64", "haswell", _f(X86_V3, "aes pclmul rdrnd xsaveopt"), 256),
    Cpu("skylake", "x86_64", "skylake", _f(SKYLAKE), 256),
    Cpu("skylake-avx512", "x86_64", "skylake-avx512", _f(SKYLAKE_AVX512), 512, ("skx",)),
    Cpu("cascadelake", "x86_64", "cascadelake", _f(CASCADELAKE), 512, ("clx",)),
    Cpu("icelake-server", "x86_64", "icelake-server", _f(ICELAKE_SERVER), 512, ("icx",)),
    Cpu("sapphirerapids", "x86_64", "sapphirerapids", _f(SAPPHIRERAPIDS), 512, ("spr",)),
    Cpu("znver2", "x86_64", "znver2", _f(ZNVER2), 256, ("zen2", "rome")),
    Cpu("znver3", "x86_64", "znver3", _f(ZNVER3), 256, ("zen3", "milan")),
    Cpu("znver4", "x86_64", "znver4", _f(ZNVER4), 512, ("zen4", "genoa")),
    Cpu("aarch64", "aarch64", "generic", _f(ARMV8), 128, ("arm64", "armv8-a", "armv8")),
    Cpu("neoverse-n1", "aarch64", "neoverse-n1", _f(NEOVERSE_N1), 128, ("graviton2", "ampere-altra")),
    Cpu("neoverse-v1", "aarch64", "neoverse-v1", _f(NEOVERSE_V1), 256, ("graviton3",)),
    Cpu("neoverse-v2", "aarch64", "neoverse-v2", _f(NEOVERSE_V2), 128, ("graviton4", "grace")),
    Cpu("apple-m1", "aarch64", "apple-m1", _f(APPLE_M1), 128, ("m1",)),
)

HOST_SPELLINGS = ("host", "native")
BY_NAME: dict[str, Cpu] = {n: row for row in TABLE for n in (row.name, *row.aliases)}


def names() -> list[str]:
    return [*HOST_SPELLINGS, *BY_NAME]


def os_suffix() -> str:
    """The vendor-os part of this process's triple (`unknown-linux-gnu`)."""
    import llvmlite.binding as llvm

    return llvm.get_process_triple().split("-", 1)[1]


def describe_row(row: Cpu, spec: str = "") -> TargetDesc:
    return _desc(row.name, spec or row.name, f"{row.family}-{os_suffix()}", row.cpu, row.features, row.vector_bits)


def host() -> TargetDesc:
    """This machine's CPU, with exactly the features it reports."""
    import llvmlite.binding as llvm

    cpu = llvm.get_host_cpu_name()
    features = tuple(sorted(k for k, on in llvm.get_host_cpu_features().items() if on))
    if "avx512f" in features:
        bits = 512
    elif "avx" in features:
        bits = 256
    else:
        bits = 128
    arch = cpu if cpu and cpu != "generic" else "host"
    return _desc(arch, "host", llvm.get_process_triple(), cpu, features, bits)


def _desc(arch, spec, triple, cpu, features, bits) -> TargetDesc:
    return TargetDesc(
        backend=BACKEND,
        arch=arch,
        format=FORMAT,
        spec=spec,
        features=tuple(features),
        max_workgroup_size=1,
        max_workgroup_dims=(1, 1, 1),
        fp16=True,
        int8=True,
        extra={"triple": triple, "cpu": cpu, "vector_bits": bits},
    )


def parse(spec: str) -> TargetDesc:
    key = spec.strip().lower()
    if key in ("",) + HOST_SPELLINGS:
        return host()
    row = BY_NAME.get(key)
    if row is None:
        raise UnknownTargetError(
            f"llvm-cpu has no architecture '{spec}'",
            hint=suggestion(key, names()) + " (`host` compiles for this machine)",
        )
    return describe_row(row, spec)


def default() -> tuple[TargetDesc, str]:
    desc = host()
    note = (
        f"llvm-cpu: no architecture given, compiling for this machine's CPU ({desc.extra['cpu']}); "
        "use --target llvm-cpu:x86-64-v3 (or another) for code that runs on other machines"
    )
    return desc, note
