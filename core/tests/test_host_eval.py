"""ir/host_eval.py against onnx.reference, bit for bit: NonZero, Unique and NonMaxSuppression on one-node models,
and on the ONNX backend node test cases for those ops (generated from onnx.backend.test.case, whose data files the
installed package may lack)."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from retarget.ir import host_eval

onnx = pytest.importorskip("onnx")
from onnx import helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

OPSET = 13  # NonZero 13, Unique 11, NonMaxSuppression 11: the latest of each


def reference(op: str, inputs: dict[str, np.ndarray | None], outputs: int = 1, **attrs) -> list[np.ndarray]:
    """Runs one `op` node under onnx.reference; an input given as None is left out (its name "")."""
    names = [name if value is not None else "" for name, value in inputs.items()]
    while names and not names[-1]:
        names.pop()
    feeds = {name: value for name, value in inputs.items() if value is not None}
    out_names = [f"out{i}" for i in range(outputs)]
    node = helper.make_node(op, names, out_names, **attrs)
    graph = helper.make_graph(
        [node], op,
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for n, v in feeds.items()],
        [helper.make_tensor_value_info(n, onnx.TensorProto.UNDEFINED, None) for n in out_names])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    with np.errstate(all="ignore"):  # its scalar arithmetic warns on the NaN and inf cases
        return list(ReferenceEvaluator(model).run(None, feeds))


def assert_same(got: list[np.ndarray], expected: list[np.ndarray]):
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert isinstance(g, np.ndarray) and g.flags.c_contiguous
        assert g.dtype == e.dtype and g.shape == e.shape, (g.dtype, g.shape, e.dtype, e.shape)
        # Same bits: equal values, NaN where NaN, and the same sign of zero
        np.testing.assert_array_equal(g, e, strict=True)
        if g.dtype.kind == "f":
            np.testing.assert_array_equal(np.signbit(g), np.signbit(e))


# NonZero

def nonzero_inputs():
    rng = np.random.default_rng(0)
    for dtype in (np.bool_, np.float32, np.int32):
        for rank in range(5):
            shape = (3, 1, 4, 2)[:rank]
            yield f"{np.dtype(dtype).name}-r{rank}-random", (rng.random(shape) < 0.5).astype(dtype)
            yield f"{np.dtype(dtype).name}-r{rank}-zeros", np.zeros(shape, dtype)
            yield f"{np.dtype(dtype).name}-r{rank}-ones", np.ones(shape, dtype)
    yield "float-nan-negzero", np.array([[np.nan, -0.0], [0.0, 2.5]], np.float32)
    yield "empty", np.zeros((2, 0, 3), np.float32)


@pytest.mark.parametrize("x", [x for _, x in nonzero_inputs()], ids=[name for name, _ in nonzero_inputs()])
def test_nonzero(x):
    assert_same(host_eval.nonzero(x), reference("NonZero", {"x": x}))


def test_nonzero_scalar_has_no_coordinates():
    """A 0-d input has rank 0, so [0, n] (n = 0 or 1), as the reference and ONNX shape inference give."""
    assert host_eval.nonzero(np.array(3.0))[0].shape == (0, 1)
    assert host_eval.nonzero(np.array(False))[0].shape == (0, 0)


# Unique

def first_occurrences(x: np.ndarray, axis: int | None):
    """Unsorted Unique as the spec words it, one slice at a time (for inputs without NaN or -0.0)."""
    slices = list(x.reshape(-1)) if axis is None else [np.take(x, i, axis=axis) for i in range(x.shape[axis])]
    keys, indices, counts, inverse = [], [], [], []
    for i, s in enumerate(slices):
        key = np.asarray(s).tobytes()
        if key not in keys:
            keys.append(key)
            indices.append(i)
            counts.append(0)
        inverse.append(keys.index(key))
        counts[inverse[-1]] += 1
    y = np.take(x.reshape(-1), indices) if axis is None else np.take(x, indices, axis=axis)
    return [y] + [np.array(a, np.int64).reshape(-1) for a in (indices, inverse, counts)]


FLOATS = np.array([2.0, 1.0, 1.0, 3.0, 4.0, 3.0, -1.5, 2.0], np.float32)
INTS = np.array([[5, 3, 5, 0], [3, 3, 9, 0], [5, 3, 5, 0]], np.int64)
ROWS = np.array([[1, 0, 0], [1, 0, 0], [2, 3, 4], [0, 9, 9], [2, 3, 4]], np.float32)
NANS = np.array([np.nan, 1.0, -0.0, np.nan, 0.0, 1.0, -np.inf], np.float64)
UNIQUE_CASES = {
    # name: (x, axis); each is run sorted and unsorted
    "floats": (FLOATS, None),
    "ints-2d-flattened": (INTS, None),
    "ints-axis0": (INTS, 0),
    "ints-axis1": (INTS, 1),
    "ints-axis-1": (INTS, -1),
    "ints-axis-2": (INTS, -2),
    "rows-axis0": (ROWS, 0),
    "rows-axis1": (ROWS, 1),
    "3d-axis1": (np.tile(ROWS[None, :, :2], (2, 1, 1)), 1),
    "3d-axis2": (np.random.default_rng(1).integers(0, 2, (2, 3, 6)).astype(np.int32), 2),
    "nan-negzero": (NANS, None),
    "nan-rows": (np.array([[np.nan, 1], [np.nan, 1], [0.0, 1], [-0.0, 1]], np.float32), 0),
    "bool": (np.array([True, False, True, True]), None),
    "length-1": (np.array([7.0], np.float32), None),
    "empty": (np.zeros((0,), np.float32), None),
    "empty-rows": (np.zeros((0, 3), np.int32), 0),
    "scalar": (np.array(3.0, np.float32), None),
    "random-ints": (np.random.default_rng(2).integers(-20, 20, 500).astype(np.int32), None),
}


def reference_unique_is_right(x, axis, is_sorted):
    """onnx.reference's unsorted Y is np.take(x, indices, axis=0): right only where that is the op's axis."""
    return is_sorted or (x.ndim == 1 if axis is None else axis % x.ndim == 0)


@pytest.mark.parametrize("is_sorted", [True, False], ids=["sorted", "unsorted"])
@pytest.mark.parametrize("name", list(UNIQUE_CASES))
def test_unique(name, is_sorted):
    x, axis = UNIQUE_CASES[name]
    got = host_eval.unique(x, sorted=is_sorted, axis=axis)
    attrs = {"sorted": int(is_sorted)} | ({} if axis is None else {"axis": axis})
    if reference_unique_is_right(x, axis, is_sorted):
        assert_same(got, reference("Unique", {"x": x}, outputs=4, **attrs))
    else:
        # The reference fails or is wrong here: its sorted result, put in order of first occurrence, says what is right
        y, indices, inverse, counts = reference("Unique", {"x": x}, outputs=4, **(attrs | {"sorted": 1}))
        order = np.argsort(indices)
        np.testing.assert_array_equal(np.take(y, order, axis=0 if axis is None else axis), got[0])
        np.testing.assert_array_equal(indices[order], got[1])
        np.testing.assert_array_equal(counts[order], got[3])
    if not is_sorted and not (x.dtype.kind == "f" and (np.isnan(x) | (np.signbit(x) & (x == 0))).any()):
        assert_same(got, first_occurrences(x, axis))  # the spec's words, where bytes compare as values do


def test_unique_inverse_reconstructs_x():
    x, axis = INTS, 1
    for is_sorted in (True, False):
        y, _, inverse, _ = host_eval.unique(x, sorted=is_sorted, axis=axis)
        np.testing.assert_array_equal(np.take(y, inverse, axis=axis), x)


def test_unique_rejects_bad_axis():
    with pytest.raises(ValueError, match="axis"):
        host_eval.unique(INTS, axis=2)


# NonMaxSuppression

BOXES = np.array([[[0.0, 0.0, 1.0, 1.0], [0.0, 0.1, 1.0, 1.1], [0.0, -0.1, 1.0, 0.9],
                   [0.0, 10.0, 1.0, 11.0], [0.0, 10.1, 1.0, 11.1], [0.0, 100.0, 1.0, 101.0]]], np.float32)
FLIPPED = np.array([[[1.0, 1.0, 0.0, 0.0], [0.0, 0.1, 1.0, 1.1], [0.0, 0.9, 1.0, -0.1],
                     [0.0, 10.0, 1.0, 11.0], [1.0, 10.1, 0.0, 11.1], [1.0, 101.0, 0.0, 100.0]]], np.float32)
CENTERS = np.array([[[0.5, 0.5, 1.0, 1.0], [0.5, 0.6, 1.0, 1.0], [0.5, 0.4, 1.0, 1.0],
                     [0.5, 10.5, 1.0, 1.0], [0.5, 10.6, 1.0, 1.0], [0.5, 100.5, 1.0, 1.0]]], np.float32)
SCORES = np.array([[[0.9, 0.75, 0.6, 0.95, 0.5, 0.3]]], np.float32)


def f32(*values):
    return np.array(values, np.float32)


def random_case(seed, batches=2, classes=3, count=200, ties=False):
    rng = np.random.default_rng(seed)
    corners = rng.uniform(0, 50, (batches, count, 2, 2)).astype(np.float32)
    size = rng.uniform(0, 12, (batches, count, 1, 2)).astype(np.float32)
    boxes = np.concatenate([corners[:, :, 0], corners[:, :, 0] + size[:, :, 0]], axis=-1)
    flip = rng.random((batches, count)) < 0.3  # some boxes give the other diagonal
    boxes[flip] = boxes[flip][:, [2, 3, 0, 1]]
    boxes[:, ::17, 2] = boxes[:, ::17, 0]  # and some have zero area
    scores = rng.random((batches, classes, count)).astype(np.float32)
    if ties:
        scores = np.round(scores * 8) / 8
    return boxes, scores


def detector_case(seed, objects=12, boxes_each=30, classes=4, ties=False):
    """A detector's raw output: jittered boxes around each object, so suppressions chain and overlap."""
    rng = np.random.default_rng(seed)
    centre = np.repeat(rng.uniform(0, 200, (objects, 2)), boxes_each, axis=0)
    size = np.repeat(rng.uniform(10, 60, (objects, 2)), boxes_each, axis=0)
    centre += rng.normal(0, 0.15, centre.shape) * size
    size *= rng.uniform(0.7, 1.3, size.shape)
    boxes = np.concatenate([centre - size / 2, centre + size / 2], axis=1)[:, [1, 0, 3, 2]].astype(np.float32)
    scores = rng.random((1, classes, boxes.shape[0])).astype(np.float32)
    if ties:
        scores = np.round(scores * 4) / 4
    return boxes[None], scores


def chain_case(count):
    """Boxes a quarter of a width apart, each suppressing its neighbours only, scored in order: they alternate."""
    left = np.arange(count, dtype=np.float32) / 4
    boxes = np.stack([np.zeros(count), left, np.ones(count), left + 1], axis=1).astype(np.float32)
    return boxes[None], np.linspace(1, 0.5, count, dtype=np.float32).reshape(1, 1, count)


def nms_inputs(boxes, scores, max_output=None, iou=None, score=None):
    return {"boxes": boxes, "scores": scores, "max_output_boxes_per_class": max_output,
            "iou_threshold": iou, "score_threshold": score}


NMS_CASES = {
    # name: (inputs, center_point_box)
    "suppress-by-iou": (nms_inputs(BOXES, SCORES, np.array([3]), f32(0.5), f32(0.0)), 0),
    "flipped": (nms_inputs(FLIPPED, SCORES, np.array([3]), f32(0.5), f32(0.0)), 0),
    "center-format": (nms_inputs(CENTERS, SCORES, np.array([3]), f32(0.5), f32(0.0)), 1),
    "limit-output": (nms_inputs(BOXES, SCORES, np.array([2]), f32(0.5), f32(0.0)), 0),
    "no-limit": (nms_inputs(BOXES, SCORES, np.array([100]), f32(0.5)), 0),
    "max-output-0": (nms_inputs(BOXES, SCORES, np.array([0]), f32(0.5)), 0),
    "score-filters-some": (nms_inputs(BOXES, SCORES, np.array([3]), f32(0.5), f32(0.6)), 0),
    "score-at-threshold": (nms_inputs(BOXES, SCORES, np.array([6]), f32(0.0), f32(0.75)), 0),
    "score-filters-all": (nms_inputs(BOXES, SCORES, np.array([3]), f32(0.5), f32(0.99)), 0),
    "iou-absent": (nms_inputs(BOXES, SCORES, np.array([6]), np.zeros(0, np.float32)), 0),
    "iou-absent-center": (nms_inputs(CENTERS, SCORES, np.array([6]), np.zeros(0, np.float32), f32(0.4)), 1),
    "iou-absent-random": (nms_inputs(*random_case(9, count=60), np.array([100]), np.zeros(0, np.float32)), 0),
    "iou-negative": (nms_inputs(*random_case(10, count=60), np.array([100]), f32(-1.0), f32(0.5)), 0),
    # Areas, or just the intersection (of two thin boxes), that underflow to 0: IoU 0 would pass a threshold of -1
    "area-underflows": (nms_inputs(np.array([[[0, 0, 1e-25, 1e-25], [2, 2, 3, 3], [0, 0, 1e-25, 1e-25],
                                              [0, 0, 1, 1e-25], [0, 0, 1e-25, 1]]], np.float32),
                                   f32(0.9, 0.8, 0.7, 0.6, 0.5).reshape(1, 1, 5), np.array([5]), f32(-1.0)), 0),
    "iou-1": (nms_inputs(BOXES, SCORES, np.array([6]), f32(1.0)), 0),
    "iou-at-boundary": (nms_inputs(np.array([[[0, 0, 1, 1], [0, 0.5, 1, 1.5], [0, 0.25, 1, 1.25]]], np.float32),
                                   f32(0.9, 0.8, 0.7).reshape(1, 1, 3), np.array([3]), f32(1 / 3)), 0),
    "identical-boxes": (nms_inputs(np.tile(BOXES[:, :1], (1, 10, 1)), np.full((1, 1, 10), 0.9, np.float32),
                                   np.array([3]), f32(0.5), f32(0.0)), 0),
    "tied-scores": (nms_inputs(BOXES, np.array([[[0.5, 0.7, 0.5, 0.7, 0.7, 0.5]]], np.float32), np.array([6]),
                               f32(0.3)), 0),
    "signed-zero-scores": (nms_inputs(BOXES, np.array([[[0.0, -0.0, 0.0, -0.0, 1, -0.0]]], np.float32),
                                      np.array([6]), f32(0.0)), 0),
    "zero-area": (nms_inputs(np.array([[[0, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 5], [1, 1, 1, 5], [0, 0, 2, 2]]],
                                      np.float32), f32(0.9, 0.8, 0.7, 0.6, 0.5).reshape(1, 1, 5), np.array([5]),
                             f32(0.0)), 0),
    "nan-scores-no-threshold": (nms_inputs(BOXES, np.array([[[0.5, np.nan, 0.9, np.nan, 0.1, 0.9]]], np.float32),
                                           np.array([6]), f32(0.5)), 0),
    "nan-scores-threshold": (nms_inputs(BOXES, np.array([[[0.5, np.nan, 0.9, np.nan, 0.1, 0.9]]], np.float32),
                                        np.array([6]), f32(0.5), f32(0.0)), 0),
    "nan-and-inf-boxes": (nms_inputs(np.array([[[0, 0, 1, 1], [np.nan, 0, 1, 1], [0, 0, 1, np.inf], [0, 0, 1, 1],
                                                [0, -np.inf, 1, np.inf], [0, 0, np.nan, 1]]], np.float32),
                                     f32(0.9, 0.8, 0.7, 0.6, 0.5, 0.4).reshape(1, 1, 6), np.array([6]), f32(0.1)), 0),
    "nan-and-inf-centers": (nms_inputs(np.array([[[0, 0, 1, 1], [np.nan, 0, 1, 1], [0, 0, np.inf, 1],
                                                  [0, 0, 1, 1]]], np.float32), f32(0.9, 0.8, 0.7, 0.6).reshape(1, 1, 4),
                                       np.array([6]), f32(0.1)), 1),
    "no-boxes": (nms_inputs(np.zeros((2, 0, 4), np.float32), np.zeros((2, 3, 0), np.float32), np.array([3]),
                            f32(0.5)), 0),
    "batches-and-classes": (nms_inputs(*random_case(3, batches=3, classes=4, count=20), np.array([4]), f32(0.3),
                                       f32(0.2)), 0),
    "random-200": (nms_inputs(*random_case(4), np.array([50]), f32(0.4), f32(0.1)), 0),
    "random-200-all": (nms_inputs(*random_case(5), np.array([1000]), f32(0.5)), 0),
    "random-200-ties": (nms_inputs(*random_case(6, ties=True), np.array([1000]), f32(0.2), f32(0.25)), 0),
    "random-200-center": (nms_inputs(*random_case(7), np.array([30]), f32(0.3), f32(0.3)), 1),
    "random-200-float64": (nms_inputs(*(a.astype(np.float64) for a in random_case(8)), np.array([40]),
                                      np.array([0.3]), np.array([0.3])), 0),
    "random-200-float16": (nms_inputs(*(a.astype(np.float16) for a in random_case(11)), np.array([40]),
                                      np.array([0.3], np.float16), np.array([0.3], np.float16)), 0),
    "detector": (nms_inputs(*detector_case(12), np.array([25]), f32(0.45), f32(0.2)), 0),
    "detector-tied-scores": (nms_inputs(*detector_case(13, ties=True), np.array([1000]), f32(0.5)), 0),
    "chain": (nms_inputs(*chain_case(30), np.array([100]), f32(0.5)), 0),
    "long-chain": (nms_inputs(*chain_case(150), np.array([40]), f32(0.5)), 0),
}


@pytest.fixture(params=["pairs", "pairs-small-chunks", "steps"])
def nms_path(request, monkeypatch):
    """Which of host_eval's greedy selections runs: the suppression graph (its pairs found a few at a time too),
    never falling back, or the steps alone."""
    if request.param == "steps":
        monkeypatch.setattr(host_eval, "PAIRS_TESTED_AT_MOST", -1)
        return request.param
    monkeypatch.setattr(host_eval, "ROUNDS_AT_MOST", 1 << 30)
    if request.param == "pairs-small-chunks":
        monkeypatch.setattr(host_eval, "PAIRS_A_CHUNK", 3)
    steps = host_eval._greedy_steps

    def only_without_candidates(ext, order, sizes, max_output, iou_threshold):
        assert max_output == 0 or not sizes.any(), "the graph fell back to steps"
        return steps(ext, order, sizes, max_output, iou_threshold)

    monkeypatch.setattr(host_eval, "_greedy_steps", only_without_candidates)
    return request.param


@pytest.mark.parametrize("name", list(NMS_CASES))
def test_non_max_suppression(name, nms_path):
    inputs, center = NMS_CASES[name]
    got = host_eval.non_max_suppression(*inputs.values(), center_point_box=center)
    assert_same(got, reference("NonMaxSuppression", inputs, center_point_box=center))


def test_non_max_suppression_long_chain_falls_back():
    """Suppressions chained deeper than the graph's rounds: the steps take over, and agree."""
    inputs, _ = NMS_CASES["long-chain"]
    assert host_eval._greedy_by_pairs(host_eval._suppressing_pairs(host_eval._extents(inputs["boxes"][0], 0),
                                                                   np.float32(0.5)),
                                      150, np.arange(150)[None], np.array([150]), 40) is None
    expected = reference("NonMaxSuppression", inputs)
    assert_same(host_eval.non_max_suppression(*inputs.values()), expected)
    assert expected[0].shape[0] == 40 and (np.diff(expected[0][:, 2]) == 2).all()  # every other box


def test_non_max_suppression_defaults():
    """onnx.reference fails without max_output_boxes_per_class or iou_threshold, or with a negative limit; here an
    absent or negative limit is 0 (nothing selected), and an absent iou_threshold 0, as an empty one is there."""
    assert_same(host_eval.non_max_suppression(BOXES, SCORES), [np.zeros((0, 3), np.int64)])
    assert_same(host_eval.non_max_suppression(BOXES, SCORES, np.zeros(0, np.int64)), [np.zeros((0, 3), np.int64)])
    assert_same(host_eval.non_max_suppression(BOXES, SCORES, np.array([-4]), f32(0.5)), [np.zeros((0, 3), np.int64)])
    empty_iou = host_eval.non_max_suppression(BOXES, SCORES, np.array([6]), np.zeros(0, np.float32))
    assert_same(host_eval.non_max_suppression(BOXES, SCORES, np.array([6])), empty_iou)
    assert_same(host_eval.non_max_suppression(BOXES, SCORES, np.array([6]), None, f32(0.0)),
                reference("NonMaxSuppression", nms_inputs(BOXES, SCORES, np.array([6]), np.zeros(0, np.float32),
                                                          f32(0.0))))


def test_non_max_suppression_rejects_bad_shapes():
    with pytest.raises(ValueError, match="boxes"):
        host_eval.non_max_suppression(BOXES[0], SCORES)
    with pytest.raises(ValueError, match="scores"):
        host_eval.non_max_suppression(BOXES, SCORES[:, :, :3])
    with pytest.raises(ValueError, match="center_point_box"):
        host_eval.non_max_suppression(BOXES, SCORES, center_point_box=2)


# The backend node test cases (test_nonzero_example, test_unique_*, test_nonmaxsuppression_*), from the modules that
# generate onnx/backend/test/data/node: each calls `expect(node, inputs, outputs, name)`, captured here.

def backend_cases():
    cases = []
    for module_name in ("nonzero", "unique", "nonmaxsuppression"):
        module = importlib.import_module(f"onnx.backend.test.case.node.{module_name}")
        saved = module.expect
        module.expect = lambda node, inputs, outputs, name, **_: cases.append((name, node, inputs, outputs))
        try:
            for exporter in vars(module).values():
                if isinstance(exporter, type) and issubclass(exporter, module.Base) and exporter is not module.Base:
                    for attr in vars(exporter):
                        if attr.startswith("export"):
                            np.random.seed(0)  # as onnx's generator seeds each
                            getattr(exporter, attr)()
        finally:
            module.expect = saved
    return cases


BACKEND_CASES = backend_cases()


def test_backend_cases_found():
    names = {name for name, *_ in BACKEND_CASES}
    assert "test_nonzero_example" in names
    assert sum(n.startswith("test_unique_") for n in names) >= 5
    assert sum(n.startswith("test_nonmaxsuppression_") for n in names) >= 9


def run_node(node, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """host_eval's function for a NonZero, Unique or NonMaxSuppression node, on its present inputs, giving the
    outputs the node names."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    present = iter(inputs)
    args = [next(present) if name else None for name in node.input]
    if node.op_type == "NonZero":
        got = host_eval.nonzero(*args)
    elif node.op_type == "Unique":
        got = host_eval.unique(*args, sorted=bool(attrs.get("sorted", 1)), axis=attrs.get("axis"))
    else:
        got = host_eval.non_max_suppression(*args, center_point_box=attrs.get("center_point_box", 0))
    return [g for g, name in zip(got, node.output) if name]


@pytest.mark.parametrize("case", BACKEND_CASES, ids=[name for name, *_ in BACKEND_CASES])
def test_backend_case(case):
    _, node, inputs, outputs = case
    assert_same(run_node(node, inputs), [np.asarray(o) for o in outputs])
