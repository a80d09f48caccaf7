"""A small zoo of reference models, defined in code, with seeded random weights.

Every backend's end-to-end tests iterate over `MODELS`:

    for name in zoo.MODELS:
        model, inputs = zoo.make(name)     # eval mode, deterministic weights and inputs
        expected = model(*inputs)

torch is imported inside the functions, so importing this module costs nothing.
Batch-norm layers get random running statistics (var > 0) and affine parameters,
so that folding and numerics are exercised rather than an identity.

Dynamic shapes: `DYNAMIC` names, for the models that have one, the dimension that varies (MobileNetV2's
batch, the transformer block's sequence length). `make_dynamic(name)` gives the model, example inputs
and the `dynamic_shapes` for `torch.export` (a `Dim`), `export_onnx(..., dynamic=True)` writes it as
ONNX with that axis a `dim_param`, and `dynamic_inputs(name, size)` makes inputs of any size.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

SEED = 0


def _nn():
    import torch
    from torch import nn

    return torch, nn


def _randomize(model, seed: int = SEED):
    """Seeded weights, with non-trivial batch-norm statistics; returns the model in eval mode."""
    torch, nn = _nn()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.modules.batchnorm._BatchNorm):
                c = module.num_features
                module.weight.copy_(1.0 + 0.2 * torch.randn(c, generator=g))
                module.bias.copy_(0.1 * torch.randn(c, generator=g))
                module.running_mean.copy_(0.1 * torch.randn(c, generator=g))
                module.running_var.copy_(0.5 + torch.rand(c, generator=g))
            elif isinstance(module, nn.LayerNorm) and module.elementwise_affine:
                module.weight.copy_(1.0 + 0.1 * torch.randn(module.weight.shape, generator=g))
                module.bias.copy_(0.1 * torch.randn(module.bias.shape, generator=g))
            elif isinstance(module, (nn.Conv2d, nn.Linear)):
                fan_in = module.weight[0].numel()
                module.weight.copy_(torch.randn(module.weight.shape, generator=g) * (2.0 / fan_in) ** 0.5)
                if module.bias is not None:
                    module.bias.copy_(0.05 * torch.randn(module.bias.shape, generator=g))
    return model.eval()


def _input(*shape, seed: int = SEED + 1):
    torch, _ = _nn()
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# -- MLP -------------------------------------------------------------------------------------


def mlp(argmax: bool = False):
    """With `argmax`, it also returns each row's class (int64): an op whose result some GPU targets cannot
    store (webgpu-spirv has no 64-bit integers), for the tests of `--fallback`."""
    torch, nn = _nn()
    model = nn.Sequential(
        nn.Linear(64, 128), nn.ReLU(),
        nn.Linear(128, 128), nn.GELU(),
        nn.Linear(128, 10), nn.Softmax(dim=-1),
    )
    if argmax:
        class Classifier(nn.Module):
            def __init__(self):
                super().__init__()
                self.body = model

            def forward(self, x):
                probabilities = self.body(x)
                return probabilities, probabilities.argmax(dim=-1)

        return _randomize(Classifier()), (_input(8, 64),)
    return _randomize(model), (_input(8, 64),)


# -- small CNN with both pooling kinds -------------------------------------------------------


def small_cnn():
    torch, nn = _nn()
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1, stride=1), nn.Sigmoid(),
        nn.AvgPool2d(2),
        nn.Conv2d(32, 32, 3, padding=2, dilation=2, groups=4), nn.Tanh(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(32, 10),
    )
    return _randomize(model), (_input(2, 3, 32, 32),)


# -- MobileNetV2 (Sandler et al. 2018), width 1.0, as torchvision builds it ------------------


def _make_divisible(v: float, divisor: int = 8) -> int:
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


def mobilenet_v2(num_classes: int = 1000, batch: int = 1, resolution: int = 224):
    torch, nn = _nn()

    def conv_bn(cin, cout, k, stride, groups=1, act=True):
        layers = [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
        return layers + ([nn.ReLU6(inplace=True)] if act else [])

    class InvertedResidual(nn.Module):
        def __init__(self, cin, cout, stride, expand):
            super().__init__()
            hidden = int(round(cin * expand))
            self.use_res = stride == 1 and cin == cout
            layers = conv_bn(cin, hidden, 1, 1) if expand != 1 else []
            layers += conv_bn(hidden, hidden, 3, stride, groups=hidden)
            layers += conv_bn(hidden, cout, 1, 1, act=False)
            self.conv = nn.Sequential(*layers)

        def forward(self, x):
            return x + self.conv(x) if self.use_res else self.conv(x)

    class MobileNetV2(nn.Module):
        def __init__(self):
            super().__init__()
            settings = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                        (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]
            cin = _make_divisible(32)
            last = _make_divisible(1280)
            features = [nn.Sequential(*conv_bn(3, cin, 3, 2))]
            for t, c, n, s in settings:
                cout = _make_divisible(c)
                for i in range(n):
                    features.append(InvertedResidual(cin, cout, s if i == 0 else 1, t))
                    cin = cout
            features.append(nn.Sequential(*conv_bn(cin, last, 1, 1)))
            self.features = nn.Sequential(*features)
            self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, num_classes))

        def forward(self, x):
            x = self.features(x)
            x = nn.functional.adaptive_avg_pool2d(x, (1, 1))
            return self.classifier(torch.flatten(x, 1))

    return _randomize(MobileNetV2()), (_input(batch, 3, resolution, resolution),)


# -- ResNet-18 (He et al. 2015) --------------------------------------------------------------


def resnet18(num_classes: int = 1000, batch: int = 1):
    torch, nn = _nn()

    class BasicBlock(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU(inplace=True)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.downsample = None
            if stride != 1 or cin != cout:
                self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            identity = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return self.relu(out + identity)

    class ResNet18(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            layers, cin = [], 64
            for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
                layers.append(nn.Sequential(BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)))
                cin = cout
            self.layer1, self.layer2, self.layer3, self.layer4 = layers
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(512, num_classes)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(torch.flatten(self.avgpool(x), 1))

    return _randomize(ResNet18()), (_input(batch, 3, 224, 224),)


# -- transformer encoder block ---------------------------------------------------------------


def transformer_block(d_model: int = 256, heads: int = 4, seq: int = 64, batch: int = 2):
    torch, nn = _nn()

    class EncoderBlock(nn.Module):
        """Pre-norm encoder block: x + MHSA(LN(x)), then x + MLP(LN(x)) with GELU."""

        def __init__(self):
            super().__init__()
            self.heads = heads
            self.ln1 = nn.LayerNorm(d_model)
            self.qkv = nn.Linear(d_model, 3 * d_model)
            self.proj = nn.Linear(d_model, d_model)
            self.ln2 = nn.LayerNorm(d_model)
            self.fc1 = nn.Linear(d_model, 4 * d_model)
            self.act = nn.GELU()
            self.fc2 = nn.Linear(4 * d_model, d_model)

        def forward(self, x):
            b, s, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
            q, k, v = (t.reshape(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
            att = torch.softmax(q @ k.transpose(-2, -1) * (d // self.heads) ** -0.5, dim=-1)
            y = (att @ v).transpose(1, 2).reshape(b, s, d)
            x = x + self.proj(y)
            return x + self.fc2(self.act(self.fc1(self.ln2(x))))

    return _randomize(EncoderBlock()), (_input(batch, seq, d_model),)


MODELS: dict[str, Callable] = {
    "mlp": mlp,
    "small_cnn": small_cnn,
    "mobilenet_v2": mobilenet_v2,
    "resnet18": resnet18,
    "transformer_block": transformer_block,
}


@dataclass(frozen=True)
class DynamicAxis:
    """The dimension of a model's first input that varies: `axis`, called `symbol`, exported with inputs
    of size `example` (torch.export specializes sizes 0 and 1), tested at `sizes`."""

    axis: int
    symbol: str
    example: int
    sizes: tuple[int, ...]
    max: int | None = None


DYNAMIC: dict[str, DynamicAxis] = {
    "mobilenet_v2": DynamicAxis(0, "batch", 2, (1, 2), max=64),
    "transformer_block": DynamicAxis(1, "seq", 8, (5, 16), max=512),
    "mlp": DynamicAxis(0, "batch", 8, (1, 5)),
}


def make_dynamic(name: str, **model_args):
    """(model, example inputs, dynamic_shapes for torch.export) for a model of `DYNAMIC`."""
    torch, _ = _nn()
    spec = DYNAMIC[name]
    model, inputs = make(name, **model_args)
    inputs = dynamic_inputs(name, spec.example, inputs)
    dim = torch.export.Dim(spec.symbol, min=1, max=spec.max) if spec.max else torch.export.Dim(spec.symbol)
    return model, inputs, ({spec.axis: dim},)


def dynamic_inputs(name: str, size: int, like=None, seed: int = SEED + 1):
    """Inputs of model `name` (or shaped like `like`) with its `DYNAMIC` axis at `size`."""
    spec = DYNAMIC[name]
    like = like if like is not None else make(name)[1]
    shape = list(like[0].shape)
    shape[spec.axis] = size
    return (_input(*shape, seed=seed), *like[1:])


def make(name: str, **model_args):
    """(model in eval mode, example inputs as a tuple of tensors) for zoo model `name`;
    `model_args` go to its builder (e.g. `d_model=16` for a small transformer_block)."""
    try:
        factory = MODELS[name]
    except KeyError:
        from ..errors import InputError, suggestion

        raise InputError(f"no zoo model '{name}'", hint=suggestion(name, MODELS)) from None
    return factory(**model_args)


def export_onnx(name: str, path, opset: int = 17, dynamic: bool = False, **model_args) -> str:
    """Write zoo model `name` to `path` as ONNX (input names `input_0`, ...); returns the path. With
    `dynamic`, its `DYNAMIC` axis is the `dim_param` named after it (and the output's too).

    Uses the TorchScript exporter (`dynamo=False`), which needs no package beyond torch."""
    import warnings

    torch, _ = _nn()
    model, inputs = make(name, **model_args)
    axes = None
    if dynamic:
        spec = DYNAMIC[name]
        inputs = dynamic_inputs(name, spec.example, inputs)
        axes = {"input_0": {spec.axis: spec.symbol}, "output": {spec.axis: spec.symbol}}  # the output's alike
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model, inputs, str(path), opset_version=opset, dynamo=False,
            input_names=[f"input_{i}" for i in range(len(inputs))], output_names=["output"],
            dynamic_axes=axes,
        )
    return str(path)
