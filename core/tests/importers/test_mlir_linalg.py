"""linalg on tensors: named ops accumulate into outs; generic runs over its iteration space."""

import math

import numpy as np
import pytest
from retarget.importers.mlir import import_mlir
from retarget.vmvx.interpreter import run_function

rng = np.random.default_rng(1)


def run(text, *inputs):
    module = import_mlir(text, "test.mlir")
    (fn,) = module.functions.values()
    return run_function(fn, [np.asarray(x) for x in inputs]), fn


def r(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def test_matmul_on_zero_fill_is_a_single_matmul():
    text = """func.func @f(%a: tensor<3x4xf32>, %b: tensor<4x5xf32>) -> tensor<3x5xf32> {
      %z = arith.constant 0.0 : f32
      %e = tensor.empty() : tensor<3x5xf32>
      %f = linalg.fill ins(%z : f32) outs(%e : tensor<3x5xf32>) -> tensor<3x5xf32>
      %0 = linalg.matmul ins(%a, %b : tensor<3x4xf32>, tensor<4x5xf32>) outs(%f : tensor<3x5xf32>) -> tensor<3x5xf32>
      return %0 : tensor<3x5xf32>
    }"""
    a, b = r(3, 4), r(4, 5)
    (out,), fn = run(text, a, b)
    np.testing.assert_allclose(out, a @ b, rtol=1e-5)
    assert [op.name for op in fn.ops] == ["rt.matmul"]


def test_matmul_accumulates_into_a_nonzero_init():
    text = """func.func @f(%a: tensor<3x4xf32>, %b: tensor<4x5xf32>, %c: tensor<3x5xf32>) -> tensor<3x5xf32> {
      %0 = linalg.matmul ins(%a, %b : tensor<3x4xf32>, tensor<4x5xf32>) outs(%c : tensor<3x5xf32>) -> tensor<3x5xf32>
      return %0 : tensor<3x5xf32>
    }"""
    a, b, c = r(3, 4), r(4, 5), r(3, 5)
    np.testing.assert_allclose(run(text, a, b, c)[0][0], c + a @ b, rtol=1e-5)


def test_generic_form_of_matmul_imports_like_the_pretty_form():
    text = """func.func @f(%a: tensor<3x4xf32>, %b: tensor<4x5xf32>, %c: tensor<3x5xf32>) -> tensor<3x5xf32> {
      %0 = "linalg.matmul"(%a, %b, %c) <{operandSegmentSizes = array<i32: 2, 1>}> ({
      ^bb0(%x: f32, %y: f32, %acc: f32):
        %m = arith.mulf %x, %y : f32
        %s = arith.addf %acc, %m : f32
        linalg.yield %s : f32
      }) : (tensor<3x4xf32>, tensor<4x5xf32>, tensor<3x5xf32>) -> tensor<3x5xf32>
      return %0 : tensor<3x5xf32>
    }"""
    a, b, c = r(3, 4), r(4, 5), r(3, 5)
    np.testing.assert_allclose(run(text, a, b, c)[0][0], c + a @ b, rtol=1e-5)


def test_batch_matmul_and_matvec():
    text = """func.func @f(%a: tensor<2x3x4xf32>, %b: tensor<2x4x5xf32>, %m: tensor<3x4xf32>, %v: tensor<4xf32>)
           -> (tensor<2x3x5xf32>, tensor<3xf32>) {
      %z = arith.constant 0.0 : f32
      %e = tensor.empty() : tensor<2x3x5xf32>
      %f = linalg.fill ins(%z : f32) outs(%e : tensor<2x3x5xf32>) -> tensor<2x3x5xf32>
      %0 = linalg.batch_matmul ins(%a, %b : tensor<2x3x4xf32>, tensor<2x4x5xf32>) outs(%f : tensor<2x3x5xf32>)
           -> tensor<2x3x5xf32>
      %e1 = tensor.empty() : tensor<3xf32>
      %f1 = linalg.fill ins(%z : f32) outs(%e1 : tensor<3xf32>) -> tensor<3xf32>
      %1 = linalg.matvec ins(%m, %v : tensor<3x4xf32>, tensor<4xf32>) outs(%f1 : tensor<3xf32>) -> tensor<3xf32>
      return %0, %1 : tensor<2x3x5xf32>, tensor<3xf32>
    }"""
    a, b, m, v = r(2, 3, 4), r(2, 4, 5), r(3, 4), r(4)
    (o0, o1), _ = run(text, a, b, m, v)
    np.testing.assert_allclose(o0, a @ b, rtol=1e-5)
    np.testing.assert_allclose(o1, m @ v, rtol=1e-5)


def _conv_ref_nchw(x, w, stride, groups=1):
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh, ow = (h - kh) // stride + 1, (wd - kw) // stride + 1
    out = np.zeros((n, o, oh, ow), np.float64)
    for oc in range(o):
        g = oc // (o // groups)
        for i in range(oh):
            for j in range(ow):
                patch = x[:, g * cg:(g + 1) * cg, i * stride:i * stride + kh, j * stride:j * stride + kw]
                out[:, oc, i, j] = (patch * w[oc]).sum(axis=(1, 2, 3))
    return out


def test_conv_2d_nhwc_hwcf_with_strides():
    text = """func.func @f(%x: tensor<1x7x7x3xf32>, %w: tensor<3x3x3x4xf32>) -> tensor<1x3x3x4xf32> {
      %z = arith.constant 0.0 : f32
      %e = tensor.empty() : tensor<1x3x3x4xf32>
      %f = linalg.fill ins(%z : f32) outs(%e : tensor<1x3x3x4xf32>) -> tensor<1x3x3x4xf32>
      %0 = linalg.conv_2d_nhwc_hwcf {dilations = dense<1> : tensor<2xi64>, strides = dense<2> : tensor<2xi64>}
           ins(%x, %w : tensor<1x7x7x3xf32>, tensor<3x3x3x4xf32>) outs(%f : tensor<1x3x3x4xf32>) -> tensor<1x3x3x4xf32>
      return %0 : tensor<1x3x3x4xf32>
    }"""
    x, w = r(1, 7, 7, 3), r(3, 3, 3, 4)
    ref = _conv_ref_nchw(x.transpose(0, 3, 1, 2), w.transpose(3, 2, 0, 1), 2).transpose(0, 2, 3, 1)
    np.testing.assert_allclose(run(text, x, w)[0][0], ref, rtol=1e-5, atol=1e-5)


def test_conv_2d_nchw_fchw():
    text = """func.func @f(%x: tensor<1x3x6x6xf32>, %w: tensor<4x3x3x3xf32>, %c: tensor<1x4x4x4xf32>)
           -> tensor<1x4x4x4xf32> {
      %0 = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>}
           ins(%x, %w : tensor<1x3x6x6xf32>, tensor<4x3x3x3xf32>) outs(%c : tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
      return %0 : tensor<1x4x4x4xf32>
    }"""
    x, w, c = r(1, 3, 6, 6), r(4, 3, 3, 3), r(1, 4, 4, 4)
    np.testing.assert_allclose(run(text, x, w, c)[0][0], c + _conv_ref_nchw(x, w, 1), rtol=1e-5, atol=1e-5)


def test_depthwise_conv_2d_nhwc_hwc():
    text = """func.func @f(%x: tensor<1x5x5x3xf32>, %w: tensor<3x3x3xf32>) -> tensor<1x3x3x3xf32> {
      %z = arith.constant 0.0 : f32
      %e = tensor.empty() : tensor<1x3x3x3xf32>
      %f = linalg.fill ins(%z : f32) outs(%e : tensor<1x3x3x3xf32>) -> tensor<1x3x3x3xf32>
      %0 = linalg.depthwise_conv_2d_nhwc_hwc {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}
           ins(%x, %w : tensor<1x5x5x3xf32>, tensor<3x3x3xf32>) outs(%f : tensor<1x3x3x3xf32>) -> tensor<1x3x3x3xf32>
      return %0 : tensor<1x3x3x3xf32>
    }"""
    x, w = r(1, 5, 5, 3), r(3, 3, 3)
    w_oihw = w.transpose(2, 0, 1)[:, None]
    ref = _conv_ref_nchw(x.transpose(0, 3, 1, 2), w_oihw, 1, groups=3).transpose(0, 2, 3, 1)
    np.testing.assert_allclose(run(text, x, w)[0][0], ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind, init, ref", [
    ("max", "0xFF800000", lambda v: v.max(axis=(2, 4))), ("sum", "0.0", lambda v: v.sum(axis=(2, 4)))])
def test_pooling_nhwc(kind, init, ref):
    text = f"""func.func @f(%x: tensor<1x4x4x2xf32>) -> tensor<1x2x2x2xf32> {{
      %i = arith.constant {init} : f32
      %k = tensor.empty() : tensor<2x2xf32>
      %e = tensor.empty() : tensor<1x2x2x2xf32>
      %f = linalg.fill ins(%i : f32) outs(%e : tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xf32>
      %0 = linalg.pooling_nhwc_{kind} {{dilations = dense<1> : tensor<2xi64>, strides = dense<2> : tensor<2xi64>}}
           ins(%x, %k : tensor<1x4x4x2xf32>, tensor<2x2xf32>) outs(%f : tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xf32>
      return %0 : tensor<1x2x2x2xf32>
    }}"""
    x = r(1, 4, 4, 2)
    np.testing.assert_allclose(run(text, x)[0][0], ref(x.reshape(1, 2, 2, 2, 2, 2)), rtol=1e-5)


def test_pooling_nchw_max():
    text = """func.func @f(%x: tensor<1x2x4x4xf32>) -> tensor<1x2x2x2xf32> {
      %i = arith.constant -3.40282347E+38 : f32
      %k = tensor.empty() : tensor<2x2xf32>
      %e = tensor.empty() : tensor<1x2x2x2xf32>
      %f = linalg.fill ins(%i : f32) outs(%e : tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xf32>
      %0 = linalg.pooling_nchw_max {dilations = dense<1> : tensor<2xi64>, strides = dense<2> : tensor<2xi64>}
           ins(%x, %k : tensor<1x2x4x4xf32>, tensor<2x2xf32>) outs(%f : tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xf32>
      return %0 : tensor<1x2x2x2xf32>
    }"""
    x = r(1, 2, 4, 4)
    np.testing.assert_allclose(run(text, x)[0][0], x.reshape(1, 2, 2, 2, 2, 2).max(axis=(3, 5)), rtol=1e-6)


def test_generic_elementwise_broadcasts_inputs_through_maps():
    text = """#id = affine_map<(d0, d1) -> (d0, d1)>
    #col = affine_map<(d0, d1) -> (d0)>
    #tr = affine_map<(d0, d1) -> (d1, d0)>
    func.func @f(%a: tensor<3x4xf32>, %v: tensor<3xf32>, %t: tensor<4x3xf32>) -> tensor<3x4xf32> {
      %e = tensor.empty() : tensor<3x4xf32>
      %0 = linalg.generic {indexing_maps = [#id, #col, #tr, #id], iterator_types = ["parallel", "parallel"]}
          ins(%a, %v, %t : tensor<3x4xf32>, tensor<3xf32>, tensor<4x3xf32>) outs(%e : tensor<3x4xf32>) {
      ^bb0(%x: f32, %y: f32, %z: f32, %out: f32):
        %s = arith.mulf %x, %y : f32
        %q = arith.subf %s, %z : f32
        %g = math.exp %q : f32
        linalg.yield %g : f32
      } -> tensor<3x4xf32>
      return %0 : tensor<3x4xf32>
    }"""
    a, v, t = r(3, 4), r(3), r(4, 3)
    np.testing.assert_allclose(run(text, a, v, t)[0][0], np.exp(a * v[:, None] - t.T), rtol=1e-5)


def test_generic_elementwise_that_reads_outs_uses_the_init():
    text = """#id = affine_map<(d0) -> (d0)>
    func.func @f(%a: tensor<4xf32>, %c: tensor<4xf32>) -> tensor<4xf32> {
      %0 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
          ins(%a : tensor<4xf32>) outs(%c : tensor<4xf32>) {
      ^bb0(%x: f32, %out: f32):
        %s = arith.addf %x, %out : f32
        linalg.yield %s : f32
      } -> tensor<4xf32>
      return %0 : tensor<4xf32>
    }"""
    a, c = r(4), r(4)
    np.testing.assert_allclose(run(text, a, c)[0][0], a + c, rtol=1e-6)


def test_generic_reduction_combines_with_the_init():
    text = """#id = affine_map<(d0, d1) -> (d0, d1)>
    #red = affine_map<(d0, d1) -> (d0)>
    func.func @f(%a: tensor<3x5xf32>, %c: tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>) {
      %0 = linalg.generic {indexing_maps = [#id, #red], iterator_types = ["parallel", "reduction"]}
          ins(%a : tensor<3x5xf32>) outs(%c : tensor<3xf32>) {
      ^bb0(%x: f32, %acc: f32):
        %sq = arith.mulf %x, %x : f32
        %s = arith.addf %sq, %acc : f32
        linalg.yield %s : f32
      } -> tensor<3xf32>
      %1 = linalg.generic {indexing_maps = [#id, #red], iterator_types = ["parallel", "reduction"]}
          ins(%a : tensor<3x5xf32>) outs(%c : tensor<3xf32>) {
      ^bb0(%x: f32, %acc: f32):
        %m = arith.maximumf %acc, %x : f32
        linalg.yield %m : f32
      } -> tensor<3xf32>
      return %0, %1 : tensor<3xf32>, tensor<3xf32>
    }"""
    a, c = r(3, 5), r(3)
    (s, m), _ = run(text, a, c)
    np.testing.assert_allclose(s, c + (a * a).sum(1), rtol=1e-5)
    np.testing.assert_allclose(m, np.maximum(c, a.max(1)), rtol=1e-6)


def test_generic_contraction_with_transposed_operand_becomes_matmul():
    text = """#a = affine_map<(d0, d1, d2) -> (d0, d2)>
    #b = affine_map<(d0, d1, d2) -> (d1, d2)>
    #c = affine_map<(d0, d1, d2) -> (d0, d1)>
    func.func @f(%x: tensor<3x4xf32>, %y: tensor<5x4xf32>, %c: tensor<3x5xf32>) -> tensor<3x5xf32> {
      %0 = linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"]}
          ins(%x, %y : tensor<3x4xf32>, tensor<5x4xf32>) outs(%c : tensor<3x5xf32>) {
      ^bb0(%p: f32, %q: f32, %acc: f32):
        %m = arith.mulf %p, %q : f32
        %s = arith.addf %acc, %m : f32
        linalg.yield %s : f32
      } -> tensor<3x5xf32>
      return %0 : tensor<3x5xf32>
    }"""
    x, y, c = r(3, 4), r(5, 4), r(3, 5)
    (out,), fn = run(text, x, y, c)
    np.testing.assert_allclose(out, c + x @ y.T, rtol=1e-5)
    assert "rt.matmul" in [op.name for op in fn.ops]


def test_generic_with_linalg_index():
    text = """#id = affine_map<(d0, d1) -> (d0, d1)>
    func.func @f(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {
      %0 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
          ins(%a : tensor<2x3xf32>) outs(%a : tensor<2x3xf32>) {
      ^bb0(%x: f32, %out: f32):
        %i = linalg.index 1 : index
        %ii = arith.index_cast %i : index to i32
        %f = arith.sitofp %ii : i32 to f32
        %s = arith.addf %x, %f : f32
        linalg.yield %s : f32
      } -> tensor<2x3xf32>
      return %0 : tensor<2x3xf32>
    }"""
    a = r(2, 3)
    np.testing.assert_allclose(run(text, a)[0][0], a + np.arange(3), rtol=1e-6)


def test_reduce_with_region_and_short_form():
    text = """func.func @f(%a: tensor<3x5xf32>) -> (tensor<3xf32>, tensor<5xf32>) {
      %z = arith.constant 0.0 : f32
      %e = tensor.empty() : tensor<3xf32>
      %f = linalg.fill ins(%z : f32) outs(%e : tensor<3xf32>) -> tensor<3xf32>
      %0 = linalg.reduce ins(%a : tensor<3x5xf32>) outs(%f : tensor<3xf32>) dimensions = [1]
        (%in: f32, %init: f32) {
          %s = arith.addf %in, %init : f32
          linalg.yield %s : f32
        }
      %e2 = tensor.empty() : tensor<5xf32>
      %n = arith.constant 0xFF800000 : f32
      %f2 = linalg.fill ins(%n : f32) outs(%e2 : tensor<5xf32>) -> tensor<5xf32>
      %1 = linalg.reduce { arith.maximumf } ins(%a : tensor<3x5xf32>) outs(%f2 : tensor<5xf32>) dimensions = [0]
      return %0, %1 : tensor<3xf32>, tensor<5xf32>
    }"""
    a = r(3, 5)
    (s, m), fn = run(text, a)
    np.testing.assert_allclose(s, a.sum(1), rtol=1e-5)
    np.testing.assert_allclose(m, a.max(0), rtol=1e-6)


def test_transpose_broadcast_and_map():
    text = """func.func @f(%a: tensor<3x5xf32>, %v: tensor<5xf32>) -> tensor<5x3xf32> {
      %e = tensor.empty() : tensor<5x3xf32>
      %t = linalg.transpose ins(%a : tensor<3x5xf32>) outs(%e : tensor<5x3xf32>) permutation = [1, 0]
      %b = linalg.broadcast ins(%v : tensor<5xf32>) outs(%e : tensor<5x3xf32>) dimensions = [1]
      %0 = linalg.map { arith.addf } ins(%t, %b : tensor<5x3xf32>, tensor<5x3xf32>) outs(%e : tensor<5x3xf32>)
      %1 = linalg.map ins(%0 : tensor<5x3xf32>) outs(%e : tensor<5x3xf32>)
        (%x: f32) {
          %y = math.tanh %x : f32
          linalg.yield %y : f32
        }
      return %1 : tensor<5x3xf32>
    }"""
    a, v = r(3, 5), r(5)
    np.testing.assert_allclose(run(text, a, v)[0][0], np.tanh(a.T + v[:, None]), rtol=1e-5)


@pytest.mark.parametrize("op, ref", [("add", np.add), ("sub", np.subtract), ("mul", np.multiply),
                                     ("div", np.divide), ("max", np.maximum)])
def test_named_elementwise_binary(op, ref):
    text = f"""func.func @f(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>) -> tensor<2x3xf32> {{
      %e = tensor.empty() : tensor<2x3xf32>
      %0 = linalg.{op} ins(%a, %b : tensor<2x3xf32>, tensor<2x3xf32>) outs(%e : tensor<2x3xf32>) -> tensor<2x3xf32>
      return %0 : tensor<2x3xf32>
    }}"""
    a, b = r(2, 3), r(2, 3)
    np.testing.assert_allclose(run(text, a, b)[0][0], ref(a, b), rtol=1e-6)


@pytest.mark.parametrize("op, ref", [("exp", np.exp), ("abs", np.abs), ("negf", np.negative), ("tanh", np.tanh),
                                     ("erf", np.vectorize(math.erf)), ("floor", np.floor)])
def test_named_elementwise_unary(op, ref):
    text = f"""func.func @f(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {{
      %e = tensor.empty() : tensor<2x3xf32>
      %0 = linalg.{op} ins(%a : tensor<2x3xf32>) outs(%e : tensor<2x3xf32>) -> tensor<2x3xf32>
      return %0 : tensor<2x3xf32>
    }}"""
    a = r(2, 3)
    np.testing.assert_allclose(run(text, a)[0][0], ref(a), rtol=1e-5, atol=1e-7)


CONV_GENERIC = """#x = affine_map<(n, oh, ow, f, kh, kw, c) -> (n, oh * 2 + kh, ow * 2 + kw * 2, c)>
#k = affine_map<(n, oh, ow, f, kh, kw, c) -> (kh, kw, c, f)>
#y = affine_map<(n, oh, ow, f, kh, kw, c) -> (n, oh, ow, f)>
func.func @f(%x: tensor<1x7x9x3xf32>, %k: tensor<3x2x3x4xf32>, %init: tensor<1x3x3x4xf32>) -> tensor<1x3x3x4xf32> {
  %0 = linalg.generic {indexing_maps = [#x, #k, #y],
      iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction", "reduction", "reduction"]}
      ins(%x, %k : tensor<1x7x9x3xf32>, tensor<3x2x3x4xf32>) outs(%init : tensor<1x3x3x4xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = BODY
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  } -> tensor<1x3x3x4xf32>
  return %0 : tensor<1x3x3x4xf32>
}"""


def conv_reference(x, k, init):
    """stride 2, width dilation 2, NHWC x HWCF."""
    out = init.astype(np.float64).copy()
    for i in range(3):
        for j in range(3):
            window = x[0, 2 * i:2 * i + 3, 2 * j:2 * j + 3:2]  # [kh, kw, c]
            out[0, i, j] += np.einsum("hwc,hwcf->f", window, k)
    return out


@pytest.mark.parametrize("body", ["arith.mulf %a, %b : f32", "arith.mulf %b, %a : f32"])
def test_generic_with_conv_style_maps_contracts_its_windows(body):
    """`oh * 2 + kh` reads: each such axis becomes a gather of its window positions (im2col), then one matmul."""
    x, k, init = r(1, 7, 9, 3), r(3, 2, 3, 4), r(1, 3, 3, 4)
    module = import_mlir(CONV_GENERIC.replace("BODY", body), "conv.mlir")
    (fn,) = module.functions.values()
    assert [op.name for op in fn.ops].count("rt.matmul") == 1
    np.testing.assert_allclose(run_function(fn, [x, k, init])[0], conv_reference(x, k, init), rtol=1e-5, atol=1e-5)


def test_generic_with_conv_style_maps_and_any_body():
    """A body that is not a plain product (here |a| * b) runs broadcast over the whole iteration space."""
    x, k, init = r(1, 7, 9, 3), r(3, 2, 3, 4), r(1, 3, 3, 4)
    text = CONV_GENERIC.replace("%m = BODY", "%p = math.absf %a : f32\n    %m = arith.mulf %p, %b : f32")
    np.testing.assert_allclose(run(text, x, k, init)[0][0], conv_reference(np.abs(x), k, init), rtol=1e-5, atol=1e-5)


def test_generic_with_a_constant_index_reads_that_element():
    text = """#x = affine_map<(d0) -> (d0, 2)>
    #y = affine_map<(d0) -> (d0)>
    func.func @f(%x: tensor<3x4xf32>, %init: tensor<3xf32>) -> tensor<3xf32> {
      %0 = linalg.generic {indexing_maps = [#x, #y], iterator_types = ["parallel"]}
          ins(%x : tensor<3x4xf32>) outs(%init : tensor<3xf32>) {
      ^bb0(%a: f32, %acc: f32):
        linalg.yield %a : f32
      } -> tensor<3xf32>
      return %0 : tensor<3xf32>
    }"""
    x = r(3, 4)
    np.testing.assert_array_equal(run(text, x, r(3))[0][0], x[:, 2])
