"""ONNX ops composed from graph ops, at what ONNX's own node tests (test_onnx_node_tests.py) leave out: edge values
of the inverse and hyperbolic functions and of Mish, CumProd over zeros and negatives (and a long axis), negative
indices of OneHot, GatherElements and GatherND (with batch_dims), lengths known only at run time for
ReverseSequence, LRN's even windows, GlobalLpPool (no node test), a symbolic batch. Each model is compiled for
vmvx and llvm-cpu and run; the reference is numpy (in f64) or onnx's ReferenceEvaluator."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
import retarget  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from retarget.errors import InputError, UnsupportedOpError  # noqa: E402
from retarget.importers.onnx import OnnxImporter  # noqa: E402
from retarget.testing.onnx_cases import assert_same, compiled_outputs, matches_reference, model_of, reference_outputs  # noqa: E402
from retarget.testing.torch_cases import importer_targets  # noqa: E402

TARGETS = ["vmvx", "llvm-cpu"]
TRANSFORMER_TARGETS = importer_targets()  # vmvx and llvm-cpu, or RETARGET_IMPORTER_TARGETS (GPUs too)
F32 = np.float32


def assert_nodes_valid(model):
    """Each node against its op's schema at the model's opset (an attribute of a later opset is refused)."""
    ctx = onnx.checker.C.CheckerContext()
    ctx.ir_version = model.ir_version
    ctx.opset_imports = {o.domain: o.version for o in model.opset_import}
    for node in model.graph.node:
        onnx.checker.check_node(node, ctx)


# -- elementwise: edge values against numpy's functions in f64, rounded once to f32 ------------------------------

def mish(x):
    return x * np.tanh(np.logaddexp(0, x))


# op -> (numpy in f64, inputs at the edges: near 0, near the ends of the domain, past 1 / sqrt(eps), where a
# naive formula overflows (x * x, exp(x)), cancels (1 - x * x, log(x + sqrt(x * x + 1)) for large negative x)
EDGES = {
    "Asinh": (np.arcsinh, [-3e38, -1e30, -3e4, -2897, -2895, -100, -1, -1e-3, -1e-30, 0, 1e-8, 0.5, 2, 2896, 1e4,
                           3e38, np.inf, -np.inf, np.nan]),
    "Acosh": (np.arccosh, [1, np.nextafter(F32(1), F32(2)), 1.001, 1.5, 2, 100, 2895, 2897, 1e10, 3e38, np.inf,
                           0.5, np.nan]),
    "Atanh": (np.arctanh, [-1, -0.9999999, -0.99, -0.5, -1e-6, 0, 1e-20, 0.3, 0.99999, 1, 2, np.nan]),
    "Asin": (np.arcsin, [-1, -0.9999999, -0.5, -1e-30, 0, 1e-8, 0.7, 0.99999, 1, 1.5, np.nan]),
    "Acos": (np.arccos, [-1, -0.9999999, -0.5, 0, 1e-8, 0.7, 0.99999, 1, -1.5, np.nan]),
    "Sinh": (np.sinh, [-89, -88.8, -20, -1.5, -1, -0.999, -1e-5, 0, 1e-30, 0.5, 1, 3, 88.8, 89, np.inf, np.nan]),
    "Cosh": (np.cosh, [-89, -88.8, -20, -1, -1e-5, 0, 1e-30, 0.5, 1, 3, 88.8, 89, -np.inf, np.nan]),
    "Mish": (mish, [-3e38, -1e4, -100, -20, -1, -1e-5, 0, 1e-30, 1, 20, 100, 1e4, 3e38, np.nan]),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("op", EDGES)
def test_elementwise_edge_values_match_numpy(op, target):
    fn, values = EDGES[op]
    x = np.array(values, F32)
    with np.errstate(all="ignore"):
        expected = fn(x.astype(np.float64)).astype(F32)
    (out,) = compiled_outputs(model_of(op, {"x": x}), target, x)
    assert out.dtype == F32
    tiny = np.finfo(F32).tiny  # a subnormal result (mish(-100) = -3.7e-42) keeps fewer digits
    np.testing.assert_allclose(out, expected, rtol=4e-6, atol=tiny)
    np.testing.assert_array_equal(out[expected == 0], 0)  # acosh(1), asinh(0), ...


ACTIVATIONS = {  # name: (op, attributes, input)
    "Celu": ("Celu", {"alpha": 2.0}, np.array([-1e3, -5, -1e-3, -0.0, 0, 1e-3, 5], F32)),
    "ThresholdedRelu": ("ThresholdedRelu", {"alpha": 0.5}, np.array([-2, 0.49, 0.5, 0.51, 3], F32)),
    "Shrink of floats": ("Shrink", {"bias": 0.25, "lambd": 1.5}, np.array([-3, -1.5, -1.4, 0, 1.5, 1.6, 4], F32)),
    # integers compared with a fractional lambd, moved by a fractional bias and truncated, as the reference does
    "Shrink of integers": ("Shrink", {"bias": 1.5, "lambd": 1.5}, np.array([-5, -2, -1, 0, 1, 2, 7], np.int32)),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", ACTIVATIONS)
def test_activations_match_the_reference(name, target):
    op, attrs, x = ACTIVATIONS[name]
    matches_reference(model_of(op, {"x": x}, **attrs), target, {"x": x})


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("positive, negative", [(1, 1), (1, 0), (0, 1), (0, 0)])
def test_is_inf_detects_the_signs_asked_for_and_is_nan_is_bool(positive, negative, target):
    x = np.array([-np.inf, -3e38, 0, np.nan, 3e38, np.inf], F32)
    model = model_of("IsInf", {"x": x}, detect_positive=positive, detect_negative=negative)
    matches_reference(model, target, {"x": x})
    (out,) = compiled_outputs(model_of("IsNaN", {"x": x}), target, x)
    np.testing.assert_array_equal(out, np.isnan(x))


# -- CumProd -------------------------------------------------------------------------------------------------

def cumprod(x, axis, exclusive, reverse):
    """numpy's cumulative product with ONNX's exclusive and reverse."""
    y = np.flip(x, axis) if reverse else x
    y = np.cumprod(y, axis=axis, dtype=x.dtype)
    if exclusive:
        y = np.concatenate([np.ones_like(np.take(y, [0], axis)), np.take(y, range(x.shape[axis] - 1), axis)], axis)
    return np.flip(y, axis) if reverse else y


ZEROS_AND_NEGATIVES = np.array([[3, -2, 0, 5, -1, 4], [-1, -1, 2, -3, 0, -2], [0, 7, -1, 1, 2, -2]])


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64])
@pytest.mark.parametrize("exclusive, reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cumprod_is_exact_over_zeros_and_negatives(exclusive, reverse, dtype, target):
    x = ZEROS_AND_NEGATIVES.astype(dtype)
    for axis in (0, 1, -1):
        model = model_of("CumProd", {"x": x}, {"axis": np.array(axis, np.int64)}, opset=26, exclusive=exclusive,
                         reverse=reverse)
        (out,) = compiled_outputs(model, target, x)
        np.testing.assert_array_equal(out, cumprod(x, axis, exclusive, reverse))
        assert out.dtype == x.dtype


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("exclusive, reverse", [(0, 0), (1, 1)])
def test_cumprod_of_a_long_axis_is_scanned_in_blocks(exclusive, reverse, target):
    """300 is past one masked reduction (128): blocks of 18, padded with ones; signs and a zero are exact, and
    floats near 1 keep their digits."""
    signs = np.where(np.random.default_rng(0).random((2, 300)) < 0.3, -1, 1).astype(np.int64)
    signs[1, 250] = 0
    floats = (1 + np.random.default_rng(1).standard_normal((3, 300)) * 0.01).astype(F32)
    for x, rtol in ((signs, 0), (floats, 2e-5)):
        model = model_of("CumProd", {"x": x}, {"axis": np.array(1, np.int64)}, opset=26, exclusive=exclusive,
                         reverse=reverse)
        (out,) = compiled_outputs(model, target, x)
        expected = cumprod(x.astype(np.float64) if x.dtype == F32 else x, 1, exclusive, reverse)
        np.testing.assert_allclose(out, expected.astype(x.dtype), rtol=rtol)


# -- indices that count from the end ---------------------------------------------------------------------------

@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_one_hot_wraps_negative_indices_and_leaves_out_of_range_ones_off(axis, target):
    indices = np.array([[0, -1, 4], [-5, 5, -6]], np.int64)  # depth 5: -5 is 0; 5 and -6 match nothing
    values = np.array([-2, 7], np.int32)
    model = model_of("OneHot", {"indices": indices}, {"depth": np.array(5, np.int64), "values": values}, axis=axis)
    (out,) = compiled_outputs(model, target, indices)
    assert_same([out], reference_outputs(model, {"indices": indices}))  # int32, the values' type
    assert (out == 7).sum() == 4  # 0, -1, 4, -5


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_elements_counts_negative_indices_from_the_end(axis, target):
    data = np.arange(24, dtype=F32).reshape(2, 3, 4)
    size = data.shape[axis]
    indices = np.random.default_rng(axis + 1).integers(-size, size, (2, 3, 4)).astype(np.int64)
    model = model_of("GatherElements", {"data": data, "indices": indices}, axis=axis)
    (out,) = compiled_outputs(model, target, data, indices)
    np.testing.assert_array_equal(out, np.take_along_axis(data, np.where(indices < 0, indices + size, indices), axis))


@pytest.mark.parametrize("target", TARGETS)
def test_gather_nd_with_batch_dims_and_negative_indices(target):
    data = np.arange(2 * 3 * 4 * 5, dtype=np.int32).reshape(2, 3, 4, 5)
    cases = [  # (indices, batch_dims): whole elements, slices of the rest, batches of each
        (np.array([[[-1, 0], [1, -3]], [[0, 2], [-2, 1]]], np.int64), 0),
        (np.array([[[-1, 0, 4], [2, -4, -1]], [[0, 3, 0], [1, 1, -5]]], np.int64), 1),
        (np.array([[[-1], [0], [2]], [[2], [-3], [1]]], np.int64), 1),
        (np.array([[[-1, -1], [0, 2], [3, 4]], [[-4, 0], [1, -5], [2, 2]]], np.int64), 2),
    ]
    for indices, batch_dims in cases:
        model = model_of("GatherND", {"data": data, "indices": indices}, batch_dims=batch_dims)
        matches_reference(model, target, {"data": data, "indices": indices})


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("batch_axis, time_axis", [(1, 0), (0, 1), (2, 0)])
def test_reverse_sequence_with_lengths_known_only_at_run_time(batch_axis, time_axis, target):
    shape = [4, 4, 3]
    shape[batch_axis] = 5
    x = np.arange(np.prod(shape), dtype=F32).reshape(shape)
    lengths = np.array([4, 0, 1, 3, 2], np.int64)
    model = model_of("ReverseSequence", {"x": x, "lengths": lengths}, batch_axis=batch_axis, time_axis=time_axis)
    matches_reference(model, target, {"x": x, "lengths": lengths})


# -- normalizations and friends --------------------------------------------------------------------------------

def lrn(x, size, alpha, beta, bias):
    """ONNX's LRN as its spec words it (onnx's reference loops over N where it means C)."""
    squares = np.zeros_like(x, dtype=np.float64)
    channels = x.shape[1]
    for c in range(channels):
        lo, hi = max(0, c - (size - 1) // 2), min(channels - 1, c + -(-(size - 1) // 2))
        squares[:, c] = (x[:, lo:hi + 1].astype(np.float64) ** 2).sum(axis=1)
    return (x / (bias + alpha / size * squares) ** beta).astype(x.dtype)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("size", [1, 2, 4, 5, 9])
def test_lrn_windows_of_any_size_over_the_channels(size, target):
    x = np.random.default_rng(size).standard_normal((2, 7, 3, 2)).astype(F32) * 3
    model = model_of("LRN", {"x": x}, size=size, alpha=0.3, beta=0.6, bias=1.5)
    (out,) = compiled_outputs(model, target, x)
    np.testing.assert_allclose(out, lrn(x, size, 0.3, 0.6, 1.5), rtol=1e-5)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("p", [1, 2, 3])
def test_global_lp_pool(p, target):
    x = np.random.default_rng(p).standard_normal((2, 3, 4, 5)).astype(F32)
    (out,) = compiled_outputs(model_of("GlobalLpPool", {"x": x}, p=p), target, x)
    expected = (np.abs(x.astype(np.float64)) ** p).sum(axis=(2, 3), keepdims=True) ** (1 / p)
    np.testing.assert_allclose(out, expected.astype(F32), rtol=1e-5)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("p, axis", [(1, 0), (2, 1), (2, -1)])
def test_lp_normalization_of_a_zero_row_is_zero(p, axis, target):
    """Against numpy: onnx's reference takes the L1 norm without the absolute values (its node tests take them)."""
    x = np.random.default_rng(p).standard_normal((3, 4)).astype(F32)
    x[1, :] = 0
    x[:, 2] = 0
    norm = (np.abs(x.astype(np.float64)) ** p).sum(axis=axis, keepdims=True) ** (1 / p)
    expected = np.divide(x, norm, out=np.zeros(x.shape), where=norm != 0).astype(F32)
    (out,) = compiled_outputs(model_of("LpNormalization", {"x": x}, p=p, axis=axis), target, x)
    np.testing.assert_allclose(out, expected, rtol=1e-6)


@pytest.mark.parametrize("target", TARGETS)
def test_mean_variance_normalization_over_given_axes(target):
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 5)).astype(F32) * 4 + 10
    x[1, 2] = 5  # a constant slice: 0 / (0 + 1e-9)
    for axes in ([0, 2, 3], [1], [2, 3], [-1]):
        model = model_of("MeanVarianceNormalization", {"x": x}, axes=axes)
        matches_reference(model, target, {"x": x}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("target", TARGETS)
def test_hardmax_picks_the_first_of_equal_maxima_and_eye_like_its_diagonal(target):
    x = np.array([[[1, 3, 3], [2, 2, 0]], [[5, 5, 5], [-1, -2, -1]]], F32)
    for axis in (0, 1, 2, -1):
        matches_reference(model_of("Hardmax", {"x": x}, axis=axis), target, {"x": x})
    m = np.zeros((3, 5), np.int32)
    for k, dtype in ((0, None), (2, TensorProto.FLOAT), (-1, TensorProto.BOOL), (6, TensorProto.INT64)):
        attrs = {"k": k} if dtype is None else {"k": k, "dtype": dtype}
        matches_reference(model_of("EyeLike", {"m": m}, **attrs), target, {"m": m})


# -- a batch known only at run time -----------------------------------------------------------------------------

X, INDEX, LENGTHS = np.zeros((2, 6), F32), np.zeros((2, 6), np.int64), np.zeros(2, np.int64)
SYMBOLIC_BATCH = {  # op: (graph inputs, their first axis the batch; constants; attributes)
    "GatherElements": ({"x": X, "index": INDEX}, {}, {"axis": 1}),
    "GatherND": ({"x": X, "index": INDEX[:, :1]}, {}, {"batch_dims": 1}),
    "Hardmax": ({"x": X}, {}, {}),
    "OneHot": ({"index": INDEX}, {"depth": np.array(6, np.int64), "values": np.array([0, 1], F32)}, {}),
    "CumProd": ({"x": X}, {"axis": np.array(1, np.int64)}, {"exclusive": 1}),
    "ReverseSequence": ({"x": X, "lengths": LENGTHS}, {}, {"batch_axis": 0, "time_axis": 1}),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("op", SYMBOLIC_BATCH)
def test_a_batch_known_only_at_run_time(op, target):
    """One compiled module runs every batch size."""
    inputs, constants, attrs = SYMBOLIC_BATCH[op]
    shapes = {name: ("batch",) + v.shape[1:] for name, v in inputs.items()}
    model = model_of(op, inputs, constants, opset=26 if op == "CumProd" else 21, shapes=shapes, **attrs)
    for batch in (1, 5):
        rng = np.random.default_rng(batch)
        feeds = {"x": rng.standard_normal((batch, 6)).astype(F32), "lengths": rng.integers(0, 7, batch),
                 "index": rng.integers(-6, 6, (batch, inputs.get("index", INDEX).shape[1]))}
        feeds = {name: feeds[name] for name in inputs}
        outs = compiled_outputs(model, target, *feeds.values(), dims={"batch": (1, 8)})
        assert_same(outs, reference_outputs(model, feeds))


def test_gather_nd_refuses_more_coordinates_than_axes_and_batches_that_differ():
    data = np.zeros((2, 3), F32)
    with pytest.raises(UnsupportedOpError, match="last axis"):
        OnnxImporter().load(model_of("GatherND", {"data": data, "indices": np.zeros((4, 3), np.int64)}))
    with pytest.raises(InputError, match="batch_dims"):
        OnnxImporter().load(model_of("GatherND", {"data": data, "indices": np.zeros((3, 1), np.int64)},
                                     batch_dims=1))


# -- the transformer ops of opsets 23-28: RMSNormalization, RotaryEmbedding, Swish, SwiGLU -------------------------

def _rotary_caches(positions: int, half: int, rng):
    angles = np.arange(positions)[:, None] * (1e4 ** (-np.arange(half) / half))[None, :]
    return np.cos(angles).astype(F32), np.sin(angles).astype(F32)


@pytest.mark.parametrize("target", TRANSFORMER_TARGETS)
@pytest.mark.parametrize("interleaved", [0, 1])
def test_a_rotary_embedding_of_a_3d_input_at_given_positions_matches_the_reference(interleaved, target):
    # 3 heads of 8 channels, 6 of them rotated (the last two pass), positions out of order and repeated
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 5, 24)).astype(F32)
    cos, sin = _rotary_caches(16, 3, rng)
    positions = np.array([[0, 3, 7, 7, 15], [9, 1, 2, 0, 4]], np.int64)
    model = model_of("RotaryEmbedding", {"x": x, "cos": cos, "sin": sin, "positions": positions}, opset=23,
                     interleaved=interleaved, num_heads=3, rotary_embedding_dim=6)
    matches_reference(model, target, {"x": x, "cos": cos, "sin": sin, "positions": positions}, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("target", TRANSFORMER_TARGETS)
def test_rms_normalization_of_half_floats_takes_its_statistic_in_f32(target):
    # squares of 300 overflow f16 (65504): a statistic taken in f16 would be inf and every output 0
    x = np.full((2, 4, 64), 300, np.float16)
    x[1] = np.random.default_rng(1).standard_normal((4, 64)).astype(np.float16)
    scale = np.linspace(0.5, 2, 64).astype(np.float16)
    model = model_of("RMSNormalization", {"x": x}, {"scale": scale}, opset=23, axis=-1, epsilon=1e-5)
    out = compiled_outputs(model, target, x)[0]
    wide = x.astype(np.float64)
    expected = wide / np.sqrt((wide * wide).mean(-1, keepdims=True) + 1e-5) * scale
    assert out.dtype == np.float16
    np.testing.assert_allclose(out.astype(np.float64), expected, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("target", TRANSFORMER_TARGETS)
def test_swiglu_and_swish_with_alpha_match_the_reference(target):
    a, b = np.random.default_rng(2).standard_normal((2, 3, 16)).astype(F32)
    matches_reference(model_of("SwiGLU", {"a": a, "b": b}, opset=28, alpha=1.702), target, {"a": a, "b": b},
                      rtol=1e-5, atol=1e-7)
    matches_reference(model_of("Swish", {"a": a}, opset=24, alpha=0.5), target, {"a": a}, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("target", TRANSFORMER_TARGETS)
def test_attention_with_a_cache_grouped_heads_and_a_short_mask_matches_the_reference(target):
    # 3-D inputs, 4 query heads sharing 2 key-value heads, a cache of 3 positions before 4 new ones, causal
    # masking aligned to the cache's end, a boolean mask covering the first 5 of the 7 keys (the rest padded as
    # masked), softcap; every output, the scores with their bias among them
    rng = np.random.default_rng(5)
    q = rng.standard_normal((2, 4, 32)).astype(F32)
    k, v = rng.standard_normal((2, 2, 4, 16)).astype(F32)
    k, v = k.transpose(1, 0, 2).reshape(4, 2, 16)[None].repeat(2, 0)[:, :, 0], v.reshape(2, 4, 16)
    past_k, past_v = rng.standard_normal((2, 2, 2, 3, 8)).astype(F32)
    mask = rng.random((4, 5)) > 0.3
    inputs = {"q": q, "k": k, "v": v, "mask": mask, "past_k": past_k, "past_v": past_v}
    model = model_of("Attention", inputs, opset=24, outputs=("y", "present_k", "present_v", "qk"), q_num_heads=4,
                     kv_num_heads=2, is_causal=1, softcap=3.0, qk_matmul_output_mode=2)
    assert_nodes_valid(model)
    matches_reference(model, target, inputs, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("target", TRANSFORMER_TARGETS)
def test_attention_with_a_count_of_valid_keys_zeroes_queries_that_see_none(target):
    # nonpad_kv_seqlen (a static cache: causal masking aligned to each batch's count): batch 0 sees 5 of 6 keys,
    # batch 1 none, so every query of it is masked and gets zeros, not NaN; a sliding window of 2 keys back
    rng = np.random.default_rng(6)
    q = rng.standard_normal((2, 2, 3, 8)).astype(F32)
    k, v = rng.standard_normal((2, 2, 2, 6, 8)).astype(F32)
    valid = np.array([5, 0], np.int64)
    node = helper.make_node("Attention", ["q", "k", "v", "", "", "", "valid"], ["y"], is_causal=1,
                            left_window_size=2)
    declared = [helper.make_tensor_value_info(name, TensorProto.FLOAT, x.shape) for name, x in
                (("q", q), ("k", k), ("v", v))]
    graph = helper.make_graph([node], "g", declared, [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)],
                              [numpy_helper.from_array(valid, "valid")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 25)])  # sliding windows: opset 25
    model.ir_version = 10
    assert_nodes_valid(model)
    out = compiled_outputs(model, target, q, k, v)[0]
    assert not np.isnan(out).any() and np.all(out[1] == 0)
    np.testing.assert_allclose(out, reference_outputs(model, {"q": q, "k": k, "v": v})[0], rtol=1e-5, atol=1e-6)


def test_attention_with_key_value_heads_that_do_not_divide_the_query_heads_is_refused_by_name():
    q = np.zeros((1, 3, 2, 4), F32)
    k = v = np.zeros((1, 2, 2, 4), F32)
    with pytest.raises(UnsupportedOpError, match="3 query heads over 2 key and 2 value heads"):
        retarget.compile(model_of("Attention", {"q": q, "k": k, "v": v}, opset=23), "vmvx")


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_softmax_cross_entropy_with_weights_and_an_ignored_index_outside_the_classes(reduction, target):
    # torch's ignore_index, -100, lies outside the classes: it must be neither read nor counted
    rng = np.random.default_rng(7)
    scores = rng.standard_normal((3, 5, 4)).astype(F32)
    labels = np.array([[0, 4, -100, 2], [1, -100, 3, 3], [4, 0, 1, -100]], np.int64)
    weights = np.array([0.5, 1.0, 2.0, 1.5, 0.25], F32)
    inputs = {"scores": scores, "labels": labels, "weights": weights}
    model = model_of("SoftmaxCrossEntropyLoss", inputs, opset=21, outputs=("loss", "log_prob"), reduction=reduction,
                     ignore_index=-100)
    matches_reference(model, target, inputs, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("target", TRANSFORMER_TARGETS)
def test_det_of_a_batch_with_a_singular_matrix_and_one_that_needs_pivoting(target):
    """Det through compose.determinant (LU with partial pivoting): a zero pivot up front, a singular matrix, 5 x 5
    random ones, against numpy in float64."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 5, 5)).astype(F32)
    x[0, 0, 0, 0] = 0.0  # the first pivot is 0: a row swap
    x[1, 2, 4] = x[1, 2, 1] * 2  # two proportional rows
    (out,) = compiled_outputs(model_of("Det", {"x": x}), target, x)
    np.testing.assert_allclose(out, np.linalg.det(x.astype(np.float64)), rtol=2e-5, atol=2e-5)
    assert abs(out[1, 2]) < 1e-4
