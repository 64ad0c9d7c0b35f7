"""pass@k at paper scale, three implementations side by side in one run (same inputs, same process, one core).

    table   fgrpo_verl.pass_at_k_curve: per distinct n a (k x c) table times the histogram of c, or
            (many k, e.g. every k) the k recurrence over the distinct c, whichever is cheaper
    legacy  the previous implementation (-expm1 of a sum of log1p terms over a problems x c work array), kept
            here verbatim as the reference point
    naive   a per-problem Python loop over problems, numpy over the budgets k

Workload: 10,000 problems x n = 1,024 samples, k = 1, 2, 4, ..., 1,024 (the table rows), benchmark
means; ``--ks all`` times every k = 1..n instead (the slow two then take about a minute each). All three must agree to
1e-12 relative; the script checks that before timing. Timings are medians of --repeats runs; run under load they
are only comparable as ratios within one run.

    python benchmarks/bench_pass_at_k.py [--problems 10000] [--n 1024] [--ks pow2|all] > numbers.json
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one core, as the target states
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from fgrpo_verl.pass_at_k import pass_at_k_curve  # noqa: E402


def legacy_pass_at_k(n, c, k):
    """A per-problem x max-c work array with log1p / expm1: the straightforward implementation, as the reference."""
    n_f, c_f, k_f = (a.reshape(-1) for a in np.broadcast_arrays(np.asarray(n), np.asarray(c), np.asarray(k)))
    out = np.ones(n_f.shape, dtype=np.float64)
    live = np.flatnonzero(n_f - c_f >= k_f)
    if live.size:
        max_c = int(c_f[live].max())
        if max_c == 0:
            out[live] = 0.0
        else:
            rows = max(1, (1 << 22) // max_c)
            j = np.arange(max_c)
            for start in range(0, live.size, rows):
                idx = live[start : start + rows]
                nn, cc, kk = n_f[idx, None], c_f[idx, None], k_f[idx, None]
                i = (nn - cc + 1 + j).astype(np.float64)
                terms = np.where(j < cc, np.log1p(-kk / i), 0.0)
                out[idx] = -np.expm1(terms.sum(axis=1))
    return out


def legacy_curve(n, c, ks):
    return np.array([legacy_pass_at_k(n, c, k).mean() for k in ks])


def naive_curve(n, c, ks):
    """Per problem: the ratio C(n-c, k)/C(n, k) = prod_{i=n-c+1}^{n} (1 - k/i) for all k at once."""
    ks = np.asarray(ks, dtype=np.float64)
    total = np.zeros(ks.size)
    for n_p, c_p in zip(n.tolist(), c.tolist()):
        if c_p == 0:
            continue
        i = np.arange(n_p - c_p + 1, n_p + 1, dtype=np.float64)
        factors = np.clip(1.0 - ks[:, None] / i[None, :], 0.0, None)
        total += 1.0 - factors.prod(axis=1)
    return total / n.size


def timed(fn, repeats):
    times, value = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)), value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", type=int, default=10_000)
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=7, help="median of this many runs (table); slow ones run 1-2x")
    parser.add_argument("--ks", choices=("pow2", "all"), default="pow2", help="k = 1, 2, 4, ..., n or every k <= n")
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    n = np.full(args.problems, args.n, dtype=np.int64)
    c = rng.binomial(args.n, rng.beta(0.5, 0.5, size=args.problems)).astype(np.int64)
    ks = np.arange(1, args.n + 1) if args.ks == "all" else 2 ** np.arange(int(np.log2(args.n)) + 1)

    t_table, table = timed(lambda: pass_at_k_curve(n, c, ks), args.repeats)
    t_naive, naive = timed(lambda: naive_curve(n, c, ks), 1)
    t_legacy, legacy = timed(lambda: legacy_curve(n, c, ks), 1)
    for name, other in (("naive", naive), ("legacy", legacy)):
        err = float(np.max(np.abs(table - other) / np.maximum(np.abs(other), 1e-300)))
        if err > 1e-12:
            raise SystemExit(f"table and {name} disagree: max relative difference {err:.3g}")
    result = {
        "problems": args.problems, "n": args.n, "ks": args.ks, "budgets": int(ks.size), "load_1min": os.getloadavg()[0],
        "table_ms": 1e3 * t_table, "naive_ms": 1e3 * t_naive, "legacy_ms": 1e3 * t_legacy,
        "naive_over_table": t_naive / t_table, "legacy_over_table": t_legacy / t_table,
        "max_rel_diff_vs_legacy": float(np.max(np.abs(table - legacy) / np.maximum(legacy, 1e-300))),
    }
    print(json.dumps(result, indent=2))  # redirect to keep it


if __name__ == "__main__":
    main()
