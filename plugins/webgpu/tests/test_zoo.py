"""Every zoo model, compiled for webgpu-spirv (the spec's default limits) and run on the first WebGPU
adapter (lavapipe on a CPU-only machine), matches torch within 1e-4 (relative error)."""

import pytest

torch = pytest.importorskip("torch")

import retarget  # noqa: E402
from retarget.compiler import import_model  # noqa: E402
from retarget.testing import zoo  # noqa: E402
from retarget.testing.numerics import relative_error  # noqa: E402


@pytest.mark.parametrize("name", list(zoo.MODELS))
def test_zoo_model_on_webgpu_matches_torch(webgpu_device, name):
    model, inputs = zoo.make(name)
    with torch.no_grad():
        expected = model(*inputs).numpy()
    loaded = retarget.load(retarget.compile(import_model(model, example_inputs=inputs), "webgpu-spirv"),
                           device="webgpu")
    out = loaded.main(*[x.numpy() for x in inputs])
    assert out.shape == expected.shape
    assert relative_error(out, expected) <= 1e-4, name
