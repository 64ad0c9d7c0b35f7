"""Unbiased pass@k estimator (Chen et al. 2021), the estimator of the paper's eq. (27).

For one problem with ``n`` sampled completions of which ``c`` are correct, the probability that at least one of
``k`` completions drawn *without replacement* from the ``n`` is correct is

    pass@k = 1 - C(n - c, k) / C(n, k).

It is an unbiased estimate of the model's true pass@k for every k <= n. The benchmark score is its mean over
problems (see ``mean_pass_at_k``).

Numerics: the binomials overflow float64 long before n = 1024, k = 256 (C(1024, 256) ~ 1e245 and C(2048, 512)
is inf), so we never form them. The ratio is a telescoping product

    C(n - c, k) / C(n, k) = prod_{i = n - c + 1}^{n} (1 - k / i),

evaluated as exp(sum log1p(-k / i)). Every term has the same sign, so the sum is well conditioned (relative error
~ c * eps) and ``-expm1`` keeps full relative precision when pass@k is tiny. When n - c < k every k-subset holds a
correct completion and the estimator is exactly 1, which we return without arithmetic.
"""

from __future__ import annotations

import numpy as np

__all__ = ["pass_at_k", "mean_pass_at_k", "ks_up_to"]

# Bound on the (problems x max c) work array built per chunk, so memory stays ~32 MiB for any input size.
_CHUNK_CELLS = 1 << 22


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
    n_arr = _as_int_array("n", n)
    c_arr = _as_int_array("c", c)
    k_arr = _as_int_array("k", k)
    try:
        n_b, c_b, k_b = np.broadcast_arrays(n_arr, c_arr, k_arr)
    except ValueError as err:
        raise ValueError(f"n, c and k must broadcast together, got shapes {n_arr.shape}, {c_arr.shape}, {k_arr.shape}") from err

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

    n_f, c_f, k_f = (a.reshape(-1) for a in (n_b, c_b, k_b))
    out = np.ones(n_f.shape, dtype=np.float64)  # n - c < k: exactly 1
    live = np.flatnonzero(n_f - c_f >= k_f)
    if live.size:
        max_c = int(c_f[live].max())
        if max_c == 0:
            out[live] = 0.0
        else:
            rows = max(1, _CHUNK_CELLS // max_c)
            j = np.arange(max_c)
            for start in range(0, live.size, rows):
                idx = live[start : start + rows]
                nn, cc, kk = n_f[idx, None], c_f[idx, None], k_f[idx, None]
                i = (nn - cc + 1 + j).astype(np.float64)  # i > k on every used cell, so log1p(-k/i) is finite
                terms = np.where(j < cc, np.log1p(-kk / i), 0.0)
                out[idx] = -np.expm1(terms.sum(axis=1))
    result = out.reshape(n_b.shape)
    return np.float64(result) if result.ndim == 0 else result


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
