"""Every zoo model, compiled for every installed CPU target, runs on both local drivers and matches torch.

The relative error (see `retarget.testing.numerics`) must stay within 1e-4. A target whose plugin is
not installed is skipped, and says so.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import retarget  # noqa: E402
from retarget.compiler import import_model  # noqa: E402
from retarget.testing import zoo  # noqa: E402
from retarget.testing.numerics import relative_error  # noqa: E402

TARGETS = ["vmvx", "llvm-cpu"]


@pytest.fixture(scope="module", params=list(zoo.MODELS))
def zoo_case(request):
    model, inputs = zoo.make(request.param)
    with torch.no_grad():
        expected = model(*inputs).numpy()
    return request.param, model, inputs, expected


@pytest.fixture(scope="module")
def compiled(zoo_case):
    name, model, inputs, _ = zoo_case
    module = import_model(model, example_inputs=inputs)  # imported once, compiled per target
    artifacts = {}
    for target in TARGETS:
        if target not in retarget.targets():
            continue
        artifacts[target] = retarget.compile(module, target)
    return artifacts


@pytest.mark.parametrize("device", ["local-sync", "local-task"])
@pytest.mark.parametrize("target", TARGETS)
def test_zoo_model_matches_torch(zoo_case, compiled, target, device):
    name, _, inputs, expected = zoo_case
    if target not in compiled:
        pytest.skip(f"target {target} is not installed (pip install -e plugins/{target.replace('-', '_')})")
    loaded = retarget.load(compiled[target], device=device)
    out = loaded.main(*[x.numpy() for x in inputs])
    assert out.shape == expected.shape
    assert relative_error(out, expected) <= 1e-4, f"{name} on {target}/{device}"
