"""Every zoo model, compiled for cuda:host and run on the GPU, matches torch within 1e-4 (relative error)."""

import pytest

torch = pytest.importorskip("torch")

import retarget  # noqa: E402
from retarget.compiler import import_model  # noqa: E402
from retarget.testing import zoo  # noqa: E402
from retarget.testing.numerics import relative_error  # noqa: E402


@pytest.mark.parametrize("name", list(zoo.MODELS))
def test_zoo_model_on_cuda_matches_torch(cuda_device, name):
    model, inputs = zoo.make(name)
    with torch.no_grad():
        expected = model(*inputs).numpy()
    loaded = retarget.load(retarget.compile(import_model(model, example_inputs=inputs), "cuda:host"), device="cuda")
    out = loaded.main(*[x.numpy() for x in inputs])
    assert out.shape == expected.shape
    assert relative_error(out, expected) <= 1e-4, name
