"""ONNX's If, Loop and Scan, resolved at import time (onnx_control.py): the branch a known condition takes, both
branches selected by a condition known only at run time, loops unrolled (a constant trip count, a condition
computed from the iteration number, bodies that read enclosing tensors or hold an If), scans along any axis in
either direction, names that a body shadows, and the refusals (branches of different shapes, a condition or trip
count known only at run time, too many iterations). Each model is compiled for vmvx and llvm-cpu and compared with
onnxruntime (onnx's ReferenceEvaluator where onnxruntime refuses the model, numpy for running sums)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from retarget.errors import UnsupportedOpError  # noqa: E402
from retarget.importers.onnx import OnnxImporter  # noqa: E402
from retarget.importers.onnx_control import MAX_UNROLLED_NODES  # noqa: E402
from retarget.testing.onnx_cases import assert_same, compiled_outputs, graph_of, matches_reference, reference_outputs  # noqa: E402

TARGETS = ["vmvx", "llvm-cpu"]
F32 = np.float32
RNG = np.random.default_rng(0)


def tensor(name, elem_type=TensorProto.FLOAT, shape=None):
    return helper.make_tensor_value_info(name, elem_type, shape)


def subgraph(nodes, inputs, outputs, constants=None):
    """A branch or body: `inputs` and `outputs` are value infos, or names of float tensors of unknown shape."""
    def info(v):
        return tensor(v) if isinstance(v, str) else v
    return helper.make_graph(nodes, "body", [info(i) for i in inputs], [info(o) for o in outputs],
                             [numpy_helper.from_array(np.asarray(v), k) for k, v in (constants or {}).items()])


def node(op, inputs, outputs, **attrs):
    return helper.make_node(op, inputs, outputs, **attrs)


def iteration_inputs():
    """A Loop body's first two inputs: the iteration number and the condition."""
    return [tensor("i", TensorProto.INT64, []), tensor("cond_in", TensorProto.BOOL, [])]


# -- If ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
def test_if_with_a_known_condition_converts_only_the_taken_branch(target):
    """Size(x) == 6 folds to true; the else branch reshapes x to 4x5, which would be refused if it were converted."""
    x = RNG.standard_normal((2, 3)).astype(F32)
    then_branch = subgraph([node("Add", ["x", "one"], ["a"])], [], ["a"])
    else_branch = subgraph([node("Reshape", ["x", "shape_4x5"], ["b"])], [], ["b"])
    model = graph_of([node("Size", ["x"], ["size"]), node("Equal", ["size", "six"], ["is_six"]),
                      node("If", ["is_six"], ["y"], then_branch=then_branch, else_branch=else_branch)],
                     {"x": x}, ["y"], {"one": F32(1), "six": np.int64(6), "shape_4x5": np.array([4, 5], np.int64)})
    assert [op.name for op in OnnxImporter().load(model).functions["main"].ops] == ["rt.constant", "rt.add"]
    matches_reference(model, target, {"x": x}, onnxruntime=True)


def runtime_if_model(x, condition):
    """If on a graph input: log(x) (NaN where x < 0) and x + w, or 2x and w; w is read from the enclosing graph."""
    then_branch = subgraph([node("Log", ["x"], ["log_x"]), node("Add", ["x", "w"], ["x_plus_w"])], [],
                           ["log_x", "x_plus_w"])
    else_branch = subgraph([node("Mul", ["x", "two"], ["twice"])], [], ["twice", "w"], {"two": F32(2)})
    return graph_of([node("If", ["condition"], ["y", "z"], then_branch=then_branch, else_branch=else_branch)],
                    {"x": x, "condition": condition}, ["y", "z"], {"w": np.full((2, 3), 0.5, F32)})


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("flag", [True, False])
def test_if_with_a_runtime_condition_selects_the_branch_it_names(flag, target):
    x = np.array([[-1, 0.5, 2], [3, -4, 0]], F32)
    condition = np.array([flag])
    model = runtime_if_model(x, condition)
    assert "rt.select" in {op.name for op in OnnxImporter().load(model).functions["main"].ops}
    outs = compiled_outputs(model, target, x, condition)
    with np.errstate(invalid="ignore", divide="ignore"):  # onnxruntime refuses the outer w returned as it is
        assert_same(outs, reference_outputs(model, {"x": x, "condition": condition}))
    if not flag:  # the NaN of log(-1) in the branch not taken stays there
        assert not np.isnan(outs[0]).any()


def test_if_with_a_runtime_condition_refuses_branches_of_different_shapes():
    x = RNG.standard_normal((2, 3)).astype(F32)
    then_branch = subgraph([node("Identity", ["x"], ["same"])], [], ["same"])
    else_branch = subgraph([node("ReduceSum", ["x"], ["total"], keepdims=0)], [], ["total"])
    model = graph_of([node("If", ["condition"], ["y"], then_branch=then_branch, else_branch=else_branch)],
                     {"x": x, "condition": np.array(True)}, ["y"])
    with pytest.raises(UnsupportedOpError, match="needs both branches to give the same shapes; output 'y' is "
                                                 r"tensor<2x3xf32> in then_branch and tensor<f32> in else_branch"):
        OnnxImporter().load(model)


# -- Loop -------------------------------------------------------------------------------------------------------


def accumulating_body(shape=None, scan_output=False):
    """acc + x each iteration (x read from the enclosing graph), the condition passed on; with `scan_output`, the
    new acc is also stacked."""
    acc, acc_out = tensor("acc", shape=shape), tensor("acc_out", shape=shape)
    return subgraph([node("Identity", ["cond_in"], ["cond_out"]), node("Add", ["acc", "x"], ["acc_out"])],
                    [*iteration_inputs(), acc], [tensor("cond_out", TensorProto.BOOL, []), acc_out,
                                                 *([acc_out] if scan_output else [])])


def loop_model(body, inputs: dict, loop_inputs, outputs, constants=None, extra_nodes=()):
    return graph_of([*extra_nodes, node("Loop", loop_inputs, outputs, body=body)], inputs, outputs, constants)


@pytest.mark.parametrize("target", TARGETS)
def test_loop_with_a_constant_trip_count_carries_values_and_stacks_scan_outputs(target):
    """acc += i * x and count += i, four times; acc * acc of every iteration stacked."""
    x = RNG.standard_normal((2, 3)).astype(F32)
    body = subgraph([node("Identity", ["cond_in"], ["cond_out"]), node("Cast", ["i"], ["i_float"], to=1),
                     node("Mul", ["i_float", "acc"], ["step"]), node("Add", ["acc", "step"], ["acc_out"]),
                     node("Add", ["count", "i"], ["count_out"]), node("Mul", ["acc_out", "acc_out"], ["square"])],
                    [*iteration_inputs(), "acc", tensor("count", TensorProto.INT64, [])],
                    [tensor("cond_out", TensorProto.BOOL, []), "acc_out", tensor("count_out", TensorProto.INT64, []),
                     "square"])
    model = loop_model(body, {"x": x}, ["trip_count", "true", "x", "zero"], ["acc", "count", "squares"],
                       {"trip_count": np.int64(4), "true": np.array(True), "zero": np.int64(0)})
    matches_reference(model, target, {"x": x}, onnxruntime=True)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("trip_count", ["", "int64_max"])
def test_loop_runs_until_a_condition_computed_from_the_iteration_number_turns_false(trip_count, target):
    """cond = i < 3 (3 an initializer of the body): four iterations, with no trip count or an unreachable one."""
    x = RNG.standard_normal((3,)).astype(F32)
    body = subgraph([node("Less", ["i", "three"], ["cond_out"]), node("Add", ["acc", "x"], ["acc_out"])],
                    [*iteration_inputs(), "acc"], [tensor("cond_out", TensorProto.BOOL, []), "acc_out", "acc_out"],
                    {"three": np.int64(3)})
    model = loop_model(body, {"x": x}, [trip_count, "true", "x"], ["acc", "partial_sums"],
                       {"true": np.array(True), "int64_max": np.int64(np.iinfo(np.int64).max)})
    outs = compiled_outputs(model, target, x)
    assert outs[1].shape == (4, 3)
    assert_same(outs, reference_outputs(model, {"x": x}, True))


@pytest.mark.parametrize("target", TARGETS)
def test_loop_body_reads_a_tensor_of_the_enclosing_graph(target):
    """acc = acc @ w three times, w a graph input that the body reads by name."""
    x, w = RNG.standard_normal((2, 2)).astype(F32), RNG.standard_normal((2, 2)).astype(F32)
    body = subgraph([node("Identity", ["cond_in"], ["cond_out"]), node("MatMul", ["acc", "w"], ["acc_out"])],
                    [*iteration_inputs(), "acc"], [tensor("cond_out", TensorProto.BOOL, []), "acc_out"])
    model = loop_model(body, {"x": x, "w": w}, ["trip_count", "", "x"], ["y"], {"trip_count": np.int64(3)})
    matches_reference(model, target, {"x": x, "w": w}, rtol=1e-5, onnxruntime=True)


@pytest.mark.parametrize("target", TARGETS)
def test_loop_carried_value_may_change_shape_from_one_iteration_to_the_next(target):
    """acc = concat(acc, x) three times: 2, 4, 6, then 8 elements."""
    x = RNG.standard_normal((2,)).astype(F32)
    body = subgraph([node("Identity", ["cond_in"], ["cond_out"]), node("Concat", ["acc", "x"], ["acc_out"], axis=0)],
                    [*iteration_inputs(), "acc"], [tensor("cond_out", TensorProto.BOOL, []), "acc_out"])
    model = loop_model(body, {"x": x}, ["trip_count", "", "x"], ["y"], {"trip_count": np.int64(3)})
    matches_reference(model, target, {"x": x}, onnxruntime=True)


@pytest.mark.parametrize("target", TARGETS)
def test_if_nested_in_a_loop_takes_the_branch_of_each_iteration(target):
    """acc + x at even iterations, acc * x at odd ones: the If's condition folds from the iteration number."""
    x = RNG.standard_normal((2, 3)).astype(F32)
    add = subgraph([node("Add", ["acc", "x"], ["sum"])], [], ["sum"])
    multiply = subgraph([node("Mul", ["acc", "x"], ["product"])], [], ["product"])
    body = subgraph([node("Identity", ["cond_in"], ["cond_out"]), node("Mod", ["i", "two"], ["parity"]),
                     node("Equal", ["parity", "zero"], ["even"]),
                     node("If", ["even"], ["acc_out"], then_branch=add, else_branch=multiply)],
                    [*iteration_inputs(), "acc"], [tensor("cond_out", TensorProto.BOOL, []), "acc_out", "acc_out"],
                    {"two": np.int64(2), "zero": np.int64(0)})
    model = loop_model(body, {"x": x}, ["trip_count", "", "x"], ["y", "steps"], {"trip_count": np.int64(4)})
    matches_reference(model, target, {"x": x}, onnxruntime=True)


@pytest.mark.parametrize("target", TARGETS)
def test_loop_of_no_iterations_gives_the_initial_values_and_empty_scan_outputs(target):
    """The scan output's shape comes from the type that the body declares for it."""
    x = RNG.standard_normal((3,)).astype(F32)
    body = accumulating_body(shape=[3], scan_output=True)
    model = loop_model(body, {"x": x}, ["trip_count", "", "x"], ["y", "steps"], {"trip_count": np.int64(0)})
    outs = compiled_outputs(model, target, x)
    assert outs[1].shape == (0, 3)
    assert_same(outs, reference_outputs(model, {"x": x}, True))


def test_loop_refuses_a_condition_computed_from_runtime_data():
    x = RNG.standard_normal((3,)).astype(F32)
    body = subgraph([node("Add", ["acc", "x"], ["acc_out"]), node("ReduceSum", ["acc_out"], ["total"], keepdims=0),
                     node("Less", ["total", "limit"], ["cond_out"])],
                    [*iteration_inputs(), "acc"], [tensor("cond_out", TensorProto.BOOL, []), "acc_out"],
                    {"limit": F32(10)})
    model = loop_model(body, {"x": x}, ["", "true", "x"], ["y"], {"true": np.array(True)})
    with pytest.raises(UnsupportedOpError, match="iteration 0: Loop's condition is computed from values known only "
                                                 "at run time"):
        OnnxImporter().load(model)


def test_loop_refuses_a_trip_count_known_only_at_run_time():
    x = RNG.standard_normal((3,)).astype(F32)
    body = accumulating_body()
    model = loop_model(body, {"x": x, "trip_count": np.int64(3)}, ["trip_count", "", "x"], ["y"])
    with pytest.raises(UnsupportedOpError, match="Loop's trip count M .'trip_count'. is known only at run time"):
        OnnxImporter().load(model)


def test_loop_refuses_to_unroll_past_its_node_budget():
    x = RNG.standard_normal((3,)).astype(F32)
    body = accumulating_body()
    model = loop_model(body, {"x": x}, ["trip_count", "", "x"], ["y"], {"trip_count": np.int64(100_000)})
    with pytest.raises(UnsupportedOpError, match=f"Loop of 100000 iterations unrolls to more than "
                                                 f"{MAX_UNROLLED_NODES} nodes .2 in its body."):
        OnnxImporter().load(model)


# -- Scan -------------------------------------------------------------------------------------------------------


def cumulative_sum_body():
    return subgraph([node("Add", ["total", "row"], ["total_out"]), node("Identity", ["total_out"], ["running"])],
                    ["total", "row"], ["total_out", "running"])


@pytest.mark.parametrize("target", TARGETS)
def test_scan_runs_a_cumulative_sum_in_its_state(target):
    x = RNG.standard_normal((5, 2)).astype(F32)
    model = graph_of([node("Scan", ["zeros", "x"], ["total", "running"], body=cumulative_sum_body(),
                           num_scan_inputs=1)], {"x": x}, ["total", "running"], {"zeros": np.zeros(2, F32)})
    total, running = compiled_outputs(model, target, x)
    np.testing.assert_allclose(running, np.cumsum(x, axis=0), rtol=1e-6)
    np.testing.assert_allclose(total, x.sum(axis=0), rtol=1e-6)


@pytest.mark.parametrize("target", TARGETS)
def test_scan_reads_and_writes_along_any_axis_in_either_direction(target):
    """x scanned along axis 1 forwards, y along axis -1 backwards; the outputs stacked along axis 1 backwards and
    along axis -1 forwards."""
    x, y = RNG.standard_normal((3, 4, 2)).astype(F32), RNG.standard_normal((2, 4)).astype(F32)
    body = subgraph([node("Mul", ["x_t", "y_t"], ["product"]), node("Add", ["state", "product"], ["state_out"]),
                     node("Sub", ["state_out", "y_t"], ["shifted"])],
                    [tensor("state", shape=[3, 2]), tensor("x_t", shape=[3, 2]), tensor("y_t", shape=[2])],
                    [tensor(name, shape=[3, 2]) for name in ("state_out", "product", "shifted")])
    model = graph_of([node("Scan", ["state0", "x", "y"], ["state", "products", "shifted"], body=body,
                           num_scan_inputs=2, scan_input_axes=[1, -1], scan_input_directions=[0, 1],
                           scan_output_axes=[1, -1], scan_output_directions=[1, 0])],
                     {"x": x, "y": y}, ["state", "products", "shifted"], {"state0": np.ones((3, 2), F32)})
    outs = compiled_outputs(model, target, x, y)
    assert [o.shape for o in outs] == [(3, 2), (3, 4, 2), (3, 2, 4)]
    assert_same(outs, reference_outputs(model, {"x": x, "y": y}, True), rtol=1e-5)


@pytest.mark.parametrize("target", TARGETS)
def test_scan_body_names_shadow_the_enclosing_ones_only_inside_it(target):
    """The body's state is named x, one of its nodes writes t and its initializer is named factor: all three are
    names of the enclosing graph too (factor already made a graph constant there), and t is read again after the
    Scan."""
    x = RNG.standard_normal((4, 3)).astype(F32)
    body = subgraph([node("Add", ["x", "row"], ["t"]), node("Mul", ["t", "factor"], ["doubled"])],
                    ["x", "row"], ["t", "doubled"], {"factor": F32(2)})
    model = graph_of([node("Add", ["x", "factor"], ["t"]),
                      node("Scan", ["zeros", "x"], ["total", "doubled"], body=body, num_scan_inputs=1),
                      node("Mul", ["t", "total"], ["y"])],
                     {"x": x}, ["y", "doubled"], {"factor": F32(10), "zeros": np.zeros(3, F32)})
    y, doubled = compiled_outputs(model, target, x)
    np.testing.assert_allclose(y, (x + 10) * x.sum(axis=0), rtol=1e-5)
    np.testing.assert_allclose(doubled, 2 * np.cumsum(x, axis=0), rtol=1e-6)


@pytest.mark.parametrize("target", TARGETS)
def test_scan_along_a_static_axis_keeps_a_symbolic_batch(target):
    """x is batch x 5 x 2 (batch named, known only at run time), scanned along axis 1; the state's shape is
    computed from Shape(x), so it holds the symbol too."""
    x = RNG.standard_normal((3, 5, 2)).astype(F32)
    zeros = numpy_helper.from_array(np.zeros(1, F32))
    model = graph_of([node("Shape", ["x"], ["shape"], end=1), node("Concat", ["shape", "two"], ["state_shape"], axis=0),
                      node("ConstantOfShape", ["state_shape"], ["zeros"], value=zeros),
                      node("Scan", ["zeros", "x"], ["total", "running"], body=cumulative_sum_body(),
                           num_scan_inputs=1, scan_input_axes=[1], scan_output_axes=[1])],
                     {"x": x}, ["total", "running"], {"two": np.array([2], np.int64)}, shapes={"x": ["batch", 5, 2]})
    assert [str(v.type) for v in OnnxImporter().load(model).functions["main"].returns] == \
        ["tensor<?x2xf32>", "tensor<?x5x2xf32>"]
    matches_reference(model, target, {"x": x}, onnxruntime=True)


def test_scan_refuses_an_axis_whose_length_is_known_only_at_run_time():
    x = RNG.standard_normal((4, 2)).astype(F32)
    model = graph_of([node("Scan", ["zeros", "x"], ["total", "running"], body=cumulative_sum_body(),
                           num_scan_inputs=1)],
                     {"x": x}, ["total", "running"], {"zeros": np.zeros(2, F32)}, shapes={"x": ["length", 2]})
    with pytest.raises(UnsupportedOpError, match="Scan along an axis of size length, known only at run time"):
        OnnxImporter().load(model)


def test_loop_refuses_a_condition_that_stays_true():
    x = RNG.standard_normal((3,)).astype(F32)
    body = accumulating_body()
    model = loop_model(body, {"x": x}, ["", "true", "x"], ["y"], {"true": np.array(True)})
    with pytest.raises(UnsupportedOpError, match=f"Loop of more than {MAX_UNROLLED_NODES // 2} iterations unrolls"):
        OnnxImporter().load(model)
