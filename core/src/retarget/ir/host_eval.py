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


def _iou_exceeds(a: np.ndarray, b: np.ndarray, iou_threshold) -> np.ndarray:
    """Whether boxes a and b (extents, `_extents`, [5, ...] each) suppress each other: the reference's
    suppress_by_iou, vectorized and symmetric (max, min and a + b are). A pair suppresses only if the intersection
    is nonempty in x and y and of positive area, both areas and the union are positive (so degenerate boxes never
    divide by zero), and IoU > iou_threshold, strictly. The reference tests `<=` and returns early; the strict
    tests here agree on NaN too: a NaN anywhere (a NaN coordinate, inf - inf) makes an extent, an area, the union
    and so the IoU NaN, and every comparison with NaN is false."""
    ix_min, ix_max = np.maximum(a[0], b[0]), np.minimum(a[1], b[1])
    iy_min, iy_max = np.maximum(a[2], b[2]), np.minimum(a[3], b[3])
    inter = (ix_max - ix_min) * (iy_max - iy_min)
    union = a[4] + b[4] - inter  # in the reference's order: area1 + area2 - intersection
    valid = (ix_max > ix_min) & (iy_max > iy_min) & (inter > 0) & (a[4] > 0) & (b[4] > 0) & (union > 0)
    return valid & (inter / union > iou_threshold)


def _suppressed(candidates: np.ndarray, chosen: np.ndarray, alive: np.ndarray, iou_threshold) -> np.ndarray:
    """Which live candidates the chosen box of their row suppresses: `candidates` [5, classes, M] and `chosen`
    [5, classes] hold extents (`_extents`), `alive` [classes, M]. Only the pairs that overlap in x and in y (a few,
    in a detector's output) get `_iou_exceeds`' whole test."""
    x_min, x_max, y_min, y_max, _ = candidates
    c = chosen[:, :, None]
    rows, cols = np.nonzero(alive & (x_min < c[1]) & (x_max > c[0]) & (y_min < c[3]) & (y_max > c[2]))
    out = np.zeros(alive.shape, bool)
    out[rows, cols] = _iou_exceeds(candidates[:, rows, cols], chosen[:, rows], iou_threshold)
    return out


# Past these, the pair graph would cost more memory than the step-by-step greedy costs time.
PAIRS_TESTED_AT_MOST = 1 << 22  # box pairs that overlap in x
PAIRS_A_CHUNK = 1 << 14
CLASS_PAIRS_AT_MOST = 1 << 23  # suppressing pairs times classes
ROUNDS_AT_MOST = 64  # the graph's longest chain of suppressions, about


def _suppressing_pairs(ext: np.ndarray, iou_threshold) -> tuple[np.ndarray, np.ndarray] | None:
    """Every pair of boxes (u, v), once, that suppress each other (`_iou_exceeds`). Sweep and prune: boxes sorted by
    x_min, each paired with those after it that start before it ends; of those, the pairs that overlap in y get the
    whole test. None if more than PAIRS_TESTED_AT_MOST pairs overlap in x."""
    x_min, x_max = ext[0], ext[1]
    by_x = np.flatnonzero(~np.isnan(x_min))  # a NaN extent suppresses nothing
    by_x = by_x[np.argsort(x_min[by_x], kind="stable")]
    starts = np.arange(1, by_x.size + 1)
    ends = np.searchsorted(x_min[by_x], x_max[by_x], side="left")  # the later boxes with x_min < this x_max
    counts = np.where(np.isnan(x_max[by_x]), 0, np.maximum(ends - starts, 0))
    total = int(counts.sum())
    if total > PAIRS_TESTED_AT_MOST:
        return None
    y_min, y_max = ext[2, by_x], ext[3, by_x]
    near = []  # the pairs that overlap in y too, as positions in by_x, a chunk of boxes at a time: arrays that fit
    bounds = np.searchsorted(np.cumsum(counts), np.arange(PAIRS_A_CHUNK, total, PAIRS_A_CHUNK))  # in the cache
    for lo, hi in zip(np.concatenate([[0], bounds]).tolist(), np.concatenate([bounds, [by_x.size]]).tolist()):
        chunk = counts[lo:hi]
        first = np.repeat(np.arange(lo, hi), chunk)
        second = np.arange(first.size) + np.repeat(starts[lo:hi] - np.cumsum(chunk) + chunk, chunk)
        both = (y_min[first] < y_max[second]) & (y_max[first] > y_min[second])
        near.append((first[both], second[both]))
    u, v = (by_x[np.concatenate(side)] for side in zip(*near))
    hit = _iou_exceeds(np.take(ext, u, axis=1), np.take(ext, v, axis=1), iou_threshold)
    return u[hit], v[hit]


def _greedy_by_pairs(pairs: tuple[np.ndarray, np.ndarray], boxes: int, order: np.ndarray, sizes: np.ndarray,
                     max_output: int) -> list[np.ndarray] | None:
    """`_greedy`'s result from the pairs that suppress each other: a candidate is kept iff no candidate kept before
    it in its class's order suppresses it, so each class's pairs point from the earlier to the later, and rounds
    decide every candidate whose earlier neighbours are decided (suppressed if one is kept, else kept) at once.
    Each class keeps its first max_output. A candidate's fate depends only on those before it, so this is the
    greedy's answer; its cost is numpy's per round, and rounds are the longest chain of suppressions (a few, in a
    detector's output). None where the graph is too large or too deep: `_greedy` then steps."""
    u, v = pairs
    classes, width = order.shape
    if u.size * classes > CLASS_PAIRS_AT_MOST:
        return None
    valid = np.arange(width) < sizes[:, None]
    rank = np.full((classes, boxes), -1, np.intp)
    rows = np.broadcast_to(np.arange(classes)[:, None], order.shape)
    rank[rows[valid], order[valid]] = np.broadcast_to(np.arange(width), order.shape)[valid]
    rank_u, rank_v = rank[:, u], rank[:, v]
    cls, pair = np.nonzero((rank_u >= 0) & (rank_v >= 0))
    a, b = rank_u[cls, pair], rank_v[cls, pair]
    src, dst = cls * width + np.minimum(a, b), cls * width + np.maximum(a, b)  # node: class * width + rank
    state = valid.astype(np.int8).reshape(-1)  # 1 kept, 0 suppressed (or no candidate), -1 undecided
    state[dst] = -1
    waiting = np.zeros(state.size, bool)
    for _ in range(ROUNDS_AT_MOST):
        if not dst.size:
            break
        from_state = state[src]
        state[dst[from_state == 1]] = 0
        blocked = dst[from_state == -1]
        undecided = dst[state[dst] == -1]
        waiting[blocked] = True
        state[undecided[~waiting[undecided]]] = 1
        waiting[blocked] = False
        live = state[dst] == -1
        src, dst = src[live], dst[live]
    else:
        if dst.size:
            return None
    kept = state.reshape(classes, width) == 1
    kept &= np.cumsum(kept, axis=1) <= max_output
    return [row[k] for row, k in zip(order, kept)]


def _greedy(ext: np.ndarray, order: np.ndarray, sizes: np.ndarray, max_output: int,
            iou_threshold) -> list[np.ndarray]:
    """Each class's kept boxes, greedily: the best live candidate is kept, and the later ones it suppresses die.
    `order` [classes, width] holds each class's candidates best first, its first `sizes` of each row. From the
    graph of boxes that suppress each other where it is small (`_greedy_by_pairs`), else step by step."""
    if max_output and sizes.any():
        pairs = _suppressing_pairs(ext, iou_threshold)
        kept = None if pairs is None else _greedy_by_pairs(pairs, ext.shape[1], order, sizes, max_output)
        if kept is not None:
            return kept
    return _greedy_steps(ext, order, sizes, max_output, iou_threshold)


def _greedy_steps(ext: np.ndarray, order: np.ndarray, sizes: np.ndarray, max_output: int,
                  iou_threshold) -> list[np.ndarray]:
    """`_greedy`, a kept box a step. Every class takes its step together (one vectorized step per kept box of the
    class that keeps most), so the cost is numpy's per step, not Python's per class and box. Classes with nothing
    left drop out, and once half of the columns are dead each row's live candidates are packed to the left, in
    order."""
    kept: list[list[int]] = [[] for _ in sizes]
    alive = np.arange(order.shape[1]) < sizes[:, None]
    classes = np.flatnonzero(sizes)
    order, alive = order[classes], alive[classes]
    ranked = ext[:, order]  # [5, classes, width]: the candidates' extents, best first
    everyone = np.arange(classes.size)
    for step in range(max_output if classes.size else 0):
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
    return [np.array(k, np.intp) for k in kept]


def _reference_order(class_scores: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """Candidates in the order the reference visits them: Python's sort under its comparator, popped from the end.

    Only needed when a score is NaN, where that order is the sort algorithm's, not a total order's."""
    def less(a, b):
        sa, sb = class_scores[a], class_scores[b]
        return -1 if sa < sb or (sa == sb and a > b) else 0

    return np.array(sorted(candidates.tolist(), key=functools.cmp_to_key(less))[::-1], dtype=np.int64)


def _candidate_orders(scores: np.ndarray, score_min) -> tuple[np.ndarray, np.ndarray]:
    """Each class's candidates (a score > score_min, all without one), best first, equal scores (-0.0 and 0.0
    among them) by ascending index: `order` [classes, most candidates], whose first `sizes` of each row count.
    Rows holding a NaN candidate go in the reference's order (`_reference_order`)."""
    classes, boxes = scores.shape
    candidate = np.ones(scores.shape, bool) if score_min is None else scores > score_min
    sizes = candidate.sum(axis=1)
    flat = np.flatnonzero(candidate)  # class * boxes + box, ascending
    cls, box = np.divmod(flat, max(boxes, 1))
    values = scores.reshape(-1)[flat]
    box_bits = max(boxes - 1, 1).bit_length()
    if scores.dtype in (np.float16, np.float32) and max(classes - 1, 1).bit_length() + 32 + box_bits <= 64:
        # one sort of unique 64-bit keys, numpy's fastest: the class, the score's bits flipped so that they sort
        # descending (-0.0 as 0.0), then the box
        bits = (values.astype(np.float32) + np.float32(0)).view(np.uint32)
        descending = np.where(bits >> 31 == 1, bits, ~bits & np.uint32(0x7FFFFFFF)).astype(np.uint64)
        key = cls.astype(np.uint64) << np.uint64(32 + box_bits) | descending << np.uint64(box_bits) | box.astype(
            np.uint64)
        box = (np.sort(key) & np.uint64((1 << box_bits) - 1)).astype(np.intp)
    else:  # lexsort is stable: by class, then descending score, then (the order it was given) ascending box
        box = box[np.lexsort((-values, cls))]
    order = np.zeros((classes, int(sizes.max(initial=0))), np.intp)
    order[cls, np.arange(flat.size) - np.repeat(np.cumsum(sizes) - sizes, sizes)] = box  # cls ascends, as box's
    for c in np.unique(cls[np.isnan(values)]).tolist():
        order[c, :sizes[c]] = _reference_order(scores[c], np.flatnonzero(candidate[c]))
    return order, sizes


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

    selected = [np.zeros((0, 3), np.int64)]  # (batch, class, box) rows, in the reference's order
    with np.errstate(all="ignore"):  # inf - inf, overflow and 0/0 give what the reference's scalars give
        for b in range(boxes.shape[0] if max_output else 0):
            order, sizes = _candidate_orders(scores[b], score_min)
            kept = _greedy(_extents(boxes[b], center_point_box), order, sizes, max_output, iou)
            counts = [k.size for k in kept]
            rows = np.empty((sum(counts), 3), np.int64)
            rows[:, 0], rows[:, 1] = b, np.repeat(np.arange(len(kept)), counts)
            rows[:, 2] = np.concatenate(kept) if kept else 0
            selected.append(rows)
    return [np.concatenate(selected)]
