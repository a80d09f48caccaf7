"""A target backend: its architecture table, its codegen of the reference graphs and the zoo, and
its numerics against vmvx on every driver it names that has a device here."""

from dataclasses import replace

import pytest

import retarget
from retarget.errors import UnknownTargetError
from retarget.protocols import ExecutableBinary, TargetDesc
from retarget.testing import quant_model
from retarget.testing.conformance import kit
from retarget.testing.conformance.fixtures import *  # noqa: F403
from retarget.testing.conformance.fixtures import RUN


def _has_device(target) -> bool:
    drivers = kit.registry("drivers")
    return any(d.available for name in target.drivers if name in drivers for d in drivers[name].enumerate())


def _check_desc(desc, target, spelling: str) -> None:
    where = f"{target.name}.parse({spelling!r})"
    assert isinstance(desc, TargetDesc), f"{where} returned {type(desc).__name__}, not a TargetDesc"
    assert desc.backend == target.name, f"{where} describes backend '{desc.backend}'"
    assert desc.arch and isinstance(desc.arch, str), f"{where} has no canonical arch"
    assert desc.format and isinstance(desc.format, str), f"{where} names no executable format"
    assert desc.max_workgroup_size >= 1 and all(d >= 1 for d in desc.max_workgroup_dims), f"{where}: workgroup limits"
    assert desc.shared_memory_bytes >= 0, f"{where}: negative shared memory"
    if desc.subgroup_size is not None and desc.subgroup_sizes:
        assert desc.subgroup_size in desc.subgroup_sizes, f"{where}: subgroup size not among subgroup_sizes"
    hash(desc)  # descs key caches


def _parse_all(target, host: bool = True):
    """(spelling, desc) for every name; the host spellings only when `host` and a device is here."""
    out = []
    for spelling in target.names():
        if spelling in kit.HOST_SPELLINGS and not (host and _has_device(target)):
            continue
        out.append((spelling, target.parse(spelling)))
    return out


def test_the_target_names_itself_and_its_drivers(target, target_name):
    assert target.name == target_name
    assert isinstance(target.drivers, tuple) and target.drivers, "drivers: a non-empty tuple of driver names"
    assert all(isinstance(d, str) for d in target.drivers)


def test_the_names_are_unique_and_the_default_arch_parses(target):
    names = list(target.names())
    assert names, "names() is empty"
    assert len(names) == len(set(names)), f"names() repeats {sorted({n for n in names if names.count(n) > 1})}"
    default, _ = target.default()
    assert default.arch in names or target.parse(default.arch).arch == default.arch


def test_every_name_parses_to_a_desc_of_this_target(target):
    for spelling, desc in _parse_all(target):
        _check_desc(desc, target, spelling)


def test_the_host_spellings_need_a_device_or_say_why_not(target):
    """`host` describes the device here. Its arch names the closest row of the table, which parses,
    but it need not round-trip: the row may assume more than the device has (a VM hides CPU features)."""
    spellings = [n for n in target.names() if n in kit.HOST_SPELLINGS]
    if not spellings:
        pytest.skip(f"{target.name} has no host spelling")
    for spelling in spellings:
        if _has_device(target):
            desc = target.parse(spelling)
            _check_desc(desc, target, spelling)
            _check_desc(target.parse(desc.arch), target, desc.arch)
        else:
            with pytest.raises(UnknownTargetError):
                target.parse(spelling)


def test_the_host_spellings_describe_a_device_here(target):
    """`host` goes through the driver: it is what `describe` gives for one of the available devices of the
    target's drivers (the closest row of the table, not a fixed one)."""
    spellings = [n for n in target.names() if n in kit.HOST_SPELLINGS]
    if not spellings:
        pytest.skip(f"{target.name} has no host spelling")
    devices = [device for name in target.drivers for device in RUN.available_devices(name)]
    if not devices:
        pytest.skip(f"no device of {', '.join(target.drivers)} here (the test above checks the error instead)")
    described = {replace(target.describe(device), spec=""): device.info.uri for device in devices}
    for spelling in spellings:
        desc = replace(target.parse(spelling), spec="")
        assert desc in described, (f"parse({spelling!r}) gives {desc.name}, which describe() gives for no device here "
                                   f"(it gives {', '.join(f'{d.name} for {uri}' for d, uri in described.items())}): "
                                   "`host` must describe a device of the target's drivers")


def test_every_name_round_trips_through_its_canonical_arch(target):
    for spelling, desc in _parse_all(target, host=False):
        again = target.parse(desc.arch)
        assert replace(again, spec="") == replace(desc, spec=""), \
            f"parse({spelling!r}) gives arch {desc.arch!r}, and parse({desc.arch!r}) gives a different desc"


def test_an_unknown_name_raises_and_suggests_known_names(target):
    known = [n for n in target.names() if n not in kit.HOST_SPELLINGS] or list(target.names())
    near_miss = max(known, key=len) + "zz"
    for spelling in ("no-such-arch-anywhere", near_miss):
        with pytest.raises(UnknownTargetError) as error:
            target.parse(spelling)
        message = str(error.value)
        assert any(n in message for n in known), f"parse({spelling!r}) suggests no known name: {message}"
    assert max(known, key=len) in str(error.value), f"the near miss {near_miss!r} does not suggest its original"


def test_the_default_is_an_architecture_of_this_target_with_a_one_line_note(target):
    result = target.default()
    assert isinstance(result, tuple) and len(result) == 2, "default() returns (TargetDesc, note or None)"
    desc, note = result
    _check_desc(desc, target, "<default>")
    assert note is None or (isinstance(note, str) and note and "\n" not in note), f"note: {note!r}"


def _check_binary(binary, desc, kernels) -> None:
    assert isinstance(binary, ExecutableBinary), f"compile returned {type(binary).__name__}"
    assert binary.format == desc.format, f"binary format {binary.format!r}, desc format {desc.format!r}"
    assert binary.target.backend == desc.backend and binary.target.arch == desc.arch
    assert isinstance(binary.data, bytes) and binary.data, "the executable has no bytes"
    assert binary.listing is None or isinstance(binary.listing, str)
    assert [e.name for e in binary.entry_points] == [k.name for k in kernels], "entry points != dispatches"
    for entry, kernel in zip(binary.entry_points, kernels):
        expected = [(a.type, "read") for a in kernel.args] + [(r.type, "write") for r in kernel.returns]
        assert [(b.type, b.access) for b in entry.bindings] == expected, f"{entry.name}: bindings"
        assert all(n >= 1 for n in entry.workgroup_count) and all(n >= 1 for n in entry.workgroup_size)
        wx, wy, wz = entry.workgroup_size
        assert wx * wy * wz <= desc.max_workgroup_size, f"{entry.name}: workgroup {entry.workgroup_size} too large"
        assert all(n <= m for n, m in zip(entry.workgroup_size, desc.max_workgroup_dims)), f"{entry.name}: dims"


def test_reference_graphs_compile_to_matching_entry_points(target, reference_graph):
    module, _, _ = reference_graph
    desc, _ = target.default()
    kernels = [d.function for d in kit.dispatches(module)]
    _check_binary(target.compile(kernels, desc), desc, kernels)


def test_zoo_models_compile_to_matching_entry_points(target, zoo_graph):
    module, _ = zoo_graph
    desc, _ = target.default()
    kernels = [d.function for d in kit.dispatches(module)]
    _check_binary(target.compile(kernels, desc), desc, kernels)


@pytest.mark.parametrize("case", kit.DYNAMIC_CASES)
def test_dynamic_graphs_compile_to_entry_points_that_take_their_sizes(target, case):
    """A dispatch with symbolic dimensions: the entry point lists the symbols it takes (`scalars`), its
    bindings keep the symbolic shapes and its workgroup count is a dimension of those symbols."""
    from retarget.ir.symbolic import symbols_of

    desc, _ = target.default()
    kernels, binary = kit.compile_dynamic(target, desc, case)
    assert [e.name for e in binary.entry_points] == [k.name for k in kernels], "entry points != dispatches"
    for entry, kernel in zip(binary.entry_points, kernels):
        expected = [(a.type, "read") for a in kernel.args] + [(r.type, "write") for r in kernel.returns]
        assert [(b.type, b.access) for b in entry.bindings] == expected, f"{entry.name}: bindings"
        symbols = symbols_of(*[t.shape for t, _ in expected])
        assert set(entry.scalars) == symbols, f"{entry.name}: scalars {entry.scalars}, symbols {sorted(symbols)}"
        assert symbols_of(*entry.workgroup_count) <= symbols, f"{entry.name}: count {entry.workgroup_count}"


def _target_on(run_on):
    target_name, driver_name = run_on
    target = kit.registry("targets")[target_name]
    if driver_name not in kit.registry("drivers"):
        pytest.skip(f"{target_name} names driver '{driver_name}', which is not installed")
    device = RUN.device(driver_name)
    return target, device


def test_describe_gives_an_architecture_the_device_loads(run_on):
    target, device = _target_on(run_on)
    desc = target.describe(device)
    _check_desc(desc, target, f"<describe {device.info.uri}>")
    assert device.can_load(desc.format, desc) is None, f"{device.info.uri} refuses {desc.name}"


def _compiled_for(target, device, module):
    """`module` compiled for `describe(device)`, and loaded on that device through the runtime."""
    return retarget.load(retarget.compile(module, target.describe(device)), device=device.info.uri)


def test_reference_graphs_match_vmvx(run_on, graph_name, reference_graph):
    target, device = _target_on(run_on)
    module, inputs, expected = reference_graph
    reference = RUN.reference(f"graph:{graph_name}", module)
    for got, want in zip(reference(*inputs), [expected]):
        kit.assert_matches(got, want.astype(got.dtype), "vmvx against numpy")  # the reference itself
    loaded = _compiled_for(target, device, module)
    fn = loaded.function(kit.only_function(module).name)
    for round in range(2):  # the recorded command buffer is submitted again with new inputs
        inputs_now = kit.varied(inputs, round)
        got = fn(*inputs_now)
        kit.assert_matches(got, reference(*inputs_now)[0], f"{graph_name} on {device.info.uri}, call {round + 1}")


def test_a_dynamic_graph_matches_vmvx_at_several_sizes(run_on):
    """One module, run at each size of `dynamic.CASES["matmul_tails"]` (tails in all three sizes)."""
    from retarget.testing import dynamic

    target, device = _target_on(run_on)
    kit.compile_dynamic(target, target.describe(device), kit.DYNAMIC_CASES[0])  # skips if the target refuses
    if not kit.dispatch_takes_sizes(device):
        pytest.skip(f"{device.info.uri}'s command buffers take no sizes (dynamic shapes are optional)")
    dynamic.check(target.describe(device), device.info.uri, [kit.DYNAMIC_CASES[0]])


@pytest.mark.parametrize("scheme", ["int4-g32", "8da8w"])
def test_quantized_layers_match_the_numpy_model(run_on, scheme):
    """Packed weights (ui32 words unpacked with the kernel IR's `shr` and masks), and int8 activations whose
    products are summed in i32, against `retarget.testing.quant_model`."""
    target, device = _target_on(run_on)
    for case in ("gemv", "conv1x1"):
        quant_model.check(target.describe(device), device.info.uri, scheme, case)


def test_zoo_models_match_vmvx(run_on, zoo_model, zoo_graph):
    target, device = _target_on(run_on)
    module, inputs = zoo_graph
    reference = RUN.reference(f"zoo:{zoo_model}", module)
    got = _compiled_for(target, device, module).function(kit.only_function(module).name)(*inputs)
    kit.assert_matches(got, reference(*inputs)[0], f"{zoo_model} on {device.info.uri}")


# -- the support table (optional): well formed, and allowing nothing that compile refuses ------------------


def _support(target):
    if getattr(target, "support", None) is None:
        pytest.skip(f"{target.name} has no support table (optional: placement then assumes it runs everything)")
    desc, _ = target.default()
    return desc, target.support(desc)


def test_the_support_table_names_real_ops_and_types_with_reasons(target):
    from retarget.ir.dtypes import DTYPES
    from retarget.ir.ops import OPS
    from retarget.protocols import SupportTable

    desc, table = _support(target)
    assert isinstance(table, SupportTable), f"support() returned {type(table).__name__}, not a SupportTable"
    kinds = ("float", "int", "uint", "bool")
    for key, _why in table.ops.items():
        op, _, at = key.partition(":")
        assert op in OPS, f"ops[{key!r}]: no graph op {op!r}"
        assert not at or at in DTYPES or at in kinds, f"ops[{key!r}]: {at!r} is not an element type or kind"
    for field in ("ops", "dtypes", "buffers"):
        entries = getattr(table, field)
        if field != "ops":
            assert set(entries) <= set(DTYPES), f"{field}: unknown element types {set(entries) - set(DTYPES)}"
        for key, why in entries.items():
            assert isinstance(why, str) and why.strip() and "\n" not in why, f"{field}[{key!r}]: a one-line reason"


def test_what_the_support_table_allows_compiles(target, request):
    """Placement puts on the target whatever its table allows: a case allowed and refused by `compile` is a
    model that compiles with --fallback and then fails. A sample of op/type cases (all with --retarget-full)."""
    from retarget.testing.support import disagreements

    desc, table = _support(target)
    sample = not request.config.getoption("retarget_full", default=False)
    found = disagreements(target, desc, table, sample=sample)
    assert not found, f"{target.name}:{desc.arch} allows and then refuses:\n  " + "\n  ".join(found)


def test_a_model_split_with_the_reference_matches_vmvx(run_on):
    """The reference graph `mlp` with its max refused by the target: matmul and add on the device, max on vmvx
    (local-task), with a transfer between them."""
    from retarget.testing.graphs import REFERENCE_GRAPHS

    target, device = _target_on(run_on)
    module, inputs, _ = REFERENCE_GRAPHS["mlp"]()
    module, inputs = kit.prepare(module), tuple(inputs)
    reference = RUN.reference("graph:mlp", module)
    artifact = retarget.compile(module, target.describe(device), fallback="vmvx", refuse=["rt.max"])
    assert "placements" in artifact.manifest, "the refused max did not split the module"
    loaded = retarget.load(artifact, device=device.info.uri)
    fn = loaded.function(kit.only_function(module).name)
    for round in range(2):
        inputs_now = kit.varied(inputs, round)
        kit.assert_matches(fn(*inputs_now), reference(*inputs_now)[0],
                           f"split mlp on {loaded.describe_devices()}, call {round + 1}")
