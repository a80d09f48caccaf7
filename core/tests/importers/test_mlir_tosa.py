"""tosa (1.0 spelling): NHWC/OHWI convs and pools, shapes from tosa.const_shape."""

import math

import numpy as np
import pytest
from retarget.errors import UnsupportedOpError
from retarget.importers.mlir import import_mlir
from retarget.vmvx.interpreter import run_function

rng = np.random.default_rng(2)


def run(text, *inputs):
    module = import_mlir(text, "test.mlir")
    (fn,) = module.functions.values()
    return run_function(fn, [np.asarray(x) for x in inputs])


def r(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def test_add_sub_mul_with_shift_and_clamp():
    text = """func.func @f(%a: tensor<2x3xf32>, %b: tensor<1x3xf32>) -> tensor<2x3xf32> {
      %shift = "tosa.const"() <{values = dense<0> : tensor<1xi8>}> : () -> tensor<1xi8>
      %0 = tosa.add %a, %b : (tensor<2x3xf32>, tensor<1x3xf32>) -> tensor<2x3xf32>
      %1 = tosa.mul %0, %a, %shift : (tensor<2x3xf32>, tensor<2x3xf32>, tensor<1xi8>) -> tensor<2x3xf32>
      %2 = tosa.sub %1, %b : (tensor<2x3xf32>, tensor<1x3xf32>) -> tensor<2x3xf32>
      %3 = tosa.clamp %2 {max_val = 1.0 : f32, min_val = -0.5 : f32} : (tensor<2x3xf32>) -> tensor<2x3xf32>
      return %3 : tensor<2x3xf32>
    }"""
    a, b = r(2, 3), r(1, 3)
    np.testing.assert_allclose(run(text, a, b)[0], np.clip((a + b) * a - b, -0.5, 1.0), rtol=1e-6)


@pytest.mark.parametrize("op, ref", [
    ("abs", np.abs), ("exp", np.exp), ("tanh", np.tanh), ("sigmoid", lambda x: 1 / (1 + np.exp(-x))),
    ("erf", np.vectorize(math.erf)), ("reciprocal", lambda x: 1 / x), ("floor", np.floor)])
def test_unary_ops(op, ref):
    text = f"""func.func @f(%a: tensor<5xf32>) -> tensor<5xf32> {{
      %0 = tosa.{op} %a : (tensor<5xf32>) -> tensor<5xf32>
      return %0 : tensor<5xf32>
    }}"""
    a = r(5)
    np.testing.assert_allclose(run(text, a)[0], ref(a), rtol=1e-5)


def test_matmul_reshape_transpose():
    text = """func.func @f(%a: tensor<1x3x4xf32>, %b: tensor<1x4x5xf32>) -> tensor<5x3xf32> {
      %zp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
      %0 = tosa.matmul %a, %b, %zp, %zp
           : (tensor<1x3x4xf32>, tensor<1x4x5xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x3x5xf32>
      %s = tosa.const_shape {values = dense<[3, 5]> : tensor<2xindex>} : () -> !tosa.shape<2>
      %1 = tosa.reshape %0, %s : (tensor<1x3x5xf32>, !tosa.shape<2>) -> tensor<3x5xf32>
      %2 = tosa.transpose %1 {perms = array<i32: 1, 0>} : (tensor<3x5xf32>) -> tensor<5x3xf32>
      return %2 : tensor<5x3xf32>
    }"""
    a, b = r(1, 3, 4), r(1, 4, 5)
    np.testing.assert_allclose(run(text, a, b)[0], (a @ b)[0].T, rtol=1e-5)


def test_conv2d_nhwc_with_bias_and_padding():
    text = """func.func @f(%x: tensor<1x5x5x2xf32>, %w: tensor<3x3x3x2xf32>, %b: tensor<3xf32>) -> tensor<1x5x5x3xf32> {
      %zp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
      %0 = tosa.conv2d %x, %w, %b, %zp, %zp
           {acc_type = f32, dilation = array<i64: 1, 1>, pad = array<i64: 1, 1, 1, 1>, stride = array<i64: 1, 1>}
           : (tensor<1x5x5x2xf32>, tensor<3x3x3x2xf32>, tensor<3xf32>, tensor<1xf32>, tensor<1xf32>)
           -> tensor<1x5x5x3xf32>
      return %0 : tensor<1x5x5x3xf32>
    }"""
    x, w, b = r(1, 5, 5, 2), r(3, 3, 3, 2), r(3)
    xp = np.pad(x, [(0, 0), (1, 1), (1, 1), (0, 0)])
    ref = np.zeros((1, 5, 5, 3), np.float32)
    for i in range(5):
        for j in range(5):
            ref[0, i, j] = np.einsum("hwc,ohwc->o", xp[0, i:i + 3, j:j + 3], w) + b
    np.testing.assert_allclose(run(text, x, w, b)[0], ref, rtol=1e-4, atol=1e-5)


def test_depthwise_conv2d_multiplier_two():
    text = """func.func @f(%x: tensor<1x4x4x2xf32>, %w: tensor<2x2x2x2xf32>, %b: tensor<4xf32>) -> tensor<1x3x3x4xf32> {
      %zp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
      %0 = tosa.depthwise_conv2d %x, %w, %b, %zp, %zp
           {acc_type = f32, dilation = array<i64: 1, 1>, pad = array<i64: 0, 0, 0, 0>, stride = array<i64: 1, 1>}
           : (tensor<1x4x4x2xf32>, tensor<2x2x2x2xf32>, tensor<4xf32>, tensor<1xf32>, tensor<1xf32>)
           -> tensor<1x3x3x4xf32>
      return %0 : tensor<1x3x3x4xf32>
    }"""
    x, w, b = r(1, 4, 4, 2), r(2, 2, 2, 2), r(4)
    ref = np.zeros((1, 3, 3, 2, 2), np.float32)
    for i in range(3):
        for j in range(3):
            ref[0, i, j] = np.einsum("hwc,hwcm->cm", x[0, i:i + 2, j:j + 2], w)
    np.testing.assert_allclose(run(text, x, w, b)[0], ref.reshape(1, 3, 3, 4) + b, rtol=1e-4, atol=1e-5)


def test_pools_reduce_and_argmax():
    text = """func.func @f(%x: tensor<1x4x4x2xf32>)
           -> (tensor<1x2x2x2xf32>, tensor<1x2x2x2xf32>, tensor<1x1x4x2xf32>, tensor<1x4x2xi32>) {
      %zp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
      %0 = tosa.max_pool2d %x {kernel = array<i64: 2, 2>, pad = array<i64: 0, 0, 0, 0>, stride = array<i64: 2, 2>}
           : (tensor<1x4x4x2xf32>) -> tensor<1x2x2x2xf32>
      %1 = tosa.avg_pool2d %x, %zp, %zp
           {acc_type = f32, kernel = array<i64: 2, 2>, pad = array<i64: 0, 0, 0, 0>, stride = array<i64: 2, 2>}
           : (tensor<1x4x4x2xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x2x2x2xf32>
      %2 = tosa.reduce_sum %x {axis = 1 : i32} : (tensor<1x4x4x2xf32>) -> tensor<1x1x4x2xf32>
      %3 = tosa.argmax %x {axis = 1 : i32} : (tensor<1x4x4x2xf32>) -> tensor<1x4x2xi32>
      return %0, %1, %2, %3 : tensor<1x2x2x2xf32>, tensor<1x2x2x2xf32>, tensor<1x1x4x2xf32>, tensor<1x4x2xi32>
    }"""
    x = r(1, 4, 4, 2)
    mx, avg, s, am = run(text, x)
    win = x.reshape(1, 2, 2, 2, 2, 2)
    np.testing.assert_allclose(mx, win.max(axis=(2, 4)), rtol=1e-6)
    np.testing.assert_allclose(avg, win.mean(axis=(2, 4)), rtol=1e-5)
    np.testing.assert_allclose(s, x.sum(1, keepdims=True), rtol=1e-5)
    np.testing.assert_array_equal(am, x.argmax(1))


def test_concat_pad_slice_tile():
    text = """func.func @f(%a: tensor<2x3xf32>)
           -> (tensor<4x3xf32>, tensor<3x5xf32>, tensor<1x2xf32>, tensor<4x6xf32>) {
      %0 = tosa.concat %a, %a {axis = 0 : i32} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
      %p = tosa.const_shape {values = dense<[0, 1, 1, 1]> : tensor<4xindex>} : () -> !tosa.shape<4>
      %v = "tosa.const"() <{values = dense<7.0> : tensor<1xf32>}> : () -> tensor<1xf32>
      %1 = tosa.pad %a, %p, %v : (tensor<2x3xf32>, !tosa.shape<4>, tensor<1xf32>) -> tensor<3x5xf32>
      %st = tosa.const_shape {values = dense<[1, 1]> : tensor<2xindex>} : () -> !tosa.shape<2>
      %sz = tosa.const_shape {values = dense<[1, 2]> : tensor<2xindex>} : () -> !tosa.shape<2>
      %2 = tosa.slice %a, %st, %sz : (tensor<2x3xf32>, !tosa.shape<2>, !tosa.shape<2>) -> tensor<1x2xf32>
      %m = tosa.const_shape {values = dense<[2, 2]> : tensor<2xindex>} : () -> !tosa.shape<2>
      %3 = tosa.tile %a, %m : (tensor<2x3xf32>, !tosa.shape<2>) -> tensor<4x6xf32>
      return %0, %1, %2, %3 : tensor<4x3xf32>, tensor<3x5xf32>, tensor<1x2xf32>, tensor<4x6xf32>
    }"""
    a = r(2, 3)
    c, p, s, t = run(text, a)
    np.testing.assert_array_equal(c, np.concatenate([a, a]))
    np.testing.assert_array_equal(p, np.pad(a, [(0, 1), (1, 1)], constant_values=7))
    np.testing.assert_array_equal(s, a[1:2, 1:3])
    np.testing.assert_array_equal(t, np.tile(a, (2, 2)))


def test_cast_select_compare_gather():
    text = """func.func @f(%a: tensor<1x4x2xf32>, %i: tensor<1x3xi32>)
           -> (tensor<1x4x2xf32>, tensor<1x4x2xi32>, tensor<1x3x2xf32>) {
      %z = "tosa.const"() <{values = dense<0.0> : tensor<1x1x1xf32>}> : () -> tensor<1x1x1xf32>
      %c = tosa.greater %a, %z : (tensor<1x4x2xf32>, tensor<1x1x1xf32>) -> tensor<1x4x2xi1>
      %n = tosa.negate %a : (tensor<1x4x2xf32>) -> tensor<1x4x2xf32>
      %0 = tosa.select %c, %a, %n : (tensor<1x4x2xi1>, tensor<1x4x2xf32>, tensor<1x4x2xf32>) -> tensor<1x4x2xf32>
      %1 = tosa.cast %a : (tensor<1x4x2xf32>) -> tensor<1x4x2xi32>
      %2 = tosa.gather %a, %i : (tensor<1x4x2xf32>, tensor<1x3xi32>) -> tensor<1x3x2xf32>
      return %0, %1, %2 : tensor<1x4x2xf32>, tensor<1x4x2xi32>, tensor<1x3x2xf32>
    }"""
    a = r(1, 4, 2) * 3
    idx = np.array([[3, 0, 2]], np.int32)
    sel, cst, g = run(text, a, idx)
    np.testing.assert_array_equal(sel, np.abs(a))
    np.testing.assert_array_equal(cst, np.round(a).astype(np.int32))
    np.testing.assert_array_equal(g, a[:, [3, 0, 2]])


def test_rescale_is_unsupported_with_location_and_hint():
    text = """func.func @f(%a: tensor<4xi8>) -> tensor<4xi8> {
      %0 = tosa.rescale %a {scale32 = true} : (tensor<4xi8>) -> tensor<4xi8>
      return %0 : tensor<4xi8>
    }"""
    with pytest.raises(UnsupportedOpError) as e:
        import_mlir(text, "q.mlir")
    assert e.value.location == "q.mlir:2:12"
    assert "tosa.rescale" in e.value.message and "conv2d" in e.value.hint


# -- every converter, one elementwise table and the rest one by one ------------------------------------------


def elementwise(op, dtype, n_in, out_dtype=None):
    out_dtype = out_dtype or dtype
    args = ", ".join(f"%a{i}: tensor<2x3x{dtype}>" for i in range(n_in))
    operands = ", ".join(f"%a{i}" for i in range(n_in))
    types = ", ".join([f"tensor<2x3x{dtype}>"] * n_in)
    return f"""func.func @f({args}) -> tensor<2x3x{out_dtype}> {{
      %0 = tosa.{op} {operands} : ({types}) -> tensor<2x3x{out_dtype}>
      return %0 : tensor<2x3x{out_dtype}>
    }}"""


FLOATS = r(2, 3) + 2.5, r(2, 3)  # positive first operand, for log and pow
INTS = np.array([[7, -7, 12], [-3, 5, 0]], np.int32), np.array([[2, 3, -5], [4, -4, 1]], np.int32)
BOOLS = np.array([[1, 0, 1], [0, 1, 0]], bool), np.array([[1, 1, 0], [0, 0, 1]], bool)
ELEMENTWISE = [
    ("add", "f32", 2, np.add), ("sub", "f32", 2, np.subtract), ("maximum", "f32", 2, np.maximum),
    ("minimum", "f32", 2, np.minimum), ("pow", "f32", 2, np.power),
    ("bitwise_and", "i32", 2, np.bitwise_and), ("bitwise_or", "i32", 2, np.bitwise_or),
    ("bitwise_xor", "i32", 2, np.bitwise_xor), ("intdiv", "i32", 2, lambda a, b: np.trunc(a / b).astype(np.int32)),
    ("logical_and", "i1", 2, np.logical_and), ("logical_or", "i1", 2, np.logical_or),
    ("logical_xor", "i1", 2, np.logical_xor), ("logical_not", "i1", 1, np.logical_not),
    ("bitwise_not", "i32", 1, np.invert), ("log", "f32", 1, np.log), ("rsqrt", "f32", 1, lambda x: 1 / np.sqrt(x)),
    ("negate", "f32", 1, np.negative), ("ceil", "f32", 1, np.ceil), ("sin", "f32", 1, np.sin),
    ("cos", "f32", 1, np.cos), ("identity", "f32", 1, lambda x: x),
]


@pytest.mark.parametrize("op, dtype, n_in, ref", ELEMENTWISE, ids=[e[0] for e in ELEMENTWISE])
def test_elementwise_op(op, dtype, n_in, ref):
    inputs = {"f32": FLOATS, "i32": INTS, "i1": BOOLS}[dtype][:n_in]
    np.testing.assert_allclose(run(elementwise(op, dtype, n_in), *inputs)[0], ref(*inputs), rtol=1e-5)


@pytest.mark.parametrize("op, ref", [("equal", np.equal), ("greater", np.greater), ("greater_equal", np.greater_equal)])
def test_comparison(op, ref):
    a, b = FLOATS[1], np.where(np.arange(6).reshape(2, 3) % 2, FLOATS[1], 0).astype(np.float32)
    np.testing.assert_array_equal(run(elementwise(op, "f32", 2, "i1"), a, b)[0], ref(a, b))


@pytest.mark.parametrize("op, dtype, ref", [
    ("reduce_max", "f32", np.max), ("reduce_min", "f32", np.min), ("reduce_product", "f32", np.prod),
    ("reduce_all", "i1", np.all), ("reduce_any", "i1", np.any)])
def test_reduction_keeps_the_axis(op, dtype, ref):
    text = f"""func.func @f(%a: tensor<2x3x{dtype}>) -> tensor<2x1x{dtype}> {{
      %0 = tosa.{op} %a {{axis = 1 : i32}} : (tensor<2x3x{dtype}>) -> tensor<2x1x{dtype}>
      return %0 : tensor<2x1x{dtype}>
    }}"""
    a = FLOATS[1] if dtype == "f32" else BOOLS[0]
    np.testing.assert_allclose(run(text, a)[0], ref(a, axis=1, keepdims=True), rtol=1e-6)


def test_fully_connected_with_ohwi_style_weights():
    """TOSA before 1.0: weights [out, in] and a bias."""
    text = """func.func @f(%x: tensor<2x4xf32>, %w: tensor<3x4xf32>, %b: tensor<3xf32>) -> tensor<2x3xf32> {
      %0 = tosa.fully_connected %x, %w, %b : (tensor<2x4xf32>, tensor<3x4xf32>, tensor<3xf32>) -> tensor<2x3xf32>
      return %0 : tensor<2x3xf32>
    }"""
    x, w, b = r(2, 4), r(3, 4), r(3)
    np.testing.assert_allclose(run(text, x, w, b)[0], x @ w.T + b, rtol=1e-5)


def test_reverse_along_an_axis():
    text = """func.func @f(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {
      %0 = tosa.reverse %a {axis = 1 : i32} : (tensor<2x3xf32>) -> tensor<2x3xf32>
      return %0 : tensor<2x3xf32>
    }"""
    a = r(2, 3)
    np.testing.assert_array_equal(run(text, a)[0], a[:, ::-1])


def transpose_conv_reference(x, w, bias, stride, out_pad):
    """The TOSA spec's loop: out[n, iy*sy + ky + top, ix*sx + kx + left, oc] += x[n, iy, ix, ic] * w[oc, ky, kx, ic]."""
    n, ih, iw, _ = x.shape
    oc, kh, kw, _ = w.shape
    (sy, sx), (top, bottom, left, right) = stride, out_pad
    oh, ow = (ih - 1) * sy + top + bottom + kh, (iw - 1) * sx + left + right + kw
    out = np.zeros((n, oh, ow, oc), np.float64) + bias
    for iy in range(ih):
        for ix in range(iw):
            for ky in range(kh):
                for kx in range(kw):
                    oy, ox = iy * sy + ky + top, ix * sx + kx + left
                    if 0 <= oy < oh and 0 <= ox < ow:
                        out[:, oy, ox] += x[:, iy, ix] @ w[:, ky, kx].T
    return out


@pytest.mark.parametrize("stride, out_pad", [((2, 2), (0, 0, 0, 0)), ((2, 1), (1, -1, 0, 2))])
def test_transpose_conv2d_matches_the_spec_loop(stride, out_pad):
    x, w, b = r(1, 3, 4, 2), r(3, 3, 2, 2), r(3)
    ref = transpose_conv_reference(x, w, b, stride, out_pad)
    out_type = "x".join(map(str, ref.shape)) + "xf32"
    text = f"""func.func @f(%x: tensor<1x3x4x2xf32>, %w: tensor<3x3x2x2xf32>, %b: tensor<3xf32>)
           -> tensor<{out_type}> {{
      %zp = "tosa.const"() <{{values = dense<0.0> : tensor<1xf32>}}> : () -> tensor<1xf32>
      %0 = tosa.transpose_conv2d %x, %w, %b, %zp, %zp
           {{acc_type = f32, out_pad = array<i64: {", ".join(map(str, out_pad))}>,
             stride = array<i64: {stride[0]}, {stride[1]}>}}
           : (tensor<1x3x4x2xf32>, tensor<3x3x2x2xf32>, tensor<3xf32>, tensor<1xf32>, tensor<1xf32>)
           -> tensor<{out_type}>
      return %0 : tensor<{out_type}>
    }}"""
    np.testing.assert_allclose(run(text, x, w, b)[0], ref, rtol=1e-4, atol=1e-5)


def test_every_converter_has_a_test():
    """Each tosa op the importer converts is spelled in a test of this file."""
    from pathlib import Path

    from retarget.importers.mlir import supported_ops

    text = Path(__file__).read_text()
    spelled = {op for op in supported_ops("tosa") if f"tosa.{op.split('.', 1)[1]} " in text
               or f'"tosa.{op.split(".", 1)[1]}"' in text or f"'{op.split('.', 1)[1]}'" in text
               or f'"{op.split(".", 1)[1]}"' in text}
    assert set(supported_ops("tosa")) - spelled == set()
