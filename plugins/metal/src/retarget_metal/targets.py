"""The metal-spirv target table: Apple GPU families, the chips built on them, and MSL versions.

Three tables, all data:

- `FAMILIES`: the Apple GPU families (`MTLGPUFamilyApple7` ...), with the limits codegen needs.
  Apple's Metal feature set tables give every family from Apple4 on 32 KB of threadgroup memory
  and 1024 threads a threadgroup; Apple GPUs run SIMD-groups of 32 threads; SIMD-scoped matrix
  multiply (`simdgroup_matrix`, 8x8) arrives with Apple7 (A14, M1). Only Apple7 and newer are
  rows: the simdgroup matmul is the reason this target exists, and every Apple silicon Mac is
  Apple7 or newer.
- `MSL_VERSIONS`: each Metal Shading Language version, its `MTLLanguageVersion` value and the
  first macOS and iOS that compile it. MSL 3.1 brings the `bfloat` type.
- `CHIPS`: every chip, its family, its GPU cores (the largest configuration; the GPU lowering
  sizes its parallelism by it) and the MSL version of the OS it shipped with, which every device
  with that chip therefore has. Code for a chip uses no more than that version.

Spellings: a chip (`apple-m3-max`, `m3-max`, `a17-pro`), a family (`apple9`: the family's
oldest chip's MSL, core count unknown), an MSL version alone (`msl3.1`, or `metal3.1` as
`xcrun metal -std=` spells it: Apple7, so any Apple silicon GPU on an OS with that version), and
any of these with `+mslX.Y` to choose the language version (`apple-m1+msl3.1` for bf16 on an M1
that runs macOS 14). `host` is the live device's row, from the driver.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from retarget.errors import UnknownTargetError, suggestion
from retarget.protocols import TargetDesc

from . import FORMAT

BACKEND = "metal-spirv"
KB = 1024


@dataclass(frozen=True)
class MslVersion:
    name: str  # "3.1"
    language_version: int  # MTLLanguageVersion: (major << 16) + minor
    macos: str  # the first macOS (and iOS) whose Metal compiles it
    ios: str

    @property
    def key(self) -> tuple[int, int]:
        major, minor = self.name.split(".")
        return int(major), int(minor)


MSL_VERSIONS: dict[str, MslVersion] = {v.name: v for v in (
    MslVersion("2.3", (2 << 16) + 3, "11", "14"),  # simdgroup_matrix
    MslVersion("2.4", (2 << 16) + 4, "12", "15"),
    MslVersion("3.0", (3 << 16) + 0, "13", "16"),
    MslVersion("3.1", (3 << 16) + 1, "14", "17"),  # bfloat
    MslVersion("3.2", (3 << 16) + 2, "15", "18"),
    MslVersion("4.0", (4 << 16) + 0, "26", "26"),
)}
BF16_MSL = "3.1"


@dataclass(frozen=True)
class Family:
    number: int  # 7: MTLGPUFamilyApple7
    first_msl: str  # the MSL of the OS its first chip shipped with
    simdgroup_matrix: bool = True  # SIMD-scoped matrix multiply, 8x8 (Apple7 and newer)
    simd_width: int = 32
    max_threads_per_threadgroup: int = 1024
    threadgroup_memory_bytes: int = 32 * KB

    @property
    def name(self) -> str:
        return f"apple{self.number}"


FAMILIES: dict[int, Family] = {f.number: f for f in (
    Family(7, "2.3"),  # A14, M1
    Family(8, "2.4"),  # A15, A16, M2
    Family(9, "3.1"),  # A17 Pro, A18, M3, M4
    Family(10, "4.0"),  # A19, M5
)}


@dataclass(frozen=True)
class Chip:
    name: str
    family: int
    gpu_cores: int  # the largest configuration
    msl: str  # the MSL version of the OS it shipped with
    aliases: tuple[str, ...] = ()


def _m(name: str, family: int, cores: int, msl: str) -> Chip:
    """An M-series chip: `apple-m1-pro`, also spelled `m1-pro`."""
    return Chip(f"apple-{name}", family, cores, msl, (name,))


def _a(name: str, family: int, cores: int, msl: str, *aliases: str) -> Chip:
    """An A-series chip: `a17-pro`, also spelled `apple-a17-pro`."""
    return Chip(name, family, cores, msl, (f"apple-{name}", *aliases))


CHIPS: tuple[Chip, ...] = (
    _a("a14", 7, 4, "2.3", "a14-bionic"),
    _m("m1", 7, 8, "2.3"),
    _m("m1-pro", 7, 16, "2.4"),
    _m("m1-max", 7, 32, "2.4"),
    _m("m1-ultra", 7, 64, "2.4"),
    _a("a15", 8, 5, "2.4", "a15-bionic"),
    _a("a16", 8, 5, "3.0", "a16-bionic"),
    _m("m2", 8, 10, "2.4"),
    _m("m2-pro", 8, 19, "3.0"),
    _m("m2-max", 8, 38, "3.0"),
    _m("m2-ultra", 8, 76, "3.0"),
    _a("a17-pro", 9, 6, "3.1", "a17"),
    _a("a18", 9, 5, "3.2"),
    _a("a18-pro", 9, 6, "3.2"),
    _m("m3", 9, 10, "3.1"),
    _m("m3-pro", 9, 18, "3.1"),
    _m("m3-max", 9, 40, "3.1"),
    _m("m3-ultra", 9, 80, "3.2"),
    _m("m4", 9, 10, "3.1"),  # first shipped in an iPad Pro with iPadOS 17.5
    _m("m4-pro", 9, 20, "3.2"),
    _m("m4-max", 9, 40, "3.2"),
    _a("a19", 10, 5, "4.0"),
    _a("a19-pro", 10, 6, "4.0"),
    _m("m5", 10, 10, "4.0"),
)

HOST_SPELLINGS = ("host", "native")
DEFAULT = "apple-m1"  # without a Metal device: the oldest Apple silicon Mac, so the code runs on all of them
BY_CHIP: dict[str, Chip] = {n: chip for chip in CHIPS for n in (chip.name, *chip.aliases)}
BY_FAMILY: dict[str, Family] = {f.name: f for f in FAMILIES.values()}
BY_LANGUAGE: dict[str, MslVersion] = {f"{prefix}{v.name}": v for v in MSL_VERSIONS.values()
                                      for prefix in ("msl", "metal")}


def names() -> list[str]:
    return [*HOST_SPELLINGS, *BY_CHIP, *BY_FAMILY, *BY_LANGUAGE]


def features(family: Family, msl: MslVersion) -> tuple[str, ...]:
    out = ["fp16", "simdgroup-reduction"]
    if family.simdgroup_matrix:
        out.append("simdgroup-matrix")
    if msl.key >= MSL_VERSIONS[BF16_MSL].key:
        out.append("bf16")
    return tuple(out)


def matrix_units(family: Family, msl: MslVersion) -> tuple[str, ...]:
    if not family.simdgroup_matrix:
        return ()
    types = ["f32", "f16"] + (["bf16"] if msl.key >= MSL_VERSIONS[BF16_MSL].key else [])
    return tuple(f"simdgroup_matrix.8x8.{t}" for t in types)


def fragments(family: Family) -> list[dict]:
    """The core's fragment shapes (see retarget.kernel.lower): 8x8x8 SIMD-group matrices with an f32
    accumulator, on f32 or f16 inputs (Metal mixes a half A and B with a float accumulator). bf16
    matmuls take the f32 shape (bf16 widens to f32 exactly)."""
    if not family.simdgroup_matrix:
        return []
    return [{"m": 8, "n": 8, "k": 8, "a": t, "b": t, "acc": "f32", "width": family.simd_width} for t in ("f32", "f16")]


def describe(arch: str, family: Family, msl: MslVersion, gpu_cores: int | None, spec: str = "",
             note: str = "", limits: dict | None = None) -> TargetDesc:
    """A TargetDesc from the table's data; `limits` (a live device's) replace the family's."""
    limits = limits or {}
    threads = int(limits.get("max_threads_per_threadgroup", family.max_threads_per_threadgroup))
    shared = int(limits.get("max_threadgroup_memory_bytes", family.threadgroup_memory_bytes))
    return TargetDesc(
        backend=BACKEND,
        arch=arch,
        format=FORMAT,
        spec=spec or arch,
        features=features(family, msl),
        subgroup_size=family.simd_width,
        subgroup_sizes=(family.simd_width,),
        max_workgroup_size=threads,
        max_workgroup_dims=(threads, threads, threads),
        shared_memory_bytes=shared,
        fp16=True,
        int8=False,  # no int8 dot-product instruction in MSL before Metal 4's tensor ops
        matrix_units=matrix_units(family, msl),
        extra={
            "family": family.name,
            "family_number": family.number,
            "msl": msl.name,
            "language_version": msl.language_version,
            "min_macos": msl.macos,
            "min_ios": msl.ios,
            "gpu_cores": gpu_cores,
            "multiprocessors": gpu_cores,  # what the core's GPU lowering reads
            "fragments": fragments(family),  # the core's tiled fragment matmul on simdgroup_matrix
            "note": note,
        },
    )


def describe_chip(chip: Chip, msl: str | None = None, spec: str = "") -> TargetDesc:
    version = MSL_VERSIONS[msl or chip.msl]
    arch = chip.name if msl in (None, chip.msl) else f"{chip.name}+msl{version.name}"
    return describe(arch, FAMILIES[chip.family], version, chip.gpu_cores, spec,
                    f"{chip.name}: Apple{chip.family}, {chip.gpu_cores} GPU cores, MSL {version.name}")


def _key(spec: str) -> str:
    return spec.strip().lower().replace(" ", "-").replace("_", "-")


def _split_language(key: str) -> tuple[str, str | None]:
    """'apple-m1+msl3.1' -> ('apple-m1', '3.1'); an unknown version raises, listing the known ones."""
    base, plus, language = key.partition("+")
    if not plus:
        return base, None
    version = BY_LANGUAGE.get(language) or BY_LANGUAGE.get(f"msl{language}")
    if version is None:
        raise UnknownTargetError(f"metal-spirv has no MSL version '{language}'",
                                 hint="known: " + ", ".join(f"msl{v}" for v in MSL_VERSIONS))
    return base, version.name


def parse(spec: str) -> TargetDesc:
    key = _key(spec)
    base, msl = _split_language(key)
    if base in HOST_SPELLINGS:
        desc = host()
        return desc if msl is None else with_language(desc, msl, spec)
    if base in BY_CHIP:
        return describe_chip(BY_CHIP[base], msl, spec)
    if base in BY_FAMILY:
        family = BY_FAMILY[base]
        version = MSL_VERSIONS[msl or family.first_msl]
        arch = family.name if msl in (None, family.first_msl) else f"{family.name}+msl{version.name}"
        return describe(arch, family, version, None, spec, f"any Apple{family.number} GPU, MSL {version.name}")
    if base in BY_LANGUAGE and msl is None:
        version = BY_LANGUAGE[base]
        return describe(f"msl{version.name}", FAMILIES[7], version, None, spec,
                        f"any Apple silicon GPU (Apple7 and newer) on macOS {version.macos} / iOS {version.ios} "
                        "or later")
    raise UnknownTargetError(f"metal-spirv has no target '{spec}'",
                             hint=suggestion(base, names()) + " (`host` uses this Mac's GPU; add +msl3.1 to pick "
                                                              "the language version)")


def with_language(desc: TargetDesc, msl: str, spec: str) -> TargetDesc:
    version = MSL_VERSIONS[msl]
    family = FAMILIES[desc.extra["family_number"]]
    return replace(desc, spec=spec, arch=f"{desc.arch.partition('+')[0]}+msl{msl}",
                   features=features(family, version), matrix_units=matrix_units(family, version),
                   extra={**desc.extra, "msl": version.name, "language_version": version.language_version,
                          "min_macos": version.macos, "min_ios": version.ios})


def host() -> TargetDesc:
    """The row of the first Metal device, as the driver reports it."""
    from .driver import METAL

    infos = METAL.enumerate()
    devices = [d for d in infos if d.available]
    if not devices:
        reason = "; ".join(d.reason for d in infos) or "no device"
        raise UnknownTargetError(f"metal-spirv:host needs a Metal device, and there is none here: {reason}",
                                 hint=f"name a chip instead, e.g. --target metal-spirv:{DEFAULT} or metal-spirv:m3")
    return describe_device(devices[0])


def describe_device(info, spec: str = "host") -> TargetDesc:
    """A live device's row: its chip when the name is in the table (`Apple M3 Max`), else its family;
    the MSL version its OS compiles; the limits it reports."""
    props = info.properties
    number = props.get("family")
    if number is None or number < min(FAMILIES):
        raise UnknownTargetError(f"{info.name} is not an Apple7-or-newer GPU (Apple family {number}); the "
                                 "metal-spirv table covers Apple silicon (M1/A14 and newer)",
                                 hint="compile for webgpu-spirv, which runs on any Metal GPU through wgpu")
    family = FAMILIES.get(number) or FAMILIES[max(FAMILIES)]  # newer than the table: its newest family
    chip = BY_CHIP.get(_key(info.name))
    version = MSL_VERSIONS.get(props.get("msl") or "") or MSL_VERSIONS[family.first_msl]
    limits = {key: props[key] for key in ("max_threads_per_threadgroup", "max_threadgroup_memory_bytes")
              if props.get(key)}
    return describe("host", family, version, chip.gpu_cores if chip else None, spec,
                    f"the device {info.name}: Apple{number}, MSL {version.name}", limits)


def default() -> tuple[TargetDesc, str]:
    from .driver import METAL

    devices = [d for d in METAL.enumerate() if d.available]
    for info in devices:
        try:
            desc = describe_device(info)
        except UnknownTargetError:
            continue
        return desc, f"metal-spirv: no chip given, compiling for this Mac's GPU ({info.name})"
    why = f"{devices[0].name} is not an Apple silicon GPU" if devices else "no Metal device here"
    return describe_chip(BY_CHIP[DEFAULT], spec=DEFAULT), (
        f"metal-spirv: no chip given and {why}, compiling for {DEFAULT} (Apple7, MSL 2.3), which runs on every "
        "Apple silicon Mac; name a chip (e.g. metal-spirv:m3) for newer features")
