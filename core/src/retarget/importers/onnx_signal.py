"""ONNX's signal ops: DFT, STFT, the window functions and MelWeightMatrix (in progress)."""

from __future__ import annotations
