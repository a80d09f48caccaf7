"""What plugin hooks return: small protocols and the plain data they exchange.

`hookspecs.py` says which hook returns which of these. A plugin implements the
protocols with any class it likes; nothing here is meant to be subclassed.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .ir.core import Function, Module, TensorType

# -- plain data -----------------------------------------------------------------------------


@dataclass(frozen=True)
class TargetDesc:
    """One concrete architecture of a target backend, with the limits codegen needs.

    `arch` is the canonical name (`sm_90`, `gfx942`, `x86-64-v3`); `spec` is what the
    user wrote. `format` names the executable format that `compile` produces; a
    device advertises the formats it can load.

    `extra` holds what codegen reads beyond these fields, among them `extra["fragments"]`:
    the matrix-multiply-accumulate shapes the target runs, a list of
    `{"m": 16, "n": 16, "k": 16, "a": "f16", "b": "f16", "acc": "f32", "width": 32}`
    (A is m x k of type a, B k x n of type b, the accumulator of type acc, each fragment
    held by `width` threads); the GPU lowering's tiled fragment matmul uses them (see
    `retarget.kernel.lower`). A target without it never gets fragment statements.
    """

    backend: str
    arch: str
    format: str
    spec: str = ""
    features: tuple[str, ...] = ()
    subgroup_size: int | None = None
    subgroup_sizes: tuple[int, ...] = ()
    max_workgroup_size: int = 1
    max_workgroup_dims: tuple[int, int, int] = (1, 1, 1)
    shared_memory_bytes: int = 0
    fp16: bool = False
    int8: bool = False
    matrix_units: tuple[str, ...] = ()
    extra: dict = field(default_factory=dict, hash=False, compare=False)

    @property
    def name(self) -> str:
        return f"{self.backend}:{self.arch}"


@dataclass(frozen=True)
class SupportTable:
    """What a target cannot run, each entry with the reason a user reads (`--explain`, errors);
    everything not listed, it runs. A backend returns one from its optional `support(desc)`.

    - `ops`: graph op names (`"rt.erf"`), refused whatever their types, or an op at one element
      type or kind (`"rt.exp:i32"`, `"rt.exp:int"`; kinds: float, int, uint, bool). An op is
      matched at the type of its first operand (its result's when it has none): `rt.cmp` of
      f32 is `"rt.cmp:f32"`, whatever its i1 result.
    - `dtypes`: element types the target neither computes in nor stores (`"i4"`).
    - `buffers`: element types a kernel cannot read or write as a buffer (an argument or the
      result of a dispatch), though a fused kernel may compute them inside (WGSL's i1 masks).
    - `ranges`: element types the target holds only within a range, as `(lo, hi, why)` (a target
      that computes i64 in 32 bits). The compiler refuses constants outside it and records it on the
      functions' inputs of that type, and the runtime refuses a call whose inputs leave it.

    The compiler places an op on a target only where its table allows it (`--fallback` takes
    the rest), so a table must not allow what `compile` then refuses; refusing more than needed
    only moves work to the fallback. `retarget.testing.support.probe` finds what a target
    refuses in practice.
    """

    ops: dict[str, str] = field(default_factory=dict)
    dtypes: dict[str, str] = field(default_factory=dict)
    buffers: dict[str, str] = field(default_factory=dict)
    ranges: dict[str, tuple[int, int, str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Binding:
    """One buffer an entry point reads or writes, and the tensor it holds (its shape may have
    symbolic dimensions, of the entry point's `scalars`)."""

    type: TensorType
    access: str  # "read" or "write"


@dataclass(frozen=True)
class EntryPoint:
    """A kernel of an executable. A dynamic entry point (one compiled for symbolic dimensions) takes
    the values of the symbols `scalars` (names, in order) with each dispatch; its bindings' shapes
    and its `workgroup_count` are then dimensions of them (`ir.symbolic.Sym`), which the host
    evaluates and passes to `CommandBuffer.dispatch`."""

    name: str
    bindings: tuple[Binding, ...]
    workgroup_size: tuple[int, int, int] = (1, 1, 1)
    workgroup_count: tuple = (1, 1, 1)  # ints; or ints and Syms of `scalars`
    scalars: tuple[str, ...] = ()

    def binding_types(self, scalars=()) -> list[TensorType]:
        """The bindings' tensor types, a dynamic entry point's at these values of its `scalars`."""
        if not self.scalars:
            return [b.type for b in self.bindings]
        from .ir.symbolic import evaluate_shape

        sizes = dict(zip(self.scalars, (int(v) for v in scalars)))
        return [TensorType(evaluate_shape(b.type.shape, sizes), b.type.dtype) for b in self.bindings]

    def check_dispatch(self, bindings, scalars=()) -> list[TensorType]:
        """A driver's checks of a dispatch: ValueError unless `bindings` ((buffer, offset, nbytes) each, the
        buffer with `nbytes`) and `scalars` fit this entry point; returns the bindings' types at these sizes."""
        if len(bindings) != len(self.bindings):
            raise ValueError(f"{self.name} takes {len(self.bindings)} bindings, got {len(bindings)}")
        if len(scalars) != len(self.scalars):
            raise ValueError(f"{self.name} takes {len(self.scalars)} scalars ({', '.join(self.scalars)}), "
                             f"got {len(scalars)}")
        types = self.binding_types(scalars)
        for (buf, offset, nbytes), t in zip(bindings, types):
            if nbytes < t.nbytes or offset < 0 or offset + nbytes > buf.nbytes:
                raise ValueError(f"{self.name}: binding of {nbytes} bytes at {offset} cannot hold {t}")
        return types


@dataclass
class ExecutableBinary:
    """What a target's `compile` returns: one blob holding every dispatch's kernel."""

    format: str
    target: TargetDesc
    data: bytes
    entry_points: list[EntryPoint]
    listing: str | None = None  # a readable form (kernel IR, generated source) for --dump-after-all


@dataclass
class DeviceInfo:
    """A device as `Driver.enumerate` reports it. An unavailable one says why."""

    driver: str
    id: str
    name: str
    available: bool = True
    reason: str = ""
    properties: dict = field(default_factory=dict)

    @property
    def uri(self) -> str:
        return f"{self.driver}:{self.id}"


# -- protocols -----------------------------------------------------------------------------


@runtime_checkable
class TargetBackend(Protocol):
    """A compiler target: turns dispatch functions into an executable for one architecture.

    `name` is what `--target` starts with; `drivers` lists the drivers that can run
    its output. `parse(spec)` resolves every spelling of an architecture in the
    plugin's table (raising `UnknownTargetError` with the closest names);
    `default()` is the architecture used when none is given, with a one-line note
    saying which was chosen and why (None when there is no choice to announce);
    `describe(device)` is the architecture matching a live device. `compile` gets the
    dispatches (one graph `Function` each, named after its entry point).

    Optional: `support(desc) -> SupportTable`, what the target cannot run for that architecture
    (the ops and element types it refuses, with the reasons). The compiler places only what it
    allows on the target, and the rest on `--fallback`. A backend without it supports everything
    as far as placement knows, and a refusal surfaces only when `compile` raises.

    Optional: `export(artifact, folder, arch) -> Path`, for `retarget export`: write the module's
    code of architecture `arch` (an executable the module holds) as files that run outside
    retarget (webgpu-spirv: a folder that a web page loads); returns the path of its main file.
    """

    name: str
    drivers: tuple[str, ...]

    def names(self) -> Sequence[str]: ...
    def parse(self, spec: str) -> TargetDesc: ...
    def default(self) -> tuple[TargetDesc, str | None]: ...
    def describe(self, device: Device) -> TargetDesc: ...
    def compile(self, dispatches: list[Function], desc: TargetDesc) -> ExecutableBinary: ...


@runtime_checkable
class Driver(Protocol):
    """A HAL driver. `enumerate` is cheap and never raises for a missing library:
    it returns the device as unavailable, with the reason. `create` opens one."""

    name: str

    def enumerate(self) -> list[DeviceInfo]: ...
    def create(self, device_id: str) -> Device: ...
    def dump(self, device_id: str) -> dict: ...


@runtime_checkable
class Buffer(Protocol):
    """Device memory of `nbytes` bytes."""

    nbytes: int


@runtime_checkable
class Executable(Protocol):
    """A loaded `ExecutableBinary`; its entry points are dispatched by index."""

    entry_points: list[EntryPoint]


@runtime_checkable
class CommandBuffer(Protocol):
    """Recorded work. Commands between two barriers may run in any order or at once.
    A command buffer is recorded once and may be submitted many times. A range outside
    a buffer raises ValueError when it is recorded; recording after `end` raises RuntimeError.

    `copy` and `fill` are given offsets and sizes that are multiples of 4 (what every API supports);
    a driver may accept others too, or raise ValueError for them. `fill` repeats one byte,
    `value` (0 to 255), over `nbytes`.

    Optional (dynamic shapes): `dispatch(..., scalars=(...), workgroup_count=(x, y, z))` records a
    dispatch of a dynamic entry point: `scalars` are the values of its `EntryPoint.scalars` (ints,
    in order), which the kernel receives (kernel arguments, push constants, a uniform: the
    backend's choice), and `workgroup_count` replaces the entry point's symbolic one. A command
    buffer whose `dispatch` takes these keywords supports dynamic entry points; the runtime
    records one command buffer per concrete shape."""

    def dispatch(self, executable: Executable, entry: int, bindings: Sequence[tuple[Buffer, int, int]]) -> None: ...
    def copy(self, src: Buffer, src_offset: int, dst: Buffer, dst_offset: int, nbytes: int) -> None: ...
    def fill(self, buffer: Buffer, offset: int, nbytes: int, value: int) -> None: ...
    def barrier(self) -> None: ...
    def end(self) -> None: ...


@runtime_checkable
class Device(Protocol):
    """An open device: memory, executables, command buffers.

    `formats` lists the executable formats it loads; `can_load(binary_meta)`
    returns None, or the reason an executable for another arch cannot run here.
    `write`/`read` move host bytes (a range outside the buffer raises ValueError);
    `submit` runs a command buffer and `wait` blocks until all submitted work is done.

    `info` is the `DeviceInfo` that its driver's `enumerate` reported for it. `command_buffer()`
    is called without arguments unless the device lists `modes` (below).

    Optional: a device that can run command buffers in several ways lists them in
    `modes`, the default first (CUDA: `("graph", "direct")`), and accepts
    `command_buffer(mode=...)`. A device without `modes` has one way.

    Optional: `memory_in_use()` returns the bytes of device memory in use, as the API reports
    them (cuMemGetInfo) or as the driver tracks them (its allocations); leak checks
    (`retarget.testing.leaks`) read it. A device without it is checked by host memory alone.

    Optional, for DLPack (arrays of other libraries in, `retarget.DeviceArray` out; see
    `retarget.dlpack`): `dlpack_device` (DLPack's (device type, id) of this device), `dlpack_stream`
    (what a producer's `__dlpack__(stream=...)` gets, or None), `wrap(address, nbytes)` (memory someone
    else owns as a Buffer, never freed by the device), `address(buffer)` (a buffer's device address; asked
    once for each DeviceArray made, so a driver may take it as the buffer going to the user),
    and `copy(src, src_offset, dst, dst_offset, nbytes)` (a device-side copy, ordered with the
    device's other work, as `write` is). A device without them takes and returns host arrays only.
    """

    info: DeviceInfo
    formats: tuple[str, ...]

    def can_load(self, format: str, target: TargetDesc) -> str | None: ...
    def allocate(self, nbytes: int) -> Buffer: ...
    def write(self, buffer: Buffer, offset: int, data: np.ndarray) -> None: ...
    def read(self, buffer: Buffer, offset: int, nbytes: int) -> np.ndarray: ...
    def load_executable(self, binary: ExecutableBinary) -> Executable: ...
    def command_buffer(self) -> CommandBuffer: ...
    def submit(self, command_buffer: CommandBuffer) -> None: ...
    def wait(self) -> None: ...


@runtime_checkable
class Importer(Protocol):
    """A frontend. `accepts(source)` says whether it reads this source (a path, or
    an in-memory model); `load(source, **options)` returns a graph `Module`.
    `suffixes` are the file extensions it claims, for messages and `--help`."""

    name: str
    suffixes: tuple[str, ...]

    def accepts(self, source: Any) -> bool: ...
    def load(self, source: Any, **options) -> Module: ...


@runtime_checkable
class ExecutableLoader(Protocol):
    """Loads executables of one `format` for the host-memory drivers (`local-sync`,
    `local-task`). `load` returns one `bind` callable per entry point: when a command
    buffer is recorded, `bind(views)` gets numpy views of the bindings (in entry-point
    order) and returns `run(workgroup_id)`, which the driver calls for each workgroup,
    possibly from several threads at once. For a dynamic entry point (one with `scalars`)
    the driver calls `bind(views, scalars)`, the views at this dispatch's shapes and
    `scalars` the symbols' values in the entry point's order.

    Optionally, so that a recorded command buffer runs without coming back to Python between
    workgroups: `run.native` is `(function, bindings)`, the address of a C function
    `void f(void **bindings, int64_t x, int64_t y, int64_t z)` that runs one workgroup and the
    address of its binding table; and the loader's `native_runner` has `program(stages)`, which
    takes stages of `(function, bindings, (gx, gy, gz))` (in order; a stage's dispatches do not
    depend on each other) and returns a program with `start() -> epoch` and `work(epoch)`. The
    drivers call `start` once per submit, then `work` from each of their threads: `work` takes
    workgroups until the run is over, and returns then in the submitting thread (a thread that
    arrives late, or never, must not stop it). The addresses stay valid while the command buffer
    lives. A loader without these runs each workgroup through `run`."""

    format: str

    def load(
        self, binary: ExecutableBinary
    ) -> list[Callable[[list[np.ndarray]], Callable[[tuple[int, int, int]], None]]]: ...
    def can_load(self, target: TargetDesc) -> str | None: ...


def missing_members(obj: Any, protocol: type) -> list[str]:
    """The members of `protocol` that `obj` lacks: why `isinstance(obj, protocol)` is False, by name."""
    members: dict[str, None] = {}
    for cls in reversed(protocol.__mro__):
        if cls is not Protocol and getattr(cls, "_is_protocol", False):
            names = (*inspect.get_annotations(cls), *cls.__dict__)
            members.update(dict.fromkeys(n for n in names if not n.startswith("_")))
    return [name for name in members if not hasattr(obj, name)]
