"""Bad input gives a RetargetError with file:line:col, never a bare Python exception."""

import pytest
from retarget.errors import ParseError, UnsupportedOpError, VerificationError
from retarget.importers.mlir import import_mlir


def test_unsupported_op_names_the_op_and_lists_the_dialect():
    text = """func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
      %0 = linalg.softmax dimension(0) ins(%a : tensor<4xf32>) outs(%a : tensor<4xf32>) -> tensor<4xf32>
      return %0 : tensor<4xf32>
    }"""
    with pytest.raises(UnsupportedOpError) as e:
        import_mlir(text, "model.mlir")
    assert e.value.location == "model.mlir:2:12"
    assert "'linalg.softmax'" in e.value.message
    assert "matmul" in e.value.hint and "generic" in e.value.hint


def test_unsupported_generic_form_op_is_reported_at_its_location():
    text = """func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
      %0 = "stablehlo.sort"(%a) : (tensor<4xf32>) -> tensor<4xf32>
      return %0 : tensor<4xf32>
    }"""
    with pytest.raises(UnsupportedOpError) as e:
        import_mlir(text, "s.mlir")
    assert e.value.location == "s.mlir:2:12" and "stablehlo.sort" in e.value.message


def test_unknown_dialect_is_unsupported():
    text = """func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
      %0 = "mhlo.add"(%a, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
      return %0 : tensor<4xf32>
    }"""
    with pytest.raises(UnsupportedOpError, match="mhlo.add"):
        import_mlir(text, "s.mlir")


def test_malformed_text_is_a_parse_error_with_position():
    text = """func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
      %0 = arith.addf %a %a : tensor<4xf32>
      return %0 : tensor<4xf32>
    }"""
    with pytest.raises(ParseError) as e:
        import_mlir(text, "bad.mlir")
    assert e.value.location.startswith("bad.mlir:2:")


def test_shape_mismatch_names_the_op_and_location():
    text = """func.func @f(%a: tensor<3x4xf32>, %b: tensor<5x6xf32>) -> tensor<3x6xf32> {
      %0 = linalg.matmul ins(%a, %b : tensor<3x4xf32>, tensor<5x6xf32>) outs(%a : tensor<3x4xf32>) -> tensor<3x6xf32>
      return %0 : tensor<3x6xf32>
    }"""
    with pytest.raises(VerificationError) as e:
        import_mlir(text, "mm.mlir")
    assert "linalg.matmul" in e.value.message and e.value.location == "mm.mlir:2:12"


def test_declared_result_type_that_disagrees_is_an_error():
    text = """func.func @f(%a: tensor<4xf32>) -> tensor<5xf32> {
      %0 = stablehlo.exponential %a : (tensor<4xf32>) -> tensor<5xf32>
      return %0 : tensor<5xf32>
    }"""
    with pytest.raises(VerificationError, match="stablehlo.exponential"):
        import_mlir(text, "t.mlir")


def test_value_used_before_definition():
    text = """func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
      %0 = arith.addf %a, %nope : tensor<4xf32>
      return %0 : tensor<4xf32>
    }"""
    with pytest.raises(ParseError, match="%nope") as e:
        import_mlir(text, "u.mlir")
    assert e.value.location == "u.mlir:2:12"


def test_generic_with_convolution_style_map_is_unsupported():
    text = """#in = affine_map<(d0, d1) -> (d0 + d1)>
    #k = affine_map<(d0, d1) -> (d1)>
    #out = affine_map<(d0, d1) -> (d0)>
    func.func @f(%a: tensor<6xf32>, %k: tensor<3xf32>, %c: tensor<4xf32>) -> tensor<4xf32> {
      %0 = linalg.generic {indexing_maps = [#in, #k, #out], iterator_types = ["parallel", "reduction"]}
          ins(%a, %k : tensor<6xf32>, tensor<3xf32>) outs(%c : tensor<4xf32>) {
      ^bb0(%x: f32, %y: f32, %acc: f32):
        %m = arith.mulf %x, %y : f32
        %s = arith.addf %acc, %m : f32
        linalg.yield %s : f32
      } -> tensor<4xf32>
      return %0 : tensor<4xf32>
    }"""
    with pytest.raises(UnsupportedOpError, match="d0 \\+ d1") as e:
        import_mlir(text, "g.mlir")
    assert e.value.location == "g.mlir:5:12"
