"""MSL from kernel IR: one library per executable in a JSON container, buffer(i) = parameter i, the types
MSL holds (and those it does not, refused by name), Metal's limits, and every dtype's kernels type-check
against the shim and compute the right numbers on the CPU."""

import dataclasses
import json
import sys

import msl_cpu
import numpy as np
import pytest
import retarget
from metal_helpers import simple_kernel
from retarget.errors import RetargetError, UnsupportedOpError
from retarget.ir import dtypes
from retarget.ir.core import Builder, Function, Module, TensorType, Value
from retarget.testing.graphs import add_module, mlp_module
from retarget_metal import targets
from retarget_metal.compile import compile_kernels, metal_std, render_source, unpack

M1 = targets.parse("apple-m1")


def test_the_mlp_is_one_msl_library_in_a_json_container():
    art = retarget.compile(mlp_module()[0], "metal-spirv:m1")
    (exe,) = art.manifest["executables"]
    assert exe["format"] == "msl" and exe["arch"] == "apple-m1"
    data = bytes(art.entries[exe["path"]])
    doc = json.loads(data)  # plain JSON: loading a module runs nothing stored in it
    assert doc == unpack(data) and doc["msl"] == "2.3" and doc["language_version"] == 131075
    (meta,) = doc["kernels"]
    assert doc["source"].startswith("#include <metal_stdlib>\nusing namespace metal;")
    assert f"kernel void {meta['name']}(" in doc["source"]
    assert [p["access"] for p in meta["params"]] == ["read", "read", "read", "write"]


def test_buffer_i_is_parameter_i_and_reads_are_const():
    source = render_source([simple_kernel("add3", dtypes.f32, params=3)], M1)
    assert ("device const float *in0 [[buffer(0)]], device const float *in1 [[buffer(1)]], "
            "device float *out0 [[buffer(2)]], uint3 rt_group [[threadgroup_position_in_grid]], "
            "uint3 rt_thread [[thread_position_in_threadgroup]]") in source
    assert "[[max_total_threads_per_threadgroup(64)]] kernel void add3(" in source


@pytest.mark.skipif(sys.platform == "darwin", reason="on macOS the container may hold a metallib")
def test_off_macos_the_container_holds_source_and_says_why_there_is_no_metallib():
    doc = unpack(compile_kernels([simple_kernel("copy", dtypes.f32)], M1).data)
    assert doc["metallib"] is None and "macOS" in doc["metallib_note"]


def test_xcrun_s_std_flag_is_platform_prefixed_before_metal_3():
    assert metal_std("2.3") == "macos-metal2.3" and metal_std("3.0") == "metal3.0" and metal_std("4.0") == "metal4.0"


def test_something_that_is_not_a_container_is_refused():
    with pytest.raises(RetargetError, match="not a retarget MSL executable"):
        unpack(b"\x80\x04pickle")
    doc = json.loads(compile_kernels([simple_kernel("copy", dtypes.f32)], M1).data)
    with pytest.raises(RetargetError, match="version 99"):
        unpack(json.dumps({**doc, "version": 99}).encode())


def test_f64_is_refused_by_name():
    with pytest.raises(UnsupportedOpError, match="no double"):
        render_source([simple_kernel("wide", dtypes.DTYPES["f64"])], M1)


def test_bf16_needs_msl_3_1_and_the_error_names_the_spelling_that_has_it():
    kernel = simple_kernel("brain", dtypes.DTYPES["bf16"])
    with pytest.raises(UnsupportedOpError, match=r"apple-m1\+msl3.1"):
        render_source([kernel], M1)
    source = render_source([kernel], targets.parse("m1+msl3.1"))
    assert "device const bfloat *in0" in source


def test_booleans_are_stored_as_bytes():
    source = render_source([simple_kernel("mask", dtypes.DTYPES["i1"], params=3)], M1)
    assert "device const uchar *in0" in source and "!= 0" in source and "uchar(" in source


def test_threadgroup_memory_over_32_kb_is_refused_with_the_numbers():
    with pytest.raises(UnsupportedOpError, match="32772 bytes.*32768"):
        render_source([simple_kernel("big", dtypes.f32, shared=8193)], M1)
    render_source([simple_kernel("fits", dtypes.f32, shared=8192)], M1)


def test_more_threads_than_the_target_runs_are_refused():
    kernel = dataclasses.replace(simple_kernel("wide", dtypes.f32), workgroup_size=(2048, 1, 1))
    with pytest.raises(UnsupportedOpError, match="2048x1x1"):
        render_source([kernel], M1)


def test_more_than_31_buffers_are_refused():
    with pytest.raises(UnsupportedOpError, match="at most 31"):
        render_source([simple_kernel("many", dtypes.f32, params=32)], M1)
    render_source([simple_kernel("many", dtypes.f32, params=31)], M1)


@pytest.mark.parametrize("dt", ["f16", "bf16", "i1", "i8", "ui8", "i16", "i32", "ui32", "i64"])
def test_kernels_of_every_buffer_type_type_check(clangxx, dt):
    desc = targets.parse("m1+msl3.1")
    errors = msl_cpu.syntax_errors(render_source([simple_kernel(f"k_{dt}", dtypes.DTYPES[dt], params=3)], desc))
    assert errors == ""


def test_the_shim_reports_what_metal_would_reject(clangxx):
    """A misspelt attribute and an int argument to a float-only builtin fail, as on Metal."""
    head = "#include <metal_stdlib>\nusing namespace metal;\n"
    assert "unknown attribute 'bufer'" in msl_cpu.syntax_errors(
        head + "kernel void f(device float *x [[bufer(0)]]) { x[0] = 1.0f; }")
    assert "deleted function 'exp'" in msl_cpu.syntax_errors(
        head + "kernel void f(device float *x [[buffer(0)]]) { x[0] = exp(1); }")


@pytest.mark.parametrize("dt", ["f32", "f16", "i32", "i64", "i8", "ui8"])
def test_elementwise_kernels_of_every_type_compute(fake_metal, dt):
    module, inputs, expected = add_module(1000, dt)
    m = retarget.load(retarget.compile(module, "metal-spirv:m1"), device="metal")
    np.testing.assert_array_equal(m.main(*inputs), expected)


def test_bf16_kernels_compute(fake_metal):
    bf16 = dtypes.DTYPES["bf16"]
    args = [Value(TensorType((300,), bf16)) for _ in range(2)]
    fn = Function("main", args, arg_names=["x", "y"])
    fn.returns = [Builder(fn).op("rt.mul", args)]
    x, y = (np.random.default_rng(i).standard_normal(300).astype(bf16.np_dtype) for i in range(2))
    m = retarget.load(retarget.compile(Module({"main": fn}), "metal-spirv:m1+msl3.1"), device="metal")
    expected = (x.astype(np.float32) * y.astype(np.float32)).astype(bf16.np_dtype)
    np.testing.assert_array_equal(m.main(x, y).view(np.uint16), expected.view(np.uint16))
