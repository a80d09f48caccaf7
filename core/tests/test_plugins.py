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


def _loaded(plugin_dir, name: str, source: str):
    _install_plugin(plugin_dir, name, source)
    pm = PluginManager()
    pm.load_entry_points()
    return pm, pm.records[name]


def test_a_misspelled_hook_is_told_to_rename_it_or_mark_it_optional(plugin_dir):
    _, record = _loaded(plugin_dir, "typo_fix", """
        from retarget.hookspecs import hookimpl
        RETARGET_PLUGIN_API = 1

        @hookimpl
        def retarget_driver():
            return []
    """)
    assert record.error.endswith("(did you mean retarget_drivers?)"), record.error
    assert "rename it in typo_fix" in record.fix and "@hookimpl(optionalhook=True)" in record.fix


def test_an_api_version_that_is_not_an_integer_says_it_must_be_one(plugin_dir):
    _, record = _loaded(plugin_dir, "string_api", "RETARGET_PLUGIN_API = '1'\n")
    assert record.error == "declares RETARGET_PLUGIN_API = '1', a str; it must be an integer"
    assert record.fix == "write `RETARGET_PLUGIN_API = 1` in string_api"


def test_a_plugin_for_a_newer_api_is_told_to_upgrade_retarget(plugin_dir):
    _, record = _loaded(plugin_dir, "newer_api", "RETARGET_PLUGIN_API = 2\n")
    assert "written for plugin API 2; this retarget speaks plugin API 1" in record.error
    assert record.fix.startswith("upgrade retarget (this is 0.1.0) to a release that speaks plugin API 2"), record.fix


def test_a_plugin_for_an_older_api_is_told_to_upgrade_itself(plugin_dir):
    _, record = _loaded(plugin_dir, "older_api", "RETARGET_PLUGIN_API = 0\n")
    assert record.fix.startswith("upgrade older_api to a release for plugin API 1"), record.fix


def test_a_plugin_without_an_api_version_is_told_where_to_declare_it(plugin_dir):
    _, record = _loaded(plugin_dir, "no_api", "from retarget.hookspecs import hookimpl\n")
    assert record.error.startswith("does not declare RETARGET_PLUGIN_API")
    assert record.fix.startswith("add `RETARGET_PLUGIN_API = 1` to no_api"), record.fix


def test_a_hook_without_hookimpl_marks_the_plugin_broken_and_says_to_decorate_it(plugin_dir):
    pm, record = _loaded(plugin_dir, "bare_hook", """
        from retarget.hookspecs import hookimpl
        from retarget.local_drivers import LocalDriver
        RETARGET_PLUGIN_API = 1

        @hookimpl
        def retarget_targets():
            return []

        def retarget_drivers():
            return [LocalDriver("bare", 1)]
    """)
    assert record.error == "defines retarget_drivers without @hookimpl, so retarget never calls it"
    assert "`@hookimpl` above it" in record.fix
    assert "bare" not in pm.by_name("retarget_drivers")


def test_a_plugin_that_implements_no_hook_gets_a_note(plugin_dir):
    _, record = _loaded(plugin_dir, "hookless", "RETARGET_PLUGIN_API = 1\n")
    assert record.ok and any("implements no hook" in n for n in record.notes)


def test_a_hook_that_returns_a_class_is_told_to_return_an_instance(plugin_dir):
    pm, record = _loaded(plugin_dir, "class_not_instance", """
        from retarget.hookspecs import hookimpl
        RETARGET_PLUGIN_API = 1

        class Acme:
            name = "acme"
            def enumerate(self): return []
            def create(self, device_id): ...
            def dump(self, device_id): return {}

        @hookimpl
        def retarget_drivers():
            return [Acme]
    """)
    assert "acme" not in pm.by_name("retarget_drivers")
    assert "retarget_drivers returned the class Acme, not an instance of it" in record.error
    assert record.fix == "return Acme() instead"


def test_a_contribution_without_a_name_is_located_in_the_plugin_without_a_traceback(plugin_dir):
    pm, record = _loaded(plugin_dir, "nameless", """
        from retarget.hookspecs import hookimpl
        RETARGET_PLUGIN_API = 1

        @hookimpl
        def retarget_drivers():
            return [object()]
    """)
    pm.by_name("retarget_drivers")
    assert f"without a 'name' ({plugin_dir / 'nameless.py'}:5)" in record.error, record.error
    assert record.traceback is None and "`name` attribute" in record.fix


LIARS = """
    from retarget.hookspecs import hookimpl
    from retarget.local_drivers import LocalDriver
    from retarget.protocols import DeviceInfo
    RETARGET_PLUGIN_API = 1


    class Liar(LocalDriver):
        def enumerate(self):
            return [DeviceInfo("local-sync", "0", "a device that names another driver")]


    class NoInfo:
        def __init__(self, inner):
            self.inner = inner

        def __getattr__(self, name):
            if name == "info":
                raise AttributeError(name)
            return getattr(self.inner, name)


    class NoInfoDriver(LocalDriver):
        def create(self, device_id):
            return NoInfo(super().create(device_id))


    class Formatless(LocalDriver):
        def create(self, device_id):
            device = super().create(device_id)
            device.formats = ()
            return device


    @hookimpl
    def retarget_drivers():
        return [Liar("liar", 1), NoInfoDriver("noinfo", 1), LocalDriver("extra-host", 1), Formatless("formatless", 1)]
"""


@pytest.fixture
def liars(plugin_dir, monkeypatch):
    """The process's plugin manager, with the drivers of LIARS installed beside the core's."""
    from retarget import plugin_manager

    _install_plugin(plugin_dir, "liars", LIARS)
    pm = PluginManager()
    pm.load_entry_points()
    monkeypatch.setattr(plugin_manager, "_manager", pm)
    return pm


def test_a_device_that_names_another_driver_is_listed_unavailable_under_its_own_driver(liars):
    from retarget.runtime import all_devices

    devices = all_devices()
    (liar,) = [d for d in devices if d.driver == "liar"]
    assert not liar.available and "DeviceInfo.driver 'local-sync'; it must be the driver's name, 'liar'" in liar.reason
    assert [d.uri for d in devices].count("local-sync:0") == 1


def test_opening_a_device_without_a_protocol_member_names_the_member(liars):
    from retarget.errors import PluginError
    from retarget.runtime import open_device

    with pytest.raises(PluginError, match="driver 'noinfo' made a device without info, which retarget.protocols"):
        open_device("noinfo")


def test_retarget_run_on_a_device_without_a_protocol_member_is_a_one_line_error(plugin_dir, mlp_rtm):
    _install_plugin(plugin_dir, "liars", LIARS)
    result = _cli(plugin_dir, "run", str(mlp_rtm[0]), "--device", "noinfo", "--input", "2x8xf32=1")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("error: driver 'noinfo' made a device without info"), result.stderr


def test_doctor_smoke_tests_a_driver_that_no_target_lists_with_code_it_loads(liars):
    from retarget.cli.doctor import diagnose

    smoke = {s["device"]: s for s in diagnose()["smoke"]}
    assert smoke["extra-host:0"]["target"] == "vmvx" and smoke["extra-host:0"]["pass"] is True
    assert smoke["formatless:0"]["pass"] is None and "none compiles code it loads" in smoke["formatless:0"]["reason"]
    assert smoke["noinfo:0"]["pass"] is False and "without info" in smoke["noinfo:0"]["reason"]


def test_retarget_plugins_prints_a_broken_plugins_error_and_fix_in_full_at_80_columns(plugin_dir):
    _install_plugin(plugin_dir, "a_plugin_with_a_long_name_and_no_api", "x = 1\n")
    import os

    env = dict(os.environ, PYTHONPATH=str(plugin_dir), COLUMNS="80")
    listed = subprocess.run([sys.executable, "-m", "retarget", "plugins"], capture_output=True, text=True, env=env)
    assert listed.returncode == 0, listed.stderr
    assert ("error a_plugin_with_a_long_name_and_no_api: does not declare RETARGET_PLUGIN_API, the plugin API it is "
            "written for") in listed.stdout
    assert "fix: add `RETARGET_PLUGIN_API = 1` to a_plugin_with_a_long_name_and_no_api" in listed.stdout
    assert "…" not in listed.stdout
