"""The evaluation tables (Tables 1, 2, 3, 6 and 12-14) of a recipe's final passes, ours beside the paper's
(paper_numbers.py); a cell the paper does not have (another model, a benchmark it did not use) is "-"."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from fgrpo_verl.evaluation import paper_numbers
from fgrpo_verl.evaluation.plan import Plan
from fgrpo_verl.evaluation.report import markdown_table, plot_curves, scored_counts
from fgrpo_verl.evaluation.significance import paired_tests
from fgrpo_verl.report.runs import RunReport, baseline_groups

SIGNIFICANCE_RATIO = 4  # m = n / 4 in Table 1's paired test (App. Q): the paper's 256 of 1024
# a controls run's recipe ``variant`` -> the paper's Table 3 row it reproduces
TABLE3_ROWS = {"low_lr": "GRPO low-LR (6.8e-7)", "entropy": "GRPO-H (entropy 1e-3)", "kl": "GRPO-KL (1e-3)",
               "ds_grpo": "DS-GRPO (Gai et al. 2025)"}


def report_k(reports: list[RunReport]) -> int:
    """K of pass@1/pass@K: 256 (the paper's), or the largest power of two every final pass's n allows."""
    return 1 << int(math.floor(math.log2(min([256, *(r.plan.passes.final.n for r in reports)]))))


def columns_of(plan: Plan) -> list[str]:
    """Table columns in the paper's order: each average before its benchmarks, then the remaining benchmarks."""
    final = plan.passes.final.benchmarks
    out = [c for avg, members in plan.averages.items() if set(members) <= set(final) for c in (avg, *members)]
    return out + [b for b in final if b not in out]


def ours(rep: RunReport | None, column: str, k: int) -> float | None:
    """pass@k in % of a run's final result (None: none)."""
    if rep is None or rep.final is None:
        return None
    value = rep.final["pass_at_k"].get(column, {}).get(str(k))
    return None if value is None else 100.0 * float(value)


def _pair(a: float | None, b: float | None, marks: tuple[str, str] = ("", "")) -> str:
    return ("-" if a is None else f"{a:.1f}") + marks[0] + "/" + ("-" if b is None else f"{b:.1f}") + marks[1]


@dataclass
class Table:
    key: str
    title: str
    columns: list[str]
    # (row label, ours {col: (p1, pK)}, paper {col: (p1, p256)}, tests {col: {k: significant}} of its pass@1/pass@K)
    rows: list[tuple[str, dict, dict, dict]]
    source: str                              # the paper table our rows are compared with
    notes: list[str] = field(default_factory=list)

    def has_ours(self) -> bool:
        """Whether a cell of ours has a number."""
        return any(v is not None for _, mine, _, _ in self.rows for pair in mine.values() for v in pair)

    def markdown(self, k: int) -> str:
        def marks(tests: dict) -> tuple[str, str]:
            return tuple("*" if tests.get(x) else "" for x in (1, k))

        lines = [f"### {self.title}", "", f"pass@1/pass@{k} (%); paper: pass@1/pass@256 from the paper's {self.source}",
                 "", "| row | | " + " | ".join(self.columns) + " |", "|---" * (len(self.columns) + 2) + "|"]
        for label, mine, paper, tests in self.rows:
            lines.append(f"| {label} | ours | " + " | ".join(
                _pair(*mine.get(c, (None, None)), marks(tests.get(c, {}))) for c in self.columns) + " |")
            lines.append("| | paper | " + " | ".join(_pair(*paper.get(c, (None, None))) for c in self.columns) + " |")
        if self.notes:
            lines += [""] + [f"- {n}" for n in self.notes]
        return "\n".join(lines) + "\n"

    def csv_rows(self, k: int) -> list[dict]:
        out = []
        for label, mine, paper, tests in self.rows:
            for col in self.columns:
                for i, metric in enumerate(("pass@1", f"pass@{k}")):
                    value = mine.get(col, (None, None))[i]
                    ref = paper.get(col, (None, None))[i]
                    tested = tests.get(col, {}).get((1, k)[i])
                    out.append({"table": self.key, "row": label, "column": col, "metric": metric,
                                "ours": "" if value is None else f"{value:.4f}",
                                "paper": "" if ref is None else ref, "paper_metric": ("pass@1", "pass@256")[i],
                                "paper_source": self.source if ref is not None else "",
                                "significant": "" if tested is None else ("yes" if tested else "no")})
        return out


def _cells(rep: RunReport | None, columns: list[str], k: int) -> dict:
    return {c: (ours(rep, c, 1), ours(rep, c, k)) for c in columns}


def _paper_cells(table: str, model: str, method: str, columns: list[str]) -> dict:
    cells = paper_numbers.cells()
    return {c: cells[(table, model, method, c)] for c in columns if (table, model, method, c) in cells}


def pair_significance(base, focal, plan: Plan, k: int, iterations: int, method: str,
                      seed: int) -> tuple[dict[str, dict[int, bool]], list[dict], list[str], int]:
    """``({column: {k: significant}}, rows, left out, m)``: the paired test of focal - baseline at pass@1 and at
    pass@K (a k above m cannot be tested on m-sample subsets and is not), and a line per benchmark left out
    (scored_counts: its unscored lines could not be scored here). ``base``, ``focal``: runs with a final result."""
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


def table1(reports, columns, k, significance) -> tuple[Table, list[tuple[RunReport, RunReport]], list[dict]]:
    """Per model x base algorithm: the baseline and the focal run at the chosen γ, at their selected checkpoints;
    ``significance``: (iterations, method, seed) of the paired test, or None (not run)."""
    rows, pairs, sig_rows, notes, ms = [], [], [], [], set()
    for base, focal, gamma in baseline_groups(reports):
        if not focal:
            continue
        rows.append((f"{base.model} {base.method}", _cells(base, columns, k),
                     _paper_cells("Table 1", base.model, base.method, columns), {}))
        if gamma is None:
            waiting = [f"γ={g:g}" for g, r in sorted(focal.items()) if r.final is None]
            notes.append(f"{base.model} F-{base.family.upper()}: γ not chosen yet ({', '.join(waiting)} without a "
                         "final pass at a selected checkpoint)")
            rows.append((f"{base.model} F-{base.family.upper()} (γ not chosen)", {}, _paper_cells(
                "Table 1", base.model, f"F-{base.family.upper()}", columns), {}))
            continue
        chosen = focal[gamma]
        tests = {}
        if significance is not None and base.final is not None:
            try:
                tests, part, left_out, m = pair_significance(base, chosen, base.plan, k, *significance)
                sig_rows += part
                ms.add(m)
                notes += [f"{chosen.name}: no significance test on {line}" for line in left_out]
            except ValueError as exc:
                notes.append(f"{chosen.name}: no significance test ({exc})")
        paper_gamma = paper_numbers.selected_gammas().get((base.model, base.family.upper()))
        label = f"{base.model} {chosen.method} (γ={gamma:g}" + (
            f"; paper chose {paper_gamma:g})" if paper_gamma is not None else ")")
        rows.append((label, _cells(chosen, columns, k), _paper_cells("Table 1", base.model, chosen.method, columns),
                     tests))
        pairs.append((base, chosen))
    if pairs:
        plan, final = pairs[0][0].plan, pairs[0][1].final["pass_at_k"]
        notes.insert(0, f"γ: the one whose selected checkpoint has the best {plan.select_by} pass@1 in its "
                        + (f"final pass (n={plan.passes.final.n})" if plan.select_by in final else
                           f"selection pass (n={plan.passes.selection.n}; the final pass has no {plan.select_by})"))
    if sig_rows:
        untested = [m for m in sorted(ms) if k > m]
        notes.append(f"`*` after a number: the focal run's paired difference to its baseline in that number "
                     f"(pass@1, or pass@{k}) is significant (App. Q: two-sided α = 0.05, {sig_rows[0]['method']} "
                     f"interval, m = {'/'.join(map(str, sorted(ms)))} = n/4, {sig_rows[0]['iterations']} iterations)"
                     + (f"; pass@{k} not tested (k > m = {untested[0]})" if untested else "")
                     + "; every test in significance.csv")
    table = Table("table1", "Table 1: baseline and focal method at the selected checkpoint and γ", columns, rows,
                  "Table 1", notes)
    return table, pairs, sig_rows


def table6(reports, plan, k) -> Table:
    models = list(dict.fromkeys(r.model for r in reports))
    averages = [a for a in plan.averages if a in columns_of(plan)] or [plan.select_by]
    columns = [f"{m} {a}" for m in models for a in averages]
    rows = []
    for fam in dict.fromkeys(r.family for r in reports):
        for g in sorted({r.gamma for r in reports}):
            runs = {r.model: r for r in reports if r.family == fam and r.gamma == g}
            if not runs:
                continue
            label = f"{fam.upper()} γ={g:g}"
            mine = {f"{m} {a}": (ours(runs.get(m), a, 1), ours(runs.get(m), a, k)) for m in models for a in averages}
            rows.append((label, mine, {f"{m} {a}": cells for m in models for a in averages
                                       if (cells := paper_numbers.cells().get(("Table 6", m, label, a)))}, {}))
    return Table("table6", "Table 6: γ sensitivity (averages at each run's selected checkpoint)", columns, rows,
                 "Table 6")


def table_runs(reports, columns, k, key: str) -> Table:
    """Tables 2 and 3: one row per run, labelled as the paper's row it reproduces."""
    rows, source = [], "Table 2" if key == "table2" else "Table 3"
    for rep in reports:
        if key == "table2":
            label = f"{rep.method} N={rep.group_size}"
        else:
            variant = rep.job.run.variant
            label = TABLE3_ROWS.get(variant) if variant else (f"F-GRPO (γ={rep.gamma:g})" if rep.gamma > 0 else
                                                               rep.method)
            label = label or f"{rep.method} ({variant})"
        paper = _paper_cells(source, rep.model, label, columns) if rep.model == paper_numbers.TABLE_2_3_MODEL else {}
        rows.append((label, _cells(rep, columns, k), paper, {}))
    notes = ["ΔNLL_rare (Table 2's last column): `fgrpo-verl rare-nll` on the selected checkpoints (paper: "
             f"{paper_numbers.delta_nll_rare()})"] if key == "table2" else []
    title = {"table2": "Table 2: group size N (GRPO) against F-GRPO at N = 8",
             "table3": "Table 3: regularisation and update-scale controls against F-GRPO"}[key]
    return Table(key, title, columns, rows, source, notes)


def curves(pairs, plan, out_dir: Path) -> str:
    """Tables 12-14: each Table 1 pair's pass@k per benchmark, ours with the paper's beside it (markdown; a plot per
    benchmark under curves/, the paper's curves dashed)."""
    lines = ["### Tables 12-14: pass@k of the Table 1 checkpoints (cells: baseline/focal, %)", ""]
    benches = list(plan.passes.final.benchmarks)
    for base, focal in pairs:
        ks = sorted({int(k) for b in benches for k in (base.final or {}).get("pass_at_k", {}).get(b, {})})
        if not ks or focal.final is None:
            continue
        runs = [base.method, focal.method]
        rows = [{"run": rep.method, "benchmark": b, "k": k, "pass_at_k": math.nan if v is None else v / 100}
                for rep in (base, focal) for b in benches for k in ks for v in [ours(rep, b, k)]]
        paper = {(method, bench): values for (_t, model, method, bench), values in paper_numbers.curves().items()
                 if model == base.model and bench in benches and method in runs}
        marks = {(focal.method, b, k): f" (paper {_pair(theirs[k], paper.get((focal.method, b), {}).get(k))})"
                 for b in benches for theirs in [paper.get((base.method, b), {})] for k in ks if k in theirs}
        lines += [f"**{base.model}: {base.method} / {focal.method} (γ={focal.gamma:g})**", "",
                  markdown_table(rows, runs, benches, ks, marks)]
        plot_curves(out_dir / "curves" / f"{base.model}-{base.family}".replace("/", "_"), rows, runs, benches, ks,
                    reference=paper)
    return "\n".join(lines) + "\n"


def selection_table(reports: list[RunReport]) -> tuple[str, list[dict]]:
    n = reports[0].plan.passes.selection.n if reports else "?"
    lines = [f"### Checkpoint selection (selection pass, n={n}: average math pass@1; §5.3, Table 7)", "",
             "| run | γ | state | selected step | score | how |", "|---|---|---|---|---|---|"]
    rows = []
    for r in reports:
        c = r.selection.checkpoint if r.selection else None
        lines.append(f"| {r.name} | {r.gamma:g} | {r.state} | {c.step if c else '-'} | "
                     f"{'-' if c is None else f'{100 * c.score:.1f}'} | "
                     f"{r.selection.constraint if r.selection else ''} |")
        rows.append({"run": r.name, "experiment": r.job.job_name, "gamma": r.gamma, "state": r.state,
                     "selected_step": c.step if c else "", "score": c.score if c else "",
                     "how": r.selection.constraint if r.selection else ""})
    return "\n".join(lines) + "\n", rows
