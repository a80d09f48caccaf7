"""The `retarget` command line. Flags and the --input syntax follow IREE's tools.

Every error a user can cause prints one line, `error: what (what to do)`, and
exits with code 2; `--verbose` adds the traceback.
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
from rich.table import Table

from ..errors import InputError, RetargetError

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
out = Console()
err = Console(stderr=True)
_state = {"verbose": False}

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON for scripts instead of a table.")]


@app.callback()
def _main(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show tracebacks on errors.")] = False,
    version: Annotated[bool, typer.Option("--version", help="Print the version and exit.")] = False,
):
    _state["verbose"] = verbose
    if version:
        from .. import __version__

        out.print(f"retarget {__version__}")
        raise typer.Exit()


def _print_json(data) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


# -- listings ---------------------------------------------------------------------------------


@app.command()
def plugins(as_json: JsonFlag = False):
    """List installed plugins: version, hooks, and any broken plugin with its error."""
    from .. import plugins as list_plugins

    records = list_plugins()
    if as_json:
        return _print_json(records)
    table = Table("plugin", "distribution", "version", "status", "hooks / error")
    for r in records:
        status = "[green]ok[/]" if r["status"] == "ok" else "[red]broken[/]"
        detail = ", ".join(h.removeprefix("retarget_") for h in r["hooks"]) if r["status"] == "ok" else r["error"]
        table.add_row(r["name"], r["distribution"], r["version"], status, detail)
    out.print(table)
    for r in records:
        for note in r["notes"]:
            out.print(f"[yellow]note[/] {r['name']}: {note}")


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
    table = Table("target", "plugin", "drivers", "default arch", "architectures")
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
    table = Table("driver", "plugin", "usable devices", "note")
    for r in rows:
        table.add_row(r["name"], r["plugin"], str(r["devices"]), "; ".join(r["unavailable"]))
    out.print(table)


@app.command()
def devices(
    dump: Annotated[bool, typer.Option("--dump", help="Show every property of each usable device.")] = False,
    as_json: JsonFlag = False,
):
    """List devices, available or not (with the reason). `--dump` shows their properties."""
    from .. import devices as list_devices
    from .. import drivers as list_drivers

    devs = list_devices()
    rows = []
    for d in devs:
        row = {"device": d.uri, "name": d.name, "available": d.available, "reason": d.reason, **d.properties}
        if dump and d.available:
            row["dump"] = list_drivers()[d.driver].dump(d.id)
        rows.append(row)
    if as_json:
        return _print_json(rows)
    table = Table("device", "name", "available", "properties")
    for d in devs:
        props = ", ".join(f"{k}={v}" for k, v in d.properties.items())
        table.add_row(d.uri, d.name, "[green]yes[/]" if d.available else f"[red]no[/]: {d.reason}", props)
    out.print(table)
    if dump:
        for r in rows:
            if "dump" in r:
                out.rule(r["device"])
                for k, v in r["dump"].items():
                    out.print(f"  {k}: {v}")


@app.command()
def doctor(as_json: JsonFlag = False):
    """Check every plugin, driver and device, and say how to fix what is missing.

    For each usable device it also compiles and runs a tiny model on each target
    the device can run, and prints PASS or FAIL with the reason."""
    from .doctor import diagnose

    report = diagnose()
    if as_json:
        _print_json(report)
    else:
        for line in report["lines"]:
            out.print(line)
    if not report["ok"]:
        raise typer.Exit(1)


# -- compile and run ----------------------------------------------------------------------------


@app.command(name="compile")
def compile_(
    source: Annotated[Path, typer.Argument(help="Model: .mlir (linalg/TOSA/StableHLO/graph IR), .onnx or .pt2.")],
    target: Annotated[list[str], typer.Option(
        "--target", "-t", "--iree-hal-target-backends",
        help="BACKEND[:ARCH], repeatable: vmvx, llvm-cpu:host, cuda:h100, ... (`retarget targets` lists them).")] = None,
    output: Annotated[Path, typer.Option("--output", "-o", help="The .rtm module to write.")] = None,
    dump_after_all: Annotated[Path | None, typer.Option(
        "--dump-after-all", help="Write the IR after every stage into this folder.")] = None,
    sign: Annotated[Path | None, typer.Option(
        "--sign", help="Sign the module with this Ed25519 private key (PEM; `retarget keygen` makes one).")] = None,
    dim: Annotated[list[str] | None, typer.Option(
        "--dim", help="Bound a symbolic dimension, repeatable: NAME=LO..HI (`batch=1..64`), NAME=LO.. or "
                      "NAME=SIZE (fixes it). Bounded symbols get one memory plan, sized at the bounds.")] = None,
    as_json: JsonFlag = False,
):
    """Compile a model into a .rtm module holding code for each target.

    Symbolic dimensions (torch.export Dim, ONNX dim_param, MLIR `?`) stay symbolic: one module
    runs at every size in their ranges. `--dim batch=1..64` bounds one; `--dim batch=8` fixes it."""
    from .. import compiler
    from ..ir.symbolic import parse_dim_option

    if output is None:
        output = source.with_suffix(".rtm")
    targets = target or ["vmvx"]
    if not target:
        err.print("note: no --target given; using vmvx, the numpy reference (slow, always works)")
    start = time.perf_counter()
    with err.status(f"compiling {source} for {', '.join(targets)}"):
        artifact = compiler.compile(source, targets, dump_dir=dump_after_all,
                                    notes=lambda n: err.print(f"note: {n}"),
                                    dims=dict(parse_dim_option(d) for d in dim or ()))
        artifact.save(output, signing_key=sign)
    elapsed = time.perf_counter() - start
    summary = {
        "output": str(output),
        "targets": [f"{e['backend']}:{e['arch']}" for e in artifact.manifest["executables"]],
        "functions": list(artifact.functions),
        "dispatches": len(artifact.manifest["executables"][0]["entry_points"]),
        "bytes": output.stat().st_size,
        "seconds": round(elapsed, 3),
        "signed": sign is not None,
    }
    if as_json:
        return _print_json(summary)
    out.print(f"wrote {output} ({summary['bytes']:,} bytes; {', '.join(summary['targets'])}; "
              f"{summary['dispatches']} dispatches; functions {', '.join(summary['functions'])}"
              f"{'; signed' if sign else ''}) in {elapsed:.2f} s")
    if dump_after_all:
        out.print(f"stages dumped to {dump_after_all}/")


@app.command()
def run(
    module: Annotated[Path, typer.Argument(help="A .rtm module from `retarget compile`.")],
    device: Annotated[str, typer.Option("--device", "-d", help="DRIVER[:ID], e.g. local-task, cuda:0; or auto.")] = "auto",
    function: Annotated[str | None, typer.Option("--function", "-f", help="Function to call (default: the only one).")] = None,
    input: Annotated[list[str] | None, typer.Option(
        "--input", "-i",
        help="Repeat once per argument: SHAPExDTYPE=VALUES (`2x2xf32=1 2 3 4`), a splat (`1x224xf32=0`), or `@x.npy`.")] = None,
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
    """Run one function of a module with the given inputs and print (or save) its results."""
    from ..runtime import load, parse_input

    loaded = load(module, device=device, mode=mode, trusted_keys=trusted_key or None)
    if list_functions:
        sigs = [f.signature for f in loaded.functions.values()]
        if as_json:
            return _print_json([s.to_json() for s in sigs])
        return [out.print(str(s), highlight=False) for s in sigs]
    if function is None:
        if len(loaded.functions) != 1:
            raise InputError(f"the module has several functions: {', '.join(loaded.functions)}",
                             hint="choose one with --function")
        function = next(iter(loaded.functions))
    fn = loaded.function(function)
    args = [parse_input(text) for text in (input or [])]
    results = fn(*args)
    results = list(results) if isinstance(results, tuple) else [results]
    if output:
        if len(output) != len(results):
            raise InputError(f"{len(results)} results but {len(output)} --output files", hint="give one --output per result")
        for path, value in zip(output, results):
            np.save(path, value)
    if as_json:
        return _print_json({"device": loaded.device.info.uri, "function": function,
                            "results": [{"shape": list(r.shape), "dtype": str(r.dtype), "values": r.tolist()} for r in results]})
    err.print(f"EXEC @{function} on {loaded.device.info.uri}")
    for i, (r, t) in enumerate(zip(results, fn.output_types)):
        out.print(f"result[{i}]: {t}")
        with np.printoptions(threshold=64, edgeitems=4, precision=6):
            out.print(str(r), highlight=False)


@app.command()
def check(
    source: Annotated[Path, typer.Argument(help="A check-style .mlir file: zero-argument functions using check.expect_*.")],
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


from .benchmark import HELP as _BENCHMARK_HELP  # noqa: E402
from .benchmark import benchmark  # noqa: E402

app.command(help=_BENCHMARK_HELP)(benchmark)

from .new_plugin import new_plugin  # noqa: E402

app.command(name="new-plugin")(new_plugin)


def main() -> None:
    try:
        app()  # exits itself; usage errors exit with 2, as click does
    except RetargetError as e:
        if _state["verbose"]:
            traceback.print_exc()
        err.print(f"[red]error:[/] {e.oneline()}", highlight=False, soft_wrap=True)
        sys.exit(2)
