"""An executable loader for the host-memory drivers: they advertise its format, and run a target's
code of that format on the reference graphs as vmvx does."""

import numpy as np
import pytest

import retarget
from retarget.testing.conformance import kit
from retarget.testing.conformance.fixtures import *  # noqa: F403
from retarget.testing.conformance.fixtures import RUN

LOCAL_DRIVERS = ("local-sync", "local-task")


def _producer(loader_format):
    """An installed target whose default architecture compiles to this format."""
    for backend in kit.registry("targets").values():
        desc, _ = backend.default()
        if desc.format == loader_format:
            return backend, desc
    pytest.skip(f"no installed target produces format '{loader_format}'")


def test_the_loader_names_its_format(loader, loader_format):
    assert loader.format == loader_format


def test_the_local_drivers_load_the_format(loader_format):
    for name in LOCAL_DRIVERS:
        device = RUN.device(name)
        assert loader_format in device.formats, f"{name} does not list format '{loader_format}'"


def test_the_loader_accepts_its_target_s_default_architecture(loader):
    _, desc = _producer(loader.format)
    assert loader.can_load(desc) is None, f"the loader refuses {desc.name}"


def test_a_dynamic_graph_runs_through_the_loader_at_several_sizes(loader_format):
    """The loader's `bind(views, scalars)` for an entry point with sizes known at run time."""
    from retarget.testing import dynamic

    backend, desc = _producer(loader_format)
    kit.compile_dynamic(backend, desc, kit.DYNAMIC_CASES[0])  # skips if the target refuses
    for name in LOCAL_DRIVERS:
        dynamic.check(desc, name, [kit.DYNAMIC_CASES[0]])


def test_reference_graphs_run_through_the_loader_and_match_vmvx(loader_format, graph_name, reference_graph):
    backend, desc = _producer(loader_format)
    module, inputs, _ = reference_graph
    reference = RUN.reference(f"graph:{graph_name}", module)
    artifact = retarget.compile(module, desc)
    for name in LOCAL_DRIVERS:
        loaded = retarget.load(artifact, device=name)
        assert loaded.variant.format == loader_format
        got = loaded.function(kit.only_function(module).name)(*inputs)
        kit.assert_matches(got, reference(*inputs)[0], f"{graph_name} ({desc.name}) on {name}")


def test_a_native_program_computes_what_running_each_workgroup_computes(loader, loader_format, graph_name,
                                                                        reference_graph):
    """A loader with a `native_runner` (protocols.ExecutableLoader): the local drivers run recorded functions
    through its programs, and those give exactly what calling `run` for each workgroup gives."""
    if getattr(loader, "native_runner", None) is None:
        pytest.skip(f"loader '{loader_format}' has no native_runner")
    backend, desc = _producer(loader_format)
    module, inputs, _ = reference_graph
    artifact = retarget.compile(module, desc)
    for name in LOCAL_DRIVERS:
        fn = retarget.load(artifact, device=name).function(kit.only_function(module).name)
        command_buffer = fn.command_buffer
        assert command_buffer.programs, f"{name} made no native program of {graph_name}"
        native = np.array(fn(*inputs))
        command_buffer.programs = {}  # each workgroup through `run`, from Python
        np.testing.assert_array_equal(fn(*inputs), native, f"{graph_name} ({desc.name}) on {name}")
