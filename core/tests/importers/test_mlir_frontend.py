"""The importer API, func.call inlining, graph-IR input and the README's example MLP."""

from pathlib import Path

import numpy as np
from retarget.importers.mlir import MlirImporter, import_mlir
from retarget.ir import print_module, verify
from retarget.vmvx.interpreter import run_function

ROOT = Path(__file__).resolve().parents[3]
DATA = Path(__file__).parent / "mlir"


def test_importer_accepts_mlir_paths_only():
    importer = MlirImporter()
    assert importer.name == "mlir" and importer.suffixes == (".mlir",)
    assert importer.accepts("model.mlir") and importer.accepts(Path("a/b.mlir"))
    assert not importer.accepts("model.onnx") and not importer.accepts(object())


def test_example_mlp_imports_and_matches_numpy():
    module = MlirImporter().load(ROOT / "examples" / "mlp.mlir")
    fn = module.functions["predict"]
    assert [str(t) for t in fn.input_types] == ["tensor<1x16xf32>"]
    w = np.load(ROOT / "examples" / "mlp_weights.npz")
    x = np.random.default_rng(0).standard_normal((1, 16)).astype(np.float32)
    expected = np.maximum(x @ w["w1"] + w["b1"], 0) @ w["w2"] + w["b2"]
    np.testing.assert_allclose(run_function(fn, [x])[0], expected, rtol=1e-5, atol=1e-6)


def test_private_callees_are_inlined_and_not_exported():
    text = """func.func public @main(%a: tensor<3xf32>) -> tensor<3xf32> {
      %0 = call @double(%a) : (tensor<3xf32>) -> tensor<3xf32>
      %1 = func.call @double(%0) : (tensor<3xf32>) -> tensor<3xf32>
      return %1 : tensor<3xf32>
    }
    func.func private @double(%x: tensor<3xf32>) -> tensor<3xf32> {
      %0 = arith.addf %x, %x : tensor<3xf32>
      return %0 : tensor<3xf32>
    }"""
    module = import_mlir(text)
    assert list(module.functions) == ["main"]
    a = np.array([1, 2, 3], np.float32)
    np.testing.assert_array_equal(run_function(module.functions["main"], [a])[0], 4 * a)


def test_graph_ir_text_imports_back():
    text = """func.func @predict(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
      %w = arith.constant dense<2.0> : tensor<2x3xf32>
      %0 = arith.mulf %x, %w : tensor<2x3xf32>
      return %0 : tensor<2x3xf32>
    }"""
    module = import_mlir(text)
    again = import_mlir(print_module(module), "printed.mlir")
    x = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(run_function(again.functions["predict"], [x])[0], 2 * x)


def test_argument_names_come_from_arg_attrs():
    text = """func.func @f(%a: tensor<2xf32> {rt.name = "image"}, %b: tensor<2xf32>) -> tensor<2xf32> {
      %0 = arith.addf %a, %b : tensor<2xf32>
      return %0 : tensor<2xf32>
    }"""
    assert import_mlir(text).functions["f"].arg_names == ["image", "arg1"]


def test_dead_ops_are_dropped_and_module_verifies():
    text = """func.func @f(%a: tensor<2xf32>) -> tensor<2xf32> {
      %unused = math.exp %a : tensor<2xf32>
      %e = tensor.empty() : tensor<2xf32>
      return %a : tensor<2xf32>
    }"""
    module = verify(import_mlir(text))
    assert module.functions["f"].ops == []
