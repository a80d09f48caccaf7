"""aten.sort and aten.topk, composed in graph ops (`compose.sort`), compiled for vmvx and llvm-cpu and compared
with torch: values exactly, and indices wherever torch fixes them (a stable sort's; topk's where values differ)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import retarget  # noqa: E402
from retarget.errors import UnsupportedOpError  # noqa: E402
from retarget.importers.compose import SORT_AXIS_LIMIT  # noqa: E402
from retarget.importers.torch_export import TorchImporter  # noqa: E402
from retarget.passes.dispatch import form_dispatches  # noqa: E402
from retarget.testing.devices import skip_unless_runs  # noqa: E402
from retarget.testing.torch_cases import module_of  # noqa: E402

DEVICES = {"vmvx": "local-sync", "llvm-cpu": "local-task"}


@pytest.fixture(params=sorted(DEVICES))
def target(request):
    skip_unless_runs(request.param, DEVICES[request.param])
    return request.param


def check(target, fn, x, compared=None, reference=None):
    """Compile `fn` of `x` for `target`, run it, and compare outputs `compared` (default: all) with torch's
    (`reference`'s, default `fn`'s): same shape, dtype and elements (NaN where torch has NaN)."""
    model = module_of(fn, as_tuple=True)
    expected = [t.numpy() for t in module_of(reference or fn, as_tuple=True)(x)]
    module = TorchImporter().load(model, example_inputs=(x,))
    outs = retarget.load(retarget.compile(module, target), device=DEVICES[target]).main(x.numpy())
    outs = outs if isinstance(outs, (list, tuple)) else (outs,)
    assert len(outs) == len(expected)
    for i in compared if compared is not None else range(len(expected)):
        assert outs[i].dtype == expected[i].dtype and outs[i].shape == expected[i].shape, i
        np.testing.assert_array_equal(outs[i], expected[i], err_msg=f"output {i}")


def distinct(*shape, seed=0):
    """Values that are all different, in a random order."""
    n = int(np.prod(shape))
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed)).reshape(shape).float() * 0.5 - n / 4


def with_ties(*shape, seed=0):
    """Few distinct values, so that every row has equal ones."""
    return torch.randint(-2, 3, shape, generator=torch.Generator().manual_seed(seed)).float()


@pytest.mark.parametrize("descending", [False, True])
def test_stable_sort_keeps_equal_values_in_their_order(target, descending):
    check(target, lambda x: torch.sort(x, dim=-1, descending=descending, stable=True), with_ties(3, 9))


@pytest.mark.parametrize("shape,dim", [((7,), 0), ((4, 6), 0), ((4, 6), -1), ((2, 3, 5), 1), ((2, 3, 4, 5), -3),
                                       ((2, 3, 4, 5), 3)])
def test_sort_along_any_dim_of_1d_to_4d(target, shape, dim):
    check(target, lambda x: torch.sort(x, dim=dim), distinct(*shape))


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("shape,k,dim", [((9,), 3, 0), ((4, 8), 5, -1), ((3, 6, 4), 2, 1), ((2, 3, 4, 5), 4, -2)])
def test_topk_values_and_indices(target, largest, shape, k, dim):
    check(target, lambda x: torch.topk(x, k, dim=dim, largest=largest), distinct(*shape, seed=1))


@pytest.mark.parametrize("largest", [True, False])
def test_topk_with_ties_gives_torchs_values(target, largest):
    """Which of equal values torch's topk returns first is unspecified, so only the values are compared."""
    check(target, lambda x: torch.topk(x, 4, dim=-1, largest=largest), with_ties(5, 9, seed=2), compared=[0])


def test_unsorted_topk_returns_the_sorted_order(target):
    """sorted=False lets torch return the k elements in any order; they come sorted."""
    check(target, lambda x: torch.topk(x, 3, sorted=False), distinct(3, 8, seed=3),
          reference=lambda x: torch.topk(x, 3))


@pytest.mark.parametrize("descending", [False, True])
def test_nan_sorts_above_infinity(target, descending):
    nan, inf = float("nan"), float("inf")
    x = torch.tensor([[3.0, nan, -inf, 1.0, nan, inf, -0.0, 0.0], [nan, nan, nan, nan, 2.0, 1.0, 2.0, nan]])
    check(target, lambda x: torch.sort(x, descending=descending, stable=True), x)


def test_topk_counts_nan_as_largest(target):
    nan = float("nan")
    x = torch.tensor([[3.0, nan, 1.0, 5.0, -1.0], [0.0, 1.0, 2.0, nan, nan]])
    check(target, lambda x: (torch.topk(x, 2).values, torch.topk(x, 2, largest=False).values), x)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8])
def test_integer_inputs(target, dtype):
    x = torch.randint(0, 50, (4, 10), generator=torch.Generator().manual_seed(4)).to(dtype)
    check(target, lambda x: (*torch.sort(x, dim=1, stable=True), torch.topk(x, 3).values), x)


def test_sort_and_topk_are_three_kernels_with_the_pairs_in_one_reduction():
    """Ranks, indices and values: each an elementwise compare fused into its reduction (or gather), never a
    buffer of n * n comparisons."""
    model = module_of(lambda x: torch.topk(x, 3, dim=1), as_tuple=True)
    module = TorchImporter().load(model, example_inputs=(distinct(2, 16, 3),))
    dispatches = form_dispatches(module.functions["main"])
    roots = [[op.name for op in d.function.ops if op.name in ("rt.reduce", "rt.gather")] for d in dispatches]
    assert roots == [["rt.reduce"], ["rt.reduce"], ["rt.gather"]]
    assert [d.function.returns[0].type.shape for d in dispatches] == [(2, 16, 3), (2, 3, 3), (2, 3, 3)]


def test_an_axis_past_the_limit_is_refused_with_what_to_do():
    model = module_of(lambda x: torch.sort(x, dim=0), as_tuple=True)
    TorchImporter().load(model, example_inputs=(torch.zeros(SORT_AXIS_LIMIT, 2),))
    with pytest.raises(UnsupportedOpError) as info:
        TorchImporter().load(model, example_inputs=(torch.zeros(SORT_AXIS_LIMIT + 1, 2),))
    assert f"axis of {SORT_AXIS_LIMIT + 1} elements" in info.value.message
    assert f"limited to {SORT_AXIS_LIMIT}" in info.value.message and "n * n" in info.value.message
    assert "--fallback llvm-cpu" in info.value.hint
