"""Numpy evaluators of the ops whose output sizes depend on the data (ONNX NonZero, Unique, NonMaxSuppression).

No kernel computes these: the runtime runs them on the host between stages. Each is exact to ONNX (opset 11+),
bit for bit as `onnx.reference` computes it; where the reference fails on a case the spec defines, the spec is
followed and the function's docstring says so. Each takes numpy arrays and returns a list of C-contiguous arrays.
"""

from __future__ import annotations

import functools

import numpy as np

__all__ = ["nonzero", "unique", "non_max_suppression"]


def nonzero(x: np.ndarray) -> list[np.ndarray]:
    """ONNX NonZero: `[indices]`, i64 [rank, n], the coordinates of the nonzero elements in row-major order.

    A 0-d input gives [0, n] (n is 0 or 1): no coordinates, as onnx.reference and ONNX's shape inference have it.
    NaN counts as nonzero and -0.0 as zero, as in numpy."""
    x = np.asarray(x)
    if x.ndim == 0:
        return [np.empty((0, int(np.count_nonzero(x))), dtype=np.int64)]
    return [np.array(np.nonzero(x), dtype=np.int64)]  # one row per dimension, even where n is 0


def unique(x: np.ndarray, *, sorted: bool = True, axis: int | None = None) -> list[np.ndarray]:
    """ONNX Unique: `[Y, indices, inverse_indices, counts]`, the last three i64 and 1-d.

    With `axis` None, the unique elements of x flattened; otherwise the unique slices of x along `axis` (negative
    counts from the end). `sorted` gives Y in ascending order (slices lexicographically); unsorted, in order of
    first occurrence, with indices, inverse_indices and counts in that same order. inverse_indices has one entry
    per element of x (axis None) or per slice along the axis.

    Values compare as np.unique (which onnx.reference calls) compares them: -0.0 equals 0.0, the first occurrence
    stands for both; with axis None all NaNs are one value (numpy's equal_nan), sorted last, at the first NaN's
    index; with an axis, slices holding NaN are each distinct.

    Where onnx.reference is wrong this follows the spec: unsorted, it takes Y along axis 0 of the unflattened x, so
    it fails (axis None, rank > 1) or returns the wrong Y (axis not 0); here Y is x's values at `indices`."""
    x = np.asarray(x)
    if axis is not None:
        axis = int(axis)
        if not -x.ndim <= axis < x.ndim:
            raise ValueError(f"axis {axis} is out of range for a rank-{x.ndim} input")
        axis %= x.ndim
    y, indices, inverse, counts = np.unique(x, return_index=True, return_inverse=True, return_counts=True, axis=axis)
    inverse = inverse.reshape(-1)  # numpy 2.0 gave it x's shape for axis None
    if not sorted:
        order = np.argsort(indices)  # first occurrences are distinct, so any sort gives the same order
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)  # sorted position -> position in order of occurrence
        indices, counts, inverse = indices[order], counts[order], rank[inverse]
        y = np.take(x.reshape(-1), indices) if axis is None else np.take(x, indices, axis=axis)
    return [np.ascontiguousarray(y)] + [np.ascontiguousarray(a, dtype=np.int64) for a in (indices, inverse, counts)]


def _scalar(value) -> np.generic | None:
    """An optional 1-element input's value: None where it is absent or empty (the reference's test for absent)."""
    if value is None:
        return None
    value = np.asarray(value).reshape(-1)
    return value[0] if value.size else None


def _extents(boxes: np.ndarray, center_point_box: int) -> np.ndarray:
    """[5, boxes]: each box's x_min, x_max, y_min, y_max and area, in the boxes' dtype, as the reference has them."""
    if center_point_box == 0:  # [y1, x1, y2, x2], either diagonal; the reference's max_min: (rhs, lhs) if lhs >= rhs
        x_swap, y_swap = boxes[:, 1] >= boxes[:, 3], boxes[:, 0] >= boxes[:, 2]
        x_min, x_max = np.where(x_swap, boxes[:, 3], boxes[:, 1]), np.where(x_swap, boxes[:, 1], boxes[:, 3])
        y_min, y_max = np.where(y_swap, boxes[:, 2], boxes[:, 0]), np.where(y_swap, boxes[:, 0], boxes[:, 2])
    else:  # [x_center, y_center, width, height]
        half_w, half_h = boxes[:, 2] / 2, boxes[:, 3] / 2
        x_min, x_max = boxes[:, 0] - half_w, boxes[:, 0] + half_w
        y_min, y_max = boxes[:, 1] - half_h, boxes[:, 1] + half_h
    return np.stack([x_min, x_max, y_min, y_max, (x_max - x_min) * (y_max - y_min)])


def _suppressed(candidates: np.ndarray, chosen: np.ndarray, alive: np.ndarray, iou_threshold) -> np.ndarray:
    """Which live candidates the chosen box of their row suppresses: `candidates` [5, classes, M] and `chosen`
    [5, classes] hold extents (`_extents`), `alive` [classes, M].

    This is the reference's suppress_by_iou(box1 = a candidate, box2 = the chosen box), vectorized. A pair is
    suppressed only if the intersection is nonempty in x and y and of positive area, both areas and the union are
    positive (so degenerate boxes never divide by zero), and IoU > iou_threshold, strictly. The reference tests
    `<=` and returns early; the strict tests here agree on NaN too: a NaN anywhere (a NaN coordinate, inf - inf)
    makes an extent, an area, the union and so the IoU NaN, and every comparison with NaN is false. Only the pairs
    that overlap in x and in y (a few, in a detector's output) get the whole test."""
    x_min, x_max, y_min, y_max, _ = candidates
    c = chosen[:, :, None]
    rows, cols = np.nonzero(alive & (x_min < c[1]) & (x_max > c[0]) & (y_min < c[3]) & (y_max > c[2]))
    x_min, x_max, y_min, y_max, area = candidates[:, rows, cols]
    c_x_min, c_x_max, c_y_min, c_y_max, c_area = chosen[:, rows]
    ix_min, ix_max = np.maximum(x_min, c_x_min), np.minimum(x_max, c_x_max)
    iy_min, iy_max = np.maximum(y_min, c_y_min), np.minimum(y_max, c_y_max)
    inter = (ix_max - ix_min) * (iy_max - iy_min)
    union = area + c_area - inter  # in the reference's order: area1 + area2 - intersection
    valid = (ix_max > ix_min) & (iy_max > iy_min) & (inter > 0) & (area > 0) & (c_area > 0) & (union > 0)
    out = np.zeros(alive.shape, bool)
    out[rows, cols] = valid & (inter / union > iou_threshold)
    return out


def _greedy(ext: np.ndarray, orders: list[np.ndarray], max_output: int, iou_threshold) -> list[list[int]]:
    """Each class's kept boxes, greedily: the best live candidate is kept, and the later ones it suppresses die.
    Every class takes its step together (one vectorized step per kept box of the class that keeps most), so the
    cost is numpy's per step, not Python's per class and box. Classes with nothing left drop out, and once half of
    the columns are dead each row's live candidates are packed to the left, in order."""
    kept: list[list[int]] = [[] for _ in orders]
    width = max((o.size for o in orders), default=0)
    if width == 0 or max_output == 0:
        return kept
    order = np.zeros((len(orders), width), np.intp)
    alive = np.zeros((len(orders), width), bool)
    for c, o in enumerate(orders):
        order[c, :o.size], alive[c, :o.size] = o, True
    classes = np.arange(len(orders))
    ranked = ext[:, order]  # [5, classes, width]: the candidates' extents, best first
    everyone = np.arange(len(orders))
    for step in range(max_output):
        pos = alive.argmax(axis=1)
        for c, p in zip(classes.tolist(), order[everyone[:classes.size], pos].tolist()):
            kept[c].append(p)
        rows = everyone[:classes.size]
        alive[rows, pos] = False
        if step + 1 == max_output:
            break
        alive &= ~_suppressed(ranked, ranked[:, rows, pos], alive, iou_threshold)
        counts = alive.sum(axis=1)
        if not counts.all():  # classes with nothing left
            keep = counts > 0
            if not keep.any():
                break
            classes, order, alive, ranked, counts = classes[keep], order[keep], alive[keep], ranked[:, keep], \
                counts[keep]
        if 2 * counts.max() <= alive.shape[1]:  # pack the live candidates to the left, keeping their order
            packed = np.argsort(~alive, axis=1, kind="stable")[:, :counts.max()]
            order, alive = np.take_along_axis(order, packed, 1), np.take_along_axis(alive, packed, 1)
            ranked = np.take_along_axis(ranked, packed[None], 2)
    return kept


def _reference_order(class_scores: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """Candidates in the order the reference visits them: Python's sort under its comparator, popped from the end.

    Only needed when a score is NaN, where that order is the sort algorithm's, not a total order's."""
    def less(a, b):
        sa, sb = class_scores[a], class_scores[b]
        return -1 if sa < sb or (sa == sb and a > b) else 0

    return np.array(sorted(candidates.tolist(), key=functools.cmp_to_key(less))[::-1], dtype=np.int64)


def non_max_suppression(boxes: np.ndarray, scores: np.ndarray, max_output_boxes_per_class: np.ndarray | None = None,
                        iou_threshold: np.ndarray | None = None, score_threshold: np.ndarray | None = None, *,
                        center_point_box: int = 0) -> list[np.ndarray]:
    """ONNX NonMaxSuppression: `[selected_indices]`, i64 [n, 3] of (batch_index, class_index, box_index).

    boxes [batches, boxes, 4], scores [batches, classes, boxes]; the three optional inputs are 1-element arrays,
    None or empty where absent. Absent, max_output_boxes_per_class is 0 (nothing selected; a negative one is 0
    too), iou_threshold 0 (any overlap suppresses) and score_threshold filters nothing; present, a box is a
    candidate only if its score > score_threshold, strictly. Per batch, per class, candidates go by descending
    score, equal scores by ascending box index; each is kept if its IoU with every box kept so far in its class is
    not > iou_threshold, until max_output_boxes_per_class are kept. IoU and comparisons are in the boxes' dtype,
    each operation as onnx.reference orders it. center_point_box 0: [y1, x1, y2, x2], any diagonal's corners;
    1: [x_center, y_center, width, height].

    NaN: a NaN score never passes a score_threshold; without one, NaN scores are visited in the order the
    reference's Python sort leaves them (ill-defined, but reproduced). A NaN IoU suppresses nothing. onnx.reference
    fails when max_output_boxes_per_class or iou_threshold is absent; this follows the spec's defaults there."""
    boxes, scores = np.asarray(boxes), np.asarray(scores)
    if boxes.ndim != 3 or boxes.shape[2] != 4:
        raise ValueError(f"boxes must be [batches, boxes, 4], got shape {boxes.shape}")
    if scores.ndim != 3 or scores.shape[0] != boxes.shape[0] or scores.shape[2] != boxes.shape[1]:
        raise ValueError(f"scores must be [batches, classes, boxes] for boxes {boxes.shape}, got {scores.shape}")
    if center_point_box not in (0, 1):
        raise ValueError(f"center_point_box must be 0 or 1, got {center_point_box}")
    max_output = _scalar(max_output_boxes_per_class)
    max_output = 0 if max_output is None else max(int(max_output), 0)
    iou = _scalar(iou_threshold)
    iou = 0 if iou is None else iou
    score_min = _scalar(score_threshold)

    selected = []  # (batch, class, box) rows, in the reference's order
    with np.errstate(all="ignore"):  # inf - inf, overflow and 0/0 give what the reference's scalars give
        for b in range(boxes.shape[0] if max_output else 0):
            orders = []
            for c in range(scores.shape[1]):
                class_scores = scores[b, c]
                if score_min is None:
                    candidates = np.arange(class_scores.size)
                else:
                    candidates = np.flatnonzero(class_scores > score_min)
                if np.isnan(class_scores[candidates]).any():
                    orders.append(_reference_order(class_scores, candidates))
                else:  # stable: equal scores (-0.0 and 0.0 included) keep ascending index order
                    orders.append(candidates[np.argsort(-class_scores[candidates], kind="stable")])
            kept = _greedy(_extents(boxes[b], center_point_box), orders, max_output, iou)
            selected += [(b, c, box) for c, boxes_kept in enumerate(kept) for box in boxes_kept]
    return [np.array(selected, dtype=np.int64).reshape(-1, 3)]
