"""ai.onnx.ml's tree ensembles (`onnx_ml_trees.py`): TreeEnsembleRegressor and TreeEnsembleClassifier (ml opsets 1
and 3) and TreeEnsemble (ml opset 5), built by hand and compiled. The references: onnx's ReferenceEvaluator, and
onnxruntime's CPU session where the evaluator has nothing to say (regressors' post transforms, `*_as_tensor`) or is
wrong (a TreeEnsemble tree that is a single leaf, a set member 0.0). Where the two differ, the module docstring
says whom the import follows, and the tests below pin it: a NaN at BRANCH_NEQ (opsets 1 and 3), the binary
classifier's columns and labels, TreeEnsemble's post_transform numbering.

The cases: one stump per mode and per nodes_missing_value_tracks_true, with x below, at, above the threshold and NaN;
every aggregate function and post transform; several targets; binary and multiclass classifiers with labels
[3, 7, 11]; double thresholds between floats; and random forests (20 trees of depth up to 8 over 10 features,
seeded), whose inputs sit on a grid so that equality splits and thresholds are met exactly."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import helper, numpy_helper  # noqa: E402
from retarget.errors import InputError, UnsupportedOpError  # noqa: E402
from retarget.importers.onnx import OnnxImporter  # noqa: E402
from retarget.testing.onnx_cases import assert_same, compiled_outputs  # noqa: E402
from retarget.testing.torch_cases import importer_targets  # noqa: E402

TARGETS = importer_targets()  # vmvx and llvm-cpu, or RETARGET_IMPORTER_TARGETS (GPUs too)
F32 = np.float32
FEATURES = 10
MODES = ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"]  # 0..5 in TreeEnsemble
MEMBER = 6
TRANSFORMS = ["NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT"]  # TreeEnsemble's numbering
AGGREGATES = ["AVERAGE", "SUM", "MIN", "MAX"]  # TreeEnsemble's numbering
RTOL, ATOL = 1e-5, 1e-6


# -- models ----------------------------------------------------------------------------------------------------------

def model(nodes, x_dtype=F32, features=FEATURES, ml=3, rows=None, shape=None):
    """A graph of ai.onnx.ml `nodes` (helper.make_node's keyword arguments, op first) all reading x [rows, features]
    (or `shape`): the regressors' outputs are y0, y1, ..., a classifier's label_i and scores_i."""
    made, outputs = [], []
    for i, (op, attrs) in enumerate(nodes):
        outs = [f"label{i}", f"scores{i}"] if op == "TreeEnsembleClassifier" else [f"y{i}"]
        made.append(helper.make_node(op, ["x"], outs, domain="ai.onnx.ml", **attrs))
        outputs += outs
    x = helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(np.dtype(x_dtype)),
                                      shape or [rows, features])
    graph = helper.make_graph(made, "trees", [x], [helper.make_empty_tensor_value_info(o) for o in outputs])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", ml)])
    m.ir_version = 8  # what onnxruntime 1.31 reads
    return m


def reference(m, x):
    from onnx.reference import ReferenceEvaluator

    with np.errstate(all="ignore"):
        return ReferenceEvaluator(m).run(None, {"x": x})


def onnxruntime(m, x):
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})


def check(m, target, x, expected):
    assert_same(compiled_outputs(m, target, x), expected, rtol=RTOL, atol=ATOL)


def needs_f64(target):
    if target.startswith(("webgpu", "metal")):
        pytest.skip(f"{target} has no f64")


def tensor(values, dtype=F32):
    return numpy_helper.from_array(np.asarray(values, dtype))


# Trees are lists of nodes in preorder: {"feature", "mode", "value", "mvt", "true", "false"} (children by index,
# "members" for a set) or {"leaf": {target: weight}}.

def legacy(trees, entries="target", as_tensor=False, **attrs):
    """TreeEnsembleRegressor's (entries "target") or TreeEnsembleClassifier's ("class") attributes."""
    a = {k: [] for k in ("nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_modes", "nodes_values",
                         "nodes_truenodeids", "nodes_falsenodeids", "nodes_missing_value_tracks_true")}
    e = {f"{entries}_{k}": [] for k in ("treeids", "nodeids", "ids", "weights")}
    for t, nodes in enumerate(trees):
        for i, node in enumerate(nodes):
            a["nodes_treeids"].append(t)
            a["nodes_nodeids"].append(i)
            leaf = "leaf" in node
            a["nodes_featureids"].append(0 if leaf else node["feature"])
            a["nodes_modes"].append("LEAF" if leaf else MODES[node["mode"]])
            a["nodes_values"].append(0.0 if leaf else node["value"])
            a["nodes_truenodeids"].append(0 if leaf else node["true"])
            a["nodes_falsenodeids"].append(0 if leaf else node["false"])
            a["nodes_missing_value_tracks_true"].append(0 if leaf else node.get("mvt", 0))
            for k, w in (node["leaf"].items() if leaf else ()):
                for key, v in zip(("treeids", "nodeids", "ids", "weights"), (t, i, k, w), strict=True):
                    e[f"{entries}_{key}"].append(v)
    if as_tensor:  # the double forms
        for name in ("nodes_values", f"{entries}_weights"):
            a[name + "_as_tensor"] = tensor(a.pop(name) if name in a else e.pop(name), np.float64)
    return {**a, **e, **attrs}


def v5(trees, dtype=F32, **attrs):
    """TreeEnsemble's attributes; each leaf has one target."""
    f = {k: [] for k in ("nodes_featureids", "nodes_modes", "nodes_splits", "nodes_truenodeids", "nodes_falsenodeids",
                         "nodes_trueleafs", "nodes_falseleafs", "nodes_missing_value_tracks_true")}
    leaf_targets, leaf_weights, roots, members = [], [], [], []
    for nodes in trees:
        ids, interior, leaves = {}, sum(1 for _ in f["nodes_modes"]), len(leaf_weights)
        for i, node in enumerate(nodes):  # interior nodes and leaves numbered apart, in order
            if "leaf" in node:
                ids[i] = (True, leaves)
                leaves += 1
            else:
                ids[i] = (False, interior)
                interior += 1
        roots.append(ids[0][1])
        for node in nodes:
            if "leaf" in node:
                (k, w), = node["leaf"].items()
                leaf_targets.append(k)
                leaf_weights.append(w)
                continue
            f["nodes_featureids"].append(node["feature"])
            f["nodes_modes"].append(node["mode"])
            f["nodes_splits"].append(node["value"] if node["mode"] != MEMBER else np.nan)
            f["nodes_missing_value_tracks_true"].append(node.get("mvt", 0))
            for side in ("true", "false"):
                is_leaf, at = ids[node[side]]
                f[f"nodes_{side}leafs"].append(int(is_leaf))
                f[f"nodes_{side}nodeids"].append(at)
            if node["mode"] == MEMBER:
                members += list(node["members"]) + [np.nan]
    out = {**f, "nodes_modes": tensor(f["nodes_modes"], np.uint8), "nodes_splits": tensor(f["nodes_splits"], dtype),
           "leaf_targetids": leaf_targets, "leaf_weights": tensor(leaf_weights, dtype), "tree_roots": roots}
    if members:
        out["membership_values"] = tensor(members, dtype)
    return {**out, **attrs}


def stump(mode, value, mvt=0, low=1.0, high=2.0, target=0, feature=0):
    """x[feature] `mode` value: leaf `low` when true, `high` when false."""
    return [{"feature": feature, "mode": mode, "value": value, "mvt": mvt, "true": 1, "false": 2},
            {"leaf": {target: low}}, {"leaf": {target: high}}]


GRID = np.arange(-3, 3.5, 0.5)  # inputs and thresholds meet here, so that equality and boundaries are exercised


def random_tree(rng, depth, targets, modes, leaf_targets=None):
    nodes = []

    def grow(level):
        i = len(nodes)
        nodes.append(None)
        if level == depth or (level > 0 and rng.random() < 0.2):
            ks = range(targets) if leaf_targets == "all" else [int(rng.integers(targets))]
            nodes[i] = {"leaf": {k: float(F32(rng.normal())) for k in ks}}
            return i
        mode = int(rng.choice(modes))
        node = {"feature": int(rng.integers(FEATURES)), "mode": mode, "mvt": int(rng.random() < 0.3),
                "value": float(rng.choice(GRID)) if rng.random() < 0.7 else float(F32(rng.normal()))}
        if mode == MEMBER:
            node["members"] = sorted({float(v) for v in rng.choice(GRID[GRID != 0], int(rng.integers(1, 6)))})
        node["true"] = grow(level + 1)
        node["false"] = grow(level + 1)
        nodes[i] = node
        return i

    grow(0)
    return nodes


def random_x(rng, rows=64, dtype=F32, nan=True):
    x = np.where(rng.random((rows, FEATURES)) < 0.6, rng.choice(GRID, (rows, FEATURES)),
                 rng.normal(size=(rows, FEATURES)))
    if nan:
        x[rng.random(x.shape) < 0.05] = np.nan
    return x.astype(dtype)


# x[0] below, at, above 0.5, and NaN; other features 0
X_AROUND = np.zeros((4, FEATURES), F32)
X_AROUND[:, 0] = [0.25, 0.5, 0.75, np.nan]


# -- node modes and missing values -------------------------------------------------------------------------------

def every_mode_stumps():
    """One tree per mode and per nodes_missing_value_tracks_true, each writing its own target."""
    return [stump(mode, 0.5, mvt, target=2 * mode + mvt) for mode in range(6) for mvt in (0, 1)]


@pytest.mark.parametrize("target", TARGETS)
def test_every_mode_with_and_without_missing_value_tracks_true(target):
    """Opset 1/3's reference: a NaN goes true only where missing_value_tracks_true is set, for every mode (NEQ
    too). onnxruntime agrees but at NEQ without it, where it sends a NaN true (NaN != t, as IEEE says)."""
    m = model([("TreeEnsembleRegressor", legacy(every_mode_stumps(), n_targets=12))])
    expected = reference(m, X_AROUND)
    check(m, target, X_AROUND, expected)
    ort = onnxruntime(m, X_AROUND)[0]
    neq_nan = (3, 2 * 5)  # x NaN at BRANCH_NEQ (mode 5), missing_value_tracks_true 0
    assert expected[0][neq_nan] == 2.0 and ort[neq_nan] == 1.0  # the one place they differ
    ort[neq_nan] = 2.0
    np.testing.assert_array_equal(ort, expected[0])



@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", [F32, np.float16])
def test_tree_ensemble_modes_members_and_missing_values(dtype, target):
    """TreeEnsemble (opset 5) compares as IEEE (its reference and onnxruntime agree): NaN != t is true. Set
    membership: a NaN is in no set, and goes where missing_value_tracks_true says. Float16 too (the reference's;
    onnxruntime has none)."""
    trees = every_mode_stumps()
    trees += [[{"feature": 0, "mode": MEMBER, "members": [0.25, 0.75, 2.0], "mvt": mvt, "true": 1, "false": 2},
               {"leaf": {12 + mvt: 1.0}}, {"leaf": {12 + mvt: 2.0}}] for mvt in (0, 1)]
    m = model([("TreeEnsemble", v5(trees, dtype, n_targets=14))], x_dtype=dtype, ml=5)
    x = X_AROUND.astype(dtype)
    expected = reference(m, x)
    check(m, target, x, expected)
    if dtype == F32:
        np.testing.assert_array_equal(onnxruntime(m, x)[0], expected[0])


@pytest.mark.parametrize("target", TARGETS)
def test_tree_ensemble_large_sets_and_zero_members(target):
    """A set of 40 members (a balanced search: 6 steps, not 40), against the reference (onnxruntime reads a set
    that large as integers, truncating x: 0.75 would be in {0, ...}); and small sets holding 0.0, against
    onnxruntime (the reference's parser takes 0.0 for the end of a set)."""
    big = [float(v) for v in np.arange(-20, 20) * 0.5 + 0.25]
    sets = [big, big[::3], [-1.0, 0.5, 1.5]]
    trees = [[{"feature": f, "mode": MEMBER, "members": members, "mvt": 0, "true": 1, "false": 2},
              {"leaf": {f: 1.0}}, {"leaf": {f: -1.0}}] for f, members in enumerate(sets)]
    x = np.array([[0.25, 0.75, 0.0], [9.75, -9.75, 1.5], [0.5, 0.5, -1.0], [-9.75, 8.25, np.nan], [10.25, -8.25, 0.5],
                  [0.0, -8.5, -1.5]], F32)
    m = model([("TreeEnsemble", v5(trees, n_targets=3))], ml=5, features=3)
    expected = reference(m, x)
    np.testing.assert_array_equal(expected[0], np.stack([np.where(np.isin(x[:, f], s), 1, -1)
                                                         for f, s in enumerate(sets)], 1))
    check(m, target, x, expected)
    trees = [[{"feature": f, "mode": MEMBER, "members": members, "mvt": 0, "true": 1, "false": 2},
              {"leaf": {f: 1.0}}, {"leaf": {f: -1.0}}]
             for f, members in enumerate([[0.0, 1.0], [-1.0, 0.0], [0.0]])]
    x = np.array([[0.0, 0.0, 0.0], [1.0, -1.0, 1.0], [0.5, -0.0, np.nan], [np.nan, 2.0, -0.0]], F32)
    m = model([("TreeEnsemble", v5(trees, n_targets=3))], ml=5, features=3)
    expected = onnxruntime(m, x)
    np.testing.assert_array_equal(expected[0], [[1, 1, 1], [1, 1, -1], [-1, 1, -1], [-1, -1, 1]])
    check(m, target, x, expected)


@pytest.mark.parametrize("target", TARGETS)
def test_tree_ensemble_tree_of_a_single_leaf(target):
    """A root whose both branches name one leaf is a tree of that leaf (the spec, onnxruntime); onnx's reference
    reads the leaf at the root's own index instead."""
    trees = {"nodes_featureids": [0, 0], "nodes_modes": tensor([0, 0], np.uint8), "nodes_splits": tensor([0.5, 0]),
             "nodes_truenodeids": [0, 2], "nodes_falsenodeids": [1, 2], "nodes_trueleafs": [1, 1],
             "nodes_falseleafs": [1, 1], "tree_roots": [0, 1], "leaf_targetids": [0, 1, 0],
             "leaf_weights": tensor([0.25, -2.0, 0.75]), "n_targets": 2}
    m = model([("TreeEnsemble", trees)], ml=5)
    expected = onnxruntime(m, X_AROUND)
    np.testing.assert_array_equal(expected[0], [[1.0, 0], [1.0, 0], [0.75, -2.0], [0.75, -2.0]])
    check(m, target, X_AROUND, expected)


@pytest.mark.parametrize("target", TARGETS)
def test_nan_thresholds(target):
    """Every comparison with a NaN threshold is false but NEQ's; a NaN x then goes where the attribute says."""
    trees = [stump(mode, np.nan, mvt, target=2 * mode + mvt) for mode in range(6) for mvt in (0, 1)]
    m = model([("TreeEnsembleRegressor", legacy(trees, n_targets=12))])
    check(m, target, X_AROUND, reference(m, X_AROUND))


@pytest.mark.parametrize("target", TARGETS)
def test_double_thresholds_between_floats(target):
    """Opset 3's nodes_values_as_tensor holds doubles; float x is compared with them as doubles (exactly), though
    the graph compares floats: 0.1 (double) lies between two floats, which LT, LEQ, GT, GTE and EQ must tell apart.
    The reference is onnxruntime on x cast to double (it refuses double thresholds for float x)."""
    t = 0.1
    below, above = np.nextafter(F32(t), F32(-1)), np.nextafter(F32(t), F32(1))
    x = np.zeros((6, FEATURES), F32)
    x[:, 0] = [below, F32(t), above, 1e30, -np.inf, np.inf]
    trees = [stump(mode, t, target=mode) for mode in range(6)] + [stump(0, 1e300, target=6), stump(1, -1e300, target=7)]
    m = model([("TreeEnsembleRegressor", legacy(trees, as_tensor=True, n_targets=8))])
    expected = onnxruntime(model([("TreeEnsembleRegressor", legacy(trees, as_tensor=True, n_targets=8))],
                                 x_dtype=np.float64), x.astype(np.float64))
    assert float(F32(t)) > t  # the float nearest 0.1 is above it: x == F32(t) is above the threshold
    check(m, target, x, [e.astype(F32) for e in expected])


@pytest.mark.parametrize("target", TARGETS)
def test_double_input(target):
    """Double x compares in double: x at the double threshold, and at the float next to it."""
    needs_f64(target)
    x = np.zeros((3, FEATURES))
    x[:, 0] = [0.1, float(F32(0.1)), np.nextafter(0.1, 0)]
    trees = [stump(mode, 0.1, target=mode) for mode in range(6)]
    m = model([("TreeEnsembleRegressor", legacy(trees, as_tensor=True, n_targets=6))], x_dtype=np.float64)
    check(m, target, x, onnxruntime(m, x))


# -- aggregates, base values, post transforms --------------------------------------------------------------------

def three_target_forest():
    """Four trees over x[0] and x[1]; leaves of one, two or three targets, so that every target is reached."""
    return [stump(0, 0.5, low=1.5, high=-0.5, target=0),
            [{"feature": 1, "mode": 2, "value": 0.0, "true": 1, "false": 2},
             {"leaf": {0: 0.25, 1: 2.0, 2: -1.0}}, {"leaf": {1: -3.0, 2: 0.5}}],
            [{"feature": 0, "mode": 1, "value": 0.75, "true": 1, "false": 4},
             {"feature": 1, "mode": 4, "value": 1.0, "true": 2, "false": 3},
             {"leaf": {2: 4.0}}, {"leaf": {1: 0.75, 2: -2.0}}, {"leaf": {0: -1.25, 1: 1.0, 2: 3.0}}],
            stump(3, 0.25, low=0.5, high=1.0, target=1, feature=1)]


X_SMALL = np.array([[0.25, 1.0], [0.5, -1.0], [0.75, 0.0], [1.0, 1.0], [np.nan, 0.5], [-2.0, np.nan]], F32)


@pytest.mark.parametrize("target", TARGETS)
def test_regressor_aggregates_with_several_targets_and_base_values(target):
    nodes = [("TreeEnsembleRegressor", legacy(three_target_forest(), n_targets=3, aggregate_function=a,
                                              base_values=[0.5, -1.0, 2.0]))
             for a in AGGREGATES]
    nodes.append(("TreeEnsembleRegressor", legacy(three_target_forest(), n_targets=3, base_values=[3.0])))
    m = model(nodes, features=2)
    expected = reference(m, X_SMALL)
    check(m, target, X_SMALL, expected)
    ort = onnxruntime(model(nodes[:2], features=2), X_SMALL)  # onnxruntime agrees on AVERAGE and SUM (it refuses
    np.testing.assert_allclose(ort, expected[:2], rtol=RTOL)  # one base value for three targets, which broadcasts)


@pytest.mark.parametrize("target", TARGETS)
def test_regressor_min_and_max_of_an_unreached_target(target):
    """MIN and MAX start from the largest (least) float, as the reference does; a target no leaf names keeps it."""
    nodes = [("TreeEnsembleRegressor", legacy([stump(0, 0.5)], n_targets=2, aggregate_function=a)) for a in
             ("MIN", "MAX")]
    m = model(nodes)
    check(m, target, X_AROUND, reference(m, X_AROUND))


@pytest.mark.parametrize("target", TARGETS)
def test_regressor_post_transforms(target):
    """onnxruntime's transforms (the reference has none): with one target only PROBIT applies. PROBIT's
    approximation cancels near 0.5 (-v + sqrt(v^2 - v2), of about 4.3 each), where float rounding alone moves it
    by 1e-4 relative: the scores stay clear of it."""
    def forest(targets):
        return [[{"feature": 0, "mode": 0, "value": 0.5, "true": 1, "false": 2},
                 {"leaf": dict(enumerate([0.1, 0.25, 0.8][:targets]))},
                 {"leaf": dict(enumerate([0.85, 0.2, 0.7][:targets]))}],
                [{"feature": 1, "mode": 2, "value": 0.0, "true": 1, "false": 2}, {"leaf": {0: 0.05}},
                 {"leaf": {targets - 1: -0.02}}]]
    nodes = [("TreeEnsembleRegressor", legacy(forest(k), n_targets=k, post_transform=t))
             for k in (1, 3) for t in TRANSFORMS]
    nodes.append(("TreeEnsembleRegressor", legacy([[{"leaf": {0: 0.0}}], stump(0, 0.5, low=0.0, high=2.0, target=1)],
                                                  n_targets=3, post_transform="SOFTMAX_ZERO")))
    m = model(nodes, features=2)
    check(m, target, X_SMALL, onnxruntime(m, X_SMALL))


@pytest.mark.parametrize("target", TARGETS)
def test_tree_ensemble_aggregates_and_transforms(target):
    """Aggregates as the reference computes them; post transforms by the spec's numbering (1 SOFTMAX, 2 LOGISTIC),
    checked against onnxruntime, which swaps 1 and 2."""
    trees = [stump(0, 0.5, low=0.5, high=-0.25, target=0), stump(2, 0.0, low=0.2, high=0.7, target=1, feature=1),
             stump(4, 1.0, low=0.35, high=0.05, target=2, feature=1), stump(1, 0.75, low=-1.0, high=0.1, target=0)]
    aggregates = model([("TreeEnsemble", v5(trees, n_targets=3, aggregate_function=a)) for a in range(4)],
                       ml=5, features=2)
    check(aggregates, target, X_SMALL, reference(aggregates, X_SMALL))
    swapped = {1: 2, 2: 1}
    for targets in (1, 3):
        ts = trees if targets == 3 else [[n if "leaf" not in n else {"leaf": {0: list(n["leaf"].values())[0]}}
                                          for n in tree] for tree in trees]
        ours = model([("TreeEnsemble", v5(ts, n_targets=targets, post_transform=t)) for t in range(5)],
                     ml=5, features=2)
        theirs = model([("TreeEnsemble", v5(ts, n_targets=targets, post_transform=swapped.get(t, t)))
                        for t in range(5)], ml=5, features=2)
        check(ours, target, X_SMALL, onnxruntime(theirs, X_SMALL))


# -- classifiers ---------------------------------------------------------------------------------------------------

def classifier_forest(classes, rng):
    """Three trees whose leaves weigh every class (a random forest's probabilities)."""
    def leaf():
        return {"leaf": {k: float(F32(rng.uniform(-1, 1))) for k in range(classes)}}
    return [[{"feature": 0, "mode": 0, "value": 0.5, "mvt": 1, "true": 1, "false": 2}, leaf(), leaf()],
            [{"feature": 1, "mode": 3, "value": 0.0, "true": 1, "false": 2}, leaf(), leaf()],
            [{"feature": 0, "mode": 4, "value": 1.0, "true": 1, "false": 2}, leaf(), leaf()]]


@pytest.mark.parametrize("target", TARGETS)
def test_multiclass_classifier_labels_and_transforms(target):
    """Labels [3, 7, 11] (not 0..2): the argmax of the transformed scores mapped through them, with base values."""
    rng = np.random.default_rng(1)
    forest = classifier_forest(3, rng)
    nodes = [("TreeEnsembleClassifier", legacy(forest, "class", classlabels_int64s=[3, 7, 11], post_transform=t,
                                               base_values=[0.1, -0.2, 0.05]))
             for t in TRANSFORMS[:4]]
    probit = [[{"feature": 0, "mode": 0, "value": 0.5, "true": 1, "false": 2},
               {"leaf": {0: 0.2, 1: 0.7, 2: 0.3}}, {"leaf": {0: 0.9, 1: 0.3, 2: 0.75}}]]  # clear of 0.5
    nodes.append(("TreeEnsembleClassifier", legacy(probit, "class", classlabels_int64s=[3, 7, 11],
                                                   post_transform="PROBIT")))
    m = model(nodes, features=2)
    expected = reference(m, X_SMALL)
    check(m, target, X_SMALL, expected)
    ort = onnxruntime(m, X_SMALL)
    for ours, theirs in zip(expected, ort, strict=True):  # onnxruntime agrees, beyond two classes
        np.testing.assert_allclose(ours, theirs, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("labels, base", [([0, 1], None), ([3, 7], [0.1]), ([3, 7], [0.1, 0.3]), ([1], None)],
                         ids=["0-1", "3-7-one-base", "3-7-two-bases", "single-label-1"])
def test_binary_classifier_as_the_reference(labels, base, target):
    """Every weight on class 0: the reference puts the score s in column 1 and 1 - s (NONE, PROBIT) or -s (the
    others) in column 0, transforms, and takes the argmax; a single label [1] gives two columns and labels 0/1."""
    trees = [stump(0, 0.5, low=0.25, high=0.6, target=0), stump(0, 0.75, low=0.5, high=-0.5, target=0, feature=1)]
    extra = {} if base is None else {"base_values": base}
    m = model([("TreeEnsembleClassifier", legacy(trees, "class", classlabels_int64s=labels, post_transform=t,
                                                 **extra)) for t in TRANSFORMS], features=2)
    x = np.array([[0.25, 0.5], [0.75, 0.5], [0.25, 1.0], [0.75, 1.0], [np.nan, np.nan]], F32)
    check(m, target, x, reference(m, x))


@pytest.mark.parametrize("target", TARGETS)
def test_classifier_of_integer_input_and_a_single_row(target):
    rng = np.random.default_rng(2)
    forest = classifier_forest(3, rng)
    m = model([("TreeEnsembleClassifier", legacy(forest, "class", classlabels_int64s=[3, 7, 11]))],
              x_dtype=np.int64, features=2)
    x = np.array([[0, 1], [1, 0], [1, -1], [2, 3]], np.int64)
    check(m, target, x, reference(m, x))
    single = model([("TreeEnsembleClassifier", legacy(forest, "class", classlabels_int64s=[3, 7, 11]))], shape=[2])
    x1 = np.array([1.0, -1.0], F32)
    check(single, target, x1, reference(single, x1))  # onnxruntime refuses [F]; the reference takes a row


@pytest.mark.parametrize("target", TARGETS)
def test_string_labels_are_refused_unless_only_the_scores_are_used(target):
    forest = classifier_forest(3, np.random.default_rng(3))
    attrs = legacy(forest, "class", classlabels_strings=["no", "maybe", "yes"])
    m = model([("TreeEnsembleClassifier", attrs)], features=2)
    with pytest.raises(UnsupportedOpError, match="labels of strings are not numbers"):
        OnnxImporter().load(m)
    m.graph.node[0].output[0] = ""  # the label unused: the scores are numbers
    del m.graph.output[0]
    check(m, target, X_SMALL, reference(m, X_SMALL))


def test_malformed_trees_are_refused():
    cycle = [{"feature": 0, "mode": 0, "value": 0.5, "true": 1, "false": 2},
             {"feature": 0, "mode": 0, "value": 0.5, "true": 0, "false": 2}, {"leaf": {0: 1.0}}]
    with pytest.raises(InputError, match="cycle"):
        OnnxImporter().load(model([("TreeEnsembleRegressor", legacy([cycle], n_targets=1))]))
    with pytest.raises(InputError, match="feature 12"):
        OnnxImporter().load(model([("TreeEnsembleRegressor", legacy([stump(0, 0.5, feature=12)], n_targets=1))]))
    with pytest.raises(InputError, match="target_ids holds 3"):
        OnnxImporter().load(model([("TreeEnsembleRegressor", legacy([stump(0, 0.5, target=3)], n_targets=2))]))


# -- random forests --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("target", TARGETS)
def test_random_forest_regressor(target):
    """20 random trees of depth up to 8 over 10 features, every mode, two targets, NaNs in x."""
    rng = np.random.default_rng(10)
    trees = [random_tree(rng, int(rng.integers(3, 9)), 2, range(6)) for _ in range(20)]
    m = model([("TreeEnsembleRegressor", legacy(trees, n_targets=2, aggregate_function="AVERAGE",
                                                base_values=[0.5, -0.5]))], rows="N")
    x = random_x(rng)
    expected = reference(m, x)
    check(m, target, x, expected)
    clean = random_x(rng, rows=5, nan=False)  # without NaN onnxruntime agrees too (it differs at NEQ), at 5 rows
    check(m, target, clean, onnxruntime(m, clean))


@pytest.mark.parametrize("target", TARGETS)
def test_random_forest_classifier(target):
    """A random forest's shape: every leaf weighs every class; labels [3, 7, 11]; softmax."""
    rng = np.random.default_rng(11)
    trees = [random_tree(rng, int(rng.integers(3, 9)), 3, range(5), leaf_targets="all") for _ in range(20)]
    m = model([("TreeEnsembleClassifier", legacy(trees, "class", classlabels_int64s=[3, 7, 11],
                                                 post_transform="SOFTMAX"))])
    x = random_x(rng)
    expected = reference(m, x)
    check(m, target, x, expected)
    ort = onnxruntime(m, x)
    np.testing.assert_array_equal(ort[0], expected[0])
    np.testing.assert_allclose(ort[1], expected[1], rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", [F32, np.float64])
def test_random_tree_ensemble(dtype, target):
    """20 random trees with set membership too, three targets, each leaf one; against the reference (no tree is a
    single leaf, no set holds 0.0). Not onnxruntime: it refuses sets of non-integers past a few members."""
    if dtype == np.float64:
        needs_f64(target)
    rng = np.random.default_rng(12)
    trees = [random_tree(rng, int(rng.integers(3, 9)), 3, range(7)) for _ in range(20)]
    m = model([("TreeEnsemble", v5(trees, dtype, n_targets=3))], x_dtype=dtype, ml=5)
    x = random_x(rng, dtype=dtype)
    expected = reference(m, x)
    check(m, target, x, expected)


def test_sklearn_models_when_installed():
    """scikit-learn's trees through skl2onnx, where both are installed (they are not a dependency): forests, extra
    trees, single trees and gradient boosting, regressors and classifiers (binary and three classes)."""
    pytest.importorskip("sklearn")
    skl2onnx = pytest.importorskip("skl2onnx")
    from skl2onnx.common.data_types import FloatTensorType
    from sklearn import ensemble, tree

    rng = np.random.default_rng(5)
    x = rng.normal(size=(200, 6)).astype(F32)
    y = x[:, 0] * 2 + np.sin(x[:, 1])
    binary, three = np.where(y > 0, 7, 3), np.digitize(y, [-1.0, 1.0]) * 4 + 1
    fitted = [ensemble.RandomForestRegressor(n_estimators=10, max_depth=6, random_state=0).fit(x, y),
              ensemble.ExtraTreesRegressor(n_estimators=5, max_depth=5, random_state=0).fit(x, np.stack([y, -y], 1)),
              tree.DecisionTreeRegressor(max_depth=7, random_state=0).fit(x, y),
              ensemble.GradientBoostingRegressor(n_estimators=10, max_depth=3, random_state=0).fit(x, y),
              ensemble.RandomForestClassifier(n_estimators=10, max_depth=6, random_state=0).fit(x, three),
              ensemble.ExtraTreesClassifier(n_estimators=5, max_depth=5, random_state=0).fit(x, binary),
              tree.DecisionTreeClassifier(max_depth=5, random_state=0).fit(x, three),
              ensemble.GradientBoostingClassifier(n_estimators=10, max_depth=3, random_state=0).fit(x, binary),
              ensemble.GradientBoostingClassifier(n_estimators=10, max_depth=3, random_state=0).fit(x, three)]
    for estimator in fitted:
        options = {id(estimator): {"zipmap": False}} if hasattr(estimator, "classes_") else None
        onx = skl2onnx.convert_sklearn(estimator, initial_types=[("x", FloatTensorType([None, 6]))], options=options,
                                       target_opset={"": 17, "ai.onnx.ml": 3})
        onx.ir_version = 8
        check(onx, "llvm-cpu", x[:32], onnxruntime(onx, x[:32]))
