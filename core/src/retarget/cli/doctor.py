"""`retarget doctor`: what is installed, what is broken, and a smoke test per device."""

from __future__ import annotations

import numpy as np
from rich.markup import escape

from ..testing.graphs import mlp_module


def diagnose() -> dict:
    from ..plugin_manager import manager
    from ..runtime import all_devices

    pm = manager()
    pm.call_every_hook()  # a hook that raises marks its plugin broken before the plugins are listed
    lines, ok = [], True
    lines.append("[bold]plugins[/]")
    for r in pm.records.values():
        if r.ok:
            lines.append(f"  [green]ok[/]     {r.name} {r.version}")
        else:
            ok = False
            lines.append(f"  [red]broken[/] {r.name}: {escape(r.error)}")
            lines.append(f"         fix: {escape(r.fix or f'reinstall or upgrade {r.distribution or r.name}')}")
        for note in r.notes:
            lines.append(f"         note: {escape(note)}")
    devices = all_devices()
    lines.append("[bold]devices[/]")
    for d in devices:
        if d.available:
            lines.append(f"  [green]ok[/]     {d.uri} {d.name}")
        else:
            lines.append(f"  [yellow]absent[/] {d.uri}: {escape(d.reason)}")
    lines.append("[bold]smoke test[/] (compile and run a tiny model)")
    smoke = []
    targets = pm.by_name("retarget_targets")
    for d in devices:
        if not d.available:
            continue
        names = [name for name, backend in targets.items() if d.driver in backend.drivers]
        if not names:  # a driver that no target lists, such as one that runs vmvx code: any target whose code it loads
            try:
                names, why_none = _targets_it_loads(d, targets)
            except Exception as e:  # an available device that does not open is a failure, reported, never raised
                ok = False
                smoke.append({"target": None, "device": d.uri, "pass": False, "reason": f"{type(e).__name__}: {e}"})
                lines.append(f"  [red]FAIL[/]   {d.uri}: cannot open it: {escape(f'{type(e).__name__}: {e}')}")
                continue
            if not names:
                smoke.append({"target": None, "device": d.uri, "pass": None, "reason": why_none})
                lines.append(f"  [yellow]SKIP[/]   {d.uri}: {escape(why_none)}")
                continue
        for name in names:
            passed, reason = _smoke(name, d.uri)
            ok &= passed
            smoke.append({"target": name, "device": d.uri, "pass": passed, "reason": reason})
            mark = "[green]PASS[/]" if passed else "[red]FAIL[/]"
            lines.append(f"  {mark}   {name} on {d.uri}: {escape(reason)}")
    return {
        "ok": ok,
        "plugins": [r.as_dict() for r in pm.records.values()],
        "devices": [{"device": d.uri, "available": d.available, "reason": d.reason} for d in devices],
        "smoke": smoke,
        "lines": lines,
    }


def _smoke(target: str, device: str) -> tuple[bool, str]:
    """(passed, why) for the tiny model compiled for `target` and run on `device`; never raises."""
    from .. import compile as compile_model
    from ..runtime import LoadedModule

    module, x, expected = mlp_module()
    try:
        got = LoadedModule(compile_model(module, target), device).predict(x)
        err = float(np.abs(got - expected).max() / np.abs(expected).max())
        return err < 1e-4, f"max relative error {err:.1e}"
    except Exception as e:  # the smoke test reports any failure, a plugin's bug included
        return False, f"{type(e).__name__}: {e}"


def _targets_it_loads(info, targets: dict) -> tuple[list[str], str]:
    """([the first target whose default architecture the device loads], "") or ([], why there is none)."""
    from ..runtime import open_device

    device = open_device(info.uri)
    for name, backend in targets.items():
        desc, _ = backend.default()
        if desc.format in device.formats and device.can_load(desc.format, desc) is None:
            return [name], ""
    return [], (f"no installed target lists driver {info.driver}, and none compiles code it loads (it loads "
                f"{', '.join(device.formats) or 'no format'}); install a target for it, or list "
                "retarget.vmvx.FORMAT in its formats")
