"""ONNX ops whose output sizes depend on the data (NonZero, Compress, Unique, NonMaxSuppression), compiled into
stages with host ops between them (`passes/stages.py`, `runtime_staged.py`), and run on each importer target
against onnx's reference evaluator: counts of 0 (each stage's zero variant), of 1 and of every element, a batch
known only at run time beside a count, host ops that read host ops' results, a saved module, and the errors."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
import retarget  # noqa: E402
from onnx import helper  # noqa: E402
from retarget.errors import InputError  # noqa: E402
from retarget.testing.devices import skip_unless_runs  # noqa: E402
from retarget.testing.onnx_cases import assert_same, graph_of, reference_outputs  # noqa: E402
from retarget.testing.torch_cases import device_of, importer_targets  # noqa: E402

TARGETS = importer_targets()  # vmvx and llvm-cpu, or RETARGET_IMPORTER_TARGETS (GPUs too)
F32, I64 = np.float32, np.int64
rng = np.random.default_rng(0)


def loaded(model, target, **options):
    skip_unless_runs(target, device_of(target))
    return retarget.load(retarget.compile(model, target, **options), device_of(target))


def check_calls(model, target, cases: list[dict], rtol=1e-6, atol=0.0):
    """One compile, then each case's inputs against the reference."""
    fn = loaded(model, target).main
    for inputs in cases:
        outs = fn(*inputs.values())
        assert_same(list(outs) if isinstance(outs, tuple) else [outs], reference_outputs(model, inputs), rtol, atol)


def masked_model():
    """x[x > 0] * 2 and its sum: NonZero, then a gather and a reduction on the device."""
    nodes = [helper.make_node("Greater", ["x", "zero"], ["mask"]),
             helper.make_node("NonZero", ["mask"], ["nz"]),
             helper.make_node("Squeeze", ["nz", "axis0"], ["idx"]),
             helper.make_node("Gather", ["x", "idx"], ["picked"]),
             helper.make_node("Mul", ["picked", "two"], ["y"]),
             helper.make_node("ReduceSum", ["y"], ["total"], keepdims=0)]
    return graph_of(nodes, {"x": np.zeros(64, F32)}, ["y", "total"],
                    {"zero": np.array(0, F32), "axis0": np.array([0], I64), "two": np.array(2, F32)})


@pytest.mark.parametrize("target", TARGETS)
def test_masked_select_at_every_count(target):
    x = rng.standard_normal(64).astype(F32)
    one = np.full(64, -1, F32)
    one[17] = 3
    check_calls(masked_model(), target, [{"x": x}, {"x": -np.abs(x) - 1}, {"x": one}, {"x": np.abs(x) + 1}],
                rtol=1e-5)


def test_the_function_is_split_at_the_host_op_with_a_variant_for_no_elements():
    art = retarget.compile(masked_model(), "vmvx")
    chain = art.manifest["staged"]["main"]
    assert [s["op"] for s in chain["steps"]] == ["run", "host", "run"]
    assert chain["steps"][1]["name"] == "rt.nonzero" and chain["counts"] == ["nonzero"]
    last = chain["steps"][2]
    assert last["counts"] == ["nonzero"] and [v["zero"] for v in last["variants"]] == [["nonzero"]]
    fn = retarget.load(art, "local-sync").main
    assert str(fn.signature) == "main(x: tensor<64xf32>) -> (tensor<nonzeroxf32>, tensor<f32>) with nonzero=0..64"
    assert set(retarget.load(art, "local-sync").functions) == {"main"}  # the stages are not the module's functions


def detector_model():
    """Sigmoid scores, NonMaxSuppression, then the kept boxes and their scores gathered on the device."""
    nodes = [helper.make_node("Sigmoid", ["logits"], ["scores"]),
             helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "score_min"], ["sel"],
                              center_point_box=0),
             helper.make_node("Gather", ["sel", "col2"], ["box_index"], axis=1),
             helper.make_node("Squeeze", ["boxes", "axis0"], ["boxes2d"]),
             helper.make_node("Gather", ["boxes2d", "box_index"], ["kept_boxes"], axis=0),
             helper.make_node("GatherND", ["scores", "sel"], ["kept_scores"])]
    inputs = {"boxes": np.zeros((1, 40, 4), F32), "logits": np.zeros((1, 3, 40), F32)}
    constants = {"max_out": np.array([6], I64), "iou": np.array([0.4], F32), "score_min": np.array([0.35], F32),
                 "col2": np.array(2, I64), "axis0": np.array([0], I64)}
    return graph_of(nodes, inputs, ["sel", "kept_boxes", "kept_scores"], constants)


def random_boxes(n):
    corner = rng.uniform(0, 10, (1, n, 2))
    size = rng.uniform(0.5, 4, (1, n, 2))
    boxes = np.concatenate([corner, corner + size], axis=2)
    flip = rng.random(n) < 0.3  # corners in either order, as the spec allows
    boxes[0, flip] = boxes[0, flip][:, [2, 3, 0, 1]]
    return boxes.astype(F32)


@pytest.mark.parametrize("target", TARGETS)
def test_non_max_suppression_then_gathers(target):
    boxes = random_boxes(40)
    logits = rng.normal(0, 2, (1, 3, 40)).astype(F32)
    check_calls(detector_model(), target, [{"boxes": boxes, "logits": logits},
                                           {"boxes": boxes, "logits": np.full((1, 3, 40), -5, F32)}])


@pytest.mark.parametrize("target", TARGETS)
def test_a_count_beside_a_batch_known_at_run_time(target):
    """GatherND at NonZero's transposed indices of a [batch, 8] input: the values above 0.5, then on the device."""
    nodes = [helper.make_node("Greater", ["x", "half"], ["mask"]),
             helper.make_node("NonZero", ["mask"], ["nz"]),
             helper.make_node("Transpose", ["nz"], ["where"], perm=[1, 0]),
             helper.make_node("GatherND", ["x", "where"], ["picked"]),
             helper.make_node("Exp", ["picked"], ["y"])]
    model = graph_of(nodes, {"x": np.zeros((2, 8), F32)}, ["where", "y"], {"half": np.array(0.5, F32)},
                     shapes={"x": ["batch", 8]})
    cases = [{"x": rng.random((b, 8)).astype(F32)} for b in (1, 3, 5)] + [{"x": np.zeros((2, 8), F32)}]
    check_calls(model, target, cases, rtol=1e-6)


@pytest.mark.parametrize("target", TARGETS)
def test_host_ops_of_host_ops(target):
    """Compress, then Unique of what it kept, then the counts and values used on the device: two levels of host
    ops, each count 0 or not."""
    nodes = [helper.make_node("Greater", ["x", "zero"], ["keep"]),
             helper.make_node("Compress", ["labels", "keep"], ["kept"], axis=0),
             helper.make_node("Unique", ["kept"], ["values", "first", "inverse", "counts"], sorted=1),
             helper.make_node("Cast", ["counts"], ["fcounts"], to=onnx.TensorProto.FLOAT),
             helper.make_node("Mul", ["fcounts", "scale"], ["weighted"]),
             helper.make_node("Add", ["values", "one"], ["shifted"])]
    model = graph_of(nodes, {"x": np.zeros(32, F32), "labels": np.zeros(32, I64)},
                     ["shifted", "first", "inverse", "weighted"],
                     {"zero": np.array(0, F32), "scale": np.array(0.5, F32), "one": np.array(1, I64)})
    labels = rng.integers(0, 5, 32).astype(I64)
    cases = [{"x": rng.standard_normal(32).astype(F32), "labels": labels},
             {"x": -np.ones(32, F32), "labels": labels},
             {"x": np.ones(32, F32), "labels": np.full(32, 7, I64)}]
    check_calls(model, target, cases)


def test_unique_unsorted_along_an_axis():
    """Rows in order of first occurrence (onnx's reference takes along axis 0 whatever the axis, so rows)."""
    x = rng.integers(0, 2, (6, 3)).astype(F32)
    x[4] = x[1]
    model = graph_of([helper.make_node("Unique", ["x"], ["y", "i", "inv", "c"], sorted=0, axis=-2),
                      helper.make_node("Neg", ["y"], ["z"])], {"x": x}, ["z", "i", "inv", "c"])
    check_calls(model, "vmvx", [{"x": x}])


def test_a_count_the_model_fixes_is_checked_at_each_call():
    """NonZero's count added to a 4-element input: the model says the count is 4, and a call that gives 3 is an
    InputError, not a wrong shape."""
    nodes = [helper.make_node("NonZero", ["x"], ["nz"]),
             helper.make_node("Squeeze", ["nz", "axis0"], ["idx"]),
             helper.make_node("Add", ["idx", "bias"], ["y"])]
    model = graph_of(nodes, {"x": np.zeros(8, F32), "bias": np.zeros(4, I64)}, ["y"], {"axis0": np.array([0], I64)})
    fn = loaded(model, "vmvx").main
    x = np.array([1, 0, 2, 0, 3, 0, 4, 0], F32)
    np.testing.assert_array_equal(fn(x, np.arange(4, dtype=I64)), [0, 3, 6, 9])
    with pytest.raises(InputError, match=r"rt.nonzero .* shape \[1, 3\], where the model's shapes need \[1, 4\]"):
        fn(np.array([1, 0, 2, 0, 3, 0, 0, 0], F32), np.arange(4, dtype=I64))


def test_a_saved_module_runs_its_stages(tmp_path):
    path = retarget.compile(masked_model(), "vmvx").save(tmp_path / "masked.rtm")
    fn = retarget.load(str(path), "local-sync").main
    y, total = fn(np.arange(-3, 61, dtype=F32))
    np.testing.assert_array_equal(y, np.arange(1, 61, dtype=F32) * 2)
    assert total == np.float32(3660)


def test_device_arrays_and_device_outputs_are_refused_with_a_hint():
    fn = loaded(masked_model(), "vmvx").main
    with pytest.raises(InputError, match="host arrays"):
        fn(np.ones(64, F32), output="device")


@pytest.mark.parametrize("edit, message", [
    (lambda s: s["steps"][2].update(function="gone"), r"steps\[2\]\.function names 'gone', which is not a function"),
    (lambda s: s["steps"][1].update(name="rt.exec"), r"steps\[1\]\.name is not a host op"),
    (lambda s: s["steps"][0].update(inputs=[7]), r"steps\[0\]\.inputs reads value 7 before any step defines it"),
    (lambda s: s.update(returns=[99]), r"returns reads value 99"),
])
def test_a_malformed_staged_entry_is_named_at_load(tmp_path, edit, message):
    import json

    from retarget.errors import ModuleFormatError
    from retarget.module_format import read

    art = retarget.compile(masked_model(), "vmvx")
    art.manifest = json.loads(json.dumps(art.manifest))
    edit(art.manifest["staged"]["main"])
    with pytest.raises(ModuleFormatError, match=message):
        read(art.save(tmp_path / "bad.rtm"))


def test_host_ops_round_trip_through_the_graph_ir_text():
    from retarget import ir
    from retarget.importers.onnx import OnnxImporter

    text = ir.print_module(OnnxImporter().load(masked_model()))
    assert '"rt.nonzero"(%1) {count = "nonzero"} : (tensor<64xi1>) -> tensor<1x?xi64>' in text
    fn = retarget.load(retarget.compile(ir.parse_module(text), "vmvx"), "local-sync").main
    assert fn(np.arange(-3, 61, dtype=F32))[1] == np.float32(3660)


def test_the_command_line_lists_the_stages_and_prints_each_result_s_size(tmp_path):
    import json

    from retarget.cli import app
    from typer.testing import CliRunner

    path = retarget.compile(masked_model(), "vmvx").save(tmp_path / "masked.rtm")
    listed = CliRunner().invoke(app, ["run", str(path), "--list-functions", "--json"])
    assert listed.exit_code == 0, listed.output
    (main,) = json.loads(listed.output)["functions"]
    assert [s["op"] for s in main["steps"]] == ["run", "host", "run"] and main["steps"][1]["name"] == "rt.nonzero"
    np.save(tmp_path / "x.npy", np.arange(-3, 61, dtype=F32))
    ran = CliRunner().invoke(app, ["run", str(path), "--input", f"@{tmp_path / 'x.npy'}"])
    assert ran.exit_code == 0, ran.output
    assert "result[0]: tensor<60xf32>" in ran.output and "3660" in ran.output


@pytest.mark.parametrize("target", TARGETS)
def test_an_assignment_through_a_mask_as_exporters_write_it(target):
    """x[x > 0] = 7 as torch.onnx writes index_put: NonZero's indices, an Expand to their count (an op whose shape
    holds the count but whose operand is a constant: it belongs after the host op), ScatterND; counts 0, some, all."""
    nodes = [helper.make_node("Greater", ["x", "zero"], ["mask"]),
             helper.make_node("NonZero", ["mask"], ["nz"]),
             helper.make_node("Transpose", ["nz"], ["idx"], perm=[1, 0]),
             helper.make_node("Shape", ["idx"], ["s"]),
             helper.make_node("Slice", ["s", "start", "end"], ["n"]),
             helper.make_node("Expand", ["value", "n"], ["updates"]),
             helper.make_node("ScatterND", ["x", "idx", "updates"], ["y"])]
    x = rng.standard_normal((6, 5)).astype(F32)
    model = graph_of(nodes, {"x": x}, ["y"], {"zero": np.array(0, F32), "start": np.array([0], I64),
                                              "end": np.array([1], I64), "value": np.array([7.0], F32)})
    check_calls(model, target, [{"x": x}, {"x": -np.abs(x)}, {"x": np.abs(x) + 1}])


@pytest.mark.parametrize("target", TARGETS)
def test_top_k_of_at_most_a_count_as_detectors_take_it(target):
    """TopK with k = Min(Shape(kept), 5): a size of the count, folded as min(nonzero, 5), at counts 0, 2 and all."""
    nodes = [helper.make_node("Greater", ["x", "zero"], ["mask"]),
             helper.make_node("NonZero", ["mask"], ["nz"]),
             helper.make_node("Squeeze", ["nz", "axis0"], ["idx"]),
             helper.make_node("Gather", ["x", "idx"], ["kept"]),
             helper.make_node("Shape", ["kept"], ["size"]),
             helper.make_node("Min", ["size", "cap"], ["k"]),
             helper.make_node("TopK", ["kept", "k"], ["values", "positions"])]
    x = rng.standard_normal(50).astype(F32)
    model = graph_of(nodes, {"x": x}, ["values", "positions"], {"zero": np.array(0, F32),
                                                                "axis0": np.array([0], I64), "cap": np.array([5], I64)})
    two = np.full(50, -1, F32)
    two[[7, 30]] = [2.0, 3.0]
    check_calls(model, target, [{"x": x}, {"x": -np.abs(x) - 1}, {"x": two}, {"x": np.abs(x) + 1}])


def test_a_split_module_is_refused_with_what_to_do():
    from retarget.errors import UnsupportedOpError

    with pytest.raises(UnsupportedOpError, match="sizes that depend on the data") as info:
        retarget.compile(masked_model(), "vmvx", fallback="llvm-cpu", refuse=["rt.gather"])
    assert "--fallback" in info.value.hint


@pytest.mark.parametrize("target", TARGETS)
def test_three_levels_of_host_ops(target):
    """Compress, a mean of what it kept, Compress again, then Unique: three levels, each count 0 or not (the mean of
    nothing is NaN, and nothing passes it)."""
    nodes = [helper.make_node("Greater", ["x", "zero"], ["first"]),
             helper.make_node("Compress", ["x", "first"], ["kept"], axis=0),
             helper.make_node("ReduceMean", ["kept"], ["mean"], keepdims=1),
             helper.make_node("Greater", ["kept", "mean"], ["second"]),
             helper.make_node("Compress", ["kept", "second"], ["above"], axis=0),
             helper.make_node("Round", ["above"], ["rounded"]),
             helper.make_node("Unique", ["rounded"], ["values", "first_index", "inverse", "counts"]),
             helper.make_node("Mul", ["values", "two"], ["y"])]
    x = (rng.standard_normal(40) * 3).astype(F32)
    model = graph_of(nodes, {"x": x}, ["y", "counts", "above"], {"zero": np.array(0, F32), "two": np.array(2, F32)},
                     opset=17)
    with np.errstate(invalid="ignore"):  # the reference's mean of nothing
        check_calls(model, target, [{"x": x}, {"x": -np.abs(x) - 1}, {"x": np.full(40, 2.0, F32)},
                                    {"x": np.abs(x) + 0.1}], rtol=1e-5)
