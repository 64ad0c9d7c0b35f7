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
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from fgrpo_verl.evaluation.pass_at_k import ks_up_to, pass_at_k

# (iterations x problems) cells per chunk of hypergeometric draws; ~16 MiB of int64 per run.
_CHUNK_CELLS = 1 << 21


@dataclass
class SignificanceRow:
    k: int
    baseline_pass_at_k: float  # full-n pass@k of A
    focal_pass_at_k: float     # full-n pass@k of B
    difference: float      # focal - baseline
    ci_low: float          # percentile CI of the subsampled paired difference
    ci_high: float
    p_value: float         # two-sided: 2 * min(P*(d <= 0), P*(d >= 0)), capped at 1
    significant: bool      # CI excludes 0

    def as_dict(self) -> dict:
        return asdict(self)


def _check_counts(name: str, n, c) -> tuple[np.ndarray, np.ndarray]:
    n = np.asarray(n)
    c = np.asarray(c)
    if n.ndim != 1 or c.shape != n.shape or n.size == 0:
        raise ValueError(f"{name}: n and c must be equal-length non-empty 1-D arrays, got shapes {n.shape} and {c.shape}")
    pass_at_k(n, c, 1)  # validates integers, 0 <= c <= n
    return n.astype(np.int64), c.astype(np.int64)


def paired_subsampling_test(
    n_baseline, c_baseline, n_focal, c_focal, ks=None, m: int = 256, iterations: int = 50_000,
    alpha: float = 0.05, seed: int = 0,
) -> list[SignificanceRow]:
    """Paired m-out-of-n subsampling test of pass@k(focal) - pass@k(baseline), per k.

    Args:
        n_baseline, c_baseline: per-problem sample and correct counts of the baseline run (aligned by problem).
        n_focal, c_focal: the same for the focal run, same problem order.
        ks: budgets to test (each 1 <= k <= m); default 1, 2, 4, ..., m.
        m: subsample size per problem, 1 <= m < every n (paper: 256 of 1024).
        iterations: number of subsampling iterations T (paper: 50,000).
        alpha: two-sided level; the CI is the [alpha/2, 1 - alpha/2] percentile interval.
        seed: seed of the numpy Generator (results are reproducible for a given seed and chunking).
    """
    nb, cb = _check_counts("baseline", n_baseline, c_baseline)
    nf, cf = _check_counts("focal", n_focal, c_focal)
    if nb.shape != nf.shape:
        raise ValueError(f"baseline and focal must cover the same problems, got {nb.size} and {nf.size} problems")
    for name, val, low in (("m", m, 1), ("iterations", iterations, 2)):
        if isinstance(val, bool) or not isinstance(val, (int, np.integer)) or val < low:
            raise ValueError(f"{name} must be an int >= {low}, got {val!r}")
    n_min = int(min(nb.min(), nf.min()))
    if m >= n_min:
        # m = n draws every generation: all iterations agree and the CI collapses onto the point estimate.
        raise ValueError(f"m must be < the number of generations of every problem (smallest n = {n_min}), got m={m}")
    if not (isinstance(alpha, float) and 0.0 < alpha < 1.0):
        raise ValueError(f"alpha must be a float in (0, 1), got {alpha!r}")
    ks = ks_up_to(m, k_max=m) if ks is None else list(ks)
    for k in ks:
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= m:
            raise ValueError(f"every k must be an int in [1, m={m}], got {k!r}")

    tables = {k: pass_at_k(m, np.arange(m + 1), k) for k in ks}  # pass@k of a subsample with c* correct
    diffs = {k: np.empty(iterations) for k in ks}
    rng = np.random.default_rng(seed)
    problems = nb.size
    chunk = max(1, _CHUNK_CELLS // problems)
    for start in range(0, iterations, chunk):
        t = min(chunk, iterations - start)
        draw_b = rng.hypergeometric(cb, nb - cb, m, size=(t, problems))
        draw_f = rng.hypergeometric(cf, nf - cf, m, size=(t, problems))
        for k in ks:
            diffs[k][start : start + t] = tables[k][draw_f].mean(axis=1) - tables[k][draw_b].mean(axis=1)

    rows = []
    for k in ks:
        d = diffs[k]
        low, high = np.quantile(d, [alpha / 2, 1 - alpha / 2])
        p = min(1.0, 2.0 * min(np.mean(d <= 0), np.mean(d >= 0)))
        base = float(pass_at_k(nb, cb, k).mean())
        focal = float(pass_at_k(nf, cf, k).mean())
        rows.append(SignificanceRow(
            k=int(k), baseline_pass_at_k=base, focal_pass_at_k=focal, difference=focal - base, ci_low=float(low), ci_high=float(high),
            p_value=float(p), significant=bool(low > 0 or high < 0),
        ))
    return rows
