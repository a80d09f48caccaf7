"""ONNX's ai.onnx.ml domain, as scikit-learn's converters (skl2onnx, onnxmltools) write it: the ops over tensors of
numbers. They register as "ai.onnx.ml.OpType". String labels and categories, maps and sequences (ZipMap,
DictVectorizer, CategoryMapper, LabelEncoder of strings) are refused: the graph IR holds tensors of numbers only.

- Scaler, Normalizer (MAX: by the row's signed max, as the spec and onnxruntime say, a row of max 0 kept; L1, L2:
  divided by max(norm, 1e-30)),
  Binarizer, Imputer (a value or NaN replaced, per feature), ArrayFeatureExtractor (a 1-D input as one row, as
  onnxruntime does), FeatureVectorizer, OneHotEncoder of integer categories (`zeros=0`'s check of unknown values is
  left out: no run-time error in a compiled module; they encode as all zeros), LabelEncoder of numbers.
- LinearRegressor and LinearClassifier (integer class labels): one matrix product; labels and the binary case's
  scores as onnxruntime gives them, where onnx's reference differs (`_linear_classifier`).
- SVMRegressor (every kernel: LINEAR, POLY, RBF, SIGMOID; `one_class` too) and SVMClassifier (libsvm's one-vs-one
  votes; without probabilities: `prob_a` is refused).
- `post_transform` NONE, LOGISTIC, SOFTMAX, SOFTMAX_ZERO and PROBIT as onnxruntime computes them
  (`onnx_ml_trees.post_transform`, which the tree ensembles share): PROBIT is its approximation of erfinv
  (Winitzki's, a = 0.147), not the exact function, so that scores agree with its.
"""

from __future__ import annotations

import numpy as np

from ..errors import UnsupportedOpError
from ..ir.core import Builder, Value
from . import compose as C
from .onnx import REFUSAL_HINTS, handles
from .onnx_ml_trees import post_transform  # the tree ensembles register themselves too

_NUMBERS_ONLY = "the graph IR holds tensors of numbers only"
REFUSAL_HINTS.update({
    "ai.onnx.ml.ZipMap": f"ZipMap makes a sequence of maps, and {_NUMBERS_ONLY}: convert without it (skl2onnx: "
                         "to_onnx(model, X, options={'zipmap': False})) and read the probabilities as a tensor",
    "ai.onnx.ml.DictVectorizer": f"DictVectorizer reads maps, and {_NUMBERS_ONLY}: vectorize outside the model",
    "ai.onnx.ml.CategoryMapper": f"CategoryMapper maps strings, and {_NUMBERS_ONLY}: map them outside the model",
})


def _floats(n, x: Value) -> Value:
    """The input as f32: the ML ops compute in float whatever the input's number type (f64 kept)."""
    return x if x.type.dtype.name in ("f32", "f64") else n.b.op("rt.cast", [x], {"dtype": "f32"})


def _row_constant(b: Builder, values, like: Value) -> Value:
    """`values` (one per feature, or one for all) laid along the last axis of `like`."""
    values = np.asarray(values, dtype=like.type.dtype.np_dtype).reshape(-1)
    return b.constant(values if values.size > 1 else values.reshape(()))


def _no_strings(n, *names):
    for name in names:
        if n.attr(name):
            raise UnsupportedOpError(f"ai.onnx.ml.{n.node.op_type} with '{name}': labels or categories of strings "
                                     "are not supported (the graph IR holds numbers only)",
                                     hint="convert with integer labels (e.g. skl2onnx's options or a LabelEncoder "
                                          "applied outside the model)")


@handles("ai.onnx.ml.Scaler")
def _scaler(n):
    x = _floats(n, n(0))
    shifted = n.b.op("rt.sub", [x, _row_constant(n.b, n.attr("offset", [0.0]), x)])
    return n.b.op("rt.mul", [shifted, _row_constant(n.b, n.attr("scale", [1.0]), x)])


@handles("ai.onnx.ml.Normalizer")
def _normalizer(n):
    x = _floats(n, n(0))
    if x.type.rank != 2:
        raise UnsupportedOpError(f"Normalizer of a rank-{x.type.rank} input (2-D, [N, C], is)")
    norm = n.attr("norm", "MAX")
    if norm == "MAX":  # the spec's and onnxruntime's signed max (onnx's reference takes |x|'s); a row of max 0 kept
        top = n.b.op("rt.reduce", [x], {"kind": "max", "axes": (1,), "keepdims": True})
        zero = n.b.op("rt.broadcast", [n.b.op("rt.cmp", [top, C.scalar(n.b, 0.0, top)], {"predicate": "eq"})],
                      {"shape": x.type.shape})
        return n.b.op("rt.select", [zero, x, n.b.op("rt.div", [x, top])])
    if norm == "L1":
        size = n.b.op("rt.reduce", [n.b.op("rt.abs", [x])], {"kind": "sum", "axes": (1,), "keepdims": True})
    elif norm == "L2":
        squares = n.b.op("rt.reduce", [n.b.op("rt.mul", [x, x])], {"kind": "sum", "axes": (1,), "keepdims": True})
        size = n.b.op("rt.sqrt", [squares])
    else:
        raise UnsupportedOpError(f"Normalizer's norm '{norm}' (MAX, L1 and L2 are)")
    return n.b.op("rt.div", [x, n.b.op("rt.max", [size, C.scalar(n.b, 1e-30, x)])])


@handles("ai.onnx.ml.Binarizer")
def _binarizer(n):
    x = n(0)
    above = n.b.op("rt.cmp", [x, C.scalar(n.b, n.attr("threshold", 0.0), x)], {"predicate": "gt"})
    return n.b.op("rt.cast", [above], {"dtype": x.type.dtype.name})


@handles("ai.onnx.ml.Imputer")
def _imputer(n):
    x = n(0)
    floats = n.attr("imputed_value_floats")
    values, replaced = (floats, n.attr("replaced_value_float", 0.0)) if floats else \
        (n.attr("imputed_value_int64s"), n.attr("replaced_value_int64", 0))
    if not values:
        raise UnsupportedOpError("Imputer without imputed_value_floats or imputed_value_int64s")
    if isinstance(replaced, float) and np.isnan(replaced):
        hit = n.b.op("rt.cmp", [x, x], {"predicate": "ne"})  # NaN is the one value unequal to itself
    else:
        hit = n.b.op("rt.cmp", [x, C.scalar(n.b, replaced, x)], {"predicate": "eq"})
    fill = n.b.op("rt.broadcast", [_row_constant(n.b, values, x)], {"shape": x.type.shape})
    return n.b.op("rt.select", [hit, fill, x])


@handles("ai.onnx.ml.ArrayFeatureExtractor")
def _array_feature_extractor(n):
    """x's last axis at the indices (known, or given at run time; negative from the end)."""
    x = n(0)
    if x.type.rank == 1:  # a vector is one row (onnxruntime's behaviour, which the reference follows)
        x = n.b.op("rt.reshape", [x], {"shape": (1, x.type.shape[0])})
    size, axis = x.type.shape[-1], x.type.rank - 1
    known = n.known_if_so(1)
    if known is not None:
        indices = np.asarray(known).reshape(-1).astype(np.int64)
        if isinstance(size, int) and ((indices < -size) | (indices >= size)).any():
            raise UnsupportedOpError(f"ArrayFeatureExtractor's indices {indices.tolist()} reach past {size} features")
        index = n.b.constant(indices % size if isinstance(size, int) else indices)
    else:
        index = n(1)
        index = n.b.op("rt.reshape", [index], {"shape": (index.type.num_elements,)})
        negative = n.b.op("rt.cmp", [index, C.scalar(n.b, 0, index)], {"predicate": "lt"})
        index = n.b.op("rt.select", [negative, n.b.op("rt.add", [index, C.scalar(n.b, size, index)]), index])
    return n.b.op("rt.gather", [x, index], {"axis": axis})


@handles("ai.onnx.ml.FeatureVectorizer")
def _feature_vectorizer(n):
    """Each input's first `inputdimensions[i]` columns (zero-padded where it has fewer), side by side, as f32."""
    widths = n.attr("inputdimensions") or []
    parts = []
    for i, x in enumerate(n.inputs()):
        x = _floats(n, x)
        if x.type.rank == 1:
            x = n.b.op("rt.reshape", [x], {"shape": (1, x.type.shape[0])})
        have, want = x.type.shape[-1], widths[i] if i < len(widths) else x.type.shape[-1]
        if have > want:
            x = n.b.op("rt.slice", [x], {"start": (0,) * x.type.rank, "limit": (*x.type.shape[:-1], want),
                                         "stride": (1,) * x.type.rank})
        elif have < want:
            x = n.b.op("rt.pad", [x], {"low": (0,) * x.type.rank, "high": (0,) * (x.type.rank - 1) + (want - have,),
                                       "value": 0.0})
        parts.append(n.b.op("rt.cast", [x], {"dtype": "f32"}) if x.type.dtype.name != "f32" else x)
    return parts[0] if len(parts) == 1 else n.b.op("rt.concat", parts, {"axis": parts[0].type.rank - 1})


@handles("ai.onnx.ml.LabelEncoder")
def _label_encoder(n):
    """Numbers to numbers (keys_floats/int64s/tensor to values_floats/int64s/tensor): each element's value, or the
    default where no key equals it (NaN never does); a repeated key maps as its last entry, as a dict would."""
    _no_strings(n, "keys_strings", "values_strings")
    keys = next((np.asarray(n.attr(k)) for k in ("keys_floats", "keys_int64s", "keys_tensor")
                 if n.attr(k) is not None and np.asarray(n.attr(k)).size), None)
    for name, kind, default in (("values_floats", np.float32, n.attr("default_float", -0.0)),
                                ("values_int64s", np.int64, n.attr("default_int64", -1)),
                                ("values_tensor", None, n.attr("default_tensor"))):
        values = n.attr(name)
        if values is not None and np.asarray(values).size:
            values = np.asarray(values, dtype=kind)
            if kind is None:  # a tensor: its own type, and the default a tensor of it
                default = np.asarray(default if default is not None else 0, values.dtype).reshape(-1)[0]
            break
    else:
        values = None
    if keys is None or values is None or keys.size != values.size:
        raise UnsupportedOpError("LabelEncoder needs numeric keys and values of one length")
    x = n(0)
    classes = dict(zip(keys.reshape(-1).tolist(), values.reshape(-1).tolist()))
    table = n.b.constant(np.asarray(list(classes), dtype=x.type.dtype.np_dtype))
    mapped = np.asarray(list(classes.values()), dtype=values.dtype)
    hits = n.b.op("rt.cmp", [n.b.op("rt.reshape", [x], {"shape": (*x.type.shape, 1)}), table], {"predicate": "eq"})
    last = x.type.rank
    found = n.b.op("rt.reduce", [hits], {"kind": "or", "axes": (last,)})
    which = n.b.op("rt.argmax", [n.b.op("rt.cast", [hits], {"dtype": "i32"})], {"axis": last})
    value = n.b.op("rt.gather", [n.b.constant(mapped), which], {"axis": 0})
    return n.b.op("rt.select", [found, value, n.b.constant(np.asarray(default, dtype=mapped.dtype))])


@handles("ai.onnx.ml.OneHotEncoder")
def _one_hot_encoder(n):
    _no_strings(n, "cats_strings")
    categories = n.attr("cats_int64s")
    if not categories:
        raise UnsupportedOpError("OneHotEncoder without cats_int64s")
    x = n(0)
    values = n.b.op("rt.reshape", [x], {"shape": (*x.type.shape, 1)})
    cats = n.b.constant(np.asarray(categories, dtype=x.type.dtype.np_dtype) if x.type.dtype.is_integer
                        else np.asarray(categories, dtype=np.float64).astype(x.type.dtype.np_dtype))
    hit = n.b.op("rt.cmp", [values, cats], {"predicate": "eq"})
    return n.b.op("rt.cast", [hit], {"dtype": "f32"})


def _linear(n, x: Value, coefficients, intercepts, rows: int) -> Value:
    """x [N, C] times the `rows` x C coefficients, transposed, plus the intercepts: [N, rows]."""
    if x.type.rank == 1:
        x = n.b.op("rt.reshape", [x], {"shape": (1, x.type.shape[0])})
    dtype = x.type.dtype.np_dtype
    weights = np.asarray(coefficients, dtype=np.float64).reshape(rows, -1).T.astype(dtype)
    if weights.shape[0] != x.type.shape[1]:
        raise UnsupportedOpError(f"{len(coefficients)} coefficients for {rows} rows of {x.type.shape[1]} features")
    y = n.b.op("rt.matmul", [x, n.b.constant(np.ascontiguousarray(weights))])
    if intercepts:
        y = n.b.op("rt.add", [y, n.b.constant(np.asarray(intercepts, dtype=np.float64).astype(dtype))])
    return y


@handles("ai.onnx.ml.LinearRegressor")
def _linear_regressor(n):
    targets = n.attr("targets", 1)
    y = _linear(n, _floats(n, n(0)), n.attr("coefficients"), n.attr("intercepts"), targets)
    return post_transform(n.b, y, n.attr("post_transform", "NONE"))


@handles("ai.onnx.ml.LinearClassifier")
def _linear_classifier(n):
    """Labels from the raw scores, as onnxruntime picks them (the argmax, or with one score column its sign), then
    the scores transformed. One coefficient row and two labels is a binary classifier, whose scores onnxruntime
    writes as [1 - s, s] ([sigmoid(-s), sigmoid(s)] for LOGISTIC; for PROBIT it writes undefined values, and onnx's
    reference's probit of [-s, s] is taken)."""
    _no_strings(n, "classlabels_strings")
    labels = n.attr("classlabels_ints") or []
    x = _floats(n, n(0))
    coefficients = n.attr("coefficients")
    rows = len(coefficients) // x.type.shape[-1]
    raw = _linear(n, x, coefficients, n.attr("intercepts"), rows)
    kind = n.attr("post_transform", "NONE")
    if rows == 1:  # the sign of the one score picks the second label (or 1), else the first (or 0)
        flat = n.b.op("rt.reshape", [raw], {"shape": (raw.type.shape[0],)})
        positive = n.b.op("rt.cmp", [flat, C.scalar(n.b, 0.0, flat)], {"predicate": "gt"})
        first, second = (labels[0], labels[1]) if len(labels) == 2 else (0, labels[0] if labels else 1)
        label = n.b.op("rt.select", [positive, n.b.constant(np.array(second, np.int64)),
                                     n.b.constant(np.array(first, np.int64))])
    else:
        best = n.b.op("rt.argmax", [raw], {"axis": 1})
        label = best if not labels else n.b.op("rt.gather", [n.b.constant(np.asarray(labels, np.int64)), best],
                                                {"axis": 0})
    if rows == 1 and len(labels) == 2:
        negated = n.b.op("rt.neg", [raw])
        if kind in ("LOGISTIC", "PROBIT"):
            return [label, post_transform(n.b, n.b.op("rt.concat", [negated, raw], {"axis": 1}), kind)]
        return [label, n.b.op("rt.concat", [n.b.op("rt.add", [negated, C.scalar(n.b, 1.0, raw)]), raw], {"axis": 1})]
    return [label, post_transform(n.b, raw, kind)]


@handles("ai.onnx.ml.SVMRegressor")
def _svm_regressor(n):
    """sum_j coefficients[j] K(x, sv_j) + rho (or, without support vectors, x . coefficients + rho); `one_class`
    gives the sign as +-1. K: LINEAR, POLY ((gamma x.sv + coef0)^degree), SIGMOID (tanh of that), RBF
    (exp(-gamma |x - sv|^2), the distance from one matrix product)."""
    x = _floats(n, n(0))
    if x.type.rank == 1:
        x = n.b.op("rt.reshape", [x], {"shape": (1, x.type.shape[0])})
    dtype = x.type.dtype.np_dtype
    coefficients = np.asarray(n.attr("coefficients"), dtype=np.float64)
    gamma, coef0, degree = (list(n.attr("kernel_params") or []) + [0.0, 0.0, 0.0])[:3]
    supports = n.attr("n_supports", 0)
    if supports:
        vectors = np.asarray(n.attr("support_vectors"), np.float64).reshape(supports, -1).astype(dtype)
        scores = _kernel(n.b, x, vectors, n.attr("kernel_type", "LINEAR"), gamma, coef0, int(degree))
        y = n.b.op("rt.matmul", [scores, n.b.constant(coefficients.reshape(-1, 1).astype(dtype))])
    else:
        y = n.b.op("rt.matmul", [x, n.b.constant(coefficients.reshape(-1, 1).astype(dtype))])
    y = n.b.op("rt.add", [y, C.scalar(n.b, float(n.attr("rho")[0]), y)])
    if n.attr("one_class", 0):
        positive = n.b.op("rt.cmp", [y, C.scalar(n.b, 0.0, y)], {"predicate": "gt"})
        y = n.b.op("rt.select", [positive, C.scalar(n.b, 1.0, y), C.scalar(n.b, -1.0, y)])
    return post_transform(n.b, y, n.attr("post_transform", "NONE"))


@handles("ai.onnx.ml.SVMClassifier")
def _svm_classifier(n):
    """libsvm's one-vs-one classifier, as onnxruntime and onnx's reference compute it (without probabilities): for
    each pair i < j of classes, s = rho + the class-i support vectors' kernels weighted by coefficients row j - 1 + the
    class-j ones' by row i (one matrix product with a [vectors, pairs] weight matrix); s > 0 votes for i, else j; the
    label is the first class with the most votes, the scores the pairs' s, transformed. Two classes, as onnxruntime:
    the vote's label; scores [-s, s] (NONE, LOGISTIC of that), [1 - s, s] (SOFTMAX, SOFTMAX_ZERO), PROBIT of s
    alone (onnx's reference differs: softmax of [-s, s], and the second label whenever every coefficient is >= 0).
    Without support vectors: scores rho[0] + x . coefficients[c], the label their argmax."""
    _no_strings(n, "classlabels_strings")
    if n.attr("prob_a"):
        raise UnsupportedOpError("SVMClassifier with probabilities (prob_a, prob_b: Platt scaling and pairwise "
                                 "coupling) is not supported", hint="convert the SVC without probability=True and "
                                 "read its decision scores")
    x = _floats(n, n(0))
    if x.type.rank == 1:
        x = n.b.op("rt.reshape", [x], {"shape": (1, x.type.shape[0])})
    dtype = x.type.dtype.np_dtype
    labels = list(n.attr("classlabels_ints") or [])
    classes = max(len(labels), 1)
    coefficients = np.asarray(n.attr("coefficients"), np.float64)
    rho = np.asarray(n.attr("rho"), np.float64)
    per_class = list(n.attr("vectors_per_class") or [])
    kind = n.attr("post_transform", "NONE")
    gamma, coef0, degree = (list(n.attr("kernel_params") or []) + [0.0, 0.0, 0.0])[:3]
    names = n.b.constant(np.asarray(labels or list(range(classes)), np.int64))
    if not sum(per_class):  # linear: one score a class, no votes
        scores = n.b.op("rt.matmul", [x, n.b.constant(np.ascontiguousarray(
            coefficients.reshape(classes, -1).T.astype(dtype)))])
        scores = n.b.op("rt.add", [scores, C.scalar(n.b, float(rho[0]), scores)])
        label = n.b.op("rt.gather", [names, n.b.op("rt.argmax", [scores], {"axis": 1})], {"axis": 0})
        return [label, post_transform(n.b, scores, kind)]
    vectors = np.asarray(n.attr("support_vectors"), np.float64).reshape(sum(per_class), -1).astype(dtype)
    kernels = _kernel(n.b, x, vectors, n.attr("kernel_type", "LINEAR"), gamma, coef0, int(degree))
    start = np.concatenate([[0], np.cumsum(per_class)])
    rows = coefficients.reshape(-1, sum(per_class))
    pairs = [(i, j) for i in range(classes) for j in range(i + 1, classes)]
    weights = np.zeros((sum(per_class), len(pairs)))
    wins, losses = np.zeros((len(pairs), classes)), np.zeros((len(pairs), classes))
    for p, (i, j) in enumerate(pairs):
        weights[start[i]:start[i + 1], p] = rows[j - 1, start[i]:start[i + 1]]
        weights[start[j]:start[j + 1], p] = rows[i, start[j]:start[j + 1]]
        wins[p, i] = losses[p, j] = 1
    scores = n.b.op("rt.add", [n.b.op("rt.matmul", [kernels, n.b.constant(weights.astype(dtype))]),
                               n.b.constant(rho[:len(pairs)].astype(dtype))])
    positive = n.b.op("rt.cast", [n.b.op("rt.cmp", [scores, C.scalar(n.b, 0.0, scores)], {"predicate": "gt"})],
                      {"dtype": x.type.dtype.name})
    negative = n.b.op("rt.sub", [C.scalar(n.b, 1.0, positive), positive])
    votes = n.b.op("rt.add", [n.b.op("rt.matmul", [positive, n.b.constant(wins.astype(dtype))]),
                              n.b.op("rt.matmul", [negative, n.b.constant(losses.astype(dtype))])])
    label = n.b.op("rt.gather", [names, n.b.op("rt.argmax", [votes], {"axis": 1})], {"axis": 0})
    if len(pairs) != 1 or kind == "PROBIT":
        return [label, post_transform(n.b, scores, kind)]
    if kind in ("SOFTMAX", "SOFTMAX_ZERO"):  # onnxruntime's: [1 - s, s], untransformed
        return [label, n.b.op("rt.concat", [n.b.op("rt.sub", [C.scalar(n.b, 1.0, scores), scores]), scores],
                              {"axis": 1})]
    return [label, post_transform(n.b, n.b.op("rt.concat", [n.b.op("rt.neg", [scores]), scores], {"axis": 1}), kind)]


def _kernel(b: Builder, x: Value, vectors: np.ndarray, kind: str, gamma, coef0, degree: int) -> Value:
    """K(x_i, sv_j) for every row and support vector: [N, S]."""
    dot = b.op("rt.matmul", [x, b.constant(np.ascontiguousarray(vectors.T))])
    if kind == "RBF":  # |x - sv|^2 = |x|^2 - 2 x.sv + |sv|^2: a matrix product, not [N, S, F] differences
        norms = b.op("rt.reduce", [b.op("rt.mul", [x, x])], {"kind": "sum", "axes": (1,), "keepdims": True})
        squares = b.op("rt.add", [b.op("rt.sub", [norms, b.op("rt.mul", [dot, C.scalar(b, 2.0, x)])]),
                                  b.constant((vectors.astype(np.float64) ** 2).sum(1).astype(vectors.dtype))])
        squares = b.op("rt.max", [squares, C.scalar(b, 0.0, x)])  # rounding may leave a tiny negative
        return b.op("rt.exp", [b.op("rt.mul", [squares, C.scalar(b, -gamma, x)])])
    if kind == "LINEAR":
        return dot
    affine = b.op("rt.add", [b.op("rt.mul", [dot, C.scalar(b, gamma, x)]), C.scalar(b, coef0, x)])
    if kind == "SIGMOID":
        return b.op("rt.tanh", [affine])
    if kind == "POLY":
        out = C.scalar(b, 1.0, x)
        for _ in range(degree):
            out = b.op("rt.mul", [out, affine])
        return out
    raise UnsupportedOpError(f"SVM kernel_type '{kind}' (LINEAR, POLY, RBF and SIGMOID are)")
