"""What a benchmark run reports: rows, the comparison with the best peer, the machine and versions,
and the three outputs: a rich table, JSON, and a PNG bar chart (matplotlib, imported only here)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
from collections.abc import Sequence
from pathlib import Path

from ..errors import RetargetError
from .timing import Measurement

# Distributions whose versions a report records when they are installed.
VERSIONED = ("numpy", "torch", "onnx", "onnxruntime", "onnxruntime-gpu", "iree-base-compiler", "iree-base-runtime",
             "cuda-bindings", "wgpu", "llvmlite", "matplotlib")


def machine() -> dict:
    """The host: platform, CPU and core count, memory, Python."""
    from ..local_drivers import cpu_name

    info = {"platform": platform.platform(), "arch": platform.machine(), "cpu": cpu_name(),
            "cores": os.cpu_count(), "python": platform.python_version()}
    try:
        info["memory_bytes"] = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not every platform has these
        pass
    return info


def versions() -> dict:
    """retarget, each working plugin, and the peers and libraries that are installed."""
    from .. import __version__
    from ..plugin_manager import manager

    out = {"retarget": __version__,
           "plugins": {r.name: r.version for r in manager().records.values() if r.ok}}
    for dist in VERSIONED:
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


def device_record(info) -> dict:
    return {"device": info.uri, "name": info.name, "driver": info.driver, "properties": info.properties}


def rows(measurements: Sequence[Measurement], **common) -> list[dict]:
    """One JSON-ready row per runner: `common` (e.g. the model), the runner's facts, wall-clock stats
    flat (median_ms, min_ms, max_ms, count), device-time stats, every sample, correctness, error."""
    out = []
    for m in measurements:
        wall = m.wall
        out.append({
            **common,
            "runner": m.runner.label,
            **m.runner.facts,
            **(wall.as_dict() if wall else {"median_ms": None, "min_ms": None, "max_ms": None, "count": 0}),
            "device_time": m.device.as_dict() if m.device else None,
            "samples_ms": [s * 1e3 for s in m.samples_s],
            "relative_error": m.relative_error,
            "correct": m.correct,
            "error": m.error,
        })
    return out


def compare_with_peers(results: list[dict]) -> None:
    """Add `vs_best_peer` (median / the baseline's median) and `baseline` to each row, in place.

    Rows are compared within one model and one place ("cpu" or "gpu"): the baseline is the fastest
    correct peer there, or, where no peer ran, the fastest correct runner."""
    groups: dict[tuple, list[dict]] = {}
    for r in results:
        groups.setdefault((r.get("model"), r.get("place")), []).append(r)
    for group in groups.values():
        timed = [r for r in group if r.get("median_ms") is not None and r.get("correct") is not False]
        peers = [r for r in timed if r.get("kind") == "peer"]
        pool = peers or timed
        best = min(pool, key=lambda r: r["median_ms"]) if pool else None
        for r in group:
            ok = best is not None and r.get("median_ms") is not None and best["median_ms"] > 0
            r["baseline"] = best["runner"] if best else None
            r["vs_best_peer"] = r["median_ms"] / best["median_ms"] if ok else None


def write_json(path: str | os.PathLike, report: dict) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1, default=str) + "\n")
    return path


# -- terminal ----------------------------------------------------------------------------------


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.4f}" if value < 1 else f"{value:.3f}" if value < 10 else f"{value:.1f}"


def results_table(results: list[dict], title: str | None = None):
    """A rich Table: model and runner, median, min-max, device time, relative error, x vs best peer."""
    from rich.table import Table

    has_model = any(r.get("model") for r in results)
    has_device = any(r.get("device_time") for r in results)
    has_ratio = any(r.get("vs_best_peer") is not None for r in results)
    table = Table(title=title, title_justify="left")
    if has_model:
        table.add_column("model", no_wrap=True)
    table.add_column("runner", no_wrap=True)
    for name in ("median ms", "min-max ms", "device ms", "rel. error", "vs best peer"):
        if (name != "device ms" or has_device) and (name != "vs best peer" or has_ratio):
            table.add_column(name, justify="right")
    last_model = None
    for r in results:
        model = r.get("model")
        if has_model and last_model is not None and model != last_model:
            table.add_section()
        cells = [model if model != last_model else ""] if has_model else []
        last_model = model
        if r.get("median_ms") is None:
            cells += [r["runner"], f"[red]failed[/]: {r.get('error') or 'no samples'}"]
            table.add_row(*cells)
            continue
        device = r.get("device_time")
        if r.get("relative_error") is None:
            error = "[dim]unchecked[/]"
        else:
            error = f"{r['relative_error']:.1e}" + ("" if r.get("correct") else " [red]WRONG[/]")
        ratio = r.get("vs_best_peer")
        if ratio is None:
            versus = "-"
        elif r.get("runner") == r.get("baseline"):
            versus = "[bold]1.00x best[/]" if r.get("kind") == "peer" else "1.00x"
        else:
            versus = f"[{'green' if ratio <= 1.0 else 'yellow'}]{ratio:.2f}x[/]"
        label = r["runner"] if r.get("kind") != "peer" else f"[cyan]{r['runner']}[/]"
        cells += [label, _ms(r["median_ms"]), f"{_ms(r['min_ms'])}-{_ms(r['max_ms'])}"]
        cells += [_ms(device["median_ms"]) if device else "-"] if has_device else []
        cells += [error] + ([versus] if has_ratio else [])
        table.add_row(*cells)
    return table


def dispatch_table(breakdown: dict, title: str | None = None):
    """A rich Table of `timing.per_dispatch`'s result, slowest first."""
    from rich.table import Table

    clock = breakdown["clock"]
    table = Table(title=title, title_justify="left")
    how = clock + (f", {breakdown['inner']} in a row" if breakdown.get("inner", 1) > 1 else "")
    for name in ("#", "dispatch", "workgroups", f"median µs ({how})", "share"):
        table.add_column(name, justify="left" if name == "dispatch" else "right")

    def median_us(d: dict) -> float:
        stats = d["device_time"] if clock == "device" else d
        return (stats or {}).get("median_ms", float("nan")) * 1e3

    for d in sorted(breakdown["dispatches"], key=median_us, reverse=True):
        share = f"{d['share'] * 100:.1f}%" if d.get("share") is not None else "-"
        table.add_row(str(d["index"]), d["name"], "x".join(map(str, d["workgroups"])), f"{median_us(d):.1f}", share)
    whole = breakdown["whole"]
    whole_stats = whole["device_time"] if clock == "device" else whole
    table.add_section()
    table.add_row("", "sum of dispatches", "", f"{breakdown['sum_ms'] * 1e3:.1f}", "100%")
    if whole_stats and whole_stats.get("median_ms") is not None:
        table.add_row("", "whole function, one submit", "", f"{whole_stats['median_ms'] * 1e3:.1f}", "")
    return table


# -- PNG ----------------------------------------------------------------------------------------


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise RetargetError("writing a PNG needs matplotlib, which is not installed",
                            hint="pip install matplotlib (or retarget[bench]), or leave out --png") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def require_png_support() -> None:
    """Raise the one-line error now, before a long run, when matplotlib is missing."""
    _pyplot()


def write_png(path: str | os.PathLike, results: list[dict], title: str = "latency relative to the best peer") -> Path:
    """A horizontal bar chart per model (and per place, where CPU and GPU both ran): each runner's median
    over the baseline's (lower is better), retarget in one colour and peers in another, with the median in
    ms at the end of each bar. A panel whose bars span more than 20x uses a log scale."""
    plt = _pyplot()
    panels: dict[str, list[dict]] = {}
    places = {r.get("place") for r in results}
    for r in results:
        if r.get("vs_best_peer") is not None:
            name = r.get("model") or r.get("function") or ""
            panels.setdefault(f"{name} ({r['place']})" if len(places) > 1 else name, []).append(r)
    if not panels:
        raise RetargetError("no timed runner to plot", hint="every runner failed; see the table or the JSON")
    heights = [max(1, len(rs)) * 0.32 + 0.7 for rs in panels.values()]
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, sum(heights) + 0.6), squeeze=False, layout="constrained",
                             gridspec_kw={"height_ratios": heights})
    for ax, (model, rs) in zip(axes[:, 0], panels.items()):
        largest = max(r["vs_best_peer"] for r in rs)
        rs = sorted(rs, key=lambda r: r["vs_best_peer"], reverse=True)
        ratios = [r["vs_best_peer"] for r in rs]
        colors = ["#1f77b4" if r.get("kind") != "peer" else "#ff7f0e" for r in rs]
        labels = [r["runner"] + ("" if r.get("correct") is not False else " (WRONG)") for r in rs]
        ax.barh(range(len(rs)), ratios, color=colors)
        ax.set_yticks(range(len(rs)), labels, fontsize=8)
        ax.axvline(1.0, color="black", linewidth=0.8)
        for i, r in enumerate(rs):
            ax.text(r["vs_best_peer"], i, f" {r['vs_best_peer']:.2f}x  {_ms(r['median_ms'])} ms",
                    va="center", fontsize=7)
        if largest > 20:
            ax.set_xscale("log")
        ax.set_xlim(right=largest * (3 if largest > 20 else 1.35))
        ax.set_title(model, fontsize=9, loc="left")
        ax.tick_params(axis="x", labelsize=7)
    axes[-1, 0].set_xlabel("median latency / best peer's (lower is better; blue: retarget, orange: peers)", fontsize=8)
    fig.suptitle(title, fontsize=10)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
