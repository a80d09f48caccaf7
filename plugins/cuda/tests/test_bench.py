"""The benchmark suite's on-device runner, on the cuda driver's stand-in (fake_cuda.py): the inputs go to the
GPU once, and a call then moves no data between host and device, as the torch GPU peers, whose tensors live
on the GPU, do not."""

import numpy as np
import pytest
import retarget
from retarget.bench.timing import resident_runner
from retarget.testing.graphs import mlp_module


def test_an_on_device_runner_copies_nothing_through_the_host_per_call(cu, monkeypatch):
    module, x, _ = mlp_module()
    fn = retarget.load(retarget.compile(module, "cuda:sm_90"), device="cuda").predict
    runner = resident_runner(fn, [x], "on device")
    issued = []
    for name in ("cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync", "cuMemcpyDtoDAsync"):
        real = getattr(cu, name)
        monkeypatch.setattr(cu, name, lambda *a, real=real, name=name: issued.append(name) or real(*a))
    runner.call()
    runner.call()
    assert issued.count("cuMemcpyDtoDAsync") >= 2 and set(issued) == {"cuMemcpyDtoDAsync"}


def test_an_output_fed_back_as_an_input_is_read_in_place_without_a_dlpack_capsule(cu, monkeypatch):
    from retarget.dlpack import DeviceArray
    from retarget.ir import Builder, Function, Module, TensorType, Value, dtypes

    x = Value(TensorType((4, 8), dtypes.f32))
    fn = Function("main", [x])
    fn.returns = [Builder(fn).op("rt.tanh", [x])]
    loaded = retarget.load(retarget.compile(Module({"main": fn}), "cuda:sm_90"), device="cuda")
    y = loaded.main(np.ones((4, 8), np.float32), output="device")
    monkeypatch.setattr(DeviceArray, "__dlpack__", lambda *a, **k: pytest.fail("went through a capsule"))
    z = loaded.main(y, output="device")
    assert isinstance(z, DeviceArray) and z.shape == (4, 8)
