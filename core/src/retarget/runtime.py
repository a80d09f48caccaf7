"""Load a module on a device and call its functions with numpy arrays.

Loading picks the executable variant the device can run, uploads the constant
pool once, and records one command buffer per function. A call then writes the
inputs, submits that command buffer once, and reads the outputs.
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
from .errors import DeviceMemoryError, InputError, ModuleFormatError, UnknownDeviceError, suggestion
from .ir.dtypes import dtype as lookup_dtype
from .ir.dtypes import from_numpy
from .ir.symbolic import dims_from_json, dims_to_json
from .mlir.syntax import parse_type
from .module_format import Artifact, read
from .plugin_manager import manager
from .protocols import Binding, DeviceInfo, EntryPoint, ExecutableBinary

# Drivers tried by device="auto", best first; any other driver ranks above these.
FALLBACK_ORDER = ("local-task", "local-sync")


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
        try:
            devices.extend(driver.enumerate())
        except Exception as e:  # enumerate must not raise; report it instead of failing
            devices.append(DeviceInfo(name, "?", name, False, f"enumerate() raised {type(e).__name__}: {e}"))
    return devices


def open_device(spec: str):
    drivers = manager().by_name("retarget_drivers")
    name, device_id = parse_device(spec)
    driver = drivers.get(name)
    if driver is None:
        raise UnknownDeviceError(f"unknown device '{spec}': no driver '{name}'",
                                 hint=suggestion(name, drivers) + " (`retarget drivers` lists them)")
    infos = driver.enumerate()
    available = [d for d in infos if d.available]
    if not available:
        reason = "; ".join(d.reason for d in infos if d.reason) or "it found no device"
        raise UnknownDeviceError(f"driver '{name}' has no usable device: {reason}",
                                 hint="`retarget doctor` explains how to fix it")
    device_id = device_id or available[0].id
    if device_id not in {d.id for d in available}:
        raise UnknownDeviceError(f"driver '{name}' has no device '{device_id}'",
                                 hint=f"its devices: {', '.join(d.uri for d in available)}")
    return driver.create(device_id)


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
        device = module.device
        self.arena = _allocate(device, plan["arena_bytes"], f"the buffers of function '{name}'")
        self.command_buffer = self.record()
        self._lock = threading.Lock()

    def _buffer(self, kind: str):
        return self.arena if kind == "arena" else self.module.constants

    def record(self, commands: list[dict] | None = None, mode: str | None = None):
        """Record `commands` (default: the whole host program) into a new, ended command buffer over
        this function's buffers, in `mode` (one of the device's `modes`; None: its default).
        `retarget.bench` records one dispatch at a time, and each mode in turn."""
        device = self.module.device
        mode = mode or self.module.mode
        cb = device.command_buffer() if mode is None else device.command_buffer(mode=mode)
        for cmd in self.plan["program"] if commands is None else commands:
            if cmd["op"] == "barrier":
                cb.barrier()
            else:
                bindings = [(self._buffer(kind), offset, nbytes) for kind, offset, nbytes in cmd["bindings"]]
                self._dispatch(cb, cmd, bindings)
        cb.end()
        return cb

    def _dispatch(self, cb, cmd: dict, bindings) -> None:
        cb.dispatch(self.module.executable, cmd["entry"], bindings)

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
            for i, (arg, t, meta) in enumerate(zip(args, self.input_types, self.plan["inputs"])):
                where = f"input {i} ('{meta['name']}') of {self.name}"
                borrowed = self._borrow(arg, where)
                if borrowed is not None:
                    arrays.append(borrowed)
                    _check_borrowed(borrowed, t, where)
                    self._check_shape(borrowed, t, where)
                    continue
                a = _host_array(arg, t.dtype.np_dtype, where)
                if a.dtype != t.dtype.np_dtype:
                    if a.dtype.newbyteorder("=") != t.dtype.np_dtype:
                        raise InputError(f"{where} must be {t.dtype} ({t.dtype.np_dtype}), got {a.dtype}",
                                         hint=f"convert it, e.g. x.astype(np.{t.dtype.np_dtype})")
                    a = a.astype(t.dtype.np_dtype)
                self._check_shape(a, t, where)
                arrays.append(np.ascontiguousarray(a))
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
        """`arg` borrowed through DLPack when it lives on a device other than the host; None for host arrays."""
        if isinstance(arg, np.ndarray):
            return None
        place = dlpack.device_of(arg)
        if place is None or place[0] == dlpack.CPU:
            return None
        device = self.module.device
        ours = getattr(device, "dlpack_device", None)
        if place != ours:
            here = f"this module runs on {device.info.uri}"
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
        device = self.module.device
        if output is None:
            output = "device" if borrowed else "host"
        if output not in ("host", "device"):
            raise InputError(f"output must be 'host' or 'device', not {output!r}")
        if output == "device" and getattr(device, "dlpack_device", None) is None:
            raise InputError(f"{device.info.uri} cannot hand out device arrays (its driver has no DLPack support)",
                             hint="leave out output='device' to get numpy arrays")
        try:
            with self._lock:
                self._select(arrays)
                for a, meta in zip(arrays, self.plan["inputs"]):
                    _, offset, _ = meta["slot"]
                    if isinstance(a, dlpack.Borrowed):
                        device.copy(device.wrap(a.address, a.nbytes), 0, self.arena, offset, a.nbytes)
                    else:
                        device.write(self.arena, offset, a)
                device.submit(self.command_buffer)
                outs = []
                for t, meta in zip(self.output_types, self.plan["outputs"]):
                    kind, offset, nbytes = meta["slot"]
                    if output == "device":
                        held = _allocate(device, nbytes, f"an output of function '{self.name}'")
                        device.copy(self._buffer(kind), offset, held, 0, nbytes)
                        outs.append(dlpack.DeviceArray(device, held, t.shape, t.dtype))
                device.wait()
                if output == "host":
                    for t, meta in zip(self.output_types, self.plan["outputs"]):
                        kind, offset, nbytes = meta["slot"]
                        raw = device.read(self._buffer(kind), offset, nbytes)
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


class LoadedModule:
    """A module on a device. Functions are attributes: `m.predict(x)`."""

    def __init__(self, artifact: Artifact, device_spec: str = "auto", mode: str | None = None):
        self.artifact = artifact
        self.device, self.variant = self._choose(device_spec)
        modes = getattr(self.device, "modes", None) or ()
        if mode is not None and mode not in modes:
            raise InputError(f"{self.device.info.uri} has no command-buffer mode '{mode}'",
                             hint=f"its modes: {', '.join(modes)}" if modes else "it runs command buffers one way; "
                             "leave out the mode")
        self.mode = mode
        self.executable = self.device.load_executable(self.variant)
        constants = artifact.constants()
        self.constants = _allocate(self.device, len(constants), "the module's constants")
        if len(constants):
            self.device.write(self.constants, 0, np.asarray(constants))
        from .runtime_dynamic import DynamicFunction

        self.functions = {name: (DynamicFunction if "symbols" in plan else Function)(self, name, plan)
                          for name, plan in artifact.functions.items()}

    def _variants(self) -> list[ExecutableBinary]:
        out = []
        for exe in self.artifact.manifest["executables"]:
            try:
                entries = [_entry_point(e) for e in exe["entry_points"]]
                data = self.artifact.entries[exe["path"]]
                out.append(ExecutableBinary(exe["format"], desc_from_json(exe["target"]), bytes(data), entries))
            except (KeyError, TypeError, ValueError) as e:
                raise ModuleFormatError(f"executable entry is malformed ({e})", hint="recompile the module") from None
        return out

    def _choose(self, spec: str):
        # The numpy reference runs anywhere but slowly: native code goes first when both fit.
        variants = sorted(self._variants(), key=lambda v: v.target.backend == "vmvx")
        held = ", ".join(v.target.name for v in variants) or "none"
        if spec != "auto":
            device = open_device(spec)
            reasons = []
            for v in variants:
                reason = device.can_load(v.format, v.target)
                if reason is None:
                    return device, v
                reasons.append(f"{v.target.name}: {reason}")
            raise UnknownDeviceError(
                f"the module holds no code that {device.info.uri} can run (it holds {held}; {'; '.join(reasons)})",
                hint=f"recompile with a target for this device, e.g. `--target {device.info.driver}`"
                if device.info.driver not in FALLBACK_ORDER else "recompile with --target vmvx or llvm-cpu:host",
            )
        for info in sorted((d for d in all_devices() if d.available), key=_rank):
            try:
                device = open_device(info.uri)
            except UnknownDeviceError:
                continue
            for v in variants:
                if device.can_load(v.format, v.target) is None:
                    return device, v
        raise UnknownDeviceError(f"no available device can run this module (it holds {held})",
                                 hint="`retarget devices` lists devices; `retarget doctor` says what is missing")

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


def load(source, device: str = "auto", *, mode: str | None = None, trusted_keys=None) -> LoadedModule:
    """Load a module (an `Artifact` or a .rtm path) onto `device`.

    `mode` picks how the device runs the recorded command buffers, one of its `modes` (cuda: "graph",
    the default, "stream" or "direct"; None: the device's default).
    With `trusted_keys` (Ed25519 public keys: paths of PEM files, PEM bytes, or raw keys) a module file
    must be signed by one of them (`retarget compile --sign KEY`), or it is refused with a SignatureError."""
    if isinstance(source, Artifact):
        if trusted_keys is not None:
            raise InputError("trusted_keys checks the signature of a module file; an Artifact in memory has none",
                             hint="save it and load the file, or leave out trusted_keys")
        return LoadedModule(source, device, mode)
    return LoadedModule(read(source, trusted_keys=trusted_keys), device, mode)


def parse_input(text: str) -> np.ndarray:
    """IREE's --input syntax: `2x2xf32=1 2 3 4`, `1x224xf32=0` (splat), `f32=1.5`, `@x.npy`."""
    if text.startswith("@"):
        return read_npy(text[1:])
    shape_text, sep, values = text.partition("=")
    if not sep:
        raise InputError(f"input '{text}' has no '='", hint="write SHAPExDTYPE=VALUES, e.g. 2x2xf32=1 2 3 4, or @file.npy")
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
        return np.ascontiguousarray(array, dtype=native)
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
