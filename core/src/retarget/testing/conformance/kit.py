"""What the conformance tests share: finding a plugin's contributions, reference outputs from
vmvx, and a small host program that drives a device through the HAL directly.

Everything here reaches a plugin only through the registry and the protocols, as the runtime
does; nothing names a plugin.
"""

from __future__ import annotations

import numpy as np

from ...ir.ops import VIEWS
from ...plugin_manager import PluginRecord, manager

HOOKS = {"targets": "retarget_targets", "drivers": "retarget_drivers", "loaders": "retarget_executable_loaders"}
SMALL_ZOO = ("mlp", "small_cnn")
HOST_SPELLINGS = ("host", "native")  # may need a live device; every other name parses anywhere
RELATIVE_TOLERANCE = 1e-4  # max|got - vmvx| / max|vmvx|, as the zoo tests of every backend use
REFERENCE_DRIVER = "local-sync"
BINDING_ALIGNMENT = 256  # bindings sit at multiples of this in one buffer, as the runtime places tensors
# The zoo models need torch; the extra pins the version retarget is tested with (docs/plugins.md says the same).
TORCH_INSTALL = "pip install 'retarget[torch]' (from a checkout of retarget: pip install -e './core[torch]')"


# -- the plugin under test ----------------------------------------------------------------------


def find_plugin(name: str) -> PluginRecord | None:
    """The plugin whose entry-point name or distribution name is `name`."""
    records = manager().records
    if name in records:
        return records[name]
    return next((r for r in records.values() if r.distribution and _same(r.distribution, name)), None)


def _same(a: str, b: str) -> bool:
    return a.lower().replace("_", "-") == b.lower().replace("_", "-")


def contributions(plugin: str, kind: str) -> list[str]:
    """Names (formats, for loaders) of what plugin `plugin` contributes to `kind` ("targets", ...)."""
    record = find_plugin(plugin)
    if record is None or not record.ok:
        return []
    key = "format" if kind == "loaders" else "name"
    names = [getattr(item, key, None) for owner, item in manager().collect(HOOKS[kind]) if owner == record.name]
    return [n for n in dict.fromkeys(names) if isinstance(n, str)]


def owner(kind: str, name: str) -> str | None:
    """The plugin whose contribution `name` wins in the registry (the first in hook order)."""
    key = "format" if kind == "loaders" else "name"
    return next((p for p, item in manager().collect(HOOKS[kind]) if getattr(item, key, None) == name), None)


def registry(kind: str) -> dict:
    return manager().by_name(HOOKS[kind])


# -- devices --------------------------------------------------------------------------------------


def first_device(driver_name: str):
    """(device, None) for the driver's first available device, or (None, why there is none)."""
    driver = registry("drivers").get(driver_name)
    if driver is None:
        return None, f"driver '{driver_name}' is not installed"
    infos = driver.enumerate()
    available = [d for d in infos if d.available]
    if not available:
        reasons = "; ".join(d.reason for d in infos) or "enumerate() returned no device"
        return None, f"no available {driver_name} device: {reasons}"
    return driver.create(available[0].id), None


def assert_unavailable(driver_name: str, *words: str) -> str:
    """What a user meets when driver `driver_name` cannot run here (its library missing, or failing to
    start): `enumerate()` returns without raising, with no available device and a one-line reason holding
    every one of `words`; `retarget.devices()` lists that reason; opening the driver, directly or by loading
    a module on it, raises UnknownDeviceError carrying the reason. Returns the reason."""
    import retarget

    from ...errors import UnknownDeviceError
    from ...testing.graphs import mlp_module

    infos = registry("drivers")[driver_name].enumerate()
    assert infos and not any(i.available for i in infos), f"{driver_name}: {infos}"
    reason = infos[0].reason
    assert reason and "\n" not in reason, f"{driver_name}: the reason must be one line: {reason!r}"
    for word in words:
        assert word in reason, f"{driver_name}: {word!r} is not in the reason {reason!r}"
    listed = [d for d in retarget.devices() if d.driver == driver_name]
    assert listed and all(not d.available for d in listed) and listed[0].reason == reason, listed
    for open_it in (lambda: registry("drivers")[driver_name].create(infos[0].id),
                    lambda: retarget.load(retarget.compile(mlp_module()[0], "vmvx"), device=driver_name)):
        try:
            open_it()
        except UnknownDeviceError as e:
            assert reason in str(e), f"{driver_name}: opening it says {e}, not why: {reason}"
        else:
            raise AssertionError(f"{driver_name}: opening an unavailable driver did not raise UnknownDeviceError")
    return reason


def modes(device) -> list:
    """The device's command-buffer modes; [None] (the one default) when it declares none."""
    return list(getattr(device, "modes", None) or [None])


def command_buffer(device, mode):
    return device.command_buffer() if mode is None else device.command_buffer(mode=mode)


def target_for(driver_name: str, device, prefer_plugin: str | None = None):
    """(backend, desc) of an installed target whose code this device loads, or (None, None).

    Targets that list the driver come first (the plugin's own before others); they compile for
    `describe(device)`. Failing those, any target whose default architecture the device loads."""
    targets = registry("targets")
    own = set(contributions(prefer_plugin, "targets")) if prefer_plugin else set()
    listing = sorted((t for t in targets.values() if driver_name in t.drivers), key=lambda t: t.name not in own)
    for backend in listing:
        desc = backend.describe(device)
        if device.can_load(desc.format, desc) is None:
            return backend, desc
    for backend in targets.values():
        desc, _ = backend.default()
        if backend not in listing and desc.format in device.formats and device.can_load(desc.format, desc) is None:
            return backend, desc
    return None, None


# -- graphs and their reference outputs ------------------------------------------------------


def prepare(module):
    """Run the compiler's graph passes on `module` (in place, as `retarget.compile` does); returns it."""
    from ... import ir
    from ...compiler import GRAPH_PASSES

    for _, graph_pass in GRAPH_PASSES:
        module = graph_pass(module)
    ir.verify(module)
    return module


def only_function(module):
    (fn,) = module.functions.values()
    return fn


def dispatches(module):
    """The dispatches of a prepared module's only function, as `retarget.compile` forms them."""
    from ...passes.dispatch import form_dispatches

    return form_dispatches(only_function(module))


class Reference:
    """A graph module compiled for vmvx and loaded on local-sync: the outputs every backend must match."""

    def __init__(self, module):
        import retarget

        self.module = module
        self.function_name = only_function(module).name
        self.loaded = retarget.load(retarget.compile(module, "vmvx"), device=REFERENCE_DRIVER)

    def __call__(self, *inputs) -> list[np.ndarray]:
        out = self.loaded.function(self.function_name)(*inputs)
        return list(out) if isinstance(out, tuple) else [out]


def assert_matches(got, expected, what: str) -> None:
    from ..numerics import relative_error

    got, expected = np.asarray(got), np.asarray(expected)
    assert got.shape == expected.shape and got.dtype == expected.dtype, \
        f"{what}: got {got.dtype}{list(got.shape)}, vmvx gives {expected.dtype}{list(expected.shape)}"
    if expected.dtype.kind == "f":
        error = relative_error(got, expected)
        assert error <= RELATIVE_TOLERANCE, f"{what}: relative error {error:.2e} against vmvx > {RELATIVE_TOLERANCE}"
    else:
        mismatches = int(np.sum(got != expected))
        assert mismatches == 0, f"{what}: {mismatches} of {expected.size} elements differ from vmvx"


def varied(inputs, round: int) -> list[np.ndarray]:
    """The inputs for submission `round`: rolled, so that each round has different outputs."""
    return [np.roll(a, round).reshape(a.shape) for a in inputs]


# -- a host program over the HAL ----------------------------------------------------------------


class HalProgram:
    """One function's dispatches recorded into a command buffer by hand, over one buffer.

    Every tensor (arguments, intermediates, constants, results) gets a slot at a multiple of
    BINDING_ALIGNMENT in one buffer, starting past the first slot, so bindings have offsets.
    Dispatches are separated by barriers; the command buffer is ended once and submitted often."""

    def __init__(self, device, backend, desc, module, mode):
        self.device = device
        self.function = only_function(module)
        self.dispatches = dispatches(module)
        self.binary = backend.compile([d.function for d in self.dispatches], desc)
        self.executable = device.load_executable(self.binary)
        self.slots: dict = {}
        size = BINDING_ALIGNMENT
        for v in [*self.function.args, *(x for d in self.dispatches for x in (*d.inputs, *d.outputs))]:
            v = _alias_root(v)
            if v not in self.slots:
                self.slots[v] = size
                size += -(-max(v.type.nbytes, 1) // BINDING_ALIGNMENT) * BINDING_ALIGNMENT
        self.buffer = device.allocate(size)
        for v, offset in self.slots.items():
            if v.owner is not None and v.owner.name == "rt.constant":
                device.write(self.buffer, offset, np.ascontiguousarray(v.owner.attrs["value"].array))
        self.command_buffer = command_buffer(device, mode)
        for i, d in enumerate(self.dispatches):
            if i:
                self.command_buffer.barrier()
            self.command_buffer.dispatch(self.executable, i, [self.binding(v) for v in (*d.inputs, *d.outputs)])
        self.command_buffer.end()

    def binding(self, v) -> tuple:
        return self.buffer, self.slots[_alias_root(v)], v.type.nbytes

    def __call__(self, *inputs) -> list[np.ndarray]:
        for v, a in zip(self.function.args, inputs):
            self.device.write(self.buffer, self.slots[_alias_root(v)], np.ascontiguousarray(a))
        self.device.submit(self.command_buffer)
        self.device.wait()
        outs = []
        for v in self.function.returns:
            raw = self.device.read(self.buffer, self.slots[_alias_root(v)], v.type.nbytes)
            outs.append(np.asarray(raw).view(v.type.dtype.np_dtype).reshape(v.type.shape))
        return outs


def _alias_root(v):
    """A view (a reshape, a bitcast) is its operand's bytes; the host program gives both one slot."""
    while v.owner is not None and v.owner.name in VIEWS:
        v = v.owner.operands[0]
    return v


# -- dynamic shapes (optional: a plugin that does not support them is skipped, saying so) ----------------

DYNAMIC_CASES = ("matmul_tails",)  # compiled by every target and run on its devices: tails in all three sizes


def dispatch_takes_sizes(device) -> bool:
    """Whether the device's command buffers take a dynamic entry point's `scalars` (protocols.py)."""
    import inspect

    return "scalars" in inspect.signature(device.command_buffer().dispatch).parameters


def compile_dynamic(target, desc, name: str):
    """The dispatches of dynamic case `name` and `target`'s binary of them; a skip when the target
    refuses sizes known only at run time (they are optional)."""
    import pytest

    from ...errors import UnsupportedOpError
    from ..dynamic import module

    kernels = [d.function for d in dispatches(module(name))]
    try:
        return kernels, target.compile(kernels, desc)
    except UnsupportedOpError as e:
        if "run time" not in str(e) and "symbolic" not in str(e):
            raise
        pytest.skip(f"{target.name} does not compile sizes known only at run time (optional): {e.message}")
