"""Benchmarks: retarget beside its peers, with tables, JSON and plots (`retarget benchmark`).

- `timing`: Runner, warm-ups and interleaving (each round in a new order), Stats (median, min, max, count), the
  correctness check, and `per_dispatch`, which times each dispatch of a function on its own;
- `report`: the machine and versions, rows and the comparison with the best peer, the rich table,
  JSON and the PNG bar chart (matplotlib, imported only when a PNG is asked for);
- `peers`: PyTorch eager and torch.compile, ONNX Runtime and IREE, each when installed;
- `suite`: the zoo suite over every device, target and command-buffer mode;
- `module`: one function of one compiled module, as `iree-benchmark-module` does it.

Nothing here asserts a timing; tests check shapes, names and correctness only.
"""

from .timing import TOLERANCE, Measurement, Runner, Stats, check_output, interleave, measure, per_dispatch

__all__ = ["TOLERANCE", "Measurement", "Runner", "Stats", "check_output", "interleave", "measure", "per_dispatch"]
