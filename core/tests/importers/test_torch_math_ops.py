"""torch's math ops that the torch importer composes from graph ops: vector norms (F.normalize and
F.cosine_similarity too), elementwise special functions (tan to digamma), var_mean, cumulative products, maxima
and log-sum-exps, diagonal, cdist and pdist, searchsorted and bucketize, median, kthvalue and histc, adaptive 3-D
average pooling, masked_scatter, det, and rrelu in eval mode. Each case is imported both ways (the training IR as
it stands, and decomposed to core ATen), compiled for each target and compared with torch, edge values included:
NaN where torch gives NaN, infinities, signed zeros where the op keeps them, values on bucket and bin edges, ties."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from retarget.errors import UnsupportedOpError  # noqa: E402
from retarget.importers import torch_training_ir  # noqa: E402
from retarget.importers.compose import DETERMINANT_LIMIT  # noqa: E402
from retarget.importers.torch_export import TorchImporter, to_numpy  # noqa: E402
from retarget.ir import verify  # noqa: E402
from retarget.testing.devices import skip_unless_runs  # noqa: E402
from retarget.testing.torch_cases import device_of, importer_targets, module_of, randn, run_compiled  # noqa: E402
from retarget.vmvx.interpreter import run_function  # noqa: E402

TARGETS = importer_targets()
nan, inf = math.nan, math.inf
EXACT = (0.0, 0.0)  # (relative, absolute) tolerance
ROUNDED = (4e-7, 1e-7)  # a few f32 ulps: composites of exp, log, sqrt, a division
SPECIAL = (0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, 1e-30, -1e-30, 1e30, -1e30, inf, -inf, nan)


def spread(low, high, count=401, *extra):
    """count values from low to high, then `SPECIAL` and `extra`."""
    return torch.cat([torch.linspace(low, high, count), torch.tensor(SPECIAL + extra)])


def with_edges(*shape, seed=0):
    """Standard normals with a zero row, an inf, a -inf and a NaN."""
    x = randn(*shape, seed=seed)
    x[0, 0] = 0.0
    x[1, 1, 2], x[1, 2, 0], x[-1, -1, 1] = inf, -inf, nan
    return x


def ties(*shape, seed=0):
    """Few distinct values, so that equal values meet in every row."""
    return torch.floor(randn(*shape, seed=seed) * 1.5)


def matches_torch(fn, inputs, target, tol=EXACT, signed_zeros=False):
    """`compile_and_compare` with NaN-aware comparisons: export `fn`, import it both ways, compile each for
    `target`, run it and compare every output with torch's: the same shape and dtype; floats within `tol`
    (relative, absolute) where finite, NaN and infinities where torch has them (and the sign of a zero with
    `signed_zeros`); the rest equal."""
    skip_unless_runs(target, device_of(target))
    model = module_of(fn).eval()
    program = torch.export.export(model, tuple(inputs))
    with torch.no_grad():
        expected = model(*inputs)
    expected = [to_numpy(t) for t in (expected if isinstance(expected, (tuple, list)) else (expected,))]
    for decompose in (False, True):
        outs = run_compiled(verify(TorchImporter().load(program, decompose=decompose)), target, inputs)
        assert len(outs) == len(expected)
        for k, (out, ref) in enumerate(zip(outs, expected, strict=True)):
            where = f"output {k}, {'decomposed' if decompose else 'as the training IR stands'}"
            assert (out.shape, out.dtype) == (ref.shape, ref.dtype), (where, out.shape, ref.shape, out.dtype, ref.dtype)
            if ref.dtype.kind != "f":
                np.testing.assert_array_equal(out, ref, err_msg=where)
                continue
            np.testing.assert_allclose(out, ref, rtol=tol[0], atol=tol[1], equal_nan=True, err_msg=where)
            if signed_zeros:
                zero = ref == 0
                np.testing.assert_array_equal(np.signbit(out[zero]), np.signbit(ref[zero]), err_msg=where)


def norms(x):
    return (torch.linalg.vector_norm(x), torch.linalg.vector_norm(x, 1, dim=1),
            torch.linalg.vector_norm(x, inf, dim=(0, 2), keepdim=True), torch.linalg.vector_norm(x, -inf, dim=-1),
            torch.linalg.vector_norm(x, 0, dim=1), torch.linalg.vector_norm(x, 3.5, dim=2),
            torch.linalg.vector_norm(x, -1.5, dim=2), torch.linalg.vector_norm(x, 0.5, dim=[]),
            torch.linalg.vector_norm(x, 2, dim=[1, 2], dtype=torch.float64), torch.norm(x, dim=0, keepdim=True),
            torch.dist(x, x[:1], 3))


def searches(x, boundaries, rows):
    """Every way in: left and right, both spellings, int32 results, a sorter, a number, one sequence a row."""
    return (torch.searchsorted(boundaries, x), torch.searchsorted(boundaries, x, right=True),
            torch.searchsorted(boundaries, x, side="right", out_int32=True), torch.bucketize(x, boundaries),
            torch.bucketize(x, boundaries, right=True, out_int32=True),
            torch.searchsorted(boundaries.flip(0), x, sorter=torch.arange(boundaries.numel() - 1, -1, -1)),
            torch.searchsorted(boundaries, 2.5), torch.searchsorted(rows, x[:3, :4].contiguous()),
            torch.searchsorted(rows, x[:3, :4].contiguous(), right=True))


def cumulative(x, i, long, flags):
    """Cumulative products, maxima and minima (ties: the latest index; NaN sticks), log-sum-exps (inf, -inf, NaN
    and a range exp cannot hold), along axes short and past `compose.SCAN_DIRECT` (scanned in blocks)."""
    return (torch.cumprod(x, 1), torch.cumprod(i, 0), torch.cumprod(long, -1), *torch.cummax(x, 1),
            *torch.cummin(x, 0), *torch.cummax(i, 1), *torch.cummin(long, 1), *torch.cummax(flags, 0),
            torch.logcumsumexp(x * 100, 1), torch.logcumsumexp(long * 50, 1))


CASES = {  # name: (function, inputs, tolerance[, signed zeros])
    "vector norms of every order, over any dims, with keepdim and dtype, of zeros, infinities and NaN": (
        norms, (with_edges(3, 4, 5),), ROUNDED),
    "F.normalize and F.cosine_similarity, broadcast, a zero vector clamped at eps": (
        lambda x, y: (F.normalize(x, dim=1), F.normalize(x, p=1, dim=-1), F.cosine_similarity(x, y, dim=2),
                      F.cosine_similarity(x, y[:1], dim=1)),
        (randn(3, 4, 5), torch.cat([torch.zeros(1, 4, 5), randn(2, 4, 5, seed=1)])), ROUNDED),
    "tan, atan, log2 and log10 (exact at powers of 2 and 10), hypot": (
        lambda x, p: (torch.tan(x), torch.atan(x), torch.log2(x), torch.log2(p), torch.log10(x), torch.log10(p),
                      torch.hypot(x, x.flip(0)), torch.hypot(x, torch.tensor(3e38))),
        (spread(-6, 6), torch.cat([2.0 ** torch.arange(-149, 128), 10.0 ** torch.arange(-37, 39)])), ROUNDED),
    "trunc, frac and copysign keep signed zeros": (
        lambda x, i: (torch.trunc(x), torch.frac(x), torch.copysign(x, x.flip(0)), torch.copysign(x, -0.0),
                      torch.copysign(i, -2), torch.trunc(i), torch.fix(x)),
        (spread(-3, 3, 61, 2.5, -2.5, 1e-45), torch.arange(-4, 5)), EXACT, True),
    # sinh and cosh past |x| = 87.7 take exp(|x| - log 2), a few ulps off (`compose._half_exp`); from 88.7 to 89.4
    # torch's overflow to inf, where compose's stay finite, as they are
    "asin, acos, atanh, asinh, acosh, sinh and cosh, of integers too": (
        lambda x, big, i: (torch.asin(x), torch.acos(x), torch.atanh(x), torch.asinh(big), torch.acosh(big),
                           torch.sinh(big), torch.cosh(big), torch.asin(i), torch.cosh(i)),
        (spread(-1.2, 1.2), spread(-88.7, 88.7), torch.arange(-2, 3)), (2e-6, 1e-7)),
    "erfinv over [-1, 1], at +-1 and past them": (
        torch.erfinv, (torch.cat([spread(-1.5, 1.5, 3001), 1 - torch.logspace(-7.2, -1, 40),
                                  torch.logspace(-7.2, -1, 40) - 1]),), (3e-7, 1e-37)),
    "lgamma of small, large and negative values, its poles and its zeros at 1 and 2": (
        torch.lgamma, (torch.cat([spread(-20, 20, 801, 1 + 2 ** -23, 2 - 2 ** -22, 3e38),
                                  torch.logspace(-30, 36, 67), -torch.logspace(-30, 7, 38)]),), (1e-6, 1e-6)),
    "digamma of small, large and negative values, its poles and near its zero": (
        torch.digamma, (spread(-20, 20, 801, 1.4616321, 1e-40, 1e17, -1e7 + 0.5),), (1e-6, 2e-6)),
    "var_mean and std_mean, with corrections and keepdim": (
        lambda x: (*torch.var_mean(x, 1), *torch.var_mean(x, (0, 2), correction=0, keepdim=True),
                   *torch.var_mean(x, -1, correction=2), *torch.std_mean(x, 1), *torch.var_mean(x),
                   *torch.std_mean(x, [0, 1], keepdim=True, correction=0)),
        (randn(3, 4, 5) * 10 + 3,), ROUNDED),
    "cumprod, cummax, cummin and logcumsumexp, short and long axes": (
        cumulative, (torch.cat([ties(2, 9), torch.tensor([[1.0, nan, 3.0, nan, 5.0, -inf, inf, 0.0, 0.0]])]),
                     torch.randint(-3, 4, (4, 6), generator=torch.Generator().manual_seed(0)),
                     torch.cat([ties(1, 200) * 0.01 + 1, randn(1, 200, seed=1)]),
                     torch.tensor([False, True, True, False])), (2e-6, 1e-6)),
    "diagonal with offsets either way, of any two dims, and empty": (
        lambda x: (torch.diagonal(x), torch.diagonal(x, 1, 1, 2), torch.diagonal(x, -2, 2, 0),
                   torch.diagonal(x, 2, -1, -2), torch.diagonal(x, 9), torch.diagonal(x[0]).exp()),
        (randn(3, 4, 5),), EXACT),
    "cdist of every p, directly and by matmul, batches broadcast; pdist": (
        lambda x, y, big: (torch.cdist(x, y), torch.cdist(x, x), torch.cdist(x, y, p=1), torch.cdist(x, y, p=0),
                           torch.cdist(x, y, p=inf), torch.cdist(x, y, p=3), torch.cdist(x, y[:1], p=1.5),
                           torch.cdist(big, big[:, :27] + 1), F.pdist(x[0]), F.pdist(x[1], p=1), F.pdist(x[0], p=inf)),
        (torch.floor(randn(2, 5, 3) * 2), randn(2, 4, 3, seed=1), randn(2, 30, 4, seed=2)), (1e-6, 1e-6)),
    "searchsorted and bucketize at, between and past the boundaries, NaN too": (
        searches, (torch.cat([torch.arange(-1.5, 5.5, 0.5), torch.tensor([nan, inf, -inf, 2.25, 0.75, 4])]).view(4, 5),
                   torch.tensor([0.0, 1.0, 2.5, 2.5, 4.0]),
                   torch.tensor([[0.0, 1, 2, 3], [1, 1, 1, 1], [-2, 0, 0, 9]])), EXACT),
    "searchsorted in boundaries with NaN, as torch's binary search meets them, and of integers": (
        lambda x, nans, i: (torch.searchsorted(nans, x), torch.searchsorted(nans, x, right=True),
                            torch.bucketize(i, torch.tensor([-5, 0, 0, 3, 7, 100]))),
        (torch.tensor([nan, 2.0, 5.0, -inf, inf, 1.0, 3.0]), torch.tensor([1.0, 2.0, 2.0, 3.0, nan]),
         torch.arange(-6, 9)), EXACT),
    "a long sorted sequence": (
        lambda x, sequence: torch.searchsorted(sequence, x),
        (randn(50) * 4, torch.sort(randn(1000, seed=1) * 3).values), EXACT),
    "median and kthvalue values, NaN in a row, integers": (
        lambda x, i: (torch.median(x, 1).values, torch.median(x), torch.kthvalue(x, 2, 1).values,
                      torch.kthvalue(x, 7, 1, keepdim=True).values, torch.median(i, 0).values, torch.median(i),
                      torch.kthvalue(i, 1, 0).values),
        (torch.cat([ties(3, 7), torch.tensor([[1.0, nan, 3.0, -inf, 2.0, inf, 0.0]])]),
         torch.randint(-9, 9, (5, 3), generator=torch.Generator().manual_seed(0))), EXACT),
    "histc: values on bin edges, at max, outside, inf and NaN; the data's range, and one value": (
        lambda x, finite, same: (torch.histc(x, 8, -1, 1), torch.histc(x, 5, 0, 5), torch.histc(finite),
                                 torch.histc(finite, 3, 2, 2), torch.histc(same, 4)),
        (torch.cat([torch.arange(-1.25, 5.5, 0.25), torch.tensor([nan, inf, -inf, 1e-8, 0.9999999])]),
         torch.arange(-1.25, 5.5, 0.25), torch.full((5,), 2.0)), EXACT),
    "adaptive_avg_pool3d to sizes that divide the input and do not, batched and not": (
        lambda x: (F.adaptive_avg_pool3d(x, (2, 3, 2)), F.adaptive_avg_pool3d(x, (3, 2, 5)),
                   F.adaptive_avg_pool3d(x, 1), F.adaptive_avg_pool3d(x[0], (4, 4, 3))),
        (randn(2, 3, 4, 6, 5),), ROUNDED),
    "masked_scatter: the k-th picked position takes source's k-th element; a broadcast mask": (
        lambda x, mask, source: (x.masked_scatter(x > 0, source), x.masked_scatter(mask, -source),
                                 x.masked_scatter(x > 9, source), x.masked_scatter(x == x, source)),
        (randn(3, 4, 5), torch.tensor([True, False, True, True, False]), randn(70, seed=1)), EXACT),
    "det by LU with pivoting: batches, singular matrices, a zero column, 1 x 1 and the largest": (
        lambda x, singular, big: (torch.linalg.det(x), torch.det(x[0, :2, :2]), torch.linalg.det(singular),
                                  torch.linalg.det(x[:, :1, :1]), torch.linalg.det(big)),
        (randn(3, 4, 4), torch.tensor([[[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [0.0, 1.0, 1.0]],
                                       [[0.0, 1.0, 2.0], [0.0, 3.0, 4.0], [0.0, 5.0, 7.0]],
                                       [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]]),
         randn(DETERMINANT_LIMIT, DETERMINANT_LIMIT, seed=2) + 4 * torch.eye(DETERMINANT_LIMIT)), (2e-6, 1e-6)),
    "rrelu in eval mode: a leaky ReLU of the mean slope": (
        lambda x: (F.rrelu(x), F.rrelu(x, 0.1, 0.5)), (randn(4, 5),), EXACT),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", CASES)
def test_matches_torch(name, target):
    fn, inputs, tol, *signed_zeros = CASES[name]
    matches_torch(fn, inputs, target, tol, *signed_zeros)


def every_op(x, boundaries):
    return (torch.linalg.vector_norm(x, 3, dim=1), F.normalize(x, dim=0), F.cosine_similarity(x, x + 1),
            torch.tan(x), torch.log2(x.abs()), torch.trunc(x), torch.frac(x), torch.hypot(x, x), torch.copysign(x, -1),
            torch.erfinv(x / 9), torch.lgamma(x), torch.digamma(x), *torch.var_mean(x, 1), *torch.std_mean(x, 0),
            torch.cumprod(x, 1), *torch.cummax(x, 0), torch.logcumsumexp(x, 1), torch.diagonal(x),
            torch.cdist(x, x), F.pdist(x), torch.searchsorted(boundaries, x), torch.bucketize(x, boundaries),
            *torch.median(x, 1), torch.median(x), *torch.kthvalue(x, 2, 0), torch.histc(x, 4),
            F.adaptive_avg_pool3d(x[None, None], (1, 2, 3)), x.masked_scatter(x > 0, x * 2),
            torch.linalg.det(x[:3, :3]), F.rrelu(x))


def test_ops_import_from_the_training_ir_as_it_stands(monkeypatch):
    """Those torch.export keeps whole (cdist, pdist, linalg_det, rrelu, cosine_similarity, ...) and those it
    keeps that are not tagged core ATen (linalg_vector_norm, cumprod, median, ...) need no retrace to core ATen."""
    def refuse(*args, **kw):
        raise AssertionError("run_decompositions was called")

    monkeypatch.setattr(torch.export.ExportedProgram, "run_decompositions", refuse)
    x, boundaries = randn(4, 5) * 3, torch.tensor([-1.0, 0.0, 2.0])
    program = torch.export.export(module_of(every_op), (x, boundaries))
    assert torch_training_ir.plan(program).reason is None
    module = verify(TorchImporter().load(program))
    outs = run_function(module.functions["main"], [to_numpy(x), to_numpy(boundaries)])
    for out, ref in zip(outs, every_op(x, boundaries), strict=True):
        np.testing.assert_allclose(out, to_numpy(ref), rtol=2e-6, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("op", ["median", "kthvalue"])
def test_median_and_kthvalue_indices_point_at_the_value_and_are_torchs_where_it_is_not_repeated(op):
    """torch's CPU kernels leave which of equal values' indices they return to their selection algorithm (torch
    documents it as not determined); an index here is always one of the value's, and torch's wherever the
    value occurs once in its row."""
    x = torch.cat([ties(6, 9, seed=3), randn(4, 9, seed=4), torch.tensor([[1.0, nan, 3.0, nan, 0, 0, 0, 0, 0]])])

    def fn(x):
        return torch.median(x, 1) if op == "median" else torch.kthvalue(x, 4, 1)

    module = verify(TorchImporter().load(module_of(fn, as_tuple=True), example_inputs=(x,)))
    values, indices = run_function(module.functions["main"], [to_numpy(x)])
    expected = fn(x)
    np.testing.assert_array_equal(values, expected.values.numpy())
    picked = np.take_along_axis(x.numpy(), indices[:, None], 1)[:, 0]
    np.testing.assert_array_equal(picked, values)
    once = np.array([np.sum((row == v) | (np.isnan(row) & np.isnan(v))) == 1 for row, v in zip(x.numpy(), values)])
    assert once.sum() >= 4
    np.testing.assert_array_equal(indices[once], expected.indices.numpy()[once])


def test_rrelu_in_training_mode_is_refused_with_what_to_do():
    with pytest.raises(UnsupportedOpError, match="training mode") as info:
        TorchImporter().load(module_of(lambda x: F.rrelu(x, training=True)), example_inputs=(randn(3, 4),))
    assert "eval" in info.value.hint


def test_a_determinant_past_the_unrolled_size_is_refused():
    n = DETERMINANT_LIMIT + 1
    with pytest.raises(UnsupportedOpError, match=f"{n} x {n} matrix"):
        TorchImporter().load(module_of(torch.linalg.det), example_inputs=(randn(n, n),))


def test_a_median_along_an_axis_known_only_at_run_time_is_refused_with_what_to_do():
    class RowMedian(torch.nn.Module):
        def forward(self, x):
            return torch.median(x, 1).values

    length = torch.export.Dim("length", max=64)
    program = torch.export.export(RowMedian(), (randn(3, 6),), dynamic_shapes=({1: length},))
    with pytest.raises(UnsupportedOpError, match="known only at run time|static") as info:
        TorchImporter().load(program)
    assert "static" in info.value.hint
