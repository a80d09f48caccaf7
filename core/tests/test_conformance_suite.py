"""The conformance suite catches what it claims to: it is run, as a third party runs it, against a
plugin of deliberately broken targets and drivers, and each defect fails its own test."""

import os
import re
import subprocess
import sys
import textwrap
from dataclasses import replace

import pytest
from retarget.plugin_manager import PluginManager

MUTANTS = """
    from dataclasses import replace

    from retarget.errors import UnknownTargetError
    from retarget.hookspecs import hookimpl
    from retarget.local_drivers import LocalCommandBuffer, LocalDevice, LocalDriver, _run_all
    from retarget.vmvx import REFERENCE, VmvxTarget

    RETARGET_PLUGIN_API = 1


    class NoSuggestions(VmvxTarget):
        name = "no-suggestions"

        def parse(self, spec):
            if spec in ("", "reference", "host", "default"):
                return replace(REFERENCE, backend=self.name)
            raise UnknownTargetError(f"no architecture '{spec}'")

        def default(self):
            return self.parse(""), None

        def describe(self, device):
            return self.parse("")


    class NoBounds(LocalDevice):
        def read(self, buffer, offset, nbytes):
            return buffer.data[offset:offset + nbytes].copy()


    class OneShot(LocalDevice):
        def submit(self, command_buffer):
            super().submit(command_buffer)
            command_buffer.stages = [[]]


    class Unordered(LocalCommandBuffer):
        def barrier(self):
            pass


    class NoBarriers(LocalDevice):
        def command_buffer(self):
            return Unordered()

        def submit(self, command_buffer):
            for stage in command_buffer.stages:
                _run_all(reversed(stage))


    class SwappedSizes(LocalCommandBuffer):
        def dispatch(self, executable, entry, bindings, *, scalars=(), workgroup_count=None):
            super().dispatch(executable, entry, bindings, scalars=tuple(reversed(scalars)),
                             workgroup_count=workgroup_count)


    class WrongSizes(LocalDevice):
        def command_buffer(self):
            return SwappedSizes()


    class Mutant(LocalDriver):
        def __init__(self, name, device_class):
            super().__init__(name, workers=1)
            self.device_class = device_class

        def create(self, device_id):
            return self.device_class(self.enumerate()[0], 1)


    @hookimpl
    def retarget_targets():
        return [NoSuggestions()]


    @hookimpl
    def retarget_drivers():
        return [Mutant("no-bounds", NoBounds), Mutant("one-shot", OneShot), Mutant("no-barriers", NoBarriers),
                Mutant("wrong-sizes", WrongSizes)]
"""


def _install(folder, name: str, source: str) -> None:
    (folder / f"{name}.py").write_text(textwrap.dedent(source))
    info = folder / f"{name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[retarget.plugins]\n{name} = {name}\n")


def _suite(folder, *args) -> dict[str, str]:
    """Run the suite in a subprocess with `folder` on the path; {test id: PASSED/FAILED/SKIPPED}."""
    env = dict(os.environ, PYTHONPATH=str(folder))
    run = subprocess.run([sys.executable, "-m", "pytest", "--pyargs", "retarget.testing", "-p", "no:cacheprovider",
                          "-q", "--tb=no", "-rA", *args], capture_output=True, text=True, env=env, cwd=folder)
    outcomes = {}
    for status, test in re.findall(r"^(PASSED|FAILED|ERROR) \S+::(\S+)", run.stdout, re.M):
        outcomes[test] = status
    assert outcomes, run.stdout + run.stderr
    return outcomes


@pytest.fixture(scope="module")
def mutants(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mutants")
    _install(folder, "mutants", MUTANTS)
    return _suite(folder, "--retarget-plugin", "mutants", "-k", "not zoo")


@pytest.mark.parametrize("failing, passing", [
    ("test_an_unknown_name_raises_and_suggests_known_names[no-suggestions]",
     "test_reference_graphs_match_vmvx[no-suggestions-on-local-sync-chain]"),
    ("test_write_and_read_outside_a_buffer_raise_value_error[no-bounds]",
     "test_copy_moves_bytes_between_and_within_buffers[no-bounds]"),
    ("test_a_barrier_orders_commands_and_a_command_buffer_replays[one-shot]",
     "test_fill_writes_a_byte_pattern[one-shot]"),
    ("test_reference_graphs_dispatch_and_match_vmvx[one-shot-mlp]",
     "test_reference_graphs_dispatch_and_match_vmvx[no-bounds-mlp]"),
    ("test_a_barrier_orders_commands_and_a_command_buffer_replays[no-barriers]",
     "test_write_then_read_round_trips_at_any_byte_offset[no-barriers]"),
    ("test_reference_graphs_dispatch_and_match_vmvx[no-barriers-chain]",
     "test_reference_graphs_dispatch_and_match_vmvx[no-barriers-add_f32]"),
    ("test_a_dynamic_dispatch_takes_its_sizes_at_record_time[wrong-sizes]",
     "test_reference_graphs_dispatch_and_match_vmvx[wrong-sizes-mlp]"),
], ids=["suggestions", "bounds", "replay", "replayed-dispatch", "barrier", "dependent-dispatches", "dynamic-sizes"])
def test_each_defect_fails_its_test_while_sound_behaviour_passes(mutants, failing, passing):
    assert mutants.get(failing) == "FAILED", f"{failing}: {mutants.get(failing)}"
    assert mutants.get(passing) == "PASSED", f"{passing}: {mutants.get(passing)}"


# Drivers wrong under threads or over many calls; each is the local driver with one defect.
LEAKY_MUTANTS = """
    import time

    from retarget.hookspecs import hookimpl
    from retarget.local_drivers import LocalDevice, LocalDriver

    RETARGET_PLUGIN_API = 1


    class SharedStaging(LocalDevice):
        \"\"\"Reads through one staging array that every thread shares, without a lock.\"\"\"

        def read(self, buffer, offset, nbytes):
            self.staging = buffer.data[offset:offset + nbytes].copy()
            time.sleep(0.001)  # another thread's read lands in between
            return self.staging


    class KeepsInputs(LocalDevice):
        def write(self, buffer, offset, data):
            self.__dict__.setdefault("kept", []).append(data.copy())
            super().write(buffer, offset, data)


    class CountsNoFrees(LocalDevice):
        def allocate(self, nbytes):
            self.held = getattr(self, "held", 0) + nbytes
            return super().allocate(nbytes)

        def memory_in_use(self):
            return self.held


    class Mutant(LocalDriver):
        def __init__(self, name, device_class):
            super().__init__(name, workers=1)
            self.device_class = device_class
            self.device = None

        def create(self, device_id):
            self.device = self.device or self.device_class(self.enumerate()[0], 1)
            return self.device


    @hookimpl
    def retarget_drivers():
        return [Mutant("shared-staging", SharedStaging), Mutant("keeps-inputs", KeepsInputs),
                Mutant("counts-no-frees", CountsNoFrees)]
"""


@pytest.fixture(scope="module")
def leaky_mutants(tmp_path_factory):
    folder = tmp_path_factory.mktemp("leaky_mutants")
    _install(folder, "leaky_mutants", LEAKY_MUTANTS)
    return _suite(folder, "--retarget-plugin", "leaky_mutants", "-k", "threads or leak or memory_in_use or round_trips")


@pytest.mark.parametrize("failing, passing", [
    ("test_sixteen_threads_sharing_one_loaded_module_get_their_own_answers[shared-staging]",
     "test_write_then_read_round_trips_at_any_byte_offset[shared-staging]"),
    ("test_two_thousand_calls_leak_no_memory[keeps-inputs]",
     "test_sixteen_threads_sharing_one_loaded_module_get_their_own_answers[keeps-inputs]"),
    ("test_device_memory_in_use_comes_back_when_a_buffer_is_dropped[counts-no-frees]",
     "test_two_thousand_calls_leak_no_memory[counts-no-frees]"),
], ids=["threads", "calls-leak", "device-memory"])
def test_each_thread_or_leak_defect_fails_its_test_while_sound_behaviour_passes(leaky_mutants, failing, passing):
    assert leaky_mutants.get(failing) == "FAILED", f"{failing}: {leaky_mutants.get(failing)}"
    assert leaky_mutants.get(passing) == "PASSED", f"{passing}: {leaky_mutants.get(passing)}"


def test_a_plugin_that_fails_to_import_fails_the_first_test_with_its_error(monkeypatch, tmp_path):
    from retarget import plugin_manager
    from retarget.testing.conformance.test_plugin import test_the_plugin_is_installed_and_loads

    _install(tmp_path, "boom_kit", "raise RuntimeError('boom at import')")
    monkeypatch.syspath_prepend(str(tmp_path))
    pm = PluginManager()
    pm.load_entry_points()
    monkeypatch.setattr(plugin_manager, "_manager", pm)
    with pytest.raises(AssertionError, match="boom at import"):
        test_the_plugin_is_installed_and_loads("boom_kit")
    with pytest.raises(AssertionError, match="no plugin 'nothing-here' is installed"):
        test_the_plugin_is_installed_and_loads("nothing-here")


def test_a_device_lacking_a_protocol_member_fails_naming_the_member():
    from types import SimpleNamespace

    import retarget
    from retarget.testing.conformance.test_driver import test_the_device_describes_itself

    real = retarget.drivers()["local-sync"].create("0")
    device = SimpleNamespace(**{n: getattr(real, n) for n in dir(real) if not n.startswith("_") and n != "info"})
    with pytest.raises(AssertionError, match="the device lacks info of retarget.protocols.Device"):
        test_the_device_describes_itself(device, "local-sync")


def test_a_device_info_naming_another_driver_fails_saying_what_it_must_be():
    from retarget.local_drivers import LocalDriver
    from retarget.protocols import DeviceInfo
    from retarget.testing.conformance import test_driver

    class Liar(LocalDriver):
        def enumerate(self):
            return [DeviceInfo("oops", "0", "host")]

    with pytest.raises(AssertionError, match="DeviceInfo.driver is 'oops'; it must be the driver's name, 'liar'"):
        test_driver.test_enumerate_never_raises_and_says_why_a_device_is_unavailable(Liar("liar", 1), "liar")


def test_a_host_spelling_that_ignores_the_devices_fails_while_one_that_describes_them_passes():
    from retarget.testing.conformance.test_target import test_the_host_spellings_describe_a_device_here
    from retarget.vmvx import REFERENCE, VmvxTarget

    class FixedHost(VmvxTarget):
        drivers = ("local-sync",)

        def names(self):
            return ("host", "reference", "other")

        def parse(self, spec):
            return replace(REFERENCE, arch="other") if spec in ("host", "other") else REFERENCE

    test_the_host_spellings_describe_a_device_here(VmvxTarget())
    with pytest.raises(AssertionError, match="parse\\('host'\\) gives vmvx:other, which describe\\(\\) gives for no"):
        test_the_host_spellings_describe_a_device_here(FixedHost())
