"""ONNX's ops whose output sizes depend on the data: NonZero, Compress, Unique and NonMaxSuppression.

Each is a host op (`ir/ops.py`: `rt.nonzero`, `rt.unique`, `rt.non_max_suppression`) whose data-dependent size is a
new symbol (`nonzero`, `unique`, `selected`; `_2`, ... after the first), in 0..the most the op can give. The ops that
follow see it as any symbolic dimension: `Shape` of a NonZero gives it, and a Reshape can use it. The compiler
splits the function at these ops into stages (`passes/stages.py`), and the runtime runs them on the host between
the stages. Inputs known at import time fold here, as any node's do.

- NonZero: the indices of the nonzero elements, i64 [rank, count] in row-major order.
- Compress: the slices where `condition` holds, along `axis` (or of the flattened input): a gather at the
  condition's NonZero. A condition shorter than the axis drops the rest, as the spec says.
- Unique: any of its four outputs (values, first indices, inverse indices, counts), `sorted` or in order of first
  occurrence, flattened or along `axis`.
- NonMaxSuppression: `center_point_box` 0 or 1; absent `max_output_boxes_per_class` selects nothing (the spec's
  default 0), absent `iou_threshold` is 0 and absent `score_threshold` filters nothing.
"""

from __future__ import annotations

import numpy as np

from ..errors import UnsupportedOpError
from ..ir.core import Builder, Value
from ..ir.symbolic import Sym, SymbolRange
from . import compose as C
from .onnx import handles


def _count(b: Builder, base: str, most) -> str:
    """A new symbol for a data-dependent size of at most `most` (a Sym: unbounded)."""
    return b.fresh_symbol(base, SymbolRange(0, None if isinstance(most, Sym) else int(most))).name


def nonzero(b: Builder, x: Value) -> Value:
    return b.op("rt.nonzero", [x], {"count": _count(b, "nonzero", x.type.num_elements)})


@handles("NonZero")
def _nonzero(n):
    return nonzero(n.b, n(0))


@handles("Compress")
def _compress(n):
    x, condition = n(0), n(1)
    if condition.type.rank != 1:
        raise UnsupportedOpError(f"Compress's condition must be 1-D, got {condition.type}")
    axis = n.attr("axis")
    if axis is None:
        x, axis = _flattened(n.b, x), 0
    else:
        axis = C.normalize_axis(axis, x.type.rank)
    indices = nonzero(n.b, condition)
    flat = n.b.op("rt.reshape", [indices], {"shape": (indices.type.shape[1],)})
    return n.b.op("rt.gather", [x, flat], {"axis": axis})


def _flattened(b: Builder, x: Value) -> Value:
    return b.op("rt.reshape", [x], {"shape": (x.type.num_elements,)})


@handles("Unique")
def _unique(n):
    x = n(0)
    axis = n.attr("axis")
    if axis is not None:
        axis = C.normalize_axis(axis, x.type.rank)
    most = x.type.num_elements if axis is None else x.type.shape[axis]
    attrs = {"count": _count(n.b, "unique", most), "sorted": bool(n.attr("sorted", 1)), "axis": axis}
    wanted = [i for i in range(4) if n.wants(i)] or [0]
    outputs = [None] * 4
    for i in wanted:
        outputs[i] = n.b.op("rt.unique", [x], {**attrs, "output": ("values", "indices", "inverse", "counts")[i]})
    return outputs[:max(wanted) + 1]


@handles("NonMaxSuppression")
def _non_max_suppression(n):
    boxes, scores = n(0), n(1)
    if boxes.type.rank != 3 or scores.type.rank != 3:
        raise UnsupportedOpError(f"NonMaxSuppression takes boxes [batches, boxes, 4] and scores [batches, classes, "
                                 f"boxes], got {boxes.type} and {scores.type}")
    f32 = np.float32
    max_output = n(2) if n.has(2) else n.b.constant(np.zeros([1], np.int64))
    iou = n(3) if n.has(3) else n.b.constant(np.zeros([1], f32))
    score = n(4) if n.has(4) else n.b.constant(np.zeros([1], f32))
    batches, classes, spatial = scores.type.shape
    most = batches * classes * spatial
    known = n.known_if_so(2) if n.has(2) else np.zeros([1], np.int64)
    if known is not None and not isinstance(most, Sym):
        most = batches * classes * min(spatial, max(int(np.asarray(known).reshape(-1)[0]), 0))
    attrs = {"count": _count(n.b, "selected", most), "center_point_box": int(n.attr("center_point_box", 0)),
             "score_filter": n.has(4)}
    return n.b.op("rt.non_max_suppression", [boxes, scores, max_output, iou, score], attrs)
