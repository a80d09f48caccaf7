"""Differential tests: llvm-cpu computes what the vmvx reference computes, for the shapes that stress
the vector code (odd widths, tails, strides, padding, dilation, groups) and for fused epilogues."""

from __future__ import annotations

import platform

import numpy as np
import pytest
import retarget
from retarget.ir import Builder, Function, Module, TensorType, Value, dtypes
from retarget.kernel.lower import lower_dispatch
from retarget.passes.dispatch import form_dispatches

rng = np.random.default_rng(7)


# The host's vectors, and on x86-64 also AVX2's 256 bits (a host with AVX-512 tiles twice as wide).
TARGETS = ["llvm-cpu"] + (["llvm-cpu:x86-64-v3"] if platform.machine() in ("x86_64", "AMD64") else [])


def _module(build, *input_shapes) -> Module:
    args = [Value(TensorType(s, dtypes.f32)) for s in input_shapes]
    fn = Function("f", args)
    fn.returns = [build(Builder(fn), *args)]
    return Module({"f": fn})


def _run_both(build, *input_shapes, target="llvm-cpu"):
    module = _module(build, *input_shapes)
    xs = [rng.standard_normal(s).astype(np.float32) for s in input_shapes]
    ref = retarget.load(retarget.compile(module, "vmvx"), "local-sync").f(*xs)
    got = retarget.load(retarget.compile(module, target), "local-task").f(*xs)
    np.testing.assert_allclose(got, ref, rtol=2e-5, atol=2e-5)


def _schedule(build, *input_shapes, target="llvm-cpu") -> dict:
    """The schedule llvm-cpu's lowering picks for the module's one dispatch."""
    (dispatch,) = form_dispatches(_module(build, *input_shapes).functions["f"])
    return lower_dispatch(dispatch.function, retarget.compiler.resolve_target(target)[1]).schedule


def _const(b, shape):
    return b.constant(rng.standard_normal(shape).astype(np.float32))


@pytest.mark.parametrize("width", [1, 7, 17, 33, 49])
@pytest.mark.parametrize("stride, pad, dilation", [(1, 0, 1), (1, 1, 1), (2, 1, 1), (1, 2, 2)])
def test_conv_with_bias_relu6(width, stride, pad, dilation):
    def build(b, x):
        y = b.op("rt.conv2d", [x, _const(b, (5, 3, 3, 3))],
                 {"strides": (stride, stride), "pad": (pad,) * 4, "dilations": (dilation, dilation)})
        y = b.op("rt.add", [y, _const(b, (1, 5, 1, 1))])
        return b.op("rt.min", [b.op("rt.max", [y, b.constant(np.float32(0))]), b.constant(np.float32(6))])

    _run_both(build, (1, 3, 9, width + 4))


@pytest.mark.parametrize("channels", [1, 6, 13])
def test_depthwise_and_grouped_convs(channels):
    def build(b, x):
        y = b.op("rt.conv2d", [x, _const(b, (2 * channels, 1, 3, 3))],
                 {"strides": (2, 2), "pad": (1, 1, 1, 1), "groups": channels})
        return b.op("rt.sigmoid", [y])

    _run_both(build, (2, channels, 11, 19))


@pytest.mark.parametrize("width, stride", [(7, 1), (14, 1), (27, 2), (40, 2)])
def test_depthwise_conv_with_one_filter_per_channel(width, stride):
    """MobileNet's form: border rows, masked first and last chunks, a last chunk overlapping the one before."""
    def build(b, x):
        y = b.op("rt.conv2d", [x, _const(b, (5, 1, 3, 3))], {"strides": (stride, stride), "pad": (1,) * 4, "groups": 5})
        return b.op("rt.add", [y, _const(b, (1, 5, 1, 1))])

    _run_both(build, (1, 5, 6, width))


def test_a_7x7_stem_conv_loops_over_its_window_rows():
    """ResNet's form: a dense 7x7 window, stride 2, three border rows in one loop."""
    _run_both(lambda b, x: b.op("rt.conv2d", [x, _const(b, (8, 3, 7, 7))], {"strides": (2, 2), "pad": (3,) * 4}),
              (1, 3, 20, 37))


def test_conv_outputs_whose_window_sees_only_padding_are_the_epilogue_of_zero():
    def build(b, x):
        y = b.op("rt.conv2d", [x, _const(b, (3, 2, 3, 3))], {"pad": (3, 3, 3, 3)})
        return b.op("rt.add", [y, _const(b, (1, 3, 1, 1))])

    _run_both(build, (1, 2, 4, 5))


def test_grouped_conv_tiles_may_span_two_groups():
    _run_both(lambda b, x: b.op("rt.conv2d", [x, _const(b, (14, 2, 3, 3))], {"pad": (1,) * 4, "groups": 2}),
              (1, 4, 8, 9))


def _conv_add_relu(weights: tuple, **attrs):
    """A ResNet block's second half: conv, a residual add, relu."""
    def build(b, x, residual):
        y = b.op("rt.add", [b.op("rt.conv2d", [x, _const(b, weights)], attrs), residual])
        return b.op("rt.max", [y, b.constant(np.float32(0))])
    return build


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("size, weights, attrs", [
    ((7, 7), (24, 20, 3, 3), {"pad": (1,) * 4}),  # ResNet's last stage: 49 pixels in chunks that span rows
    ((5, 6), (13, 8, 3, 3), {"pad": (1,) * 4}),  # few inputs: each chunk its own code, with constant masks
    ((9, 7), (6, 16, 5, 5), {"pad": (4,) * 4, "dilations": (2, 2)}),  # taps two rows apart, some outside every lane
    ((7, 7), (12, 16, 3, 3), {"pad": (1,) * 4, "groups": 2}),  # grouped: a tile's channels may span groups
    ((36, 36), (8, 16, 3, 3), {"pad": (1,) * 4}),  # many chunks: a loop, each chunk's masks from its position
    ((23, 30), (7, 16, 3, 3), {"pad": (1,) * 4}),  # the loop, then a last chunk overlapping it
])
def test_a_small_image_is_read_as_one_flat_run_of_pixels(target, size, weights, attrs):
    """Where rows would leave lanes idle (narrower than a vector, or not a multiple of the chunk), each chunk
    covers several rows, its taps masked where they leave the image (a column past either edge, a row above or
    below); and a batch of two."""
    build = _conv_add_relu(weights, **attrs)
    shapes = ((2, weights[1] * attrs.get("groups", 1), *size), (2, weights[0], *size))
    assert _schedule(build, *shapes, target=target)["pixels"] == "flat"
    _run_both(build, *shapes, target=target)


def test_a_depthwise_conv_of_a_large_image_keeps_its_rows():
    """A loop of flat chunks computes each chunk's masks: one input channel a group cannot pay for that."""
    build = _conv_add_relu((16, 1, 3, 3), pad=(1,) * 4, groups=16)
    assert "pixels" not in _schedule(build, (1, 16, 40, 40), (1, 16, 40, 40))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("width", [7, 5, 3])
def test_a_strided_conv_s_narrow_rows_take_one_chunk_of_the_next_power_of_two(target, width):
    """A 7-wide output row (ResNet's 14x14 -> 7x7 downsampling) is one 8-lane chunk, not two overlapping 4-lane
    ones: its eighth lane is computed and never stored, so the residual past the row is untouched."""
    build = _conv_add_relu((10, 6, 3, 3), strides=(2, 2), pad=(1,) * 4)
    shapes = ((1, 6, 2 * width, 2 * width), (1, 10, width, width))
    assert _schedule(build, *shapes, target=target)["tile_x"] == 1 << width.bit_length()
    _run_both(build, *shapes, target=target)


# 16 x 65 x 65 floats: pixels outside channels; 200 channels: the reduction in blocks of 128 and 72
@pytest.mark.parametrize("channels, size", [(16, 65), (24, 7), (200, 7)])
def test_pointwise_conv_with_a_residual_add(channels, size):
    def build(b, x, residual):
        return b.op("rt.add", [b.op("rt.conv2d", [x, _const(b, (13, channels, 1, 1))]), residual])

    _run_both(build, (1, channels, size, size), (1, 13, size, size))


# (1, 64, 1000): a batch-1 linear layer, its columns in tiles of four vector registers' width (128 with AVX-512)
@pytest.mark.parametrize("m, k, n", [(1, 5, 3), (3, 17, 33), (8, 64, 10), (13, 7, 70), (1, 64, 1000)])
def test_matmul_with_bias(m, k, n):
    _run_both(lambda b, a: b.op("rt.add", [b.op("rt.matmul", [a, _const(b, (k, n))]), _const(b, (n,))]), (m, k))


def test_a_matmul_whose_weights_exceed_the_cache_runs_in_column_slabs_and_reduction_blocks():
    # 300 x 250 floats: slabs of 13 column tiles, two more tiles, 10 columns; two row blocks of 6 and a row;
    # reduction blocks of 128, 128 and 44 steps, the bias added after the last
    _run_both(lambda b, a: b.op("rt.add", [b.op("rt.matmul", [a, _const(b, (300, 250))]), _const(b, (250,))]),
              (13, 300))


def test_batched_matmul_broadcasts_the_weights():
    _run_both(lambda b, a: b.op("rt.matmul", [a, _const(b, (9, 21))]), (3, 5, 9))


@pytest.mark.parametrize("kind", ["sum", "max", "min"])
@pytest.mark.parametrize("axes", [(0,), (1,), (2,), (1, 2)])
def test_reductions_with_an_elementwise_prologue(kind, axes):
    _run_both(lambda b, x: b.op("rt.reduce", [b.op("rt.tanh", [x])], {"kind": kind, "axes": axes, "keepdims": True}),
              (3, 7, 19))


@pytest.mark.parametrize("op", ["rt.max_pool2d", "rt.avg_pool2d"])
@pytest.mark.parametrize("include_pad", [False, True])
@pytest.mark.parametrize("width", [15, 111])  # 111: rows of vector chunks, the interior ones in a loop
def test_pools_with_padding(op, include_pad, width):
    attrs = {"kernel": (3, 3), "strides": (2, 2), "pad": (1, 1, 1, 1)}
    if op == "rt.avg_pool2d":
        attrs["count_include_pad"] = include_pad
    _run_both(lambda b, x: b.op(op, [x], attrs), (2, 4, 13, width))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("op, attrs", [
    ("rt.max_pool2d", {"kernel": (2, 2), "strides": (2, 2)}),
    ("rt.avg_pool2d", {"kernel": (3, 2), "strides": (1, 1)}),
    ("rt.max_pool2d", {"kernel": (3, 3), "strides": (1, 2), "pad": (2, 0, 1, 1), "dilations": (2, 1)}),
])
def test_pools_of_every_window_shape_run_as_vector_rows(target, op, attrs):
    assert "tile_x" in _schedule(lambda b, x: b.op(op, [x], attrs), (1, 3, 12, 41), target=target)
    _run_both(lambda b, x: b.op(op, [x], attrs), (1, 3, 12, 41), target=target)


def test_data_movement_fuses_into_one_elementwise_kernel():
    def build(b, x):
        t = b.op("rt.transpose", [x], {"perm": (0, 2, 1)})
        s = b.op("rt.slice", [t], {"start": (0, 1, 0), "limit": (2, 9, 5), "stride": (1, 2, 1)})
        p = b.op("rt.pad", [s], {"low": (0, 1, 2), "high": (0, 0, 1), "value": -1.0})
        return b.op("rt.concat", [p, b.op("rt.exp", [p])], {"axis": 2})

    _run_both(build, (2, 5, 9))


@pytest.mark.parametrize("dtype", ["i8", "ui8", "i16", "i32", "ui32", "i64"])
def test_integer_pow_wraps_as_the_reference(dtype):
    """rt.pow of integers (ONNX Pow and torch's ** of int tensors), which llvm-cpu used to refuse: square and
    multiply over every bit of the exponent, wrapping; negative exponents give 1, +-1 or 0 by the base."""
    dt = dtypes.DTYPES[dtype]
    info = np.iinfo(dt.np_dtype)
    signed = info.min < 0
    bases = np.array([0, 1, 2, 3, 7, 13, 127, info.max, info.min, 5, 2, 3] + ([-1, -1, -2, -3] if signed else [1] * 4))
    exponents = np.array([0, 5, 7, 40, 3, 9, 2, 2, 3, 1, info.bits - 1, 0] + ([-3, -4, -1, 2] if signed else [8] * 4))
    x, y = (np.clip(v, info.min, info.max).astype(dt.np_dtype) for v in (bases, exponents))
    args = [Value(TensorType(x.shape, dt)) for _ in range(2)]
    fn = Function("f", args)
    fn.returns = [Builder(fn).op("rt.pow", args)]
    module = Module({"f": fn})
    ref = retarget.load(retarget.compile(module, "vmvx"), "local-sync").f(x, y)
    got = retarget.load(retarget.compile(module, "llvm-cpu"), "local-task").f(x, y)
    np.testing.assert_array_equal(got, ref)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(got[y >= 0], (x[y >= 0] ** y[y >= 0]).astype(dt.np_dtype))
    if signed:  # 1, -1, -2 and -3 to -3, -4, -1 and 2
        np.testing.assert_array_equal(got[-4:], np.array([-1, 1, 0, 9], dt.np_dtype))


@pytest.mark.parametrize("op", ["exp", "sigmoid", "tanh"])
def test_exp_sigmoid_and_tanh_of_f32_are_within_3_ulp_and_keep_their_special_values(op):
    """`exp_f32` and `tanh_f32` (vector code: LLVM made an expf call a lane of llvm.exp, 3.4x the LSTM's time): a
    dense sweep over the range where results are normal, against numpy in float64, and NaN, +-inf, +-0 and the
    overflow and underflow edges."""
    sweep = np.concatenate([np.linspace(-87, 88.7, 200001), np.linspace(-1, 1, 20001)])
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 88.8, 89.0, -104.5, -200.0, 1e-30, -1e-30])
    x = np.concatenate([sweep, special]).astype(np.float32)
    arg = Value(TensorType(x.shape, dtypes.f32))
    fn = Function("f", [arg])
    fn.returns = [Builder(fn).op(f"rt.{op}", [arg])]
    got = retarget.load(retarget.compile(Module({"f": fn}), "llvm-cpu"), "local-task").f(x).astype(np.float64)
    wide = x.astype(np.float64)
    with np.errstate(over="ignore"):
        exact = {"exp": np.exp(wide), "sigmoid": 1 / (1 + np.exp(-wide)), "tanh": np.tanh(wide)}[op]
    rounded = exact.astype(np.float32)
    normal = np.isfinite(rounded) & (np.abs(rounded) >= np.finfo(np.float32).tiny)
    ulps = np.abs(got[normal] - exact[normal]) / np.spacing(np.abs(rounded[normal])).astype(np.float64)
    assert ulps.max() <= 3, (ulps.max(), x[normal][ulps.argmax()])
    tail = got[-len(special):]
    want = {"exp": [np.nan, np.inf, 0, 1, 1, np.inf, np.inf, 0, 0, 1, 1],
            "sigmoid": [np.nan, 1, 0, 0.5, 0.5, 1, 1, 0, 0, 0.5, 0.5],
            "tanh": [np.nan, 1, -1, 0, -0.0, 1, 1, -1, -1, 1e-30, -1e-30]}[op]
    np.testing.assert_allclose(tail, np.array(want, dtype=np.float32).astype(np.float64), rtol=1e-6, atol=0)



def test_log_of_f32_is_within_1_ulp_from_subnormals_to_the_largest_float():
    """`log_f32` (vector code, as `exp_f32`): a log-spaced sweep over every binade and a dense one around 1, against
    numpy in float64; subnormal inputs, 0, -0, negatives, NaN and inf."""
    sweep = np.concatenate([np.exp(np.linspace(-87, 88.7, 200001)), np.linspace(0.5, 2, 100001)])
    special = np.array([1e-40, 1e-45, 0.0, -0.0, -1.0, -np.inf, np.nan, np.inf, 1.0, np.finfo(np.float32).max])
    x = np.concatenate([sweep, special]).astype(np.float32)
    arg = Value(TensorType(x.shape, dtypes.f32))
    fn = Function("f", [arg])
    fn.returns = [Builder(fn).op("rt.log", [arg])]
    got = retarget.load(retarget.compile(Module({"f": fn}), "llvm-cpu"), "local-task").f(x).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        exact = np.log(x.astype(np.float64))
    rounded = exact.astype(np.float32)
    finite = np.isfinite(rounded) & (rounded != 0)
    ulps = np.abs(got[finite] - exact[finite]) / np.spacing(np.abs(rounded[finite])).astype(np.float64)
    assert ulps.max() <= 1, (ulps.max(), x[finite][ulps.argmax()])
    np.testing.assert_array_equal(got[-len(special):], rounded[-len(special):].astype(np.float64))



@pytest.mark.parametrize("op", ["log1p", "expm1"])
def test_log1p_and_expm1_of_f32_are_within_3_ulp_near_0_and_far_from_it(op):
    """Goldberg's log1p and Kahan's expm1 over the vector exp and log (the C-like targets' formulas), up to where
    (e^x - 1) x would overflow; the special values as libm gives them."""
    sweep = np.concatenate([np.linspace(-0.999, 1, 100001), np.exp(np.linspace(-80, 80, 100001)),
                            -np.exp(np.linspace(-80, -0.001, 20001)), np.linspace(-100, 88, 20001)])
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, -1.0, 1e-30, -1e-30, 86.0])
    x = np.concatenate([sweep, special]).astype(np.float32)
    arg = Value(TensorType(x.shape, dtypes.f32))
    fn = Function("f", [arg])
    fn.returns = [Builder(fn).op(f"rt.{op}", [arg])]
    got = retarget.load(retarget.compile(Module({"f": fn}), "llvm-cpu"), "local-task").f(x).astype(np.float64)
    with np.errstate(all="ignore"):
        exact = getattr(np, op)(x.astype(np.float64))
        rounded = exact.astype(np.float32)
    normal = np.isfinite(rounded) & (np.abs(rounded) >= np.finfo(np.float32).tiny)
    ulps = np.abs(got[normal] - exact[normal]) / np.spacing(np.abs(rounded[normal])).astype(np.float64)
    assert ulps.max() <= 3, (ulps.max(), x[normal][ulps.argmax()])
    np.testing.assert_array_equal(got[-len(special):], rounded[-len(special):].astype(np.float64))
