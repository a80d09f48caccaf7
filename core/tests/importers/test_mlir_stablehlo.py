"""stablehlo: JAX's MLP, CNN and transformer exports, and single ops in pretty and generic form."""

from pathlib import Path

import numpy as np
import pytest
from retarget.errors import UnsupportedOpError
from retarget.importers.mlir import import_mlir
from retarget.vmvx.interpreter import run_function

DATA = Path(__file__).parent / "mlir"
rng = np.random.default_rng(3)


def run(text, *inputs):
    module = import_mlir(text, "test.mlir")
    fn = module.functions.get("main") or next(iter(module.functions.values()))
    return run_function(fn, [np.asarray(x) for x in inputs])


def r(*shape):
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("name, rtol", [("jax_mlp", 1e-5), ("jax_cnn", 1e-5), ("jax_transformer", 1e-4)])
def test_jax_export_matches_jax_outputs(name, rtol):
    text = (DATA / f"{name}.stablehlo.mlir").read_text()
    saved = np.load(DATA / f"{name}.npz")
    inputs = [saved[f"in{i}"] for i in range(len(saved.files) - 1)]
    (out,) = run(text, *inputs)
    np.testing.assert_allclose(out, saved["out"], rtol=rtol, atol=rtol * np.abs(saved["out"]).max())


def test_dot_general_with_batch_and_contracting_dims():
    text = """func.func @main(%a: tensor<2x3x4xf32>, %b: tensor<2x5x4xf32>) -> tensor<2x3x5xf32> {
      %0 = stablehlo.dot_general %a, %b, batching_dims = [0] x [0], contracting_dims = [2] x [2], precision = [DEFAULT, DEFAULT] : (tensor<2x3x4xf32>, tensor<2x5x4xf32>) -> tensor<2x3x5xf32>
      return %0 : tensor<2x3x5xf32>
    }"""
    a, b = r(2, 3, 4), r(2, 5, 4)
    np.testing.assert_allclose(run(text, a, b)[0], np.einsum("bik,bjk->bij", a, b), rtol=1e-5)


def test_dot_general_generic_form_reads_dot_dimension_numbers():
    text = """func.func @main(%a: tensor<4x3xf32>, %b: tensor<4x5xf32>) -> tensor<3x5xf32> {
      %0 = "stablehlo.dot_general"(%a, %b) <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [0], rhs_contracting_dimensions = [0]>}> : (tensor<4x3xf32>, tensor<4x5xf32>) -> tensor<3x5xf32>
      return %0 : tensor<3x5xf32>
    }"""
    a, b = r(4, 3), r(4, 5)
    np.testing.assert_allclose(run(text, a, b)[0], a.T @ b, rtol=1e-5)


def test_convolution_nchw_layout_with_feature_groups():
    text = """func.func @main(%x: tensor<1x4x5x5xf32>, %w: tensor<4x2x3x3xf32>) -> tensor<1x4x3x3xf32> {
      %0 = stablehlo.convolution(%x, %w) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {stride = [1, 1], pad = [[0, 0], [0, 0]], rhs_dilate = [1, 1]} {batch_group_count = 1 : i64, feature_group_count = 2 : i64} : (tensor<1x4x5x5xf32>, tensor<4x2x3x3xf32>) -> tensor<1x4x3x3xf32>
      return %0 : tensor<1x4x3x3xf32>
    }"""
    x, w = r(1, 4, 5, 5), r(4, 2, 3, 3)
    ref = np.zeros((1, 4, 3, 3), np.float32)
    for o in range(4):
        g = o // 2
        for i in range(3):
            for j in range(3):
                ref[0, o, i, j] = (x[0, 2 * g:2 * g + 2, i:i + 3, j:j + 3] * w[o]).sum()
    np.testing.assert_allclose(run(text, x, w)[0], ref, rtol=1e-4, atol=1e-5)


def test_reduce_with_region_and_nonidentity_init():
    text = """func.func @main(%a: tensor<3x4xf32>) -> tensor<3xf32> {
      %init = stablehlo.constant dense<1.0> : tensor<f32>
      %0 = stablehlo.reduce(%a init: %init) across dimensions = [1] : (tensor<3x4xf32>, tensor<f32>) -> tensor<3xf32>
       reducer(%x: tensor<f32>, %y: tensor<f32>)  {
        %s = stablehlo.add %x, %y : tensor<f32>
        stablehlo.return %s : tensor<f32>
      }
      return %0 : tensor<3xf32>
    }"""
    a = r(3, 4)
    np.testing.assert_allclose(run(text, a)[0], a.sum(1) + 1, rtol=1e-5)


def test_reduce_window_max_with_padding():
    text = """func.func @main(%a: tensor<1x4x4x1xf32>) -> tensor<1x2x2x1xf32> {
      %init = stablehlo.constant dense<0xFF800000> : tensor<f32>
      %0 = "stablehlo.reduce_window"(%a, %init) <{padding = dense<[[0, 0], [1, 1], [1, 1], [0, 0]]> : tensor<4x2xi64>, window_dimensions = array<i64: 1, 3, 3, 1>, window_strides = array<i64: 1, 2, 2, 1>}> ({
      ^bb0(%x: tensor<f32>, %y: tensor<f32>):
        %m = stablehlo.maximum %x, %y : tensor<f32>
        stablehlo.return %m : tensor<f32>
      }) : (tensor<1x4x4x1xf32>, tensor<f32>) -> tensor<1x2x2x1xf32>
      return %0 : tensor<1x2x2x1xf32>
    }"""
    a = r(1, 4, 4, 1)
    p = np.pad(a[0, :, :, 0], 1, constant_values=-np.inf)
    ref = np.array([[p[i:i + 3, j:j + 3].max() for j in (0, 2)] for i in (0, 2)])
    np.testing.assert_allclose(run(text, a)[0][0, :, :, 0], ref, rtol=1e-6)


def test_shape_ops_iota_compare_select_convert():
    text = """func.func @main(%a: tensor<2x3xf32>) -> (tensor<3x2xf32>, tensor<4x3xf32>, tensor<1x2xf32>, tensor<3x5xf32>, tensor<2x3xi32>) {
      %0 = stablehlo.transpose %a, dims = [1, 0] : (tensor<2x3xf32>) -> tensor<3x2xf32>
      %1 = stablehlo.concatenate %a, %a, dim = 0 : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
      %2 = stablehlo.slice %a [0:1, 0:3:2] : (tensor<2x3xf32>) -> tensor<1x2xf32>
      %z = stablehlo.constant dense<0.0> : tensor<f32>
      %3 = stablehlo.pad %a, %z, low = [0, 1], high = [1, 1], interior = [0, 0] : (tensor<2x3xf32>, tensor<f32>) -> tensor<3x5xf32>
      %i = stablehlo.iota dim = 1 : tensor<2x3xi32>
      %c = stablehlo.convert %a : (tensor<2x3xf32>) -> tensor<2x3xi32>
      %p = stablehlo.compare GT, %i, %c, SIGNED : (tensor<2x3xi32>, tensor<2x3xi32>) -> tensor<2x3xi1>
      %4 = stablehlo.select %p, %i, %c : tensor<2x3xi1>, tensor<2x3xi32>
      return %0, %1, %2, %3, %4 : tensor<3x2xf32>, tensor<4x3xf32>, tensor<1x2xf32>, tensor<3x5xf32>, tensor<2x3xi32>
    }"""
    a = r(2, 3) * 3
    t, c, s, p, sel = run(text, a)
    np.testing.assert_array_equal(t, a.T)
    np.testing.assert_array_equal(c, np.concatenate([a, a]))
    np.testing.assert_array_equal(s, a[0:1, 0:3:2])
    np.testing.assert_array_equal(p, np.pad(a, [(0, 1), (1, 1)]))
    iota, conv = np.broadcast_to(np.arange(3, dtype=np.int32), (2, 3)), np.trunc(a).astype(np.int32)
    np.testing.assert_array_equal(sel, np.where(iota > conv, iota, conv))


@pytest.mark.parametrize("op, ref", [
    ("exponential", np.exp), ("tanh", np.tanh), ("logistic", lambda x: 1 / (1 + np.exp(-x))),
    ("negate", np.negative), ("abs", np.abs), ("rsqrt", lambda x: 1 / np.sqrt(np.abs(x) + 1))])
def test_unary_ops(op, ref):
    pre = "%x = stablehlo.abs %a : tensor<4xf32>\n %one = stablehlo.constant dense<1.0> : tensor<4xf32>\n %y = stablehlo.add %x, %one : tensor<4xf32>" \
        if op == "rsqrt" else "%y = stablehlo.add %a, %a : tensor<4xf32>"
    text = f"""func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {{
      {pre}
      %0 = stablehlo.{op} %y : tensor<4xf32>
      return %0 : tensor<4xf32>
    }}"""
    a = r(4)
    x = a if op == "rsqrt" else a + a
    np.testing.assert_allclose(run(text, a)[0], ref(x), rtol=1e-5)


@pytest.mark.parametrize("op, ref", [("add", np.add), ("subtract", np.subtract), ("multiply", np.multiply),
                                     ("divide", np.divide), ("maximum", np.maximum), ("minimum", np.minimum)])
def test_binary_ops_pretty_and_generic_agree(op, ref):
    pretty = f"""func.func @main(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {{
      %0 = stablehlo.{op} %a, %b : tensor<4xf32>
      return %0 : tensor<4xf32>
    }}"""
    generic = f"""func.func @main(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {{
      %0 = "stablehlo.{op}"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
      return %0 : tensor<4xf32>
    }}"""
    a, b = r(4), r(4)
    np.testing.assert_allclose(run(pretty, a, b)[0], ref(a, b), rtol=1e-6)
    np.testing.assert_array_equal(run(pretty, a, b)[0], run(generic, a, b)[0])


def test_custom_call_is_unsupported_and_names_the_target():
    text = """func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {
      %0 = stablehlo.custom_call @Sharding(%a) {backend_config = ""} : (tensor<4xf32>) -> tensor<4xf32>
      return %0 : tensor<4xf32>
    }"""
    with pytest.raises(UnsupportedOpError) as e:
        import_mlir(text, "m.mlir")
    assert e.value.location.startswith("m.mlir:2:")
    assert "custom_call" in e.value.message and "Sharding" in e.value.message
