"""The conformance suite's pytest plugin (entry point `pytest11`, so pytest loads it by itself).

    pytest --pyargs retarget.testing --retarget-plugin NAME                   # the small zoo models
    pytest --pyargs retarget.testing --retarget-plugin NAME --retarget-full   # the whole zoo

runs the tests in `retarget/testing/conformance/` against every target, driver and executable
loader that the plugin NAME (its entry-point name, or its distribution name) contributes. With
PYTEST_DISABLE_PLUGIN_AUTOLOAD set, add `-p retarget.testing.pytest_plugin`.

This module only adds the options; the tests, their fixtures and their parameters live in
`retarget.testing.conformance`.
"""

from __future__ import annotations


def pytest_addoption(parser):
    group = parser.getgroup("retarget", "retarget conformance suite")
    group.addoption("--retarget-plugin", metavar="NAME", default=None,
                    help="run the conformance suite against this retarget plugin (entry-point or distribution name)")
    group.addoption("--retarget-full", action="store_true", default=False,
                    help="compile and check every zoo model, not only the small ones")


def pytest_report_header(config):
    name = config.getoption("retarget_plugin")
    if not name:
        return None
    from .conformance.kit import find_plugin

    record = find_plugin(name)
    if record is None:
        return f"retarget conformance: plugin '{name}' is not installed"
    return f"retarget conformance: plugin {record.name} ({record.distribution} {record.version})"
