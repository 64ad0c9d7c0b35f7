"""Table 1's paired significance test (App. Q: m-out-of-n subsampling, m = n/4 as the paper's 256 of 1024;
evaluation/significance.py) of a focal run's final pass against its baseline's, from their generation files."""

from __future__ import annotations

from fgrpo_verl.evaluation.plan import Plan
from fgrpo_verl.evaluation.report import scored_counts

SIGNIFICANCE_RATIO = 4  # m = n / 4: the paper's 256 of 1024 (App. Q)


def pair_significance(base, focal, plan: Plan, k: int, iterations: int, method: str,
                      seed: int) -> tuple[dict[str, dict[int, bool]], list[dict], list[str], int]:
    """``({column: {k: significant}}, rows, left out, m)``: the paired test of focal - baseline at pass@1 and at
    pass@K (a k above m cannot be tested on m-sample subsets and is not), and a line per benchmark left out
    (scored_counts: its unscored lines could not be scored here). ``base``, ``focal``: runs with a final result."""
    from fgrpo_verl.evaluation.significance import paired_tests

    (a, skip_a), (b, skip_b) = (scored_counts(r.final, plan.benchmarks, plan.sampling.threshold)
                                for r in (base, focal))
    left_out = list(dict.fromkeys(skip_a + skip_b))
    if not set(a) & set(b):
        raise ValueError("no benchmark scored for both runs: " + ("; ".join(left_out) or "no common benchmark"))
    n = min(int(s.n.min()) for s in [*a.values(), *b.values()])
    m = n // SIGNIFICANCE_RATIO
    if m < 1:
        raise ValueError(f"n = {n} samples per problem is too few for m-out-of-n subsampling (m = n / 4)")
    ks = sorted({x for x in (1, k) if x <= m})
    tested, rows = {}, []
    for column, r in paired_tests(a, b, plan.averages, (base.name, focal.name), "report", ks, m, iterations, seed,
                                  method=method):
        rows.append({"baseline": base.name, "focal": focal.name, "column": column, "k": r.k, "m": m,
                     "iterations": iterations, "method": method, "difference": r.difference,
                     "ci_low": r.ci_low, "ci_high": r.ci_high, "p_value": r.p_value,
                     "significant": r.significant})
        tested.setdefault(column, {})[r.k] = bool(r.significant)
    return tested, rows, left_out, m
