"""torch.gather (aten.gather): x read along a dim at an index tensor, which may be shorter than x along the other
dims; as `compose.take_along_axis`, one gather of the flattened x. Each case is imported both ways (the training IR
as it stands, and decomposed to core ATen), compiled for a target and run, and compared with torch."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from retarget.importers import torch_training_ir  # noqa: E402
from retarget.importers.torch_export import TorchImporter  # noqa: E402
from retarget.ir import verify  # noqa: E402
from retarget.testing.torch_cases import (  # noqa: E402
    assert_matches,
    compile_and_compare,
    importer_targets,
    module_of,
    randn,
    run_compiled,
)

TARGETS = importer_targets()


def positions(high, shape, seed=0):
    return torch.randint(0, high, shape, generator=torch.Generator().manual_seed(seed))


CASES = {  # name: (function, inputs)
    "along every dim, negative ones too": (
        lambda x, i0, i1, i2: (torch.gather(x, 0, i0), torch.gather(x, 1, i1), torch.gather(x, 2, i2),
                               torch.gather(x, -1, i2), torch.gather(x, -3, i0)),
        (randn(3, 4, 5), positions(3, (3, 4, 5)), positions(4, (3, 4, 5), 1), positions(5, (3, 4, 5), 2))),
    # the index sets the result's shape; along the other dims it reads x's first positions
    "an index shorter than x, longer along the gathered dim": (
        lambda x, i, j: (torch.gather(x, 1, i), torch.gather(x, 0, j), x.gather(2, j[:, :2, :3])),
        (randn(4, 5, 6), positions(5, (2, 9, 3), 3), positions(4, (1, 3, 6), 4))),
    "integers and bools, a vector, a scalar": (
        lambda n, b, v, s, i, j: (torch.gather(n, 1, i), torch.gather(b, 0, j),
                                  torch.gather(v, 0, torch.tensor([4, 0, 0, 2])), torch.gather(s, 0, torch.tensor(0))),
        (torch.arange(18, dtype=torch.int32).reshape(3, 6), randn(3, 6) > 0, torch.arange(5.0), torch.tensor(7.0),
         positions(6, (3, 2), 5), positions(3, (2, 6), 6))),
    "the top-k values' rows, as attention and beam search gather them": (
        lambda x: torch.gather(x, 1, torch.topk(x.sum(-1), 3, dim=1).indices[..., None].expand(-1, -1, 4)),
        (randn(2, 6, 4),)),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", CASES)
def test_matches_torch(name, target):
    fn, inputs = CASES[name]
    compile_and_compare(fn, inputs, target, tol=0)  # a gather moves values: exact


def test_gather_imports_from_the_training_ir_as_it_stands():
    program = torch.export.export(module_of(lambda x, i: torch.gather(x, 1, i)), (randn(3, 4), positions(4, (3, 2))))
    assert torch_training_ir.plan(program).reason is None


class GatherRows(torch.nn.Module):
    def forward(self, x, index):
        return torch.gather(x, 1, index)


@pytest.mark.parametrize("target", TARGETS)
def test_gather_with_a_dynamic_batch(target):
    batch = torch.export.Dim("batch", max=64)
    program = torch.export.export(GatherRows(), (randn(3, 6), positions(6, (3, 2))),
                                  dynamic_shapes=({0: batch}, {0: batch}))
    module = verify(TorchImporter().load(program))
    for rows in (1, 5):
        x, index = randn(rows, 6, seed=rows), positions(6, (rows, 2), rows)
        assert_matches(run_compiled(module, target, (x, index)), (torch.gather(x, 1, index),), tol=0)
