import json
import subprocess
import sys
import textwrap

import pytest
from retarget.plugin_manager import PluginManager


def _install_plugin(folder, name: str, source: str):
    """A plugin distribution in `folder` (on sys.path) with an entry point in retarget.plugins."""
    (folder / f"{name}.py").write_text(textwrap.dedent(source))
    info = folder / f"{name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[retarget.plugins]\n{name} = {name}\n")


@pytest.fixture
def plugin_dir(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def _cli(plugin_dir, *args):
    import os

    env = dict(os.environ, PYTHONPATH=str(plugin_dir))
    return subprocess.run([sys.executable, "-m", "retarget", *args], capture_output=True, text=True, env=env)


def test_plugin_that_raises_on_import_is_listed_as_broken(plugin_dir):
    _install_plugin(plugin_dir, "boom_plugin", "raise RuntimeError('boom at import')")
    pm = PluginManager()
    pm.load_entry_points()
    record = pm.records["boom_plugin"]
    assert not record.ok and "RuntimeError: boom at import" in record.error
    assert "vmvx" in pm.by_name("retarget_targets")


def test_broken_plugin_keeps_the_cli_working(plugin_dir):
    _install_plugin(plugin_dir, "boom_plugin", "raise RuntimeError('boom at import')")
    listed = _cli(plugin_dir, "plugins", "--json")
    assert listed.returncode == 0, listed.stderr
    assert '"status": "broken"' in listed.stdout and "boom at import" in listed.stdout
    targets = _cli(plugin_dir, "targets")
    assert targets.returncode == 0 and "vmvx" in targets.stdout


def test_plugin_that_raises_inside_a_hook_is_isolated(plugin_dir):
    _install_plugin(plugin_dir, "hook_boom", """
        from retarget.hookspecs import hookimpl
        RETARGET_PLUGIN_API = 1

        @hookimpl
        def retarget_drivers():
            raise ValueError("driver table exploded")
    """)
    pm = PluginManager()
    pm.load_entry_points()
    assert {"local-task", "local-sync"} <= set(pm.by_name("retarget_drivers"))
    assert "driver table exploded" in pm.records["hook_boom"].error


def test_plugin_for_another_api_version_gets_a_clear_message(plugin_dir):
    _install_plugin(plugin_dir, "old_api", "RETARGET_PLUGIN_API = 0\n")
    pm = PluginManager()
    pm.load_entry_points()
    assert "written for plugin API 0; this retarget speaks plugin API 1" in pm.records["old_api"].error


def test_third_party_plugin_contributes_a_target(plugin_dir):
    _install_plugin(plugin_dir, "extra_target", """
        from retarget.hookspecs import hookimpl
        from retarget.vmvx import VmvxTarget
        RETARGET_PLUGIN_API = 1

        class Echo(VmvxTarget):
            name = "echo"

        @hookimpl
        def retarget_targets():
            return [Echo()]
    """)
    pm = PluginManager()
    pm.load_entry_points()
    assert "echo" in pm.by_name("retarget_targets")
    assert pm.records["extra_target"].hooks == ["retarget_targets"]


def test_builtin_wins_a_name_clash_unless_the_plugin_says_tryfirst(plugin_dir):
    _install_plugin(plugin_dir, "shadow", """
        from retarget.hookspecs import hookimpl
        from retarget.vmvx import VmvxTarget
        RETARGET_PLUGIN_API = 1

        class Impostor(VmvxTarget):
            pass

        @hookimpl
        def retarget_targets():
            return [Impostor()]
    """)
    pm = PluginManager()
    pm.load_entry_points()
    assert type(pm.by_name("retarget_targets")["vmvx"]).__name__ == "VmvxTarget"
    assert any("shadowed" in n for n in pm.records["shadow"].notes)


def test_a_misspelled_hook_marks_the_plugin_broken_and_names_the_right_one(plugin_dir):
    _install_plugin(plugin_dir, "typo_hook", """
        from retarget.hookspecs import hookimpl
        RETARGET_PLUGIN_API = 1

        @hookimpl
        def retarget_target():
            return []
    """)
    pm = PluginManager()
    pm.load_entry_points()
    record = pm.records["typo_hook"]
    assert not record.ok and "retarget_target," in record.error and "did you mean retarget_targets?" in record.error


def test_a_hook_of_a_newer_api_marked_optional_is_ignored(plugin_dir):
    _install_plugin(plugin_dir, "newer_hook", """
        from retarget.hookspecs import hookimpl
        RETARGET_PLUGIN_API = 1

        @hookimpl(optionalhook=True)
        def retarget_something_new():
            return []

        @hookimpl
        def retarget_drivers():
            return []
    """)
    pm = PluginManager()
    pm.load_entry_points()
    assert pm.records["newer_hook"].ok and pm.records["newer_hook"].hooks == ["retarget_drivers"]


def test_a_plugin_whose_hook_raises_is_listed_as_broken_before_anything_calls_it(plugin_dir):
    _install_plugin(plugin_dir, "hook_boom", """
        from retarget.hookspecs import hookimpl
        RETARGET_PLUGIN_API = 1

        @hookimpl
        def retarget_targets():
            raise ValueError("target table exploded")
    """)
    listed = _cli(plugin_dir, "plugins", "--json")
    assert listed.returncode == 0, listed.stderr
    record = next(r for r in json.loads(listed.stdout) if r["name"] == "hook_boom")
    assert record["status"] == "broken" and "target table exploded" in record["error"]
    assert "ValueError: target table exploded" in record["traceback"]


def test_a_tryfirst_plugin_overrides_a_builtin(plugin_dir):
    _install_plugin(plugin_dir, "override", """
        from retarget.hookspecs import hookimpl
        from retarget.vmvx import VmvxTarget
        RETARGET_PLUGIN_API = 1

        class Faster(VmvxTarget):
            pass

        @hookimpl(tryfirst=True)
        def retarget_targets():
            return [Faster()]
    """)
    pm = PluginManager()
    pm.load_entry_points()
    assert type(pm.by_name("retarget_targets")["vmvx"]).__name__ == "Faster"
    assert any("shadowed" in n for n in pm.records["builtin"].notes)
