"""The AMDGPU architecture table: one row per gfx target; every spelling resolves through it.

A row is plain data: the gfx name, its generation (the code name: gcn5, cdna1..cdna4,
rdna1..rdna4), the chip and product names built on it (as aliases), and the limits codegen
needs. Values are AMD's published ones (the LLVM AMDGPU backend's processor table, the CDNA and
RDNA ISA guides, the ROCm hardware specification tables):

- wavefronts: GCN and CDNA run wave64 only; RDNA (gfx10 and newer) runs wave32 natively and
  wave64 too, and HIP compiles compute kernels for wave32 there, so `subgroup_size` is 64 on
  GCN/CDNA and 32 on RDNA;
- 1024 threads a workgroup on every row, 64 KB of LDS (workgroup memory) a workgroup, except
  CDNA4 (gfx950) with 160 KB;
- `mach` is the row's EF_AMDGPU_MACH value, the low byte of a code object's ELF e_flags;
- `llvm` is the first LLVM release whose AMDGPU backend targets the row.

Code for one gfx runs on that gfx only (AMDGPU code objects are ISA-specific), so there is no
"compatible older arch" as on CUDA: `host` is the GPU's own row. gfx940 and gfx941 (MI300
engineering samples) are left out: LLVM 21 removed them, and every shipped MI300 is gfx942.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from retarget.errors import UnknownTargetError, suggestion
from retarget.protocols import TargetDesc

from . import FORMAT

BACKEND = "rocm"
KB = 1024

# Matrix-core instructions (ISA mnemonics), by the generation that has them.
MFMA_CDNA1 = ("v_mfma_f32_32x32x8f16", "v_mfma_f32_16x16x16f16", "v_mfma_f32_32x32x2f32", "v_mfma_f32_16x16x4f32",
              "v_mfma_f32_32x32x4bf16", "v_mfma_f32_16x16x8bf16", "v_mfma_i32_32x32x8i8", "v_mfma_i32_16x16x16i8")
MFMA_CDNA2 = MFMA_CDNA1 + ("v_mfma_f32_32x32x8bf16_1k", "v_mfma_f32_16x16x16bf16_1k", "v_mfma_f64_16x16x4f64",
                           "v_mfma_f64_4x4x4f64")
MFMA_CDNA3 = ("v_mfma_f32_32x32x8_f16", "v_mfma_f32_16x16x16_f16", "v_mfma_f32_32x32x2_f32", "v_mfma_f32_16x16x4_f32",
              "v_mfma_f32_32x32x8_bf16", "v_mfma_f32_16x16x16_bf16", "v_mfma_i32_32x32x16_i8",
              "v_mfma_i32_16x16x32_i8", "v_mfma_f64_16x16x4_f64", "v_mfma_f32_16x16x8_xf32",
              "v_mfma_f32_16x16x32_fp8_fp8", "v_mfma_f32_16x16x32_bf8_bf8")
MFMA_CDNA4 = tuple(u for u in MFMA_CDNA3 if "xf32" not in u) + (
    "v_mfma_f32_16x16x32_f16", "v_mfma_f32_16x16x32_bf16", "v_mfma_f32_32x32x16_f16", "v_mfma_f32_32x32x16_bf16",
    "v_mfma_i32_16x16x64_i8", "v_mfma_scale_f32_16x16x128_f8f6f4")
WMMA_RDNA3 = ("v_wmma_f32_16x16x16_f16", "v_wmma_f32_16x16x16_bf16", "v_wmma_f16_16x16x16_f16",
              "v_wmma_bf16_16x16x16_bf16", "v_wmma_i32_16x16x16_iu8", "v_wmma_i32_16x16x16_iu4")
WMMA_RDNA4 = WMMA_RDNA3 + ("v_wmma_f32_16x16x16_fp8_fp8", "v_wmma_f32_16x16x16_bf8_bf8", "v_wmma_i32_16x16x32_iu4")

# The core's fragment shapes (its tiled fragment matmul) that this plugin spells natively: CDNA's
# 16x16x16 MFMA into f32 on a wavefront of 64 (compile.py, include/retarget_mfma.h). RDNA's WMMA is not
# spelled yet, so RDNA rows list none and keep the core's plain GPU matmul.
FRAGMENT_F16 = {"m": 16, "n": 16, "k": 16, "a": "f16", "b": "f16", "acc": "f32", "width": 64}
FRAGMENT_BF16 = {"m": 16, "n": 16, "k": 16, "a": "bf16", "b": "bf16", "acc": "f32", "width": 64}
FRAGMENTS = {"v_mfma_f32_16x16x16f16": FRAGMENT_F16, "v_mfma_f32_16x16x16_f16": FRAGMENT_F16,
             "v_mfma_f32_16x16x16bf16_1k": FRAGMENT_BF16, "v_mfma_f32_16x16x16_bf16": FRAGMENT_BF16}

GENERATIONS = ("gcn5", "cdna1", "cdna2", "cdna3", "cdna4", "rdna1", "rdna2", "rdna3", "rdna3.5", "rdna4")
WAVE64 = (64,)
WAVE32 = (32, 64)  # the default first


@dataclass(frozen=True)
class Arch:
    gfx: str  # the canonical name, e.g. "gfx942"
    generation: str  # one of GENERATIONS
    mach: int  # EF_AMDGPU_MACH_AMDGCN_GFX...: the low byte of a code object's e_flags
    llvm: int  # the first LLVM release that targets it
    waves: tuple[int, ...]  # wavefront sizes, the one HIP compiles compute kernels for first
    int8: bool  # packed int8 dot products (v_dot4_i32_i8) or better
    bf16: bool  # bf16 matrix or dot instructions
    matrix_units: tuple[str, ...]
    aliases: tuple[str, ...] = ()  # generations, chips and products; each names exactly one row
    lds: int = 64 * KB  # workgroup memory a workgroup may allocate

    @property
    def name(self) -> str:
        return self.gfx

    @property
    def wavefront(self) -> int:
        return self.waves[0]


TABLE: tuple[Arch, ...] = (
    # GCN5 (Vega): wave64, no matrix cores
    Arch("gfx900", "gcn5", 0x2C, 6, WAVE64, False, False, (),
         ("gcn5", "vega", "vega10", "mi25", "vega56", "vega64", "vega-frontier")),
    Arch("gfx902", "gcn5", 0x2D, 6, WAVE64, False, False, (), ("raven",)),
    Arch("gfx904", "gcn5", 0x2E, 7, WAVE64, False, False, (), ("vega12",)),
    Arch("gfx906", "gcn5", 0x2F, 7, WAVE64, True, False, (), ("vega20", "mi50", "mi60", "radeon-vii")),
    Arch("gfx909", "gcn5", 0x31, 10, WAVE64, False, False, (), ("raven2",)),
    Arch("gfx90c", "gcn5", 0x32, 12, WAVE64, False, False, (), ("renoir",)),
    # CDNA: wave64, MFMA matrix cores
    Arch("gfx908", "cdna1", 0x30, 10, WAVE64, True, True, MFMA_CDNA1, ("cdna1", "cdna", "arcturus", "mi100")),
    Arch("gfx90a", "cdna2", 0x3F, 13, WAVE64, True, True, MFMA_CDNA2,
         ("cdna2", "aldebaran", "mi210", "mi250", "mi250x")),
    Arch("gfx942", "cdna3", 0x4C, 16, WAVE64, True, True, MFMA_CDNA3,
         ("cdna3", "mi300", "mi300a", "mi300x", "mi308x", "mi325x")),
    Arch("gfx950", "cdna4", 0x4F, 20, WAVE64, True, True, MFMA_CDNA4, ("cdna4", "mi350x", "mi355x"), lds=160 * KB),
    # RDNA1
    Arch("gfx1010", "rdna1", 0x33, 9, WAVE32, False, False, (),
         ("rdna1", "rdna", "navi10", "rx5600xt", "rx5700", "rx5700xt", "w5700")),
    Arch("gfx1011", "rdna1", 0x34, 10, WAVE32, True, False, (), ("navi12", "v520")),
    Arch("gfx1012", "rdna1", 0x35, 10, WAVE32, True, False, (), ("navi14", "rx5300", "rx5500", "rx5500xt", "w5500")),
    Arch("gfx1013", "rdna1", 0x42, 13, WAVE32, True, False, ()),
    # RDNA2
    Arch("gfx1030", "rdna2", 0x36, 12, WAVE32, True, False, (),
         ("rdna2", "navi21", "rx6800", "rx6800xt", "rx6900xt", "rx6950xt", "w6800", "v620")),
    Arch("gfx1031", "rdna2", 0x37, 12, WAVE32, True, False, (), ("navi22", "rx6700", "rx6700xt", "rx6750xt")),
    Arch("gfx1032", "rdna2", 0x38, 12, WAVE32, True, False, (),
         ("navi23", "rx6600", "rx6600xt", "rx6650xt", "w6600")),
    Arch("gfx1033", "rdna2", 0x39, 12, WAVE32, True, False, (), ("van-gogh", "steam-deck")),
    Arch("gfx1034", "rdna2", 0x3E, 13, WAVE32, True, False, (), ("navi24", "rx6400", "rx6500xt", "w6400")),
    Arch("gfx1035", "rdna2", 0x3D, 14, WAVE32, True, False, (), ("rembrandt", "radeon-680m")),
    Arch("gfx1036", "rdna2", 0x45, 15, WAVE32, True, False, (), ("raphael",)),
    # RDNA3 and RDNA3.5: WMMA
    Arch("gfx1100", "rdna3", 0x41, 15, WAVE32, True, True, WMMA_RDNA3,
         ("rdna3", "navi31", "rx7900xtx", "rx7900xt", "rx7900gre", "w7900", "w7800")),
    Arch("gfx1101", "rdna3", 0x46, 15, WAVE32, True, True, WMMA_RDNA3, ("navi32", "rx7700xt", "rx7800xt", "w7700")),
    Arch("gfx1102", "rdna3", 0x47, 15, WAVE32, True, True, WMMA_RDNA3,
         ("navi33", "rx7600", "rx7600xt", "w7600", "w7500")),
    Arch("gfx1103", "rdna3", 0x44, 15, WAVE32, True, True, WMMA_RDNA3, ("phoenix", "radeon-780m", "radeon-760m")),
    Arch("gfx1150", "rdna3.5", 0x43, 17, WAVE32, True, True, WMMA_RDNA3,
         ("rdna3.5", "strix-point", "radeon-890m", "radeon-880m")),
    Arch("gfx1151", "rdna3.5", 0x4A, 17, WAVE32, True, True, WMMA_RDNA3, ("strix-halo", "radeon-8060s")),
    Arch("gfx1152", "rdna3.5", 0x55, 19, WAVE32, True, True, WMMA_RDNA3, ("krackan-point", "radeon-860m")),
    # RDNA4: WMMA with fp8
    Arch("gfx1200", "rdna4", 0x48, 18, WAVE32, True, True, WMMA_RDNA4, ("navi44", "rx9060", "rx9060xt")),
    Arch("gfx1201", "rdna4", 0x4E, 18, WAVE32, True, True, WMMA_RDNA4,
         ("rdna4", "navi48", "rx9070", "rx9070xt", "rx9070gre", "ai-pro-r9700", "r9700")),
)

HOST_SPELLINGS = ("host", "native")
DEFAULT_ARCH = "gfx942"  # without a GPU: MI300X/MI300A/MI325X, the most deployed Instinct generation
_SEPARATORS = re.compile(r"[\s_\-]+")
_VENDOR_WORDS = ("amd", "radeon", "instinct", "pro")


def key(spec: str) -> str:
    """'MI300X', 'Radeon RX 7900 XTX', 'gfx90a:sramecc+:xnack-', 'RDNA3.5' -> the table's key."""
    text = spec.strip().lower()
    if text.startswith("gfx"):
        text = text.split(":", 1)[0]  # target-ID features (xnack, sramecc): code is built for either
    text = _SEPARATORS.sub("", text)
    stripped = True
    while stripped:
        stripped = False
        for word in _VENDOR_WORDS:
            if text.startswith(word) and len(text) > len(word):
                text, stripped = text[len(word):], True
    return text


BY_KEY: dict[str, Arch] = {key(n): row for row in TABLE for n in (row.gfx, *row.aliases)}
BY_GFX: dict[str, Arch] = {row.gfx: row for row in TABLE}


def names() -> list[str]:
    return [*HOST_SPELLINGS, *(n for row in TABLE for n in (row.gfx, *row.aliases))]


def features(row: Arch) -> tuple[str, ...]:
    units = "mfma" if row.generation.startswith("cdna") else "wmma" if row.matrix_units else ""
    flags = (("fp16", True), ("bf16", row.bf16), ("int8-dot", row.int8), (units, bool(units)),
             (f"wave{row.wavefront}", True))
    return tuple(f for f, on in flags if on)


def describe_row(row: Arch, spec: str = "", compute_units: int | None = None) -> TargetDesc:
    desc = TargetDesc(
        backend=BACKEND,
        arch=row.gfx,
        format=FORMAT,
        spec=spec or row.gfx,
        features=features(row),
        subgroup_size=row.wavefront,
        subgroup_sizes=tuple(sorted(row.waves)),
        max_workgroup_size=1024,
        max_workgroup_dims=(1024, 1024, 1024),
        shared_memory_bytes=row.lds,
        fp16=True,
        int8=row.int8,
        matrix_units=row.matrix_units,
        extra={
            "gfx": row.gfx,
            "code_name": row.generation,
            "wavefront_size": row.wavefront,
            "mach": row.mach,
            "llvm": row.llvm,
            "lds_bytes": row.lds,
            "fragments": [dict(FRAGMENTS[u]) for u in row.matrix_units if u in FRAGMENTS],
        },
    )
    if compute_units:
        desc.extra["multiprocessors"] = int(compute_units)  # the GPU lowering sizes its parallelism by it
    return desc


def _live_gpus():
    from .driver import HIP

    infos = HIP.enumerate()
    return [d for d in infos if d.available], infos


def describe_device(arch: str, spec: str = "host", compute_units: int | None = None) -> TargetDesc:
    """The row of a live device's gfx (`gcnArchName`, e.g. "gfx90a:sramecc+:xnack-")."""
    row = BY_KEY.get(key(arch))
    if row is None:
        raise UnknownTargetError(f"this GPU is {arch}, which the rocm table does not describe",
                                 hint="AMD code objects run only on their own gfx; update retarget-rocm")
    return describe_row(row, spec, compute_units)


def host() -> TargetDesc:
    """The architecture of HIP device 0, as the driver reports it."""
    devices, infos = _live_gpus()
    if not devices:
        reason = "; ".join(d.reason for d in infos) or "no device"
        raise UnknownTargetError(f"rocm:host needs an AMD GPU, and there is none here: {reason}",
                                 hint=f"name an architecture instead, e.g. --target rocm:{DEFAULT_ARCH} or rocm:mi300x")
    props = devices[0].properties
    return describe_device(props["target_id"], "host", props.get("compute_units"))


def parse(spec: str) -> TargetDesc:
    k = key(spec)
    if k in ("",) + HOST_SPELLINGS:
        return host()
    row = BY_KEY.get(k)
    if row is None:
        raise UnknownTargetError(
            f"rocm has no architecture '{spec}'",
            hint=suggestion(spec.strip().lower(), names()) + " (`host` compiles for this machine's GPU)",
        )
    return describe_row(row, spec)


def default() -> tuple[TargetDesc, str]:
    devices, _ = _live_gpus()
    if devices:
        props = devices[0].properties
        desc = describe_device(props["target_id"], "host", props.get("compute_units"))
        return desc, (f"rocm: no architecture given, compiling for this machine's GPU ({devices[0].name}, "
                      f"{desc.arch}); its code runs on {desc.arch} only")
    desc = describe_row(BY_GFX[DEFAULT_ARCH], DEFAULT_ARCH)
    return desc, (f"rocm: no architecture given and no AMD GPU here, compiling for {DEFAULT_ARCH} (MI300X, MI300A, "
                  "MI325X), whose code runs on gfx942 only; name yours, e.g. --target rocm:gfx90a or rocm:rx7900xtx")
