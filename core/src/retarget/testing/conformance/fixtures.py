"""The suite's parameters and fixtures. Every conformance test module star-imports this module,
so `pytest_generate_tests` below runs for the suite's tests only, wherever they are collected.

The plugin under test is the module's `RETARGET_PLUGIN`, else `--retarget-plugin NAME`.
Parameters: `plugin_name`; `target_name`, `driver_name`, `loader_format` (what the plugin
contributes); `run_on` (one of its targets and one of that target's drivers); `graph_name`
(the reference graphs of `retarget.testing.graphs`); `zoo_model` (the small zoo models, or
all of them with `--retarget-full`).
"""

from __future__ import annotations

import pytest

from retarget.testing.conformance import kit

NO_PLUGIN = "no plugin chosen: run `pytest --pyargs retarget.testing --retarget-plugin NAME`"
PARAMS = ("plugin_name", "target_name", "driver_name", "loader_format", "run_on", "graph_name", "zoo_model")


def chosen_plugin(config, module=None) -> str | None:
    name = getattr(module, "RETARGET_PLUGIN", None)
    try:
        return name or config.getoption("retarget_plugin")
    except ValueError:  # the pytest11 plugin is not loaded (PYTEST_DISABLE_PLUGIN_AUTOLOAD)
        return name


def _skipped(reason: str) -> list:
    return [pytest.param(None, marks=pytest.mark.skip(reason=reason), id="none")]


def _values(param: str, plugin: str, config) -> list:
    from retarget.testing import zoo
    from retarget.testing.graphs import REFERENCE_GRAPHS

    if param == "plugin_name":
        return [plugin]
    if param == "graph_name":
        return list(REFERENCE_GRAPHS)
    if param == "zoo_model":
        full = config.getoption("retarget_full", default=False)
        return list(zoo.MODELS) if full else list(kit.SMALL_ZOO)
    record = kit.find_plugin(plugin)
    if record is None or not record.ok:
        return _skipped(f"plugin '{plugin}' is not loaded (test_the_plugin_is_installed_and_loads says why)")
    kind = {"target_name": "targets", "driver_name": "drivers", "loader_format": "loaders", "run_on": "targets"}[param]
    names = kit.contributions(plugin, kind)
    if not names:
        return _skipped(f"plugin '{plugin}' contributes no {kind[:-1]}")
    if param != "run_on":
        return names
    targets = kit.registry("targets")
    pairs = [pytest.param((t, d), id=f"{t}-on-{d}") for t in names for d in targets[t].drivers]
    return pairs or _skipped(f"the targets of '{plugin}' list no driver")


def pytest_generate_tests(metafunc):
    plugin = chosen_plugin(metafunc.config, metafunc.module)
    for param in PARAMS:
        if param in metafunc.fixturenames:
            values = _skipped(NO_PLUGIN) if plugin is None else _values(param, plugin, metafunc.config)
            metafunc.parametrize(param, values)


class _Run:
    """What one process caches: open devices, vmvx references, imported zoo models."""

    def __init__(self):
        self.devices: dict[str, tuple] = {}
        self.every_device: dict[str, list] = {}
        self.references: dict[str, kit.Reference] = {}
        self.zoo: dict[str, tuple] = {}

    def device(self, driver_name: str):
        if driver_name not in self.devices:
            self.devices[driver_name] = kit.first_device(driver_name)
        device, reason = self.devices[driver_name]
        if device is None:
            pytest.skip(reason)
        return device

    def available_devices(self, driver_name: str) -> list:
        """Every available device of the driver, opened once per run (the first is `device`'s)."""
        if driver_name not in self.every_device:
            if driver_name not in self.devices:
                self.devices[driver_name] = kit.first_device(driver_name)
            first, _ = self.devices[driver_name]
            devices = []
            if first is not None:
                driver = kit.registry("drivers")[driver_name]
                others = [d for d in driver.enumerate() if d.available][1:]
                devices = [first, *(driver.create(d.id) for d in others)]
            self.every_device[driver_name] = devices
        return self.every_device[driver_name]

    def reference(self, key: str, module) -> kit.Reference:
        if key not in self.references:
            self.references[key] = kit.Reference(module)
        return self.references[key]


RUN = _Run()


@pytest.fixture
def target(target_name):
    return kit.registry("targets")[target_name]


@pytest.fixture
def driver(driver_name):
    return kit.registry("drivers")[driver_name]


@pytest.fixture
def loader(loader_format):
    return kit.registry("loaders")[loader_format]


@pytest.fixture
def device(driver_name):
    """The driver's first available device, opened once per run; a skip saying why when there is none."""
    return RUN.device(driver_name)


@pytest.fixture
def reference_graph(graph_name):
    """(prepared module, inputs, outputs computed by numpy) of a reference graph, built afresh."""
    from retarget.testing.graphs import REFERENCE_GRAPHS

    module, inputs, expected = REFERENCE_GRAPHS[graph_name]()
    return kit.prepare(module), tuple(inputs), expected


@pytest.fixture
def zoo_graph(zoo_model):
    """(prepared graph module, numpy inputs) of a zoo model, imported through torch.export once per run."""
    if zoo_model not in RUN.zoo:
        try:
            import torch
        except ImportError as e:
            pytest.skip(f"the zoo needs torch ({e}); {kit.TORCH_INSTALL}")
        from retarget.compiler import import_model
        from retarget.testing import zoo

        model, inputs = zoo.make(zoo_model)
        with torch.no_grad():
            module = kit.prepare(import_model(model, example_inputs=inputs))
        RUN.zoo[zoo_model] = (module, tuple(x.numpy() for x in inputs))
    return RUN.zoo[zoo_model]


__all__ = ["device", "driver", "loader", "pytest_generate_tests", "reference_graph", "target", "zoo_graph"]
