"""Unbiased pass@k estimator (Chen et al. 2021), the estimator of the paper's eq. (27), computed from tables.

For one problem with ``n`` sampled completions of which ``c`` are correct, the probability that at least one of
``k`` completions drawn *without replacement* from the ``n`` is correct is

    pass@k = 1 - C(n - c, k) / C(n, k).

It is an unbiased estimate of the model's true pass@k for every k <= n. The benchmark score is its mean over
problems (``mean_pass_at_k``; all budgets at once: ``pass_at_k_curve``).

Tables. pass@k depends on a problem only through (n, c), and a benchmark has few distinct n (usually one), so we
build, per distinct n, the table T_n[k, c] for the requested k and every c = 0..n, and gather (per-problem values)
or multiply by the histogram of c (benchmark means: mean_p T[k, c_p] = sum_c hist[c] T[k, c] / P). The binomials
are never formed (C(1024, 256) ~ 1e245; C(2048, 512) overflows float64). With a_j = k / (n - j), the ratio
telescopes,

    R[k, c] = C(n - c, k) / C(n, k) = prod_{j < c} (1 - a_j),

and pass@k = Q[k, c] = 1 - R[k, c] obeys Q[k, c + 1] = Q[k, c] + a_c R[k, c]. We take R as a cumulative product and
Q as a cumulative sum of the non-negative terms a_j R[k, j]: no subtraction of nearly equal numbers anywhere, so
the relative error of every entry stays ~ 2 (c + 1) eps (~5e-13 at c = 1024), checked against exact ``Fraction``
arithmetic at rtol 1e-12 (tests/test_pass_at_k_on_cpu.py). Exact values are kept exactly: Q = 0 at c = 0 and Q = 1
wherever n - c < k (every k-subset then holds a correct completion).

Many budgets at once (``pass_at_k_curve`` with every k = 1..1024): the table has |ks| x (n + 1) cells, ~1M at
n = 1024, and the mean needs only its product with the histogram. Stepping k instead, for the distinct c in use
at once, R[k, c] = R[k - 1, c] (n - c - k + 1) / (n - k + 1) gives

    Q[k, c] = (Q[k - 1, c] (n - c - k + 1) + c) / (n - k + 1),   Q[0, c] = 0,

again sums of non-negative terms while n - c >= k (relative error ~ 3 k eps, ~7e-13 at k = 1024), exactly 1 at
the first k with n - c - k + 1 = 0 and, from there on, exactly 1 again at every step ((1 (n - c - k + 1) + c) /
(n - k + 1) with integers). One pass per k up to the largest budget, each a few vector operations over the
distinct c and one dot product with the histogram: chosen when it is cheaper than the table.
"""

from __future__ import annotations

import numpy as np

__all__ = ["pass_at_k", "pass_at_k_table", "pass_at_k_curve", "mean_pass_at_k", "ks_up_to"]

# Bound on the cells of one (budgets x counts) table block, so memory stays ~32 MiB for any n.
_TABLE_CELLS = 1 << 22


def _as_int_array(name: str, value) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
        if arr.dtype != object and arr.size and np.issubdtype(arr.dtype, np.number):
            raise ValueError(
                f"{name} must be an integer or integer array, got dtype {arr.dtype} "
                f"(e.g. {arr.reshape(-1)[0]!r}); pass whole numbers as ints (cast with .astype(int) if intended)"
            )
        raise ValueError(f"{name} must be an integer or integer array, got {value!r} of dtype {arr.dtype}")
    return arr.astype(np.int64, copy=False)


def _check(n_b: np.ndarray, c_b: np.ndarray, k_b: np.ndarray) -> None:
    for name, arr, low in (("n", n_b, 1), ("c", c_b, 0), ("k", k_b, 1)):
        bad = arr < low
        if bad.any():
            raise ValueError(f"{name} must be >= {low}, got {arr[bad].reshape(-1)[0]}")
    if (c_b > n_b).any():
        i = np.flatnonzero((c_b > n_b).reshape(-1))[0]
        raise ValueError(f"c must be <= n (correct completions among n), got c={c_b.reshape(-1)[i]} > n={n_b.reshape(-1)[i]}")
    if (k_b > n_b).any():
        i = np.flatnonzero((k_b > n_b).reshape(-1))[0]
        raise ValueError(f"k must be <= n (the estimator is unbiased only for k <= n), got k={k_b.reshape(-1)[i]} > n={n_b.reshape(-1)[i]}")


def _table(n: int, ks: np.ndarray, c_max: int | None = None) -> np.ndarray:
    """Q[i, c] = pass@ks[i] with n samples and c correct, c = 0..c_max (default n); ``ks`` sorted, unique, in [1, n].

    Only the columns up to the largest c in use are built, so a huge n with few correct samples stays cheap."""
    c_max = n if c_max is None else c_max
    out = np.empty((ks.size, c_max + 1))
    out[:, 0] = 0.0
    if c_max == 0:
        return out
    rows = max(1, _TABLE_CELLS // (c_max + 1))
    j = np.arange(c_max, dtype=np.float64)  # j = 0..c_max-1: the c of the step c -> c + 1
    for start in range(0, ks.size, rows):
        k = ks[start : start + rows, None]
        a = k / (n - j)                             # a_j = k / (n - j) >= 0
        ratio = np.subtract(1.0, a)                 # 1 - a_j, exactly 0 at n - j = k (a_j is exactly 1 there)
        np.cumprod(ratio, axis=1, out=ratio)        # R[k, c] for c = 1..c_max
        block = out[start : start + rows]
        block[:, 1] = a[:, 0]                       # Q[k, 1] = a_0 R[k, 0] with R[k, 0] = 1
        terms = np.multiply(a[:, 1:], ratio[:, :-1], out=a[:, 1:])
        np.cumsum(terms, axis=1, out=block[:, 2:])
        block[:, 2:] += block[:, 1:2]
        # exactly 1 where n - c < k, i.e. c > n - k (the sum would land within a few ulp of 1)
        for row, k_value in enumerate(ks[start : start + rows].tolist()):
            block[row, n - k_value + 1 :] = 1.0
    return out


def _recurrence_means(n: int, hist: np.ndarray, ks: np.ndarray) -> np.ndarray:
    """sum_c hist[c] Q[k, c] for each k in ``ks`` (sorted, unique, in [1, n]), stepping k (module docstring)."""
    cs = np.flatnonzero(hist)
    weights = hist[cs]
    q = np.zeros(cs.size)
    c_float = cs.astype(np.float64)
    remaining = (n - cs).astype(np.float64)  # n - c - k + 1 at k = 1
    out = np.empty(ks.size)
    want = iter(enumerate(ks.tolist()))
    index, next_k = next(want)
    for k in range(1, int(ks[-1]) + 1):
        q *= remaining
        q += c_float
        q /= n - k + 1
        remaining -= 1.0
        if k == next_k:
            out[index] = q @ weights
            index, next_k = next(want, (None, None))
    return out


def _histogram_means(n: int, hist: np.ndarray, ks: np.ndarray) -> np.ndarray:
    """sum_c hist[c] pass@k(n, c) for each k in ``ks`` (sorted, unique, in [1, n]): the table times the
    histogram, or the k recurrence when that is cheaper (cost per cell / per step measured in
    benchmarks/bench_pass_at_k.py: ~15 ns per table cell, ~5 us + ~2 ns per distinct c per k step)."""
    if ks.size == 0:  # no budget within this benchmark's smallest n: the caller fills NaN
        return np.zeros(0)
    table_cost = ks.size * hist.size * 15e-9
    recurrence_cost = int(ks[-1]) * (5e-6 + np.count_nonzero(hist) * 2e-9)
    if recurrence_cost < table_cost:
        return _recurrence_means(n, hist, ks)
    return _table(n, ks, hist.size - 1) @ hist


def pass_at_k_table(n: int, ks) -> np.ndarray:
    """Table of pass@k for n samples: row i is pass@``ks[i]`` for c = 0, 1, ..., n correct (shape len(ks) x (n+1))."""
    n_arr = _as_int_array("n", n)
    k_arr = _as_int_array("k", ks).reshape(-1)
    if n_arr.ndim != 0:
        raise ValueError(f"n must be a single integer, got shape {n_arr.shape}")
    _check(n_arr, np.zeros((), np.int64), k_arr)
    uniq, inverse = np.unique(k_arr, return_inverse=True)
    return _table(int(n_arr), uniq)[inverse.reshape(-1)]


def pass_at_k(n, c, k):
    """Unbiased pass@k = 1 - C(n-c, k) / C(n, k) for each problem, broadcasting ``n``, ``c`` and ``k``.

    Args:
        n: number of sampled completions per problem (int >= 1, or an integer array).
        c: number of correct completions among them (0 <= c <= n).
        k: budget (1 <= k <= n).

    Returns:
        ``np.float64`` for scalar inputs, else a float64 array of the broadcast shape. Values lie in [0, 1];
        exactly 1.0 where n - c < k and exactly 0.0 where c = 0.

    Raises:
        ValueError: naming the argument, for non-integers, negatives, n < 1, k < 1, c > n or k > n.
    """
    n_arr, c_arr, k_arr = _as_int_array("n", n), _as_int_array("c", c), _as_int_array("k", k)
    try:
        n_b, c_b, k_b = np.broadcast_arrays(n_arr, c_arr, k_arr)
    except ValueError as err:
        raise ValueError(f"n, c and k must broadcast together, got shapes {n_arr.shape}, {c_arr.shape}, {k_arr.shape}") from err
    _check(n_b, c_b, k_b)
    n_f, c_f, k_f = (a.reshape(-1) for a in (n_b, c_b, k_b))
    out = np.empty(n_f.shape, dtype=np.float64)
    for n_value in np.unique(n_f):
        at = np.flatnonzero(n_f == n_value)
        ks, k_index = np.unique(k_f[at], return_inverse=True)
        out[at] = _table(int(n_value), ks, int(c_f[at].max()))[k_index.reshape(-1), c_f[at]]
    result = out.reshape(n_b.shape)
    return np.float64(result) if result.ndim == 0 else result


def pass_at_k_curve(n, c, ks) -> np.ndarray:
    """Benchmark pass@k for every budget in ``ks``: mean over problems of pass@k, shape (len(ks),).

    Grouped by n: per distinct n, ``T_n @ bincount(c)`` (one matrix-vector product) or the k recurrence (module
    docstring), so the cost is O(|ks| * n) per distinct n, independent of the number of problems. A k above some problem's n gives NaN (the
    estimator is not defined there; tables show "-").
    """
    n_arr = _as_int_array("n", n).reshape(-1)
    c_arr = _as_int_array("c", c).reshape(-1)
    k_arr = _as_int_array("k", ks).reshape(-1)
    if n_arr.shape != c_arr.shape or n_arr.size == 0:
        raise ValueError(f"n and c must be equal-length non-empty 1-D arrays, got {n_arr.shape} and {c_arr.shape}")
    _check(n_arr, c_arr, np.ones_like(n_arr))
    if k_arr.size and k_arr.min() < 1:
        raise ValueError(f"k must be >= 1, got {k_arr.min()}")
    total = np.zeros(k_arr.size)
    live = k_arr <= n_arr.min()
    uniq_k = np.unique(k_arr[live])
    for n_value in np.unique(n_arr):
        hist = np.bincount(c_arr[n_arr == n_value]).astype(np.float64)  # c = 0..max c of this n
        total[live] += _histogram_means(int(n_value), hist, uniq_k)[np.searchsorted(uniq_k, k_arr[live])]
    out = total / n_arr.size
    out[~live] = np.nan
    return out


def mean_pass_at_k(n, c, k) -> float:
    """Benchmark pass@k: the mean of ``pass_at_k(n, c, k)`` over problems (eq. 27's expectation over problems)."""
    values = pass_at_k(n, c, k)
    if np.ndim(values) == 0:
        return float(values)
    if values.size == 0:
        raise ValueError("mean_pass_at_k needs at least one problem, got an empty array")
    return float(values.mean())


def ks_up_to(n_max: int, k_max: int = 256) -> list[int]:
    """The reported budgets k = 1, 2, 4, ... up to min(k_max, n_max) (the paper's rows, k = 1 ... 256)."""
    if isinstance(n_max, bool) or not isinstance(n_max, (int, np.integer)) or n_max < 1:
        raise ValueError(f"n_max must be an int >= 1, got {n_max!r}")
    if isinstance(k_max, bool) or not isinstance(k_max, (int, np.integer)) or k_max < 1:
        raise ValueError(f"k_max must be an int >= 1, got {k_max!r}")
    ks, k = [], 1
    while k <= min(n_max, k_max):
        ks.append(k)
        k *= 2
    return ks
