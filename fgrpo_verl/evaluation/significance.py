"""The paper's significance test (App. Q): paired m-out-of-n subsampling of generations.

For two runs A (baseline) and B (focal) scored on the same problems with n generations each (paper: n = 1024):

    for t = 1 .. T  (paper: T = 50,000)
        for every problem p and each run r, draw m of its n generations without replacement (paper: m = 256)
            and count the correct ones, c*_{r,p};
        pass@k*_r = mean_p [1 - C(m - c*_{r,p}, k) / C(m, k)]        (the unbiased estimator on the subsample)
        d*_t = pass@k*_B - pass@k*_A                                  (paired: same iteration, same problems)
    95% CI = [2.5th, 97.5th percentile of d*]; the difference is significant (two-sided, alpha = 0.05) iff the CI
    excludes 0.

Vectorisation: pass@k on a subsample depends on the subsample only through its number of correct samples, and the
number of correct items among m drawn without replacement from n items of which c are correct is exactly
Hypergeometric(c, n - c, m). So each (iteration, problem) needs one hypergeometric draw, and pass@k is a table
lookup ``table_k[c*]`` with ``table_k = pass_at_k(m, 0..m, k)``. Iterations are processed in chunks to bound memory.
The reported point estimate is the difference of the full-n pass@k values.

Calibration (``method``). The paper's interval (``"paper"``, the default, kept for comparability) takes raw
percentiles of d*. But d* is a difference of *m*-sample estimates, whose spread is about sqrt(n/m - 1) = 1.7x (m =
n/4) that of the n-sample difference being tested, so under H0 the test almost never rejects (measured type-I error
in docs/evaluation.md). Politis & Romano's subsampling interval rescales the deviations of the subsample statistic
from the full-sample one by tau_m / tau_n = sqrt(m / n) (``"rescaled"``):

    CI = [d_hat - s q_{1-alpha/2}(d* - d_hat),  d_hat - s q_{alpha/2}(d* - d_hat)],   s = sqrt(m / n),

(E[d*] = d_hat exactly for k <= m: the unbiased estimator averaged over all m-subsets is the n-sample one). That
scaling is right as m / n -> 0; at m / n = 1/4 drawing *without* replacement also shrinks the subsample variance by
the finite-population factor (n - m) / (n - 1), which ``"rescaled-fpc"`` undoes with s = sqrt(m / (n - m)). p-values
are those of the same distribution: p = 2 min(P*(s (d* - d_hat) >= d_hat), P*(s (d* - d_hat) <= d_hat)).

Averages (the paper's Math Avg / OOD Avg): the average column's d*_t is the mean over its benchmarks of their
d*_t from the same iteration t (``combine_draws``), so its interval accounts for all member benchmarks at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fgrpo_verl.evaluation.generate import request_seed
from fgrpo_verl.pass_at_k import ks_up_to, pass_at_k_curve, pass_at_k_table
from fgrpo_verl.theory._checks import whole

# (iterations x problems) cells per chunk of hypergeometric draws; ~16 MiB of int64 per run.
_CHUNK_CELLS = 1 << 20


METHODS = ("paper", "rescaled", "rescaled-fpc")


@dataclass
class SignificanceRow:
    k: int
    baseline_pass_at_k: float  # full-n pass@k of A
    focal_pass_at_k: float     # full-n pass@k of B
    difference: float      # focal - baseline
    ci_low: float          # CI of the paired difference (method-dependent, see the module docstring)
    ci_high: float
    p_value: float         # two-sided, capped at 1
    significant: bool      # CI excludes 0
    method: str = "paper"


@dataclass
class SubsampleDraws:
    """Per k: full-n pass@k of both runs and the T subsampled paired differences d*_t (one benchmark or an average)."""

    ks: list[int]
    baseline: dict[int, float]
    focal: dict[int, float]
    diffs: dict[int, np.ndarray]
    m: int
    n: int  # samples per problem (one value: the rescaled intervals need it)


def subsample_draws(n_baseline, c_baseline, n_focal, c_focal, ks=None, m: int = 256, iterations: int = 50_000,
                    seed=0) -> SubsampleDraws:
    """The T paired m-out-of-n subsample differences per k (the loop in the module docstring); the counts are per
    problem, as ``scoring.count_correct`` gives them (its pass@k at full n checks them).

    ``seed``: anything ``numpy.random.default_rng`` takes (an int, or a ``SeedSequence`` child per benchmark)."""
    nb, cb, nf, cf = (np.asarray(x, dtype=np.int64) for x in (n_baseline, c_baseline, n_focal, c_focal))
    if nb.shape != nf.shape:
        raise ValueError(f"baseline and focal must cover the same problems, got {nb.size} and {nf.size} problems")
    whole("m", m)
    whole("iterations", iterations, 2)
    n_min = int(min(nb.min(), nf.min()))
    if m >= n_min:
        # m = n draws every generation: all iterations agree and the CI collapses onto the point estimate.
        raise ValueError(f"m must be < the number of generations of every problem (smallest n = {n_min}), got m={m}")
    ks = ks_up_to(m, k_max=m) if ks is None else [int(k) if isinstance(k, np.integer) else k for k in ks]
    tables = pass_at_k_table(m, ks)  # row i: pass@ks[i] of a subsample with c* = 0..m correct (checks 1 <= k <= m)
    diffs = np.empty((len(ks), iterations))
    rng = np.random.default_rng(seed)
    problems = nb.size
    chunk = max(1, min(_CHUNK_CELLS // problems, _CHUNK_CELLS // (m + 1)))
    for start in range(0, iterations, chunk):
        t = min(chunk, iterations - start)
        hist_b = _histograms(rng.hypergeometric(cb, nb - cb, m, size=(t, problems)), m)
        hist_f = _histograms(rng.hypergeometric(cf, nf - cf, m, size=(t, problems)), m)
        diffs[:, start : start + t] = tables @ (hist_f - hist_b).T / problems
    same_n = int(nb[0]) if (nb == nb[0]).all() and (nf == nb[0]).all() else 0
    return SubsampleDraws(
        ks=list(ks), m=m, n=same_n,
        baseline={k: float(v) for k, v in zip(ks, pass_at_k_curve(nb, cb, ks))},
        focal={k: float(v) for k, v in zip(ks, pass_at_k_curve(nf, cf, ks))},
        diffs={k: diffs[i] for i, k in enumerate(ks)},
    )


def _histograms(draws: np.ndarray, m: int) -> np.ndarray:
    """Row-wise counts of c* = 0..m: (t, problems) draws -> (t, m + 1), so pass@k of an iteration is one dot product."""
    t = draws.shape[0]
    flat = draws + (m + 1) * np.arange(t)[:, None]
    return np.bincount(flat.reshape(-1), minlength=t * (m + 1)).reshape(t, m + 1).astype(np.float64)


def combine_draws(parts: list[SubsampleDraws]) -> SubsampleDraws:
    """The average column: per k and iteration, the mean of the member benchmarks' values (same iteration t); an
    average has members (the options' ``--average`` and a recipe's ``averages`` are refused without)."""
    ks = [k for k in parts[0].ks if all(k in p.diffs for p in parts)]
    ns = {p.n for p in parts}
    return SubsampleDraws(
        ks=ks, m=parts[0].m, n=ns.pop() if len(ns) == 1 else 0,
        baseline={k: float(np.mean([p.baseline[k] for p in parts])) for k in ks},
        focal={k: float(np.mean([p.focal[k] for p in parts])) for k in ks},
        diffs={k: np.mean([p.diffs[k] for p in parts], axis=0) for k in ks},
    )


def interval(diffs: np.ndarray, estimate: float, alpha: float, method: str, m: int, n: int) -> tuple[float, float, float]:
    """(CI low, CI high, two-sided p) of the paired difference from its subsample draws; see the module docstring."""
    if method not in METHODS:
        raise ValueError(f"significance method must be one of {METHODS}, got {method!r}")
    if method == "paper":
        low, high = np.quantile(diffs, [alpha / 2, 1 - alpha / 2])
        p = 2.0 * min(np.mean(diffs <= 0), np.mean(diffs >= 0))
        return float(low), float(high), float(min(1.0, p))
    if n <= m:
        raise ValueError(
            f"the {method!r} interval needs one number of samples n > m for every problem of both runs, got n={n or 'mixed'}"
        )
    scale = np.sqrt(m / n) if method == "rescaled" else np.sqrt(m / (n - m))
    dev = scale * (diffs - estimate)
    q_low, q_high = np.quantile(dev, [alpha / 2, 1 - alpha / 2])
    p = 2.0 * min(np.mean(dev >= estimate), np.mean(dev <= estimate))
    return float(estimate - q_high), float(estimate - q_low), float(min(1.0, p))


def summarise(draws: SubsampleDraws, alpha: float = 0.05, method: str = "paper") -> list[SignificanceRow]:
    rows = []
    for k in draws.ks:
        estimate = draws.focal[k] - draws.baseline[k]
        low, high, p = interval(draws.diffs[k], estimate, alpha, method, draws.m, draws.n)
        rows.append(SignificanceRow(
            k=int(k), baseline_pass_at_k=draws.baseline[k], focal_pass_at_k=draws.focal[k], difference=estimate,
            ci_low=low, ci_high=high, p_value=p, significant=bool(low > 0 or high < 0), method=method,
        ))
    return rows


def paired_tests(baseline: dict, focal: dict, averages: dict[str, list[str]], pair: tuple[str, str], stream: str,
                 ks, m: int, iterations: int, seed: int, alpha: float = 0.05,
                 method: str = "paper") -> list[tuple[str, SignificanceRow]]:
    """``(column, row)`` per k of the paired test of focal - baseline (``{benchmark: scores with n, c}`` of the two
    runs ``pair`` names) on every benchmark both have, then on every average column whose members all were tested.
    A benchmark's draws have their own seed from (``seed``, ``stream``, the pair, the benchmark), so the columns
    tested beside it do not change its numbers; a ValueError names the pair and the benchmark."""
    draws = {}
    for bench in [b for b in baseline if b in focal]:
        a, b = baseline[bench], focal[bench]
        try:
            draws[bench] = subsample_draws(a.n, a.c, b.n, b.c, ks=ks, m=m, iterations=iterations,
                                           seed=request_seed(seed, f"{stream} {pair[0]}:{pair[1]}", bench, "", 0))
        except ValueError as err:
            raise ValueError(f"({pair[0]}:{pair[1]} on {bench}): {err}") from err
    for name, members in averages.items():
        if all(b in draws for b in members):
            draws[name] = combine_draws([draws[b] for b in members])  # same iteration t across members
    return [(column, row) for column, d in draws.items() for row in summarise(d, alpha=alpha, method=method)]
