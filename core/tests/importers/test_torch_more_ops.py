"""torch.export ops composed from graph ops: cumsum, argmin, flip, repeat, adaptive pooling to any size,
avg_pool2d's ceil_mode with count_include_pad, grid_sample, embedding_bag, and the scatters (scatter,
scatter_add, scatter_reduce, index_put, index_add, index_copy, slice and select assignment). Each case is
imported both ways (the training IR as it stands, and decomposed to core ATen), compiled for a target and run,
and compared with torch."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from retarget.errors import UnsupportedOpError  # noqa: E402
from retarget.importers import torch_training_ir  # noqa: E402
from retarget.importers.torch_export import TorchImporter, to_numpy  # noqa: E402
from retarget.ir import verify  # noqa: E402
from retarget.testing.torch_cases import (  # noqa: E402
    assert_matches,
    compile_and_compare,
    importer_targets,
    module_of,
    randn,
    scatter_cases,
)
from retarget.vmvx.interpreter import run_function  # noqa: E402

TARGETS = importer_targets()


def ints(low, high, shape, dtype, seed=0):
    return torch.randint(low, high, shape, dtype=dtype, generator=torch.Generator().manual_seed(seed))


def ties(*shape, seed=0):
    """Floats with many equal values (few distinct integers), so that which index wins a tie shows."""
    return torch.floor(randn(*shape, seed=seed) * 1.5)


INT32_MIN = torch.iinfo(torch.int32).min


def sample_grid(n, *out, seed=0):
    """Normalized positions in [-1.4, 1.4] (a fifth of them past the image's edges), with the edges and the
    positions halfway between two pixels (nearest's ties, at size 5: align_corners=False puts pixel centres at
    -0.8, -0.4, ... so -0.6 is halfway) among them."""
    grid = (torch.rand(n, *out, len(out), generator=torch.Generator().manual_seed(seed)) * 2.8 - 1.4)
    special = torch.tensor([-1.0, 1.0, -0.6, 0.2, 0.0, 0.5])
    grid.view(-1)[:special.numel()] = special
    return grid


def _assigned(x, rows, v):
    """In-place writes into clones, which torch.export turns into slice_scatter, select_scatter and index_put."""
    column, block, picked, strided = x.clone(), x.clone(), x.clone(), x.clone()
    column[:, 1] = 3.0
    block[1:3] = v[:, :1]
    picked[rows] = 0.0
    strided[:, 1:6:2] = v[0, :3]
    return (column, block, picked, strided, x.index_add(0, rows, v, alpha=2.0), x.index_copy(0, rows, v),
            x.index_add(1, rows, x[:, :2]))


def _masked(x, v):
    """Writes through boolean masks, the value the same for every picked element (torch.where, exactly)."""
    negatives, rows, columns, planes = x.clone(), x.clone(), x.clone(), x.clone()
    negatives[negatives < 0] = 0.5
    rows[x[:, 0, 0] > 0] = v  # a (6,) row written into each picked (3, 6) block, broadcast over its rows
    columns[:, torch.tensor([True, False, True])] = -1.0
    added = torch.index_put(x, (x > 1,), torch.tensor(2.0), accumulate=True)  # x[m] += 2 reads x[m] first
    planes[x[..., 0] < 0] = v[:1]
    return negatives, rows, columns, added, planes


def every_grid_sample(x, grid, modes):
    return tuple(F.grid_sample(x, grid, mode, padding, align)
                 for mode in modes for padding in ("zeros", "border", "reflection") for align in (False, True))

CASES = {  # name: (function, inputs)
    "cumsum along every dim, negative ones too": (
        lambda x: tuple(torch.cumsum(x, d) for d in (0, 1, 2, 3, -1, -3)), (randn(2, 3, 4, 5),)),
    "cumsum with dtype=, and of a scalar": (
        lambda x, i: (torch.cumsum(x, 1, dtype=torch.float64), torch.cumsum(x * 4, 0, dtype=torch.int64),
                      torch.cumsum(i, -1, dtype=torch.float32), torch.cumsum(i, 0, dtype=torch.int32),
                      torch.cumsum(x.sum(), 0)),
        (randn(3, 6), ints(-9, 9, (3, 6), torch.int32))),
    # an int8 running sum of 100s past 127 would wrap: torch sums integers and bools in int64
    "cumsum of integers and bools sums in int64": (
        lambda i8, i32, u8, mask: (torch.cumsum(i8, 1), torch.cumsum(i32, 0), torch.cumsum(u8, -1),
                                   torch.cumsum(mask, 1)),
        (ints(90, 127, (3, 9), torch.int8), ints(-2**30, 2**30, (7, 2), torch.int32),
         ints(200, 255, (2, 5), torch.uint8), ints(0, 2, (4, 11), torch.int64) > 0)),
    # 144 is 12 blocks of 12; 1031 (prime) is padded to 33 x 32; 20000 is cut into blocks of 142, each cut again
    "cumsum of a long axis, in blocks": (
        lambda x, y, i, j: (torch.cumsum(x, 1), torch.cumsum(y, -1, ), torch.cumsum(i, 0), torch.cumsum(j, 0)),
        (randn(2, 144), randn(2, 3, 1031), ints(-1000, 1000, (1031, 2), torch.int64),
         ints(-1000, 1000, (20000,), torch.int64))),
    "argmin picks the first of equal values": (
        lambda x: (torch.argmin(x), torch.argmin(x, 0), torch.argmin(x, -1, keepdim=True), *torch.min(x, 1),
                   *torch.min(x, -1, keepdim=True)),
        (ties(4, 6, 5),)),
    # negation would overflow at the most negative int32, and cannot order unsigned values; -0.0 equals 0.0
    "argmin of integers (their least value too), bytes and signed zeros": (
        lambda i, u8, z: (torch.argmin(i, 1), torch.argmin(u8, 0), torch.argmin(z)),
        (torch.tensor([[5, INT32_MIN, 3, INT32_MIN], [0, 7, -1, -1], [2**31 - 1, 0, 0, INT32_MIN]], dtype=torch.int32),
         ints(0, 4, (6, 3), torch.uint8), torch.tensor([0.0, -0.0, 1.0]))),
    "flip along several dims": (
        lambda x, i: (torch.flip(x, [0, -1]), torch.flip(x, [1, 2, 3]), torch.flip(x, [-2]), torch.flip(i, [0]),
                      torch.flip(x, [])),
        (randn(2, 3, 1, 5), ints(-5, 5, (4, 3), torch.int32))),
    "repeat, with more repeats than dims": (
        lambda x, v: (x.repeat(2, 1, 1, 3, 2), x.repeat(1, 2, 1, 1), x.repeat(1, 1, 1, 1), v.repeat(3, 2, 2),
                      v.repeat(4)),
        (randn(2, 3, 4, 5), ints(-5, 5, (3,), torch.int64))),
    "adaptive_avg_pool2d to sizes that do not divide the input, larger ones too": (
        lambda x, chw: (F.adaptive_avg_pool2d(x, (3, 2)), F.adaptive_avg_pool2d(x, (5, 3)),
                        F.adaptive_avg_pool2d(x, (9, 8)), F.adaptive_avg_pool2d(x, (7, 2)),
                        F.adaptive_avg_pool2d(x, (4, 5)), F.adaptive_avg_pool2d(x, 1), F.adaptive_avg_pool2d(chw, 4),
                        F.adaptive_avg_pool2d(chw, (3, 3))),
        (randn(2, 3, 7, 5), randn(3, 6, 9, seed=1))),
    "adaptive_max_pool2d values and first indices, to any size": (
        lambda x, chw: (*F.adaptive_max_pool2d(x, (3, 2), return_indices=True),
                        *F.adaptive_max_pool2d(x, (5, 3), return_indices=True),
                        *F.adaptive_max_pool2d(x, (9, 8), return_indices=True),
                        *F.adaptive_max_pool2d(x, (7, 1), return_indices=True),
                        *F.adaptive_max_pool2d(x, 1, return_indices=True),
                        F.adaptive_max_pool2d(x, (2, 4)), *F.adaptive_max_pool2d(chw, 4, return_indices=True),
                        *F.adaptive_max_pool2d(chw, (2, 3), return_indices=True)),
        (ties(2, 3, 7, 5), ties(3, 6, 9, seed=1))),
    # the divisor counts the padding but not what ceil_mode's last window reaches past it
    "avg_pool2d with ceil_mode and count_include_pad, and divisor_override": (
        lambda x: (F.avg_pool2d(x, 3, 2, 1, True, True), F.avg_pool2d(x, 2, 2, 0, True, True),
                   F.avg_pool2d(x, (3, 2), (2, 3), (1, 0), True, True), F.avg_pool2d(x, 3, 3, 1, True, True),
                   F.avg_pool2d(x, 3, 2, 1, True, False), F.avg_pool2d(x, 3, 2, 1, True, True, 2),
                   F.avg_pool2d(x, 2, 3, 1, False, False, 3), F.avg_pool2d(x, 3, 2, 0, False, True, 5)),
        (randn(2, 3, 8, 7),)),
    "grid_sample, every mode, padding and align_corners, at positions past the edges too": (
        lambda x, grid: every_grid_sample(x, grid, ("bilinear", "nearest", "bicubic")),
        (randn(2, 3, 5, 7), sample_grid(2, 4, 6))),
    "grid_sample of a volume (3-D)": (
        lambda x, grid: every_grid_sample(x, grid, ("bilinear", "nearest")),
        (randn(1, 2, 3, 4, 5), sample_grid(1, 2, 3, 4))),
    **scatter_cases(),
    "index_put: rows, elements, accumulate, negative indices, values broadcast": (
        lambda x, r, c, v: (torch.index_put(x, (r,), v), torch.index_put(x, (r, c), v[:, 0]),
                            torch.index_put(x, (r,), v, accumulate=True),
                            torch.index_put(x, (r - 3, c), torch.tensor(7.0)),
                            torch.index_put(x, (torch.tensor([1, 1, 0]),), v[:1], accumulate=True)),
        (randn(3, 5), torch.tensor([0, 2, 0]), torch.tensor([4, -1, 1]), randn(3, 5, seed=1))),
    "assignment through boolean masks, one value for every picked element": (
        _masked, (randn(4, 3, 6), randn(6, seed=1))),
    "assignment into slices and rows, index_add and index_copy": (
        lambda x, r, v: _assigned(x, r, v),
        (randn(4, 6), torch.tensor([3, 0]), randn(2, 6, seed=1))),
    "a spatial transformer: affine_grid then grid_sample": (
        lambda x, theta: F.grid_sample(x, F.affine_grid(theta, (2, 3, 6, 4), align_corners=False),
                                       align_corners=False),
        (randn(2, 3, 5, 7), torch.tensor([[[0.9, -0.2, 0.1], [0.3, 1.1, -0.2]], [[1.2, 0.0, 0.3], [0.1, 0.8, 0.0]]]))),
}


# what a GPU target cannot compute, and says so (RETARGET_IMPORTER_TARGETS runs these cases there)
CANNOT = {("cumsum with dtype=, and of a scalar", "webgpu-spirv"): "WGSL has no f64: the target refuses it"}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", CASES)
def test_matches_torch(name, target, request):
    if (name, target.split(":")[0]) in CANNOT:
        request.applymarker(pytest.mark.xfail(reason=CANNOT[name, target.split(":")[0]], strict=True))
    fn, inputs = CASES[name]
    compile_and_compare(fn, inputs, target)


def test_ops_import_from_the_training_ir_as_it_stands(monkeypatch):
    """None of them needs a retrace to core ATen (adaptive_max_pool2d would: it is not tagged core ATen, and
    torch_training_ir does not list it)."""
    def refuse(*args, **kw):
        raise AssertionError("run_decompositions was called")

    monkeypatch.setattr(torch.export.ExportedProgram, "run_decompositions", refuse)
    x = ties(2, 3, 7, 5)

    def every_op(x):
        return (torch.cumsum(x, 1), torch.argmin(x, 2), torch.flip(x, [0, 3]), x.repeat(1, 2, 1, 1, 2),
                F.adaptive_avg_pool2d(x, (3, 2)), x.min(1).indices,
                F.avg_pool2d(x, 3, 2, 1, True, True))

    program = torch.export.export(module_of(every_op), (x,))
    assert torch_training_ir.plan(program).reason is None
    module = verify(TorchImporter().load(program))
    assert_matches(run_function(module.functions["main"], [to_numpy(x)]), every_op(x))


class RunningSum(torch.nn.Module):
    def forward(self, x):
        return torch.cumsum(x, 1)


def test_a_masked_write_of_one_value_per_picked_element_is_refused_with_what_to_do():
    def gathered_back(x, v):
        y = x.clone()
        y[x > 0] = v[:3]  # one value per picked element: how many are picked is known only at run time
        return y

    with pytest.raises(UnsupportedOpError, match=r"one value per picked element.*torch.where\(mask, values, x\)"):
        TorchImporter().load(module_of(gathered_back), example_inputs=(torch.tensor([1.0, -1.0, 2.0, 3.0]),
                                                                       randn(3)))


def test_cumsum_of_a_static_axis_with_a_dynamic_batch():
    batch = torch.export.Dim("batch", max=64)
    program = torch.export.export(RunningSum(), (randn(3, 6),), dynamic_shapes=({0: batch},))
    module = verify(TorchImporter().load(program))
    for rows in (1, 3, 5):
        y = randn(rows, 6, seed=rows)
        assert_matches(run_function(module.functions["main"], [to_numpy(y)]), (torch.cumsum(y, 1),))


def test_cumsum_along_a_dynamic_axis_of_at_most_128():
    length = torch.export.Dim("length", max=64)
    program = torch.export.export(RunningSum(), (randn(3, 6),), dynamic_shapes=({1: length},))
    module = verify(TorchImporter().load(program))
    for cols in (1, 7, 64):
        y = randn(3, cols, seed=cols)
        assert_matches(run_function(module.functions["main"], [to_numpy(y)]), (torch.cumsum(y, 1),))


def test_cumsum_along_a_dynamic_axis_that_may_be_longer_is_refused_with_what_to_do():
    length = torch.export.Dim("length", max=1000)
    program = torch.export.export(RunningSum(), (randn(3, 6),), dynamic_shapes=({1: length},))
    with pytest.raises(UnsupportedOpError) as info:
        TorchImporter().load(program)
    assert "cumulative sum" in info.value.message and "may be more than 128 (up to 1000)" in info.value.message
    assert "bound the symbol" in info.value.hint and "static size" in info.value.hint


class Resampler(torch.nn.Module):
    def forward(self, x, grid):
        return F.grid_sample(x, grid, "bilinear", "reflection", align_corners=False)


def test_grid_sample_with_a_dynamic_batch():
    batch = torch.export.Dim("batch", max=16)
    program = torch.export.export(Resampler(), (randn(3, 2, 5, 6), sample_grid(3, 4, 4)),
                                  dynamic_shapes=({0: batch}, {0: batch}))
    module = verify(TorchImporter().load(program))
    for n in (1, 3, 5):
        x, grid = randn(n, 2, 5, 6, seed=n), sample_grid(n, 4, 4, seed=n)
        assert_matches(run_function(module.functions["main"], [to_numpy(x), to_numpy(grid)]), (Resampler()(x, grid),))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("operands", ["integers", "half floats"])
def test_comparisons_of_mixed_types_promote_as_torch_does(target, operands):
    # int8 against int64 (a KeyError before: numpy's names were looked up among ours), uint8 against int8 (int16),
    # an integer tensor against a float number; float16 against float32 and against int64 (float16)
    from retarget.passes.placement import PlacementError

    a8 = torch.tensor([[-128, -3, 0, 5, 127, 100]], dtype=torch.int8)
    a64 = torch.tensor([[-129, -3, 1, 4, 128, 100]], dtype=torch.int64)
    u8 = torch.tensor([[0, 253, 1, 5, 255, 100]], dtype=torch.uint8)
    h = torch.tensor([[-1.5, 2049.0, 0.0, 4.5, 127.25, 100.0]], dtype=torch.float16)
    f = torch.tensor([[-1.5, 2049.0, 1e-8, 4.4, 127.25, 100.0]], dtype=torch.float32)
    if operands == "integers":
        fn, inputs = (lambda a8, a64, u8: (a8 > a64, u8 >= a8, a64 <= 2.5, u8 != a8)), (a8, a64, u8)
    else:
        fn, inputs = (lambda h, f, a64: (h < f, h == a64, h >= 2049)), (h, f, a64)
    try:
        compile_and_compare(fn, inputs, target)
    except PlacementError as e:
        if operands == "half floats" and "f16" in str(e):
            pytest.skip(f"{target} computes no f16 here: {e.oneline()}")
        raise


@pytest.mark.parametrize("target", TARGETS)
def test_rms_norm_imports_as_it_stands_and_matches_torch(target):
    # over the last two axes with a weight, over the last without one and with torch's default eps
    norm = torch.nn.RMSNorm([5, 16], eps=1e-4)
    with torch.no_grad():
        norm.weight.copy_(randn(5, 16, seed=3))

    class Norms(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = norm

        def forward(self, x):
            return self.norm(x), F.rms_norm(x, [16]), F.silu(x)

    x = randn(2, 5, 16, seed=4) * 3
    program = torch.export.export(Norms().eval(), (x,))
    assert torch_training_ir.plan(program).reason is None  # imported as it stands: no retrace to core ATen
    compile_and_compare(Norms(), (x,), target)
