"""`retarget doctor`: what is installed, what is broken, and a smoke test per device."""

from __future__ import annotations

import numpy as np

from ..testing.graphs import mlp_module


def diagnose() -> dict:
    from .. import compile as compile_model
    from ..errors import RetargetError
    from ..plugin_manager import manager
    from ..runtime import LoadedModule, all_devices

    pm = manager()
    pm.call_every_hook()  # a hook that raises marks its plugin broken before the plugins are listed
    lines, ok = [], True
    lines.append("[bold]plugins[/]")
    for r in pm.records.values():
        if r.ok:
            lines.append(f"  [green]ok[/]     {r.name} {r.version}")
        else:
            ok = False
            lines.append(f"  [red]broken[/] {r.name}: {r.error}")
            lines.append(f"         fix: reinstall or upgrade {r.distribution or r.name}; "
                         "`retarget plugins --json` shows the traceback")
    devices = all_devices()
    lines.append("[bold]devices[/]")
    for d in devices:
        if d.available:
            lines.append(f"  [green]ok[/]     {d.uri} {d.name}")
        else:
            lines.append(f"  [yellow]absent[/] {d.uri}: {d.reason}")
    lines.append("[bold]smoke test[/] (compile and run a tiny model)")
    smoke = []
    module, x, expected = mlp_module()
    for name, backend in pm.by_name("retarget_targets").items():
        for d in devices:
            if not d.available or d.driver not in backend.drivers:
                continue
            try:
                artifact = compile_model(module, name)
                got = LoadedModule(artifact, d.uri).predict(x)
                err = float(np.abs(got - expected).max() / np.abs(expected).max())
                passed = err < 1e-4
                reason = f"max relative error {err:.1e}"
            except (RetargetError, Exception) as e:  # the smoke test reports any failure, it never raises
                passed, reason = False, f"{type(e).__name__}: {e}"
            ok &= passed
            smoke.append({"target": name, "device": d.uri, "pass": passed, "reason": reason})
            mark = "[green]PASS[/]" if passed else "[red]FAIL[/]"
            lines.append(f"  {mark}   {name} on {d.uri}: {reason}")
    return {
        "ok": ok,
        "plugins": [r.as_dict() for r in pm.records.values()],
        "devices": [{"device": d.uri, "available": d.available, "reason": d.reason} for d in devices],
        "smoke": smoke,
        "lines": lines,
    }
