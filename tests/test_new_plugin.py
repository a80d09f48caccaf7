"""`retarget new-plugin NAME` writes a package that installs with pip, registers through its entry
point, shows in `retarget plugins`, and passes the conformance suite as it is."""

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from retarget import scaffold
from retarget.errors import InputError

NAME = f"scaffolded{os.getpid()}"  # unique, so that a leftover from another run cannot clash


def _run(*args, cwd=None):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd)


def _left_behind(dist) -> bool:
    """An editable install of an earlier scaffold whose folder no longer exists."""
    if not (dist.metadata["Name"] or "").startswith("retarget-scaffolded"):
        return False
    url = json.loads(dist.read_text("direct_url.json") or "{}").get("url", "")
    return url.startswith("file://") and not Path(url.removeprefix("file://")).exists()


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The scaffold of NAME, made by the CLI and installed into this venv (uninstalled afterwards)."""
    if _run("-m", "pip", "--version").returncode != 0:
        pytest.skip("pip is not available in this environment")
    stale = [d.metadata["Name"] for d in metadata.distributions() if _left_behind(d)]
    if stale:  # by a run that was killed: its source folder is gone, so it would load as a broken plugin
        _run("-m", "pip", "uninstall", "-q", "-y", *stale)
    folder = tmp_path_factory.mktemp("new-plugin")
    made = _run("-m", "retarget", "new-plugin", NAME, "--dir", str(folder))
    assert made.returncode == 0, made.stdout + made.stderr
    root = folder / f"retarget-{NAME}"
    pip = _run("-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "-e", str(root))
    assert pip.returncode == 0, pip.stdout + pip.stderr
    yield root
    _run("-m", "pip", "uninstall", "-q", "-y", f"retarget-{NAME}")


def test_the_installed_scaffold_is_a_working_plugin_in_retarget_plugins(installed):
    listed = _run("-m", "retarget", "plugins", "--json")
    assert listed.returncode == 0, listed.stderr
    record = next(r for r in json.loads(listed.stdout) if r["name"] == NAME)
    assert record["status"] == "ok", record["error"]
    assert record["distribution"] == f"retarget-{NAME}"
    assert record["hooks"] == ["retarget_drivers", "retarget_targets"]


def test_the_scaffold_passes_the_conformance_suite_and_its_own_tests(installed):
    run = _run("-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "-W", "ignore::FutureWarning",
               str(installed / "tests"), cwd=installed)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    for test in (f"test_reference_graphs_dispatch_and_match_vmvx[{NAME}-chain]",
                 f"test_reference_graphs_match_vmvx[{NAME}-on-{NAME}-chain]",
                 f"test_zoo_models_match_vmvx[{NAME}-on-local-sync-small_cnn]",
                 f"test_the_host_spellings_describe_a_device_here[{NAME}]",
                 "test_an_alias_resolves_to_its_row", "test_native_is_another_spelling_of_host"):
        assert f"::{test}" in run.stdout.split("short test summary info")[-1], f"{test} did not pass"


@pytest.mark.parametrize("kind, present, absent", [
    ("target", ["targets.py", "test_targets.py"], ["driver.py"]),
    ("driver", ["driver.py"], ["targets.py", "test_targets.py"]),
])
def test_a_target_only_or_driver_only_scaffold_holds_only_its_part(tmp_path, kind, present, absent):
    root, files = scaffold.create("acme", tmp_path, kind)
    names = {p.name for p in files}
    assert set(present) <= names and not set(absent) & names
    plugin = (root / "src" / "retarget_acme" / "plugin.py").read_text()
    assert ("def retarget_targets" in plugin) == (kind == "target")
    assert ("def retarget_drivers" in plugin) == (kind == "driver")
    for path in files:
        if path.suffix == ".py":
            compile(path.read_text(), str(path), "exec")


def test_a_bad_name_or_an_existing_folder_is_refused(tmp_path):
    with pytest.raises(InputError, match="not a plugin name"):
        scaffold.create("Acme_GPU", tmp_path)
    scaffold.create("acme", tmp_path)
    with pytest.raises(InputError, match="already exists"):
        scaffold.create("acme", tmp_path)
