"""Transposed convolution, group norm and instance norm from torch.export. Each imports both as the training IR
keeps it (aten.conv_transpose2d, aten.group_norm, aten.instance_norm: no decomposition) and decomposed to core
ATen (aten.convolution with transposed=True, aten.native_group_norm, aten._native_batch_norm_legit.no_stats),
and matches torch in f32; a small decoder built of them compiles and matches on vmvx and llvm-cpu."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from retarget.importers.torch_export import TorchImporter, to_numpy  # noqa: E402
from retarget.ir import verify  # noqa: E402
from retarget.testing.devices import skip_unless_runs  # noqa: E402
from retarget.testing.numerics import relative_error  # noqa: E402
from retarget.testing.torch_cases import module_of, randn  # noqa: E402
from retarget.vmvx.interpreter import run_function  # noqa: E402

TOLERANCE = 1e-5  # of the largest output magnitude, as the other importer tests


@pytest.fixture
def matches_torch(decompositions):
    """matches_torch(fn, x): export `fn`, import it as its training IR stands (asserting that nothing was
    decomposed) and decomposed to core ATen, run each on vmvx and compare with torch."""

    def check(fn, x):
        model = (fn if isinstance(fn, torch.nn.Module) else module_of(fn)).eval()
        program = torch.export.export(model, (x,))
        with torch.no_grad():
            expected = to_numpy(model(x))
        as_it_stands = TorchImporter().load(program)
        assert not decompositions, "the training IR was decomposed"
        for module in (as_it_stands, TorchImporter().load(program, decompose=True)):
            (out,) = run_function(verify(module).functions["main"], [x.numpy()])
            assert out.shape == expected.shape and out.dtype == expected.dtype
            assert relative_error(out, expected) <= TOLERANCE

    return check


# (in channels, out channels, kernel, stride, padding, output_padding, dilation, groups, bias)
CONV_TRANSPOSE_2D = {
    "3x3": (4, 3, 3, 1, 0, 0, 1, 1, True),
    "3x3 padded, stride 1 (conv2d's own padding)": (4, 6, 3, 1, 1, 0, 1, 1, False),
    "stride 2, output padding 1": (4, 3, 3, 2, 1, 1, 1, 1, True),
    "4x4 stride 2 (DCGAN)": (4, 3, 4, 2, 1, 0, 1, 1, False),
    "2x2 stride 2 (U-Net)": (4, 2, 2, 2, 0, 0, 1, 1, True),
    "stride 3, output padding 2": (3, 2, 3, 3, 1, 2, 1, 1, True),
    "stride 3 that crops the zeros' tail": (3, 2, 3, 3, 2, 0, 1, 1, False),
    "padding past the kernel: a crop": (3, 2, 1, 1, 1, 0, 1, 1, True),
    "rectangular": (4, 3, (3, 2), (2, 3), (1, 0), (1, 2), 1, 1, True),
    "dilation 2": (4, 3, 3, 1, 1, 0, 2, 1, True),
    "dilation 2, stride 2, output padding 1": (4, 3, 3, 2, 2, 1, 2, 1, False),
    "dilation (2, 3), stride (3, 2)": (2, 2, 2, (3, 2), (1, 2), (2, 1), (2, 3), 1, True),
    "2 groups": (4, 6, 3, 2, 1, 1, 1, 2, True),
    "depthwise, 2 outputs a channel": (4, 8, 3, 2, 0, 0, 1, 4, False),
    "3 groups, dilation 2, stride 2": (6, 3, 3, 2, 1, 1, 2, 3, True),
    "1x1 stride 3, output padding 2: phases no tap reaches (the bias alone)": (3, 2, 1, 3, 0, 2, 1, 1, True),
    "2x2 stride 3, padded": (3, 2, 2, 3, 1, 1, 1, 1, True),
}


CONV_TRANSPOSE_1D = {
    "3 wide": (3, 4, 3, 1, 0, 0, 1, 1, True),
    "stride 2, output padding 1": (3, 4, 3, 2, 1, 1, 1, 1, False),
    "stride 3, dilation 2, 2 groups": (4, 2, 5, 3, 2, 1, 2, 2, True),
    "1 wide, stride 2": (2, 3, 1, 2, 0, 1, 1, 1, True),
}
# rank -> (the module, its cases, the spatial size of the input)
CONV_TRANSPOSE = {"2d": (torch.nn.ConvTranspose2d, CONV_TRANSPOSE_2D, (5, 6)),
                  "1d": (torch.nn.ConvTranspose1d, CONV_TRANSPOSE_1D, (7,))}


@pytest.mark.parametrize("rank, name", [(rank, name) for rank, (_, cases, _) in CONV_TRANSPOSE.items()
                                        for name in cases])
def test_conv_transpose_matches_torch(matches_torch, rank, name):
    module, cases, spatial = CONV_TRANSPOSE[rank]
    cin, cout, k, stride, padding, output_padding, dilation, groups, bias = cases[name]
    conv = module(cin, cout, k, stride, padding, output_padding, groups, bias, dilation)
    matches_torch(conv, randn(2, cin, *spatial))


def test_a_strided_conv_transpose_is_one_small_conv_a_phase_over_the_input_itself():
    """No multiply on the zeros a stride puts between pixels: 4 phases of 2x2 taps for a 4x4 kernel at stride 2,
    each over the input (padded by a pixel at most), where the zero-stuffed form convolved a 4x4 kernel over
    (2 * 5 - 1 + 6) rows."""
    conv = torch.nn.ConvTranspose2d(4, 3, 4, 2, 1).eval()
    fn = TorchImporter().load(torch.export.export(conv, (randn(1, 4, 5, 6),))).functions["main"]
    convs = [op for op in fn.ops if op.name == "rt.conv2d"]
    assert len(convs) == 4
    for op in convs:
        x, w = (v.type.shape for v in op.operands)
        assert w[2:] == (2, 2) and x[2] <= 5 + 2 and x[3] <= 6 + 2


def test_conv_transpose_of_a_weight_input_matches_torch(matches_torch):
    """The weight as a value the program computes, not a constant: its reshuffle and flip are graph ops."""
    w = randn(4, 3, 3, 3, seed=1)
    matches_torch(lambda x: F.conv_transpose2d(x, torch.tanh(w), None, 2, 1, 1), randn(1, 4, 5, 5))


@pytest.mark.parametrize("affine", [True, False], ids=["affine", "plain"])
@pytest.mark.parametrize("groups", [1, 2, 3, 6])
@pytest.mark.parametrize("shape", [(2, 6), (2, 6, 7), (2, 6, 5, 4), (1, 6, 2, 3, 4)], ids=lambda s: f"rank{len(s)}")
def test_group_norm_matches_torch(matches_torch, shape, groups, affine):
    norm = torch.nn.GroupNorm(groups, 6, eps=1e-3, affine=affine)
    if affine:
        torch.nn.init.normal_(norm.weight, generator=torch.Generator().manual_seed(1))
        torch.nn.init.normal_(norm.bias, generator=torch.Generator().manual_seed(2))
    matches_torch(norm, randn(*shape) * 3 + 2)


@pytest.mark.parametrize("affine", [True, False], ids=["affine", "plain"])
@pytest.mark.parametrize("shape", [(2, 4, 9), (2, 4, 5, 6), (1, 4, 2, 3, 4)], ids=lambda s: f"rank{len(s)}")
def test_instance_norm_matches_torch(matches_torch, shape, affine):
    weight, bias = (randn(4, seed=1), randn(4, seed=2)) if affine else (None, None)
    matches_torch(lambda x: F.instance_norm(x, weight=weight, bias=bias, eps=1e-3), randn(*shape) * 3 + 2)


def test_instance_norm_with_running_statistics_in_eval_mode_uses_them(matches_torch):
    norm = torch.nn.InstanceNorm2d(4, affine=True, track_running_stats=True)
    with torch.no_grad():
        norm.running_mean.copy_(randn(4, seed=1))
        norm.running_var.copy_(randn(4, seed=2).abs() + 0.5)
    matches_torch(norm, randn(2, 4, 5, 6))


@pytest.mark.parametrize("repeats", [(2, 1, 3), (3, 1, 2, 1)], ids=["same rank", "a new leading dim"])
def test_repeat_matches_torch(matches_torch, repeats):
    """aten.repeat: decomposed, an affine instance norm repeats its weight and bias for every sample."""
    matches_torch(lambda x: x.repeat(*repeats), randn(2, 3, 4))


def test_half_precision_group_norm_takes_its_statistics_in_f32():
    """16384 values near 8 a group: their sum (131072) overflows f16, their mean does not."""
    weight = randn(8, seed=1).half()
    x = (randn(1, 8, 64, 64) + 8).half()
    module = TorchImporter().load(module_of(lambda x: F.group_norm(x, 2, weight, weight)), example_inputs=(x,))
    (out,) = run_function(module.functions["main"], [x.numpy()])
    expected = F.group_norm(x.float(), 2, weight.float(), weight.float()).numpy()
    assert out.dtype == np.float16
    assert relative_error(out, expected) < 1e-3  # f16's rounding of the result


class Decoder(torch.nn.Module):
    """Upsampling blocks: transposed convs, group and instance norms."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.up1 = torch.nn.ConvTranspose2d(8, 6, 4, stride=2, padding=1)
        self.norm1 = torch.nn.GroupNorm(3, 6)
        self.up2 = torch.nn.ConvTranspose2d(6, 4, 3, stride=2, padding=1, output_padding=1, groups=2, dilation=2)
        self.norm2 = torch.nn.InstanceNorm2d(4, affine=True)
        self.up3 = torch.nn.ConvTranspose2d(4, 2, 3, padding=1, bias=False)
        self.line = torch.nn.ConvTranspose1d(2, 3, 3, stride=2)

    def forward(self, x):
        y = F.relu(self.norm1(self.up1(x)))
        y = self.up3(F.relu(self.norm2(self.up2(y))))
        return y, self.line(y.flatten(2)[..., :20])


@pytest.mark.parametrize("decompose", [False, True], ids=["training IR", "core ATen"])
@pytest.mark.parametrize("target", ["vmvx", "llvm-cpu"])
def test_decoder_compiles_and_matches_torch(target, decompose):
    import retarget

    skip_unless_runs(target)
    model, x = Decoder().eval(), randn(2, 8, 5, 4)
    module = TorchImporter().load(model, example_inputs=(x,), decompose=decompose)
    outs = retarget.load(retarget.compile(module, target), device="local-task").main(x.numpy())
    with torch.no_grad():
        expected = model(x)
    for out, ref in zip(outs, expected, strict=True):
        assert out.shape == tuple(ref.shape)
        assert relative_error(out, ref.numpy()) <= TOLERANCE
