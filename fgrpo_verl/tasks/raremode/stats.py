"""Seed-level statistics for the rare-mode experiment: mean with a t-interval, and the paired difference.

With s seeds the 95% interval of a mean is mean +- t_{0.975, s-1} * sd / sqrt(s) (sd with ddof = 1). The paired
comparison of two configurations uses the per-seed differences (same seed = same SFT model, same data order),
so seed-to-seed variation shared by both configurations cancels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Interval:
    mean: float
    half_width: float  # nan with a single seed
    n: int

    def __str__(self) -> str:
        if math.isnan(self.half_width):
            return f"{self.mean:.3f}"
        return f"{self.mean:.3f} ± {self.half_width:.3f}"

    @property
    def excludes_zero(self) -> bool:
        return not math.isnan(self.half_width) and abs(self.mean) > self.half_width

    def marked(self) -> str:
        """The interval as text, with ``*`` when it excludes 0 (how the tables mark a paired difference)."""
        return str(self) + ("*" if self.excludes_zero else "")


def t_quantile(p: float, df: int) -> float:
    """Quantile of Student's t with ``df`` degrees of freedom, p in (0.5, 1): bisection on the CDF, whose
    integral from 0 is a Simpson sum of the density over the substitution x = tan(u) (finite interval)."""
    if not 0.5 < p < 1 or df < 1:
        raise ValueError(f"need 0.5 < p < 1 and df >= 1, got p={p!r}, df={df!r}")
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)

    def cdf(x: float) -> float:
        u = np.linspace(0.0, math.atan(x), 2001)
        xs = np.tan(u)
        f = np.exp(log_c - (df + 1) / 2 * np.log1p(xs * xs / df)) / np.cos(u) ** 2
        h = u[1] - u[0]
        return 0.5 + h / 3 * (f[0] + f[-1] + 4 * f[1:-1:2].sum() + 2 * f[2:-1:2].sum())

    lo, hi = 0.0, 1.0
    while cdf(hi) < p:
        hi *= 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < p else (lo, mid)
    return (lo + hi) / 2


def t_interval(values, level: float = 0.95) -> Interval:
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 1 or v.size == 0:
        raise ValueError(f"need a non-empty 1-D list of per-seed values, got shape {v.shape}")
    if v.size == 1:
        return Interval(float(v[0]), float("nan"), 1)
    half = float(t_quantile(0.5 + level / 2, v.size - 1) * v.std(ddof=1) / math.sqrt(v.size))
    return Interval(float(v.mean()), half, int(v.size))


def paired_difference(a, b, level: float = 0.95) -> Interval:
    """Interval of mean(a - b) over seeds; ``a[i]`` and ``b[i]`` must come from the same seed."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"paired values need one value per seed on both sides, got {a.shape} and {b.shape}")
    return t_interval(a - b, level)
