"""ONNX's control flow: If, Loop and Scan (in progress)."""

from __future__ import annotations
