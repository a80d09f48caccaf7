"""torch's ops whose result sizes depend on the data: torch.nonzero, x[mask], masked_select and torch.unique
(aten.nonzero, aten.index with a boolean mask, aten.masked_select, aten._unique2), whose size torch.export names
u0. The importer makes a host op of each (`rt.nonzero`), the compiler
stages around it, and the results are compared with torch's at counts of 0, some and all; both import paths
(training IR and core ATen), on each importer target."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import retarget  # noqa: E402
from retarget.errors import UnsupportedOpError  # noqa: E402
from retarget.importers.torch_export import TorchImporter  # noqa: E402
from retarget.testing.torch_cases import (  # noqa: E402
    assert_matches,
    compile_and_compare,
    device_of,
    importer_targets,
    module_of,
    randn,
)

TARGETS = importer_targets()


class KeptRows(torch.nn.Module):
    """The rows whose norm passes a threshold, through a linear layer: a detector's or a pruner's kept tokens."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(8, 4)

    def forward(self, x):
        return torch.relu(self.linear(x[x.norm(dim=-1) > 2.8]))


CASES = {  # name: (module, inputs at counts of some, none and all)
    "x[x > 0] and its sum": (
        module_of(lambda x: (x[x > 0] * 2, x[x > 0].sum())),
        [randn(16), -randn(16).abs() - 1, randn(16).abs() + 1]),
    "torch.nonzero of a matrix": (
        module_of(lambda x: (torch.nonzero(x > 0.5), x.sum())),
        [randn(4, 5), torch.zeros(4, 5), torch.ones(4, 5)]),
    "a mask over two leading dims": (
        module_of(lambda x, m: x[m] + 1),
        [(randn(3, 4, 2), randn(3, 4, seed=1) > 0), (randn(3, 4, 2), torch.zeros(3, 4, dtype=torch.bool)),
         (randn(3, 4, 2), torch.ones(3, 4, dtype=torch.bool))]),
    "masked_select, the mask broadcast": (
        module_of(lambda x, m: torch.masked_select(x, m) * 3),
        [(randn(3, 4), randn(4, seed=2) > 0), (randn(3, 4), torch.zeros(4, dtype=torch.bool)),
         (randn(3, 4), torch.ones(4, dtype=torch.bool))]),
    "torch.unique with its inverse and counts": (
        module_of(lambda x: tuple(torch.unique(x, return_inverse=True, return_counts=True))),
        [torch.tensor([[3, 1, 3], [2, 1, 7]]), torch.full((2, 3), 4), torch.arange(6).reshape(2, 3)]),
    "kept rows through a linear layer": (
        KeptRows(), [randn(10, 8), randn(10, 8) * 0.1, randn(10, 8) * 10]),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", CASES)
def test_data_dependent_sizes_match_torch(name, target):
    module, inputs = CASES[name]
    for given in inputs:
        compile_and_compare(module, given if isinstance(given, tuple) else (given,), target)


@pytest.mark.parametrize("target", TARGETS)
def test_a_count_beside_a_dynamic_batch(target):
    """One compile for every batch and count (the mask's count is at most batch, known only at run time)."""
    from retarget.testing.devices import skip_unless_runs

    skip_unless_runs(target, device_of(target))
    model = KeptRows().eval()
    batch = torch.export.Dim("batch", min=2, max=64)
    program = torch.export.export(model, (randn(10, 8),), dynamic_shapes=({0: batch},))
    fn = retarget.load(retarget.compile(program, target), device_of(target)).main
    assert "nonzero=0.." in str(fn.signature) and "=2..64" in str(fn.signature)
    for rows, scale in ((2, 1.0), (7, 3.0), (33, 0.1), (64, 1.0)):
        x = randn(rows, 8, seed=rows) * scale
        with torch.no_grad():
            expected = model(x)
        assert_matches((fn(x.numpy()),), (expected,))


def test_a_mask_beside_other_indices_is_refused_with_what_to_do():
    program = torch.export.export(module_of(lambda x, m: x[:, m]), (randn(3, 4), randn(4, seed=1) > 0))
    with pytest.raises(UnsupportedOpError, match="boolean mask beside other indices"):
        TorchImporter().load(program)


def test_the_result_is_numpy_of_the_count_s_size():
    program = torch.export.export(module_of(lambda x: torch.nonzero(x)), (randn(6),))
    fn = retarget.load(retarget.compile(program, "vmvx"), "local-sync").main
    out = fn(np.array([0, 1, 0, 0, 2, 0], np.float32))
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out, [[1], [4]])
