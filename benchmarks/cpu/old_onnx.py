"""Models of old ONNX opsets beside onnxruntime: what reading them costs on the CPU (nothing, once imported: the
old versions become the same graph ops as the new).

    .venv/bin/python benchmarks/cpu/old_onnx.py [--repeats 20] [--only TEXT]

- Tiny YOLOv2 at opset 8 (`retarget.testing.old_onnx.tiny_yolov2`: the ONNX model zoo's layers, seeded weights),
  416x416, about 7 GFLOP: ImageScaler, BatchNormalization-7, a padded stride-1 MaxPool;
- the same at opset 9 (BatchNormalization-9), to show that the version makes no difference.

Options, timing and output as onnx_math_ops.py's (the `compare` harness of onnx_sequence_ops.py).
"""

from __future__ import annotations

import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from onnx_sequence_ops import compare  # noqa: E402


def models():
    from retarget.testing.old_onnx import tiny_yolov2

    return [(f"Tiny YOLOv2, opset {opset}, 1x3x416x416", *tiny_yolov2(opset=opset)) for opset in (8, 9)]


if __name__ == "__main__":
    compare(models(), __doc__.splitlines()[0])
