"""The webgpu-spirv target table: one row per limits profile; every spelling resolves through it.

WebGPU code does not depend on a GPU architecture, only on the limits the page (or program)
requests from its device. A row is those limits, in WebGPU's own names (GPUSupportedLimits),
and the optional features it may use. `webgpu` is the spec's defaults, which every WebGPU
device grants without asking; the browser rows are the larger tiers that desktop browsers
commonly report for a discrete or Apple GPU, which a page must request (`requiredLimits`).
Browsers report limits in tiers that change between versions: the browser rows are
assumptions to check against `adapter.limits` on the machines you target, not guarantees.
`host` is not a row: it is the limits of the adapter the driver finds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from retarget.errors import UnknownTargetError, suggestion
from retarget.protocols import TargetDesc

from . import FORMAT

BACKEND = "webgpu-spirv"
KB, MB = 1024, 1024 * 1024

# The WebGPU spec's default limits (https://www.w3.org/TR/webgpu/#limits), the compute-relevant ones.
DEFAULT_LIMITS = {
    "max-storage-buffers-per-shader-stage": 8,
    "max-uniform-buffers-per-shader-stage": 12,
    "max-compute-invocations-per-workgroup": 256,
    "max-compute-workgroup-size-x": 256,
    "max-compute-workgroup-size-y": 256,
    "max-compute-workgroup-size-z": 64,
    "max-compute-workgroup-storage-size": 16 * KB,
    "max-compute-workgroups-per-dimension": 65535,
    "max-storage-buffer-binding-size": 128 * MB,
    "max-buffer-size": 256 * MB,
    "min-storage-buffer-offset-alignment": 256,
    "min-uniform-buffer-offset-alignment": 256,
}
LIMIT_KEYS = tuple(DEFAULT_LIMITS)
_DESKTOP = {**DEFAULT_LIMITS, "max-compute-invocations-per-workgroup": 1024, "max-compute-workgroup-size-x": 1024,
            "max-compute-workgroup-size-y": 1024, "max-compute-workgroup-storage-size": 32 * KB,
            "max-storage-buffers-per-shader-stage": 10, "max-storage-buffer-binding-size": 1024 * MB,
            "max-buffer-size": 1024 * MB}


@dataclass(frozen=True)
class Profile:
    name: str
    limits: dict = field(hash=False)
    features: tuple[str, ...] = ()  # WebGPU feature names the code may use ("shader-f16")
    aliases: tuple[str, ...] = ()
    note: str = ""


TABLE: tuple[Profile, ...] = (
    Profile("webgpu", DEFAULT_LIMITS, (), ("default", "core", "spec"), "the WebGPU spec's default limits"),
    Profile("chrome-desktop", _DESKTOP, ("shader-f16",), ("chrome", "edge", "dawn"),
            "Chrome/Edge (Dawn) on a desktop GPU, limits requested"),
    Profile("firefox-desktop", {**_DESKTOP, "max-storage-buffers-per-shader-stage": 8}, (), ("firefox",),
            "Firefox (wgpu) on a desktop GPU, limits requested"),
    Profile("safari-apple", {**_DESKTOP, "max-storage-buffers-per-shader-stage": 8}, ("shader-f16",),
            ("safari", "webkit", "apple"), "Safari (WebKit on Metal) on Apple silicon, limits requested"),
    Profile("chrome-android", DEFAULT_LIMITS, (), ("android", "mobile"), "Chrome on Android: the defaults"),
)

HOST_SPELLINGS = ("host", "native")
DEFAULT = "webgpu"
BY_NAME: dict[str, Profile] = {n: row for row in TABLE for n in (row.name, *row.aliases)}


def names() -> list[str]:
    return [*HOST_SPELLINGS, *BY_NAME]


def describe(name: str, limits: dict, features: tuple[str, ...], spec: str = "", note: str = "") -> TargetDesc:
    limits = {key: int(limits.get(key, DEFAULT_LIMITS[key])) for key in LIMIT_KEYS}
    invocations = limits["max-compute-invocations-per-workgroup"]
    return TargetDesc(
        backend=BACKEND,
        arch=name,
        format=FORMAT,
        spec=spec or name,
        features=tuple(features),
        subgroup_size=None,  # WebGPU's subgroups are an optional feature; the lowering does not use them
        max_workgroup_size=min(256, invocations),  # 256: what every device runs; the schedule needs no more
        max_workgroup_dims=(limits["max-compute-workgroup-size-x"], limits["max-compute-workgroup-size-y"],
                            limits["max-compute-workgroup-size-z"]),
        shared_memory_bytes=limits["max-compute-workgroup-storage-size"],
        fp16="shader-f16" in features,
        int8=False,
        extra={"limits": limits, "note": note},
    )


def describe_row(row: Profile, spec: str = "") -> TargetDesc:
    return describe(row.name, row.limits, row.features, spec, row.note)


def _key(spec: str) -> str:
    return spec.strip().lower().replace(" ", "-").replace("_", "-")


def host() -> TargetDesc:
    """The limits and features of the first WebGPU adapter, as wgpu reports them."""
    from .driver import WEBGPU

    infos = WEBGPU.enumerate()
    devices = [d for d in infos if d.available]
    if not devices:
        reason = "; ".join(d.reason for d in infos) or "no adapter"
        raise UnknownTargetError(f"webgpu-spirv:host needs a WebGPU adapter, and there is none here: {reason}",
                                 hint=f"name a profile instead, e.g. --target webgpu-spirv:{DEFAULT}")
    return describe_device(devices[0])


def describe_device(info) -> TargetDesc:
    props = info.properties
    return describe("host", props["limits"], tuple(f for f in props["features"] if f == "shader-f16"), "host",
                    f"the adapter {info.name}")


def parse(spec: str) -> TargetDesc:
    key = _key(spec)
    if key in HOST_SPELLINGS:
        return host()
    row = BY_NAME.get(key or DEFAULT)
    if row is None:
        raise UnknownTargetError(f"webgpu-spirv has no profile '{spec}'",
                                 hint=suggestion(key, names()) + " (`host` uses this machine's adapter limits)")
    return describe_row(row, spec)


def default() -> tuple[TargetDesc, str]:
    desc = describe_row(BY_NAME[DEFAULT], DEFAULT)
    return desc, ("webgpu-spirv: no profile given, compiling for WebGPU's default limits (runs on every WebGPU "
                  "device); use webgpu-spirv:host for this machine's adapter")
