"""Max pooling's indices (nn.MaxPool1d/2d/3d with return_indices=True) and max unpooling (nn.MaxUnpool2d/3d). An
index is the flat position, within its (n, c) plane, of its window's maximum as torch's CPU kernel picks it: the
first of equal values in window order, but a NaN is the maximum, the last of several NaNs; never a padding position
(`compose.max_pool_indices`). Unpooling writes x's values at the indices into zeros (`compose.max_unpool`): where
the indices are a max pool's of the same graph whose windows do not overlap, each output position reads its own
window, linear in the output; otherwise (overlapping windows, indices from elsewhere, and core ATen's index_put) with
the composed scatter, quadratic. Each case is imported both ways (the training IR as it stands, and decomposed to
core ATen, where max_unpool becomes an index_put), compiled for a target and run, and compared with torch."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

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
NAN, INF = float("nan"), float("inf")


def small_integers(*shape, seed=0):
    """Values in {0, 1, 2} as floats: most windows hold the maximum more than once."""
    return torch.randint(0, 3, shape, generator=torch.Generator().manual_seed(seed)).float()


def with_nans(*shape, seed=0):
    """Normals with about a quarter NaN: windows with none, one and several."""
    x = randn(*shape, seed=seed)
    return torch.where(randn(*shape, seed=seed + 1) > 0.7, NAN, x)


def pool_and_unpool(x, kernel, stride, padding=0):
    y, i = F.max_pool2d(x, kernel, stride, padding, return_indices=True)
    return y, i, F.max_unpool2d(y, i, kernel, stride, padding, output_size=x.shape[-2:])


POOLS = {  # name: (function, inputs); a pool's values and indices, exact
    "2-D, stride, padding and dilation": (
        lambda x: F.max_pool2d(x, 3, stride=2, padding=1, dilation=2, return_indices=True),
        (randn(2, 3, 9, 10),)),
    "2-D, ceil_mode, a non-square kernel and stride": (
        lambda x: F.max_pool2d(x, (2, 3), stride=(2, 1), padding=(1, 1), ceil_mode=True, return_indices=True),
        (randn(1, 2, 8, 7),)),
    "3-D, stride, padding, dilation and ceil_mode": (
        lambda x: F.max_pool3d(x, (2, 3, 2), stride=(1, 2, 2), padding=(1, 1, 0), dilation=(1, 1, 2),
                               ceil_mode=True, return_indices=True),
        (randn(1, 2, 5, 7, 8),)),
    "1-D, and 2-D without the batch": (
        lambda x, u: (*F.max_pool1d(x, 3, stride=2, padding=1, return_indices=True),
                      *F.max_pool2d(u, 2, return_indices=True)),
        (randn(2, 3, 11), randn(3, 6, 4, seed=1))),
    "ties: the first in window order": (
        lambda x: (*F.max_pool2d(x, 3, stride=1, padding=1, return_indices=True),
                   *F.max_pool3d(x[None], (2, 2, 2), stride=1, return_indices=True)),
        (small_integers(2, 3, 6, 7),)),
    "-inf everywhere: the first position inside the image, never the padding": (
        lambda x: F.max_pool2d(x, 3, stride=2, padding=1, ceil_mode=True, return_indices=True),
        (torch.full((1, 2, 6, 5), -INF),)),
    "NaNs: a NaN is the maximum, the last in window order": (
        lambda x: (*F.max_pool2d(x, 3, stride=1, padding=1, return_indices=True),
                   *F.max_pool3d(x[None], 2, stride=1, return_indices=True)),
        (with_nans(1, 3, 6, 6),)),
}

UNPOOLS = {  # name: (function, inputs)
    "MaxUnpool2d back to an odd size (output_size)": (
        lambda x: pool_and_unpool(x, 2, 2), (randn(2, 3, 7, 9),)),
    "MaxUnpool2d of overlapping windows: a repeated index carries one value": (
        lambda x: pool_and_unpool(x, 3, 1, 1), (small_integers(1, 2, 5, 6),)),
    "MaxUnpool3d, and MaxUnpool2d without the batch": (
        lambda x, u: (F.max_unpool3d(*F.max_pool3d(x, 2, return_indices=True), 2, output_size=x.shape[-3:]),
                      F.max_unpool2d(*F.max_pool2d(u, 2, return_indices=True), 2)),
        (randn(1, 2, 5, 4, 6), randn(3, 4, 6, seed=1))),
}


WINDOWED_UNPOOLS = {  # name: (function, inputs, whether each position reads its own window); linear or not
    "MaxUnpool2d of padded, ceil_mode windows of an odd image": (
        lambda x: F.max_unpool2d(*F.max_pool2d(x, 2, 2, padding=1, ceil_mode=True, return_indices=True), 2, 2,
                                 padding=1, output_size=x.shape[-2:]),
        (randn(2, 3, 7, 9),), True),
    "MaxUnpool2d to one more row than the image: the last row is zeros": (
        lambda x: F.max_unpool2d(*F.max_pool2d(x, 2, return_indices=True), 2, output_size=(9, 8)),
        (randn(1, 3, 8, 8),), True),
    "MaxUnpool2d to one more column than the image: the plane's numbering moves every row after the first": (
        lambda x: F.max_unpool2d(*F.max_pool2d(x, 2, return_indices=True), 2, output_size=(8, 9)),
        (randn(1, 3, 8, 8),), False),
    "MaxUnpool2d of windows with gaps (kernel 2, stride 3, dilation 2 on the width)": (
        lambda x: F.max_unpool2d(*F.max_pool2d(x, (2, 2), (3, 3), dilation=(1, 2), return_indices=True), 3,
                                 output_size=x.shape[-2:]),
        (randn(1, 2, 10, 11),), True),
    "MaxUnpool1d (as 2-D, of the unsqueezed 1-D indices), padded and ceil_mode": (
        lambda x: F.max_unpool1d(*F.max_pool1d(x, 2, 2, padding=1, ceil_mode=True, return_indices=True), 2, 2,
                                 padding=1, output_size=x.shape[-1:]),
        (randn(2, 3, 11),), True),
    "MaxUnpool3d of padded, ceil_mode windows of an odd image": (
        lambda x: F.max_unpool3d(*F.max_pool3d(x, 2, 2, padding=(1, 0, 1), ceil_mode=True, return_indices=True), 2,
                                 2, padding=(1, 0, 1), output_size=x.shape[-3:]),
        (randn(1, 2, 5, 6, 7),), True),
    "MaxUnpool2d without the batch": (
        lambda x: F.max_unpool2d(*F.max_pool2d(x, 2, return_indices=True), 2, output_size=x.shape[-2:]),
        (randn(3, 5, 7),), True),
    "MaxUnpool2d of overlapping windows (kernel 3, stride 2)": (
        lambda x: F.max_unpool2d(*F.max_pool2d(x, 3, 2, padding=1, return_indices=True), 3, 2, padding=1,
                                 output_size=x.shape[-2:]),
        (small_integers(1, 2, 7, 8),), False),
    "MaxUnpool2d of a pool's indices, changed on the way (a pool's would stay in their windows)": (
        lambda x: F.max_unpool2d(*(lambda y, i: (y, i.flip(-1)))(*F.max_pool2d(x, 2, return_indices=True)), 2,
                                 output_size=x.shape[-2:]),
        (randn(1, 2, 6, 8),), False),
    "MaxUnpool2d of a pool's indices that come as a graph input": (
        lambda y, i: F.max_unpool2d(y, i, 2, output_size=(6, 8)),
        F.max_pool2d(randn(1, 2, 6, 8), 2, return_indices=True), False),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", list(POOLS) + list(UNPOOLS) + list(WINDOWED_UNPOOLS))
def test_matches_torch(name, target):
    fn, inputs, *_ = {**POOLS, **UNPOOLS, **WINDOWED_UNPOOLS}[name]
    compile_and_compare(fn, inputs, target, tol=0)  # indices and moved values: exact


def scatters(fn_or_module, inputs) -> bool:
    """Whether the training IR's import of `fn_or_module` holds a reduction: the composed scatter's (that an
    unpool reading its own windows has none is what makes it linear)."""
    model = fn_or_module if isinstance(fn_or_module, torch.nn.Module) else module_of(fn_or_module)
    module = TorchImporter().load(torch.export.export(model, tuple(inputs)))
    return any(op.name == "rt.reduce" for op in module.functions["main"].ops)


@pytest.mark.parametrize("name", WINDOWED_UNPOOLS)
def test_an_unpool_reads_its_own_window_only_where_the_indices_are_a_pools_that_do_not_overlap(name):
    fn, inputs, in_own_windows = WINDOWED_UNPOOLS[name]
    assert scatters(fn, inputs) is not in_own_windows


class SegNet(torch.nn.Module):
    """An encoder and decoder as SegNet pairs them: the decoder unpools to where the encoder's maxima were."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.encode = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8),
                                          torch.nn.ReLU())
        self.pool = torch.nn.MaxPool2d(2, return_indices=True)
        self.middle = torch.nn.Sequential(torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.ReLU())
        self.unpool = torch.nn.MaxUnpool2d(2)
        self.decode = torch.nn.Conv2d(8, 4, 3, padding=1)
        with torch.no_grad():  # running statistics other than the identity
            self.encode[1].running_mean.uniform_(-0.5, 0.5)
            self.encode[1].running_var.uniform_(0.5, 2.0)

    def forward(self, x):
        y, indices = self.pool(self.encode(x))
        return self.decode(self.unpool(self.middle(y), indices, output_size=x.shape[-2:]))


@pytest.mark.parametrize("target", TARGETS)
def test_segnet_encoder_decoder_matches_torch(target):
    compile_and_compare(SegNet(), (randn(2, 3, 15, 14),), target, tol=1e-5)


class SegNetStage(torch.nn.Module):
    """One stage of SegNet's encoder and decoder: pool, convolution and ReLU, and the unpool to the pool's input."""

    def __init__(self, channels=16):
        super().__init__()
        torch.manual_seed(0)
        self.pool = torch.nn.MaxPool2d(2, 2, return_indices=True)
        self.middle = torch.nn.Sequential(torch.nn.Conv2d(channels, channels, 3, padding=1), torch.nn.ReLU())
        self.unpool = torch.nn.MaxUnpool2d(2, 2)

    def forward(self, x):
        y, indices = self.pool(x)
        return self.unpool(self.middle(y), indices, output_size=x.shape[-2:])


SEGNET_SIZE = (1, 16, 224, 224)  # gather-shaped, the scatter would compare 16 x 50176 x 12544 pairs


@pytest.mark.parametrize("target", TARGETS)
def test_a_segnet_stage_of_a_real_size_matches_torch(target):
    """The training IR: the pool's windows (core ATen's index_put is the composed scatter, below)."""
    model, x = SegNetStage().eval(), randn(*SEGNET_SIZE)
    module = verify(TorchImporter().load(torch.export.export(model, (x,))))
    with torch.no_grad():
        assert_matches(run_compiled(module, target, (x,)), (model(x),), tol=1e-5)


class Unpool(torch.nn.Module):
    def __init__(self, output_size=(3, 4)):
        super().__init__()
        self.output_size = output_size

    def forward(self, x, indices):
        return F.max_unpool2d(x, indices, 2, output_size=self.output_size)


def test_the_segnet_stage_s_unpool_without_its_pool_s_windows_is_the_scatter_kernel():
    """The stage above without its pool's windows (indices from a graph input, or core ATen's index_put of the
    same stage): rt.scatter, linear in the updates (refused before)."""
    n, c, h, w = SEGNET_SIZE
    x, indices = randn(n, c, h // 2, w // 2), torch.zeros(n, c, h // 2, w // 2, dtype=torch.int64)
    for module in (TorchImporter().load(torch.export.export(Unpool((h, w)), (x, indices))),
                   TorchImporter().load(torch.export.export(SegNetStage().eval(), (randn(*SEGNET_SIZE),)),
                                        decompose=True)):
        assert "rt.scatter" in {op.name for op in module.functions["main"].ops}


def test_pools_with_indices_and_unpools_import_from_the_training_ir_as_they_stand():
    fn, inputs = UNPOOLS["MaxUnpool3d, and MaxUnpool2d without the batch"]
    program = torch.export.export(module_of(lambda x, u, v: (*fn(x, u), *F.max_pool1d(v, 2, return_indices=True),
                                                             F.max_pool1d(v, 3))), (*inputs, randn(1, 2, 8)))
    ops = {str(node.target) for node in program.graph.nodes if node.op == "call_function"}
    assert {"aten.max_unpool2d.default", "aten.max_unpool3d.default", "aten.max_pool1d_with_indices.default",
            "aten.max_pool1d.default"} <= ops
    assert torch_training_ir.plan(program).reason is None


@pytest.mark.parametrize("target", TARGETS)
def test_an_index_outside_its_plane_writes_nothing(target):
    """torch raises on one; the compiled unpool cannot check at run time, and writes nothing there instead."""
    x = torch.tensor([[[[1.0, 2.0], [3.0, 4.0]]], [[[5.0, 6.0], [7.0, 8.0]]]])
    indices = torch.tensor([[[[0, 12], [-1, 11]]], [[[13, 5], [100, -12]]]])
    program = torch.export.export(Unpool(), (x, torch.tensor([[[[0, 1], [2, 3]]]] * 2)))
    (out,) = run_compiled(verify(TorchImporter().load(program)), target, (x, indices))
    expected = np.zeros((2, 1, 3, 4), np.float32)
    expected[0, 0, 0, 0], expected[0, 0, 2, 3], expected[1, 0, 1, 1] = 1.0, 4.0, 6.0
    assert_matches((out,), (torch.from_numpy(expected),), tol=0)
