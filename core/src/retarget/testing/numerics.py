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


def assert_same_bits(actual: np.ndarray, expected: np.ndarray) -> None:
    """Float arrays equal bit for bit (the sign of zero, infinities), NaN where NaN (whatever its payload)."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, (actual.dtype, expected.dtype)
    nan = np.isnan(expected)
    assert np.array_equal(np.isnan(actual), nan), "NaN in different places"
    bits = np.dtype(f"u{expected.dtype.itemsize}")
    wrong = np.flatnonzero(actual[~nan].view(bits) != expected[~nan].view(bits))
    assert not wrong.size, (f"{wrong.size} elements differ, first at {wrong[0]}: {actual[~nan][wrong[0]]!r} "
                            f"for {expected[~nan][wrong[0]]!r}")
