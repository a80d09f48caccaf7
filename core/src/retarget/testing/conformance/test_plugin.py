"""The plugin as a whole: it loads, speaks this plugin API, and its contributions are the ones in use."""

import pytest

from retarget.protocols import Driver, ExecutableLoader, TargetBackend, missing_members
from retarget.testing.conformance import kit
from retarget.testing.conformance.fixtures import *  # noqa: F403

PROTOCOLS = {"targets": TargetBackend, "drivers": Driver, "loaders": ExecutableLoader}


def test_the_plugin_is_installed_and_loads(plugin_name):
    record = kit.find_plugin(plugin_name)
    installed = ", ".join(kit.manager().records)
    assert record is not None, f"no plugin '{plugin_name}' is installed (installed: {installed}); " \
                               "is its [project.entry-points.\"retarget.plugins\"] entry point installed?"
    assert record.ok, f"plugin '{plugin_name}' is broken: {record.error}\n{record.traceback or ''}"


def _loaded(plugin_name):
    record = kit.find_plugin(plugin_name)
    if record is None or not record.ok:
        pytest.skip(f"plugin '{plugin_name}' is not loaded (test_the_plugin_is_installed_and_loads says why)")
    return record


def test_the_plugin_contributes_a_target_a_driver_or_a_loader(plugin_name):
    record = _loaded(plugin_name)
    found = {kind: kit.contributions(plugin_name, kind) for kind in kit.HOOKS}
    assert any(found.values()), (f"plugin '{plugin_name}' contributes nothing: {found}; its hooks: {record.hooks}; "
                                 "each hook is decorated with @hookimpl and returns a list of objects")


def test_every_contribution_implements_its_protocol(plugin_name):
    _loaded(plugin_name)
    for kind, protocol in PROTOCOLS.items():
        for name in kit.contributions(plugin_name, kind):
            item = kit.registry(kind)[name]
            assert isinstance(item, protocol), \
                f"{kind[:-1]} '{name}' lacks {', '.join(missing_members(item, protocol))} of {protocol.__name__}"


def test_no_contribution_of_the_plugin_is_shadowed(plugin_name):
    record = _loaded(plugin_name)
    for kind in kit.HOOKS:
        for name in kit.contributions(plugin_name, kind):
            winner = kit.owner(kind, name)
            assert winner == record.name, f"{kind[:-1]} '{name}' of '{record.name}' is shadowed by '{winner}'"
