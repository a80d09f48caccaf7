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
def imported(zoo_case):
    _, model, inputs, _ = zoo_case
    return import_model(model, example_inputs=inputs)  # imported once, compiled per target


@pytest.fixture(scope="module")
def compiled(imported):
    module = imported
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


# Each target's default architecture, and the named ones whose lowerings differ (matrix fragments, wave32).
BOUNDS_TARGETS = ["llvm-cpu", "cuda:sm_80", "cuda:sm_90", "cuda:sm_100", "rocm:gfx90a", "rocm:gfx942", "rocm:gfx1100",
                  "vulkan-spirv", "vulkan-spirv:ampere", "vulkan-spirv:rdna3", "webgpu-spirv", "metal-spirv",
                  "metal-spirv:m3", "opencl"]


def test_every_zoo_dispatch_is_proved_in_bounds_on_every_target(zoo_case, imported, compiled):
    """The bounds check (`retarget.kernel.bounds`) runs inside `lower_dispatch`: every dispatch of the model,
    lowered for each installed target's architectures, proves every access inside its buffer."""
    from retarget.compiler import resolve_target
    from retarget.kernel.bounds import check_kernel
    from retarget.kernel.lower import lower_dispatch
    from retarget.testing.conformance.kit import dispatches

    name = zoo_case[0]
    targets = [t for t in BOUNDS_TARGETS if t.split(":")[0] in retarget.targets()]
    assert "llvm-cpu" in targets
    for target in targets:
        _, desc, _ = resolve_target(target)
        for d in dispatches(imported):  # `compiled` ran the graph passes on it, as retarget.compile does
            assert check_kernel(lower_dispatch(d.function, desc)) > 0, f"{name}: {d.function.name} on {target}"
