"""How tests compare numbers with a reference."""

from __future__ import annotations

import numpy as np


def relative_error(actual: np.ndarray, expected: np.ndarray, floor: float = 1e-30) -> float:
    """max|actual - expected| / max(max|expected|, floor): a large logit's rounding does not hide behind rtol,
    and a near-zero output does not fail on it. `floor` is the smallest scale that means something: below it,
    an expected result is rounding noise (a float64 reference's 5e-14 for an exact zero)."""
    expected = np.asarray(expected, dtype=np.float64)
    scale = max(np.max(np.abs(expected)), floor)
    return float(np.max(np.abs(np.asarray(actual, dtype=np.float64) - expected)) / scale)
