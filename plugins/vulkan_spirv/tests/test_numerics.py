"""Numbers on a live Vulkan device (lavapipe on a CPU-only machine): every scalar op matches the reference,
NaN and infinities included, and every zoo model matches torch within 1e-4 (relative error)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import retarget
from retarget.testing.op_cases import op_cases
from retarget_vulkan_spirv.compile import compile_kernels

OP_CASES = op_cases()
TRIG = ("f32_sin", "f32_cos", "f32_tan")


@pytest.fixture(scope="module")
def op_executable(vulkan_device):
    from retarget_vulkan_spirv import targets

    desc = targets.describe_device(vulkan_device.info)
    kernels = [kern for kern, _, _ in OP_CASES.values() if _runs_on(kern, desc)]
    binary = compile_kernels(kernels, desc)
    return vulkan_device.load_executable(binary), {kern.name: i for i, kern in enumerate(kernels)}


def _runs_on(kern, desc) -> bool:
    from retarget_vulkan_spirv.codegen import STORAGE_CAPABILITY

    return all(STORAGE_CAPABILITY.get(p.dtype.name, (0, "Shader"))[1] in (*desc.features, "Shader")
               for p in kern.params)


def _run(device, executable, entry: int, kern, inputs) -> np.ndarray:
    arrays = [np.ascontiguousarray(a) for a in inputs]
    out = kern.params[-1]
    sizes = [a.nbytes for a in arrays] + [out.size * out.dtype.itemsize]
    offsets = np.cumsum([0] + [-(-s // 64) * 64 for s in sizes])
    arena = device.allocate(int(offsets[-1]))
    for a, offset in zip(arrays, offsets):
        device.write(arena, int(offset), a)
    cb = device.command_buffer()
    cb.dispatch(executable, entry, [(arena, int(o), s) for o, s in zip(offsets, sizes)])
    cb.end()
    device.submit(cb)
    device.wait()
    raw = device.read(arena, int(offsets[-2]), sizes[-1])
    return raw.view(out.dtype.np_dtype)


@pytest.mark.parametrize("case", list(OP_CASES))
def test_each_scalar_op_matches_the_reference_on_the_device(case, vulkan_device, op_executable):
    executable, index = op_executable
    kern, inputs, expected = OP_CASES[case]
    if kern.name not in index:
        pytest.skip(f"{vulkan_device.info.name} lacks a capability that {case}'s buffers need")
    got = _run(vulkan_device, executable, index[kern.name], kern, inputs)
    if case in TRIG:  # exact argument reduction below 8192 only (codegen.sin_cos): beyond, a value in range
        far = np.isfinite(inputs[0]) & (np.abs(inputs[0]) >= 8192)
        assert np.all(np.isfinite(got[far])) and (case == "f32_tan" or np.all(np.abs(got[far]) <= 1))
        got, expected = got[~far], np.asarray(expected)[~far]
    if got.dtype.kind == "f" or got.dtype == ml_dtypes.bfloat16:
        # Vulkan's exp, log, sin... are within a few ulp, not correctly rounded: 1e-5 relative, as gcc's libm test
        np.testing.assert_allclose(got.astype(np.float64), np.asarray(expected).astype(np.float64),
                                   rtol=2e-5, atol=1e-6, equal_nan=True)
    else:
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("name", ["mlp", "small_cnn", "mobilenet_v2", "resnet18", "transformer_block"])
def test_zoo_model_on_vulkan_matches_torch(vulkan_device, name):
    torch = pytest.importorskip("torch")
    from retarget.compiler import import_model
    from retarget.testing import zoo
    from retarget.testing.numerics import relative_error

    model, inputs = zoo.make(name)
    with torch.no_grad():
        expected = model(*inputs).numpy()
    loaded = retarget.load(retarget.compile(import_model(model, example_inputs=inputs), "vulkan-spirv:host"),
                           device=vulkan_device.info.uri)
    out = loaded.main(*[x.numpy() for x in inputs])
    assert out.shape == expected.shape
    assert relative_error(out, expected) <= 1e-4, name



F64_EDGES = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 709.7, 709.79, 710.0, -745.2, -745.0, -708.5,
                      1e-300, 5e-324, 8.7e-311, 1e308, -1e-5, 2.0 ** -1030, 1 + 1e-12, 1 - 3e-4])


@pytest.mark.parametrize("op, exact, ulps", [("exp", np.exp, 1), ("log", np.log, 1)])
def test_f64_exp_and_log_are_computed_in_f64(vulkan_device, op, exact, ulps):
    """GLSL.std.450's Exp and Log are 32-bit only: the emitter computes them in f64 itself (ReduceLogSumExp of
    doubles), within an ulp over the whole range, subnormals, infinities and NaN included."""
    from retarget.ir import dtypes
    from retarget.kernel import ir as k
    from retarget.testing.op_cases import elementwise
    from retarget_vulkan_spirv import targets

    desc = targets.describe_device(vulkan_device.info)
    if "Float64" not in desc.features:
        pytest.skip(f"{vulkan_device.info.name} has no Float64")
    rng = np.random.default_rng(0)
    x = np.concatenate([F64_EDGES, rng.uniform(-700, 700, 2000), np.exp(rng.uniform(-700, 700, 2000)),
                        1 + rng.uniform(-1e-3, 1e-3, 500)])
    f64 = dtypes.DTYPES["f64"]
    kern = elementwise(f"op_f64_{op}", lambda a: k.Unary(op, a), [f64], f64, len(x))
    got = _run(vulkan_device, vulkan_device.load_executable(compile_kernels([kern], desc)), 0, kern, [x])
    with np.errstate(all="ignore"):
        expected = exact(x)
    normal = np.isfinite(expected) & (np.abs(expected) >= 2.0 ** -1022)  # below, Ldexp may flush to 0
    off = np.abs(got[normal] - expected[normal]) / np.spacing(np.abs(expected[normal]))
    assert off.max() <= ulps, (x[normal][off.argmax()], off.max())
    np.testing.assert_array_equal(got[~normal & (np.abs(expected) >= 2.0 ** -1022)],
                                  expected[~normal & (np.abs(expected) >= 2.0 ** -1022)])  # inf, -inf, NaN


@pytest.mark.parametrize("spread", [False, True], ids=["one-buffer", "two-buffers"])
def test_params_sharing_a_binding_find_their_tensors_in_one_or_several_buffers(vulkan_device, spread):
    """Past the target's storage buffers per stage, params of one element type share a binding: the driver binds
    one range when they sit in one buffer, and gathers them through a scratch buffer when they do not."""
    import dataclasses

    from retarget.testing.kernels import sum_kernel
    from retarget_vulkan_spirv import container, targets

    host = targets.describe_device(vulkan_device.info)
    narrow = dataclasses.replace(host, extra={**host.extra, "limits": {**host.extra["limits"],
                                                                        "maxPerStageDescriptorStorageBuffers": 4}})
    n = 300
    binary = compile_kernels([sum_kernel("sum4", 4, n)], narrow)
    assert container.unpack(binary.data)[0]["slots"] == [0, 0, 0, 0, 0]
    executable = vulkan_device.load_executable(binary)
    inputs = [np.arange(n, dtype=np.float32) * (j + 1) for j in range(4)]
    arena, weights = vulkan_device.allocate(8192), vulkan_device.allocate(8192)
    places = [(weights if spread and j % 2 else arena, 64 + 1280 * j) for j in range(4)] + [(arena, 6400)]
    for (buf, offset), x in zip(places, inputs):
        vulkan_device.write(buf, offset, x)
    cb = vulkan_device.command_buffer()
    cb.dispatch(executable, 0, [(buf, offset, 4 * n) for buf, offset in places])
    cb.end()
    for _ in range(2):  # replays gather again
        vulkan_device.submit(cb)
        vulkan_device.wait()
    np.testing.assert_array_equal(vulkan_device.read(arena, 6400, 4 * n).view(np.float32), sum(inputs))


ZOO_UNDER_VALIDATION = """
import json
import retarget
from retarget.compiler import import_model
from retarget.testing import zoo
from retarget.testing.numerics import relative_error
from retarget_vulkan_spirv.driver import VULKAN
import torch

errors = {}
for name in zoo.MODELS:
    model, inputs = zoo.make(name)
    with torch.no_grad():
        expected = model(*inputs).numpy()
    art = retarget.compile(import_model(model, example_inputs=inputs), "vulkan-spirv:host")
    out = retarget.load(art, device="vulkan").main(*[x.numpy() for x in inputs])
    errors[name] = float(relative_error(out, expected))
print(json.dumps({"errors": errors, "messages": VULKAN.validation_messages}))
"""


def test_the_validation_layer_reports_nothing_on_a_zoo_run(vulkan_device):
    """Every zoo model, compiled and run with VK_LAYER_KHRONOS_validation on: no error and no warning."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("torch")
    layers = ("/usr/share/vulkan/explicit_layer.d", "/etc/vulkan/explicit_layer.d")
    if not any(Path(d, "VkLayer_khronos_validation.json").exists() for d in layers):
        pytest.skip("VK_LAYER_KHRONOS_validation is not installed (apt-get install vulkan-validationlayers)")
    done = subprocess.run([sys.executable, "-c", ZOO_UNDER_VALIDATION], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "RETARGET_VULKAN_VALIDATION": "1"})
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert all(error <= 1e-4 for error in result["errors"].values()), result["errors"]
    assert result["messages"] == []


@pytest.mark.parametrize("m, kk, n, multiprocessors", [(70, 48, 40, None), (300, 96, 260, 1), (256, 64, 256, 1)])
def test_a_fragment_matmul_without_cooperative_matrices_takes_the_portable_expansion(vulkan_device, tmp_path, m, kk,
                                                                                      n, multiprocessors):
    """A target that advertises matrix fragments but lacks KHR cooperative matrices (made so here, whatever the
    device) gets the core's portable expansion: the same tiled schedule, plain multiply-adds, the reference's
    numbers; with one multiprocessor, the large plan (128 x 128 tiles, interior and edge tiles)."""
    import dataclasses

    torch = pytest.importorskip("torch")
    from retarget_vulkan_spirv import container, targets

    host = targets.describe_device(vulkan_device.info)
    fragment = {"m": 16, "n": 16, "k": 16, "a": "f16", "b": "f16", "acc": "f32", "width": 32}
    extra = {**host.extra, "fragments": [fragment]} | ({"multiprocessors": multiprocessors} if multiprocessors else {})
    desc = dataclasses.replace(host, features=tuple(f for f in host.features if f != "CooperativeMatrixKHR"),
                               extra=extra)

    class MatmulBiasRelu(torch.nn.Module):
        def forward(self, a, b, bias):
            return torch.relu(a @ b + bias)

    rng = np.random.default_rng(5)
    a, b, bias = (rng.standard_normal(s).astype(np.float16) for s in ((m, kk), (kk, n), (n,)))
    art = retarget.compile(MatmulBiasRelu(), desc, example_inputs=tuple(map(torch.from_numpy, (a, b, bias))),
                           dump_dir=tmp_path)
    (listing,) = [p.read_text() for p in tmp_path.iterdir() if "executable-vulkan-spirv" in p.name]
    assert "fragment.mma" in listing  # the kernel IR has fragments; the SPIR-V has plain multiply-adds
    assert ("tile_m = 128, tile_n = 128" in listing) == bool(multiprocessors)
    (exe,) = art.manifest["executables"]
    kernels = container.unpack(bytes(art.entries[exe["path"]]))
    assert all("CooperativeMatrixKHR" not in meta["capabilities"] for meta in kernels)
    out = retarget.load(art, device=vulkan_device.info.uri).main(a, b, bias)
    expected = np.maximum(a.astype(np.float32) @ b.astype(np.float32) + bias.astype(np.float32), 0).astype(np.float16)
    np.testing.assert_allclose(out.astype(np.float32), expected.astype(np.float32), rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("target", ["vulkan-spirv:vp_android_baseline_2022", "vulkan-spirv:host"])
def test_a_value_rounded_to_f16_in_an_f32_kernel_is_exact_with_or_without_16_bit_types(vulkan_device, target):
    """Every target rounds to f16 in f32 arithmetic (`round_to_f16`): without 16-bit storage it was refused, and with
    it an f16 value there and back, a pair NVIDIA's driver dropped. Bit for bit numpy's, ties to even, past 65504
    infinite, -0 kept."""
    from retarget.testing.graphs import f16_rounding_module
    from retarget.testing.numerics import assert_same_bits

    module, inputs, expected = f16_rounding_module()
    assert_same_bits(retarget.load(retarget.compile(module, target), device="vulkan").main(*inputs), expected)
