"""3-D convolution, transposed convolution and pooling from torch.export: nn.Conv3d, nn.ConvTranspose3d,
nn.MaxPool3d, nn.AvgPool3d and nn.LocalResponseNorm (which torch spells with avg_pool3d). Each case is imported
both ways (the training IR as it stands, and decomposed to core ATen), compiled for a target, run, and compared
with torch; a small 3-D CNN also runs on Vulkan (lavapipe) where that is installed. The 2-D pools share the 3-D
ones' handlers, and with them a max pool's dilation and an input without a batch."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from retarget.errors import UnsupportedOpError  # noqa: E402
from retarget.importers.torch_export import TorchImporter  # noqa: E402
from retarget.testing.torch_cases import (  # noqa: E402
    assert_matches,
    compile_and_compare,
    importer_targets,
    randn,
    run_compiled,
)

TARGETS = importer_targets()


def seeded(module, seed=1):
    """`module` with its weights drawn from `seed`, the same on every machine."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=generator) * 0.5)
    return module


# (in channels, out channels, kernel, stride, padding, dilation, groups, bias); inputs are [2, in, 6, 5, 7]
CONV3D = {
    "3x3x3": (3, 4, 3, 1, 0, 1, 1, True),
    "padded, stride 2": (3, 4, 3, 2, 1, 1, 1, True),
    "non-cubic kernel, stride and padding": (3, 5, (3, 1, 2), (2, 1, 3), (1, 0, 1), 1, 1, False),
    "dilation (2, 1, 3)": (3, 4, (2, 3, 2), 1, (2, 1, 1), (2, 1, 3), 1, True),
    "2 groups, dilated and strided": (4, 6, (3, 2, 3), (2, 1, 2), (1, 0, 2), (2, 1, 1), 2, True),
    "3 groups, no bias": (6, 3, 2, 2, 1, 1, 3, False),
    "depthwise": (4, 4, 3, 1, 1, 1, 4, False),
    "depthwise, 2 outputs a channel, strided": (4, 8, 3, (1, 2, 1), 1, 1, 4, True),
    "a kernel 1 deep: a 2-D conv at each depth": (3, 4, (1, 3, 3), 1, (0, 1, 1), 1, 1, True),
    "depth padding past the kernel: bias-only slices": (3, 2, 1, 1, (2, 0, 0), 1, 1, True),
}

# (in, out, kernel, stride, padding, output_padding, dilation, groups, bias); inputs are [2, in, 3, 4, 5]
CONV_TRANSPOSE3D = {
    "3x3x3": (4, 3, 3, 1, 0, 0, 1, 1, True),
    "stride 2, output padding 1": (4, 3, 3, 2, 1, 1, 1, 1, True),
    "2x2x2 stride 2 (a 3-D U-Net's upsampling)": (4, 2, 2, 2, 0, 0, 1, 1, False),
    "non-cubic kernel, stride, padding and output padding": (3, 2, (2, 3, 3), (3, 2, 1), (1, 1, 0), (2, 1, 0),
                                                             1, 1, True),
    "dilation (2, 1, 2), stride 2, output padding": (4, 3, 3, 2, (2, 1, 1), 1, (2, 1, 2), 1, False),
    "2 groups": (4, 6, 3, 2, 1, 1, 1, 2, True),
    "depthwise, 2 outputs a channel": (4, 8, 3, 2, 0, 0, 1, 4, False),
    "3 groups, dilation 2 in depth, stride 3 in depth": (6, 3, (2, 2, 1), (3, 1, 1), (1, 0, 0), (2, 0, 0),
                                                          (2, 1, 1), 3, True),
    "depth padding past the kernel: a crop": (3, 2, (1, 2, 2), 1, (1, 0, 0), 0, 1, 1, True),
}

POOL_INPUT = (2, 3, 8, 6, 5)  # with kernel 3, stride 2, padding 1 and ceil_mode, D and H get one extra window
POOLS = {  # name: (module, input shape)
    "max 2": (nn.MaxPool3d(2), POOL_INPUT),
    "max 3, stride 2, padding 1, ceil_mode": (nn.MaxPool3d(3, 2, 1, ceil_mode=True), POOL_INPUT),
    "max non-cubic, dilation (2, 1, 2)": (nn.MaxPool3d((2, 3, 2), (1, 2, 2), (1, 1, 0), dilation=(2, 1, 2)),
                                          POOL_INPUT),
    "max without a batch": (nn.MaxPool3d(2, ceil_mode=True), (3, 5, 6, 7)),
    "avg 2": (nn.AvgPool3d(2), POOL_INPUT),
    "avg padded, counting the padding, ceil_mode": (nn.AvgPool3d(3, 2, 1, ceil_mode=True), POOL_INPUT),
    "avg padded, not counting the padding, ceil_mode": (
        nn.AvgPool3d(3, 2, 1, ceil_mode=True, count_include_pad=False), POOL_INPUT),
    "avg non-cubic, divisor_override": (nn.AvgPool3d((3, 2, 2), 2, (1, 1, 0), divisor_override=5), POOL_INPUT),
    "avg without a batch": (nn.AvgPool3d(3, 2, 1, ceil_mode=True, count_include_pad=False), (3, 5, 6, 7)),
    "local response norm of [N, C, H, W] (avg_pool3d)": (nn.LocalResponseNorm(3), (2, 5, 6, 7)),
    "local response norm of [N, C, D, H, W], wide": (nn.LocalResponseNorm(4, 1e-2, 0.9, 2.0), (2, 6, 3, 4, 5)),
    "local response norm of [N, C, L] (avg_pool2d)": (nn.LocalResponseNorm(2), (2, 5, 9)),
    # the 2-D pools share the handlers: dilation and unbatched inputs come with them
    "2-D max, dilation 2, ceil_mode": (nn.MaxPool2d(3, 2, 1, dilation=2, ceil_mode=True), (2, 3, 9, 8)),
    "2-D avg without a batch": (nn.AvgPool2d(3, 2, 1, ceil_mode=True), (3, 7, 6)),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", CONV3D)
def test_conv3d_matches_torch(name, target):
    cin, cout, k, stride, padding, dilation, groups, bias = CONV3D[name]
    conv = seeded(nn.Conv3d(cin, cout, k, stride, padding, dilation, groups, bias))
    compile_and_compare(conv, (randn(2, cin, 6, 5, 7),), target)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", CONV_TRANSPOSE3D)
def test_conv_transpose3d_matches_torch(name, target):
    cin, cout, k, stride, padding, output_padding, dilation, groups, bias = CONV_TRANSPOSE3D[name]
    conv = seeded(nn.ConvTranspose3d(cin, cout, k, stride, padding, output_padding, groups, bias, dilation))
    compile_and_compare(conv, (randn(2, cin, 3, 4, 5),), target)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", POOLS)
def test_pooling_matches_torch(name, target):
    module, shape = POOLS[name]
    compile_and_compare(module, (randn(*shape) * 2 + 1,), target)


def conv_ops(module, x):
    fn = TorchImporter().load(torch.export.export(module.eval(), (x,)), decompose=True).functions["main"]
    return [op for op in fn.ops if op.name == "rt.conv2d"]


def test_a_conv3d_is_one_conv2d_over_the_output_depths_and_the_depth_taps():
    """The batch holds N * OD output depths, the channels C * KD taps (4 * 3), in groups as the conv's."""
    (conv,) = conv_ops(nn.Conv3d(4, 6, 3, stride=(2, 1, 1), padding=1, groups=2), randn(2, 4, 7, 5, 6))
    x, w = (v.type.shape for v in conv.operands)
    assert x == (2 * 4, 4 * 3, 5, 6) and w == (6, 2 * 3, 3, 3) and conv.attrs["groups"] == 2


def test_a_conv_transpose3d_is_one_conv_transpose2d_over_the_input_depths():
    """Stride 1 across (H, W): a single conv2d for all depths and all depth taps (3 * 3 output channels)."""
    (conv,) = conv_ops(nn.ConvTranspose3d(4, 3, 3, stride=(2, 1, 1)), randn(2, 4, 5, 6, 7))
    x, w = (v.type.shape for v in conv.operands)
    assert x[:2] == (2 * 5, 4) and w[:2] == (3 * 3, 4)


DYNAMIC_BATCH = {
    "conv3d": nn.Conv3d(3, 4, 3, padding=1, groups=1),
    "conv_transpose3d": nn.ConvTranspose3d(3, 4, 3, stride=2),
    "max_pool3d": nn.MaxPool3d(2),
    "avg_pool3d": nn.AvgPool3d(3, 2, 1, ceil_mode=True),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", DYNAMIC_BATCH)
def test_a_batch_known_only_at_run_time(name, target):
    """Compiled for batches of 1 to 8 (the output depths fold into the batch), run with 3."""
    model = seeded(DYNAMIC_BATCH[name]).eval()
    batch = torch.export.Dim("batch", min=1, max=8)
    program = torch.export.export(model, (randn(2, 3, 4, 5, 6),), dynamic_shapes=({0: batch},))
    x = randn(3, 3, 4, 5, 6, seed=4)
    with torch.no_grad():
        assert_matches(run_compiled(TorchImporter().load(program, decompose=True), target, (x,)), (model(x),))


@pytest.mark.parametrize("module", [nn.Conv3d(3, 4, 3), nn.ConvTranspose3d(3, 4, 3, stride=2)],
                         ids=["conv3d", "conv_transpose3d"])
def test_a_depth_known_only_at_run_time_is_refused_saying_what_to_do(module):
    depth = torch.export.Dim("depth", min=4, max=16)
    program = torch.export.export(module.eval(), (randn(2, 3, 6, 5, 6),), dynamic_shapes=({2: depth},))
    with pytest.raises(UnsupportedOpError, match="depth .* is known only at run time.*static depth"):
        TorchImporter().load(program, decompose=True)


class Cnn3d(nn.Module):
    """A small video or volume classifier: conv, batch norm with running statistics, ReLU, pooling."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv3d(2, 4, 3, padding=1)
        self.norm1 = nn.BatchNorm3d(4)
        self.pool = nn.MaxPool3d(2)
        self.conv2 = nn.Conv3d(4, 6, 3, stride=(1, 2, 2), padding=1, groups=2)
        self.norm2 = nn.BatchNorm3d(6)
        self.head = nn.Linear(6, 3)
        seeded(self)
        generator = torch.Generator().manual_seed(2)
        with torch.no_grad():
            for norm in (self.norm1, self.norm2):
                norm.running_mean.copy_(torch.randn(norm.num_features, generator=generator))
                norm.running_var.copy_(torch.rand(norm.num_features, generator=generator) + 0.5)

    def forward(self, x):
        y = self.pool(torch.relu(self.norm1(self.conv1(x))))
        y = torch.relu(self.norm2(self.conv2(y)))
        return self.head(nn.functional.adaptive_avg_pool3d(y, 1).flatten(1))


@pytest.mark.parametrize("target", sorted({*TARGETS, "vulkan-spirv"}))
def test_cnn3d_compiles_and_matches_torch(target):
    compile_and_compare(Cnn3d(), (randn(2, 2, 6, 8, 8),), target)
