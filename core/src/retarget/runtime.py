"""Load a module on a device and call its functions with numpy arrays.

Loading picks the executable variant the device can run, uploads the constant
pool once, and records one command buffer per function. A call then writes the
inputs, submits that command buffer once, and reads the outputs.

A module split across placements (`--fallback`) gets a device per placement (`devices=`,
or the best one for each), with its own executable, constants and arenas there, and one
command buffer per segment of each function. A call writes each input to the placements
that read it, then goes through the steps in order: it submits a segment's command buffer
(a GPU runs it while the host goes on), and for a transfer waits for the source device
only, reads the bytes and writes them to the destination device.
"""

from __future__ import annotations

import math
import os
import threading
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

from . import dlpack
from .compiler import desc_from_json
from .errors import DeviceMemoryError, InputError, ModuleFormatError, PluginError, UnknownDeviceError, suggestion
from .ir.dtypes import dtype as lookup_dtype
from .ir.dtypes import from_numpy
from .ir.symbolic import dims_from_json, dims_to_json
from .mlir.syntax import parse_type
from .module_format import Artifact, public_functions, read
from .plugin_manager import manager
from .protocols import Binding, Device, DeviceInfo, EntryPoint, ExecutableBinary, missing_members

# Drivers tried by device="auto", best first; any other driver ranks above these.
FALLBACK_ORDER = ("local-task", "local-sync")
SINGLE = "default"  # the one placement of a module that runs on one device (format 1)


def parse_device(spec: str) -> tuple[str, str]:
    """'cuda', 'cuda:1' or IREE's 'cuda://1' -> (driver, device id)."""
    if "://" in spec:
        driver, _, device_id = spec.partition("://")
    else:
        driver, _, device_id = spec.partition(":")
    return driver, device_id


def all_devices() -> list[DeviceInfo]:
    devices = []
    for name, driver in manager().by_name("retarget_drivers").items():
        devices.extend(enumerate_devices(name, driver))
    return devices


def enumerate_devices(name: str, driver) -> list[DeviceInfo]:
    """`driver.enumerate()`, held to its contract: it must not raise, and each device names this driver
    (its `uri` is what --device takes). A device that breaks the contract is listed as unavailable, saying so."""
    try:
        infos = list(driver.enumerate())
    except Exception as e:  # enumerate must not raise; report it instead of failing
        return [DeviceInfo(name, "?", name, False, f"enumerate() raised {type(e).__name__}: {e}".replace("\n", " "))]
    return [info if info.driver == name else _misattributed(name, info) for info in infos]


def _misattributed(name: str, info: DeviceInfo) -> DeviceInfo:
    return DeviceInfo(name, info.id, info.name, False,
                      f"driver {name}'s enumerate() reports this device with DeviceInfo.driver {info.driver!r}; "
                      f"it must be the driver's name, {name!r} (a bug in the plugin)")


def open_device(spec: str):
    drivers = manager().by_name("retarget_drivers")
    name, device_id = parse_device(spec)
    driver = drivers.get(name)
    if driver is None:
        raise UnknownDeviceError(f"unknown device '{spec}': no driver '{name}'",
                                 hint=suggestion(name, drivers) + " (`retarget drivers` lists them)")
    infos = enumerate_devices(name, driver)
    available = [d for d in infos if d.available]
    if not available:
        reason = "; ".join(d.reason for d in infos if d.reason) or "it found no device"
        raise UnknownDeviceError(f"driver '{name}' has no usable device: {reason}",
                                 hint="`retarget doctor` explains how to fix it")
    device_id = device_id or available[0].id
    if device_id not in {d.id for d in available}:
        raise UnknownDeviceError(f"driver '{name}' has no device '{device_id}'",
                                 hint=f"its devices: {', '.join(d.uri for d in available)}")
    device = driver.create(device_id)
    missing = missing_members(device, Device)
    if missing:
        kind = type(device)
        raise PluginError(f"driver '{name}' made a device without {', '.join(missing)}, which "
                          "retarget.protocols.Device requires",
                          hint=f"add {'it' if len(missing) == 1 else 'them'} to {kind.__module__}.{kind.__qualname__} "
                               "(docs/plugins.md, Device), or ask the plugin's author")
    return device


def _rank(info: DeviceInfo) -> int:
    return FALLBACK_ORDER.index(info.driver) + 1 if info.driver in FALLBACK_ORDER else 0


@dataclass
class FunctionSignature:
    """A function's arguments and results. A shape may hold symbolic dimensions (`ir.symbolic.Sym`,
    known when the function is called), printed by name: `tensor<batchx3x224x224xf32>`; `symbols`
    gives each one's range ("1..64", "1.." when unbounded)."""

    name: str
    inputs: list[tuple[str, tuple, str]]  # (name, shape, dtype)
    outputs: list[tuple[tuple, str]]
    symbols: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        ins = ", ".join(f"{n}: {_type_text(s, d)}" for n, s, d in self.inputs)
        outs = ", ".join(_type_text(s, d) for s, d in self.outputs)
        where = " with " + ", ".join(f"{k}={r}" for k, r in self.symbols.items()) if self.symbols else ""
        return f"{self.name}({ins}) -> ({outs}){where}"

    def to_json(self) -> dict:
        return {"name": self.name, "signature": str(self),
                "inputs": [{"name": n, "shape": dims_to_json(s), "dtype": d} for n, s, d in self.inputs],
                "outputs": [{"shape": dims_to_json(s), "dtype": d} for s, d in self.outputs],
                "symbols": dict(self.symbols)}


def _type_text(shape, dtype) -> str:
    def dim(d):
        return str(d) if isinstance(d, int) or getattr(d, "name", None) else f"({d})"

    return "tensor<" + "".join(f"{dim(d)}x" for d in shape) + f"{dtype}>"


def _tensor_type(text: str):
    return parse_type(text)


class Function:
    """A callable function of a loaded module: numpy arrays in, numpy arrays out."""

    def __init__(self, module: LoadedModule, name: str, plan: dict):
        self.module, self.name, self.plan = module, name, plan
        self.input_types = [_tensor_type(i["type"]) for i in plan["inputs"]]
        self.output_types = [_tensor_type(o["type"]) for o in plan["outputs"]]
        self.signature = FunctionSignature(
            name,
            [(i["name"], t.shape, t.dtype.name) for i, t in zip(plan["inputs"], self.input_types)],
            [(t.shape, t.dtype.name) for t in self.output_types],
        )
        partitioned = "steps" in plan
        self.steps = plan["steps"] if partitioned else [{"op": "run", "placement": SINGLE, "program": plan["program"]}]
        sizes = plan["arena_bytes"] if partitioned else {SINGLE: plan["arena_bytes"]}
        self.arenas = {p: _allocate(module.placements[p].device, sizes.get(p, 0),
                                    f"the buffers of function '{name}'" + (f" on {p}" if partitioned else ""))
                       for p in module.placements}
        self.arena = self.arenas[module.primary]
        self._inputs = [[(p, slot) for p, slot in i["slots"].items()] if partitioned else [(SINGLE, i["slot"])]
                        for i in plan["inputs"]]
        self._outputs = [(o.get("placement", SINGLE), o["slot"]) for o in plan["outputs"]]
        self.segments = [i for i, step in enumerate(self.steps) if step["op"] == "run"]
        self.command_buffers = {i: self._record(self.steps[i]) for i in self.segments}
        self._lock = threading.Lock()
        self._checks = self._input_checks(plan["inputs"])

    def _input_checks(self, inputs: list[dict]) -> list[tuple]:
        """Each input's name in errors, type, numpy dtype and range (if any): made once, not at every call."""
        return [(f"input {i} ('{meta['name']}') of {self.name}", t, t.dtype.np_dtype, meta.get("range"))
                for i, (t, meta) in enumerate(zip(self.input_types, inputs))]

    @property
    def command_buffer(self):
        """The recorded command buffer of a function that runs as one segment (most do: those of a
        module on one device), which `retarget.bench` times and may replace by one in another mode."""
        return self.command_buffers[self._only_segment()]

    @command_buffer.setter
    def command_buffer(self, cb) -> None:
        self.command_buffers[self._only_segment()] = cb

    def _only_segment(self) -> int:
        if len(self.segments) != 1:
            raise InputError(f"function '{self.name}' runs as {len(self.segments)} segments on "
                             f"{', '.join(self.module.placements)}; this needs a function on one device",
                             hint="time the whole call instead (retarget benchmark without --per-dispatch)")
        return self.segments[0]

    def _buffer(self, placement: str, kind: str):
        return self.arenas[placement] if kind == "arena" else self.module.placements[placement].constants

    def record(self, commands: list[dict] | None = None, mode: str | None = None):
        """Record `commands` (default: the whole host program) into a new, ended command buffer over
        this function's buffers, in `mode` (one of the device's `modes`; None: its default).
        `retarget.bench` records one dispatch at a time, and each mode in turn. Only for a function
        that runs as one segment."""
        step = self.steps[self._only_segment()]
        return self._record(step if commands is None else {**step, "program": commands}, mode)

    def _record(self, step: dict, mode: str | None = None):
        placement = self.module.placements[step["placement"]]
        device = placement.device
        mode = mode or self.module.mode_on(device)
        cb = device.command_buffer() if mode is None else device.command_buffer(mode=mode)
        for cmd in step["program"]:
            if cmd["op"] == "barrier":
                cb.barrier()
            else:
                bindings = [(self._buffer(step["placement"], kind), offset, nbytes)
                            for kind, offset, nbytes in cmd["bindings"]]
                self._dispatch(cb, placement.executable, cmd, bindings)
        cb.end()
        return cb

    def _dispatch(self, cb, executable, cmd: dict, bindings) -> None:
        cb.dispatch(executable, cmd["entry"], bindings)

    def check_inputs(self, args) -> list[np.ndarray | dlpack.Borrowed]:
        """The call's arguments as C-contiguous host arrays (or arrays borrowed on this module's device),
        checked against the signature before any dispatch; an InputError names the first argument that
        does not fit.

        - device: host memory, or (through DLPack) memory of the device the module runs on, when its driver
          takes DLPack arrays (cuda); an array on another device is refused.
        - dtype: a numpy array's dtype must be the input's exactly (in either byte order); Python
          numbers and lists are converted to it when that keeps their kind (int to float is fine,
          float to int is not).
        - shape: exactly the input's.
        - layout: a non-contiguous host array (a slice, a transpose) is copied into C order; a device
          array must be C-contiguous."""
        if len(args) != len(self.input_types):
            raise InputError(f"{self.signature} takes {len(self.input_types)} inputs, got {len(args)}")
        arrays = []
        try:
            for arg, (where, t, np_dtype, value_range) in zip(args, self._checks):
                borrowed = self._borrow(arg, where)
                if borrowed is not None:
                    arrays.append(borrowed)
                    _check_borrowed(borrowed, t, where)
                    self._check_shape(borrowed, t, where)
                    continue
                a = _host_array(arg, np_dtype, where)
                if a.dtype != np_dtype:
                    if a.dtype.newbyteorder("=") != np_dtype:
                        raise InputError(f"{where} must be {t.dtype} ({np_dtype}), got {a.dtype}",
                                         hint=f"convert it, e.g. x.astype(np.{np_dtype})")
                    a = a.astype(np_dtype)
                self._check_shape(a, t, where)
                _check_range(a, value_range, where)
                arrays.append(np.require(a, requirements="C"))  # ascontiguousarray makes 0-d 1-d
        except BaseException:
            for a in arrays:
                if isinstance(a, dlpack.Borrowed):
                    a.release()
            raise
        return arrays

    def _check_shape(self, a, t, where: str) -> None:
        if a.shape != t.shape:
            raise InputError(f"{where} must have shape {list(t.shape)}, got {list(a.shape)}",
                             hint=f"the function expects {t}")

    def _select(self, arrays) -> None:
        """Called under the lock before a call runs; a function with symbolic dimensions picks the
        plan, arena and command buffer of the inputs' shape here (runtime_dynamic.py)."""

    def _borrow(self, arg, where: str) -> dlpack.Borrowed | None:
        """`arg` borrowed through DLPack when it lives on a device other than the host; None for host arrays.
        It must be on the device of the module (of its first placement, for a split one)."""
        if isinstance(arg, np.ndarray):
            return None
        if isinstance(arg, dlpack.DeviceArray) and arg.device is self.module.device:
            return dlpack.Borrowed(arg.address, arg.device.dlpack_device, arg.shape, arg.dtype,
                                   True, None, 0, False)  # our own output, fed back: no capsule to go through
        place = dlpack.device_of(arg)
        if place is None or place[0] == dlpack.CPU:
            return None
        device = self.module.device
        ours = getattr(device, "dlpack_device", None)
        if place != ours:
            here = f"this module runs on {self.module.describe_devices()}"
            raise InputError(f"{where} is an array on {dlpack.device_name(place)}; {here}",
                             hint="copy it to the host first, e.g. x.cpu().numpy()" if ours is None else
                             f"move it to {dlpack.device_name(ours)}, or copy it to the host")
        return dlpack.borrow(arg, stream=getattr(device, "dlpack_stream", None))

    def __call__(self, *args, output: str | None = None):
        """Run the function. Inputs: numpy arrays (or anything numpy reads), or arrays on the module's
        device through DLPack. `output`: "host" returns numpy arrays, "device" `retarget.DeviceArray`s
        that stay on the device (DLPack out, e.g. `torch.from_dlpack(y)`); the default is "device" when an
        input came from the device, else "host"."""
        arrays = self.check_inputs(args)
        borrowed = [a for a in arrays if isinstance(a, dlpack.Borrowed)]
        placements = self.module.placements
        if output is None:
            output = "device" if borrowed else "host"
        if output not in ("host", "device"):
            raise InputError(f"output must be 'host' or 'device', not {output!r}")
        if output == "device":
            for p, _ in self._outputs:
                if getattr(placements[p].device, "dlpack_device", None) is None:
                    raise InputError(f"{placements[p].device.info.uri} cannot hand out device arrays (its driver "
                                     "has no DLPack support)", hint="leave out output='device' to get numpy arrays")
        try:
            with self._lock:
                self._select(arrays)
                for a, slots in zip(arrays, self._inputs):
                    for p, (_, offset, _) in slots:
                        device = placements[p].device
                        if not isinstance(a, dlpack.Borrowed):
                            device.write(self.arenas[p], offset, a)
                        elif device is self.module.device:  # on the device already: a device-side copy
                            device.copy(device.wrap(a.address, a.nbytes), 0, self.arenas[p], offset, a.nbytes)
                        else:  # a placement on another device: through the host
                            home = self.module.device
                            device.write(self.arenas[p], offset, home.read(home.wrap(a.address, a.nbytes), 0, a.nbytes))
                busy = []  # devices with work submitted and not yet waited for
                for i, step in enumerate(self.steps):
                    if step["op"] == "run":
                        device = placements[step["placement"]].device
                        device.submit(self.command_buffers[i])
                        if device not in busy:
                            busy.append(device)
                    else:  # a transfer waits for its source device only, not for the others
                        src, dst = placements[step["from"]].device, placements[step["to"]].device
                        if src in busy:
                            src.wait()
                            busy.remove(src)
                        kind, offset, nbytes = step["src"]
                        data = src.read(self._buffer(step["from"], kind), offset, nbytes)
                        kind, offset, _ = step["dst"]
                        dst.write(self._buffer(step["to"], kind), offset, data)
                outs = []
                if output == "device":  # copied out in stream order, before the wait
                    for t, (p, (kind, offset, nbytes)) in zip(self.output_types, self._outputs):
                        device = placements[p].device
                        held = _allocate(device, nbytes, f"an output of function '{self.name}'")
                        device.copy(self._buffer(p, kind), offset, held, 0, nbytes)
                        outs.append(dlpack.DeviceArray(device, held, t.shape, t.dtype))
                        if device not in busy:
                            busy.append(device)
                for device in busy:
                    device.wait()
                if output == "host":
                    for t, (p, (kind, offset, nbytes)) in zip(self.output_types, self._outputs):
                        raw = placements[p].device.read(self._buffer(p, kind), offset, nbytes)
                        outs.append(raw.view(t.dtype.np_dtype).reshape(t.shape))
        finally:
            for a in borrowed:
                a.release()
        return outs[0] if len(outs) == 1 else tuple(outs)


def _check_borrowed(a: dlpack.Borrowed, t, where: str) -> None:
    if a.dtype != t.dtype:
        raise InputError(f"{where} must be {t.dtype}, got a device array of {a.dtype}",
                         hint="convert it on the device first, e.g. x.to(torch.float32)")
    if not a.contiguous:
        raise InputError(f"{where} is a non-contiguous device array", hint="make it contiguous, e.g. x.contiguous()")


def _allocate(device, nbytes: int, what: str):
    try:
        return device.allocate(max(nbytes, 1))
    except MemoryError:
        raise DeviceMemoryError(f"{device.info.uri} cannot allocate {nbytes:,} bytes for {what}",
                                hint="free memory, or use a device with more") from None


def _check_range(a: np.ndarray, value_range: list | None, where: str) -> None:
    """An input whose type a target of the function holds only within a range (`SupportTable.ranges`)."""
    if value_range is None or not a.size:
        return
    lo, hi, why = value_range
    outside = a[(a < lo) | (a > hi)]
    if outside.size:
        raise InputError(f"{where} holds {outside.flat[0]}, outside [{lo}, {hi}]: {why}",
                         hint="keep its values within that range, or compile for a target that holds them")


def _host_array(arg, np_dtype, where: str) -> np.ndarray:
    if isinstance(arg, np.ndarray):
        return arg
    try:
        natural = np.asarray(arg)
    except (ValueError, TypeError, RuntimeError) as e:  # ragged lists; torch's tensors that require grad
        raise InputError(f"{where} is not an array ({type(arg).__name__}: {e})",
                         hint="pass a numpy array") from None
    if hasattr(arg, "__array__") or hasattr(arg, "__array_interface__") or hasattr(arg, "__dlpack__"):
        return natural  # an array of another library: its dtype is its own, and must match
    if natural.dtype.kind not in "biuf" or not np.can_cast(natural.dtype, np_dtype, "same_kind"):
        raise InputError(f"{where} must be {np.dtype(np_dtype)} numbers, got {type(arg).__name__} of {natural.dtype}",
                         hint="pass a numpy array of the input's dtype")
    return natural.astype(np_dtype)


def _entry_point(e: dict) -> EntryPoint:
    """An entry point as the manifest holds it; a dynamic one's shapes and count are dimensions."""
    bindings = []
    for b in e["bindings"]:
        t = _tensor_type(b["type"])
        if "shape" in b:
            t = type(t)(dims_from_json(b["shape"]), t.dtype)
        bindings.append(Binding(t, b["access"]))
    count = dims_from_json(e["workgroup_count"]) if e.get("scalars") else tuple(e["workgroup_count"])
    return EntryPoint(e["name"], tuple(bindings), tuple(e["workgroup_size"]), count, tuple(e.get("scalars", ())))


@dataclass
class Placement:
    """Where one placement of a loaded module runs: its device, the executable variant that device
    runs, that executable loaded, and the placement's constants uploaded."""

    name: str
    device: object
    variant: ExecutableBinary
    executable: object
    constants: object


class LoadedModule:
    """A module on a device (or, split across placements, on one device each). Functions are
    attributes: `m.predict(x)`. `placements` maps each placement to where it runs; `device`,
    `variant` and `executable` are those of the first (the only one, for most modules). `mode` is the
    command-buffer mode its devices run in (None: each device's default)."""

    def __init__(self, artifact: Artifact, device_spec: str = "auto", devices: dict[str, str] | None = None,
                 mode: str | None = None):
        self.artifact = artifact
        manifest = artifact.manifest
        spans = {p: meta["constants"] for p, meta in manifest["placements"].items()} \
            if "placements" in manifest else {SINGLE: [0, len(artifact.constants())]}
        self._opened: dict[str, object] = {}
        choices = self._choose_all(device_spec, devices, list(spans))
        self.mode = mode
        if mode is not None and not any(mode in (getattr(d, "modes", None) or ()) for d, _ in choices.values()):
            uris = ", ".join(d.info.uri for d, _ in choices.values())
            modes = list(dict.fromkeys(m for d, _ in choices.values() for m in getattr(d, "modes", None) or ()))
            raise InputError(f"{uris} has no command-buffer mode '{mode}'",
                             hint=f"its modes: {', '.join(modes)}" if modes else "it runs command buffers one way; "
                             "leave out the mode")
        constants = artifact.constants()
        self.placements: dict[str, Placement] = {}
        for p, (device, variant) in choices.items():
            offset, nbytes = spans[p]
            buffer = _allocate(device, nbytes, "the module's constants" + (f" on {p}" if p != SINGLE else ""))
            if nbytes:
                device.write(buffer, 0, np.asarray(constants[offset:offset + nbytes]))
            self.placements[p] = Placement(p, device, variant, device.load_executable(variant), buffer)
        self.primary = next(iter(self.placements))
        first = self.placements[self.primary]
        self.device, self.variant, self.executable, self.constants = (first.device, first.variant,
                                                                      first.executable, first.constants)
        from .runtime_dynamic import DynamicFunction
        from .runtime_staged import StagedFunction

        made = {name: (DynamicFunction if "symbols" in plan else Function)(self, name, plan)
                for name, plan in artifact.functions.items()}
        public = public_functions(manifest)
        self.functions = {name: made[name] for name in public if name in made}
        self.functions.update({name: StagedFunction(self, name, chain, made)
                               for name, chain in manifest.get("staged", {}).items()})

    def _variants(self) -> list[tuple[str, ExecutableBinary]]:
        out = []
        for exe in self.artifact.manifest["executables"]:
            try:
                entries = [_entry_point(e) for e in exe["entry_points"]]
                data = self.artifact.entries[exe["path"]]
                binary = ExecutableBinary(exe["format"], desc_from_json(exe["target"]), bytes(data), entries)
                out.append((exe.get("placement", SINGLE), binary))
            except (KeyError, TypeError, ValueError) as e:
                raise ModuleFormatError(f"executable entry is malformed ({e})", hint="recompile the module") from None
        return out

    def _choose_all(self, spec: str, devices: dict[str, str] | None, names: list[str]) -> dict:
        """(device, variant) for each placement: `devices[p]`, else `spec` where it runs p, else the best."""
        variants = self._variants()
        devices = devices or {}
        if devices and names == [SINGLE]:
            named = ", ".join(f"{p}={d}" for p, d in devices.items())
            raise InputError(f"{named} names a device per placement, and this module runs on one device (compiling "
                             "with --fallback split nothing off)",
                             hint="name one device: `--device vulkan` (retarget run, benchmark) or device='vulkan' "
                                  "(retarget.load)")
        unknown = [p for p in devices if p not in names]
        if unknown:
            raise UnknownDeviceError(f"the module has no placement '{unknown[0]}'",
                                     hint=f"its placements: {', '.join(names)} (`retarget run --list-functions` "
                                          "shows where each runs)")
        mine = {p: [v for q, v in variants if q == p] for p in names}
        if names == [SINGLE]:
            return {SINGLE: self._choose(spec, mine[SINGLE], SINGLE)}
        shared = None if spec == "auto" else self._open(spec)  # one device for a split module: where it fits
        out = {}
        for p in names:
            if p in devices:
                out[p] = self._choose(devices[p], mine[p], p)
            elif shared is not None and _fits(shared, mine[p]) is not None:
                out[p] = (shared, _fits(shared, mine[p]))
            else:
                out[p] = self._choose("auto", mine[p], p)
        if shared is not None and not any(device is shared for device, _ in out.values()):
            held = "; ".join(f"{p}: {', '.join(v.target.name for v in mine[p])}" for p in names)
            raise UnknownDeviceError(f"the module holds no code that {shared.info.uri} can run "
                                     f"(its placements: {held})",
                                     hint="name a device per placement, e.g. "
                                          + " ".join(f"--device {p}=..." for p in names))
        return out

    def _open(self, spec: str):
        if spec not in self._opened:
            self._opened[spec] = open_device(spec)
        return self._opened[spec]

    def _choose(self, spec: str, variants: list[ExecutableBinary], placement: str):
        # The numpy reference runs anywhere but slowly: native code goes first when both fit.
        variants = sorted(variants, key=lambda v: v.target.backend == "vmvx")
        held = ", ".join(v.target.name for v in variants) or "none"
        what = "the module" if placement == SINGLE else f"placement '{placement}' of the module"
        if spec != "auto":
            device = self._open(spec)
            reasons = []
            for v in variants:
                reason = device.can_load(v.format, v.target)
                if reason is None:
                    return device, v
                reasons.append(f"{v.target.name}: {reason}")
            raise UnknownDeviceError(
                f"{what} holds no code that {device.info.uri} can run (it holds {held}; {'; '.join(reasons)})",
                hint=_recompile_hint(device.info.driver))
        infos = all_devices()
        refusals = []  # what each device that loads the module's formats said
        for info in sorted((d for d in infos if d.available), key=_rank):
            try:
                device = self._open(info.uri)
            except UnknownDeviceError:
                continue
            for v in variants:
                reason = device.can_load(v.format, v.target)
                if reason is None:
                    return device, v
                if v.format in getattr(device, "formats", ()):
                    refusals.append(f"{info.uri} refuses {v.target.name}: {reason}")
        from . import targets

        runners = {d for v in variants for d in getattr(targets().get(v.target.backend), "drivers", ())}
        absent = [f"{d.uri} is unavailable: {d.reason}" for d in infos if not d.available and d.driver in runners]
        why = "; ".join(refusals + absent)
        raise UnknownDeviceError(f"no available device can run {what} (it holds {held})" + (f": {why}" if why else ""),
                                 hint="`retarget devices` lists devices; `retarget doctor` says what is missing"
                                 + (f"; name one with devices={{'{placement}': ...}}" if placement != SINGLE else ""))

    def __getattr__(self, name: str) -> Function:
        functions = self.__dict__.get("functions", {})
        if name in functions:
            return functions[name]
        raise AttributeError(f"module has no function '{name}'; it has {', '.join(functions)}")

    def function(self, name: str) -> Function:
        if name not in self.functions:
            raise InputError(f"the module has no function '{name}'",
                             hint=f"its functions: {', '.join(self.functions)}")
        return self.functions[name]

    def mode_on(self, device) -> str | None:
        """The command-buffer mode for `device`: the module's, where the device has it, else its default."""
        return self.mode if self.mode in (getattr(device, "modes", None) or ()) else None

    def describe_devices(self) -> str:
        """Where it runs: `vulkan:0`, or `gpu=vulkan:0 cpu=local-task:0` for a split module."""
        if list(self.placements) == [SINGLE]:
            return self.device.info.uri
        return " ".join(f"{p}={pl.device.info.uri}" for p, pl in self.placements.items())


def _recompile_hint(driver: str) -> str:
    """How to compile for a device of `driver`: the targets whose code it runs (their `drivers`)."""
    if driver in FALLBACK_ORDER:
        return "recompile with --target vmvx or llvm-cpu:host"
    from . import targets

    names = [name for name, backend in targets().items() if driver in getattr(backend, "drivers", ())]
    return (f"recompile for this device, e.g. --target {names[0]}:host" if names
            else f"recompile for a target whose code the {driver} driver runs (`retarget targets` lists them)")


def _fits(device, variants: list[ExecutableBinary]):
    """The first of `variants` that `device` can load (native code before vmvx's), or None."""
    ordered = sorted(variants, key=lambda v: v.target.backend == "vmvx")
    return next((v for v in ordered if device.can_load(v.format, v.target) is None), None)


def load(source, device: str = "auto", *, devices: dict[str, str] | None = None, mode: str | None = None,
         trusted_keys=None) -> LoadedModule:
    """Load a module (an `Artifact` or a .rtm path) onto `device`.

    A module split across placements (compiled with `fallback=`) runs each placement on a device:
    `devices` maps placements to devices (`{"gpu": "vulkan", "cpu": "local-task"}`); a placement
    it leaves out runs on `device` when that device can run it, else on the best available device
    ("auto" picks the best for each placement).

    `mode` picks how the devices run the recorded command buffers, one of their `modes` (cuda: "graph",
    the default, "stream" or "direct"; None: each device's default).

    With `trusted_keys` (Ed25519 public keys: paths of PEM files, PEM bytes, or raw keys) a module file
    must be signed by one of them (`retarget compile --sign KEY`), or it is refused with a SignatureError."""
    if isinstance(source, Artifact):
        if trusted_keys is not None:
            raise InputError("trusted_keys checks the signature of a module file; an Artifact in memory has none",
                             hint="save it and load the file, or leave out trusted_keys")
        return LoadedModule(source, device, devices, mode)
    return LoadedModule(read(source, trusted_keys=trusted_keys), device, devices, mode)


def input_spelling(t) -> str:
    """A static tensor type as `parse_input` reads it, without its values: `1x16xf32`."""
    return "x".join([*map(str, t.shape), t.dtype.name])


def parse_input(text: str) -> np.ndarray:
    """IREE's --input syntax: `2x2xf32=1 2 3 4`, `1x224xf32=0` (splat), `f32=1.5`, `@x.npy`."""
    if text.startswith("@"):
        return read_npy(text[1:])
    shape_text, sep, values = text.partition("=")
    if not sep:
        raise InputError(f"input '{text}' has no '='",
                         hint="write SHAPExDTYPE=VALUES, e.g. 2x2xf32=1 2 3 4, or @file.npy")
    *dims, dtype_name = shape_text.split("x")
    try:
        shape = tuple(int(d) for d in dims)
        dt = lookup_dtype(dtype_name)
    except (ValueError, KeyError):
        raise InputError(f"input '{text}': '{shape_text}' is not SHAPExDTYPE",
                         hint="e.g. 1x224x224x3xf32; dtypes: f32, f16, bf16, i8, i32, i64, i1") from None
    if any(d < 0 for d in shape):
        raise InputError(f"input '{text}': a dimension is negative")
    tokens = values.replace(",", " ").replace("[", " ").replace("]", " ").split()
    try:
        numbers = [float(t) if dt.is_float else int(t) for t in tokens]
    except ValueError:
        raise InputError(f"input '{text}': values must be numbers separated by spaces") from None
    if dt.is_integer and dt.kind != "bool":
        info = ml_dtypes.iinfo(dt.np_dtype)
        wrong = next((v for v in numbers if not info.min <= v <= info.max), None)
        if wrong is not None:
            raise InputError(f"input '{text}': {wrong} does not fit {dt} ({info.min} to {info.max})")
    count = math.prod(shape)
    if len(numbers) not in (1, count):
        raise InputError(f"input '{text}': {len(numbers)} values for shape {list(shape)}, "
                         f"which needs {count} (or 1 to splat)")
    try:
        flat = np.array(numbers, dtype=np.float64 if dt.is_float else dt.np_dtype).astype(dt.np_dtype)
        return np.full(shape, flat[0], dtype=dt.np_dtype) if len(numbers) == 1 else flat.reshape(shape)
    except (ValueError, MemoryError) as e:  # numpy's size limits, or this machine's memory
        raise InputError(f"input '{text[:60]}': cannot make a {'x'.join(map(str, shape))}x{dt} array ({e})",
                         hint="pass a large input with @file.npy, or make it smaller") from None


def read_npy(path: str) -> np.ndarray:
    """A .npy file, read without trusting it: no pickled objects, and the shape in its header
    checked against the file's size before anything is allocated."""
    fmt = np.lib.format
    try:
        with open(path, "rb") as f:
            version = fmt.read_magic(f)
            if version not in ((1, 0), (2, 0)):
                raise ValueError(f".npy format version {version[0]}.{version[1]} is not supported")
            header = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
            shape, fortran_order, dtype = header(f)
            offset = f.tell()
            size = os.fstat(f.fileno()).st_size
            if dtype.hasobject:
                raise ValueError("it holds Python objects, which would need pickle")
            native = dtype.newbyteorder("=")
            if not _has_element_type(native):
                raise InputError(f"input file {path} holds {dtype}, which retarget has no element type for",
                                 hint="save it as float32, float16, int8, int32, int64, bool, ...")
            if any(d < 0 for d in shape):
                raise ValueError(f"its header has a negative dimension in {shape}")
            nbytes = math.prod(shape) * dtype.itemsize
            if nbytes > size - offset:
                raise ValueError(f"its header promises {nbytes:,} bytes of data and the file holds {size - offset:,}")
            data = f.read(nbytes)
        array = np.frombuffer(data, dtype=dtype).reshape(shape, order="F" if fortran_order else "C")
        return np.require(array, native, "C")  # as ascontiguousarray, but a 0-d array stays 0-d
    except InputError:
        raise
    except OSError as e:
        raise InputError(f"cannot read input file {path}: {e.strerror or e}", hint="check the path") from None
    except Exception as e:  # numpy's header reader raises ValueError, SyntaxError, TypeError, ... on garbage
        raise InputError(f"input file {path} is not a valid .npy file: {e}",
                         hint="give a .npy file saved with np.save (one array; not .npz)") from None


def _has_element_type(np_dtype) -> bool:
    try:
        from_numpy(np_dtype)
        return True
    except (KeyError, TypeError):
        return False
