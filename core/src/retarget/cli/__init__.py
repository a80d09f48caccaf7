"""The `retarget` command line. Flags and the --input syntax follow IREE's tools.

Every error a user can cause prints one line, `error: what (what to do)`, and
exits with code 2; `--verbose` adds the traceback. Anything else is a bug of
ours or of a plugin: one line too, naming it as such, and exit code 70
(sysexits' EX_SOFTWARE); Ctrl-C exits with 130.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Column, Table

from ..errors import InputError, RetargetError, suggestion
from ..module_format import public_functions

app = typer.Typer(
    name="retarget",
    help="Compile ML models once per target and run them on any device.\n\n"
    "Typical use: `retarget compile model.mlir --target vmvx -o m.rtm`, then "
    "`retarget run m.rtm --device local-task --function predict --input 1x16xf32=0`.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode="markdown",
)
# No emoji codes: target names such as `metal-spirv:apple:` are text.
out = Console(emoji=False)
err = Console(stderr=True, emoji=False)
_state = {"verbose": False}

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON for scripts instead of a table.")]


def _print_version(wanted: bool) -> None:
    # Eager, so that `retarget --version` needs no command after it.
    if wanted:
        from .. import __version__

        out.print(f"retarget {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show tracebacks on errors.")] = False,
    version: Annotated[bool, typer.Option(
        "--version", help="Print the version and exit.", callback=_print_version, is_eager=True)] = False,
):
    _state["verbose"] = verbose


def _table(*headers: str) -> Table:
    """A listing whose cells wrap, long words too, instead of being cut with '…' at the terminal's width."""
    return Table(*(Column(h, overflow="fold") for h in headers))


def _print_json(data) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def _check_writable(path: Path, flag: str) -> None:
    """Refuse an output path whose folder is missing before any work is done, not after it."""
    if not path.parent.is_dir():
        raise InputError(f"{flag} {path}: the folder {path.parent} does not exist",
                         hint="create it first, or write somewhere else")


def _write(path: Path, save) -> None:
    """save(path), with an OS error (permissions, a full disk) as a one-line error naming the file."""
    try:
        save(path)
    except OSError as e:
        raise InputError(f"cannot write {path}: {e.strerror or e}", hint="check the path and its permissions") from None


# -- listings ---------------------------------------------------------------------------------


@app.command()
def plugins(as_json: JsonFlag = False):
    """List installed plugins: version, hooks, and any broken plugin with its error."""
    from .. import plugins as list_plugins

    records = list_plugins()
    if as_json:
        return _print_json(records)
    table = _table("plugin", "distribution", "version", "status", "hooks")
    for r in records:
        status = "[green]ok[/]" if r["status"] == "ok" else "[red]broken[/]"
        detail = ", ".join(h.removeprefix("retarget_") for h in r["hooks"]) if r["status"] == "ok" else "(see below)"
        table.add_row(r["name"], r["distribution"], r["version"], status, detail)
    out.print(table)
    # Errors and notes go below the table, one line each and never cut to the terminal's width.
    for r in records:
        if r["status"] != "ok":
            out.print(f"[red]error[/] {escape(r['name'])}: {escape(r['error'])}", soft_wrap=True)
            out.print(f"  fix: {escape(r['fix'] or 'reinstall or upgrade ' + (r['distribution'] or r['name']))}",
                      soft_wrap=True)
        for note in r["notes"]:
            out.print(f"[yellow]note[/] {escape(r['name'])}: {escape(note)}", soft_wrap=True)


def _owner(hook: str, name: str) -> str:
    from ..plugin_manager import manager

    for plugin_name, item in manager().collect(hook):
        if getattr(item, "name", None) == name:
            return plugin_name
    return "?"


@app.command()
def targets(as_json: JsonFlag = False):
    """List compiler target backends, the drivers that run their code, and their architectures."""
    from .. import targets as list_targets

    rows = []
    for name, backend in list_targets().items():
        desc, _ = backend.default()
        rows.append({"name": name, "plugin": _owner("retarget_targets", name), "drivers": list(backend.drivers),
                     "default": desc.arch, "architectures": list(backend.names())})
    if as_json:
        return _print_json(rows)
    table = _table("target", "plugin", "drivers", "default arch", "architectures")
    for r in rows:
        archs = ", ".join(r["architectures"][:8]) + (" ..." if len(r["architectures"]) > 8 else "")
        table.add_row(r["name"], r["plugin"], ", ".join(r["drivers"]), r["default"], archs)
    out.print(table)


@app.command()
def drivers(as_json: JsonFlag = False):
    """List HAL drivers and how many of their devices are usable."""
    from .. import devices as list_devices
    from .. import drivers as list_drivers

    devs = list_devices()
    rows = []
    for name in list_drivers():
        mine = [d for d in devs if d.driver == name]
        rows.append({"name": name, "plugin": _owner("retarget_drivers", name),
                     "devices": sum(d.available for d in mine),
                     "unavailable": [d.reason for d in mine if not d.available]})
    if as_json:
        return _print_json(rows)
    table = _table("driver", "plugin", "usable devices", "note")
    for r in rows:
        table.add_row(r["name"], r["plugin"], str(r["devices"]), escape("; ".join(r["unavailable"])))
    out.print(table)


@app.command()
def devices(
    only: Annotated[list[str] | None, typer.Argument(
        metavar="DEVICE", help="Only these: DRIVER (every device it has) or DRIVER:ID.", show_default=False)] = None,
    dump: Annotated[bool, typer.Option("--dump", help="Show every property of each usable device.")] = False,
    as_json: JsonFlag = False,
):
    """List devices, available or not (with the reason). `--dump` shows all their properties.

    The table shows long properties in brief; `--dump` and `--json` give them whole. Name drivers or
    devices to see only those:

        retarget devices
        retarget devices --dump vulkan:0     # limits, features, subgroups, memory heaps, queues
        retarget devices cuda --json
    """
    from .. import devices as list_devices
    from .. import drivers as list_drivers
    from ..runtime import parse_device

    devs = list_devices()
    if only:
        wanted = [parse_device(spec) for spec in only]
        for driver, _ in wanted:
            if driver not in list_drivers():
                raise InputError(f"no driver '{driver}'",
                                 hint=suggestion(driver, list_drivers()) + " (`retarget drivers` lists them)")
        devs = [d for d in devs if any(d.driver == driver and device_id in ("", d.id) for driver, device_id in wanted)]
        if not devs:
            raise InputError(f"no device {', '.join(only)}", hint="`retarget devices` lists them all")
    rows = []
    for d in devs:
        row = {"device": d.uri, "name": d.name, "available": d.available, "reason": d.reason, **d.properties}
        if dump and d.available:
            row["dump"] = list_drivers()[d.driver].dump(d.id)
        rows.append(row)
    if as_json:
        return _print_json(rows)
    table = _table("device", "name", "available", "properties")
    for d in devs:
        props = ", ".join(f"{k}={_brief(v)}" for k, v in d.properties.items())
        table.add_row(d.uri, escape(d.name), "[green]yes[/]" if d.available else f"[red]no[/]: {escape(d.reason)}",
                      escape(props))
    out.print(table)
    if dump:
        for r in rows:
            if "dump" in r:
                out.rule(r["device"])
                for k, v in r["dump"].items():
                    out.print(f"  {k}: {v}")


def _note(text: str) -> None:
    """A compiler's note on stderr, one line, as written."""
    err.print(f"note: {escape(text)}", highlight=False, soft_wrap=True)


def _brief(value, width: int = 48) -> str:
    """A property as the table shows it: in full when short, else how many entries it has."""
    text = str(value)
    if len(text) <= width or not isinstance(value, (list, tuple, dict)):
        return text
    return f"({len(value)}, see --dump)"


@app.command()
def doctor(as_json: JsonFlag = False):
    """Check every plugin, driver and device, and say how to fix what is missing.

    For each usable device it also compiles and runs a tiny model on each target that
    lists the device's driver (for a driver that no target lists, on the first target
    whose code the device loads), and prints PASS, FAIL or SKIP with the reason."""
    from .doctor import diagnose

    report = diagnose()
    if as_json:  # the lines as a terminal shows them, without rich's markup
        from rich.text import Text

        _print_json({**report, "lines": [Text.from_markup(line).plain for line in report["lines"]]})
    else:
        for line in report["lines"]:
            out.print(line)
    if not report["ok"]:
        raise typer.Exit(1)


# -- compile and run ----------------------------------------------------------------------------


def _quantize_help() -> str:
    from ..passes.quantize import SCHEMES

    return ("Quantize the weights of linear layers and 1x1 convolutions: int8 (per output channel), "
            "int4-gG (per group of G inputs), 8da8w and 8da4w-gG (also int8 activations, one scale per row, "
            "computed at run time); -asym adds zero points. One of: " + ", ".join(SCHEMES) + ".")


_QUANTIZE_HELP = _quantize_help()


@app.command(name="compile")
def compile_(
    source: Annotated[Path, typer.Argument(help="Model: .mlir (linalg/TOSA/StableHLO/graph IR), .onnx or .pt2.")],
    target: Annotated[list[str], typer.Option(
        "--target", "-t", "--iree-hal-target-backends",
        help="BACKEND[:ARCH], repeatable: vmvx, llvm-cpu:host, cuda:h100, ... "
             "(`retarget targets` lists them).")] = None,
    fallback: Annotated[list[str] | None, typer.Option(
        "--fallback",
        help="BACKEND[:ARCH] that runs what the targets refuse, e.g. llvm-cpu: the module is split between "
             "the two, with transfers (run it with --device gpu=... --device cpu=...).")] = None,
    refuse: Annotated[list[str] | None, typer.Option(
        "--refuse",
        help="Make the targets refuse an op (rt.erf), an op at a type (rt.exp:i64, rt.exp:int) or an element "
             "type (i64), as if their support tables said so; repeatable. For testing --fallback.")] = None,
    explain: Annotated[bool, typer.Option(
        "--explain", help="Print where each op runs and why (with --json: as JSON, under 'placement').")] = False,
    output: Annotated[Path, typer.Option("--output", "-o", help="The .rtm module to write.")] = None,
    dump_after_all: Annotated[Path | None, typer.Option(
        "--dump-after-all", help="Write the IR after every stage into this folder.")] = None,
    sign: Annotated[Path | None, typer.Option(
        "--sign", help="Sign the module with this Ed25519 private key (PEM; `retarget keygen` makes one).")] = None,
    precision: Annotated[str | None, typer.Option(
        "--precision", help="Compute floats in f32, f16 or bf16 (sums still accumulate in f32). "
        "Default: the model's own types.")] = None,
    interface_precision: Annotated[str | None, typer.Option(
        "--interface-precision", help="Float type of the functions' arguments and results: f32, f16 or bf16. "
        "Default: the model's own, whatever --precision is.")] = None,
    quantize: Annotated[str | None, typer.Option(
        "--quantize", help=_QUANTIZE_HELP)] = None,
    dim: Annotated[list[str] | None, typer.Option(
        "--dim", help="Bound a symbolic dimension, repeatable: NAME=LO..HI (`batch=1..64`), NAME=LO.. or "
                      "NAME=SIZE (fixes it). Bounded symbols get one memory plan, sized at the bounds.")] = None,
    as_json: JsonFlag = False,
):
    """Compile a model into a .rtm module holding code for each target.

    For example:

        retarget compile model.onnx --target llvm-cpu -o model.rtm          # also .mlir and .pt2
        retarget compile model.pt2 --target vmvx --target vulkan-spirv -o model.rtm   # one module, two targets

    Each target declares what it cannot run (its support table). An op a target refuses is an
    error naming it, unless `--fallback` names a target for it:

        retarget compile model.onnx --target vulkan-spirv --fallback llvm-cpu -o m.rtm --explain
        retarget run m.rtm --device gpu=vulkan --device cpu=local-task --input @x.npy

    `--explain` lists each op with its placement and the reason, then the schedule.

    Precision and quantization, e.g.:

    `retarget compile model.pt2 --target cuda --precision f16 --quantize int4-g32 -o model.rtm`

    Symbolic dimensions (torch.export Dim, ONNX dim_param, MLIR `?`) stay symbolic: one module
    runs at every size in their ranges. `--dim batch=1..64` bounds one; `--dim batch=8` fixes it.
    """
    from .. import compiler
    from ..ir.symbolic import parse_dim_option
    from ..passes.placement import PlacementError, explain_text

    if output is None:
        output = source.with_suffix(".rtm")
    _check_writable(output, "--output")
    targets = target or ["vmvx"]
    if not target:
        err.print("note: no --target given; using vmvx, the numpy reference (slow, always works)")
    start = time.perf_counter()
    try:
        with err.status(f"compiling {source} for {', '.join(targets)}"):
            artifact = compiler.compile(source, targets, fallback=fallback or None, refuse=refuse,
                                        dump_dir=dump_after_all, notes=_note,
                                        precision=precision, interface_precision=interface_precision,
                                        quantize=quantize,
                                        dims=dict(parse_dim_option(d) for d in dim or ()))
            _write(output, lambda path: artifact.save(path, signing_key=sign))
    except PlacementError as e:
        if explain:
            _print_json({"placement": e.report}) if as_json else sys.stdout.write(explain_text(e.report) + "\n")
        raise
    elapsed = time.perf_counter() - start
    manifest = artifact.manifest
    programs = [step["program"] for fn in artifact.functions.values()
                for step in fn.get("steps", [{"op": "run", "program": fn.get("program", [])}]) if step["op"] == "run"]
    summary = {
        "output": str(output),
        "targets": [f"{e['backend']}:{e['arch']}" for e in manifest["executables"]],
        "placements": {p: meta["targets"] for p, meta in manifest.get("placements", {}).items()},
        "functions": public_functions(manifest),
        "dispatches": sum(c["op"] == "dispatch" for program in programs for c in program),
        "transfers": sum(step["op"] == "transfer" for fn in artifact.functions.values()
                         for step in fn.get("steps", [])),
        "bytes": output.stat().st_size,
        "seconds": round(elapsed, 3),
        "signed": sign is not None,
        "constant_bytes": artifact.manifest["constants"]["size"],
    }
    if as_json:
        return _print_json({**summary, "placement": artifact.placement} if explain else summary)
    if explain:
        sys.stdout.write(explain_text(artifact.placement) + "\n")
    where = ", ".join(f"{p}: {' + '.join(t)}" for p, t in summary["placements"].items()) \
        or ", ".join(summary["targets"])
    split = f"; {_count(summary['transfers'], 'transfer')}" if summary["placements"] else ""
    dispatches = _count(summary["dispatches"], "dispatch", "dispatches")
    out.print(f"wrote {output} ({summary['bytes']:,} bytes; {where}; "
              f"{dispatches}{split}; functions {', '.join(summary['functions'])}"
              f"{'; signed' if sign else ''}) in {elapsed:.2f} s", soft_wrap=True)
    if dump_after_all:
        out.print(f"stages dumped to {dump_after_all}/")


DeviceOption = Annotated[list[str] | None, typer.Option(
    "--device", "-d",
    help="DRIVER[:ID], e.g. local-task, cuda:0, or auto (the default). For a module split by --fallback, "
         "once per placement, PLACEMENT=DRIVER[:ID] (--device gpu=vulkan --device cpu=local-task); "
         "a placement left out runs on the plain --device where it can, else on the best device.")]


def parse_devices(values: list[str] | None) -> tuple[str, dict[str, str]]:
    """Repeated --device values -> (the plain device or "auto", {placement: device})."""
    plain, named = [], {}
    for value in values or []:
        placement, sep, spec = value.partition("=")
        if sep:
            if not placement or not spec:
                raise InputError(f"--device {value}: write PLACEMENT=DRIVER[:ID]", hint="e.g. --device gpu=vulkan")
            if placement in named:
                raise InputError(f"--device names placement '{placement}' twice", hint="give one device per placement")
            named[placement] = spec
        else:
            plain.append(value)
    if len(plain) > 1:
        raise InputError(f"--device given {len(plain)} times without a placement ({', '.join(plain)})",
                         hint="for a split module name each: --device gpu=vulkan --device cpu=local-task")
    return (plain[0] if plain else "auto"), named


def describe_function(fn) -> dict:
    """A loaded function's signature (with its symbolic dimensions' ranges), and where it runs: each step
    of its host program."""
    from ..passes.placement import summarize_steps

    staged = getattr(fn, "summarize_steps", None)  # data-dependent sizes: stages and host ops (runtime_staged.py)
    return {**fn.signature.to_json(), "steps": staged() if staged else summarize_steps(fn.plan)}


@app.command()
def run(
    module: Annotated[Path, typer.Argument(help="A .rtm module from `retarget compile`.")],
    device: DeviceOption = None,
    function: Annotated[str | None, typer.Option(
        "--function", "-f", help="Function to call (default: the only one).")] = None,
    input: Annotated[list[str] | None, typer.Option(
        "--input", "-i",
        help="Repeat once per argument: SHAPExDTYPE=VALUES (`2x2xf32=1 2 3 4`), a splat (`1x224xf32=0`), "
             "or `@x.npy`.")] = None,
    output: Annotated[list[str] | None, typer.Option(
        "--output", help="Save results as .npy, repeat once per result.")] = None,
    list_functions: Annotated[bool, typer.Option("--list-functions", help="Print the signatures and exit.")] = False,
    trusted_key: Annotated[list[Path] | None, typer.Option(
        "--trusted-key",
        help="Run the module only if one of these Ed25519 public keys (PEM) signed it; repeatable.")] = None,
    mode: Annotated[str | None, typer.Option(
        "--mode", help="How the device runs the function's command buffer, for a device with several ways "
        "(cuda: graph, the default; stream; direct, which waits after each dispatch so an error names it).")] = None,
    as_json: JsonFlag = False,
):
    """Run one function of a module with the given inputs and print (or save) its results.

    For example:

        retarget run model.rtm --list-functions                  # the functions and their arguments
        retarget run model.rtm --device local-task --input 1x16xf32=0.5
        retarget run model.rtm -d vulkan -f predict -i @x.npy --output y.npy --json

    `--list-functions` prints each function's signature, and for a module split by `--fallback`
    where it runs: its segments and transfers, and the device of each placement."""
    from ..runtime import load, parse_input

    plain, named = parse_devices(device)
    loaded = load(module, device=plain, devices=named or None, mode=mode, trusted_keys=trusted_key or None)
    if list_functions:
        rows = [describe_function(f) for f in loaded.functions.values()]
        if as_json:
            return _print_json({"devices": loaded.describe_devices(), "functions": rows})
        for row in rows:
            out.print(row["signature"], highlight=False, soft_wrap=True)
            if len(row["steps"]) > 1:
                out.print("  runs: " + _steps_text(row["steps"]), highlight=False)
        if len(loaded.placements) > 1:
            out.print(f"devices: {loaded.describe_devices()}", highlight=False)
        return
    if function is None:
        if len(loaded.functions) != 1:
            raise InputError(f"the module has several functions: {', '.join(loaded.functions)}",
                             hint="choose one with --function")
        function = next(iter(loaded.functions))
    fn = loaded.function(function)
    for path in output or ():
        _check_writable(Path(path), "--output")
    args = [parse_input(text) for text in (input or [])]
    if len(args) != len(fn.input_types):
        raise InputError(f"{function} takes {_count(len(fn.input_types), 'input')}, got {len(args)} --input",
                         hint=_inputs_hint(fn))
    results = fn(*args)
    results = list(results) if isinstance(results, tuple) else [results]
    if output:
        if len(output) != len(results):
            raise InputError(f"{function} returns {_count(len(results), 'result')}, got {len(output)} --output",
                             hint="give one --output per result")
        for path, value in zip(output, results):
            _write(Path(path), lambda p, value=value: np.save(p, value))
    if as_json:
        return _print_json({"device": loaded.describe_devices(), "function": function,
                            "results": [{"shape": list(r.shape), "dtype": str(r.dtype), "values": r.tolist()}
                                        for r in results]})
    err.print(f"EXEC @{function} on {loaded.describe_devices()}")
    for i, (r, t) in enumerate(zip(results, fn.output_types)):
        out.print(f"result[{i}]: {t}")
        with np.printoptions(threshold=64, edgeitems=4, precision=6):
            out.print(str(r), highlight=False)


def _count(n: int, noun: str, plural: str | None = None) -> str:
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def _inputs_hint(fn) -> str:
    """One --input per argument, each spelled as the argument's type: `--input 1x16xf32=0`."""
    if not fn.input_types:
        return "give no --input"
    if not all(t.is_static for t in fn.input_types):  # a symbolic size has no one spelling
        return "give one --input per argument (`--list-functions` shows them)"
    from ..runtime import input_spelling

    return "give one --input per argument, e.g. " + " ".join(f"--input {input_spelling(t)}=0" for t in fn.input_types)


def _steps_text(steps: list[dict]) -> str:
    parts = []
    for s in steps:
        if s["op"] == "run":
            parts.append(f"{s['placement']} ({_count(len(s['dispatches']), 'dispatch', 'dispatches')})")
        else:
            parts.append(f"{s['from']}->{s['to']} {s['bytes']:,} B")
    return " -> ".join(parts)


@app.command(name="export")
def export_(
    module: Annotated[Path, typer.Argument(help="A .rtm module from `retarget compile`.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="The folder to write (made if missing; the files "
                                                                "export writes are replaced).")],
    target: Annotated[str | None, typer.Option(
        "--target", "-t", help="BACKEND[:ARCH] of the code to export, when the module holds several.")] = None,
    as_json: JsonFlag = False,
):
    """Write a module's code as files that run outside retarget, e.g. a folder a web page loads.

    For webgpu-spirv: the WGSL, the constants, manifest.json, retarget.js (the loader) and
    index.html (a page that runs the model once). Serve the folder and open the page:

        retarget compile model.onnx --target webgpu-spirv -o model.rtm
        retarget export model.rtm -o site/model
        python3 -m http.server -d site

    then http://localhost:8000/model/. In your own page, `const model = await load("model/manifest.json")`
    with `load` imported from model/retarget.js, then `const y = await model.main(x)`
    (plugins/webgpu/README.md, "Running in a browser")."""
    from .. import targets as list_targets
    from ..module_format import read

    artifact = read(module)
    backends = list_targets()
    held = [f"{e['backend']}:{e['arch']}" for e in artifact.manifest["executables"]]
    exporters = sorted(name for name, backend in backends.items() if callable(getattr(backend, "export", None)))
    backend_name, _, arch = (target or "").partition(":")
    chosen = [e for e in artifact.manifest["executables"] if e["backend"] in exporters
              and (not target or (e["backend"] == backend_name and arch in ("", e["arch"])))]
    if not chosen:
        which = f" for {target}" if target else ""
        raise InputError(f"{module} holds no code that can be exported{which} (it holds {', '.join(held)})",
                         hint=f"compile it for a target that exports: {', '.join(exporters) or 'none is installed'}")
    exe = chosen[0]
    path = backends[exe["backend"]].export(artifact, output, exe["arch"])
    summary = {"output": str(output), "target": f"{exe['backend']}:{exe['arch']}", "manifest": str(path),
               "files": sorted(str(p.relative_to(output)) for p in Path(output).rglob("*") if p.is_file())}
    if as_json:
        return _print_json(summary)
    out.print(f"wrote {output}/ ({summary['target']}; {len(summary['files'])} files, manifest {path})", highlight=False)


@app.command()
def check(
    source: Annotated[Path, typer.Argument(
        help="A check-style .mlir file: zero-argument functions using check.expect_*.")],
    target: Annotated[list[str], typer.Option("--target", "-t", "--iree-hal-target-backends",
                                              help="BACKEND[:ARCH] to compile for.")] = None,
    device: Annotated[str, typer.Option("--device", "-d", help="DRIVER[:ID] to run on, or auto.")] = "auto",
    as_json: JsonFlag = False,
):
    """Run every zero-argument function of a check file and report PASS or FAIL for each,
    as `iree-check-module` does. Exits 1 if any check fails."""
    from .. import compiler
    from ..importers.mlir import import_check_file
    from ..importers.mlir.check import evaluate_checks
    from ..mlir.syntax import read_source
    from ..runtime import load

    try:
        text = read_source(source)
    except OSError as e:
        raise InputError(f"cannot read {source}: {e.strerror}", hint="check the path") from None
    module, checks = import_check_file(text, str(source))
    loaded = load(compiler.compile(module, target or ["vmvx"]), device=device)
    report, failed = [], 0
    for name, fn in loaded.functions.items():
        if fn.input_types:
            report.append({"function": name, "status": "skipped", "messages": ["takes arguments"]})
            continue
        results = fn()
        results = list(results) if isinstance(results, tuple) else [results]
        outcomes = evaluate_checks(checks.get(name, []), results)
        ok = all(passed for passed, _ in outcomes)
        failed += not ok
        report.append({"function": name, "status": "pass" if ok else "fail",
                       "messages": [m for passed, m in outcomes if not passed]})
    if as_json:
        _print_json({"device": loaded.device.info.uri, "functions": report, "failed": failed})
    else:
        for r in report:
            mark = {"pass": "[green]PASS[/]", "fail": "[red]FAIL[/]", "skipped": "[yellow]SKIP[/]"}[r["status"]]
            out.print(f"{mark} @{r['function']}")
            for m in r["messages"]:
                out.print(f"     {m}", highlight=False)
        out.print(f"{len(report) - failed} of {len(report)} functions passed on {loaded.device.info.uri}")
    if failed:
        raise typer.Exit(1)


@app.command()
def keygen(
    path: Annotated[Path, typer.Argument(help="Where to write the private key; the public key goes to PATH.pub.")],
):
    """Make an Ed25519 key pair for `retarget compile --sign PATH` and `retarget run --trusted-key PATH.pub`."""
    from ..signing import generate_key

    if path.exists():
        raise InputError(f"{path} exists; keygen does not overwrite a key", hint="choose another path")
    private, public = generate_key(path)
    out.print(f"wrote {private} (private: keep it secret) and {public} (public: give it to whoever loads your modules)")


@app.command(name="cache")
def cache_(
    clear: Annotated[bool, typer.Option(
        "--clear", help="Delete the entries (every backend's, or --backend's).")] = False,
    backend: Annotated[str | None, typer.Option(
        "--backend", help="Only this backend's entries, e.g. llvm-cpu or cuda.")] = None,
    as_json: JsonFlag = False,
):
    """Show the compile cache, or empty it with --clear.

    Backends keep compiled code there (llvm-cpu its objects, cuda NVRTC's cubins and PTX, rocm its code
    objects), keyed by everything that decides its bytes, so that compiling an unchanged model again skips LLVM,
    NVRTC and clang. It is
    `$RETARGET_CACHE_DIR` (default `~/.cache/retarget`); `RETARGET_CACHE_DIR=off` turns it off. Deleting it is
    always safe."""
    from .. import cache

    base = cache.root()
    rows = cache.usage()
    if backend is not None and backend not in {r["backend"] for r in rows}:
        known = [r["backend"] for r in rows]
        raise InputError(f"--backend {backend}: the cache holds nothing of it",
                         hint=suggestion(backend, known) if known else "the cache is empty")
    rows = [r for r in rows if backend in (None, r["backend"])]
    freed = cache.clear(backend) if clear else 0
    if as_json:
        return _print_json({"directory": None if base is None else str(base), "backends": rows,
                            **({"cleared_bytes": freed} if clear else {})})
    if base is None:
        out.print("the compile cache is off (RETARGET_CACHE_DIR=off)")
        return
    if clear:
        out.print(f"cleared {_count(sum(r['entries'] for r in rows), 'entry', 'entries')} ({freed:,} bytes) "
                  f"from {base}", soft_wrap=True)
        return
    if not rows:
        out.print(f"the compile cache at {base} is empty", soft_wrap=True)
        return
    table = _table("backend", "entries", "bytes", "directory")
    for r in rows:
        table.add_row(r["backend"], str(r["entries"]), f"{r['bytes']:,}", r["path"])
    out.print(table)


from .benchmark import HELP as _BENCHMARK_HELP  # noqa: E402
from .benchmark import benchmark  # noqa: E402

app.command(help=_BENCHMARK_HELP)(benchmark)

from .new_plugin import new_plugin  # noqa: E402

app.command(name="new-plugin")(new_plugin)


# What `--help` shows for an option's value, in the user's words rather than the annotation's (`<list[str]>`).
METAVARS = {
    "--target": "BACKEND[:ARCH]", "--fallback": "BACKEND[:ARCH]", "--device": "DRIVER[:ID]", "--devices": "DRIVER,...",
    "--input": "TENSOR", "--expected": "TENSOR", "--output": "FILE", "--dim": "NAME=LO..HI", "--function": "NAME",
    "--models": "NAME,...", "--peers": "NAME,...", "--suite": "NAME", "--refuse": "OP[:TYPE]", "--trusted-key": "PEM",
    "--sign": "KEY", "--json-out": "FILE", "--png": "FILE", "--work-dir": "DIR", "--dump-after-all": "DIR",
    "--precision": "DTYPE", "--interface-precision": "DTYPE", "--quantize": "SCHEME", "--mode": "MODE",
    "--repeats": "N", "--warmup": "N", "--tolerance": "X", "--backend": "NAME",
}


def _name_metavars(command) -> None:
    """Each option's value named for a person: flags take none, the table's options their spelling; arguments in
    capitals (MODULE)."""
    for param in command.params:
        if param.param_type_name == "option":
            if param.is_flag:
                param.metavar = ""
            else:
                param.metavar = next((METAVARS[o] for o in param.opts if o in METAVARS), param.metavar)
        elif param.param_type_name == "argument" and param.metavar is None:
            param.metavar = param.name.upper()
    command.get_help_option = _flag_without_value(command.get_help_option)
    for sub in getattr(command, "commands", {}).values():
        _name_metavars(sub)


def _flag_without_value(get_help_option):
    """click makes --help for each context: typer's help would show it as `--help <bool>`."""
    def wrapped(ctx):
        option = get_help_option(ctx)
        if option is not None:
            option.metavar = ""
        return option
    return wrapped


def run_app() -> None:
    """The CLI as `retarget` runs it: typer's app, its options' values named for a person."""
    command = typer.main.get_command(app)
    _name_metavars(command)
    command()  # exits itself; usage errors exit with 2, as click does


def main() -> None:
    try:
        run_app()
    except RetargetError as e:
        if _state["verbose"]:
            traceback.print_exc()
        # The message is text: `[b]` stays as written, and `vulkan-spirv:apple: ...` is no emoji code.
        err.print(f"[red]error:[/] {escape(e.oneline())}", highlight=False, soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)
    except Exception as e:  # a bug, not the user's input: still one line, and how to report it
        if _state["verbose"]:
            traceback.print_exc()
        where = traceback.extract_tb(e.__traceback__)[-1]
        err.print(f"[red]internal error:[/] {escape(type(e).__name__)}: {escape(str(e) or '(no message)')} "
                  f"(at {escape(Path(where.filename).name)}:{where.lineno}). This is a bug in retarget or one of "
                  f"its plugins, not in your input: run again with --verbose for the traceback and report it",
                  highlight=False, soft_wrap=True)
        sys.exit(70)
