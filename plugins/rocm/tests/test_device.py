"""The hip driver on an AMD GPU: memory, launches, graphs, and models against numpy. Every test here skips
with "no AMD GPU: <reason>" where there is none (none was available when this plugin was written, so
these tests have not run yet; the conformance suite's device tests cover the rest)."""

import numpy as np
import pytest
import retarget
from retarget.ir import dtypes
from retarget.protocols import Binding, EntryPoint, TensorType
from retarget.testing.graphs import mlp_module
from retarget_rocm import targets
from retarget_rocm.compile import compile_entries

N = 1000
ADD = r'''#include <hip/hip_runtime.h>
extern "C" __global__ void __launch_bounds__(256) add(const float *__restrict__ a, const float *__restrict__ b,
                                                      float *__restrict__ out) {
  long long i = (long long)blockIdx.x * 256 + threadIdx.x;
  if (i < 1000) out[i] = a[i] + b[i];
}
'''
ADD_ENTRY = EntryPoint("add", tuple(Binding(TensorType((N,), dtypes.f32), a) for a in ("read", "read", "write")),
                       (256, 1, 1), (4, 1, 1))
rng = np.random.default_rng(0)


@pytest.mark.parametrize("graphs", [False, True], ids=["direct", "graph"])
def test_a_launch_computes_with_bindings_at_offsets(hip_device, graphs):
    hip_device.graphs = graphs
    exe = hip_device.load_executable(compile_entries(ADD, [ADD_ENTRY], targets.parse("host")))
    buf = hip_device.allocate(3 * N * 4 + 128)
    cb = hip_device.command_buffer()
    cb.dispatch(exe, 0, [(buf, 0, N * 4), (buf, N * 4, N * 4), (buf, 2 * N * 4 + 128, N * 4)])
    cb.end()
    for _ in range(3):  # a graph is captured on the first submit and replayed after
        a, b = rng.standard_normal(N).astype(np.float32), rng.standard_normal(N).astype(np.float32)
        hip_device.write(buf, 0, a)
        hip_device.write(buf, N * 4, b)
        hip_device.submit(cb)
        hip_device.wait()
        np.testing.assert_allclose(hip_device.read(buf, 2 * N * 4 + 128, N * 4).view(np.float32), a + b)
    assert (cb.graph_exec is not None) == graphs


def test_code_for_another_gfx_is_refused_with_the_fix(hip_device):
    other = "gfx1100" if hip_device.gfx != "gfx1100" else "gfx942"
    reason = hip_device.can_load("rocm-hsaco", targets.parse(other))
    assert other in reason and "--target rocm:host" in reason


def test_the_mlp_runs_on_hip_and_matches_numpy(hip_device):
    module, x, expected = mlp_module()
    m = retarget.load(retarget.compile(module, "rocm:host"), device="hip")
    for _ in range(2):
        np.testing.assert_allclose(m.predict(x), expected, rtol=1e-5, atol=1e-5)


def test_device_dump_describes_the_gpu(hip_device):
    from retarget_rocm.driver import HIP

    dump = HIP.dump(hip_device.info.id)
    assert dump["available"] and dump["compute_units"] > 0 and dump["memory_bytes"] > 0
    assert dump["arch"] == hip_device.gfx and dump["subgroup_size"] in (32, 64)


@pytest.mark.parametrize("dt", ["f16", "bf16"])
def test_half_matmuls_match_numpy(hip_device, dt):
    """On CDNA these take the MFMA fragments (retarget_mfma.h), whose lane layout has not met hardware yet."""
    from retarget.ir import Builder, Function, Module, Value

    dtype = dtypes.DTYPES[dt]
    a, b = (rng.standard_normal(s).astype(dtype.np_dtype) for s in ((100, 72), (72, 90)))
    bias = rng.standard_normal(90).astype(dtype.np_dtype)
    args = [Value(TensorType(a.shape, dtype)), Value(TensorType(b.shape, dtype))]
    fn = Function("main", args)
    bld = Builder(fn)
    y = bld.op("rt.add", [bld.op("rt.matmul", args), bld.constant(bias)])
    fn.returns = [bld.op("rt.max", [y, bld.constant(np.zeros((), dtype.np_dtype))])]
    out = retarget.load(retarget.compile(Module({"main": fn}), "rocm:host"), device="hip").main(a, b)
    product = (a.astype(np.float32) @ b.astype(np.float32)).astype(dtype.np_dtype).astype(np.float32)
    expected = np.maximum((product + bias.astype(np.float32)).astype(dtype.np_dtype).astype(np.float32), 0)
    np.testing.assert_allclose(out.astype(np.float32), expected, rtol=2e-2, atol=2e-2)
