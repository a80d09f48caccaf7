"""The zoo suite: every model on every selected device and command-buffer mode, beside the peers.

For each model, retarget compiles once per target (the target that suits each device: native code
before the vmvx reference), loads the module on each device, once per command-buffer mode where the
device has modes, and checks every runner's output against torch on the CPU. Then the retarget
runners and the peers of that model are timed together, interleaved (see `timing`).

A device that runs command buffers in several ways lists them in `modes` (see protocols.Device;
cuda: "graph" records once and replays a CUDA graph, "direct" issues every launch on each call).
"""

from __future__ import annotations

import datetime
import gc
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError, RetargetError, UnknownDeviceError, suggestion
from . import peers as peer_lib
from .report import compare_with_peers, device_record, machine, rows, versions
from .timing import TOLERANCE, function_runner, measure, resident_runner

HOST_DRIVERS = ("local-sync", "local-task")
GEMM_SIZES = (256, 512, 1024, 2048, 4096)
ACCELERATOR_GEMMS = (2048, 4096)  # too slow for a CPU benchmark run; on GPUs only
SUITES = ("zoo",)


def _gemm_factory(n: int):
    def make():
        import torch

        class Gemm(torch.nn.Module):
            def forward(self, a, b):
                return a @ b

        g = torch.Generator().manual_seed(n)
        return Gemm().eval(), (torch.randn(n, n, generator=g), torch.randn(n, n, generator=g))

    return make


def models() -> dict[str, Callable]:
    """Every model the zoo suite knows: the test zoo's, then square f32 GEMMs (`a @ b`, both inputs)."""
    from ..testing import zoo

    return {**zoo.MODELS, **{f"gemm_{n}": _gemm_factory(n) for n in GEMM_SIZES}}


DEFAULT_MODELS = ("mlp", "mobilenet_v2", "resnet18", "transformer_block",
                  *(f"gemm_{n}" for n in GEMM_SIZES))


def accelerators_only(model: str) -> bool:
    return model in {f"gemm_{n}" for n in ACCELERATOR_GEMMS}


def is_software(info) -> bool:
    """A GPU API implemented on the CPU (lavapipe, llvmpipe): Vulkan says so in `device_type`, WebGPU
    in `adapter_type`."""
    return any(str(info.properties.get(key, "")).lower() == "cpu" for key in ("device_type", "adapter_type"))


def is_accelerator(info) -> bool:
    """A device that is not the host CPU: not a local driver, and not a software GPU."""
    return info.driver not in HOST_DRIVERS and not is_software(info)


def select_devices(specs: list[str] | None) -> tuple[list, list[str]]:
    """The devices to benchmark and notes about the choice. `specs` are DRIVER or DRIVER:ID; none means
    every available device except software adapters (they are named in a note: ask for them by name)."""
    from ..runtime import all_devices, parse_device

    devices = all_devices()
    available = [d for d in devices if d.available]
    if not specs:
        chosen = [d for d in available if d.driver in HOST_DRIVERS or is_accelerator(d)]
        left = [d for d in available if d not in chosen]
        notes = [f"skipping {d.uri} ({d.name}): a software adapter on the CPU; name it in --devices to include it"
                 for d in left]
        return chosen, notes
    chosen = []
    for spec in specs:
        driver, device_id = parse_device(spec)
        matches = [d for d in devices if d.driver == driver and (not device_id or d.id == device_id)]
        if not matches:
            known = sorted({d.driver for d in devices} | {d.uri for d in devices})
            raise UnknownDeviceError(f"unknown device '{spec}'", hint=suggestion(spec, known) + " (`retarget devices`)")
        usable = [d for d in matches if d.available]
        if not usable:
            raise UnknownDeviceError(f"device '{spec}' is not available: {'; '.join(d.reason for d in matches)}",
                                     hint="`retarget doctor` explains how to fix it")
        chosen += [d for d in usable if d not in chosen]
    return chosen, []


def target_for(info) -> str | None:
    """The target spec that suits a device: a native backend whose drivers include the device's, for
    this machine's own architecture (`BACKEND:host`); the vmvx reference only when nothing else fits."""
    from .. import targets
    from ..compiler import resolve_target

    names = [name for name, backend in targets().items() if info.driver in backend.drivers]
    if not names:
        return None
    name = min(names, key=lambda n: n == "vmvx")
    try:
        resolve_target(f"{name}:host")
        return f"{name}:host"
    except RetargetError:  # a backend without a `host` spelling: its default architecture
        return name


def command_buffer_modes(device) -> list[str | None]:
    """The device's command-buffer modes, its default first; [None] for a device with one way."""
    return list(getattr(device, "modes", None) or [None])


def load_in_mode(artifact, device: str, mode: str | None):
    """The artifact loaded on `device` with every function recorded in `mode` (None: the default)."""
    from ..runtime import load

    loaded = load(artifact, device=device)
    if mode is not None:
        for fn in loaded.functions.values():
            fn.command_buffer = fn.record(mode=mode)
    return loaded


@dataclass
class SuiteOptions:
    models: list[str]
    devices: list[str] | None = None
    peers: list[str] | None = None  # None: all of PEERS
    repeats: int = 30
    warmup: int = 3
    tolerance: float = TOLERANCE
    work_dir: Path | None = None


def check_names(options: SuiteOptions) -> None:
    """Fail with one line on an unknown model or peer name, before anything is compiled."""
    known = models()
    for name in options.models:
        if name not in known:
            raise InputError(f"no model '{name}' in the zoo suite",
                             hint=suggestion(name, known) + f"; models: {', '.join(known)}")
    for name in options.peers or []:
        if name not in peer_lib.PEERS:
            raise InputError(f"unknown peer '{name}'", hint=suggestion(name, peer_lib.PEERS)
                             + f"; peers: {', '.join(peer_lib.PEERS)}, or none")


def run_zoo(options: SuiteOptions, progress: Callable[[str], None] = lambda message: None,
            checkpoint: Callable[[dict], None] | None = None) -> dict:
    """Run the suite and return the report (see `report` for the row format). `checkpoint`, when given,
    gets the report so far after each model, so that a long run that is stopped still leaves its results."""
    check_names(options)
    devices, notes = select_devices(options.devices)
    for note in notes:
        progress(f"note: {note}")
    if not devices:
        raise UnknownDeviceError("no device to benchmark", hint="`retarget devices` lists them")
    skipped: list[dict] = []
    targets: dict[str, str] = {}
    for d in devices:
        spec = target_for(d)
        if spec is None:
            skipped.append({"runner": f"retarget {d.uri}",
                            "reason": f"no installed target compiles for driver {d.driver}"})
        else:
            targets[d.uri] = spec
    places = {"gpu" if is_accelerator(d) else "cpu" for d in devices}
    gpu_arch = next((d.properties.get("arch") for d in devices if d.driver == "cuda"), None)
    selected = set(peer_lib.PEERS if options.peers is None else options.peers)
    peers, peer_skips = peer_lib.plan(selected, places, gpu_arch)
    skipped += peer_skips
    for s in peer_skips:
        progress(f"note: skipping {s['runner']}: {s['reason']}")

    owned = options.work_dir is None
    work_dir = Path(tempfile.mkdtemp(prefix="retarget-bench-")) if owned else Path(options.work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    results, model_facts = [], {}
    header = {
        "suite": "zoo",
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": sys.argv,
        "machine": machine(),
        "versions": versions(),
        "devices": [device_record(d) for d in devices],
        "settings": {"repeats": options.repeats, "warmup": options.warmup, "tolerance": options.tolerance,
                     "reference": "torch eager on the CPU, fp32", "torch_tf32": False,
                     "targets": targets, "work_dir": None if owned else str(work_dir)},
    }

    def report() -> dict:
        compare_with_peers(results)
        return {**header, "models": model_facts, "skipped": skipped, "results": results}

    try:
        for name in options.models:
            model_rows, facts, model_skips = _run_model(name, devices, targets, peers, options, work_dir, progress)
            results += model_rows
            model_facts[name] = facts
            skipped += model_skips
            if checkpoint is not None:
                checkpoint(report())
    finally:
        if owned:
            import shutil

            shutil.rmtree(work_dir, ignore_errors=True)
    return report()


def _run_model(name, devices, targets, peers, options, work_dir, progress):
    import torch

    accel_only = accelerators_only(name)
    if accel_only and not any(is_accelerator(d) for d in devices):
        progress(f"{name}: skipped: a GPU-only size, and no accelerator was selected")
        return [], {}, [{"model": name, "runner": "all", "reason": "a GPU-only size; no accelerator was selected"}]
    model, inputs = models()[name]()
    with torch.no_grad():
        expected = model(*inputs).numpy()
    work = peer_lib.Workload(name, model, inputs, work_dir)
    facts = {"inputs": [list(a.shape) for a in work.arrays], "import_s": None, "compile_s": {}, "dispatches": {},
             "modules": {}}
    skipped: list[dict] = []
    devices = [d for d in devices if is_accelerator(d) or not accel_only]
    runners = _retarget_runners(work, devices, targets, options, facts, skipped, progress)
    peer_lib.start_model()
    for peer in peers:
        if accel_only and peer.place == "cpu":
            continue
        if peer.facts.get("slow_to_compile"):
            progress(f"{name}: {peer.label}: compiling (slow)")
        try:
            runners.append(peer_lib.runner(peer, work))
        except Exception as e:  # one peer's failure is reported; the rest of the suite runs
            skipped.append({"model": name, "runner": peer.label, "reason": _oneline(e)})
            progress(f"{name}: {peer.label} failed: {_oneline(e)}")
    if not runners:
        progress(f"{name}: no runner could run")
        return [], facts, skipped

    progress(f"{name}: timing {len(runners)} runner{'s' if len(runners) != 1 else ''}, {options.repeats} rounds "
             f"after {options.warmup} warm-ups")
    measurements = measure(runners, expected, repeats=options.repeats, warmup=options.warmup,
                           tolerance=options.tolerance,
                           progress=lambda m: progress(f"{name}: {m}"))
    for m in measurements:
        if m.error:
            progress(f"{name}: {m.runner.label} failed: {m.error}")
        elif m.correct is False:
            progress(f"{name}: {m.runner.label} is WRONG: relative error {m.relative_error:.2e}")
    out = rows(measurements, model=name)
    del runners, measurements
    gc.collect()  # free this model's device buffers before the next model allocates its own
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return out, facts, skipped


def _retarget_runners(work, devices, targets, options, facts, skipped, progress) -> list:
    """Compile `work` once per target spec, load it on each device in each of its modes: one Runner each."""
    from .. import compile as compile_model
    from ..compiler import import_model
    from ..runtime import load

    module, artifacts, runners = None, {}, []
    for d in devices:
        spec = targets.get(d.uri)
        if spec is None:
            continue
        if spec not in artifacts:
            artifacts[spec] = None
            progress(f"{work.name}: compiling for {spec}")
            try:
                if module is None:
                    start = time.perf_counter()
                    with warnings.catch_warnings():  # torch.export's deprecation chatter is not the user's business
                        warnings.simplefilter("ignore", FutureWarning)
                        warnings.simplefilter("ignore", DeprecationWarning)
                        module = import_model(work.model, example_inputs=work.inputs)
                    facts["import_s"] = time.perf_counter() - start
                start = time.perf_counter()
                artifact = compile_model(module, spec)
                facts["compile_s"][spec] = time.perf_counter() - start
                facts["dispatches"][spec] = len(artifact.manifest["executables"][0]["entry_points"])
                if options.work_dir is not None:
                    path = Path(options.work_dir) / f"{work.name}.{_backend(spec)}.rtm"
                    facts["modules"][spec] = str(artifact.save(path))
                artifacts[spec] = artifact
            except Exception as e:  # one target's failure is reported; the rest of the suite runs
                skipped.append({"model": work.name, "runner": f"retarget {spec}", "reason": _oneline(e)})
                progress(f"{work.name}: compiling for {spec} failed: {_oneline(e)}")
        artifact = artifacts[spec]
        if artifact is None:
            continue
        try:
            loaded = load(artifact, device=d.uri)
            modes = command_buffer_modes(loaded.device)
            for mode in modes:
                this = loaded if mode == modes[0] else load_in_mode(artifact, d.uri, mode)  # modes[0]: the default
                fn = next(iter(this.functions.values()))
                label = f"retarget {_backend(spec)} {d.uri}" + (f" {mode}" if mode else "")
                row = {"kind": "retarget", "device": d.uri, "device_name": d.name,
                       "place": "gpu" if is_accelerator(d) else "cpu", "target": this.variant.target.name,
                       "mode": mode, "compile_s": facts["compile_s"].get(spec), "io": "host"}
                runners.append(function_runner(fn, work.arrays, label, row))
                if mode == modes[0] and getattr(this.device, "dlpack_device", None) is not None:
                    runners.append(resident_runner(fn, work.arrays, label + " on device", {**row, "io": "device"}))
        except Exception as e:
            skipped.append({"model": work.name, "runner": f"retarget {spec} {d.uri}", "reason": _oneline(e)})
            progress(f"{work.name}: loading on {d.uri} failed: {_oneline(e)}")
    return runners


def _backend(spec: str) -> str:
    return spec.split(":")[0]


def _oneline(e: BaseException) -> str:
    text = e.oneline() if isinstance(e, RetargetError) else str(e)
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"
