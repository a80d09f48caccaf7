"""Ops whose result sizes depend on the data (NonZero, Compress, NonMaxSuppression) beside onnxruntime: what the
stages cost, each a wait and a round trip through the host around the host op (passes/stages.py).

    .venv/bin/python benchmarks/cpu/data_dependent.py [--repeats 50] [--only TEXT]

- masked select: x[x > 0] * 2 and its sum, 64K elements (NonZero, a gather, a reduction);
- token pruning: the tokens of [196, 384] whose score passes, through a 384 x 384 linear layer (Compress, MatMul);
- detector post-processing: NonMaxSuppression of 1000 boxes in 80 classes (at most 100 a class, IoU 0.5, score
  0.05), then the kept boxes and scores gathered.

Options, timing and output as onnx_math_ops.py's (the `compare` harness of onnx_sequence_ops.py).
"""

from __future__ import annotations

import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from onnx_sequence_ops import compare, onnx_model  # noqa: E402


def models():
    from onnx import helper

    rng = np.random.default_rng(0)
    f32, i64 = np.float32, np.int64
    x = rng.standard_normal(1 << 16).astype(f32)
    masked = onnx_model([helper.make_node("Greater", ["x", "zero"], ["mask"]),
                         helper.make_node("NonZero", ["mask"], ["nz"]),
                         helper.make_node("Squeeze", ["nz", "axis0"], ["idx"]),
                         helper.make_node("Gather", ["x", "idx"], ["picked"]),
                         helper.make_node("Mul", ["picked", "two"], ["y"]),
                         helper.make_node("ReduceSum", ["y"], ["total"], keepdims=0)],
                        {"x": x}, ["y", "total"], {"zero": np.array(0, f32), "axis0": np.array([0], i64),
                                                   "two": np.array(2, f32)})
    tokens = rng.standard_normal((196, 384)).astype(f32)
    scores = rng.random(196).astype(f32)
    pruning = onnx_model([helper.make_node("Greater", ["scores", "keep_above"], ["keep"]),
                          helper.make_node("Compress", ["tokens", "keep"], ["kept"], axis=0),
                          helper.make_node("MatMul", ["kept", "w"], ["y"])],
                         {"tokens": tokens, "scores": scores}, ["y"],
                         {"keep_above": np.array(0.5, f32),
                          "w": (rng.standard_normal((384, 384)) / 20).astype(f32)})
    corner = rng.uniform(0, 600, (1, 1000, 2))
    boxes = np.concatenate([corner, corner + rng.uniform(10, 120, (1, 1000, 2))], axis=2).astype(f32)
    logits = rng.normal(-4, 2, (1, 80, 1000)).astype(f32)
    detector = onnx_model([helper.make_node("Sigmoid", ["logits"], ["probs"]),
                           helper.make_node("NonMaxSuppression", ["boxes", "probs", "max_out", "iou", "score_min"],
                                            ["sel"]),
                           helper.make_node("Gather", ["sel", "col2"], ["box_index"], axis=1),
                           helper.make_node("Squeeze", ["boxes", "axis0"], ["boxes2d"]),
                           helper.make_node("Gather", ["boxes2d", "box_index"], ["kept_boxes"], axis=0),
                           helper.make_node("GatherND", ["probs", "sel"], ["kept_scores"])],
                          {"boxes": boxes, "logits": logits}, ["sel", "kept_boxes", "kept_scores"],
                          {"max_out": np.array([100], i64), "iou": np.array([0.5], f32),
                           "score_min": np.array([0.05], f32), "col2": np.array(2, i64),
                           "axis0": np.array([0], i64)})
    return [("masked select: x[x > 0] * 2 and its sum, 64K", masked, {"x": x}),
            ("token pruning: Compress of [196, 384], then 384 x 384", pruning, {"tokens": tokens, "scores": scores}),
            ("NonMaxSuppression 1000 boxes x 80 classes, then gathers", detector, {"boxes": boxes, "logits": logits})]


if __name__ == "__main__":
    compare(models(), __doc__.splitlines()[0])
