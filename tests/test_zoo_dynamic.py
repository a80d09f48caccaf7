"""One module per model for many input sizes: MobileNetV2 with a dynamic batch and the transformer block
with a dynamic sequence length, exported with torch.export `Dim` and through ONNX (`dim_param`), run at
several sizes on llvm-cpu (both local drivers), vulkan-spirv and webgpu-spirv, and compared with torch
at each size. A target or device that is not installed is skipped, and says so."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import retarget  # noqa: E402
from retarget.compiler import import_model  # noqa: E402
from retarget.testing import zoo  # noqa: E402
from retarget.testing.devices import skip_unless_runs  # noqa: E402
from retarget.testing.numerics import relative_error  # noqa: E402

# Small enough for lavapipe, which runs a 224x224 MobileNetV2 in about 1.4 s: the batch is what varies here
# (benchmarks/gpu/run_dynamic.py runs it at 224 on a GPU).
MODEL_ARGS = {"transformer_block": {"d_model": 64, "heads": 4}, "mobilenet_v2": {"resolution": 96}}
CONFIGS = [("llvm-cpu", "local-sync"), ("llvm-cpu", "local-task"), ("vulkan-spirv:host", "vulkan"),
           ("webgpu-spirv:host", "webgpu")]
RUNS = {  # the configurations each (model, route) runs on: every one through torch.export, one through ONNX
    ("transformer_block", "torch"): CONFIGS, ("transformer_block", "onnx"): CONFIGS[2:3],
    ("mobilenet_v2", "torch"): CONFIGS, ("mobilenet_v2", "onnx"): CONFIGS[1:2],
}


def _imported(name: str, route: str, tmp_path_factory):
    if route == "torch":
        model, inputs, shapes = zoo.make_dynamic(name, **MODEL_ARGS[name])
        return model, import_model(model, example_inputs=inputs, dynamic_shapes=shapes)
    pytest.importorskip("onnx")
    path = zoo.export_onnx(name, tmp_path_factory.mktemp("onnx") / f"{name}.onnx", dynamic=True, **MODEL_ARGS[name])
    return zoo.make(name, **MODEL_ARGS[name])[0], import_model(path)


@pytest.fixture(scope="module", params=[(m, r) for m in MODEL_ARGS for r in ("torch", "onnx")],
                ids=lambda p: f"{p[0]}-{p[1]}")
def dynamic_model(request, tmp_path_factory):
    name, route = request.param
    model, module = _imported(name, route, tmp_path_factory)
    return name, route, model, module, {}


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c[1])
def test_one_module_matches_torch_at_several_sizes(dynamic_model, config):
    name, route, model, module, compiled = dynamic_model
    if config not in RUNS[name, route]:
        pytest.skip(f"{name} through {route} is tested on {', '.join(d for _, d in RUNS[name, route])}")
    target, device = config
    skip_unless_runs(target, device)
    if target not in compiled:
        compiled[target] = retarget.compile(module, target)
    fn = retarget.load(compiled[target], device=device).main
    spec = zoo.DYNAMIC[name]
    assert str(fn.signature).count(spec.symbol) >= 2, fn.signature  # the input's and the output's
    for size in spec.sizes:
        inputs = zoo.dynamic_inputs(name, size, zoo.make(name, **MODEL_ARGS[name])[1])
        with torch.no_grad():
            expected = model(*inputs).numpy()
        got = fn(*[x.numpy() for x in inputs])
        assert got.shape == expected.shape
        assert relative_error(got, expected) <= 1e-4, f"{name} ({route}) on {target}/{device} at {spec.symbol}={size}"
