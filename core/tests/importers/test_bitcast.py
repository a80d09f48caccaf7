"""Bitcasts (ONNX's BitCast, torch's `x.view(dtype)`, MLIR's arith/tensor.bitcast and stablehlo.bitcast_convert) are
`rt.bitcast`: each element's bits read as a type of the same width. Like a reshape it is a view, its result its
operand's bytes: no kernel computes it, and it is bit-exact on every target, in every precision mode."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import retarget

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from retarget.errors import UnsupportedOpError  # noqa: E402
from retarget.importers.mlir import import_mlir  # noqa: E402
from retarget.importers.onnx import OnnxImporter  # noqa: E402
from retarget.ir.dtypes import f16  # noqa: E402
from retarget.passes.precision import set_precision  # noqa: E402
from retarget.passes.simplify import canonicalize  # noqa: E402
from retarget.testing.onnx_cases import compiled_outputs, graph_of, matches_reference, model_of  # noqa: E402
from retarget.testing.torch_cases import importer_targets  # noqa: E402

TARGETS = sorted(set(importer_targets()) | {"llvm-cpu", "vulkan-spirv", "webgpu-spirv"})
SIGN = np.int32(0x7FFFFFFF)


def abs_through_the_bits():
    """s = x + y; bits = BitCast(s, i32); out = BitCast(bits & 0x7fffffff, f32), i.e. |s|, by its bits."""
    nodes = [helper.make_node("Add", ["x", "y"], ["s"]),
             helper.make_node("BitCast", ["s"], ["bits"], to=TensorProto.INT32),
             helper.make_node("BitwiseAnd", ["bits", "mask"], ["masked"]),
             helper.make_node("BitCast", ["masked"], ["out"], to=TensorProto.FLOAT)]
    x = np.arange(-32, 32, dtype=np.float32) * 0.375  # sums exact in f16 too: every precision mode agrees on s
    y = np.full_like(x, 0.25)
    y[:2] = [np.inf, -np.inf]
    return graph_of(nodes, {"x": x, "y": y}, ["out", "bits"], {"mask": SIGN}, opset=26), x, y


def dispatches(compiled) -> list[dict]:
    return [c for c in compiled.functions["main"]["program"] if c["op"] == "dispatch"]


@pytest.mark.parametrize("target", TARGETS)
def test_a_bitcast_between_kernels_is_bit_exact(target):
    model, x, y = abs_through_the_bits()
    out, bits = compiled_outputs(model, target, x, y)
    s = x + y
    assert bits.dtype == np.int32 and out.dtype == np.float32
    np.testing.assert_array_equal(bits, s.view(np.int32))
    np.testing.assert_array_equal(out.view(np.int32), s.view(np.int32) & SIGN)


# Types each target stores its own way (WGSL: bool, i8 and the halves in u32 words, i64 in two), through a bitcast
# on either side of a kernel: (nodes, inputs, constants), the result "y".
STORAGE_CASES = {
    "a computed bool as bytes": (
        [helper.make_node("Greater", ["x", "zero"], ["b"]),
         helper.make_node("BitCast", ["b"], ["u"], to=TensorProto.UINT8), helper.make_node("Add", ["u", "one"], ["y"])],
        {"x": np.linspace(-2, 2, 9, dtype=np.float32)}, {"zero": np.float32(0), "one": np.uint8(1)}),
    "a computed i64 as ui64": (
        [helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("BitCast", ["s"], ["u"], to=TensorProto.UINT64),
         helper.make_node("BitwiseXor", ["u", "m"], ["y"])],
        {"a": np.array([-1, 2**40, -2**50, 7]), "b": np.array([0, 3, -5, 2**33])},
        {"m": np.uint64(0xF0F0F0F0F0F0F0F0)}),
    "ui64 read as i64": (
        [helper.make_node("BitCast", ["u"], ["i"], to=TensorProto.INT64), helper.make_node("Neg", ["i"], ["y"])],
        {"u": np.array([0, 1, 2**63, 2**64 - 5, 2**40], np.uint64)}, {}),
    "a computed bf16 as i16": (
        [helper.make_node("Mul", ["h", "h"], ["p"]), helper.make_node("Neg", ["p"], ["n"]),
         helper.make_node("BitCast", ["n"], ["y"], to=TensorProto.INT16)],
        {"h": np.array([0.5, -1.5, 3.0, 100.0], ml_dtypes.bfloat16)}, {}),
    "ui16 read as bf16": (
        [helper.make_node("BitCast", ["u"], ["h"], to=TensorProto.BFLOAT16),
         helper.make_node("Add", ["h", "h"], ["y"])],
        {"u": np.array([0.5, -1.5, 3.0, 1e30], ml_dtypes.bfloat16).view(np.uint16)}, {}),
    "a computed f16 as ui16": (
        [helper.make_node("Mul", ["h", "h"], ["p"]), helper.make_node("BitCast", ["p"], ["y"], to=TensorProto.UINT16)],
        {"h": np.array([0.5, -1.5, 3.0, 100.0], np.float16)}, {}),
    "ui8 read as i8": (
        [helper.make_node("BitCast", ["u"], ["i"], to=TensorProto.INT8), helper.make_node("Cast", ["i"], ["y"], to=6)],
        {"u": np.array([0, 1, 127, 128, 200, 255], np.uint8)}, {}),
}


@pytest.mark.parametrize("case", STORAGE_CASES)
@pytest.mark.parametrize("target", TARGETS)
def test_a_bitcast_reads_a_types_storage_as_numpy_does_on_every_target(target, case):
    nodes, inputs, constants = STORAGE_CASES[case]
    matches_reference(graph_of(nodes, inputs, ["y"], constants, opset=26), target, inputs, rtol=0)


def test_a_bitcast_adds_no_dispatch_and_shares_its_operands_bytes():
    model, _, _ = abs_through_the_bits()
    compiled = retarget.compile(model, "llvm-cpu")
    add, masked = dispatches(compiled)
    assert [add["name"], masked["name"]] == ["main_dispatch_0_add", "main_dispatch_1_and"]
    s_slot = add["bindings"][-1]
    assert masked["bindings"][0] == s_slot  # And reads the Add's bytes as i32, where they are
    assert [o["slot"] for o in compiled.functions["main"]["outputs"]] == [masked["bindings"][-1], s_slot]


def test_a_bitcast_of_an_input_runs_no_kernel():
    model = model_of("BitCast", {"x": np.zeros(4, np.float64)}, opset=26, to=TensorProto.INT64)
    plan = retarget.compile(model, "llvm-cpu").functions["main"]
    assert plan["program"] == [] and plan["outputs"][0]["slot"] == plan["inputs"][0]["slot"]


@pytest.mark.parametrize("target", TARGETS)
def test_fp16_mode_keeps_a_bitcasts_bits_exact(target):
    """The bitcasts read and write f32 bits: an input's own (0.1 and 1e30 are no f16 values), and those of a sum
    computed in f16 (of values whose sums f16 holds exactly), widened back to f32."""
    nodes = [helper.make_node("BitCast", ["x"], ["xbits"], to=TensorProto.INT32),
             helper.make_node("BitwiseAnd", ["xbits", "mask"], ["masked"]),
             helper.make_node("BitCast", ["masked"], ["abs"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["h", "k"], ["s"]),
             helper.make_node("BitCast", ["s"], ["sbits"], to=TensorProto.INT32)]
    x = np.array([0.1, -1e30, -3.5, 2.0**-30, 1.0, -0.25, 6.5e5, -7.0], np.float32)
    h, k = np.arange(-4, 4, dtype=np.float32) * 0.75, np.full(8, 0.125, np.float32)
    model = graph_of(nodes, {"x": x, "h": h, "k": k}, ["abs", "sbits"], {"mask": SIGN}, opset=26)
    absolute, sbits = compiled_outputs(model, target, x, h, k, precision="f16")
    np.testing.assert_array_equal(absolute.view(np.int32), x.view(np.int32) & SIGN)
    np.testing.assert_array_equal(sbits, (h + k).view(np.int32))


def test_fp16_mode_casts_around_a_bitcast_and_keeps_its_types():
    model, _, _ = abs_through_the_bits()
    fn = set_precision(OnnxImporter().load(model), f16).functions["main"]
    bitcasts = [op for op in fn.ops if op.name == "rt.bitcast"]
    assert [(str(op.operands[0].type.dtype), str(op.result.type.dtype)) for op in bitcasts] == \
        [("f32", "i32"), ("i32", "f32")]
    assert bitcasts[0].operands[0].owner.name == "rt.cast"  # the f16 sum, widened back to the model's f32
    assert fn.returns[0] is bitcasts[1].result  # returned as it is, not through f16


@pytest.mark.parametrize("target", TARGETS)
def test_a_bitcast_between_4_bit_types_keeps_the_low_bits(target):
    """i4 -1 is the byte 0x0F (ml_dtypes keeps sub-byte values in the low bits), so it reads as ui4 15."""
    nodes = [helper.make_node("BitCast", ["x"], ["u"], to=TensorProto.UINT4),
             helper.make_node("Cast", ["u"], ["y"], to=TensorProto.INT32)]
    x = np.arange(-8, 8).astype(ml_dtypes.int4)
    (y,) = compiled_outputs(graph_of(nodes, {"x": x}, ["y"], opset=26), target, x)
    np.testing.assert_array_equal(y, x.view(ml_dtypes.uint4).astype(np.int32))


def test_a_bitcast_of_a_known_tensor_folds_as_numpys_view():
    c = np.array([1.0, -2.0, np.nan, np.inf], np.float32)
    nodes = [helper.make_node("BitCast", ["c"], ["bits"], to=TensorProto.INT32),
             helper.make_node("Add", ["x", "bits"], ["y"])]
    fn = OnnxImporter().load(graph_of(nodes, {"x": np.zeros(4, np.int32)}, ["y"], {"c": c}, opset=26)).functions["main"]
    assert [op.name for op in fn.ops] == ["rt.constant", "rt.add"]
    np.testing.assert_array_equal(fn.ops[0].attrs["value"].array, c.view(np.int32))


def test_a_bitcast_back_to_its_operands_type_is_no_op():
    nodes = [helper.make_node("BitCast", ["x"], ["i"], to=TensorProto.INT32),
             helper.make_node("BitCast", ["i"], ["u"], to=TensorProto.UINT32),
             helper.make_node("BitCast", ["u"], ["y"], to=TensorProto.FLOAT)]
    fn = canonicalize(OnnxImporter().load(graph_of(nodes, {"x": np.zeros(3, np.float32)}, ["y"], opset=26)))
    fn = fn.functions["main"]
    assert fn.ops == [] and fn.returns == fn.args


@pytest.mark.parametrize("x, to, message", [
    (np.zeros(4, np.float32), TensorProto.INT16, r"node 'cast' .* f32 has 32 bits and i16 16"),
    (np.zeros(4, np.uint8), TensorProto.BOOL, r"node 'cast' .* only the ui8 bytes 0 and 1 are i1 values"),
    (np.zeros(4, np.int8), TensorProto.INT4, r"node 'cast' .* i8 has 8 bits and i4 4"),
])
def test_a_bitcast_the_types_cannot_take_is_refused_naming_the_node(x, to, message):
    model = model_of("BitCast", {"x": x}, opset=26, to=to)
    model.graph.node[0].name = "cast"
    with pytest.raises(UnsupportedOpError, match=message):
        OnnxImporter().load(model)


def test_torch_view_as_a_type_of_the_same_width_is_a_bitcast():
    torch = pytest.importorskip("torch")
    from retarget.testing.torch_cases import compile_and_compare

    compile_and_compare(lambda x: ((x + 1).view(torch.int32) & 0x7FFFFFFF).view(torch.float32),
                        [torch.linspace(-4, 4, 16)], "llvm-cpu", tol=0)


def test_torch_view_as_a_type_of_another_width_is_refused():
    torch = pytest.importorskip("torch")
    from retarget.importers.torch_export import TorchImporter
    from retarget.testing.torch_cases import module_of

    program = torch.export.export(module_of(lambda x: x.view(torch.int16)), (torch.zeros(4),))
    with pytest.raises(UnsupportedOpError, match=r"aten.view.dtype' \(node 'view'\).* f32 has 32 bits and i16 16"):
        TorchImporter().load(program)


@pytest.mark.parametrize("op", ["arith.bitcast %a : tensor<4xf32> to tensor<4xi32>",
                                "tensor.bitcast %a : tensor<4xf32> to tensor<4xi32>",
                                "stablehlo.bitcast_convert %a : (tensor<4xf32>) -> tensor<4xi32>"])
def test_mlir_bitcasts_of_values_computed_at_run_time_import(op):
    fn = import_mlir(f"func.func @main(%a: tensor<4xf32>) -> tensor<4xi32> {{\n  %0 = {op}\n"
                     "  return %0 : tensor<4xi32>\n}").functions["main"]
    assert [(o.name, o.attrs) for o in fn.ops] == [("rt.bitcast", {"dtype": "i32"})]


def test_stablehlo_bitcast_convert_to_another_width_is_refused():
    text = ("func.func @main(%a: tensor<4xf32>) -> tensor<4x2xi16> {\n"
            "  %0 = stablehlo.bitcast_convert %a : (tensor<4xf32>) -> tensor<4x2xi16>\n"
            "  return %0 : tensor<4x2xi16>\n}")
    with pytest.raises(UnsupportedOpError, match="f32 has 32 bits and i16 16"):
        import_mlir(text)
