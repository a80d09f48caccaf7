"""ONNX's MaxPool with its Indices output (shared with the torch importer: `compose.max_pool_indices`, here with the
(n, c) plane's offset and storage_order) and MaxUnpool (`compose.max_unpool`), with and without its output_shape,
for what ONNX's own node tests leave out: 1-D and 3-D, dilations, asymmetric pads, ceil_mode, storage_order, ties,
unpooling a pool of a padded or odd-sized image, repeated indices; and which unpools read each position's own
window (linear: the Indices of a MaxPool of the graph with the same attributes, whose windows do not overlap, in the
shape the pool numbered) rather than scatter (quadratic). Each model is compiled for vmvx and llvm-cpu,
run, and compared with onnx's ReferenceEvaluator, or with onnxruntime where that evaluator is wrong: for MaxPool
with pads but unit strides and dilations it numbers Indices in the padded image, and MaxUnpool with an output_shape
larger than the one inferred from the kernel scatters in the inferred shape, then pads its end (as ONNX's node test
test_maxunpool_export_with_output_shape expects; onnx/onnx#2398), where onnxruntime and torch scatter into
output_shape itself, the shape of the pool's input, in which MaxPool numbered the indices."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import helper  # noqa: E402
from retarget.errors import UnsupportedOpError  # noqa: E402
from retarget.importers.onnx import OnnxImporter  # noqa: E402
from retarget.testing import onnx_cases  # noqa: E402
from retarget.testing.onnx_cases import graph_of  # noqa: E402

TARGETS = ["vmvx", "llvm-cpu"]


def randn(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def small_integers(*shape, seed=0):
    """Values in {0, 1, 2}: most windows hold the maximum more than once."""
    return np.random.default_rng(seed).integers(0, 3, shape).astype(np.float32)


def matches_reference(model, target, inputs: dict, onnxruntime: bool = False):
    """Maxima, indices and moved values: exact."""
    onnx_cases.matches_reference(model, target, inputs, rtol=0, onnxruntime=onnxruntime)


POOLS = {  # name: (x, MaxPool's attributes); onnx's reference evaluator is wrong for ONNXRUNTIME_INSTEAD
    "2-D, strides, pads and dilations": (randn(2, 3, 9, 10), dict(kernel_shape=[3, 3], strides=[2, 2],
                                                                  pads=[1, 1, 1, 1], dilations=[2, 2])),
    "2-D, asymmetric pads, ceil_mode, storage_order=1": (
        randn(1, 2, 8, 7), dict(kernel_shape=[2, 3], strides=[2, 1], pads=[0, 1, 1, 0], ceil_mode=1,
                                storage_order=1)),
    "2-D, auto_pad SAME_UPPER": (randn(2, 2, 7, 6), dict(kernel_shape=[3, 2], strides=[2, 2], auto_pad="SAME_UPPER")),
    "3-D, strides and pads": (randn(1, 2, 5, 7, 8), dict(kernel_shape=[2, 3, 2], strides=[1, 2, 2],
                                                         pads=[1, 1, 0, 0, 1, 0])),
    "1-D, strides and pads": (randn(2, 3, 11), dict(kernel_shape=[3], strides=[2], pads=[1, 1])),
    "ties: the first in window order": (small_integers(2, 3, 6, 7), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])),
    "-inf everywhere: the first position inside the image, never the padding": (
        np.full((1, 2, 6, 5), -np.inf, np.float32), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                                                         ceil_mode=1)),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", POOLS)
def test_max_pool_indices_match_the_reference(name, target):
    x, attrs = POOLS[name]
    model = graph_of([helper.make_node("MaxPool", ["x"], ["y", "i"], **attrs)], {"x": x}, ["y", "i"])
    matches_reference(model, target, {"x": x}, onnxruntime=name in ONNXRUNTIME_INSTEAD)


def pool_then_unpool(x, output_shape=None, between=None, unpool_attrs=None, **attrs):
    """MaxPool's values and indices, unpooled by MaxUnpool with the same kernel, strides and pads (or
    `unpool_attrs`); the values go through the op `between` first, where one is named."""
    if unpool_attrs is None:
        unpool_attrs = {k: v for k, v in attrs.items() if k in ("kernel_shape", "strides", "pads")}
    unpool_inputs = ["v" if between else "y", "i"] + (["shape"] if output_shape is not None else [])
    nodes = [helper.make_node("MaxPool", ["x"], ["y", "i"], **attrs),
             *([helper.make_node(between, ["y"], ["v"])] if between else []),
             helper.make_node("MaxUnpool", unpool_inputs, ["z"], **unpool_attrs)]
    constants = {"shape": np.array(output_shape, np.int64)} if output_shape is not None else {}
    return graph_of(nodes, {"x": x}, ["y", "i", "z"], constants)


UNPOOLS = {  # name: (x, output_shape or None, attributes of both, whether each position reads its own window)
    "2-D, without output_shape": (randn(2, 3, 6, 8), None, dict(kernel_shape=[2, 2], strides=[2, 2]), True),
    "2-D, output_shape: back to an odd size": (randn(2, 3, 7, 9), [2, 3, 7, 9],
                                               dict(kernel_shape=[2, 2], strides=[2, 2]), True),
    "2-D, ceil_mode and pads, output_shape: back to an odd size": (
        randn(2, 3, 7, 9), [2, 3, 7, 9], dict(kernel_shape=[2, 2], strides=[2, 2], pads=[1, 0, 0, 1], ceil_mode=1),
        True),
    "2-D, output_shape a column wider than the pool's input, which the indices number": (
        randn(1, 1, 6, 8), [1, 1, 6, 9], dict(kernel_shape=[2, 2], strides=[2, 2]), False),
    "2-D, overlapping windows: a repeated index carries one value": (
        small_integers(1, 2, 5, 6), None, dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1]), False),
    "2-D, storage_order=1: column-major indices": (
        randn(2, 3, 6, 8), None, dict(kernel_shape=[2, 2], strides=[2, 2], storage_order=1), False),
    "3-D with pads, output_shape": (randn(1, 2, 4, 6, 5), [1, 2, 4, 6, 5],
                                    dict(kernel_shape=[2, 2, 3], strides=[2, 2, 2], pads=[0, 1, 1, 0, 1, 0]), False),
    "3-D with pads and ceil_mode, windows that do not overlap, output_shape": (
        randn(1, 2, 5, 6, 7), [1, 2, 5, 6, 7],
        dict(kernel_shape=[2, 2, 2], strides=[2, 2, 2], pads=[1, 0, 1, 0, 0, 0], ceil_mode=1), True),
    "1-D, output_shape": (randn(2, 2, 9), [2, 2, 9], dict(kernel_shape=[2], strides=[2]), True),
}
ONNXRUNTIME_INSTEAD = ("ties: the first in window order",
                       "-inf everywhere: the first position inside the image, never the padding",
                       "2-D, output_shape: back to an odd size",
                       "2-D, ceil_mode and pads, output_shape: back to an odd size",
                       "2-D, output_shape a column wider than the pool's input, which the indices number",
                       "2-D, overlapping windows: a repeated index carries one value",
                       "3-D with pads, output_shape", "3-D with pads and ceil_mode, windows that do not overlap, "
                       "output_shape", "1-D, output_shape")


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", UNPOOLS)
def test_max_unpool_of_max_pool_matches_the_reference(name, target):
    x, output_shape, attrs, _ = UNPOOLS[name]
    matches_reference(pool_then_unpool(x, output_shape, **attrs), target, {"x": x},
                      onnxruntime=name in ONNXRUNTIME_INSTEAD)


def scatters(model) -> bool:
    """Whether the import of `model` holds a reduction: the composed scatter's (that an unpool reading its own
    windows has none is what makes it linear)."""
    return any(op.name == "rt.reduce" for op in OnnxImporter().load(model).functions["main"].ops)


@pytest.mark.parametrize("name", UNPOOLS)
def test_max_unpool_reads_its_own_window_only_where_the_indices_are_a_pools_that_do_not_overlap(name):
    x, output_shape, attrs, in_own_windows = UNPOOLS[name]
    assert scatters(pool_then_unpool(x, output_shape, **attrs)) is not in_own_windows


@pytest.mark.parametrize("target", TARGETS)
def test_max_unpool_with_other_attributes_than_its_pool_s_scatters(target):
    """The same windows stated differently (pads that only shrink the inferred shape, which output_shape sets)."""
    x = randn(2, 3, 6, 8)
    model = pool_then_unpool(x, [2, 3, 6, 8], unpool_attrs=dict(kernel_shape=[2, 2], strides=[2, 2],
                                                                pads=[0, 0, 1, 1]),
                             kernel_shape=[2, 2], strides=[2, 2])
    assert scatters(model)
    matches_reference(model, target, {"x": x}, onnxruntime=True)


SEGNET_SIZE = (1, 16, 224, 224)  # gather-shaped, the scatter would compare 16 x 50176 x 12544 pairs


@pytest.mark.parametrize("target", TARGETS)
def test_max_unpool_of_a_real_size_reads_the_pool_s_windows(target):
    x = randn(*SEGNET_SIZE)
    matches_reference(pool_then_unpool(x, list(SEGNET_SIZE), between="Neg", kernel_shape=[2, 2], strides=[2, 2]),
                      target, {"x": x}, onnxruntime=True)


def test_max_unpool_of_a_real_size_with_indices_from_elsewhere_is_the_scatter_kernel():
    """The unpool above with indices from a graph input: rt.scatter, linear in the updates (refused before)."""
    n, c, h, w = SEGNET_SIZE
    y, indices = randn(n, c, h // 2, w // 2), np.zeros((n, c, h // 2, w // 2), np.int64)
    model = graph_of([helper.make_node("MaxUnpool", ["y", "i"], ["z"], kernel_shape=[2, 2], strides=[2, 2])],
                     {"y": y, "i": indices}, ["z"])
    assert "rt.scatter" in {op.name for op in OnnxImporter().load(model).functions["main"].ops}


@pytest.mark.parametrize("target", TARGETS)
def test_max_unpool_of_repeated_indices_keeps_the_last_value(target):
    x = np.arange(1, 9, dtype=np.float32).reshape(2, 1, 2, 2)
    indices = np.array([[[[3, 0], [3, 15]]], [[[16, 16], [31, 20]]]], np.int64)  # over the whole [2, 1, 4, 4]
    model = graph_of([helper.make_node("MaxUnpool", ["x", "i"], ["z"], kernel_shape=[2, 2], strides=[2, 2])],
                     {"x": x, "i": indices}, ["z"])
    matches_reference(model, target, {"x": x, "i": indices})


def test_max_unpool_needs_its_output_shape_at_import_time():
    x = randn(1, 1, 2, 2)
    model = graph_of([helper.make_node("MaxUnpool", ["x", "i", "shape"], ["z"], kernel_shape=[2, 2], strides=[2, 2])],
                     {"x": x, "i": np.zeros((1, 1, 2, 2), np.int64), "shape": np.array([1, 1, 5, 5], np.int64)},
                     ["z"])
    with pytest.raises(UnsupportedOpError, match="output_shape"):
        OnnxImporter().load(model)
