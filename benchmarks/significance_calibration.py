"""Null simulation of the paired subsampling test: its real type-I error per interval method.

H0 world: two runs with the *same* per-problem success rates. Per replicate, for each of ``benchmarks`` benchmarks
of ``problems`` problems, draw rates p_i ~ Beta(a, b) (default Beta(0.5, 0.5): most problems nearly always or
never solved, as on real benchmarks), then c_A,i and c_B,i ~ Binomial(n, p_i) independently; run the test (one
set of subsample draws, every method read off the same draws) on each benchmark and on their average column
(``combine_draws``) and record whether it rejects. The rejection rate over replicates estimates the type-I error;
its Monte Carlo standard error is sqrt(r (1 - r) / replicates).

    python benchmarks/significance_calibration.py --replicates 1000 --problems 100 --iterations 2000

A measurement of the test (the numbers in docs/evaluation.md), not part of it: it lives beside the benchmarks and
does not ship in the package.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from fgrpo_verl.evaluation.significance import METHODS, combine_draws, subsample_draws, summarise


def null_rejection_rates(replicates: int = 200, benchmarks: int = 2, problems: int = 100, n: int = 1024, m: int = 256,
                         iterations: int = 2000, ks=(1, 16, 256), alpha: float = 0.05, beta=(0.5, 0.5), seed: int = 0,
                         methods=METHODS) -> dict:
    """``{method: {"k=K": rate, "avg k=K": rate}}``: share of H0 replicates rejected, per benchmark test and for the
    average column."""
    root = np.random.default_rng(seed)
    streams = np.random.SeedSequence(seed).spawn(replicates * benchmarks)
    ks = list(ks)
    hits = {meth: {f"{scope}k={k}": 0 for scope in ("", "avg ") for k in ks} for meth in methods}
    bench_tests = 0
    for r in range(replicates):
        parts = []
        for b in range(benchmarks):
            rate = root.beta(*beta, size=problems)
            c_a, c_b = root.binomial(n, rate), root.binomial(n, rate)
            nn = np.full(problems, n)
            parts.append(subsample_draws(nn, c_a, nn, c_b, ks=ks, m=m, iterations=iterations,
                                         seed=streams[r * benchmarks + b]))
        average = combine_draws(parts)
        for meth in methods:
            for draws in parts:
                for row in summarise(draws, alpha, meth):
                    hits[meth][f"k={row.k}"] += row.significant
            for row in summarise(average, alpha, meth):
                hits[meth][f"avg k={row.k}"] += row.significant
        bench_tests += benchmarks
    return {meth: {key: count / (replicates if key.startswith("avg") else bench_tests) for key, count in h.items()}
            for meth, h in hits.items()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--replicates", type=int, default=1000)
    p.add_argument("--benchmarks", type=int, default=2, help="benchmarks per replicate (their average is tested too)")
    p.add_argument("--problems", type=int, default=100)
    p.add_argument("--n", type=int, default=1024)
    p.add_argument("--m", type=int, default=256)
    p.add_argument("--iterations", type=int, default=2000)
    p.add_argument("--ks", default="1,16,256")
    p.add_argument("--alpha", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    rates = null_rejection_rates(args.replicates, args.benchmarks, args.problems, args.n, args.m, args.iterations,
                                 [int(k) for k in args.ks.split(",")], args.alpha, seed=args.seed)
    out = {"settings": vars(args), "type_one_error": rates, "seconds": round(time.perf_counter() - t0, 1)}
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
