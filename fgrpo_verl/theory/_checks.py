"""Argument checks shared by the theory modules and the tasks' settings: every bad value raises ``ValueError``
naming it.

Nothing is clamped or coerced: a value outside its range, a NaN, an inf, a bool or a non-integer group
size is an error that says which argument, which value, and what is valid.
"""

from __future__ import annotations

import numbers

import numpy as np


def real_array(name: str, value, *, low: float, high: float, low_open: bool = False, high_open: bool = False) -> np.ndarray:
    """``value`` as a float64 array whose every entry lies in the interval (low/high, open or closed)."""
    interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    arr = _numeric(name, value, f"a real number in {interval}").astype(np.float64)
    bad = np.isnan(arr) | (arr <= low if low_open else arr < low) | (arr >= high if high_open else arr > high)
    return _refuse_any(name, arr, bad, f"must be in {interval}")


def group_size_array(name: str, value) -> np.ndarray:
    """``value`` as an int64 array of whole numbers >= 1 (8 and 8.0 are accepted, 8.5 is not)."""
    arr = _numeric(name, value, "a whole number >= 1")
    bad = ~np.isfinite(arr) | (arr != np.round(arr)) | (arr < 1) if arr.dtype.kind == "f" else arr < 1
    return _refuse_any(name, arr, bad, "must be a whole number >= 1").astype(np.int64)


def whole(name: str, value, low: int = 1) -> int:
    """``value``, an int (not a bool, not 8.0) >= ``low``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name}={value!r} is invalid: must be a whole number >= {low}")
    return value


def _refuse_any(name: str, arr: np.ndarray, bad: np.ndarray, what: str) -> np.ndarray:
    """``arr``, or a ValueError naming its first ``bad`` entry."""
    if bad.any():
        first = np.asarray(arr).reshape(-1)[np.asarray(bad).reshape(-1)][0].item()
        raise ValueError(f"{name}={first!r} is invalid: {what}")
    return arr


def _numeric(name: str, value, what: str) -> np.ndarray:
    items = np.asarray(value, dtype=object).reshape(-1)
    for item in items:
        # bool is an int subclass: `n=True` is a typo, not 1.
        if isinstance(item, (bool, np.bool_)) or not isinstance(item, (numbers.Real, np.integer, np.floating)):
            raise ValueError(f"{name}={item!r} is invalid: must be {what}")
    if items.size == 0:
        raise ValueError(f"{name} is empty: must be {what} (or a non-empty array of them)")
    return np.asarray(value)
