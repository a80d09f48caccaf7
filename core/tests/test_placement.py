"""Placement and split modules, with the core's own target: vmvx told to refuse ops, vmvx as the fallback.

A split module's two placements are then both named for the CPU (`cpu`, `cpu-fallback`) and run on
the local drivers, so every behaviour here runs on any machine.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import retarget
from retarget.errors import InputError, ModuleFormatError, UnknownDeviceError
from retarget.ir.core import Builder, Function, Module, TensorType, Value
from retarget.ir.dtypes import DTYPES, f32, i64
from retarget.passes.placement import PlacementError, Side, place_function
from retarget.protocols import SupportTable
from retarget.testing import graphs

X = np.linspace(-2, 2, 32, dtype=np.float32).reshape(4, 8)


def _chain(*ops: str, shape=(4, 8)) -> Module:
    """x -> op1 -> op2 -> ... (unary ops), returned."""
    arg = Value(TensorType(shape, f32))
    fn = Function("main", [arg], arg_names=["x"])
    b, v = Builder(fn), arg
    for op in ops:
        v = b.op(op, [v])
    fn.returns = [v]
    return Module({"main": fn})


def _split(module: Module, refuse=("rt.erf",)):
    return retarget.compile(module, "vmvx", fallback="vmvx", refuse=list(refuse))


def _reference(module: Module, *args):
    return retarget.load(retarget.compile(module, "vmvx"), device="local-sync").main(*args)


# -- where ops go ------------------------------------------------------------------------------------


def test_a_refused_op_runs_on_the_fallback_and_the_rest_on_the_target():
    ops = _split(_chain("rt.exp", "rt.erf", "rt.tanh")).placement["functions"]["main"]["ops"]
    assert [(o["op"], o["placement"]) for o in ops] == [("rt.exp", "cpu"), ("rt.erf", "cpu-fallback"),
                                                         ("rt.tanh", "cpu")]
    assert "refuses rt.erf: refused by --refuse" in ops[1]["reason"]


def test_fusion_never_crosses_placements():
    plan = _split(_chain("rt.exp", "rt.erf", "rt.tanh")).functions["main"]
    runs = [s for s in plan["steps"] if s["op"] == "run"]
    assert [len([c for c in s["program"] if c["op"] == "dispatch"]) for s in runs] == [1, 1, 1]
    assert len(retarget.compile(_chain("rt.exp", "rt.erf", "rt.tanh"), "vmvx").functions["main"]["program"]) == 1


def test_an_op_refused_at_one_type_only_moves_at_that_type():
    ops = _split(_chain("rt.exp", "rt.erf"), refuse=["rt.erf:i32"]).placement["functions"]["main"]["ops"]
    assert {o["placement"] for o in ops} == {"cpu"}


def test_a_refused_element_type_moves_every_op_that_computes_in_it():
    arg = Value(TensorType((8,), f32))
    fn = Function("main", [arg], arg_names=["x"])
    b = Builder(fn)
    fn.returns = [b.op("rt.cast", [b.op("rt.add", [b.op("rt.cast", [arg], {"dtype": "i64"})] * 2)], {"dtype": "f32"})]
    ops = _split(Module({"main": fn}), refuse=["i64"]).placement["functions"]["main"]["ops"]
    assert [o["placement"] for o in ops] == ["cpu-fallback"] * 3


def _cmp_select(uses: int) -> Function:
    """mask = x < 0, used by `uses` selects: one use fuses the mask into its select, two make it a buffer."""
    arg = Value(TensorType((8,), f32))
    fn = Function("main", [arg], arg_names=["x"])
    b = Builder(fn)
    mask = b.op("rt.cmp", [arg, b.constant(np.float32(0))], {"predicate": "lt"})
    outs = [b.op("rt.select", [mask, arg, b.op("rt.neg", [arg])]) for _ in range(uses)]
    fn.returns = outs
    return fn


def test_a_value_kept_inside_one_kernel_needs_no_buffer_of_its_type():
    no_bool_buffers = Side("gpu", {"t": SupportTable(buffers={"i1": "no bool buffers"})})
    placed = place_function(_cmp_select(1), no_bool_buffers, Side("cpu", {"vmvx": SupportTable()}))
    assert {p.placement for p in placed.ops} == {"gpu"}


def test_a_value_of_a_refused_buffer_type_moves_its_producer_and_its_readers():
    no_bool_buffers = Side("gpu", {"t": SupportTable(buffers={"i1": "no bool buffers"})})
    placed = place_function(_cmp_select(2), no_bool_buffers, Side("cpu", {"vmvx": SupportTable()}))
    where = {p.op.name: p.placement for p in placed.ops}
    assert where["rt.cmp"] == "cpu" and where["rt.select"] == "cpu" and where["rt.neg"] == "gpu"
    assert "cannot write an i1 buffer: no bool buffers" in next(p.reason for p in placed.ops if p.op.name == "rt.cmp")


# -- errors -------------------------------------------------------------------------------------------


def test_without_a_fallback_a_refused_op_is_an_error_naming_it_and_the_fix():
    with pytest.raises(PlacementError) as e:
        retarget.compile(_chain("rt.exp", "rt.erf"), "vmvx", refuse=["rt.erf"])
    assert "rt.erf" in e.value.message and "refused by --refuse" in e.value.message
    assert "--fallback llvm-cpu" in e.value.hint
    assert [o["placement"] for o in e.value.report["functions"]["main"]["ops"]] == ["cpu", None]


def test_an_op_the_fallback_refuses_too_is_an_error_with_both_reasons():
    from retarget.passes.placement import check

    refuses = {"rt.erf": "no erf here"}
    fn = _chain("rt.exp", "rt.erf").functions["main"]
    placed = place_function(fn, Side("gpu", {"a": SupportTable(refuses)}), Side("cpu", {"b": SupportTable(refuses)}))
    assert [p.placement for p in placed.ops] == ["gpu", None]
    assert "a refuses rt.erf: no erf here; and b refuses rt.erf: no erf here" == placed.ops[1].reason
    with pytest.raises(PlacementError, match="rt.erf") as e:
        check({"main": placed}, {"gpu": ["a"], "cpu": ["b"]}, fallback_given=True)
    assert "another fallback" in e.value.hint


@pytest.mark.parametrize("name", ["rt.erff", "rt.erf:i65", "int64"])
def test_a_misspelled_refusal_is_an_input_error(name):
    with pytest.raises(InputError, match="--refuse"):
        retarget.compile(_chain("rt.erf"), "vmvx", refuse=[name])


def test_a_fallback_nothing_needs_leaves_a_one_device_module():
    notes = []
    art = retarget.compile(_chain("rt.exp"), "vmvx", fallback="vmvx", notes=notes.append)
    assert art.manifest["format_version"] == 1 and "placements" not in art.manifest
    assert any("not needed" in n for n in notes)


# -- the host program ----------------------------------------------------------------------------------


def test_a_split_chain_transfers_each_crossing_value_once():
    steps = _split(_chain("rt.exp", "rt.erf", "rt.tanh")).functions["main"]["steps"]
    assert [(s["op"], s.get("placement") or f"{s['from']}->{s['to']}") for s in steps] == [
        ("run", "cpu"), ("transfer", "cpu->cpu-fallback"), ("run", "cpu-fallback"),
        ("transfer", "cpu-fallback->cpu"), ("run", "cpu")]
    assert all(s["src"][2] == 4 * 8 * 4 for s in steps if s["op"] == "transfer")


def test_independent_work_of_another_placement_runs_before_a_transfer_waits():
    """y = erf(x) on the fallback, z = tanh(x) on the target: no transfer, two segments side by side."""
    arg = Value(TensorType((8,), f32))
    fn = Function("main", [arg], arg_names=["x"])
    b = Builder(fn)
    fn.returns = [b.op("rt.erf", [arg]), b.op("rt.tanh", [arg])]
    plan = _split(Module({"main": fn})).functions["main"]
    assert [s["op"] for s in plan["steps"]] == ["run", "run"]
    assert set(plan["inputs"][0]["slots"]) == {"cpu", "cpu-fallback"}  # the input goes to both


def _in_flight_hazards(plan: dict) -> list[str]:
    """Transfers that write bytes a segment of the same device may still be reading: a segment's reads stay
    in flight until the host waits on that device (a transfer out of it, or the end of the call)."""
    in_flight: dict[str, list] = {}
    found = []
    for i, step in enumerate(plan["steps"]):
        if step["op"] == "run":
            reads = [b for c in step["program"] if c["op"] == "dispatch" for b in c["bindings"]]
            in_flight.setdefault(step["placement"], []).extend(reads)
        else:
            in_flight[step["from"]] = []
            kind, offset, n = step["dst"]
            for other in in_flight.get(step["to"], []):
                if other[0] == kind and offset < other[1] + other[2] and other[1] < offset + n:
                    found.append(f"step {i} writes {step['dst']} over {other}")
    return found


def test_a_transfer_never_overwrites_what_the_device_may_still_be_reading():
    """The target computes a = exp(x) and s = -a + |a| while the fallback computes erf(x), which then goes to
    the target for s + erf(x): a's bytes are dead there, but its segment may still run when the transfer
    writes."""
    arg = Value(TensorType((8,), f32))
    fn = Function("main", [arg], arg_names=["x"])
    b = Builder(fn)
    a = b.op("rt.exp", [arg])
    s = b.op("rt.add", [b.op("rt.neg", [a]), b.op("rt.abs", [a])])
    fn.returns = [s, b.op("rt.add", [s, b.op("rt.erf", [arg])])]
    module = Module({"main": fn})
    plan = _split(module).functions["main"]
    assert [s["op"] for s in plan["steps"]] == ["run", "run", "transfer", "run"]
    assert _in_flight_hazards(plan) == []
    got, want = retarget.load(_split(module), device="local-sync").main(X[0]), _reference(module, X[0])
    np.testing.assert_array_equal(got[1], want[1])


# -- running it ---------------------------------------------------------------------------------------------


def test_a_split_module_gives_the_unsplit_answer():
    module = _chain(*["rt.exp", "rt.erf", "rt.tanh"] * 2)
    loaded = retarget.load(_split(module), device="local-sync")
    np.testing.assert_array_equal(loaded.main(X), _reference(module, X))
    np.testing.assert_array_equal(loaded.main(X + 1), _reference(module, X + 1))  # replayed


def test_a_split_mlp_with_constants_on_both_sides_matches_numpy():
    module, x, want = graphs.mlp_module()
    loaded = retarget.load(_split(module, refuse=["rt.max"]), device="local-task")
    np.testing.assert_allclose(loaded.predict(x), want, rtol=1e-5, atol=1e-6)


def test_devices_names_a_device_per_placement():
    loaded = retarget.load(_split(_chain("rt.exp", "rt.erf")), devices={"cpu": "local-sync",
                                                                         "cpu-fallback": "local-task"})
    assert loaded.describe_devices() == "cpu=local-sync:0 cpu-fallback=local-task:0"


def test_devices_naming_no_placement_of_the_module_is_an_error_listing_them():
    with pytest.raises(UnknownDeviceError, match="no placement 'gpu'") as e:
        retarget.load(_split(_chain("rt.exp", "rt.erf")), devices={"gpu": "local-sync"})
    assert "cpu, cpu-fallback" in e.value.hint


def test_devices_for_a_one_device_module_is_an_error():
    with pytest.raises(InputError, match="cpu=local-sync names a device per placement, and this module runs on one "
                                         "device") as info:
        retarget.load(retarget.compile(_chain("rt.exp"), "vmvx"), devices={"cpu": "local-sync"})
    assert "--device vulkan" in info.value.hint and "device='vulkan'" in info.value.hint  # the CLI's and the API's


def test_a_split_module_saves_as_format_2_and_loads_back(tmp_path):
    module = _chain("rt.exp", "rt.erf")
    path = _split(module).save(tmp_path / "split.rtm")
    manifest = json.loads(__import__("zipfile").ZipFile(path).read("manifest.json"))
    assert manifest["format_version"] == 2 and set(manifest["placements"]) == {"cpu", "cpu-fallback"}
    np.testing.assert_array_equal(retarget.load(path, device="local-sync").main(X), _reference(module, X))


def _edit(path, tmp_path, change):
    import zipfile

    from retarget.module_format import Artifact, read

    art = read(path, mmap=False)
    manifest = json.loads(zipfile.ZipFile(path).read("manifest.json"))
    change(manifest)
    manifest.pop("entries")
    return Artifact(manifest, dict(art.entries)).save(tmp_path / "edited.rtm")


@pytest.mark.parametrize("change, named", [
    (lambda m: m["executables"][0].update(placement="npu"), r"executables\[0\]\.placement names 'npu'"),
    (lambda m: m["placements"]["cpu"].update(constants=[0, 1 << 30]), r"placements\['cpu'\]\.constants lies outside"),
    (lambda m: m["functions"]["main"]["steps"][1].update(to="npu"), r"steps\[1\]\.to is not a placement"),
    (lambda m: m["functions"]["main"]["steps"][1]["dst"].__setitem__(2, 4), r"steps\[1\]\.dst is not 128 bytes"),
    (lambda m: m["functions"]["main"]["outputs"][0].update(placement=7), r"outputs\[0\]\.placement is not"),
    (lambda m: m["functions"]["main"]["arena_bytes"].update(cpu=1), r"reaches byte"),
    (lambda m: m["functions"]["main"]["steps"].append({"op": "jump"}), r"steps\[3\]\.op is not 'run' or"),
])
def test_a_corrupt_split_manifest_field_is_named(tmp_path, change, named):
    path = _split(_chain("rt.exp", "rt.erf")).save(tmp_path / "split.rtm")
    with pytest.raises(ModuleFormatError, match=named):
        retarget.load(_edit(path, tmp_path, change), device="local-sync")


# -- element types a target holds only within a range (SupportTable.ranges) ----------------------------------------


RANGE = (-100, 100, "this target computes i64 in 8 bits")


@pytest.fixture
def vmvx_with_a_range(monkeypatch):
    """vmvx whose support table holds i64 only within RANGE, as a target computing i64 in 32 bits would."""
    from retarget import compiler

    real = compiler.support_table
    monkeypatch.setattr(compiler, "support_table",
                        lambda backend, desc: SupportTable(ranges={"i64": RANGE}) if desc.backend == "vmvx"
                        else real(backend, desc))


def _i64_add(constant) -> Module:
    arg = Value(TensorType((3,), i64))
    fn = Function("main", [arg], arg_names=["ids"])
    b = Builder(fn)
    fn.returns = [b.op("rt.add", [arg, b.constant(constant, i64)])]
    return Module({"main": fn})


def test_an_input_of_a_type_a_target_holds_within_a_range_is_checked_at_each_call(vmvx_with_a_range, tmp_path):
    art = retarget.compile(_i64_add([1, 2, 3]), "vmvx")
    assert art.functions["main"]["inputs"][0]["range"] == list(RANGE)
    m = retarget.load(art.save(tmp_path / "m.rtm"), device="local-sync")  # the range is saved with the module
    np.testing.assert_array_equal(m.main(np.array([-100, 0, 97])), [-99, 2, 100])
    with pytest.raises(InputError, match=r"input 0 \('ids'\) of main holds 101, outside \[-100, 100\]: this target "
                                         r"computes i64 in 8 bits"):
        m.main(np.array([5, 101, -300]))


def test_an_input_read_only_by_a_target_without_the_range_is_not_checked(vmvx_with_a_range):
    art = retarget.compile(_i64_add([1, 2, 3]), "vmvx", fallback="llvm-cpu", refuse=["rt.add"])
    assert "range" not in art.functions["main"]["inputs"][0]


def test_a_constant_outside_a_targets_range_is_refused_naming_the_op(vmvx_with_a_range):
    with pytest.raises(retarget.RetargetError, match=r"rt.add reads a tensor<3xi64> constant holding 1000, outside "
                                                     r"\[-100, 100\]: this target computes i64 in 8 bits"):
        retarget.compile(_i64_add([1, 1000, 3]), "vmvx")


def test_a_bitcast_to_a_type_a_target_holds_within_a_range_is_refused(vmvx_with_a_range):
    """Any bits may come out of a bitcast, and no call checks them as it checks an input."""
    arg = Value(TensorType((3,), DTYPES["f64"]))
    fn = Function("main", [arg], arg_names=["x"])
    b = Builder(fn)
    fn.returns = [b.op("rt.add", [b.op("rt.bitcast", [arg], {"dtype": "i64"}), b.constant(np.int64(1))])]
    with pytest.raises(retarget.RetargetError, match=r"rt.bitcast makes tensor<3xi64> for a kernel on a target that "
                                                     r"holds i64 only within \[-100, 100\]"):
        retarget.compile(Module({"main": fn}), "vmvx")


NOT_A_RANGE = r"is not \[lo, hi, why\] with lo <= hi"


@pytest.mark.parametrize("value, named", [([1, 2], NOT_A_RANGE), ([5, 1, "x"], NOT_A_RANGE),
                                          ([1.5, 2, "x"], NOT_A_RANGE), ([1, 2, 3], NOT_A_RANGE),
                                          ("all", "is not a list")])
def test_a_corrupt_input_range_is_named(vmvx_with_a_range, tmp_path, value, named):
    path = retarget.compile(_i64_add([1, 2, 3]), "vmvx").save(tmp_path / "m.rtm")
    edited = _edit(path, tmp_path, lambda m: m["functions"]["main"]["inputs"][0].update(range=value))
    with pytest.raises(ModuleFormatError, match=r"inputs\[0\]\.range " + named):
        retarget.load(edited, device="local-sync")
