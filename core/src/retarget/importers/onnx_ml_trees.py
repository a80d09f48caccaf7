"""ONNX ai.onnx.ml's tree ensembles, as scikit-learn's, XGBoost's and LightGBM's converters write them:
TreeEnsembleRegressor and TreeEnsembleClassifier (ml opsets 1 and 3, with the double `*_as_tensor` attributes) and
TreeEnsemble (ml opset 5). Supported: every node mode (BRANCH_LEQ, LT, GTE, GT, EQ, NEQ, LEAF, opset 5's
BRANCH_MEMBER), `nodes_missing_value_tracks_true`, every `aggregate_function` and `post_transform`, several
targets, `base_values`, integer labels (`classlabels_int64s`); X float, double, int32 or int64 (float16 for
TreeEnsemble), [N, F] with N possibly known only at run time. Refused: `classlabels_strings` where the label is
used (strings are not numbers; the scores alone import), and a single class label other than 1 (undefined).

Lowering. The graph has no loops, so every tree is walked for every row at once, for a fixed number of steps (the
deepest path). Nodes are packed into constants: a feature and a threshold per node, and a successor table
[nodes, 4] indexed by a comparison code, [x <= t] + 2 [x >= t] (0 NaN, 1 below, 2 above, 3 equal). Modes and NaN
routing live in the table, not in per-node branches, so a step is: gather x at (row, feature[node]), compare twice,
gather the successor. A leaf is its own successor, so shorter paths stay put. Every value of a step is used once
(x's gathers are repeated rather than shared) so a step fuses into one kernel. A BRANCH_MEMBER set becomes a
balanced search over its sorted members (log2 of its size in steps). A double threshold meeting float X becomes
the float just below it, with "equal" rerouted: the same decisions as comparing in double. Last, the leaves' rows
[leaves, targets] are gathered and reduced over the trees (sum, min or max; the gather fuses into the reduction).

Where onnx's reference (`onnx.reference.ops.aionnxml`) and onnxruntime differ:
- TreeEnsembleClassifier follows the reference. Binary (every weight on one class): score s in column 1, 1 - s
  (NONE, PROBIT) or -s (others) in column 0, then the transform; the label is the argmax of the transformed
  scores. PROBIT is the reference's approximation, SOFTMAX_ZERO gives 0.5 where all scores are 0. onnxruntime
  picks binary labels before the transform (s > 0.5 or s > 0) and writes other columns.
- Regressors take onnxruntime's transforms (the reference has none): a single target takes only PROBIT.
  TreeEnsemble's `post_transform` follows the spec's numbering (1 SOFTMAX, 2 LOGISTIC); onnxruntime swaps them.
- Opsets 1 and 3 send a NaN to the false branch unless `nodes_missing_value_tracks_true`, for every mode (the
  reference; onnxruntime sends it true at NEQ); TreeEnsemble compares as IEEE (both agree): NaN != t holds.
- MIN and MAX start from the largest (least) finite value, as the reference does (onnxruntime: 0).
- TreeEnsemble: a root whose branches name one leaf is a tree of that leaf (the spec, onnxruntime; the reference
  reads another leaf); sets go to BRANCH_MEMBER nodes in `nodes_modes` order, 0.0 is a member (the reference's
  parser ends a set there), and membership is exact (onnxruntime truncates x for large sets of integers).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InputError, UnsupportedOpError
from ..ir.core import Builder, Value
from . import compose as C
from .onnx import handles

LEQ, LT, GTE, GT, EQ, NEQ, MEMBER = range(7)  # TreeEnsemble's numbering of the node modes
_LEGACY_MODES = {"BRANCH_LEQ": LEQ, "BRANCH_LT": LT, "BRANCH_GTE": GTE, "BRANCH_GT": GT, "BRANCH_EQ": EQ,
                 "BRANCH_NEQ": NEQ}
# Whether a mode's comparison holds for an x below, above and equal to the threshold.
_HOLDS = np.array([[1, 0, 1], [1, 0, 0], [0, 1, 1], [0, 1, 0], [0, 0, 1], [1, 1, 0]], dtype=bool)
AGGREGATES = ("AVERAGE", "SUM", "MIN", "MAX")  # TreeEnsemble's numbering
TRANSFORMS = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")  # TreeEnsemble's numbering


@dataclass
class _Trees:
    """Trees as the attributes give them, before packing. A reference to a node is its index among the interior
    nodes (>= 0) or ~j for leaf j (< 0)."""

    feature: np.ndarray  # [I] the feature each interior node reads
    mode: np.ndarray  # [I] LEQ .. MEMBER
    value: np.ndarray  # [I] the threshold, float64 (NaN allowed)
    members: dict  # interior node (MEMBER) -> its set's values, float64
    nan_true: np.ndarray  # [I] bool: a NaN x takes the true branch
    true_ref: np.ndarray  # [I]
    false_ref: np.ndarray  # [I]
    roots: np.ndarray  # [T] references
    n_leaves: int


@dataclass
class _Forest:
    """All trees packed for the walk: nodes numbered interior first, then the leaves."""

    feature: np.ndarray  # [nodes] int32
    threshold: np.ndarray  # [nodes] in the compute type
    successor: np.ndarray  # [nodes, 4] int32, by comparison code (NaN, below, above, equal)
    roots: np.ndarray  # [T] int32
    interior: int  # how many nodes are interior: leaf j is node interior + j
    steps: int  # the deepest path's interior nodes


# -- the walk ------------------------------------------------------------------------------------------------------

def _compute_input(n, what: str) -> tuple[Value, np.dtype]:
    """X as [N, F] (a single row [F] as [1, F], as the reference takes it) in the type the comparisons run in
    (f64 for double X, else f32), and that type."""
    x, b = n(0), n.b
    dt = x.type.dtype
    if x.type.rank not in (1, 2):
        raise UnsupportedOpError(f"{what}'s X is {x.type}; it must be [N, F] or [F]")
    if not isinstance(x.type.shape[-1], int):
        raise UnsupportedOpError(f"{what}'s X {x.type} has its features' count {x.type.shape[-1]} known only at "
                                 "run time", hint="export with a static feature count (or pass input_shapes=)")
    if not (dt.is_float or (dt.is_integer and dt.kind != "bool")):
        raise UnsupportedOpError(f"{what}'s X is {x.type}: float, double, int32 or int64 are defined")
    compute = np.dtype(np.float64) if dt.name == "f64" else np.dtype(np.float32)
    if x.type.rank == 1:
        x = b.op("rt.reshape", [x], {"shape": (1, x.type.shape[0])})
    if dt.np_dtype != compute:
        x = b.op("rt.cast", [x], {"dtype": "f64" if compute == np.float64 else "f32"})
    return x, compute


def _thresholds(values: np.ndarray, compute: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """Thresholds in the compute type, and where each is exact. An inexact one is the float just below the value:
    then x <= t' says x < value, x > t' says x > value, and no x equals the value."""
    if compute == np.float64:
        return values.astype(np.float64), np.ones(values.shape, dtype=bool)
    with np.errstate(over="ignore", invalid="ignore"):
        near = values.astype(np.float32)
        wide = near.astype(np.float64)
    exact = wide == values
    below = np.where(wide > values, np.nextafter(near, np.float32(-np.inf)), near)
    return below.astype(np.float32), exact


def _pack(trees: _Trees, compute: np.dtype, n_features: int, what: str) -> _Forest:
    count = len(trees.feature)
    if count and (trees.feature.min() < 0 or trees.feature.max() >= n_features):
        bad = int(trees.feature[(trees.feature < 0) | (trees.feature >= n_features)][0])
        raise InputError(f"{what} reads feature {bad}, but X has {n_features} features")
    for refs, name in ((trees.true_ref, "true"), (trees.false_ref, "false"), (trees.roots, "root")):
        if len(refs) and (refs.max() >= count or refs.min() < -trees.n_leaves):
            raise InputError(f"{what} names a {name} node or leaf that does not exist")
    true_ref, false_ref = trees.true_ref.astype(np.int64), trees.false_ref.astype(np.int64)
    value = trees.value.astype(np.float64)
    holds = _HOLDS[np.minimum(trees.mode, NEQ)]  # MEMBER rows are rewritten below
    threshold, exact = _thresholds(np.nan_to_num(value, nan=0.0), compute)
    unordered = np.isnan(value)  # every comparison with a NaN threshold is false but NEQ's
    equal = np.where(exact, holds[:, 2], holds[:, 0])  # x == t' < value means x < value
    never = np.where(unordered, trees.mode == NEQ, False)
    outcome = np.stack([np.where(unordered, never, holds[:, 0]), np.where(unordered, never, holds[:, 1]),
                        np.where(unordered, never, equal)], axis=1)
    routes = [np.where(trees.nan_true, true_ref, false_ref)] + [np.where(outcome[:, k], true_ref, false_ref)
                                                                 for k in range(3)]
    routes = np.stack(routes, axis=1)  # [I, 4] references, by code: NaN, below, above, equal
    feature = list(trees.feature.astype(np.int64))
    threshold, routes = list(threshold), list(routes)

    def slot() -> int:  # a new interior node, written later
        feature.append(0)
        threshold.append(0)
        routes.append(None)
        return len(feature) - 1

    for i, values in trees.members.items():  # a balanced search over the sorted members
        t_ref, f_ref = true_ref[i], false_ref[i]
        nan_ref = t_ref if trees.nan_true[i] else f_ref
        members = np.unique(values[~np.isnan(values)])
        if compute != np.float64:  # a member that X's type cannot hold is never met
            with np.errstate(over="ignore"):
                members = members[members.astype(np.float32).astype(np.float64) == members]
        if len(members) == 0:
            threshold[i], routes[i] = 0, (nan_ref, f_ref, f_ref, f_ref)
            continue
        pending = [(i, 0, len(members))]
        while pending:
            at, lo, hi = pending.pop()
            feature[at] = feature[i]
            if hi - lo == 1:  # x == m
                threshold[at], routes[at] = members[lo], (nan_ref, f_ref, f_ref, t_ref)
                continue
            mid = (lo + hi) // 2
            left, right = slot(), slot()
            threshold[at], routes[at] = members[mid - 1], (nan_ref, left, right, left)  # x <= m: the lower half
            pending += [(left, lo, mid), (right, mid, hi)]
    feature = np.array(feature, np.int64)
    threshold = np.array(threshold, np.float64).astype(compute)
    routes = np.array(routes, np.int64).reshape(-1, 4)
    interior = len(feature)
    steps = _deepest(routes, trees.roots, what)
    leaves = trees.n_leaves
    successor = np.where(routes < 0, interior + ~routes, routes)
    successor = np.concatenate([successor, np.repeat(np.arange(interior, interior + leaves)[:, None], 4, 1)])
    roots = np.where(trees.roots < 0, interior + ~trees.roots, trees.roots)
    nodes = interior + leaves
    if nodes * 4 >= 2**31:
        raise UnsupportedOpError(f"{what} has {nodes} nodes; more than 2^29 are not supported")
    return _Forest(np.concatenate([feature, np.zeros(leaves, np.int64)]).astype(np.int32),
                   np.concatenate([threshold.astype(compute), np.zeros(leaves, compute)]),
                   successor.astype(np.int32), roots.astype(np.int32), interior, steps)


def _deepest(routes: np.ndarray, roots: np.ndarray, what: str) -> int:
    """The most interior nodes on a path from a root to a leaf; a cycle is an error."""
    count = len(routes)
    kids = [sorted({int(c) for c in row if c >= 0}) for row in routes]
    state = np.zeros(count, np.int8)  # 0 unseen, 1 open (its subtree in progress), 2 done
    depth = np.zeros(count, np.int64)
    for root in roots:
        if root < 0 or state[root] == 2:
            continue
        stack = [int(root)]
        while stack:
            i = stack[-1]
            if state[i] == 0:
                state[i] = 1
                for c in kids[i]:
                    if state[c] == 1:  # an open node is an ancestor of every node above it on the stack
                        raise InputError(f"{what}'s nodes form a cycle (through interior node {c})")
                    if state[c] == 0:
                        stack.append(c)
                continue
            stack.pop()
            if state[i] == 1:
                depth[i] = 1 + max((depth[c] for c in kids[i]), default=0)
                state[i] = 2
    return int(max((depth[r] for r in roots if r >= 0), default=0))


def _walk(b: Builder, x: Value, forest: _Forest) -> Value:
    """Each row's leaf in each tree, as node numbers [N, T] (i32)."""
    rows, features = x.type.shape
    flat = b.op("rt.reshape", [x], {"shape": (rows * features,)})
    index = C.index_type(rows * features)
    trees = len(forest.roots)
    i32 = lambda a: b.constant(np.asarray(a, np.int32))  # noqa: E731

    def read(feature: Value) -> Value:  # x[row, feature] for each row: a fresh iota each time, so none is shared
        row = b.op("rt.iota", [], {"shape": (rows, 1), "axis": 0, "dtype": index})
        if features != 1:
            row = b.op("rt.mul", [row, b.constant(np.array(features, np.int32 if index == "i32" else np.int64))])
        if feature.type.dtype.name != index:
            feature = b.op("rt.cast", [feature], {"dtype": index})
        return b.op("rt.gather", [flat, b.op("rt.add", [row, feature])], {"axis": 0})

    def code(feature, threshold) -> Value:  # [x <= t] + 2 [x >= t], each side read afresh
        le = b.op("rt.cmp", [read(feature()), threshold()], {"predicate": "le"})
        ge = b.op("rt.cmp", [read(feature()), threshold()], {"predicate": "ge"})
        return b.op("rt.add", [b.op("rt.cast", [le], {"dtype": "i32"}),
                               b.op("rt.mul", [b.op("rt.cast", [ge], {"dtype": "i32"}), i32(2)])])

    if forest.steps == 0:
        return b.op("rt.broadcast", [i32(forest.roots[None, :])], {"shape": (rows, trees)})
    roots = forest.roots  # the first step's nodes are known: its tables are gathered here
    feature0, threshold0 = i32(forest.feature[roots][None, :]), b.constant(forest.threshold[roots][None, :])
    first = code(lambda: feature0, lambda: threshold0)
    node = b.op("rt.gather", [i32(forest.successor[roots].reshape(-1)),
                              b.op("rt.add", [i32(np.arange(trees)[None, :] * 4), first])], {"axis": 0})
    feature_table, threshold_table = i32(forest.feature), b.constant(forest.threshold)
    successor_table = i32(forest.successor.reshape(-1))
    for _ in range(forest.steps - 1):
        at = node
        step = code(lambda at=at: b.op("rt.gather", [feature_table, at], {"axis": 0}),
                    lambda at=at: b.op("rt.gather", [threshold_table, at], {"axis": 0}))
        node = b.op("rt.gather", [successor_table, b.op("rt.add", [b.op("rt.mul", [at, i32(4)]), step])],
                    {"axis": 0})
    return node


def _leaf_table(leaves: int, targets: int, leaf, target, weight, kind: str, compute: np.dtype) -> np.ndarray:
    """[leaves, targets]: each leaf's weights, combined as the aggregate combines them (a sum, or the least or
    greatest), and where a leaf gives a target nothing, what changes nothing (0, or the largest or least finite
    value, which is what MIN and MAX start from)."""
    big = float(np.finfo(compute).max)
    start = {"sum": 0.0, "min": big, "max": -big}[kind]
    table = np.full((leaves, targets), start, np.float64)
    combine = {"sum": np.add, "min": np.minimum, "max": np.maximum}[kind]
    combine.at(table, (np.asarray(leaf, np.int64), np.asarray(target, np.int64)), np.asarray(weight, np.float64))
    if kind == "min":  # an infinite weight meets the start as the reference's min(start, w) does
        table = np.minimum(table, big)
    elif kind == "max":
        table = np.maximum(table, -big)
    return table.astype(compute)


def _aggregate(b: Builder, node: Value, forest: _Forest, table: np.ndarray, kind: str) -> Value:
    """[N, targets]: the leaves' rows combined over the trees."""
    leaf = b.op("rt.sub", [node, b.constant(np.array(forest.interior, np.int32))])
    rows = b.op("rt.gather", [b.constant(table), leaf], {"axis": 0})  # [N, T, targets]
    return b.op("rt.reduce", [rows], {"kind": kind, "axes": (1,), "keepdims": False})


# -- post transforms -----------------------------------------------------------------------------------------------

def _logistic(b: Builder, s: Value) -> Value:
    """1 / (1 + exp(-|s|)), mirrored below 0, as both onnxruntime and the reference write it: far below 0, 1 - v
    is 0 where rt.sigmoid would keep a tiny probability."""
    one = C.scalar(b, 1, s)
    v = b.op("rt.div", [one, b.op("rt.add", [one, b.op("rt.exp", [b.op("rt.neg", [b.op("rt.abs", [s])])])])])
    negative = b.op("rt.cmp", [s, C.scalar(b, 0, s)], {"predicate": "lt"})
    return b.op("rt.select", [negative, b.op("rt.sub", [one, v]), v])


def _probit(b: Builder, s: Value, reference: bool) -> Value:
    """sqrt(2) erfinv(2s - 1) by the approximation both implement (Winitzki's, a = 0.147): the reference's
    constants, 0 where 1 - (2s - 1)^2 is 0; or onnxruntime's float constants (pi as 3.14159), no such case."""
    if reference:
        c1, c2 = np.float32(2.0 / (np.pi * 0.147)), np.float32(1.0 / 0.147)
    else:
        c1 = np.float32(2) / (np.float32(3.14159) * np.float32(0.147))
        c2 = np.float32(1) / np.float32(0.147)
    k = lambda v: C.scalar(b, v, s)  # noqa: E731
    x = b.op("rt.sub", [b.op("rt.mul", [s, k(2)]), k(1)])
    sign = b.op("rt.select", [b.op("rt.cmp", [x, k(0)], {"predicate": "lt"}), k(-1), k(1)])
    y = b.op("rt.mul", [b.op("rt.sub", [k(1), x]), b.op("rt.add", [k(1), x])])
    log = b.op("rt.log", [y])
    v = b.op("rt.add", [k(c1), b.op("rt.mul", [k(0.5), log])])
    v2 = b.op("rt.mul", [k(c2), log])
    v3 = b.op("rt.add", [b.op("rt.neg", [v]), b.op("rt.sqrt", [b.op("rt.sub", [b.op("rt.mul", [v, v]), v2])])])
    out = b.op("rt.mul", [k(1.41421356), b.op("rt.mul", [sign, b.op("rt.sqrt", [v3])])])
    if reference:
        out = b.op("rt.select", [b.op("rt.cmp", [y, k(0)], {"predicate": "eq"}), k(0), out])
    return out


def _softmax_zero(b: Builder, s: Value, reference: bool) -> Value:
    """A softmax over the last axis that leaves (near) zeros at zero: those are scaled by exp(-max) instead. The
    reference sums them too and gives 0.5 where the sum is 0; onnxruntime sums the others only."""
    peak = b.op("rt.reduce", [s], {"kind": "max", "axes": (1,), "keepdims": True})
    scaled = b.op("rt.mul", [s, b.op("rt.exp", [b.op("rt.neg", [peak])])])
    eps = C.scalar(b, 1e-7, s)
    away = b.op("rt.or", [b.op("rt.cmp", [s, eps], {"predicate": "gt"}),
                          b.op("rt.cmp", [s, b.op("rt.neg", [eps])], {"predicate": "lt"})])
    e = b.op("rt.exp", [b.op("rt.sub", [s, peak])])
    values = b.op("rt.select", [away, e, scaled])
    if reference:
        total = b.op("rt.reduce", [values], {"kind": "sum", "axes": (1,), "keepdims": True})
        zero = b.op("rt.cmp", [total, C.scalar(b, 0, s)], {"predicate": "eq"})
        return b.op("rt.select", [zero, C.scalar(b, 0.5, s), b.op("rt.div", [values, total])])
    counted = b.op("rt.select", [away, e, C.scalar(b, 0, s)])
    total = b.op("rt.reduce", [counted], {"kind": "sum", "axes": (1,), "keepdims": True})
    return b.op("rt.div", [values, total])


def post_transform(b: Builder, s: Value, name: str, reference: bool = False) -> Value:
    """The ML ops' `post_transform` over scores [N, K]: onnxruntime's, or with `reference` onnx's reference's (the
    tree classifier's; they differ in SOFTMAX_ZERO and PROBIT). onnx_ml.py's ops take onnxruntime's."""
    if name == "NONE":
        return s
    if name == "LOGISTIC":
        return _logistic(b, s)
    if name == "SOFTMAX":
        return C.softmax(b, s, axis=1)
    if name == "SOFTMAX_ZERO":
        return _softmax_zero(b, s, reference)
    return _probit(b, s, reference)


def _regression_transform(b: Builder, s: Value, name: str) -> Value:
    """onnxruntime's: with one target, only PROBIT applies (it leaves the others' single score as it is)."""
    if s.type.shape[1] == 1 and name != "PROBIT":
        return s
    return post_transform(b, s, name, reference=False)


def _named(value, names: tuple, what: str) -> str:
    name = value.decode() if isinstance(value, bytes) else value
    if isinstance(name, int):
        if not 0 <= name < len(names):
            raise InputError(f"{what} {name} is not one of 0..{len(names) - 1}")
        return names[name]
    if name not in names:
        raise InputError(f"{what} '{name}' is not one of {', '.join(names)}")
    return name


# -- ai.onnx.ml opsets 1 and 3 -------------------------------------------------------------------------------------

def _floats(n, name: str, default=None) -> np.ndarray | None:
    """A float attribute, its `_as_tensor` (double) form first."""
    tensor = n.attr(name + "_as_tensor")
    if tensor is not None:
        return np.asarray(tensor, np.float64).reshape(-1)
    values = n.attr(name)
    return default if values is None else np.asarray(values, np.float64).reshape(-1)


def _legacy_trees(n, what: str, entries: str) -> tuple[_Trees, np.ndarray, int]:
    """The trees of TreeEnsembleRegressor/Classifier's `nodes_*`, and their leaves' weights
    (leaf, target or class, weight) from `target_*` or `class_*`; and the number of trees."""
    tree_ids = np.asarray(n.attr("nodes_treeids", []), np.int64)
    node_ids = np.asarray(n.attr("nodes_nodeids", []), np.int64)
    count = len(tree_ids)
    if count == 0:
        raise InputError(f"{what} has no nodes")
    modes = list(n.attr("nodes_modes", []))

    def ints(name, default=0):
        values = n.attr(name)
        array = np.full(count, default, np.int64) if values is None else np.asarray(values, np.int64)
        if len(array) != count:
            raise InputError(f"{what}'s {name} has {len(array)} entries for {count} nodes")
        return array

    if len(modes) != count or len(node_ids) != count:
        raise InputError(f"{what}'s nodes_modes, nodes_nodeids and nodes_treeids differ in length")
    unknown = sorted({m for m in modes if m != "LEAF" and m not in _LEGACY_MODES})
    if unknown:
        raise UnsupportedOpError(f"{what} has node mode {unknown[0]}",
                                 hint="defined: " + ", ".join([*_LEGACY_MODES, "LEAF"]))
    feature, true_ids, false_ids = ints("nodes_featureids"), ints("nodes_truenodeids"), ints("nodes_falsenodeids")
    missing = ints("nodes_missing_value_tracks_true")
    values = _floats(n, "nodes_values", np.zeros(count))
    if len(values) != count:
        raise InputError(f"{what}'s nodes_values has {len(values)} entries for {count} nodes")
    position = {}
    for i, key in enumerate(zip(tree_ids.tolist(), node_ids.tolist(), strict=True)):
        if key in position:
            raise InputError(f"{what} defines node {key[1]} of tree {key[0]} twice")
        position[key] = i
    leaf = np.array([m == "LEAF" for m in modes])
    ref = np.zeros(count, np.int64)  # legacy position -> reference
    ref[~leaf] = np.arange(int((~leaf).sum()))
    ref[leaf] = ~np.arange(int(leaf.sum()))

    def child(ids):
        out = []
        for i in np.flatnonzero(~leaf):
            key = (int(tree_ids[i]), int(ids[i]))
            if key not in position:
                raise InputError(f"{what}'s node {node_ids[i]} of tree {tree_ids[i]} branches to node {ids[i]}, "
                                 "which that tree does not define")
            out.append(ref[position[key]])
        return np.array(out, np.int64)

    trees = sorted(set(tree_ids.tolist()))
    first = {}
    for i, t in enumerate(tree_ids.tolist()):
        first.setdefault(t, i)  # a tree's root is its first node, as the reference takes it
    inner = ~leaf
    forest = _Trees(feature[inner], np.array([_LEGACY_MODES.get(m, 0) for m in modes])[inner], values[inner], {},
                    missing[inner] >= 1, child(true_ids), child(false_ids),
                    np.array([ref[first[t]] for t in trees], np.int64), int(leaf.sum()))
    e_trees = np.asarray(n.attr(f"{entries}_treeids", []), np.int64)
    e_nodes = np.asarray(n.attr(f"{entries}_nodeids", []), np.int64)
    e_ids = np.asarray(n.attr(f"{entries}_ids", []), np.int64)
    e_weights = _floats(n, f"{entries}_weights", np.zeros(0))
    if not len(e_trees) == len(e_nodes) == len(e_ids) == len(e_weights):
        raise InputError(f"{what}'s {entries}_treeids, _nodeids, _ids and _weights differ in length")
    rows = []
    for t, nd, k, w in zip(e_trees.tolist(), e_nodes.tolist(), e_ids.tolist(), e_weights.tolist(), strict=True):
        if (t, nd) not in position:
            raise InputError(f"{what} gives a weight to node {nd} of tree {t}, which is not defined")
        r = ref[position[(t, nd)]]
        if r < 0:  # a weight on an interior node is never reached
            rows.append((~r, k, w))
    weights = np.array(rows, np.float64).reshape(-1, 3)
    return forest, weights, len(trees)


@handles("ai.onnx.ml.TreeEnsembleRegressor")
def _tree_ensemble_regressor(n):
    what = "TreeEnsembleRegressor"
    b = n.b
    x, compute = _compute_input(n, what)
    trees, weights, tree_count = _legacy_trees(n, what, "target")
    targets = int(n.attr("n_targets", 1))
    aggregate = _named(n.attr("aggregate_function", "SUM"), AGGREGATES, "aggregate_function")
    transform = _named(n.attr("post_transform", "NONE"), TRANSFORMS, "post_transform")
    _check_targets(weights[:, 1], targets, what, "target_ids")
    forest = _pack(trees, compute, x.type.shape[1], what)
    kind = {"AVERAGE": "sum", "SUM": "sum", "MIN": "min", "MAX": "max"}[aggregate]
    table = _leaf_table(trees.n_leaves, targets, weights[:, 0], weights[:, 1], weights[:, 2], kind, compute)
    y = _aggregate(b, _walk(b, x, forest), forest, table, kind)
    if aggregate == "AVERAGE":
        y = b.op("rt.div", [y, b.constant(np.array(tree_count, compute))])
    base = _floats(n, "base_values")
    if base is not None and len(base):
        y = b.op("rt.add", [y, b.constant(_base(base, targets, what).astype(compute))])
    if compute != np.float32:
        y = b.op("rt.cast", [y], {"dtype": "f32"})
    return _regression_transform(b, y, transform)


def _check_targets(ids, count: int, what: str, name: str) -> None:
    if count < 1:
        raise InputError(f"{what} has {count} targets")
    bad = [int(i) for i in ids if not 0 <= i < count]
    if bad:
        raise InputError(f"{what}'s {name} holds {bad[0]}, outside 0..{count - 1}")


def _base(base: np.ndarray, count: int, what: str) -> np.ndarray:
    if len(base) not in (1, count):
        raise InputError(f"{what} has {len(base)} base_values for {count} outputs")
    return base.reshape(1, -1)


@handles("ai.onnx.ml.TreeEnsembleClassifier")
def _tree_ensemble_classifier(n):
    what = "TreeEnsembleClassifier"
    b = n.b
    int_labels, str_labels = n.attr("classlabels_int64s"), n.attr("classlabels_strings")
    if str_labels is not None and n.wants(0):
        raise UnsupportedOpError(f"{what} with classlabels_strings: labels of strings are not numbers, and the graph "
                                 "IR holds tensors of numbers only",
                                 hint="convert the model with integer class labels (skl2onnx and onnxmltools write "
                                      "classlabels_int64s for integer targets), or leave the label output unused")
    labels = list(int_labels if int_labels is not None else str_labels or [])
    classes = len(labels)
    if classes == 0:
        raise InputError(f"{what} has no class labels")
    if int_labels is not None and classes == 1 and labels[0] != 1:
        raise UnsupportedOpError(f"{what} with the single class label {labels[0]}",
                                 hint="onnx's reference defines only a single label 1 (a binary classifier)")
    x, compute = _compute_input(n, what)
    trees, weights, _ = _legacy_trees(n, what, "class")
    _check_targets(weights[:, 1], classes, what, "class_ids")
    transform = _named(n.attr("post_transform", "NONE"), TRANSFORMS, "post_transform")
    forest = _pack(trees, compute, x.type.shape[1], what)
    table = _leaf_table(trees.n_leaves, classes, weights[:, 0], weights[:, 1], weights[:, 2], "sum", compute)
    scores = _aggregate(b, _walk(b, x, forest), forest, table, "sum")
    if compute != np.float32:
        scores = b.op("rt.cast", [scores], {"dtype": "f32"})
    base = _floats(n, "base_values")
    if base is not None and len(base):
        scores = b.op("rt.add", [scores, b.constant(_base(base, classes, what).astype(np.float32))])
    if len(set(np.asarray(n.attr("class_ids", []), np.int64).tolist())) == 1:  # binary: as the reference
        positive = C.slice_axis(b, scores, 1, 0, 1)
        negative = b.op("rt.neg", [positive]) if transform not in ("NONE", "PROBIT") else \
            b.op("rt.sub", [C.scalar(b, 1, positive), positive])
        scores = b.op("rt.concat", [negative, positive] + ([C.slice_axis(b, scores, 1, 2, classes)]
                                                            if classes > 2 else []), {"axis": 1})
    scores = post_transform(b, scores, transform, reference=True)
    label = None
    if n.wants(0):
        table = np.array([0, 1] if classes == 1 else labels, np.int64)
        label = b.op("rt.gather", [b.constant(table), b.op("rt.argmax", [scores], {"axis": 1})], {"axis": 0})
    return [label, scores]


# -- ai.onnx.ml opset 5 --------------------------------------------------------------------------------------------

@handles("ai.onnx.ml.TreeEnsemble")
def _tree_ensemble(n):
    what = "TreeEnsemble"
    b = n.b
    dtype = n(0).type.dtype
    if dtype.name not in ("f32", "f64", "f16"):
        raise UnsupportedOpError(f"{what}'s X is {n(0).type}: float, double and float16 are defined")
    x, compute = _compute_input(n, what)
    modes = np.asarray(n.attr("nodes_modes", np.zeros(0)), np.int64).reshape(-1)
    count = len(modes)

    def ints(name, default=None, size=count):
        values = n.attr(name)
        if values is None:
            if default is None:
                raise InputError(f"{what} has no {name}")
            return np.full(size, default, np.int64)
        array = np.asarray(values, np.int64).reshape(-1)
        if len(array) != size:
            raise InputError(f"{what}'s {name} has {len(array)} entries for {size}")
        return array

    splits = np.asarray(n.attr("nodes_splits", np.zeros(count)), np.float64).reshape(-1)
    weights = np.asarray(n.attr("leaf_weights", np.zeros(0)), np.float64).reshape(-1)
    leaves = len(weights)
    if len(splits) != count:
        raise InputError(f"{what}'s nodes_splits has {len(splits)} entries for {count} nodes")
    if len(modes) and (modes.min() < 0 or modes.max() > MEMBER):
        raise UnsupportedOpError(f"{what} has node mode {int(modes[(modes < 0) | (modes > MEMBER)][0])}",
                                 hint="defined: 0 (BRANCH_LEQ) to 6 (BRANCH_MEMBER)")
    targets = int(n.attr("n_targets", 1))
    leaf_targets = ints("leaf_targetids", size=leaves)
    _check_targets(leaf_targets, targets, what, "leaf_targetids")
    true_leaf, false_leaf = ints("nodes_trueleafs") != 0, ints("nodes_falseleafs") != 0
    true_ids, false_ids = ints("nodes_truenodeids"), ints("nodes_falsenodeids")
    missing = ints("nodes_missing_value_tracks_true", 0) != 0
    roots = np.asarray(n.attr("tree_roots", []), np.int64).reshape(-1)
    if len(roots) == 0:
        raise InputError(f"{what} has no tree_roots")
    members = {}
    member_nodes = np.flatnonzero(modes == MEMBER)
    if len(member_nodes):
        values = np.asarray(n.attr("membership_values", np.zeros(0)), np.float64).reshape(-1)
        cuts = np.flatnonzero(np.isnan(values))
        sets = [s[~np.isnan(s)] for s in np.split(values, cuts)]  # a set after the first starts with a NaN
        if len(values) == 0 or np.isnan(values[-1]):
            sets = sets[:-1]  # the last delimiter ends a set (it may be left out)
        if len(sets) < len(member_nodes):
            raise InputError(f"{what} has {len(member_nodes)} BRANCH_MEMBER nodes but {len(sets)} sets of "
                             "membership_values (delimited by NaN)")
        members = {int(i): s for i, s in zip(member_nodes, sets, strict=False)}
    trees = _Trees(ints("nodes_featureids"), modes, splits, members, missing | (modes == NEQ),
                   np.where(true_leaf, ~true_ids, true_ids), np.where(false_leaf, ~false_ids, false_ids),
                   roots, leaves)
    if len(roots) and (roots.min() < 0 or roots.max() >= count):
        raise InputError(f"{what}'s tree_roots name nodes outside 0..{count - 1}")
    for ids, leaf in ((true_ids, true_leaf), (false_ids, false_leaf)):
        if ((ids < 0) | np.where(leaf, ids >= leaves, ids >= count)).any():
            raise InputError(f"{what} branches to a node or leaf that does not exist")
    aggregate = _named(int(n.attr("aggregate_function", 1)), AGGREGATES, "aggregate_function")
    transform = _named(int(n.attr("post_transform", 0)), TRANSFORMS, "post_transform")
    forest = _pack(trees, compute, x.type.shape[1], what)
    kind = {"AVERAGE": "sum", "SUM": "sum", "MIN": "min", "MAX": "max"}[aggregate]
    if kind != "sum":  # the reference starts MIN and MAX from X's type's largest finite value
        compute_table = np.dtype(dtype.np_dtype) if dtype.name == "f16" else compute
        table = _leaf_table(leaves, targets, np.arange(leaves), leaf_targets, weights, kind, compute_table)
        table = table.astype(compute)
    else:
        table = _leaf_table(leaves, targets, np.arange(leaves), leaf_targets, weights, kind, compute)
    y = _aggregate(b, _walk(b, x, forest), forest, table, kind)
    if aggregate == "AVERAGE":
        y = b.op("rt.div", [y, b.constant(np.array(len(roots), compute))])
    y = _regression_transform(b, y, transform)
    if y.type.dtype.name != dtype.name:
        y = b.op("rt.cast", [y], {"dtype": dtype.name})
    return y

