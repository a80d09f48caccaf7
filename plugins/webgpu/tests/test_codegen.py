"""WGSL from kernel IR: every zoo dispatch validates in naga (wgpu's shader compiler), limits shape the
code, and what WGSL cannot hold is refused by name. Validation needs an adapter (lavapipe will do)."""

import dataclasses

import pytest
import retarget
from retarget.errors import UnsupportedOpError
from retarget.ir import dtypes
from retarget.testing import graphs
from retarget.testing.graphs import mlp_module
from retarget.testing.kernels import shared_kernel, sum_kernel
from retarget.testing.numerics import assert_same_bits
from retarget_webgpu import targets
from retarget_webgpu.compile import compile_kernels, render, unpack

DEFAULT = targets.parse("webgpu")


def _with_limits(**limits):
    merged = {**DEFAULT.extra["limits"], **{k.replace("_", "-"): v for k, v in limits.items()}}
    return dataclasses.replace(DEFAULT, extra={**DEFAULT.extra, "limits": merged})


def _validate(device, binary):
    for meta in unpack(binary.data):
        device.shader_module(meta["wgsl"], meta["name"])


def test_the_mlp_renders_to_one_wgsl_module_per_kernel():
    art = retarget.compile(mlp_module()[0], "webgpu-spirv")
    (exe,) = art.manifest["executables"]
    assert exe["format"] == "wgsl" and exe["arch"] == "webgpu"
    (meta,) = unpack(bytes(art.entries[exe["path"]]))
    assert "@compute @workgroup_size(256, 1, 1)" in meta["wgsl"] and f"fn {meta['name']}(" in meta["wgsl"]
    assert "var<uniform> rt_base" in meta["wgsl"] and not meta["packed"]
    assert meta["groups"] == [[0], [1], [2], [3]]


@pytest.mark.parametrize("name", ["mlp", "small_cnn", "mobilenet_v2", "resnet18", "transformer_block"])
def test_every_zoo_dispatch_validates_in_naga(webgpu_device, name):
    pytest.importorskip("torch")
    from retarget.testing import zoo

    model, inputs = zoo.make(name)
    art = retarget.compile(model, "webgpu-spirv", example_inputs=inputs)
    (exe,) = art.manifest["executables"]
    kernels = unpack(bytes(art.entries[exe["path"]]))
    assert len(kernels) == len(exe["entry_points"]) > 0
    for meta in kernels:
        webgpu_device.shader_module(meta["wgsl"], meta["name"])


def test_a_kernel_with_more_buffers_than_the_limit_is_packed_by_element_type(webgpu_device):
    binary = compile_kernels([sum_kernel("sum10", 10, 100)], DEFAULT)
    (meta,) = unpack(binary.data)
    assert meta["packed"] and meta["groups"] == [list(range(11))]
    assert "rt_mem_f32" in meta["wgsl"] and "var<storage, read_write> in0" not in meta["wgsl"]
    _validate(webgpu_device, binary)


def test_seven_buffers_are_not_packed():
    (meta,) = unpack(compile_kernels([sum_kernel("sum6", 6, 100)], DEFAULT).data)
    assert not meta["packed"] and len(meta["groups"]) == 7


def test_a_grid_over_the_per_dimension_limit_becomes_two_dimensional(webgpu_device):
    desc = _with_limits(max_compute_workgroups_per_dimension=4)
    binary = compile_kernels([sum_kernel("sum", 2, 64 * 10)], desc)
    assert binary.entry_points[0].workgroup_count == (4, 3, 1)
    _validate(webgpu_device, binary)


def test_workgroup_memory_over_the_limit_is_refused():
    with pytest.raises(UnsupportedOpError, match="16384"):
        render(shared_kernel("big", 5000), DEFAULT)


def test_workgroup_memory_and_barriers_validate(webgpu_device):
    binary = compile_kernels([shared_kernel("reverse", 64)], DEFAULT)
    (meta,) = unpack(binary.data)
    assert "var<workgroup> part: array<f32, 64>;" in meta["wgsl"] and "workgroupBarrier();" in meta["wgsl"]
    _validate(webgpu_device, binary)


@pytest.mark.parametrize("dt, match", [("f64", "no f64"), ("i4", "f32, i32, u32")])  # i4: lower_dispatch's bytes
def test_buffers_wgsl_cannot_hold_are_refused_by_name(dt, match):
    with pytest.raises(UnsupportedOpError, match=match):
        render(sum_kernel("bad", 2, 8, dtypes.DTYPES[dt]), DEFAULT)


def test_i64_buffers_are_arrays_of_word_pairs_and_bool_buffers_bytes_of_u32_words(webgpu_device):
    from retarget.testing.op_cases import op_cases

    kernels = [sum_kernel("k", 2, 8, dtypes.DTYPES["i64"]), op_cases()["i1_xor"][0]]
    i64, i1 = (render(kn, DEFAULT)["wgsl"] for kn in kernels)
    assert "var<storage, read_write> out0: array<vec2<u32>>;" in i64  # low word, high word: numpy's bytes
    assert "= rt_add_i64(in0[in0_base + gid], in1[in1_base + gid]);" in i64  # with the carry
    assert "array<atomic<u32>>" in i1 and "atomicOr(" in i1  # a bool written beside other threads' bytes
    _validate(webgpu_device, compile_kernels(kernels, DEFAULT))


def test_f16_needs_the_shader_f16_feature(webgpu_device):
    kernel = sum_kernel("half", 2, 64, dtypes.DTYPES["f16"])
    with pytest.raises(UnsupportedOpError, match="shader-f16"):
        render(kernel, DEFAULT)
    chrome = targets.parse("chrome")
    (meta,) = unpack(compile_kernels([kernel], chrome).data)
    assert meta["wgsl"].startswith("enable f16;")
    if "shader-f16" not in webgpu_device.features:
        pytest.skip("this adapter has no shader-f16: the f16 module is rendered, not validated")
    webgpu_device.shader_module(meta["wgsl"], meta["name"])


def test_a_value_rounded_to_f16_in_an_f32_kernel_is_exact_without_shader_f16(webgpu_device):
    """Without shader-f16 no WGSL may name f16: the rounding is f32 arithmetic, ties to even, past 65504 infinite."""
    module, inputs, expected = graphs.f16_rounding_module()
    art = retarget.compile(module, "webgpu-spirv")
    (meta,) = unpack(bytes(art.entries[art.manifest["executables"][0]["path"]]))
    assert "rt_round_f16(" in meta["wgsl"] and "f16(" not in meta["wgsl"].replace("rt_round_f16(", "")
    assert_same_bits(retarget.load(art, device="webgpu").main(*inputs), expected)


def test_a_value_rounded_to_f16_in_an_f32_kernel_enables_f16_where_the_target_has_it(webgpu_device):
    art = retarget.compile(graphs.f16_rounding_module()[0], "webgpu-spirv:chrome")
    (meta,) = unpack(bytes(art.entries[art.manifest["executables"][0]["path"]]))
    assert meta["wgsl"].startswith("enable f16;") and "rt_round_f16" not in meta["wgsl"]
    if "shader-f16" not in webgpu_device.features:
        pytest.skip("this adapter has no shader-f16: the f16 module is rendered, not validated")
    webgpu_device.shader_module(meta["wgsl"], meta["name"])


@pytest.mark.parametrize("dt", ["ui8", "ui16", "ui32", "f8E4M3FN"])
def test_a_select_between_two_unsigned_constants_is_typed(webgpu_device, dt):
    """WGSL typed an unsuffixed literal as i32: `select(2, 1, c) & 0xffu`, a ui8 output chosen between constants (an
    ONNX Where of two initializers), was invalid WGSL. Unsigned literals carry their `u` now."""
    import numpy as np
    from retarget.ir.core import Builder, Function, Module, TensorType, Value

    t = dtypes.DTYPES[dt]
    x = Value(TensorType((8,), dtypes.f32))
    fn = Function("main", [x], arg_names=["x"])
    b = Builder(fn)
    above = b.op("rt.cmp", [x, b.constant(np.float32(0))], {"predicate": "gt"})
    one, two = (b.constant(np.array(v, t.np_dtype)) for v in (1, 2))
    fn.returns = [b.op("rt.select", [above, one, two])]
    xs = np.arange(8, dtype=np.float32) - 4
    out = retarget.load(retarget.compile(Module({"main": fn}), "webgpu-spirv"), device="webgpu").main(xs)
    assert np.array_equal(out, np.where(xs > 0, 1, 2).astype(t.np_dtype))


@pytest.mark.parametrize("dt", ["i32", "ui32"])
def test_integer_kernels_validate(webgpu_device, dt):
    _validate(webgpu_device, compile_kernels([sum_kernel("ints", 3, 64, dtypes.DTYPES[dt])], DEFAULT))


def test_export_writes_one_wgsl_per_kernel_and_a_manifest(tmp_path):
    import json

    from retarget_webgpu import export

    art = retarget.compile(mlp_module()[0], "webgpu-spirv")
    manifest = json.loads(export(art, tmp_path).read_text())
    (kernel,) = manifest["kernels"]
    assert (tmp_path / kernel["file"]).read_text().startswith("@group(0)")
    assert kernel["workgroup_count"] == [1, 1, 1] and kernel["groups"] == [[0], [1], [2], [3]]
    assert manifest["functions"]["predict"]["program"][0]["entry"] == 0
    assert (tmp_path / "constants.bin").stat().st_size == manifest["constants"]["size"] > 0
    assert manifest["limits"]["max-storage-buffers-per-shader-stage"] == 8


def test_export_of_a_dynamic_module_asks_for_static_sizes(tmp_path):
    from retarget.errors import RetargetError
    from retarget.testing import dynamic
    from retarget_webgpu.web import export

    art = retarget.compile(dynamic.module("long_row"), "webgpu-spirv")
    with pytest.raises(RetargetError, match="known only at run time") as info:
        export(art, tmp_path)
    assert "--dim" in info.value.hint


def test_export_of_a_module_with_data_dependent_sizes_says_the_loader_cannot_run_its_stages(tmp_path):
    from retarget.errors import RetargetError
    from retarget.ir import Builder, Function, Module, TensorType, Value, dtypes
    from retarget_webgpu.web import export

    fn = Function("main", [Value(TensorType((8,), dtypes.f32), None, 0)])
    b = Builder(fn)
    count = b.fresh_symbol("nonzero").name
    fn.returns = [b.op("rt.exp", [b.op("rt.cast", [b.op("rt.nonzero", [fn.args[0]], {"count": count})],
                                       {"dtype": "f32"})])]
    art = retarget.compile(Module({"main": fn}), "webgpu-spirv")
    with pytest.raises(RetargetError, match="main has sizes that depend on the data"):
        export(art, tmp_path)


def test_a_float_division_is_rounded_correctly_through_fused_multiply_adds(webgpu_device):
    """WGSL lets `/` be 2.5 ulp off (NVIDIA's is); the division helper takes one Newton step with `fma`."""
    from retarget.kernel import ir as k
    from retarget.testing.op_cases import elementwise

    meta = render(elementwise("div", lambda a, b: k.Binary("div", a, b), [dtypes.f32] * 2, dtypes.f32, 8), DEFAULT)
    assert "rt_fdiv_f32(" in meta["wgsl"] and "fma(fma(-q, b, a)" in meta["wgsl"]
    webgpu_device.shader_module(meta["wgsl"], meta["name"])
