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
      %0 = stablehlo.dot_general %a, %b, batching_dims = [0] x [0], contracting_dims = [2] x [2],
           precision = [DEFAULT, DEFAULT] : (tensor<2x3x4xf32>, tensor<2x5x4xf32>) -> tensor<2x3x5xf32>
      return %0 : tensor<2x3x5xf32>
    }"""
    a, b = r(2, 3, 4), r(2, 5, 4)
    np.testing.assert_allclose(run(text, a, b)[0], np.einsum("bik,bjk->bij", a, b), rtol=1e-5)


def test_dot_general_generic_form_reads_dot_dimension_numbers():
    text = """func.func @main(%a: tensor<4x3xf32>, %b: tensor<4x5xf32>) -> tensor<3x5xf32> {
      %0 = "stablehlo.dot_general"(%a, %b)
           <{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [0],
             rhs_contracting_dimensions = [0]>}>
           : (tensor<4x3xf32>, tensor<4x5xf32>) -> tensor<3x5xf32>
      return %0 : tensor<3x5xf32>
    }"""
    a, b = r(4, 3), r(4, 5)
    np.testing.assert_allclose(run(text, a, b)[0], a.T @ b, rtol=1e-5)


def test_convolution_nchw_layout_with_feature_groups():
    text = """func.func @main(%x: tensor<1x4x5x5xf32>, %w: tensor<4x2x3x3xf32>) -> tensor<1x4x3x3xf32> {
      %0 = stablehlo.convolution(%x, %w) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1],
           window = {stride = [1, 1], pad = [[0, 0], [0, 0]], rhs_dilate = [1, 1]}
           {batch_group_count = 1 : i64, feature_group_count = 2 : i64}
           : (tensor<1x4x5x5xf32>, tensor<4x2x3x3xf32>) -> tensor<1x4x3x3xf32>
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
      %0 = "stablehlo.reduce_window"(%a, %init) <{padding = dense<[[0, 0], [1, 1], [1, 1], [0, 0]]> : tensor<4x2xi64>,
           window_dimensions = array<i64: 1, 3, 3, 1>, window_strides = array<i64: 1, 2, 2, 1>}> ({
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
    text = """func.func @main(%a: tensor<2x3xf32>)
           -> (tensor<3x2xf32>, tensor<4x3xf32>, tensor<1x2xf32>, tensor<3x5xf32>, tensor<2x3xi32>) {
      %0 = stablehlo.transpose %a, dims = [1, 0] : (tensor<2x3xf32>) -> tensor<3x2xf32>
      %1 = stablehlo.concatenate %a, %a, dim = 0 : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
      %2 = stablehlo.slice %a [0:1, 0:3:2] : (tensor<2x3xf32>) -> tensor<1x2xf32>
      %z = stablehlo.constant dense<0.0> : tensor<f32>
      %3 = stablehlo.pad %a, %z, low = [0, 1], high = [1, 1], interior = [0, 0]
           : (tensor<2x3xf32>, tensor<f32>) -> tensor<3x5xf32>
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
    pre = ("%x = stablehlo.abs %a : tensor<4xf32>\n %one = stablehlo.constant dense<1.0> : tensor<4xf32>\n"
           " %y = stablehlo.add %x, %one : tensor<4xf32>") \
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


# -- gather, dynamic slices, reverse, loops, sort, any reducer, transposed convolution (as JAX emits them) ------


def test_gather_of_rows_is_an_embedding_lookup():
    """`w[i]` for a 2-D index: JAX's gather with one collapsed dim and full slices."""
    text = """func.func @main(%w: tensor<10x8xf32>, %i: tensor<2x3xi32>) -> tensor<2x3x8xf32> {
      %0 = stablehlo.broadcast_in_dim %i, dims = [0, 1] : (tensor<2x3xi32>) -> tensor<2x3x1xi32>
      %1 = "stablehlo.gather"(%w, %0)
           <{dimension_numbers = #stablehlo.gather<offset_dims = [2], collapsed_slice_dims = [0],
               start_index_map = [0], index_vector_dim = 2>,
             indices_are_sorted = false, slice_sizes = array<i64: 1, 8>}>
           : (tensor<10x8xf32>, tensor<2x3x1xi32>) -> tensor<2x3x8xf32>
      return %1 : tensor<2x3x8xf32>
    }"""
    w, i = r(10, 8), np.array([[1, 2, 3], [9, 0, 5]], np.int32)
    np.testing.assert_array_equal(run(text, w, i)[0], w[i])


def test_gather_of_columns_puts_the_offset_dim_first():
    text = """func.func @main(%x: tensor<4x5xf32>, %i: tensor<2x1xi32>) -> tensor<4x2xf32> {
      %0 = "stablehlo.gather"(%x, %i)
           <{dimension_numbers = #stablehlo.gather<offset_dims = [0], collapsed_slice_dims = [1],
               start_index_map = [1], index_vector_dim = 1>,
             indices_are_sorted = false, slice_sizes = array<i64: 4, 1>}>
           : (tensor<4x5xf32>, tensor<2x1xi32>) -> tensor<4x2xf32>
      return %0 : tensor<4x2xf32>
    }"""
    x = r(4, 5)
    np.testing.assert_array_equal(run(text, x, np.array([[1], [3]], np.int32))[0], x[:, [1, 3]])


def test_gather_with_batching_dims_is_take_along_axis():
    text = """func.func @main(%x: tensor<4x5xf32>, %i: tensor<4x2x1xi32>) -> tensor<4x2xf32> {
      %0 = "stablehlo.gather"(%x, %i)
           <{dimension_numbers = #stablehlo.gather<collapsed_slice_dims = [1], operand_batching_dims = [0],
               start_indices_batching_dims = [0], start_index_map = [1], index_vector_dim = 2>,
             indices_are_sorted = false, slice_sizes = array<i64: 1, 1>}>
           : (tensor<4x5xf32>, tensor<4x2x1xi32>) -> tensor<4x2xf32>
      return %0 : tensor<4x2xf32>
    }"""
    x, i = r(4, 5), np.array([[0, 4], [1, 1], [3, 2], [4, 0]], np.int32)
    np.testing.assert_array_equal(run(text, x, i[..., None])[0], np.take_along_axis(x, i, 1))


def test_gather_of_windows_clamps_their_starts():
    """Two index components, a window of 2 along the last dim: starts past the end move back in."""
    text = """func.func @main(%x: tensor<4x5xf32>, %i: tensor<3x2xi32>) -> tensor<3x2xf32> {
      %0 = "stablehlo.gather"(%x, %i)
           <{dimension_numbers = #stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0],
               start_index_map = [0, 1], index_vector_dim = 1>,
             indices_are_sorted = false, slice_sizes = array<i64: 1, 2>}>
           : (tensor<4x5xf32>, tensor<3x2xi32>) -> tensor<3x2xf32>
      return %0 : tensor<3x2xf32>
    }"""
    x, i = r(4, 5), np.array([[0, 1], [3, 4], [9, -2]], np.int32)
    ref = np.stack([x[min(a, 3), min(max(b, 0), 3):min(max(b, 0), 3) + 2] for a, b in i])
    np.testing.assert_array_equal(run(text, x, i)[0], ref)


def test_dynamic_slice_and_update_at_runtime_starts():
    text = """func.func @main(%x: tensor<4x5xf32>, %u: tensor<2x2xf32>, %i: tensor<i32>, %j: tensor<i32>)
           -> (tensor<2x2xf32>, tensor<4x5xf32>) {
      %0 = stablehlo.dynamic_slice %x, %i, %j, sizes = [2, 2]
           : (tensor<4x5xf32>, tensor<i32>, tensor<i32>) -> tensor<2x2xf32>
      %1 = stablehlo.dynamic_update_slice %x, %u, %i, %j
           : (tensor<4x5xf32>, tensor<2x2xf32>, tensor<i32>, tensor<i32>) -> tensor<4x5xf32>
      return %0, %1 : tensor<2x2xf32>, tensor<4x5xf32>
    }"""
    x, u = r(4, 5), r(2, 2)
    for i, j in [(1, 2), (3, 9)]:  # the second is clamped to (2, 3)
        ci, cj = min(i, 2), min(j, 3)
        got, updated = run(text, x, u, np.int32(i), np.int32(j))
        ref = x.copy()
        ref[ci:ci + 2, cj:cj + 2] = u
        np.testing.assert_array_equal(got, x[ci:ci + 2, cj:cj + 2])
        np.testing.assert_array_equal(updated, ref)


def test_reverse():
    text = """func.func @main(%x: tensor<3x4xf32>) -> tensor<3x4xf32> {
      %0 = stablehlo.reverse %x, dims = [0, 1] : tensor<3x4xf32>
      return %0 : tensor<3x4xf32>
    }"""
    x = r(3, 4)
    np.testing.assert_array_equal(run(text, x)[0], x[::-1, ::-1])


FORI_LOOP = """func.func @main(%x: tensor<4xf32>, %stop: tensor<i32>) -> tensor<4xf32> {
  %c = stablehlo.constant dense<0> : tensor<i32>
  %n = stablehlo.constant dense<3> : tensor<i32>
  %0:2 = stablehlo.while(%it = %c, %acc = %x) : tensor<i32>, tensor<4xf32>
  cond {
    %1 = stablehlo.compare LT, %it, LIMIT, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %1 : tensor<i1>
  } do {
    %two = stablehlo.constant dense<2.0> : tensor<4xf32>
    %f = stablehlo.convert %it : (tensor<i32>) -> tensor<f32>
    %fb = stablehlo.broadcast_in_dim %f, dims = [] : (tensor<f32>) -> tensor<4xf32>
    %m = stablehlo.multiply %acc, %two : tensor<4xf32>
    %a = stablehlo.add %m, %fb : tensor<4xf32>
    %one = stablehlo.constant dense<1> : tensor<i32>
    %next = stablehlo.add %it, %one : tensor<i32>
    stablehlo.return %next, %a : tensor<i32>, tensor<4xf32>
  }
  return %0#1 : tensor<4xf32>
}"""


def test_while_with_a_known_trip_count_is_unrolled():
    x = r(4)
    ref = x.copy()
    for i in range(3):
        ref = ref * 2 + i
    np.testing.assert_allclose(run(FORI_LOOP.replace("LIMIT", "%n"), x, np.int32(3))[0], ref, rtol=1e-6)


def test_while_whose_condition_depends_on_an_input_is_refused():
    with pytest.raises(UnsupportedOpError, match="run time") as e:
        import_mlir(FORI_LOOP.replace("LIMIT", "%stop"), "loop.mlir")
    assert e.value.location.startswith("loop.mlir:4:") and "unrolled" in e.value.hint


ARGSORT = """func.func @main(%x: tensor<3x5xf32>) -> (tensor<3x5xf32>, tensor<3x5xi32>) {
  %i = stablehlo.iota dim = 1 : tensor<3x5xi32>
  %0:2 = "stablehlo.sort"(%x, %i) <{dimension = 1 : i64, is_stable = true}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>, %c: tensor<i32>, %d: tensor<i32>):
    %lt = stablehlo.compare LT, %a, %b, TOTALORDER : (tensor<f32>, tensor<f32>) -> tensor<i1>
    stablehlo.return %lt : tensor<i1>
  }) : (tensor<3x5xf32>, tensor<3x5xi32>) -> (tensor<3x5xf32>, tensor<3x5xi32>)
  return %0#0, %0#1 : tensor<3x5xf32>, tensor<3x5xi32>
}"""


def test_sort_of_two_operands_is_stable_in_total_order():
    """Ties keep their order; -0 sorts before +0 and NaN after +inf, as IEEE's totalOrder says."""
    x = np.array([[3, 1, 2, 1, 0], [0.0, -0.0, 0.0, -0.0, 1], [np.nan, 1, -np.inf, 2, np.inf]], np.float32)
    values, order = run(ARGSORT, x)
    want = np.array([[4, 1, 3, 2, 0], [1, 3, 0, 2, 4], [2, 1, 3, 4, 0]], np.int32)
    np.testing.assert_array_equal(order, want)
    np.testing.assert_array_equal(np.signbit(values[1]), [True, True, False, False, False])
    np.testing.assert_array_equal(values, np.take_along_axis(x, want, 1))


def test_reduce_of_values_and_indices_is_argmax_with_first_index_on_ties():
    """JAX's argmax: one reduce over (x, iota) whose body keeps the larger value, then the smaller index."""
    text = """func.func @main(%x: tensor<3x5xf32>) -> tensor<3xi32> {
      %i = stablehlo.iota dim = 1 : tensor<3x5xi32>
      %lo = stablehlo.constant dense<0xFF800000> : tensor<f32>
      %z = stablehlo.constant dense<0> : tensor<i32>
      %1:2 = stablehlo.reduce(%x init: %lo), (%i init: %z) across dimensions = [1]
           : (tensor<3x5xf32>, tensor<3x5xi32>, tensor<f32>, tensor<i32>) -> (tensor<3xf32>, tensor<3xi32>)
       reducer(%a: tensor<f32>, %c: tensor<f32>) (%b: tensor<i32>, %d: tensor<i32>)  {
        %2 = stablehlo.compare GT, %a, %c, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
        %3 = stablehlo.compare NE, %a, %a, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
        %4 = stablehlo.or %2, %3 : tensor<i1>
        %5 = stablehlo.compare EQ, %a, %c, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
        %6 = stablehlo.compare LT, %b, %d, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
        %7 = stablehlo.and %5, %6 : tensor<i1>
        %8 = stablehlo.or %4, %7 : tensor<i1>
        %9 = stablehlo.select %4, %a, %c : tensor<i1>, tensor<f32>
        %10 = stablehlo.select %8, %b, %d : tensor<i1>, tensor<i32>
        stablehlo.return %9, %10 : tensor<f32>, tensor<i32>
      }
      return %1#1 : tensor<3xi32>
    }"""
    x = np.array([[1, 5, 2, 5, 0], [-1, -1, -1, -1, -1], [0, 1, np.nan, 3, np.nan]], np.float32)
    np.testing.assert_array_equal(run(text, x)[0], [1, 0, 2])


def _correlate(x, w, pad, lhs_dilation=(1, 1)):
    """NCHW x OIHW cross-correlation after input dilation and (signed) padding: StableHLO's definition."""
    n, c, h, wd = x.shape
    dh, dw = lhs_dilation
    xd = np.zeros((n, c, (h - 1) * dh + 1, (wd - 1) * dw + 1), x.dtype)
    xd[:, :, ::dh, ::dw] = x
    (pt, pb), (pl, pr) = pad
    xd = np.pad(xd, [(0, 0), (0, 0), (max(pt, 0), max(pb, 0)), (max(pl, 0), max(pr, 0))])
    xd = xd[:, :, max(-pt, 0):xd.shape[2] - max(-pb, 0), max(-pl, 0):xd.shape[3] - max(-pr, 0)]
    kh, kw = w.shape[2:]
    oh, ow = xd.shape[2] - kh + 1, xd.shape[3] - kw + 1
    return np.stack([np.stack([np.einsum("nchw,ochw->no", xd[:, :, i:i + kh, j:j + kw], w) for j in range(ow)], -1)
                     for i in range(oh)], -2)


def test_convolution_with_input_dilation_is_a_transposed_convolution():
    """What `jax.lax.conv_transpose(x, k, (2, 2), "SAME")` emits in NHWC / HWIO."""
    text = """func.func @main(%x: tensor<1x4x4x3xf32>, %k: tensor<3x3x3x2xf32>) -> tensor<1x8x8x2xf32> {
      %0 = stablehlo.convolution(%x, %k) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f],
           window = {stride = [1, 1], pad = [[2, 1], [2, 1]], lhs_dilate = [2, 2], rhs_dilate = [1, 1],
                     reverse = [false, false]}
           {batch_group_count = 1 : i64, feature_group_count = 1 : i64,
            precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision DEFAULT>]}
           : (tensor<1x4x4x3xf32>, tensor<3x3x3x2xf32>) -> tensor<1x8x8x2xf32>
      return %0 : tensor<1x8x8x2xf32>
    }"""
    x, k = r(1, 4, 4, 3), r(3, 3, 3, 2)
    ref = _correlate(x.transpose(0, 3, 1, 2), k.transpose(3, 2, 0, 1), ((2, 1), (2, 1)), (2, 2))
    np.testing.assert_allclose(run(text, x, k)[0], ref.transpose(0, 2, 3, 1), rtol=1e-5, atol=1e-5)


def test_convolution_with_window_reversal_and_negative_padding():
    text = """func.func @main(%x: tensor<1x2x5x5xf32>, %k: tensor<3x2x2x3xf32>) -> tensor<1x3x3x2xf32> {
      %0 = stablehlo.convolution(%x, %k) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1],
           window = {stride = [1, 1], pad = [[-1, 0], [0, -1]], lhs_dilate = [1, 1], rhs_dilate = [1, 1],
                     reverse = [true, false]}
           {batch_group_count = 1 : i64, feature_group_count = 1 : i64}
           : (tensor<1x2x5x5xf32>, tensor<3x2x2x3xf32>) -> tensor<1x3x3x2xf32>
      return %0 : tensor<1x3x3x2xf32>
    }"""
    x, k = r(1, 2, 5, 5), r(3, 2, 2, 3)
    ref = _correlate(x, k[:, :, ::-1, :], ((-1, 0), (0, -1)))
    np.testing.assert_allclose(run(text, x, k)[0], ref, rtol=1e-5, atol=1e-5)


def test_pad_with_interior_and_negative_edges():
    text = """func.func @main(%x: tensor<4x5xf32>) -> tensor<7x15xf32> {
      %v = stablehlo.constant dense<5.000000e-01> : tensor<f32>
      %0 = stablehlo.pad %x, %v, low = [1, 0], high = [-1, 2], interior = [1, 2]
           : (tensor<4x5xf32>, tensor<f32>) -> tensor<7x15xf32>
      return %0 : tensor<7x15xf32>
    }"""
    x = r(4, 5)
    full = np.full((1 + 7 + 0, 13 + 2), 0.5, np.float32)
    full[1::2, 0:13:3] = x
    np.testing.assert_array_equal(run(text, x)[0], full[:7])
