"""ONNX's remaining image ops: CenterCropPad, AffineGrid, Col2Im, RoiAlign (in progress)."""

from __future__ import annotations
