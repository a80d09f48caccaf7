"""One function of one compiled module on one device, as `iree-benchmark-module` does it.

The function runs in every command-buffer mode the device has, interleaved. Its result is checked
against `expected` when given, else against the module's own vmvx variant (the numpy reference) when
the module holds one and the device runs another; otherwise the report says it was not checked.
"""

from __future__ import annotations

import datetime
import sys
from collections.abc import Callable, Sequence

import numpy as np

from ..errors import InputError
from ..module_format import Artifact, read
from .report import device_record, machine, rows, versions
from .suite import command_buffer_modes, load_in_mode
from .timing import TOLERANCE, function_runner, measure, per_dispatch

REFERENCE_DEVICE = "local-sync"


def pick_function(loaded, name: str | None):
    if name is None:
        if len(loaded.functions) != 1:
            raise InputError(f"the module has several functions: {', '.join(loaded.functions)}",
                             hint="choose one with --function")
        name = next(iter(loaded.functions))
    return loaded.function(name)


def random_inputs(fn, seed: int = 0) -> list[np.ndarray]:
    """Seeded inputs matching the signature: standard normal floats, small integers, false booleans."""
    rng = np.random.default_rng(seed)
    out = []
    if not all(t.is_static for t in fn.input_types):
        raise InputError(f"{fn.signature} has sizes known only at run time, so random inputs need a size",
                         hint="give --input for each argument at the size to time, e.g. --input 1x3x224x224xf32=0")
    for t in fn.input_types:
        dtype = np.dtype(t.dtype.np_dtype)
        if dtype.kind == "f" or dtype.kind == "V":  # V: bfloat16 and other ml_dtypes
            out.append(rng.standard_normal(t.shape).astype(dtype))
        elif dtype.kind in "iu":
            out.append(rng.integers(0, 4, t.shape).astype(dtype))
        else:
            out.append(np.zeros(t.shape, dtype))
    return out


def only_backend(artifact: Artifact, backend: str) -> Artifact:
    """The same module, holding only `backend`'s executable variants."""
    manifest = dict(artifact.manifest)
    manifest["executables"] = [e for e in manifest["executables"] if e["backend"] == backend]
    return Artifact(manifest, artifact.entries, artifact.path)


def _reference(artifact: Artifact, loaded, function: str, args) -> tuple[object | None, str]:
    from ..runtime import load

    if len(loaded.placements) > 1:
        return None, "not checked: a split module holds no independent reference; pass --expected"
    timed = loaded.variant.target.backend
    has_vmvx = any(e["backend"] == "vmvx" for e in artifact.manifest["executables"])
    if timed == "vmvx" or not has_vmvx:
        held = ", ".join(sorted({e["backend"] for e in artifact.manifest["executables"]}))
        return None, (f"not checked: the module holds no independent reference (it holds {held}); "
                      "pass --expected, or compile with --target vmvx as well")
    ref = load(only_backend(artifact, "vmvx"), device=REFERENCE_DEVICE)
    return ref.function(function)(*args), f"the module's vmvx variant on {REFERENCE_DEVICE}"


def _check_expected(fn, expected) -> None:
    """--expected must be one array per result, each of the result's shape where that is known: a wrong one is a
    mistake to name, not a result to call WRONG."""
    from ..runtime import input_spelling

    types = getattr(fn, "output_types", None)
    if types is None:
        return
    if len(expected) != len(types):
        raise InputError(f"--expected gives {len(expected)} arrays; @{fn.name} returns {len(types)}",
                         hint="give one --expected per result, in order")
    for k, (t, e) in enumerate(zip(types, expected)):
        if t.is_static and tuple(np.shape(e)) != tuple(t.shape):
            raise InputError(f"--expected {k} has shape {list(np.shape(e))}; result {k} of @{fn.name} is {t}",
                             hint=f"spell it as the result's type, e.g. --expected {input_spelling(t)}=@ref.npy")


def run_module(path, *, device: str = "auto", devices: dict[str, str] | None = None, function: str | None = None,
               inputs: Sequence[np.ndarray] | None = None,
               expected: Sequence[np.ndarray] | None = None, repeats: int = 30, warmup: int = 3,
               tolerance: float = TOLERANCE, dispatches: bool = False,
               progress: Callable[[str], None] = lambda message: None) -> dict:
    """Benchmark `function` of the module at `path` on `device` (a split module: a device per placement,
    `devices`); returns the report (rows as in `report.rows`, plus `per_dispatch` when `dispatches`)."""
    from ..runtime import load

    artifact = read(path)
    loaded = load(artifact, device=device, devices=devices)
    fn = pick_function(loaded, function)
    if expected:
        _check_expected(fn, expected)
    if inputs:
        args = list(inputs)
    else:
        args = random_inputs(fn)
        if fn.input_types:
            progress("note: no --input given; using seeded random inputs (standard normal floats)")
    args = fn.check_inputs(args)
    if expected:
        reference, source = (list(expected) if len(expected) > 1 else expected[0]), "--expected"
    else:
        reference, source = _reference(artifact, loaded, fn.name, args)

    split = len(loaded.placements) > 1
    modes = [None] if split else command_buffer_modes(loaded.device)  # a split module: each device's default
    info = loaded.device.info
    runners = []
    for mode in modes:
        this = loaded if mode == modes[0] else load_in_mode(artifact, device, mode)  # modes[0] is the default
        targets = " + ".join(p.variant.target.backend for p in this.placements.values())
        where = this.describe_devices()
        label = f"retarget {targets} {where}" + (f" {mode}" if mode else "")
        runners.append(function_runner(this.function(fn.name), args, label, {
            "kind": "retarget", "device": where, "device_name": info.name, "mode": mode,
            "target": " + ".join(p.variant.target.name for p in this.placements.values())}))
    progress(f"@{fn.name} on {loaded.describe_devices()}: {repeats} rounds after {warmup} warm-ups")
    measurements = measure(runners, reference, repeats=repeats, warmup=warmup, tolerance=tolerance)
    report = {
        "module": str(path),
        "function": fn.name,
        "signature": str(fn.signature),
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": sys.argv,
        "machine": machine(),
        "versions": versions(),
        "devices": [device_record(p.device.info) for p in loaded.placements.values()],
        "settings": {"repeats": repeats, "warmup": warmup, "tolerance": tolerance, "reference": source,
                     "inputs": "given" if inputs else "seeded random"},
        "results": rows(measurements, function=fn.name),
    }
    if dispatches:
        progress(f"@{fn.name}: timing each dispatch")
        report["per_dispatch"] = per_dispatch(fn, args, repeats=repeats, warmup=warmup)
    return report
