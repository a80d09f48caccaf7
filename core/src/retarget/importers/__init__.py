"""Frontends: MLIR text, torch.export and ONNX, each into the graph IR."""
