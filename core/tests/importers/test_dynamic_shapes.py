"""Symbolic dimensions from every importer: MLIR `?`, ONNX `dim_param`, torch.export `Dim`.

Each imported function is run by the reference interpreter at two sizes and compared with numpy.
"""

from __future__ import annotations

import numpy as np
import pytest
from retarget.errors import UnsupportedOpError
from retarget.importers.mlir import import_mlir
from retarget.ir import verify
from retarget.ir.symbolic import SymbolRange, sym
from retarget.vmvx.interpreter import run_function


def _run(fn, *arrays):
    return run_function(fn, [np.asarray(a, np.float32) for a in arrays])[0]


def test_mlir_linalg_with_tensor_dim_and_dynamic_empty():
    fn = import_mlir("""
func.func @main(%x: tensor<?x4xf32> {ml_program.identifier = "x"}, %w: tensor<4x8xf32>) -> tensor<?x8xf32> {
  %c0 = arith.constant 0 : index
  %d = tensor.dim %x, %c0 : tensor<?x4xf32>
  %e = tensor.empty(%d) : tensor<?x8xf32>
  %cst = arith.constant 0.0 : f32
  %z = linalg.fill ins(%cst : f32) outs(%e : tensor<?x8xf32>) -> tensor<?x8xf32>
  %y = linalg.matmul ins(%x, %w : tensor<?x4xf32>, tensor<4x8xf32>) outs(%z : tensor<?x8xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}""").functions["main"]
    assert fn.args[0].type.shape == (sym("x_dim0"), 4) and fn.returns[0].type.shape == (sym("x_dim0"), 8)
    w = np.arange(32, dtype=np.float32).reshape(4, 8)
    for n in (1, 5):
        x = np.ones((n, 4), np.float32)
        np.testing.assert_allclose(_run(fn, x, w), x @ w)


def test_mlir_tosa_unifies_the_sizes_an_add_needs_equal():
    fn = import_mlir("""
func.func @main(%a: tensor<?x4xf32>, %b: tensor<?x4xf32>) -> tensor<?x2xf32> {
  %0 = tosa.add %a, %b : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %s = tosa.const_shape {values = dense<[-1, 2]> : tensor<2xindex>} : () -> !tosa.shape<2>
  %1 = tosa.reshape %0, %s : (tensor<?x4xf32>, !tosa.shape<2>) -> tensor<?x2xf32>
  return %1 : tensor<?x2xf32>
}""").functions["main"]
    assert fn.args[0].type.shape == fn.args[1].type.shape == (sym("arg0_dim0"), 4)
    assert fn.returns[0].type.shape == (2 * sym("arg0_dim0"), 2)
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_allclose(_run(fn, a, a), (2 * a).reshape(6, 2))


def test_mlir_stablehlo_shape_tensors_from_get_dimension_size():
    fn = import_mlir("""
func.func public @main(%arg0: tensor<?x4xf32>) -> tensor<?x2xf32> {
  %0 = stablehlo.get_dimension_size %arg0, dim = 0 : (tensor<?x4xf32>) -> tensor<i32>
  %1 = stablehlo.reshape %0 : (tensor<i32>) -> tensor<1xi32>
  %c = stablehlo.constant dense<4> : tensor<1xi32>
  %2 = stablehlo.concatenate %1, %c, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
  %one = stablehlo.constant dense<1.0> : tensor<f32>
  %3 = stablehlo.dynamic_broadcast_in_dim %one, %2, dims = [] : (tensor<f32>, tensor<2xi32>) -> tensor<?x4xf32>
  %4 = stablehlo.add %arg0, %3 : tensor<?x4xf32>
  %c2 = stablehlo.constant dense<2> : tensor<i32>
  %5 = stablehlo.multiply %0, %c2 : tensor<i32>
  %6 = stablehlo.reshape %5 : (tensor<i32>) -> tensor<1xi32>
  %c2v = stablehlo.constant dense<2> : tensor<1xi32>
  %7 = stablehlo.concatenate %6, %c2v, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
  %8 = stablehlo.dynamic_reshape %4, %7 : (tensor<?x4xf32>, tensor<2xi32>) -> tensor<?x2xf32>
  return %8 : tensor<?x2xf32>
}""").functions["main"]
    for n in (1, 3):
        x = np.arange(4 * n, dtype=np.float32).reshape(n, 4)
        np.testing.assert_allclose(_run(fn, x), (x + 1).reshape(2 * n, 2))


def test_mlir_sizes_used_as_data_are_computed_at_run_time():
    """A size fed to arithmetic on tensors: an index cast to a float, and the divisor of a mean over a dynamic axis
    as JAX's shape polymorphism writes it in StableHLO (get_dimension_size, convert, divide)."""
    count = import_mlir("""
func.func @main(%x: tensor<?xf32>) -> tensor<f32> {
  %c0 = arith.constant 0 : index
  %d = tensor.dim %x, %c0 : tensor<?xf32>
  %f = arith.index_cast %d : index to i64
  %g = arith.sitofp %f : i64 to f32
  return %g : tensor<f32>
}""").functions["main"]
    mean = import_mlir("""
func.func public @main(%arg0: tensor<?x4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.get_dimension_size %arg0, dim = 0 : (tensor<?x4xf32>) -> tensor<i32>
  %1 = stablehlo.convert %0 : (tensor<i32>) -> tensor<f32>
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %2 = stablehlo.reduce(%arg0 init: %z) applies stablehlo.add across dimensions = [0]
      : (tensor<?x4xf32>, tensor<f32>) -> tensor<4xf32>
  %3 = stablehlo.broadcast_in_dim %1, dims = [] : (tensor<f32>) -> tensor<4xf32>
  %4 = stablehlo.divide %2, %3 : tensor<4xf32>
  return %4 : tensor<4xf32>
}""").functions["main"]
    for n in (1, 5):
        x = np.arange(4 * n, dtype=np.float32).reshape(n, 4)
        assert _run(count, x[:, 0]) == n
        np.testing.assert_allclose(_run(mean, x), x.mean(0), rtol=1e-6)


def test_onnx_dim_params_and_shape_arithmetic_become_symbols():
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    from retarget.importers.onnx import OnnxImporter

    # y = reshape(x + z, [shape(x)[0] * 2, -1]); x and z share "batch", w has an unnamed dim
    nodes = [helper.make_node("Add", ["x", "z"], ["s"]),
             helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "zero"], ["n"], axis=0),
             helper.make_node("Mul", ["n", "two"], ["n2"]),
             helper.make_node("Unsqueeze", ["n2", "axes"], ["n2v"]),
             helper.make_node("Concat", ["n2v", "minus_one"], ["target"], axis=0),
             helper.make_node("Reshape", ["s", "target"], ["y"])]
    inits = [helper.make_tensor("zero", TensorProto.INT64, [], [0]),
             helper.make_tensor("two", TensorProto.INT64, [], [2]),
             helper.make_tensor("axes", TensorProto.INT64, [1], [0]),
             helper.make_tensor("minus_one", TensorProto.INT64, [1], [-1])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4]),
                                           helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    fn = OnnxImporter().load(model).functions["main"]
    assert fn.symbols == {"batch": SymbolRange()}
    assert fn.returns[0].type.shape == (2 * sym("batch"), 2)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_allclose(_run(fn, x, x), (2 * x).reshape(6, 2))


def test_onnx_unnamed_dynamic_dims_get_names_from_input_and_axis():
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    from retarget.importers.onnx import OnnxImporter

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    fn = OnnxImporter().load(model).functions["main"]
    assert fn.args[0].type.shape == (sym("x_dim0"), 3)


def test_torch_export_dim_keeps_its_name_range_and_derived_sizes():
    torch = pytest.importorskip("torch")
    from retarget.compiler import import_model

    class Model(torch.nn.Module):
        def forward(self, x):
            n = x.shape[0]
            y = torch.cat([x, x], dim=0).reshape(n, 8)  # a derived size: 2n rows of 4, as n rows of 8
            return y.sum(-1) + torch.arange(n, dtype=torch.float32)

    batch = torch.export.Dim("batch", min=2, max=32)
    module = import_model(Model(), example_inputs=(torch.randn(3, 4),), dynamic_shapes=({0: batch},))
    verify(module)
    fn = module.functions["main"]
    assert fn.symbols == {"batch": SymbolRange(2, 32)} and fn.args[0].type.shape == (sym("batch"), 4)
    for n in (2, 7):
        x = torch.randn(n, 4)
        np.testing.assert_allclose(_run(fn, x.numpy()), Model()(x).numpy(), rtol=1e-5, atol=1e-5)


def test_torch_export_dim_without_bounds_is_at_least_one_and_unbounded():
    torch = pytest.importorskip("torch")
    from retarget.compiler import import_model

    class Model(torch.nn.Module):
        def forward(self, x):
            return torch.relu(x) * 2

    # torch records the missing bound as its own int_oo, which claims to be finite
    module = import_model(Model(), example_inputs=(torch.randn(3, 4),),
                          dynamic_shapes=({0: torch.export.Dim("rows")},))
    fn = module.functions["main"]
    assert fn.symbols == {"rows": SymbolRange(1, None)}
    x = torch.randn(300, 4)
    np.testing.assert_allclose(_run(fn, x.numpy()), Model()(x).numpy())


ONNX_DYNAMIC_BATCH = {  # torch modules whose ONNX export (batch as a dim_param) uses what a static one does not
    "a size as data (Shape -> Cast to float -> Mul)": lambda x: x * x.shape[0],
    "a mean over the batch, divided by its size": lambda x: x.sum(0) / x.shape[0],
    "a strided slice along the batch": lambda x: x.t()[:, ::3],
    "a top k along a static axis": lambda x: x.topk(2, dim=1).values,
    "a resize that keeps the batch": lambda x: torch_interpolate(x.reshape(x.shape[0], 1, 2, 3)),
    "a flatten (Shape -> ReduceProd)": lambda x: x.reshape(x.shape[0], 2, 3).flatten(0),
    "a flip of the batch (Slice by -1)": lambda x: x.flip(0),
    "every second row from the last (Slice by -2)": lambda x: x.flip(0)[::2],
    "a pixel shuffle and back (DepthToSpace, SpaceToDepth)": lambda x: torch_pixel_shuffles(x),
}


def torch_pixel_shuffles(x):
    import torch

    y = torch.nn.functional.pixel_shuffle(x.reshape(x.shape[0], 6, 1, 1).repeat(1, 4, 1, 1) * 2, 2)
    return torch.nn.functional.pixel_unshuffle(y + 1, 2)


def torch_interpolate(x):
    import torch

    return torch.nn.functional.interpolate(x, scale_factor=2, mode="nearest")


@pytest.mark.parametrize("name", sorted(ONNX_DYNAMIC_BATCH))
def test_onnx_exports_with_a_dynamic_batch_run_at_every_batch(name, tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnx")
    from retarget.bench.peers import export_onnx
    from retarget.importers.onnx import OnnxImporter

    class Model(torch.nn.Module):
        def forward(self, x):
            return ONNX_DYNAMIC_BATCH[name](x)

    path = export_onnx(Model(), (torch.randn(4, 6),), tmp_path / "m.onnx", opset=18,
                       dynamic_axes={"input_0": {0: "batch"}})
    fn = OnnxImporter().load(str(path)).functions["main"]
    assert fn.args[0].type.shape == (sym("batch"), 6)
    for n in (1, 4, 7):
        x = torch.randn(n, 6, generator=torch.Generator().manual_seed(n))
        np.testing.assert_allclose(_run(fn, x.numpy()), Model()(x).numpy(), rtol=1e-5, atol=1e-6)


def test_onnx_shape_made_data_then_used_as_a_shape_says_which_ops_keep_it_a_size():
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    from retarget.importers.onnx import OnnxImporter

    # reshape(x, [float(shape(x)[0]) -> int, -1]): the round trip through a float makes the size data
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "zero"], ["n"], axis=0),
             helper.make_node("Cast", ["n"], ["nf"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["nf"], ["ni"], to=TensorProto.INT64),
             helper.make_node("Unsqueeze", ["ni", "axes"], ["nv"]),
             helper.make_node("Concat", ["nv", "minus_one"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"])]
    inits = [helper.make_tensor("zero", TensorProto.INT64, [], [0]),
             helper.make_tensor("axes", TensorProto.INT64, [1], [0]),
             helper.make_tensor("minus_one", TensorProto.INT64, [1], [-1])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(UnsupportedOpError, match="must be known at import time") as info:
        OnnxImporter().load(model)
    assert "Reshape" in str(info.value) and "Gather" in info.value.hint and "other ops make it data" in info.value.hint


def test_onnx_dims_bound_a_dim_param_at_import_so_a_sort_along_it_imports(tmp_path):
    """A sort or a scan along a dynamic axis needs the axis's bound, and ONNX has none: `dims` gives it."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnx")
    import retarget
    from retarget.bench.peers import export_onnx

    class SortRows(torch.nn.Module):
        def forward(self, x):
            return x.t().sort(dim=1).values.cumsum(1)

    path = export_onnx(SortRows(), (torch.randn(4, 3),), tmp_path / "m.onnx", opset=18,
                       dynamic_axes={"input_0": {0: "batch"}})
    with pytest.raises(UnsupportedOpError, match="may be more than"):
        retarget.compile(str(path), "vmvx")
    fn = retarget.load(retarget.compile(str(path), "vmvx", dims={"batch": (1, 64)}), device="local-sync").main
    for n in (1, 5, 64):
        x = torch.randn(n, 3, generator=torch.Generator().manual_seed(n))
        np.testing.assert_allclose(fn(x.numpy()), SortRows()(x).numpy(), rtol=1e-5, atol=1e-5)
