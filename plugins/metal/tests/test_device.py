"""The metal driver on a real GPU: these run on macOS with Apple silicon and skip elsewhere, saying why.
(On Linux, test_driver.py and test_zoo.py run the same driver code against fake_metal.)"""

import numpy as np
import pytest
import retarget
from metal_helpers import matmul_module, simple_kernel
from retarget.ir import dtypes
from retarget.testing.graphs import chain_module, mlp_module
from retarget_metal import targets
from retarget_metal.compile import compile_kernels

rng = np.random.default_rng(11)


def test_the_device_is_apple_silicon_with_a_language_version(metal_device):
    props = metal_device.info.properties
    assert props["family"] >= 7 and props["msl"] in targets.MSL_VERSIONS and props["unified_memory"]
    assert targets.parse("host").extra["family_number"] == props["family"]


def test_the_mlp_runs_on_metal_and_matches_numpy(metal_device):
    module, x, expected = mlp_module()
    m = retarget.load(retarget.compile(module, "metal-spirv:host"), device="metal")
    for _ in range(2):
        np.testing.assert_allclose(m.predict(x), expected, rtol=1e-5, atol=1e-5)


def test_dispatches_separated_by_a_barrier_see_each_other_s_writes(metal_device):
    module, inputs, expected = chain_module(batch=64, features=128, hidden=96, outputs=32)
    m = retarget.load(retarget.compile(module, "metal-spirv:host"), device="metal")
    np.testing.assert_allclose(m.main(*inputs), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("a_shape, b_shape", [((37, 29), (29, 45)), ((3, 20, 24), (24, 17)), ((128, 256), (256, 96))])
def test_simdgroup_matmuls_compute_on_the_gpu(metal_device, a_shape, b_shape):
    a, b = (rng.standard_normal(s).astype(np.float32) for s in (a_shape, b_shape))
    m = retarget.load(retarget.compile(matmul_module(a_shape, b_shape), "metal-spirv:host"), device="metal")
    np.testing.assert_allclose(m.main(a, b), np.matmul(a.astype(np.float64), b), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dt", ["f16", "i64", "i8", "i1"])
def test_buffers_of_each_type_round_trip_through_asimple_kernel(metal_device, dt):
    dtype = dtypes.DTYPES[dt]
    x = (rng.standard_normal(100) * 50).astype(dtype.np_dtype)
    exe = metal_device.load_executable(compile_kernels([simple_kernel("copy", dtype)], targets.parse("host")))
    src, dst = metal_device.allocate(x.nbytes), metal_device.allocate(x.nbytes)
    metal_device.write(src, 0, x)
    cb = metal_device.command_buffer()
    cb.dispatch(exe, 0, [(src, 0, x.nbytes), (dst, 0, x.nbytes)])
    cb.end()
    metal_device.submit(cb)
    metal_device.wait()
    np.testing.assert_array_equal(metal_device.read(dst, 0, x.nbytes).view(x.dtype), x)
    assert metal_device.last_gpu_seconds is not None


@pytest.mark.parametrize("name", ["mlp", "small_cnn", "mobilenet_v2", "resnet18", "transformer_block"])
def test_zoo_model_on_the_gpu_matches_torch(metal_device, name):
    torch = pytest.importorskip("torch")
    from retarget.compiler import import_model
    from retarget.testing import zoo
    from retarget.testing.numerics import relative_error

    model, inputs = zoo.make(name)
    with torch.no_grad():
        expected = model(*inputs).numpy()
    art = retarget.compile(import_model(model, example_inputs=inputs), "metal-spirv:host")
    out = retarget.load(art, device="metal").main(*[x.numpy() for x in inputs])
    assert relative_error(out, expected) <= 1e-4, name
