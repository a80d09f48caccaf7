"""ONNX's remaining image ops, composed from graph ops: CenterCropPad, AffineGrid, Col2Im, RoiAlign and
DeformConv; and TensorScatter, opset 24's key-value cache update.

- CenterCropPad: the target `shape` known at import time, for all axes or `axes`; a centred crop (an odd
  difference keeps the extra element at the end) and zero padding (the extra element at the end), as onnx's
  reference places them.
- AffineGrid: 2-D and 3-D, either `align_corners`; `size` known at import time, theta a runtime input. Each output
  coordinate is theta's row times the homogeneous position, one broadcast product a spatial axis (no grid of
  positions is stored). It feeds GridSample as torch's affine_grid feeds grid_sample.
- Col2Im: any number of spatial dims, with `dilations`, `pads` and `strides`; `image_shape` and `block_shape` known
  at import time. Overlapping blocks sum: each kernel offset's columns are spread by the stride and placed by
  padding, and the placements added (no scatter). Blocks that tile the image (strides equal to the block, no
  dilation) are one transpose.
- RoiAlign: opset 10's and 16's (`coordinate_transformation_mode` half_pixel or output_half_pixel, defaulting to
  each opset's own) and 22's (bfloat16 too). rois and batch_indices are runtime inputs, whose count may be known
  only at run time (a detector's NonMaxSuppression picks them), as may X's batch; X's C, H and W are static.
  A positive `sampling_ratio` reads ratio x ratio bilinear samples a bin by computed gathers, in `mode` avg or max;
  max is what onnx's reference and onnxruntime compute, the largest of each sample's four weighted taps (not the
  largest interpolated value). `sampling_ratio` 0, ONNX's default, takes ceil(bin size) samples a bin, a count that
  depends on each roi; it is supported in avg mode, where the average is separable: per axis, each roi's bilinear
  weights form a matrix [bins, pixels], and X[batch] is contracted with both (two matrix products). Such samples lie
  more than half a pixel apart, so at most 4 reach a pixel (from [p - 1, p + 1]): each entry sums 6 candidates (one
  before, one spare), whatever the roi's size. Max mode with `sampling_ratio` 0 is refused: max is not separable,
  and a bin may hold up to (2H + 2)(2W + 2) samples inside the image.
- DeformConv (opset 22): 2-D, as onnx's reference and torchvision's deform_conv2d (DCNv1, and v2 with `mask`),
  with `group`, `offset_group`, strides, dilations and pads; X, offset and mask runtime inputs (their batch may be
  known only at run time), W and B initializers or inputs; X's channels and image size static. Deformed im2col then
  one matrix product: X is laid out channel-last as rows of the channels that share an offset group and a conv
  group, each of the four bilinear corners is one gather of whole rows at every kernel tap and output position
  (corners outside the image weigh 0, as torchvision's zero padding), and the columns [N, group, oH * oW,
  C / group * kh * kw] meet W, reordered to match (folded for an initializer), in one batched matmul. Other ranks
  are refused: neither onnx's reference nor onnxruntime defines them.
- TensorScatter: `update` written into `past_cache` along `axis` (not 0, the batch) from each batch's
  `write_indices` (0 where absent), `mode` linear or circular (wrapping at the cache's length): a select between
  the cache and a gather of the update at positions computed from iotas.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ..errors import InputError, UnsupportedOpError
from ..ir.core import Builder, Value
from ..ir.symbolic import Sym
from . import compose as C
from .onnx import SHAPE_OPERANDS, handles

# operands that set output shapes: the node-test harness binds them, as a static-shape compile must
SHAPE_OPERANDS.update({"CenterCropPad": (1,), "AffineGrid": (1,), "Col2Im": (1, 2)})


def _static(n, x: Value, axes, what: str) -> None:
    """Refuse sizes along `axes` of `x` that are known only at run time."""
    dynamic = [x.type.shape[a] for a in axes if isinstance(x.type.shape[a], Sym)]
    if dynamic:
        raise UnsupportedOpError(f"{n.node.op_type} needs {what} known at import time, not {dynamic[0]} of "
                                 f"{x.type}", hint="export with static sizes there (or pass input_shapes=)")


def _reshape(b: Builder, x: Value, shape) -> Value:
    return x if tuple(shape) == x.type.shape else b.op("rt.reshape", [x], {"shape": tuple(shape)})


def _along(b: Builder, values, axis: int, rank: int, like: Value) -> Value:
    """`values` as a constant of `like`'s type laid along `axis` of a rank-`rank` tensor (ones elsewhere)."""
    shape = tuple(-1 if d == axis else 1 for d in range(rank))
    return b.constant(np.asarray(values, dtype=np.float64).reshape(shape).astype(like.type.dtype.np_dtype))


# -- CenterCropPad --------------------------------------------------------------------------------------------------

@handles("CenterCropPad")
def _center_crop_pad(n):
    x = n(0)
    rank = x.type.rank
    shape = [int(s) for s in n.known(1, "shape")]
    axes = [C.normalize_axis(int(a), rank) for a in n.attr("axes", range(rank))]
    if len(axes) != len(shape):
        raise InputError(f"CenterCropPad's shape {shape} and axes {axes} differ in length")
    _static(n, x, axes, "the sizes of the cropped or padded axes")
    low, high = [0] * rank, [0] * rank
    for axis, size in zip(axes, shape, strict=True):
        grow = size - x.type.shape[axis]  # the extra element of an odd difference goes to the end either way
        low[axis] = grow // 2 if grow >= 0 else -(-grow // 2)
        high[axis] = grow - low[axis]
    return C.pad_signed(n.b, x, low, high)


# -- AffineGrid -----------------------------------------------------------------------------------------------------

def _normalized_positions(size: int, align_corners: bool) -> np.ndarray:
    """Pixel positions in [-1, 1]: the corner pixels' centres at the ends (align_corners), else their outer edges."""
    if align_corners:
        return np.linspace(-1.0, 1.0, size)
    return (2 * np.arange(size) + 1) / size - 1


@handles("AffineGrid")
def _affine_grid(n):
    """grid[n, ..., i] = theta[n, i, :dims] . (x, y[, z]) + theta[n, i, dims], x along the last spatial axis."""
    theta, b = n(0), n.b
    size = [int(s) for s in n.known(1, "size")]
    spatial = size[2:]
    dims = len(spatial)
    if dims not in (2, 3) or theta.type.rank != 3 or theta.type.shape[1:] != (dims, dims + 1):
        raise UnsupportedOpError(f"AffineGrid of size {size} and theta {theta.type}",
                                 hint="2-D (size [N, C, H, W], theta [N, 2, 3]) and 3-D (size [N, C, D, H, W], "
                                      "theta [N, 3, 4]) are defined")
    wide = C.widen(b, theta)
    batch, rank = theta.type.shape[0], dims + 2

    def column(k):  # theta[:, :, k] as [N, 1, ..., 1, dims]
        return _reshape(b, C.slice_axis(b, wide, 2, k, k + 1), (batch,) + (1,) * dims + (dims,))

    grid = column(dims)
    for k in range(dims):  # coordinate k (x first) runs along spatial axis dims - 1 - k
        axis = dims - k
        positions = _along(b, _normalized_positions(spatial[axis - 1], bool(n.attr("align_corners", 0))), axis,
                           rank, wide)
        grid = b.op("rt.add", [grid, b.op("rt.mul", [column(k), positions])])
    return C.narrow_to(b, grid, theta)  # the terms broadcast to [N, *spatial, dims] together


# -- Col2Im ---------------------------------------------------------------------------------------------------------

@handles("Col2Im")
def _col2im(n):
    """input [N, C * prod(block), L] -> [N, C, *image_shape]: column (c, k) of block l lands at l's position
    times the stride, plus k times the dilation, less the begin padding; positions outside the image are dropped."""
    x, b = n(0), n.b
    image = [int(s) for s in n.known(1, "image_shape")]
    block = [int(s) for s in n.known(2, "block_shape")]
    dims = len(image)
    strides = list(n.attr("strides", [1] * dims))
    dilations = list(n.attr("dilations", [1] * dims))
    pads = list(n.attr("pads", [0] * 2 * dims))
    begin, end = pads[:dims], pads[dims:]
    if x.type.rank != 3 or len(block) != dims or not (len(strides) == len(dilations) == dims == len(pads) // 2):
        raise InputError(f"Col2Im of {x.type} into image_shape {image} by block_shape {block}: input must be "
                         "[N, C * prod(block_shape), L], and block_shape, strides, dilations one value a spatial dim "
                         "(pads two)")
    _static(n, x, (1, 2), "the input's channels and block count")
    blocks = [(s + lo + hi - d * (k - 1) - 1) // st + 1
              for s, lo, hi, d, k, st in zip(image, begin, end, dilations, block, strides, strict=True)]
    kernel = math.prod(block)
    if x.type.shape[1] % kernel or x.type.shape[2] != math.prod(blocks) or min(blocks) < 1:
        raise InputError(f"Col2Im of {x.type} into image_shape {image} by block_shape {block}: the input must be "
                         f"[N, C * {kernel}, {math.prod(blocks)}] (blocks {blocks} a dim)",
                         hint="check image_shape, block_shape, strides, dilations and pads against the input")
    batch, channels = x.type.shape[0], x.type.shape[1] // kernel
    columns = _reshape(b, x, (batch, channels, *block, *blocks))
    if strides == block and dilations == [1] * dims:  # the blocks tile the padded image: interleave them
        perm = (0, 1) + tuple(itertools.chain.from_iterable((2 + dims + d, 2 + d) for d in range(dims)))
        tiled = _reshape(b, b.op("rt.transpose", [columns], {"perm": perm}),
                         (batch, channels, *(k * m for k, m in zip(block, blocks, strict=True))))
        return _place(b, tiled, [-lo for lo in begin], image)
    image_out = None
    for offset in np.ndindex(*block):
        start = (0, 0, *offset, *(0,) * dims)
        limit = (batch, channels, *(k + 1 for k in offset), *blocks)
        slab = b.op("rt.slice", [columns], {"start": start, "limit": limit, "stride": (1,) * (2 + 2 * dims)})
        spread = C.dilate(b, _reshape(b, slab, (batch, channels, *blocks)), [0, 0, *(s - 1 for s in strides)])
        placed = _place(b, spread, [k * d - lo for k, d, lo in zip(offset, dilations, begin, strict=True)], image)
        image_out = placed if image_out is None else b.op("rt.add", [image_out, placed])
    return image_out


def _place(b: Builder, x: Value, low, image) -> Value:
    """x's spatial dims moved to start at `low` in an image of size `image`: padded with zeros, or cropped."""
    high = [size - lo - extent for size, lo, extent in zip(image, low, x.type.shape[2:], strict=True)]
    return C.pad_signed(b, x, [0, 0, *low], [0, 0, *high])


# -- RoiAlign -------------------------------------------------------------------------------------------------------

ROI_ALIGN_MODES = ("avg", "max")
ROI_ALIGN_COORDINATES = ("half_pixel", "output_half_pixel")
TAPS_A_PIXEL = 6  # adaptive samples (over half a pixel apart) in a pixel's reach [p - 1, p + 1]: 4, one before, a spare


@handles("RoiAlign")
def _roi_align(n):
    """Bin (ph, pw) of roi r averages (or takes the max of) bilinear samples at start + p * bin + (i + 0.5) * bin /
    grid along each axis, as onnx's reference places them; a sample outside [-1, size] reads 0, one inside is
    clamped to the image."""
    x, rois, batch_indices, b = n(0), n(1), n(2), n.b
    mode = n.attr("mode", "avg")
    coordinates = n.attr("coordinate_transformation_mode", "half_pixel" if n.opset >= 16 else "output_half_pixel")
    if mode not in ROI_ALIGN_MODES or coordinates not in ROI_ALIGN_COORDINATES:
        raise UnsupportedOpError(f"RoiAlign mode '{mode}' with coordinate_transformation_mode '{coordinates}' is "
                                 f"not defined", hint=f"modes: {', '.join(ROI_ALIGN_MODES)}; coordinate modes: "
                                                      f"{', '.join(ROI_ALIGN_COORDINATES)}")
    ratio = n.attr("sampling_ratio", 0)
    if ratio <= 0 and mode == "max":  # a negative ratio is adaptive too, as in onnx's reference and torchvision
        raise UnsupportedOpError("RoiAlign's max mode with sampling_ratio 0 (a sample count that depends on each "
                                 "roi's size) is not supported",
                                 hint="give the node a sampling_ratio > 0 (2 is torchvision's Mask R-CNN's); avg "
                                      "mode supports 0")
    if x.type.rank != 4 or rois.type.rank != 2 or rois.type.shape[1] != 4:
        raise InputError(f"RoiAlign of X {x.type} at rois {rois.type}: X must be [N, C, H, W], rois [R, 4]")
    _static(n, x, (1, 2, 3), "X's channels, height and width")
    out = (n.attr("output_height", 1), n.attr("output_width", 1))
    wide = C.widen(b, x)
    corners = rois if rois.type.dtype == wide.type.dtype else b.op("rt.cast", [rois], {"dtype": wide.type.dtype.name})
    half = 0.5 if coordinates == "half_pixel" else 0.0
    scale = C.scalar(b, n.attr("spatial_scale", 1.0), wide)
    count = rois.type.shape[0]

    def corner(k):  # roi coordinate k (x1, y1, x2, y2) scaled, as [R, 1, 1]
        v = _reshape(b, C.slice_axis(b, corners, 1, k, k + 1), (count, 1, 1))
        return b.op("rt.sub", [b.op("rt.mul", [v, scale]), C.scalar(b, half, v)])

    axes = []  # (start, length) a spatial axis, y first
    for k in (1, 0):
        start = corner(k)
        length = b.op("rt.sub", [corner(k + 2), start])
        axes.append((start, length if half else C.clamp(b, length, lo=1.0)))  # output_half_pixel: at least 1x1
    batch_index = b.op("rt.cast", [batch_indices], {"dtype": C.index_type(math.prod(x.type.shape))})
    if ratio > 0:
        y = _sampled_bins(b, wide, batch_index, [_fixed_samples(b, start, length, o, size, ratio)
                                                 for (start, length), o, size in zip(axes, out, x.type.shape[2:])],
                          mode)
    else:
        y = _adaptive_average(b, wide, batch_index, axes, out)
    return C.narrow_to(b, y, x)


def _sample_positions(b: Builder, start: Value, length: Value, bins: int, grid, sample: Value, rank: int) -> Value:
    """start + p * bin + ((i + 0.5) * bin) / grid, as onnx's reference sums it, for bin p along axis 1 of a
    rank-`rank` tensor and sample index `sample`."""
    bin_size = b.op("rt.div", [length, C.scalar(b, bins, length)])
    bin_index = b.op("rt.iota", [], {"shape": (1, bins) + (1,) * (rank - 2), "axis": 1,
                                     "dtype": length.type.dtype.name})
    first = b.op("rt.add", [start, b.op("rt.mul", [bin_index, bin_size])])
    within = b.op("rt.mul", [b.op("rt.add", [sample, C.scalar(b, 0.5, sample)]), bin_size])
    return b.op("rt.add", [first, b.op("rt.div", [within, grid])])


def _taps(b: Builder, position: Value, size: int, keep: Value | None):
    """(low, high, weight of low, weight of high) of bilinear samples along an axis of `size`, as RoiAlign reads
    them: a position outside [-1, size] (or not `keep`) weighs 0; one inside is clamped to [0, size - 1]. The
    indices are floats (whole numbers)."""
    def const(v):
        return C.scalar(b, v, position)

    inside = b.op("rt.and", [b.op("rt.cmp", [position, const(-1)], {"predicate": "ge"}),
                             b.op("rt.cmp", [position, const(size)], {"predicate": "le"})])
    keep = inside if keep is None else b.op("rt.and", [inside, keep])
    floor = b.op("rt.floor", [b.op("rt.max", [position, const(0)])])
    at_edge = b.op("rt.cmp", [floor, const(size - 1)], {"predicate": "ge"})
    low = b.op("rt.select", [at_edge, const(size - 1), floor])
    high = b.op("rt.min", [b.op("rt.add", [low, const(1)]), const(size - 1)])
    fraction = b.op("rt.select", [at_edge, const(0), b.op("rt.sub", [b.op("rt.max", [position, const(0)]), floor])])
    weights = [b.op("rt.select", [keep, w, const(0)]) for w in (b.op("rt.sub", [const(1), fraction]), fraction)]
    return low, high, *weights


def _fixed_samples(b: Builder, start: Value, length: Value, bins: int, size: int, ratio: int):
    """`_taps` of `ratio` samples a bin, [R, bins, ratio]."""
    sample = b.op("rt.iota", [], {"shape": (1, 1, ratio), "axis": 2, "dtype": length.type.dtype.name})
    position = _sample_positions(b, start, length, bins, C.scalar(b, ratio, length), sample, 3)
    return _taps(b, position, size, None)


def _sampled_bins(b: Builder, x: Value, batch_index: Value, samples, mode: str) -> Value:
    """x [N, C, H, W] read at each roi's samples (per axis `_taps` [R, bins, ratio]) by one gather a tap pair,
    the weighted taps summed (avg: then averaged over the ratio x ratio samples) or their largest taken (max)."""
    n, c, h, w = x.type.shape
    (y_low, y_high, *y_weights), (x_low, x_high, *x_weights) = samples
    count, (out_h, ratio_h), (out_w, ratio_w) = batch_index.type.shape[0], y_low.type.shape[1:], x_low.type.shape[1:]
    dtype = batch_index.type.dtype.name
    plane = b.op("rt.add", [b.op("rt.mul", [_reshape(b, batch_index, (count, 1)), C.scalar(b, c, batch_index)]),
                            b.op("rt.iota", [], {"shape": (1, c), "axis": 1, "dtype": dtype})])
    plane = b.op("rt.mul", [_reshape(b, plane, (count, c, 1, 1, 1, 1)), C.scalar(b, h * w, batch_index)])
    flat = _reshape(b, x, (n * c * h * w,))

    def rows(v):
        return _reshape(b, v, (count, 1, out_h, ratio_h, 1, 1))

    def cols(v):
        return _reshape(b, v, (count, 1, 1, 1, out_w, ratio_w))

    def index(v, stride):
        v = b.op("rt.cast", [v], {"dtype": dtype})
        return v if stride == 1 else b.op("rt.mul", [v, C.scalar(b, stride, v)])

    combine = "rt.add" if mode == "avg" else "rt.max"
    total = None
    for y_tap, y_weight in zip((y_low, y_high), y_weights, strict=True):
        for x_tap, x_weight in zip((x_low, x_high), x_weights, strict=True):
            linear = b.op("rt.add", [b.op("rt.add", [plane, rows(index(y_tap, w))]), cols(index(x_tap, 1))])
            value = b.op("rt.mul", [b.op("rt.gather", [flat, linear], {"axis": 0}),
                                    b.op("rt.mul", [rows(y_weight), cols(x_weight)])])
            total = value if total is None else b.op(combine, [total, value])
    pooled = b.op("rt.reduce", [total], {"kind": "sum" if mode == "avg" else "max", "axes": (3, 5),
                                         "keepdims": False})
    if mode == "max":
        return pooled
    return b.op("rt.div", [pooled, C.scalar(b, ratio_h * ratio_w, pooled)])


def _adaptive_average(b: Builder, x: Value, batch_index: Value, axes, out) -> Value:
    """avg mode with ceil(bin) samples a bin (sampling_ratio 0): per axis a weight matrix [R, bins, size] (the
    sum of the bin's samples' bilinear weights on each pixel), then x[batch] contracted with both and divided by
    the roi's sample count, max(grid_h * grid_w, 1). x's batch is picked by folding a one-hot of batch_indices
    into the first contraction."""
    n, c, h, w = x.type.shape
    count = batch_index.type.shape[0]
    (rows, grid_h), (cols, grid_w) = (_weight_matrix(b, start, length, bins, size)
                                      for (start, length), bins, size in zip(axes, out, (h, w), strict=True))
    one_hot = b.op("rt.cmp", [_reshape(b, batch_index, (count, 1)),
                              b.op("rt.iota", [], {"shape": (1, n), "axis": 1, "dtype": batch_index.type.dtype.name})],
                   {"predicate": "eq"})
    one_hot = b.op("rt.select", [one_hot, C.scalar(b, 1, x), C.scalar(b, 0, x)])
    rows = b.op("rt.mul", [_reshape(b, rows, (count, out[0], 1, h)), _reshape(b, one_hot, (count, 1, n, 1))])
    image = _reshape(b, b.op("rt.transpose", [x], {"perm": (0, 2, 1, 3)}), (n * h, c * w))
    by_rows = b.op("rt.matmul", [_reshape(b, rows, (count * out[0], n * h)), image])
    by_rows = b.op("rt.transpose", [_reshape(b, by_rows, (count, out[0], c, w))], {"perm": (0, 2, 1, 3)})
    pooled = b.op("rt.matmul", [by_rows, _reshape(b, b.op("rt.transpose", [cols], {"perm": (0, 2, 1)}),
                                                  (count, 1, w, out[1]))])
    samples = C.clamp(b, _reshape(b, b.op("rt.mul", [grid_h, grid_w]), (count, 1, 1, 1)), lo=1.0)
    return b.op("rt.div", [pooled, samples])


def _weight_matrix(b: Builder, start: Value, length: Value, bins: int, size: int):
    """(weights [R, bins, size], grid [R, 1, 1]) of an axis with grid = ceil(bin) samples a bin: for each pixel,
    the `TAPS_A_PIXEL` samples from the last one before its reach [p - 1, p + 1] (those past the bin's grid weigh
    nothing)."""
    def as4(v):
        return _reshape(b, v, (v.type.shape[0], 1, 1, 1))

    start, length = as4(start), as4(length)
    bin_size = b.op("rt.div", [length, C.scalar(b, bins, length)])
    grid = b.op("rt.ceil", [bin_size])
    dtype = length.type.dtype.name
    pixel = b.op("rt.iota", [], {"shape": (1, 1, size, 1), "axis": 2, "dtype": dtype})
    bin_start = b.op("rt.add", [start, b.op("rt.mul", [b.op("rt.iota", [], {"shape": (1, bins, 1, 1), "axis": 1,
                                                                             "dtype": dtype}), bin_size])])
    reach = b.op("rt.sub", [b.op("rt.sub", [pixel, C.scalar(b, 1, pixel)]), bin_start])
    before = b.op("rt.sub", [b.op("rt.div", [b.op("rt.mul", [reach, grid]), bin_size]), C.scalar(b, 0.5, reach)])
    first = C.clamp(b, b.op("rt.floor", [before]), lo=0)
    sample = b.op("rt.add", [first, b.op("rt.iota", [], {"shape": (1, 1, 1, TAPS_A_PIXEL), "axis": 3,
                                                          "dtype": dtype})])
    exists = b.op("rt.cmp", [sample, grid], {"predicate": "lt"})
    low, high, low_weight, high_weight = _taps(b, _sample_positions(b, start, length, bins, grid, sample, 4), size,
                                               exists)
    zero = C.scalar(b, 0, low_weight)
    weight = b.op("rt.add", [b.op("rt.select", [b.op("rt.cmp", [low, pixel], {"predicate": "eq"}), low_weight, zero]),
                             b.op("rt.select", [b.op("rt.cmp", [high, pixel], {"predicate": "eq"}), high_weight,
                                                zero])])
    weights = b.op("rt.reduce", [weight], {"kind": "sum", "axes": (3,), "keepdims": False})
    return weights, _reshape(b, grid, (grid.type.shape[0], 1, 1))


# -- DeformConv -----------------------------------------------------------------------------------------------------

@handles("DeformConv")
def _deform_conv(n):
    """A convolution whose kernel taps read X at positions moved by `offset` (bilinear, corners outside the image
    reading 0) and scaled by `mask`, as onnx's reference and torchvision's deform_conv2d: the deformed columns
    (`_deformed_columns`), one grouped matrix product with W (reordered to the columns' channel-last order), plus
    B."""
    x, w, offset, b = n(0), n(1), n(2), n.b
    if x.type.rank != 4:
        raise UnsupportedOpError(f"DeformConv of X {x.type}: only 2-D (X [N, C, H, W]) is supported",
                                 hint="onnx's reference and onnxruntime define 2-D only")
    if w.type.rank != 4 or offset.type.rank != 4:
        raise InputError(f"DeformConv of X {x.type}, W {w.type} and offset {offset.type}: W must be [M, C / group, "
                         "kh, kw] and offset [N, offset_group * kh * kw * 2, oH, oW]")
    _static(n, x, (1, 2, 3), "X's channels, height and width")
    _static(n, w, range(4), "W's sizes")
    channels, height, width = x.type.shape[1:]
    outputs = w.type.shape[0]
    kernel = tuple(int(k) for k in n.attr("kernel_shape", w.type.shape[2:]))
    strides = tuple(n.attr("strides", (1, 1)))
    dilations = tuple(n.attr("dilations", (1, 1)))
    pads = tuple(n.attr("pads", (0, 0, 0, 0)))
    group, offset_group = n.attr("group", 1), n.attr("offset_group", 1)
    if (len(kernel), len(strides), len(dilations), len(pads)) != (2, 2, 2, 4):
        raise InputError(f"DeformConv of X {x.type}: kernel_shape {list(kernel)}, strides {list(strides)}, "
                         f"dilations {list(dilations)} and pads {list(pads)} must hold 2, 2, 2 and 4 values")
    taps = math.prod(kernel)
    out = tuple((size + pads[d] + pads[d + 2] - dilations[d] * (kernel[d] - 1) - 1) // strides[d] + 1
                for d, size in enumerate((height, width)))
    mask = n(4) if n.has(4) else None
    for v in (offset, mask):  # a batch symbol of their own (an exporter's unnamed axis) is X's
        if v is not None and v.type.shape[0] != x.type.shape[0]:
            b.unify(v.type.shape[0], x.type.shape[0])
    batch = x.type.shape[0]
    wanted = {"W": (w, (outputs, channels // group, *kernel)),
              "offset": (offset, (batch, offset_group * taps * 2, *out)),
              "mask": (mask, (batch, offset_group * taps, *out))}
    wrong = [f"{name} {v.type} (not {list(shape)})" for name, (v, shape) in wanted.items()
             if v is not None and v.type.shape != shape]
    if min(out) < 1 or channels % group or outputs % group or channels % offset_group or wrong:
        why = "; ".join(wrong) or "the kernel must fit the padded image, and group and offset_group divide the channels"
        raise InputError(f"DeformConv of X {x.type} with group {group}, offset_group {offset_group}, kernel_shape "
                         f"{list(kernel)}, strides {list(strides)}, dilations {list(dilations)} and pads "
                         f"{list(pads)}: {why}",
                         hint="offset holds (y, x) a kernel tap and offset group, mask one value each")
    wide = C.widen(b, x)

    def as_wide(v):
        return v if v.type.dtype == wide.type.dtype else b.op("rt.cast", [v], {"dtype": wide.type.dtype.name})

    run = math.gcd(channels // group, channels // offset_group)  # adjacent channels of one offset and conv group
    columns = _deformed_columns(b, wide, as_wide(offset), None if mask is None else as_wide(mask), kernel, strides,
                                dilations, pads[:2], out, offset_group, group, run)
    per_group = channels // group
    filters = _reshape(b, as_wide(w), (group, outputs // group, per_group // run, run, taps))
    filters = _reshape(b, b.op("rt.transpose", [filters], {"perm": (0, 2, 4, 3, 1)}),
                       (group, per_group * taps, outputs // group))
    y = b.op("rt.transpose", [b.op("rt.matmul", [columns, filters])], {"perm": (0, 1, 3, 2)})
    y = _reshape(b, y, (batch, outputs, *out))
    if n.has(3):
        y = b.op("rt.add", [y, C.channel_vector(b, as_wide(n(3)), 4)])
    return C.narrow_to(b, y, x)


def _deformed_columns(b: Builder, x: Value, offset: Value, mask: Value | None, kernel, strides, dilations, begin,
                      out, offset_groups: int, groups: int, run: int) -> Value:
    """im2col with deformed taps, channel-last: [N, group, oH * oW, (C / group / run, kh * kw, run)], channel c at
    tap k and output position p reading x bilinearly at p * stride - begin + k * dilation + the offset of c's group
    at k and p. x is laid out as rows of `run` channels a pixel, so each of the four corners is one gather of whole
    rows (contiguous, unlike a gather a channel). A corner outside the image weighs 0. Positions and weights are
    computed once an offset group, tap and output position, in [N, oH * oW, G, 1, kh * kw]."""
    batch, channels, height, width = x.type.shape
    taps, length, pixels = math.prod(kernel), out[0] * out[1], height * width
    blocks, per_offset_group = channels // run, channels // offset_groups // run
    rows = x if run == 1 else b.op("rt.transpose", [_reshape(b, x, (batch, blocks, run, pixels))],
                                   {"perm": (0, 1, 3, 2)})
    rows = _reshape(b, rows, (batch * blocks * pixels, run))
    offset = b.op("rt.transpose", [_reshape(b, offset, (batch, offset_groups, taps, 2, length))],
                  {"perm": (0, 3, 4, 1, 2)})
    spot = (batch, length, offset_groups, 1, taps)
    if mask is not None:
        mask = b.op("rt.transpose", [_reshape(b, mask, (batch, offset_groups, taps, length))], {"perm": (0, 3, 1, 2)})
        mask = _reshape(b, mask, spot)
    dtype = C.index_type(math.prod(x.type.shape))
    corners = []  # per axis (y, x): [(index, weight)] of the low and the high corner
    for axis, size in enumerate((height, width)):
        tap = np.arange(taps) // kernel[1] if axis == 0 else np.arange(taps) % kernel[1]
        line = np.arange(length) // out[1] if axis == 0 else np.arange(length) % out[1]
        base = b.op("rt.add", [_along(b, tap * dilations[axis], 4, 5, x),
                               _along(b, line * strides[axis] - begin[axis], 1, 5, x)])
        position = b.op("rt.add", [_reshape(b, C.slice_axis(b, offset, 1, axis, axis + 1), spot), base])
        low = b.op("rt.floor", [position])
        fraction = b.op("rt.sub", [position, low])
        low = b.op("rt.cast", [low], {"dtype": dtype})  # once an axis: the corners are integers from here
        pair = []
        for corner, weight in ((low, b.op("rt.sub", [C.scalar(b, 1, fraction), fraction])),
                               (b.op("rt.add", [low, C.scalar(b, 1, low)]), fraction)):
            inside = b.op("rt.and", [b.op("rt.cmp", [corner, C.scalar(b, 0, corner)], {"predicate": "ge"}),
                                     b.op("rt.cmp", [corner, C.scalar(b, size - 1, corner)], {"predicate": "le"})])
            index = C.clamp(b, corner, 0, size - 1)
            weight = b.op("rt.select", [inside, weight, C.scalar(b, 0, weight)])
            if axis == 0:  # the row: its linear stride, and the mask folded into its weight
                index = b.op("rt.mul", [index, C.scalar(b, width, index)])
                weight = weight if mask is None else b.op("rt.mul", [weight, mask])
            pair.append((index, weight))
        corners.append(pair)
    image = b.op("rt.iota", [], {"shape": (batch, 1, 1, 1, 1), "axis": 0, "dtype": dtype})
    first_row = b.op("rt.add", [b.op("rt.mul", [image, C.scalar(b, blocks * pixels, image)]),
                                b.constant((np.arange(blocks) * pixels).astype(image.type.dtype.np_dtype)
                                           .reshape(1, 1, offset_groups, per_offset_group, 1))])
    total = None
    for (row, row_weight), (column, column_weight) in itertools.product(*corners):
        linear = _by_conv_group(b, b.op("rt.add", [first_row, b.op("rt.add", [row, column])]), groups)
        weight = _by_conv_group(b, b.op("rt.mul", [row_weight, column_weight]), groups, per_offset_group)
        value = b.op("rt.mul", [b.op("rt.gather", [rows, linear], {"axis": 0}),
                                _reshape(b, weight, (*weight.type.shape, 1))])
        total = value if total is None else b.op("rt.add", [total, value])
    return _reshape(b, total, (batch, groups, length, channels // groups * taps))


def _by_conv_group(b: Builder, v: Value, groups: int, broadcast: int = 1) -> Value:
    """[N, L, G, C / G / run (or 1, broadcast), K] -> [N, group, L, C / group / run, K], the order the columns keep
    (unchanged for one conv group, where the product broadcasts)."""
    if groups == 1:
        return v
    batch, length, offset_groups, _, taps = v.type.shape
    if broadcast > 1:
        v = b.op("rt.broadcast", [v], {"shape": (batch, length, offset_groups, broadcast, taps)})
    v = _reshape(b, v, (batch, length, groups, offset_groups * v.type.shape[3] // groups, taps))
    return b.op("rt.transpose", [v], {"perm": (0, 2, 1, 3, 4)})


# -- TensorScatter --------------------------------------------------------------------------------------------------

TENSOR_SCATTER_MODES = ("linear", "circular")


@handles("TensorScatter")
def _tensor_scatter(n):
    """Cache position p of batch b takes update[..., p - w[b], ...] where 0 <= p - w[b] < the update's length
    (circular: p - w[b] modulo the cache's length), else keeps the cache's value."""
    cache, update, b = n(0), n(1), n.b
    rank, mode = cache.type.rank, n.attr("mode", "linear")
    axis = C.normalize_axis(n.attr("axis", -2), rank)
    if mode not in TENSOR_SCATTER_MODES:
        raise UnsupportedOpError(f"TensorScatter mode '{mode}' is not defined",
                                 hint=f"modes: {', '.join(TENSOR_SCATTER_MODES)}")
    if not 0 < axis < rank or update.type.rank != rank:
        raise InputError(f"TensorScatter of {update.type} into {cache.type} along axis {n.attr('axis', -2)}: the "
                         "axis must not be 0 (the batch) and the two must have one rank")
    _static(n, cache, (axis,), "the cache's length")
    _static(n, update, (axis,), "the update's length")
    length, written = cache.type.shape[axis], update.type.shape[axis]
    if written > length:
        raise InputError(f"TensorScatter's update {update.type} is longer than the cache {cache.type} along axis "
                         f"{axis}")
    if not n.has(2):  # every batch writes from 0: the update, then the rest of the cache
        if written == length:
            return update
        return b.op("rt.concat", [update, C.slice_axis(b, cache, axis, written, length)], {"axis": axis})
    batch = cache.type.shape[0]
    starts = _reshape(b, n(2), (batch, 1))
    position = b.op("rt.iota", [], {"shape": (1, length), "axis": 1, "dtype": starts.type.dtype.name})
    offset = b.op("rt.sub", [position, starts])
    if mode == "circular":
        offset = C.floor_mod(b, offset, C.scalar(b, length, offset))
    written_here = b.op("rt.and", [b.op("rt.cmp", [offset, C.scalar(b, 0, offset)], {"predicate": "ge"}),
                                   b.op("rt.cmp", [offset, C.scalar(b, written, offset)], {"predicate": "lt"})])
    along = (batch,) + tuple(length if d == axis else 1 for d in range(1, rank))
    source = b.op("rt.cast", [C.clamp(b, offset, 0, written - 1)], {"dtype": "i32"})
    source = b.op("rt.broadcast", [_reshape(b, source, along)], {"shape": cache.type.shape})
    taken = C.take_along_axis(b, update, source, axis)
    return b.op("rt.select", [_reshape(b, written_here, along), taken, cache])
