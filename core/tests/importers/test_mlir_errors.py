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
      %0 = "stablehlo.fft"(%a) : (tensor<4xf32>) -> tensor<4xf32>
      return %0 : tensor<4xf32>
    }"""
    with pytest.raises(UnsupportedOpError) as e:
        import_mlir(text, "s.mlir")
    assert e.value.location == "s.mlir:2:12" and "stablehlo.fft" in e.value.message


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


def test_generic_map_reading_past_its_operand_is_an_error():
    text = """#in = affine_map<(d0, d1) -> (d0 + d1)>
    #k = affine_map<(d0, d1) -> (d1)>
    #out = affine_map<(d0, d1) -> (d0)>
    func.func @f(%a: tensor<5xf32>, %k: tensor<3xf32>, %c: tensor<4xf32>) -> tensor<4xf32> {
      %0 = linalg.generic {indexing_maps = [#in, #k, #out], iterator_types = ["parallel", "reduction"]}
          ins(%a, %k : tensor<5xf32>, tensor<3xf32>) outs(%c : tensor<4xf32>) {
      ^bb0(%x: f32, %y: f32, %acc: f32):
        %m = arith.mulf %x, %y : f32
        %s = arith.addf %acc, %m : f32
        linalg.yield %s : f32
      } -> tensor<4xf32>
      return %0 : tensor<4xf32>
    }"""
    with pytest.raises(VerificationError, match="d0 \\+ d1 reads \\[0, 5\\] of a dim of size 5") as e:
        import_mlir(text, "g.mlir")
    assert e.value.location == "g.mlir:5:12"


# -- found by the fuzzer (retarget.testing.fuzz): each was a bare Python exception ------------------------

_ADD = """func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = arith.addf %a, %a : tensor<4xf32>
  return %0 : tensor<4xf32>
}"""


@pytest.mark.parametrize("attribute", [
    "[" * 5000 + "]" * 5000,  # lists
    "(" * 5000 + ")" * 5000 + " -> f32",  # type lists
    "tensor<" * 5000 + "f32" + ">" * 5000,  # element types
    "{a = " * 5000 + "}" * 5000,  # dictionaries
    "dense<" + "[" * 5000 + "1.0" + "]" * 5000 + "> : tensor<f32>",  # dense literals
    "affine_map<(d0) -> (" + "(" * 5000 + "d0" + ")" * 5000 + ")>",  # affine expressions
    "affine_map<(d0) -> (" + "-" * 5000 + "d0)>",
])
def test_deep_nesting_is_a_parse_error_not_a_recursion_error(attribute):
    text = _ADD.replace(" {\n", f" attributes {{x = {attribute}}} {{\n", 1)
    with pytest.raises(ParseError, match="nested more than 100 levels") as e:
        import_mlir(text, "deep.mlir")
    assert e.value.location.startswith("deep.mlir:1:")


def test_deeply_nested_regions_are_a_parse_error():
    text = "func.func @f() {" + '"test.op"() ({' * 3000 + "}) : () -> ()" * 3000 + "}"
    with pytest.raises(ParseError, match="nested more than 100 levels"):
        import_mlir(text, "regions.mlir")


def test_nesting_a_real_file_uses_is_fine():
    nested = "[" * 20 + "1.0" + "]" * 20
    text = f"""func.func @f() -> tensor<{'1x' * 20}f32> {{
  %0 = arith.constant dense<{nested}> : tensor<{'1x' * 20}f32>
  return %0 : tensor<{'1x' * 20}f32>
}}"""
    assert import_mlir(text, "ok.mlir").functions["f"].returns[0].type.shape == (1,) * 20


def test_bytes_that_are_not_utf8_are_a_parse_error_at_their_line(tmp_path):
    from retarget.importers.mlir import MlirImporter

    path = tmp_path / "latin1.mlir"
    path.write_bytes(_ADD.replace("%0 =", "%\xe9 =").encode("latin-1"))
    with pytest.raises(ParseError, match="byte 0xE9 is not UTF-8") as e:
        MlirImporter().load(path)
    assert e.value.location == f"{path}:2:4"


def test_a_bad_escape_in_a_string_is_a_parse_error():
    with pytest.raises(ParseError, match=r"invalid escape '\\u'"):
        import_mlir('"test.op\\uc"() : () -> ()', "s.mlir")


@pytest.mark.parametrize("dims", ["99999999999999999999x", "4294967296x4294967296x", "0x4611686018427387904x4x"])
def test_a_tensor_type_too_large_for_64_bits_is_a_parse_error(dims):
    text = _ADD.replace("%a: tensor<4xf32>)", f"%a: tensor<4xf32>, %b: tensor<{dims}f32>)")
    with pytest.raises(ParseError, match="more elements than fit in 64 bits") as e:
        import_mlir(text, "big.mlir")
    assert e.value.location == f"big.mlir:1:{text.index(dims) - len('tensor<') + 1}"


def test_a_huge_splat_constant_is_refused_before_it_is_allocated():
    text = """func.func @f() -> tensor<65536x65536x4xf32> {
  %0 = arith.constant dense<1.0> : tensor<65536x65536x4xf32>
  return %0 : tensor<65536x65536x4xf32>
}"""
    with pytest.raises(ParseError, match="would take 68,719,476,736 bytes") as e:
        import_mlir(text, "splat.mlir")
    assert e.value.location == "splat.mlir:2:23"


def test_a_scalar_constant_that_does_not_fit_its_type_is_an_error():
    text = "func.func @f() -> i32 {\n  %0 = arith.constant 99999999999999999999 : i32\n  return %0 : i32\n}"
    with pytest.raises(ParseError, match="arith.constant") as e:
        import_mlir(text, "c.mlir")
    assert e.value.location == "c.mlir:2:8"


def test_a_call_whose_type_is_not_a_function_type_is_a_parse_error():
    text = _ADD.replace("arith.addf %a, %a : tensor<4xf32>", "func.call @g(%a) : (tensor<4xf32>)")
    with pytest.raises(ParseError, match="expected a function type .* found the type list") as e:
        import_mlir(text, "call.mlir")
    assert e.value.location.startswith("call.mlir:2:")


def test_an_unknown_op_without_a_dialect_prefix_is_unsupported():
    with pytest.raises(UnsupportedOpError, match="unsupported op 'call'"):
        import_mlir("call @f() : () -> ()", "top.mlir")


def test_a_convolution_whose_dim_numbers_run_off_the_end_is_a_parse_error():
    text = "%0 = stablehlo.convolution(%a, %b) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f"
    with pytest.raises(ParseError, match="dim_numbers runs to the end"):
        import_mlir(text, "conv.mlir")
