"""A deformable convolution layer (ONNX DeformConv, DCNv2: offsets and a mask from the layer before, 3x3, 64 -> 64
channels at 56x56, as a ResNet-50 DCN's stage 2 holds it), beside onnxruntime's DeformConv: what the composition
(four gathers of the image over every channel at the deformed taps, then one matrix product with W) costs.

    .venv/bin/python benchmarks/cpu/deform_conv.py [--repeats 50] [--only TEXT]

Options, timing and output as onnx_math_ops.py's (the `compare` harness of onnx_sequence_ops.py).
"""

from __future__ import annotations

import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from onnx_sequence_ops import compare, onnx_model  # noqa: E402


def models():
    from onnx import helper

    rng = np.random.default_rng(0)
    out = []
    for batch, channels, size, offset_group, masked in ((1, 64, 56, 1, True), (1, 64, 56, 4, False),
                                                        (1, 256, 14, 1, True)):
        x = rng.standard_normal((batch, channels, size, size)).astype(np.float32)
        weight = (rng.standard_normal((channels, channels, 3, 3)) / np.sqrt(9 * channels)).astype(np.float32)
        bias = rng.standard_normal(channels).astype(np.float32)
        inputs = {"x": x, "offset": rng.normal(0, 2, (batch, offset_group * 18, size, size)).astype(np.float32)}
        if masked:
            inputs["mask"] = rng.random((batch, offset_group * 9, size, size)).astype(np.float32)
        node = helper.make_node("DeformConv", ["x", "w", "offset", "b", "mask" if masked else ""], ["y"],
                                kernel_shape=[3, 3], pads=[1, 1, 1, 1], offset_group=offset_group)
        model = onnx_model([node], inputs, ["y"], {"w": weight, "b": bias}, opset=22)
        name = (f"N={batch} C=M={channels} {size}x{size} 3x3 offset_group {offset_group}"
                f"{', mask' if masked else ''}")
        out.append((name, model, inputs))
    return out


if __name__ == "__main__":
    compare(models(), __doc__.splitlines()[0])
