"""`retarget benchmark`: one module's function, or a whole suite beside the peers."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from ..errors import InputError

err = Console(stderr=True)


def _out() -> Console:
    """stdout; wide when it is a file or a pipe (a saved table should not wrap at 80 columns)."""
    console = Console()
    return console if console.is_terminal or "COLUMNS" in os.environ else Console(width=160)

HELP = """Time a compiled module's function, or run a benchmark suite beside the peers.

**One module**, like `iree-benchmark-module`: warm-ups, then medians and min/max; in every
command-buffer mode the device has (cuda: `graph` and `direct`); device-side time where the device
has it; the result checked against `--expected`, or against the module's own vmvx variant (a result
past the tolerance is WRONG in the table, and the command exits 1):

    retarget benchmark m.rtm -d local-task -f predict -i 1x16xf32=0
    retarget benchmark m.rtm -d cuda --per-dispatch   # which kernel costs

**A suite**: every zoo model (MLP, MobileNetV2, ResNet-18, a transformer block, square GEMMs) on
every available device, beside PyTorch eager and torch.compile, ONNX Runtime and IREE (each when
installed), interleaved in one process; a table, and JSON and a PNG on request:

    retarget benchmark --suite zoo
    retarget benchmark --suite zoo --models mlp,resnet18 --devices cuda
    retarget benchmark --suite zoo --peers torch,onnxruntime --repeats 50
    retarget benchmark --suite zoo --json-out zoo.json --png zoo.png

Software GPU adapters (lavapipe) are left out unless named in `--devices`. `--work-dir DIR` keeps
the compiled modules, to look at one of them with `--per-dispatch` afterwards.
"""

ListOption = list[str] | None


def _names(values: ListOption) -> list[str] | None:
    """Repeated and comma-separated values, in order: `--models a,b --models c` -> [a, b, c]."""
    if values is None:
        return None
    return [v.strip() for value in values for v in value.split(",") if v.strip()]


def benchmark(
    module: Annotated[Path | None, typer.Argument(
        help="A .rtm module from `retarget compile`; leave it out with --suite.", show_default=False)] = None,
    device: Annotated[list[str] | None, typer.Option(
        "--device", "-d", help="DRIVER[:ID] to run the module on, or auto; for a module split by --fallback, "
                               "once per placement: --device gpu=vulkan --device cpu=local-task.")] = None,
    function: Annotated[str | None, typer.Option(
        "--function", "-f", help="Function to time (default: the only one).")] = None,
    input: Annotated[ListOption, typer.Option(
        "--input", "-i", help="Once per argument, as for `retarget run` (default: seeded random inputs).")] = None,
    expected: Annotated[ListOption, typer.Option(
        "--expected", "--expected_output", help="Expected result, --input syntax, once per result.")] = None,
    per_dispatch: Annotated[bool, typer.Option(
        "--per-dispatch", help="Also time each dispatch of the function on its own.")] = False,
    suite: Annotated[str | None, typer.Option("--suite", help="Run a suite instead of one module: zoo.")] = None,
    models: Annotated[ListOption, typer.Option(
        "--models", help="Suite models, comma-separated or repeated (default: all but small_cnn).")] = None,
    devices: Annotated[ListOption, typer.Option(
        "--devices", help="Suite devices: DRIVER or DRIVER:ID, comma-separated (default: all available).")] = None,
    peers: Annotated[ListOption, typer.Option(
        "--peers", help="Suite peers: torch, torch-compile, onnxruntime, iree, or none (default: all).")] = None,
    repeats: Annotated[int, typer.Option(
        "--repeats", "--benchmark_repetitions", min=1, help="Timed calls per runner.")] = 30,
    warmup: Annotated[int, typer.Option("--warmup", min=0, help="Untimed calls per runner first.")] = 3,
    tolerance: Annotated[float, typer.Option(
        "--tolerance", help="Largest relative error that counts as correct.")] = 1e-4,
    as_json: Annotated[bool, typer.Option("--json", help="Print the JSON report instead of a table.")] = False,
    json_out: Annotated[Path | None, typer.Option("--json-out", help="Also write the JSON report here.")] = None,
    png: Annotated[Path | None, typer.Option(
        "--png", help="Suite: write a bar chart of latency relative to the best peer (needs matplotlib).")] = None,
    work_dir: Annotated[Path | None, typer.Option(
        "--work-dir", help="Suite: keep compiled modules and ONNX exports here (default: a temporary folder).")] = None,
):
    from ..bench import report as report_lib

    if (module is None) == (suite is None):
        raise InputError("give either a module to benchmark or --suite, not " + ("both" if module else "neither"),
                         hint="e.g. `retarget benchmark m.rtm --device local-task` or `retarget benchmark --suite zoo`")
    suite_only = {"--models": models, "--devices": devices, "--peers": peers, "--work-dir": work_dir, "--png": png}
    module_only = {"--function": function, "--input": input, "--expected": expected,
                   "--per-dispatch": per_dispatch or None, "--device": device or None}
    wrong = [flag for flag, value in (module_only if suite else suite_only).items() if value is not None]
    if wrong:
        raise InputError(f"{', '.join(wrong)} {'goes' if len(wrong) == 1 else 'go'} with "
                         + ("a module, not --suite" if suite else "--suite, not a module"),
                         hint="`retarget benchmark --help` shows both forms" + (
                             "; with --suite, pick devices with --devices" if suite and "--device" in wrong else ""))
    if png:
        report_lib.require_png_support()

    def progress(message: str) -> None:
        err.print(f"[dim]{message}[/]", highlight=False, soft_wrap=True)

    if suite:
        checkpoint = (lambda partial: report_lib.write_json(json_out, partial)) if json_out else None
        report = _suite(suite, models, devices, peers, repeats, warmup, tolerance, work_dir, progress, checkpoint)
    else:
        from ..bench.module import run_module
        from ..runtime import parse_input
        from . import parse_devices

        plain, named = parse_devices(device)
        report = run_module(module, device=plain, devices=named or None, function=function,
                            inputs=[parse_input(t) for t in input] if input else None,
                            expected=[parse_input(t) for t in expected] if expected else None,
                            repeats=repeats, warmup=warmup, tolerance=tolerance, dispatches=per_dispatch,
                            progress=progress)
    if json_out:
        progress(f"wrote {report_lib.write_json(json_out, report)}")
    if png:
        names = dict.fromkeys(d["name"] for d in report["devices"])  # in order, once each
        title = f"retarget {report['versions']['retarget']} on {', '.join(names)} ({report['machine']['cores']} cores)"
        progress(f"wrote {report_lib.write_png(png, report['results'], title)}")
    if as_json:
        sys.stdout.write(json.dumps(report, indent=1, default=str) + "\n")
    else:
        _print(report, report_lib)
    wrong = [r["runner"] for r in report.get("results", ()) if r.get("correct") is False and not suite]
    if wrong:  # a script must not take wrong numbers for a pass: the one module's results are checked
        err.print(f"error: {', '.join(wrong)} computed results that differ from the reference "
                  f"({report['settings']['reference']}) past the tolerance", highlight=False, soft_wrap=True)
        raise typer.Exit(1)


def _suite(suite, models, devices, peers, repeats, warmup, tolerance, work_dir, progress, checkpoint) -> dict:
    from ..bench.suite import DEFAULT_MODELS, SUITES, SuiteOptions, run_zoo
    from ..errors import suggestion

    if suite not in SUITES:
        raise InputError(f"no suite '{suite}'", hint=suggestion(suite, SUITES) + f"; suites: {', '.join(SUITES)}")
    peer_names = _names(peers)
    if peer_names is not None and peer_names in (["none"], []):
        peer_names = []
    options = SuiteOptions(models=_names(models) or list(DEFAULT_MODELS), devices=_names(devices), peers=peer_names,
                           repeats=repeats, warmup=warmup, tolerance=tolerance, work_dir=work_dir)
    return run_zoo(options, progress, checkpoint)


def _print(report: dict, report_lib) -> None:
    out = _out()
    m, v = report["machine"], report["versions"]
    peers = ", ".join(f"{k} {v[k]}" for k in ("torch", "onnxruntime", "iree-base-runtime") if k in v)
    title = f"retarget {v['retarget']} on {m['cpu']} ({m['cores']} cores)" + (f"; {peers}" if peers else "")
    if "function" in report:
        title = f"@{report['function']} of {report['module']} ({report['settings']['reference']})"
    out.print(report_lib.results_table(report["results"], title=title))
    if "per_dispatch" in report:
        out.print(report_lib.dispatch_table(report["per_dispatch"], title=f"dispatches of @{report['function']}"))
    for s in report.get("skipped", []):
        where = f"{s['model']}: " if s.get("model") else ""
        out.print(f"[dim]skipped {where}{s['runner']}: {s['reason']}[/]", highlight=False, soft_wrap=True)
    settings = report["settings"]
    out.print(f"[dim]medians of {settings['repeats']} interleaved calls after {settings['warmup']} warm-ups; ms, "
              f"wall clock (device ms: the device's own time, where it has one); reference: {settings['reference']}[/]",
              highlight=False, soft_wrap=True)
    if any(r.get("io") == "device" for r in report.get("results", ())):
        out.print("[dim]retarget rows pass numpy arrays in and out (the copies are in the time), except those "
                  "\"on device\": inputs on the GPU, outputs left there, as torch's GPU rows run[/]",
                  highlight=False, soft_wrap=True)
