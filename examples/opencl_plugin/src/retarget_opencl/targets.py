"""The opencl target table: one row per device profile; every spelling resolves through it.

OpenCL C is compiled by the device's driver at load time, so the code does not depend on an
instruction set, only on what the device allows: work-group size, local memory, and the
extensions it may use (cl_khr_fp16, cl_khr_fp64). A row holds those, as the vendors' drivers
commonly report them (check `clinfo` on the machines you target). `host` is not a row: it is
the first OpenCL device that the driver finds.
"""

from __future__ import annotations

from dataclasses import dataclass

from retarget.errors import UnknownTargetError, suggestion
from retarget.protocols import TargetDesc

from . import FORMAT

BACKEND = "opencl"
KB = 1024


@dataclass(frozen=True)
class Profile:
    name: str
    max_workgroup_size: int
    local_memory_bytes: int
    extensions: tuple[str, ...] = ()  # the ones the code may use: cl_khr_fp16, cl_khr_fp64
    subgroup_sizes: tuple[int, ...] = ()
    aliases: tuple[str, ...] = ()
    note: str = ""


TABLE: tuple[Profile, ...] = (
    Profile("opencl-1.2", 256, 32 * KB, (), (), ("default", "portable", "cl1.2"),
            "OpenCL 1.2's full-profile local memory (32 KB) and 256 work-items: runs on any desktop device"),
    Profile("pocl-cpu", 4096, 1024 * KB, ("cl_khr_fp64",), (), ("pocl", "cpu"),
            "PoCL on an x86-64 or AArch64 CPU"),
    Profile("nvidia", 1024, 48 * KB, ("cl_khr_fp64",), (32,), ("nvidia-opencl",),
            "NVIDIA's OpenCL driver (no cl_khr_fp16)"),
    Profile("amd", 256, 64 * KB, ("cl_khr_fp16", "cl_khr_fp64"), (64, 32), ("amd-opencl", "rocm-opencl"),
            "AMD's ROCm OpenCL: 256 work-items unless raised"),
    Profile("intel-gpu", 512, 64 * KB, ("cl_khr_fp16",), (16, 8, 32), ("intel", "neo"),
            "Intel's compute runtime on Gen9 to Xe GPUs (no fp64 on most)"),
)

HOST_SPELLINGS = ("host", "native")
DEFAULT = "opencl-1.2"
BY_NAME: dict[str, Profile] = {n: row for row in TABLE for n in (row.name, *row.aliases)}


def names() -> list[str]:
    return [*HOST_SPELLINGS, *BY_NAME]


def describe(arch: str, max_workgroup_size: int, local_memory_bytes: int, extensions, subgroup_sizes=(),
             spec: str = "", note: str = "", compute_units: int | None = None) -> TargetDesc:
    features = tuple(e for e in ("cl_khr_fp16", "cl_khr_fp64") if e in extensions)
    extra = {"note": note}
    if compute_units:
        extra["multiprocessors"] = compute_units  # the lowering spreads work over this many units
    return TargetDesc(
        backend=BACKEND,
        arch=arch,
        format=FORMAT,
        spec=spec or arch,
        features=features,
        subgroup_size=subgroup_sizes[0] if subgroup_sizes else None,
        subgroup_sizes=tuple(subgroup_sizes),
        max_workgroup_size=max_workgroup_size,
        max_workgroup_dims=(max_workgroup_size, max_workgroup_size, max_workgroup_size),
        shared_memory_bytes=local_memory_bytes,
        fp16="cl_khr_fp16" in features,
        int8=True,
        extra=extra,
    )


def describe_row(row: Profile, spec: str = "") -> TargetDesc:
    return describe(row.name, row.max_workgroup_size, row.local_memory_bytes, row.extensions, row.subgroup_sizes,
                    spec, row.note)


def describe_device(info) -> TargetDesc:
    """The profile of a live device, from the properties its driver reports."""
    p = info.properties
    return describe("host", p["max_workgroup_size"], p["local_memory_bytes"], p["extensions"], (), "host",
                    f"the device {info.name}", p["compute_units"])


def host() -> TargetDesc:
    from .driver import OPENCL

    infos = OPENCL.enumerate()
    devices = [d for d in infos if d.available]
    if not devices:
        reason = "; ".join(d.reason for d in infos) or "no device"
        raise UnknownTargetError(f"opencl:host needs an OpenCL device, and there is none here: {reason}",
                                 hint=f"name a profile instead, e.g. --target opencl:{DEFAULT}")
    return describe_device(devices[0])


def _key(spec: str) -> str:
    return spec.strip().lower().replace(" ", "-").replace("_", "-")


def parse(spec: str) -> TargetDesc:
    key = _key(spec)
    if key in HOST_SPELLINGS:
        return host()
    row = BY_NAME.get(key or DEFAULT)
    if row is None:
        raise UnknownTargetError(f"opencl has no profile '{spec}'",
                                 hint=suggestion(key, names()) + " (`host` uses this machine's OpenCL device)")
    return describe_row(row, spec)


def default() -> tuple[TargetDesc, str]:
    return describe_row(BY_NAME[DEFAULT], DEFAULT), (
        f"opencl: no profile given, compiling for {DEFAULT} (256 work-items, 32 KB local memory), which any "
        "OpenCL device runs; use opencl:host for this machine's device")
