"""Every zoo model, compiled for cuda:host and run on the GPU in each command-buffer mode, matches torch within
1e-4 (relative error)."""

import pytest

torch = pytest.importorskip("torch")

import retarget  # noqa: E402
from retarget.compiler import import_model  # noqa: E402
from retarget.testing import zoo  # noqa: E402
from retarget.testing.numerics import relative_error  # noqa: E402


@pytest.fixture(scope="module")
def compiled():
    cache = {}

    def get(name):
        if name not in cache:
            model, inputs = zoo.make(name)
            with torch.no_grad():
                expected = model(*inputs).numpy()
            art = retarget.compile(import_model(model, example_inputs=inputs), "cuda:host")
            cache[name] = art, [x.numpy() for x in inputs], expected
        return cache[name]

    return get


@pytest.mark.parametrize("mode", ["graph", "stream", "direct"])
@pytest.mark.parametrize("name", list(zoo.MODELS))
def test_zoo_model_on_cuda_matches_torch(cuda_device, compiled, name, mode):
    art, inputs, expected = compiled(name)
    out = retarget.load(art, device="cuda", mode=mode).main(*inputs)
    assert out.shape == expected.shape
    assert relative_error(out, expected) <= 1e-4, (name, mode)
