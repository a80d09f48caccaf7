"""ONNX models as opset-7-to-9 exporters wrote them, built in code with seeded random weights (no download).

`tiny_yolov2(opset=8)` has the layers of the ONNX model zoo's Tiny YOLOv2 (tinyyolov2-8): an ImageScaler, eight
3x3 convolutions each with a spatial BatchNormalization-7 and a LeakyRelu, five 2x2 stride-2 MaxPools and a
stride-1 one padded to keep 13x13, then a 1x1 convolution to 125 channels (5 anchors x (20 classes + 5)).
`width` divides every hidden channel count and `size` sets the input's side (416 in the zoo; a multiple of 32), so
that tests can run a small one.
"""

from __future__ import annotations

import numpy as np

TINY_YOLOV2_CHANNELS = (16, 32, 64, 128, 256, 512, 1024, 1024)


def tiny_yolov2(opset: int = 8, size: int = 416, width: int = 1, seed: int = 0):
    """(model, {"image": [1, 3, size, size] pixels in 0..255})."""
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(seed)
    f32 = np.float32
    nodes, constants = [], {}
    x, channels = "scaled", 3
    nodes.append(helper.make_node("ImageScaler", ["image"], [x], scale=1 / 255, bias=[0.0, 0.0, 0.0]))
    for k, out in enumerate(max(4, c // width) for c in TINY_YOLOV2_CHANNELS):
        fan_in = channels * 9
        constants[f"w{k}"] = (rng.standard_normal((out, channels, 3, 3)) * np.sqrt(2 / fan_in)).astype(f32)
        for name, value in {"scale": rng.uniform(0.5, 1.5, out), "bias": rng.standard_normal(out) * 0.1,
                            "mean": rng.standard_normal(out) * 0.1, "var": rng.uniform(0.5, 1.5, out)}.items():
            constants[f"bn{k}_{name}"] = value.astype(f32)
        bn_attrs = {"spatial": 1} if opset < 9 else {}
        nodes += [
            helper.make_node("Conv", [x, f"w{k}"], [f"conv{k}"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
            helper.make_node("BatchNormalization", [f"conv{k}", *(f"bn{k}_{p}" for p in ("scale", "bias", "mean",
                                                                                     "var"))],
                             [f"bn{k}"], epsilon=1e-5, **bn_attrs),
            helper.make_node("LeakyRelu", [f"bn{k}"], [f"act{k}"], alpha=0.1),
        ]
        x, channels = f"act{k}", out
        if k < 5:
            nodes.append(helper.make_node("MaxPool", [x], [f"pool{k}"], kernel_shape=[2, 2], strides=[2, 2]))
            x = f"pool{k}"
        elif k == 5:
            nodes.append(helper.make_node("MaxPool", [x], [f"pool{k}"], kernel_shape=[2, 2], strides=[1, 1],
                                          pads=[0, 0, 1, 1]))
            x = f"pool{k}"
    constants["head_w"] = (rng.standard_normal((125, channels, 1, 1)) * np.sqrt(1 / channels)).astype(f32)
    constants["head_b"] = (rng.standard_normal(125) * 0.1).astype(f32)
    nodes.append(helper.make_node("Conv", [x, "head_w", "head_b"], ["grid"], kernel_shape=[1, 1]))
    image = rng.uniform(0, 255, (1, 3, size, size)).astype(f32)
    graph = helper.make_graph(
        nodes, "tiny_yolov2", [helper.make_tensor_value_info("image", 1, image.shape)],
        [helper.make_tensor_value_info("grid", 1, [1, 125, size // 32, size // 32])],
        [numpy_helper.from_array(v, k) for k, v in constants.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 4  # the first whose initializers need not be graph inputs too
    return model, {"image": image}
