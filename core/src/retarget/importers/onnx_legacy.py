"""ONNX's older op versions: opsets 7 to 10, and any older version whose meaning has not changed since.

The handlers read each op as opset 11 and later define it. A node is read by the version its model's opset gives
it (`onnx.defs`): an older version whose meaning the handlers already read passes as it is (`SAME_SINCE`: only
types, attributes' defaults or negative axes were added since); the versions that differ have handlers of their
own (`OLD_VERSIONS`, here and in the op families' modules):

- Clip-6's `min` and `max`, Pad-2's `pads` and `value`, Slice-1's `starts`, `ends` and `axes`, TopK-1's `k`:
  attributes that later became inputs, read as the newer handler with those inputs given as constants.
- Upsample-7 and -9 and Resize-10: `asymmetric` coordinates, computed in f32 as onnxruntime computes them: output
  size floor(size * scale); nearest mode takes the source pixel below where an axis grows and above where it
  shrinks; linear mode mixes the two pixels around the source position, clamped at the last. onnx's version
  converter rewrites these into a `half_pixel` Resize, which gives other numbers in linear mode.
- BatchNormalization-7: `spatial=0` (statistics for each activation, not each channel).
- Scan-8: a batch axis first and `sequence_lens`; one opset-9 Scan for each batch element, restacked
  (`onnx_control`).
- Scatter-9: ScatterElements (Scatter-11 is deprecated, and refused as onnxruntime refuses it).
- The experimental ops of opsets 1 to 9 that onnxruntime still runs, as it computes them (onnx no longer defines
  them): ImageScaler (x * scale + bias[channel]; Tiny YOLOv2 begins with one), Affine, Scale, ScaledTanh,
  ParametricSoftplus, Crop, ThresholdedRelu (as opset 10's) and MeanVarianceNormalization-1 (over axes 0, 2 and 3,
  or all four with `across_channels`: the batch too, as onnxruntime computes it).

Any other older version is refused, naming the op, its version and what to do.
"""

from __future__ import annotations

import functools

import numpy as np

from ..errors import UnsupportedOpError
from ..ir.core import Value
from ..ir.symbolic import Sym
from . import compose as C
from .onnx import _REDUCE_OPS, HANDLERS, OLD_VERSIONS, SHAPE_OPERANDS, _Node, handles_old

SHAPE_OPERANDS["Upsample"] = (1,)  # opset 9's scales
READ_FROM = 11  # the opset whose op versions the handlers read
MIN_OPSET = 7  # the oldest opset every claimed op's version is read at (checked by the tests)

SAME_SINCE = {  # op -> its oldest version the handlers read as they read opset 11's
    **dict.fromkeys(["ArgMax", "ArgMin", "AveragePool", "Constant", "Conv", "ConvTranspose", "DepthToSpace",
                     "Flatten", "Gather", "Hardmax", "If", "LogSoftmax", "Loop", "MatMul", "MaxPool", "Softmax",
                     "Squeeze", "Unsqueeze", *_REDUCE_OPS], 1),
    "GlobalLpPool": 2, "LpPool": 2, "Split": 2, "Concat": 4,
    "Cast": 6, "Max": 6, "Mean": 6, "Min": 6, "Sum": 6,
    "Dropout": 7, "Equal": 7, "Gemm": 7, "Greater": 7, "Less": 7, "PRelu": 7,
    "Compress": 9, "MaxUnpool": 9, "OneHot": 9, "Scan": 9,
    "NonMaxSuppression": 10, "Slice": 10, "TopK": 10,
}
DEPRECATED_HINTS = {"Upsample": "since opset 10, Resize does what Upsample did: re-export with Resize",
                    "Scatter": "since opset 11, ScatterElements does what Scatter did: re-export with it"}


@functools.cache
def _schema(op: str, opset: int):
    """onnx's schema of default-domain `op` at `opset` (past onnx's newest opset: at its newest), or None where
    onnx knows no such op there."""
    import onnx.defs

    if not isinstance(op, str):  # an op type that is not UTF-8 text (protobuf hands it over as bytes)
        return None
    try:
        return onnx.defs.get_schema(op, min(opset, onnx.defs.onnx_opset_version()), "")
    except onnx.defs.SchemaError:
        return None
    except TypeError:  # text that is not UTF-8 (a lone surrogate) reaches onnx's C++ as no string at all
        return None


def since_version(op: str, opset: int) -> int | None:
    """The version of default-domain `op` that `opset` holds, or None where onnx knows no such op there."""
    schema = _schema(op, opset)
    return schema.since_version if schema is not None else None


def handler_for(op: str, opset: int, current, where: str):
    """The handler of `op`'s version at `opset`: `current` (HANDLERS') where the handlers read that version, else
    one of OLD_VERSIONS'; an older version read by neither is refused."""
    version = since_version(op, opset)
    old = OLD_VERSIONS.get(op, {})
    if version is None:  # an experimental op gone from onnx (ImageScaler), or one the opset does not hold yet
        if 0 in old or since_version(op, READ_FROM - 1) is None:  # the latter: a newer op, read as it is
            return old.get(0, current)
        raise UnsupportedOpError(f"ONNX op '{op}' ({where}) is not defined at the model's opset {opset} (it is from "
                                 f"opset {_first_opset(op)})",
                                 hint=f"import the opset that defines it, {_first_opset(op)} or later")
    if version in old:
        return old[version]
    if current is None and _schema(op, opset).deprecated:
        raise UnsupportedOpError(f"ONNX op '{op}' ({where}) is deprecated at the model's opset {opset}",
                                 hint=DEPRECATED_HINTS.get(op, "re-export the model without it"))
    newest_read = since_version(op, max(opset, READ_FROM))
    if current is None or version >= newest_read or version >= SAME_SINCE.get(op, newest_read):
        return current
    read = sorted({*old, SAME_SINCE.get(op, newest_read)})
    raise UnsupportedOpError(
        f"ONNX op '{op}' ({where}) is version {version} at the model's opset {opset}, which the onnx importer does "
        f"not read (it reads {op} from version{'s' if len(read) > 1 else ''} {', '.join(map(str, read))})",
        hint=f"re-export the model at opset {MIN_OPSET} or later, or convert it to opset {MIN_OPSET}: "
             f"onnx.version_converter.convert_version(model, {MIN_OPSET}) (the least rewriting: its adapters to "
             "later opsets turn Upsample into a Resize that computes other numbers)")


def _first_opset(op: str) -> int:
    return next(v for v in range(1, READ_FROM) if since_version(op, v) is not None)


def reads(op: str, opset: int) -> bool:
    """Whether the importer reads default-domain `op` in a model of `opset`."""
    try:
        return handler_for(op, opset, HANDLERS.get(op), "") is not None
    except UnsupportedOpError:
        return False


# -- attributes that became inputs ------------------------------------------------------------------------------


def _as_newer(n, op: str, inputs: list, drop: tuple = (), **attrs):
    """Node `n` read by `op`'s current handler, with `inputs` (tensor names, arrays given as constants, or None
    for an input left out), and n's attributes but those in `drop`, and `attrs`."""
    from onnx import helper

    names = []
    for k, v in enumerate(inputs):
        if isinstance(v, np.ndarray):
            name = f"{n.node.output[0]}::{op}.input{k}"  # '::' is in no exporter's tensor names
            n.cv.env[name] = v
            v = name
        names.append(v or "")
    node = helper.make_node(op, names, list(n.node.output), name=n.node.name, **attrs)
    node.attribute.extend(a for a in n.node.attribute if a.name not in drop)
    return HANDLERS[op](_Node(n.cv, node, n.b, n.fold))


def _np_dtype(n, i: int) -> np.dtype:
    v = n.cv.env[n.node.input[i]]
    return v.type.dtype.np_dtype if isinstance(v, Value) else v.dtype


@handles_old("Clip", 6)
def _clip_6(n):
    dtype = _np_dtype(n, 0)
    bounds = [np.asarray(n.attr(name), dtype) if n.attr(name) is not None else None for name in ("min", "max")]
    return _as_newer(n, "Clip", [n.node.input[0], *bounds], drop=("min", "max"))


@handles_old("Pad", 2)
def _pad_2(n):
    pads = np.asarray(n.attr("pads"), dtype=np.int64)
    value = np.asarray(n.attr("value", 0.0), _np_dtype(n, 0))
    return _as_newer(n, "Pad", [n.node.input[0], pads, value], drop=("pads", "value"))


@handles_old("Slice", 1)
def _slice_1(n):
    bounds = [np.asarray(n.attr(name), dtype=np.int64) for name in ("starts", "ends")]
    axes = np.asarray(n.attr("axes"), dtype=np.int64) if n.attr("axes") is not None else None
    return _as_newer(n, "Slice", [n.node.input[0], *bounds, axes], drop=("starts", "ends", "axes"))


@handles_old("TopK", 1)
def _top_k_1(n):
    return _as_newer(n, "TopK", [n.node.input[0], np.asarray([n.attr("k")], dtype=np.int64)], drop=("k",))


@handles_old("Scatter", 9)
def _scatter(n):
    return _as_newer(n, "ScatterElements", list(n.node.input))


# -- Upsample and Resize-10 -------------------------------------------------------------------------------------


@handles_old("Upsample", 7, 9)
@handles_old("Resize", 10)
def _upsample(n):
    """onnxruntime's arithmetic for these versions, in f32 (onnx's reference runs only whole scales of them)."""
    x = n(0)
    op, mode = n.node.op_type, n.attr("mode", "nearest")
    if mode not in ("nearest", "linear"):
        raise UnsupportedOpError(f"{op} mode {mode!r} is not supported", hint="modes nearest and linear are")
    scales = n.attr("scales") if op == "Upsample" and not n.has(1) else n.known(1, "scales")
    scales = np.asarray(scales, dtype=np.float32).reshape(-1)
    if scales.size != x.type.rank:
        raise UnsupportedOpError(f"{op} of {x.type} has {scales.size} scales; it takes one for each axis")
    if mode == "linear" and not x.type.dtype.is_float:
        raise UnsupportedOpError(f"linear {op} of {x.type.dtype} is not supported", hint="resize a float tensor")
    for axis, scale in enumerate(scales):
        size = x.type.shape[axis]
        if scale == 1:
            continue
        if isinstance(size, Sym) or not scale > 0:
            raise UnsupportedOpError(f"{op} of {x.type} by {scales.tolist()}: axis {axis} must have a static size "
                                     "and a positive scale", hint="resize only axes of static size")
        out = int(np.float32(size) * scale)
        if out == 0:
            raise UnsupportedOpError(f"{op} of {x.type} by {scales.tolist()} leaves axis {axis} empty")
        position = np.arange(out, dtype=np.float32) / scale
        if mode == "nearest":
            index = np.floor(position) if scale >= 1 else np.ceil(position)
            x = C.resample(n.b, x, axis, np.minimum(index, size - 1).astype(np.int64))
        else:
            position = np.minimum(position, np.float32(size - 1))
            low = np.floor(position).astype(np.int64)
            x = C.resample(n.b, x, axis, low, np.minimum(low + 1, size - 1), position - low)
    return x


def _times(n, x: Value, factor) -> Value:
    return n.b.op("rt.mul", [x, C.scalar(n.b, factor, x)])


# -- BatchNormalization-7, ImageScaler --------------------------------------------------------------------------


@handles_old("BatchNormalization", 7)
def _batch_norm_7(n):
    if n.attr("spatial", 1):
        return _as_newer(n, "BatchNormalization", list(n.node.input), drop=("spatial",))
    if n.n_outputs() > 1:
        raise UnsupportedOpError("BatchNormalization-7 in training (its running statistics as outputs) is not "
                                 "supported", hint="export the model in inference mode")
    # spatial=0: every statistic has the shape of one sample, [C, D1, ...], broadcast over the batch
    return C.batch_norm(n.b, *(n(i) for i in range(5)), n.attr("epsilon", 1e-5), per_channel=False)


@handles_old("ImageScaler", 0)
def _image_scaler(n):
    x = n(0)
    bias = n.b.constant(np.asarray(n.attr("bias", [0.0] * x.type.shape[1]), dtype=x.type.dtype.np_dtype))
    return n.b.op("rt.add", [_times(n, x, n.attr("scale", 1.0)), C.channel_vector(n.b, bias, x.type.rank)])


# -- the experimental ops of opsets 1 to 9, as onnxruntime computes them ----------------------------------------


@handles_old("Affine", 0)
def _affine(n):
    x = n(0)
    return n.b.op("rt.add", [_times(n, x, n.attr("alpha", 1.0)), C.scalar(n.b, n.attr("beta", 0.0), x)])


@handles_old("Scale", 0)
def _scale(n):
    return _times(n, n(0), n.attr("scale", 1.0))


@handles_old("ScaledTanh", 0)
def _scaled_tanh(n):
    return _times(n, n.b.op("rt.tanh", [_times(n, n(0), n.attr("beta", 1.0))]), n.attr("alpha", 1.0))


@handles_old("ParametricSoftplus", 0)
def _parametric_softplus(n):
    return _times(n, C.softplus(n.b, _times(n, n(0), n.attr("beta", 1.0))), n.attr("alpha", 1.0))


@handles_old("Crop", 0)
def _crop(n):
    """`border` = (left, top, right, bottom) cut from an NCHW image; with `scale` = (height, width), that much is
    kept from the top left corner instead."""
    x = n(0)
    left, top, right, bottom = (int(v) for v in n.attr("border"))
    height, width = x.type.shape[2:]
    size = n.attr("scale")
    if size is not None:
        height, width = top + int(size[0]), left + int(size[1])
    else:
        height, width = height - bottom, width - right
    return C.slice_axis(n.b, C.slice_axis(n.b, x, 2, top, height), 3, left, width)


@handles_old("MeanVarianceNormalization", 0)
def _mean_variance_normalization_1(n):
    axes = [0, 1, 2, 3] if n.attr("across_channels", 0) else [0, 2, 3]
    if n.attr("normalize_variance", 1):
        return _as_newer(n, "MeanVarianceNormalization", [n.node.input[0]], ("across_channels", "normalize_variance"),
                         axes=axes)
    x = n(0)
    return n.b.op("rt.sub", [x, C.mean(n.b, x, tuple(axes), keepdims=True)])


handles_old("ThresholdedRelu", 0)(HANDLERS["ThresholdedRelu"])  # experimental before opset 10, and the same
