"""scikit-learn-shaped ai.onnx.ml models beside onnxruntime: what the tree walk (a fixed number of gather steps,
onnx_ml_trees.py) and the kernel SVM cost on the CPU.

    .venv/bin/python benchmarks/cpu/onnx_ml.py [--repeats 50] [--only TEXT]

- a random forest classifier: 100 trees of depth up to 10 (BRANCH_LEQ, as scikit-learn's), 3 classes, 1000 rows of
  10 features;
- a gradient-boosting regressor: 300 trees of depth up to 4, summed, 1000 rows;
- an RBF support-vector regressor: 500 support vectors of 20 features, 1000 rows.

The trees are the tests' random trees (core/tests/importers/test_onnx_ml_trees.py). Options, timing and output as
onnx_math_ops.py's (the `compare` harness of onnx_sequence_ops.py).
"""

from __future__ import annotations

import importlib.util
import pathlib
import sys

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from onnx_sequence_ops import compare  # noqa: E402

spec = importlib.util.spec_from_file_location(
    "onnx_ml_trees_tests", HERE.parent.parent / "core" / "tests" / "importers" / "test_onnx_ml_trees.py")
trees = importlib.util.module_from_spec(spec)
spec.loader.exec_module(trees)


def models():
    from onnx import helper

    rng = np.random.default_rng(0)
    f32 = np.float32
    x = trees.random_x(rng, rows=1000, nan=False)
    leq = [trees.MODES.index("BRANCH_LEQ")]
    forest = [trees.random_tree(rng, 10, 3, leq) for _ in range(100)]
    classifier = trees.model([("TreeEnsembleClassifier", trees.legacy(forest, "class", classlabels_int64s=[0, 1, 2]))],
                             rows=1000)
    boosted = [trees.random_tree(rng, 4, 1, leq) for _ in range(300)]
    regressor = trees.model([("TreeEnsembleRegressor", trees.legacy(boosted, "target", n_targets=1))], rows=1000)
    vectors, features = 500, 20
    svm_x = rng.standard_normal((1000, features)).astype(f32)
    svm = helper.make_graph(
        [helper.make_node("SVMRegressor", ["x"], ["y"], domain="ai.onnx.ml", kernel_type="RBF",
                          kernel_params=[0.05, 0.0, 0.0], n_supports=vectors, rho=[0.3],
                          coefficients=rng.standard_normal(vectors).tolist(),
                          support_vectors=rng.standard_normal(vectors * features).tolist())],
        "svm", [helper.make_tensor_value_info("x", 1, [1000, features])], [helper.make_empty_tensor_value_info("y")])
    svm_model = helper.make_model(svm, opset_imports=[helper.make_opsetid("", 17),
                                                      helper.make_opsetid("ai.onnx.ml", 3)])
    svm_model.ir_version = 8
    return [("random forest: 100 trees, depth 10, 3 classes, 1000 x 10", classifier, {"x": x}),
            ("gradient boosting: 300 trees, depth 4, 1000 x 10", regressor, {"x": x}),
            ("SVMRegressor RBF: 500 support vectors, 1000 x 20", svm_model, {"x": svm_x})]


if __name__ == "__main__":
    compare(models(), __doc__.splitlines()[0])
