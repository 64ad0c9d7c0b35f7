"""Time the evaluation numerics at the paper's scale (n = 1024 samples, k = 1..256, m = 256, 50,000 iterations).

    pass@k table: P problems x 9 budgets with the unbiased estimator;
    significance: paired m-out-of-n subsampling test of two runs over P problems.
Usage: python benchmarks/bench_eval.py [--problems 500] [--iterations 50000] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from fgrpo_verl.pass_at_k import ks_up_to, pass_at_k
from fgrpo_verl.evaluation.significance import subsample_draws, summarise


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", type=int, default=500, help="problems per benchmark (MATH500: 500)")
    parser.add_argument("--n", type=int, default=1024, help="samples per problem")
    parser.add_argument("--m", type=int, default=256, help="subsample size of the significance test")
    parser.add_argument("--iterations", type=int, default=50_000, help="significance iterations (paper: 50,000)")
    parser.add_argument("--repeats", type=int, default=5, help="repeats of the pass@k table timing (median)")
    parser.add_argument("--json", default=None, help="also write the numbers to this file")
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    rate = rng.beta(0.5, 0.5, size=args.problems)
    c_base = rng.binomial(args.n, rate)
    c_focal = rng.binomial(args.n, np.clip(rate + 0.02, 0, 1))
    n = np.full(args.problems, args.n)
    ks = ks_up_to(args.n)

    times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        table = [pass_at_k(n, c_base, k).mean() for k in ks]
        times.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    rows = summarise(subsample_draws(n, c_base, n, c_focal, m=args.m, iterations=args.iterations, seed=0))
    t_sig = time.perf_counter() - t0
    result = {
        "problems": args.problems, "n": args.n, "ks": ks,
        "pass_at_k_table_seconds_median": float(np.median(times)),
        "significance_seconds": t_sig, "significance_iterations": args.iterations, "m": args.m,
        "pass_at_k_base": [round(float(v), 4) for v in table],
        "significant_ks": [r.k for r in rows if r.significant],
    }
    print(json.dumps(result, indent=2))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=2)


if __name__ == "__main__":
    main()
