"""OpenCL C from the core's renderer: buffers as bytes plus offsets, extensions only where the
profile allows them, and, with a device, a program that the driver builds."""

import numpy as np
import pytest
import retarget
from retarget.errors import UnsupportedOpError
from retarget.ir import Builder, Function, Module, TensorType, Value, dtype
from retarget.testing.graphs import add_module
from retarget_opencl import targets
from retarget_opencl.compile import unpack


def _source(module, target="opencl") -> str:
    """The OpenCL C of `module` compiled for `target`, read back from the compiled artifact."""
    artifact = retarget.compile(module, target)
    (executable,) = artifact.manifest["executables"]
    return unpack(artifact.entries[executable["path"]])["source"]


def _halve(name: str) -> Module:
    """y = x * 0.5 over 16 elements of dtype `name`."""
    dt = dtype(name)
    x = Value(TensorType((16,), dt))
    fn = Function("main", [x], arg_names=["x"])
    b = Builder(fn)
    fn.returns = [b.op("rt.mul", [x, b.constant(np.full(16, 0.5, dtype=dt.np_dtype))])]
    return Module({"main": fn})


def test_each_buffer_is_passed_as_bytes_and_a_byte_offset():
    module, _, _ = add_module(n=10)
    source = _source(module)
    assert source.count("__kernel") == 1 and "reqd_work_group_size(256, 1, 1)" in source
    assert source.count("_bytes, const long ") == 3 and source.count("_offset);") == 3


def test_the_portable_profile_enables_no_extension():
    module, _, _ = add_module(n=10)
    assert "#pragma OPENCL EXTENSION" not in _source(module, "opencl:opencl-1.2")
    assert "cl_khr_fp64 : enable" in _source(add_module(n=10)[0], "opencl:pocl-cpu")


def test_an_f16_buffer_needs_a_profile_with_cl_khr_fp16():
    with pytest.raises(UnsupportedOpError, match="cl_khr_fp16"):
        retarget.compile(_halve("f16"), "opencl:nvidia")
    assert "cl_khr_fp16 : enable" in _source(_halve("f16"), "opencl:amd")


def test_the_device_builds_and_runs_the_program(opencl_device):
    module, (x, y), expected = add_module(n=1000)
    loaded = retarget.load(retarget.compile(module, "opencl:host"), device=opencl_device.info.uri)
    np.testing.assert_array_equal(loaded.main(x, y), expected)


def test_code_that_assumes_a_missing_extension_is_refused_with_the_fix(opencl_device):
    missing = [e for e in ("cl_khr_fp16", "cl_khr_fp64") if e not in opencl_device.extensions]
    if not missing:
        pytest.skip(f"{opencl_device.info.name} has both cl_khr_fp16 and cl_khr_fp64")
    reason = opencl_device.can_load("opencl-c", targets.parse("amd"))  # the amd profile assumes both
    assert missing[0] in reason and "--target opencl:host" in reason
