"""ONNX's recurrent ops: RNN, GRU and LSTM (in progress)."""

from __future__ import annotations
