"""How tests compare numbers with a reference."""

from __future__ import annotations

import numpy as np


def relative_error(actual: np.ndarray, expected: np.ndarray) -> float:
    """max|actual - expected| / max|expected|: a large logit's rounding does not hide behind rtol,
    and a near-zero output does not fail on it."""
    expected = np.asarray(expected, dtype=np.float64)
    return float(np.max(np.abs(np.asarray(actual, dtype=np.float64) - expected)) / max(np.max(np.abs(expected)), 1e-30))
