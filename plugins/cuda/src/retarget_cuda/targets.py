"""The CUDA architecture table: one row per SM architecture; every spelling resolves through it.

A row is plain data: the SM name (`90a` for sm_90a), its code name, the products
built on it (as aliases), and the limits codegen needs. Limits are NVIDIA's
published per-compute-capability numbers (CUDA C Programming Guide, "Technical
Specifications per Compute Capability"). An `a` row (sm_90a, sm_100a) may use
architecture-specific instructions (wgmma, tcgen05): its code runs only on that
exact compute capability, and its PTX cannot be JIT-compiled for newer GPUs.
`host` is not a row: it is the row of the GPU the driver reports.

Fragments. The core's fragment intrinsics and tiled fragment matmul (retarget.kernel.lower) run
on the row's wmma shapes: `TargetDesc.extra["fragments"]` lists, from its matrix units, the
16x16x16 wmma with f16 inputs (sm_70 on) and with bf16 inputs (sm_80 on), both accumulating in
f32, held by a warp. Only f16 and bf16 matmuls take them: f32 inputs do not convert exactly into
f16, and wmma's tf32 would change numerics, so f32 matmuls keep the core's own GPU matmul.
"""

from __future__ import annotations

from dataclasses import dataclass

from retarget.errors import UnknownTargetError, suggestion
from retarget.kernel.lower import NVIDIA_FRAGMENT_PLANS
from retarget.protocols import TargetDesc

from . import FORMAT

BACKEND = "cuda"
KB = 1024

# Matrix-unit instructions (PTX names) by the first architecture that has them.
MMA_VOLTA = ("mma.m8n8k4.f16", "wmma.m16n16k16.f16")
MMA_TURING = ("mma.m16n8k8.f16", "mma.m8n8k16.s8", "wmma.m16n16k16.f16")
MMA_AMPERE = ("mma.m16n8k16.f16", "mma.m16n8k16.bf16", "mma.m16n8k8.tf32", "mma.m16n8k32.s8",
              "wmma.m16n16k16.f16", "wmma.m16n16k16.bf16")
MMA_ADA = MMA_AMPERE + ("mma.m16n8k32.e4m3",)
WGMMA = ("wgmma.m64nNk16.f16", "wgmma.m64nNk16.bf16", "wgmma.m64nNk8.tf32", "wgmma.m64nNk32.e4m3",
         "wgmma.m64nNk32.s8")
TCGEN05 = ("tcgen05.mma.f16", "tcgen05.mma.bf16", "tcgen05.mma.tf32", "tcgen05.mma.f8f6f4", "tcgen05.mma.i8")
# The core's fragment shapes, by the matrix unit that runs them (CUDA C's nvcuda::wmma, rendered by the core).
FRAGMENTS = {
    "wmma.m16n16k16.f16": {"m": 16, "n": 16, "k": 16, "a": "f16", "b": "f16", "acc": "f32", "width": 32},
    "wmma.m16n16k16.bf16": {"m": 16, "n": 16, "k": 16, "a": "bf16", "b": "bf16", "acc": "f32", "width": 32},
}
# The tiled fragment matmul's large plans (wmma): (subgroup rows, subgroup columns, fragment rows, fragment
# columns, k-slices per step); empty: the core's own (`retarget.kernel.lower.LARGE_FRAGMENT_PLANS`).
LARGE_FRAGMENT_PLANS: list = list(NVIDIA_FRAGMENT_PLANS)
# How the tiled matmuls' loops are spelled for NVRTC (`retarget.kernel.lower.PEEL_LAST_STEP`, `FRAGMENT_K_LOOP`):
# the wmma matmul with its last step peeled off the loop and its k-slices in a loop (H100, f16 4096^3 352 TFLOP/s
# against 271-319, with a bias 341 against 320); register tiles keep the last step in the loop (peeled: f32 41
# against 46). benchmarks/NOTES.md.
LOOP_SPELLING: dict = {"peel_last_step": ["fragments"], "fragment_k_loop": "serial"}


@dataclass(frozen=True)
class Arch:
    sm: str  # "90a": the canonical name is sm_90a, its PTX is compute_90a
    code_name: str
    shared_per_block_optin: int  # bytes a block may opt into (static limit is 48 KB everywhere)
    shared_per_sm: int
    fp16: bool  # native half arithmetic
    int8: bool  # dp4a or better
    bf16: bool
    matrix_units: tuple[str, ...]
    aliases: tuple[str, ...] = ()  # code names and products; each names exactly one row

    @property
    def name(self) -> str:
        return f"sm_{self.sm}"

    @property
    def compute_capability(self) -> tuple[int, int]:
        digits = self.sm.rstrip("af")
        return int(digits[:-1]), int(digits[-1])

    @property
    def arch_specific(self) -> bool:
        return self.sm.endswith("a")


TABLE: tuple[Arch, ...] = (
    Arch("50", "maxwell", 48 * KB, 64 * KB, False, False, False, (), ("gtx750", "gtx750ti")),
    Arch("52", "maxwell", 48 * KB, 96 * KB, False, False, False, (),
         ("maxwell", "gtx970", "gtx980", "gtx980ti", "titanx", "m40", "m60")),
    Arch("53", "maxwell", 48 * KB, 64 * KB, True, False, False, (), ("jetson-tx1", "tx1")),
    Arch("60", "pascal", 48 * KB, 64 * KB, True, False, False, (), ("pascal", "p100")),
    Arch("61", "pascal", 48 * KB, 96 * KB, True, True, False, (),
         ("gtx1060", "gtx1070", "gtx1080", "gtx1080ti", "titanxp", "p4", "p40")),
    Arch("62", "pascal", 48 * KB, 64 * KB, True, True, False, (), ("jetson-tx2", "tx2")),
    Arch("70", "volta", 96 * KB, 96 * KB, True, True, False, MMA_VOLTA, ("volta", "v100", "titanv")),
    Arch("72", "volta", 96 * KB, 96 * KB, True, True, False, MMA_VOLTA, ("xavier", "jetson-xavier")),
    Arch("75", "turing", 64 * KB, 64 * KB, True, True, False, MMA_TURING,
         ("turing", "t4", "rtx2060", "rtx2070", "rtx2080", "rtx2080ti", "titanrtx", "gtx1660", "quadro-rtx8000")),
    Arch("80", "ampere", 163 * KB, 164 * KB, True, True, True, MMA_AMPERE, ("ampere", "a100", "a30", "a800")),
    Arch("86", "ampere", 99 * KB, 100 * KB, True, True, True, MMA_AMPERE,
         ("a10", "a10g", "a16", "a40", "a2", "rtxa6000", "rtx3050", "rtx3060", "rtx3070", "rtx3080", "rtx3080ti",
          "rtx3090", "rtx3090ti")),
    Arch("87", "ampere", 163 * KB, 164 * KB, True, True, True, MMA_AMPERE, ("orin", "jetson-orin")),
    Arch("89", "ada", 99 * KB, 100 * KB, True, True, True, MMA_ADA,
         ("ada", "lovelace", "ada-lovelace", "l4", "l40", "l40s", "rtx6000ada", "rtx4060", "rtx4070", "rtx4080",
          "rtx4090")),
    Arch("90", "hopper", 227 * KB, 228 * KB, True, True, True, MMA_ADA),
    Arch("90a", "hopper", 227 * KB, 228 * KB, True, True, True, MMA_ADA + WGMMA,
         ("hopper", "h100", "h200", "h800", "h20", "gh200")),
    Arch("100", "blackwell", 227 * KB, 228 * KB, True, True, True, MMA_ADA),
    Arch("100a", "blackwell", 227 * KB, 228 * KB, True, True, True, MMA_ADA + TCGEN05,
         ("blackwell", "b100", "b200", "gb200")),
    Arch("103", "blackwell", 227 * KB, 228 * KB, True, True, True, MMA_ADA, ("b300", "gb300")),
    Arch("110", "blackwell", 227 * KB, 228 * KB, True, True, True, MMA_ADA, ("thor", "jetson-thor")),
    Arch("120", "blackwell", 99 * KB, 100 * KB, True, True, True, MMA_ADA,
         ("rtx5060", "rtx5070", "rtx5070ti", "rtx5080", "rtx5090", "rtxpro6000")),
    Arch("121", "blackwell", 99 * KB, 100 * KB, True, True, True, MMA_ADA, ("gb10", "dgx-spark")),
)

# Multiprocessors of products whose count is one number (SXM parts where PCIe differs: h100 SXM5 has 132, PCIe
# 114). The GPU lowering sizes its parallelism by it, so `cuda:h100` compiles what `cuda:host` does on an H100;
# an architecture or code name has no count (the lowering assumes 64).
PRODUCT_MULTIPROCESSORS = {
    "p100": 56, "v100": 80, "t4": 40, "rtx2080ti": 68, "a100": 108, "a800": 108, "a30": 56, "a10": 72,
    "a10g": 80, "a40": 84, "rtx3080": 68, "rtx3090": 82, "l4": 58, "l40": 142, "l40s": 142, "rtx4080": 76,
    "rtx4090": 128, "h100": 132, "h200": 132, "h800": 132, "gh200": 132, "b200": 148, "rtx5090": 170,
}

HOST_SPELLINGS = ("host", "native")
DEFAULT_ARCH = "sm_80"  # without a GPU: Ampere's cubin, and its PTX JIT-compiles on anything newer
BY_NAME: dict[str, Arch] = {n: row for row in TABLE for n in (row.name, row.sm, *row.aliases)}
BY_CC: dict[tuple[int, int], Arch] = {}
for _row in TABLE:  # the device's own row prefers the arch-specific one: its code runs only there anyway
    if _row.compute_capability not in BY_CC or _row.arch_specific:
        BY_CC[_row.compute_capability] = _row


def names() -> list[str]:
    return [*HOST_SPELLINGS, *BY_NAME]


def _key(spec: str) -> str:
    """'SM_90A', 'sm90a', 'RTX 4090', 'compute_80' -> the table's spelling."""
    key = spec.strip().lower().replace(" ", "").replace("_", "-")
    for prefix in ("sm-", "sm", "compute-"):
        if key.startswith(prefix) and key[len(prefix):][:1].isdigit():
            return "sm_" + key[len(prefix):]
    return key


def describe_row(row: Arch, spec: str = "") -> TargetDesc:
    major, minor = row.compute_capability
    features = tuple(f for f, on in (("fp16", row.fp16), ("bf16", row.bf16), ("dp4a", row.int8),
                                     ("tensor-cores", bool(row.matrix_units)),
                                     ("arch-specific", row.arch_specific)) if on)
    return TargetDesc(
        backend=BACKEND,
        arch=row.name,
        format=FORMAT,
        spec=spec or row.name,
        features=features,
        subgroup_size=32,
        subgroup_sizes=(32,),
        max_workgroup_size=1024,
        max_workgroup_dims=(1024, 1024, 64),
        shared_memory_bytes=48 * KB,
        fp16=row.fp16,
        int8=row.int8,
        matrix_units=row.matrix_units,
        extra={
            "sm": row.sm,
            "ptx": f"compute_{row.sm}",
            "compute_capability": f"{major}.{minor}",
            "code_name": row.code_name,
            "shared_memory_optin_bytes": row.shared_per_block_optin,
            "shared_memory_per_sm_bytes": row.shared_per_sm,
            "registers_per_block": 64 * KB,
            "max_grid": [2**31 - 1, 65535, 65535],
            "fragments": [dict(FRAGMENTS[u]) for u in row.matrix_units if u in FRAGMENTS],
            "vector_copy_bytes": 16,  # the tiled matmuls stage runs of 16 bytes as uint4 moves
            **({"large_fragment_plans": [list(p) for p in LARGE_FRAGMENT_PLANS]} if LARGE_FRAGMENT_PLANS else {}),
            **LOOP_SPELLING,
        },
    )


def row_for(major: int, minor: int) -> Arch | None:
    return BY_CC.get((major, minor))


def host() -> TargetDesc:
    """The architecture of CUDA device 0, as the driver reports it."""
    from .driver import CUDA

    devices = [d for d in CUDA.enumerate() if d.available]
    if not devices:
        reason = "; ".join(d.reason for d in CUDA.enumerate()) or "no device"
        raise UnknownTargetError(f"cuda:host needs a CUDA device, and there is none here: {reason}",
                                 hint=f"name an architecture instead, e.g. --target cuda:{DEFAULT_ARCH} or cuda:h100")
    return _desc_for_device(devices[0].properties["compute_capability"], "host",
                            devices[0].properties.get("multiprocessors"))


def _desc_for_device(cc: str, spec: str, multiprocessors: int | None = None) -> TargetDesc:
    """The row of compute capability `cc`; with the device's multiprocessor count, which the GPU
    lowering sizes its parallelism by."""
    major, minor = (int(p) for p in cc.split("."))
    row = row_for(major, minor)
    if row is None:
        older = [r for r in TABLE if r.compute_capability <= (major, minor) and not r.arch_specific]
        if not older:
            raise UnknownTargetError(f"this GPU is compute capability {cc}, older than any in the cuda table")
        row = older[-1]  # a GPU newer than the table: the newest older arch, JIT-compiled from its PTX
    desc = describe_row(row, spec)
    if multiprocessors:
        desc.extra["multiprocessors"] = int(multiprocessors)
    return desc


def parse(spec: str) -> TargetDesc:
    key = _key(spec)
    if key in ("",) + HOST_SPELLINGS:
        return host()
    row = BY_NAME.get(key)
    if row is None:
        raise UnknownTargetError(
            f"cuda has no architecture '{spec}'",
            hint=suggestion(key, names()) + " (`host` compiles for this machine's GPU)",
        )
    desc = describe_row(row, spec)
    if key in PRODUCT_MULTIPROCESSORS:
        desc.extra["multiprocessors"] = PRODUCT_MULTIPROCESSORS[key]
    return desc


def default() -> tuple[TargetDesc, str]:
    from .driver import CUDA

    devices = [d for d in CUDA.enumerate() if d.available]
    if devices:
        desc = _desc_for_device(devices[0].properties["compute_capability"], "host",
                                devices[0].properties.get("multiprocessors"))
        return desc, (f"cuda: no architecture given, compiling for this machine's GPU ({devices[0].name}, "
                      f"{desc.arch}); use --target cuda:{DEFAULT_ARCH} (or another) for other GPUs")
    desc = describe_row(BY_NAME[DEFAULT_ARCH], DEFAULT_ARCH)
    return desc, (f"cuda: no architecture given and no GPU here, compiling for {DEFAULT_ARCH} with its PTX, "
                  "which newer GPUs JIT-compile; use --target cuda:host on the GPU machine for its exact arch")
