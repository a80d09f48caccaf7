"""Whether a (target, device) pair can run here: what the test suites and the differential tester skip on."""

from __future__ import annotations


def unavailable(target: str, device: str) -> str | None:
    """Why `target` (a name, or name:arch) cannot run on `device` (a driver, or driver:id) on this machine: its
    plugin is not installed, or no such device is available (with the driver's reasons). None when it can."""
    import retarget

    name = target.split(":")[0]
    installed = retarget.targets()
    if name not in installed:
        return f"target {name} is not installed (installed: {', '.join(sorted(installed))})"
    driver, _, index = device.partition(":")
    found = [d for d in retarget.devices() if d.driver == driver and (not index or d.id == index)]
    if not any(d.available for d in found):
        why = "; ".join(d.reason for d in found if d.reason) or "no such driver or device (see: retarget devices)"
        return f"device {device} cannot run here: {why}"
    return None


def skip_unless_runs(target: str, device: str = "local-task") -> None:
    """In a test: skip it, saying why (`unavailable`), unless `target` runs on `device` here."""
    if why := unavailable(target, device):
        import pytest

        pytest.skip(why)
