"""ONNX's ai.onnx.ml ops over numbers (`onnx_ml.py`): Scaler, Normalizer, Binarizer, Imputer, ArrayFeatureExtractor,
FeatureVectorizer, OneHotEncoder, LinearRegressor and LinearClassifier with every post_transform, as skl2onnx writes
them; each compiled for each importer target and compared with onnxruntime, which implements the domain. Labels of
strings are refused, saying why."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import helper  # noqa: E402
from retarget.errors import UnsupportedOpError  # noqa: E402
from retarget.importers.onnx import OnnxImporter  # noqa: E402
from retarget.testing.onnx_cases import (  # noqa: E402
    assert_same,
    compiled_outputs,
    graph_of,
    matches_reference,
    reference_outputs,
)
from retarget.testing.torch_cases import importer_targets  # noqa: E402

TARGETS = importer_targets()  # vmvx and llvm-cpu, or RETARGET_IMPORTER_TARGETS (GPUs too)
F32, I64 = np.float32, np.int64
rng = np.random.default_rng(0)


def ml_model(op, inputs: dict, outputs=("y",), constants=None, **attrs):
    node = helper.make_node(op, [*inputs, *(constants or {})], list(outputs), domain="ai.onnx.ml", **attrs)
    model = graph_of([node], inputs, list(outputs), constants, opset=17)
    model.opset_import.append(helper.make_opsetid("ai.onnx.ml", 3))
    return model


def matches_onnxruntime(model, target, inputs: dict, rtol=1e-5, atol=1e-6):
    matches_reference(model, target, inputs, rtol, atol, onnxruntime=True)


X = rng.standard_normal((6, 4)).astype(F32)
X[2] = 0  # a row whose norms are 0
X_NAN = X.copy()
X_NAN[[0, 3, 5], [1, 1, 2]] = np.nan

CASES = {  # name: (op, inputs, outputs, constants, attributes)
    "Scaler per feature": ("Scaler", {"x": X}, ("y",), None, {"offset": [0.5, -1, 2, 0], "scale": [2, 0.5, 1, 3]}),
    "Scaler of int64, one value": ("Scaler", {"x": rng.integers(-5, 5, (3, 4)).astype(I64)}, ("y",), None,
                                   {"offset": [1.5], "scale": [0.25]}),
    "Normalizer MAX": ("Normalizer", {"x": X}, ("y",), None, {"norm": "MAX"}),
    "Normalizer L1": ("Normalizer", {"x": X}, ("y",), None, {"norm": "L1"}),
    "Normalizer L2": ("Normalizer", {"x": X}, ("y",), None, {"norm": "L2"}),
    "Binarizer": ("Binarizer", {"x": X}, ("y",), None, {"threshold": 0.25}),
    "Imputer of NaN per feature": ("Imputer", {"x": X_NAN}, ("y",), None,
                                   {"imputed_value_floats": [1.0, 2.0, 3.0, 4.0], "replaced_value_float": np.nan}),
    "Imputer of a value": ("Imputer", {"x": np.where(X > 0.5, -1, X).astype(F32)}, ("y",), None,
                           {"imputed_value_floats": [9.0], "replaced_value_float": -1.0}),
    "ArrayFeatureExtractor of known indices": ("ArrayFeatureExtractor", {"x": X}, ("y",),
                                               {"i": np.array([3, 0, 3], I64)}, {}),
    "ArrayFeatureExtractor of run-time indices": ("ArrayFeatureExtractor", {"x": X, "i": np.array([2, 0, 2], I64)},
                                                  ("y",), None, {}),
    "FeatureVectorizer": ("FeatureVectorizer", {"a": X[:, :3].copy(), "b": X[:, 1:].copy()},
                          ("y",), None, {"inputdimensions": [3, 2]}),
    "OneHotEncoder of a matrix": ("OneHotEncoder", {"x": rng.integers(0, 6, (5, 3)).astype(I64)}, ("y",), None,
                                  {"cats_int64s": [1, 3, 4], "zeros": 1}),
    "LinearRegressor of two targets": ("LinearRegressor", {"x": X}, ("y",), None,
                                       {"coefficients": rng.standard_normal(8).tolist(), "intercepts": [0.5, -2.0],
                                        "targets": 2}),
}
for _kind in ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT"):
    CASES[f"LinearClassifier of 3 classes, {_kind}"] = (
        "LinearClassifier", {"x": X}, ("label", "scores"), None,
        {"coefficients": rng.standard_normal(12).tolist(), "intercepts": [0.1, -0.3, 0.0],
         "classlabels_ints": [3, 7, 11], "post_transform": _kind})
for _kind in ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"):  # onnxruntime's binary PROBIT is undefined
    CASES[f"LinearClassifier binary of one row, {_kind}"] = (
        "LinearClassifier", {"x": X}, ("label", "scores"), None,
        {"coefficients": rng.standard_normal(4).tolist(), "intercepts": [0.2], "classlabels_ints": [0, 1],
         "post_transform": _kind})

_SV = rng.standard_normal((5, 4))
for _kernel, _params in (("LINEAR", [0.0, 0.0, 0.0]), ("POLY", [0.3, 1.0, 3]), ("RBF", [0.4, 0, 0]),
                         ("SIGMOID", [0.2, -0.1, 0])):
    CASES[f"SVMRegressor {_kernel}"] = (
        "SVMRegressor", {"x": X}, ("y",), None,
        {"coefficients": rng.standard_normal(5).tolist(), "support_vectors": _SV.reshape(-1).tolist(),
         "n_supports": 5, "kernel_type": _kernel, "kernel_params": _params, "rho": [0.25]})
CASES["SVMRegressor one class, RBF"] = (
    "SVMRegressor", {"x": X}, ("y",), None,
    {"coefficients": rng.standard_normal(5).tolist(), "support_vectors": _SV.reshape(-1).tolist(), "n_supports": 5,
     "kernel_type": "RBF", "kernel_params": [0.4, 0, 0], "rho": [-0.1], "one_class": 1})
CASES["SVMRegressor without support vectors"] = (
    "SVMRegressor", {"x": X}, ("y",), None, {"coefficients": [0.5, -1.0, 2.0, 0.25], "rho": [1.5],
                                             "kernel_params": [0.0, 0.0, 0.0], "n_supports": 0})

for _classes, _per_class, _kernel, _kind in ((3, [2, 3, 2], "RBF", "NONE"), (4, [1, 2, 2, 1], "POLY", "SOFTMAX"),
                                             (3, [2, 1, 2], "LINEAR", "LOGISTIC"), (2, [3, 2], "RBF", "NONE"),
                                             (2, [2, 2], "SIGMOID", "LOGISTIC"), (2, [2, 3], "RBF", "SOFTMAX")):
    _count = sum(_per_class)
    CASES[f"SVMClassifier {_classes} classes, {_kernel}, {_kind}"] = (
        "SVMClassifier", {"x": X}, ("label", "scores"), None,
        {"kernel_type": _kernel, "kernel_params": [0.3, 0.1, 2], "vectors_per_class": _per_class,
         "support_vectors": rng.standard_normal(_count * 4).tolist(),
         "coefficients": rng.standard_normal((_classes - 1) * _count).tolist(),
         "rho": rng.standard_normal(_classes * (_classes - 1) // 2).tolist(),
         "classlabels_ints": [2, 5, 7, 9][:_classes], "post_transform": _kind})
CASES["LabelEncoder of int64s to floats, a default"] = (
    "LabelEncoder", {"x": np.array([[3, 7, 1], [9, 3, 7]], I64)}, ("y",), None,
    {"keys_int64s": [1, 3, 7], "values_floats": [0.5, -2.0, 4.0], "default_float": 9.5})
CASES["LabelEncoder of floats to int64s, NaN to the default"] = (
    "LabelEncoder", {"x": np.array([0.25, np.nan, 2.0, -1.0, 0.25], F32)}, ("y",), None,
    {"keys_floats": [0.25, 2.0, -1.0], "values_int64s": [10, 20, 30], "default_int64": -7})
CASES["SVMClassifier without support vectors (linear), 3 classes"] = (
    "SVMClassifier", {"x": X}, ("label", "scores"), None,
    {"kernel_type": "LINEAR", "kernel_params": [0.0, 0.0, 0], "coefficients": rng.standard_normal(12).tolist(),
     "rho": [0.2], "classlabels_ints": [1, 2, 3]})
CASES["SVMClassifier binary, every coefficient positive"] = (
    "SVMClassifier", {"x": X}, ("label", "scores"), None,
    {"kernel_type": "RBF", "kernel_params": [0.3, 0.0, 0], "vectors_per_class": [2, 2],
     "support_vectors": rng.standard_normal(16).tolist(), "coefficients": rng.random(4).tolist(), "rho": [-0.5],
     "classlabels_ints": [4, 8]})


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", CASES)
def test_ml_ops_match_onnxruntime(name, target):
    op, inputs, outputs, constants, attrs = CASES[name]
    # PROBIT's approximation subtracts two terms near 4.3 near p = 0.5: float rounding alone moves it ~1e-4
    rtol = 5e-4 if "PROBIT" in name else 1e-5
    matches_onnxruntime(ml_model(op, inputs, outputs, constants, **attrs), target, inputs, rtol=rtol)


def test_probit_scores_match_onnxruntime_in_the_tails():
    """PROBIT is Winitzki's approximation of erfinv, as onnxruntime's: scores from 1e-6 to 1 - 1e-6."""
    p = np.concatenate([np.geomspace(1e-6, 0.5, 40), 1 - np.geomspace(1e-6, 0.5, 40)]).astype(F32).reshape(-1, 1)
    model = ml_model("LinearRegressor", {"x": p}, coefficients=[1.0], intercepts=[0.0], post_transform="PROBIT")
    assert_same(compiled_outputs(model, "vmvx", p), reference_outputs(model, {"x": p}, onnxruntime=True),
                rtol=1e-5, atol=1e-6)


def test_string_labels_are_refused_saying_why():
    model = ml_model("LinearClassifier", {"x": X}, ("label", "scores"), coefficients=[1.0] * 8,
                     classlabels_strings=["a", "b"])
    with pytest.raises(UnsupportedOpError, match="labels or categories of strings are not supported"):
        OnnxImporter().load(model)


def test_an_unknown_op_of_the_ml_domain_names_the_domain_s_supported_ops():
    model = ml_model("SVMClassifierV9", {"x": X})
    with pytest.raises(UnsupportedOpError, match=r"'ai.onnx.ml.SVMClassifierV9'") as info:
        OnnxImporter().load(model)
    assert "ai.onnx.ml.LinearClassifier" in info.value.hint


def test_zipmap_is_refused_with_how_to_convert_without_it():
    model = ml_model("ZipMap", {"x": X}, classlabels_int64s=[0, 1, 2, 3])
    with pytest.raises(UnsupportedOpError, match=r"'ai.onnx.ml.ZipMap'") as info:
        OnnxImporter().load(model)
    assert "'zipmap': False" in info.value.hint


def test_svm_probabilities_are_refused_with_what_to_do():
    model = ml_model("SVMClassifier", {"x": X}, ("label", "scores"), kernel_type="LINEAR", vectors_per_class=[1, 1],
                     support_vectors=[0.0] * 8, coefficients=[1.0, -1.0], rho=[0.0], prob_a=[1.0], prob_b=[0.0],
                     classlabels_ints=[0, 1])
    with pytest.raises(UnsupportedOpError, match="probabilities") as info:
        OnnxImporter().load(model)
    assert "probability=True" in info.value.hint
