"""``fgrpo-verl report RECIPE``: from a recipe's run directories to the paper's tables, with the paper's numbers
beside ours and what is missing listed.

Reads only files (no Slurm, no GPU, no model): every run of the recipe is planned as ``fgrpo-verl launch`` plans it
(same identity, so the same checkpoint directory), its checkpoints' results are read (checkpoints.py), the
protocol chooses checkpoints and γ (protocol.py, selection.py) and the tables are built from the final pass:

    table1   per model x base algorithm: the γ = 0 baseline and the focal run at the γ the protocol chose, at
             their selected checkpoints; pass@1/pass@K per benchmark and average (K = 256, or the largest power of
             two the final n allows), a ``*`` after a focal cell whose paired difference to its baseline is
             significant (App. Q: m-out-of-n subsampling, m = n/4 as the paper's 256 of 1024; significance.py)
    table6   per base algorithm x γ (0 included): the averages' pass@1/pass@K per model (γ sensitivity)
    table2   per run: GRPO at each group size N and F-GRPO (Table 2 rows: "GRPO N=8", "F-GRPO N=8")
    table3   per run: the controls (by their recipe ``variant``: low_lr, entropy, kl) and F-GRPO
    curves   Tables 12-14: pass@k for k = 1, 2, 4, ... of each table1 pair per benchmark, ours against the
             paper's, as a markdown table and one plot per benchmark

    table4   a recipe without an ``evaluation:`` block whose runs validate while training (maze): each run's
             verl validation at its last step (``val-core/<source>/pass@k``, read from the step lines in its Slurm
             logs), N x γ, beside the paper's Table 4 (validation_report)

Each table is written as markdown (ours and the paper's on two rows per method) and CSV (one row per cell and
metric: ours, paper, the paper's source table, significance). The paper's numbers, Table 4's included, come
from paper_numbers.py; a cell the paper does not have (another model, a benchmark it did not use) is "-". The
printed report (report.md) starts with the state of the sweep (runs started, finished, evaluated) and leaves out
a table with no number of ours (its file is still written, with the paper's). Everything that keeps a cell empty
is listed under "Missing": runs not started or not finished, checkpoints not evaluated, selections that cannot be
made yet, final passes not run. Nothing is dropped silently.
"""

from __future__ import annotations

import csv
import glob
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from fgrpo_verl.job import checkpoints as ck
from fgrpo_verl.evaluation import paper_numbers
from fgrpo_verl.evaluation.plan import BenchmarkFile, Plan
from fgrpo_verl.evaluation.protocol import choose, run_scores
from fgrpo_verl.evaluation.selection import RunSelection, select_gamma

TABLE3_ROWS = {"low_lr": "GRPO low-LR (6.8e-7)", "entropy": "GRPO-H (entropy 1e-3)", "kl": "GRPO-KL (1e-3)"}
SIGNIFICANCE_RATIO = 4  # m = n / 4: the paper's 256 of 1024 (App. Q)


@dataclass
class RunReport:
    """One recipe run as the report sees it."""

    name: str                 # recipe run name
    job: object               # its JobScript (planned identity)
    plan: Plan                # its evaluation plan (eval_jobs.plan_for_run)
    model: str                # the paper's table name of its base model (or the model path's last component)
    family: str               # grpo / dapo / cispo / ...
    gamma: float
    group_size: int
    state: str = ""           # not started | training | done
    selection: RunSelection | None = None
    final: dict | None = None  # the final pass's result at the selected checkpoint
    missing: list[str] = field(default_factory=list)

    @property
    def method(self) -> str:
        base = self.family.upper()
        return base if self.gamma == 0 else f"F-{base}"


def _model_name(path: str) -> str:
    from fgrpo_verl.evaluation.model_presets import known_model

    model = known_model(path)
    return model.table_name if model is not None else str(path).rstrip("/").rsplit("/", 1)[-1]


def collect_runs(jobs: list) -> list[RunReport]:
    """Each planned run's state, scores, selection and final result (protocol.py decides as the final job does)."""
    from fgrpo_verl.evaluation.checkpoint_eval import pass_label
    from fgrpo_verl.job.tracking import config_algo

    reports, scores = [], {}
    for job in jobs:
        plan = job.evaluation.jobs[0].plan
        config = job.config
        algo = config_algo(config)
        gamma = float(config.algorithm.fgrpo.gamma)
        rep = RunReport(job.run.name, job, plan, _model_name(str(config.actor_rollout_ref.model.path)),
                        algo[1:] if gamma > 0 and algo.startswith("f") else algo, gamma,
                        int(config.actor_rollout_ref.rollout.n))
        run_dir = Path(plan.run_dir)
        scores[job.job_name] = run_scores(rep.name, run_dir, plan.steps, pass_label(plan, "selection"),
                                          plan.select_by)
        s = scores[job.job_name]
        rep.state = "not started" if not run_dir.is_dir() or (s.step == 0 and not ck.saved_steps(run_dir)) else \
            ("done" if s.done else "training")
        reports.append(rep)
    for rep in reports:
        own = scores[rep.job.job_name]
        base_job = rep.job.baseline_job
        base = None
        if base_job is not None:
            base = scores.get(base_job.job_name)
            if base is None:  # the baseline is not part of this report's runs
                base = run_scores(base_job.run.name, base_job.checkpoint_dir,
                                  rep.plan.baseline.steps, pass_label(rep.plan, "selection"),
                                  rep.plan.select_by)
        rep.selection = choose(own, rep.gamma, base)
        if rep.state == "not started":
            rep.missing.append("not started")
        elif rep.state == "training":
            rep.missing.append(f"training not finished (step {own.step} of {own.total if own.total else '?'})")
        if own.unscored:
            rep.missing.append(f"selection pass: checkpoints {own.unscored} not evaluated")
        if rep.selection.checkpoint is None:
            if rep.state == "done":
                rep.missing.append(f"no checkpoint selected: {rep.selection.constraint}")
            continue
        step = rep.selection.checkpoint.step
        rep.final = ck.current_result(Path(rep.plan.run_dir), step, pass_label(rep.plan, "final"))
        if rep.final is None:
            rep.missing.append(f"final pass (n={rep.plan.passes.final.n}) of the selected checkpoint {step} "
                               "not evaluated")
    return reports


# ------------------------------------------------------------------------------------------------ cells
def report_k(reports: list[RunReport]) -> int:
    """K of pass@1/pass@K: 256 (the paper's), or the largest power of two every final pass's n allows."""
    ns = [r.plan.passes.final.n for r in reports]
    limit = min([256, *ns]) if ns else 256
    return 1 << int(math.floor(math.log2(limit)))


def columns_of(plan: Plan) -> list[str]:
    """Table columns in the paper's order: each average before its benchmarks, then the remaining benchmarks."""
    out: list[str] = []
    for avg, members in plan.averages.items():
        if set(members) <= set(plan.passes.final.benchmarks):
            out += [avg, *members]
    out += [b for b in plan.passes.final.benchmarks if b not in out]
    return out


def ours(rep: RunReport | None, column: str, k: int) -> float | None:
    """pass@k in % of a run's final result (None: none)."""
    if rep is None or rep.final is None:
        return None
    value = rep.final["pass_at_k"].get(column, {}).get(str(k))
    return None if value is None else 100.0 * float(value)


def _pair(a: float | None, b: float | None, mark: str = "") -> str:
    return ("-" if a is None else f"{a:.1f}") + "/" + ("-" if b is None else f"{b:.1f}") + mark


@dataclass
class Table:
    key: str
    title: str
    columns: list[str]
    rows: list[tuple[str, dict, dict, dict]]  # (row label, ours {col: (p1, pK)}, paper {col: (p1, p256)}, marks)
    source: str                              # the paper table our rows are compared with
    notes: list[str] = field(default_factory=list)

    def has_ours(self) -> bool:
        """Whether a cell of ours has a number."""
        return any(v is not None for _, mine, _, _ in self.rows for pair in mine.values() for v in pair)

    def markdown(self, k: int) -> str:
        lines = [f"### {self.title}", "", f"pass@1/pass@{k} (%); paper: pass@1/pass@256 from the paper's {self.source}",
                 "", "| row | | " + " | ".join(self.columns) + " |", "|---" * (len(self.columns) + 2) + "|"]
        for label, mine, paper, marks in self.rows:
            lines.append(f"| {label} | ours | " + " | ".join(
                _pair(*mine.get(c, (None, None)), marks.get(c, "")) for c in self.columns) + " |")
            lines.append("| | paper | " + " | ".join(_pair(*paper.get(c, (None, None))) for c in self.columns) + " |")
        if self.notes:
            lines += [""] + [f"- {n}" for n in self.notes]
        return "\n".join(lines) + "\n"

    def csv_rows(self, k: int) -> list[dict]:
        out = []
        for label, mine, paper, marks in self.rows:
            for col in self.columns:
                for i, metric in enumerate(("pass@1", f"pass@{k}")):
                    value = mine.get(col, (None, None))[i]
                    ref = paper.get(col, (None, None))[i]
                    out.append({"table": self.key, "row": label, "column": col, "metric": metric,
                                "ours": "" if value is None else f"{value:.4f}",
                                "paper": "" if ref is None else ref, "paper_metric": ("pass@1", "pass@256")[i],
                                "paper_source": self.source if ref is not None else "",
                                "significant": "yes" if i == 0 and marks.get(col) == "*" else ""})
        return out


def _cells(rep: RunReport | None, columns: list[str], k: int) -> dict:
    return {c: (ours(rep, c, 1), ours(rep, c, k)) for c in columns}


def _paper_cells(table: str, model: str, method: str, columns: list[str]) -> dict:
    cells = paper_numbers.cells()
    return {c: cells[(table, model, method, c)] for c in columns if (table, model, method, c) in cells}


# ------------------------------------------------------------------------------------------------ significance
def _counts(result: dict, benches: dict[str, BenchmarkFile], threshold: float) -> tuple[dict, list[str]]:
    """``({benchmark: BenchmarkScores}, skipped)`` of a final result's generation files. A line the evaluation scored
    keeps its verdict; a line it left unscored is scored with its own benchmark's scorer (the plan's ``benches``,
    which the evaluation used: ``boxed`` for GPQA, ``ifeval`` for IFEval, ...), never another benchmark's. A benchmark
    whose scorer cannot score here (SynLogic's ``FGRPO_SYNLOGIC_SCORER`` not set, a missing dependency, no answers)
    is left out of the test, whole, with one line in ``skipped`` naming it and why; ``threshold``: the plan's."""
    import numpy as np

    from fgrpo_verl.evaluation.formats import load_benchmark
    from fgrpo_verl.evaluation.report import collect_scores
    from fgrpo_verl.evaluation.scorers import resolve_scorer
    from fgrpo_verl.evaluation.scoring import Scorer, count_correct

    paths = [Path(p) for p in result.get("generations", [])]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing or not paths:
        raise ValueError(f"generation files {missing or '(none recorded)'} not found")
    references: dict[str, dict] = {}
    skipped: dict[str, str] = {}
    resolved: set[str] = set()

    def unavailable(bench: str, needs_reference: bool) -> str | None:
        """Why ``bench``'s unscored lines cannot be scored here, or None."""
        if bench not in benches:
            return "not a benchmark of the recipe's evaluation, so its scorer is unknown"
        spec = benches[bench].scorer
        if bench not in resolved:
            unset = re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)", spec)
            if unset:
                return f"its scorer {spec} is not set here: export {unset[0]}=module:function"
            try:
                resolve_scorer(spec)
            except ValueError as exc:
                return str(exc)
            resolved.add(bench)
        if needs_reference and bench not in references:
            file = Path(benches[bench].file)
            if not file.is_file():
                return f"its lines carry no answer and its benchmark file {file} is not here"
            references[bench] = {r["id"]: r for r in load_benchmark(file, bench)}
        return None

    class OwnScorer(Scorer):
        def score(self, records):
            keep = []
            for rec in records:
                reason = skipped.get(rec.benchmark) or unavailable(rec.benchmark, rec.answer is None)
                if reason is None:
                    keep.append(rec)
                    continue
                skipped[rec.benchmark] = reason
                rec.correct = np.zeros(0, dtype=np.int8)  # counted, then the whole benchmark is dropped
            super().score(keep)
            for rec in keep:  # a scorer that raises (a missing dependency) would count every sample as wrong
                if rec.score_errors and rec.benchmark not in skipped:
                    skipped[rec.benchmark] = (f"its scorer {benches[rec.benchmark].scorer} failed on "
                                              f"{len(rec.score_errors)} samples of problem {rec.problem_id}, e.g. "
                                              f"{next(iter(rec.score_errors.values()))}")

    with OwnScorer(lambda b: benches[b].scorer, threshold, references) as scorer:
        scores = collect_scores(count_correct(paths, scorer))
    counts = {bench: s for (_run, bench), s in scores.items() if bench not in skipped}
    return counts, [f"{bench}: {why}" for bench, why in skipped.items()]


def pair_significance(base: RunReport, focal: RunReport, plan: Plan, k: int, iterations: int, method: str,
                      seed: int) -> tuple[dict, list[dict], list[str]]:
    """``({column: "*"}, rows, left out)``: the paired subsampling test of focal - baseline at k = 1 (and K when
    K <= m), and a line per benchmark left out of it (_counts: its unscored lines could not be scored here)."""
    from fgrpo_verl.evaluation.seeds import request_seed
    from fgrpo_verl.evaluation.significance import combine_draws, subsample_draws, summarise

    (a, skip_a), (b, skip_b) = (_counts(r.final, plan.benchmarks, plan.sampling.threshold) for r in (base, focal))
    left_out = list(dict.fromkeys(skip_a + skip_b))
    if not set(a) & set(b):
        raise ValueError("no benchmark scored for both runs: " + ("; ".join(left_out) or "no common benchmark"))
    n = min(int(s.n.min()) for s in [*a.values(), *b.values()])
    m = n // SIGNIFICANCE_RATIO
    if m < 1:
        raise ValueError(f"n = {n} samples per problem is too few for m-out-of-n subsampling (m = n / 4)")
    ks = [x for x in (1, k) if x <= m]
    draws = {}
    for bench in a:
        if bench in b:
            draws[bench] = subsample_draws(a[bench].n, a[bench].c, b[bench].n, b[bench].c, ks=sorted(set(ks)), m=m,
                                           iterations=iterations,
                                           seed=request_seed(seed, f"report {base.name}:{focal.name}", bench, "", 0))
    for avg, members in plan.averages.items():
        if all(mb in draws for mb in members):
            draws[avg] = combine_draws([draws[mb] for mb in members])
    marks, rows = {}, []
    for column, d in draws.items():
        for r in summarise(d, method=method):
            rows.append({"baseline": base.name, "focal": focal.name, "column": column, "k": r.k, "m": m,
                         "iterations": iterations, "method": method, "difference": r.difference,
                         "ci_low": r.ci_low, "ci_high": r.ci_high, "p_value": r.p_value,
                         "significant": r.significant})
            if r.k == 1 and r.significant:
                marks[column] = "*"
    return marks, rows, left_out


# ------------------------------------------------------------------------------------------------ tables
def baseline_groups(reports: list[RunReport]) -> list[tuple[RunReport, dict[float, RunReport]]]:
    """(baseline, {γ: focal run}) for every γ = 0 run, in recipe order."""
    groups = []
    for rep in reports:
        if rep.gamma != 0:
            continue
        focal = {r.gamma: r for r in reports if r.job.baseline_job is not None
                 and r.job.baseline_job.job_name == rep.job.job_name}
        groups.append((rep, focal))
    return groups


def table1(reports, columns, k, significance, notes) -> tuple[Table, list[tuple[RunReport, RunReport]], list[dict]]:
    rows, pairs, sig_rows = [], [], []
    for base, focal in baseline_groups(reports):
        if not focal:
            continue
        gamma = select_gamma({g: r.selection for g, r in focal.items()})
        rows.append((f"{base.model} {base.method}", _cells(base, columns, k),
                     _paper_cells("Table 1", base.model, base.method, columns), {}))
        if gamma is None:
            waiting = [f"γ={g:g}" for g, r in sorted(focal.items()) if r.selection.checkpoint is None]
            notes.append(f"{base.model} F-{base.family.upper()}: γ not chosen yet ({', '.join(waiting)} without a "
                         "selected checkpoint)")
            rows.append((f"{base.model} F-{base.family.upper()} (γ not chosen)", {}, _paper_cells(
                "Table 1", base.model, f"F-{base.family.upper()}", columns), {}))
            continue
        chosen = focal[gamma]
        marks = {}
        if significance is not None and base.final is not None and chosen.final is not None:
            try:
                marks, part, left_out = pair_significance(base, chosen, base.plan, k, *significance)
                sig_rows += part
                notes += [f"{chosen.name}: no significance test on {line}" for line in left_out]
            except ValueError as exc:
                notes.append(f"{chosen.name}: no significance test ({exc})")
        paper_gamma = paper_numbers.selected_gammas().get((base.model, base.family.upper()))
        label = f"{base.model} {chosen.method} (γ={gamma:g}" + (
            f"; paper chose {paper_gamma:g})" if paper_gamma is not None else ")")
        rows.append((label, _cells(chosen, columns, k), _paper_cells("Table 1", base.model, chosen.method, columns),
                     marks))
        pairs.append((base, chosen))
    table = Table("table1", "Table 1: baseline and focal method at the selected checkpoint and γ", columns, rows,
                  "Table 1", notes)
    return table, pairs, sig_rows


def table6(reports, plan, k) -> Table:
    models = list(dict.fromkeys(r.model for r in reports))
    averages = [a for a in plan.averages if a in columns_of(plan)] or [plan.select_by]
    columns = [f"{m} {a}" for m in models for a in averages]
    rows = []
    families = list(dict.fromkeys(r.family for r in reports))
    gammas = sorted({r.gamma for r in reports})
    for fam in families:
        for g in gammas:
            runs = {r.model: r for r in reports if r.family == fam and r.gamma == g}
            if not runs:
                continue
            mine, paper = {}, {}
            for m in models:
                for a in averages:
                    col = f"{m} {a}"
                    mine[col] = (ours(runs.get(m), a, 1), ours(runs.get(m), a, k))
                    ref = paper_numbers.cells().get(("Table 6", m, f"{fam.upper()} γ={g:g}", a))
                    if ref is not None:
                        paper[col] = ref
            rows.append((f"{fam.upper()} γ={g:g}", mine, paper, {}))
    return Table("table6", "Table 6: γ sensitivity (averages at each run's selected checkpoint)", columns, rows,
                 "Table 6")


def table_runs(reports, columns, k, key: str) -> Table:
    """Tables 2 and 3: one row per run, labelled as the paper's row it reproduces."""
    rows = []
    for rep in reports:
        if key == "table2":
            label = f"{rep.method} N={rep.group_size}"
        else:
            variant = rep.job.run.variant
            label = TABLE3_ROWS.get(variant) if variant else (f"F-GRPO (γ={rep.gamma:g})" if rep.gamma > 0 else
                                                               rep.method)
            label = label or f"{rep.method} ({variant})"
        source = "Table 2" if key == "table2" else "Table 3"
        paper = _paper_cells(source, rep.model, label, columns) if rep.model == paper_numbers.TABLE_2_3_MODEL else {}
        rows.append((label, _cells(rep, columns, k), paper, {}))
    notes = ["DS-GRPO (Table 3) is not in the recipe: the paper does not give its settings"] if key == "table3" else []
    if key == "table2":
        notes.append("ΔNLL_rare (Table 2's last column): `fgrpo-verl rare-nll` on the selected checkpoints "
                     f"(paper: {paper_numbers.delta_nll_rare()})")
    title = {"table2": "Table 2: group size N (GRPO) against F-GRPO at N = 8",
             "table3": "Table 3: regularisation and update-scale controls against F-GRPO"}[key]
    return Table(key, title, columns, rows, "Table 2" if key == "table2" else "Table 3", notes)


def curves(pairs, plan, out_dir: Path) -> str:
    """Tables 12-14: ours against the paper's, per pair and benchmark (markdown; plots under curves/)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines = ["### Tables 12-14: pass@k of the Table 1 checkpoints (cells: baseline/focal, %)", ""]
    benches = plan.passes.final.benchmarks
    for base, focal in pairs:
        if base.final is None or focal.final is None:
            continue
        ks = sorted({int(k) for b in benches for k in base.final["pass_at_k"].get(b, {})})
        lines += [f"**{base.model}: {base.method} / {focal.method} (γ={focal.gamma:g})**", "",
                  "| k | " + " | ".join(benches) + " |", "|---" * (len(benches) + 1) + "|"]
        found = {}
        for (table, model, method, bench), values in paper_numbers.curves().items():
            if model == base.model and bench in benches and method in (base.method, focal.method):
                found[(method, bench)] = (table, values)
        for k in ks:
            cells = []
            for b in benches:
                cell = _pair(ours(base, b, k), ours(focal, b, k))
                if (base.method, b) in found and k in found[(base.method, b)][1]:
                    ref_b = found[(base.method, b)][1][k]
                    ref_f = found.get((focal.method, b), (None, {}))[1].get(k)
                    cell += f" (paper {_pair(ref_b, ref_f)})"
                cells.append(cell)
            lines.append(f"| {k} | " + " | ".join(cells) + " |")
        lines.append("")
        folder = out_dir / "curves" / f"{base.model}-{base.family}".replace("/", "_")
        folder.mkdir(parents=True, exist_ok=True)
        for b in benches:
            fig, ax = plt.subplots(figsize=(4.5, 3.5))
            for rep, style in ((base, "C0"), (focal, "C1")):
                ys = [ours(rep, b, k) for k in ks]
                ax.plot(ks, [math.nan if y is None else y for y in ys], color=style, marker="o", markersize=3,
                        label=f"{rep.method} (ours)")
                ref = found.get((rep.method, b))
                if ref is not None:
                    rk = sorted(ref[1])
                    ax.plot(rk, [ref[1][x] for x in rk], color=style, linestyle="--", label=f"{rep.method} (paper)")
            ax.set_xscale("log", base=2)
            ax.set_xlabel("k")
            ax.set_ylabel("pass@k (%)")
            ax.set_title(f"{base.model} {b}")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
            fig.tight_layout()
            fig.savefig(folder / f"pass_at_k_{b}.png", dpi=110)
            plt.close(fig)
    return "\n".join(lines) + "\n"


def selection_table(reports: list[RunReport]) -> tuple[str, list[dict]]:
    lines = ["### Checkpoint selection (selection pass: average math pass@1; §5.3, Table 7)", "",
             "| run | γ | state | selected step | score | how |", "|---|---|---|---|---|---|"]
    rows = []
    for r in reports:
        c = r.selection.checkpoint if r.selection else None
        lines.append(f"| {r.name} | {r.gamma:g} | {r.state} | {c.step if c else '-'} | "
                     f"{'-' if c is None else f'{100 * c.score:.1f}'} | {r.selection.constraint if r.selection else ''} |")
        rows.append({"run": r.name, "experiment": r.job.job_name, "gamma": r.gamma, "state": r.state,
                     "selected_step": c.step if c else "", "score": c.score if c else "",
                     "how": r.selection.constraint if r.selection else ""})
    return "\n".join(lines) + "\n", rows


def _write_csv(path: Path, rows: list[dict]) -> None:
    if not rows:
        path.write_text("", encoding="utf-8")
        return
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def build_report(recipe_arg: str, workdir: Path, out_dir: Path, significance: tuple | None,
                 log_dir: Path | None = None) -> str:
    """Write the report's files into ``out_dir``; returns its markdown. ``significance``: (iterations, method,
    seed), or None to skip the test. ``log_dir``: the runs' Slurm logs (launch's ``--log-dir``; default
    ``slurm_logs``), read for recipes without an evaluation block (validation_report). The text starts with the
    state of the sweep; a table without a number of ours is written to its file but not printed."""
    from fgrpo_verl.launch import plan_jobs

    log_dir = Path(workdir) / "slurm_logs" if log_dir is None else Path(log_dir)
    # only files are read: verl's checks of the configs (a launch's) name no run differently, and cost verl's import
    recipe, jobs = plan_jobs(recipe_arg, None, [], log_dir, Path(workdir), check=False)
    if recipe.evaluation is None:
        return validation_report(recipe, jobs, log_dir, out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    reports = collect_runs(jobs)
    plan = reports[0].plan
    columns = columns_of(plan)
    k = report_k(reports)
    tables = recipe.evaluation.get("tables") or ["table1"]
    started = [r for r in reports if r.state != "not started"]
    parts = [f"# {recipe.name}: {recipe.reproduces}", "",
             f"{len(started)} of {len(reports)} runs started, {sum(r.state == 'done' for r in reports)} finished, "
             f"{sum(r.final is not None for r in reports)} evaluated (final pass at the selected checkpoint)", "",
             f"evaluation: protocol {plan.protocol}, selection n={plan.passes.selection.n}, final n="
             f"{plan.passes.final.n}", ""]
    _write_csv(out_dir / "selection.csv", selection_table(reports)[1])
    if started:  # the runs not started are one line under Missing
        parts.append(selection_table(started)[0])
    pairs, sig_rows, empty = [], [], []
    for key in tables:
        if key == "curves":
            continue
        if key == "table1":
            table, pairs, sig_rows = table1(reports, columns, k, significance, [])
        elif key == "table6":
            table = table6(reports, plan, k)
        else:
            table = table_runs(reports, columns, k, key)
        md = table.markdown(k)
        (out_dir / f"{key}.md").write_text(md, encoding="utf-8")
        _write_csv(out_dir / f"{key}.csv", table.csv_rows(k))
        if table.has_ours():
            parts.append(md)
        else:
            empty.append(key)
    if sig_rows:
        _write_csv(out_dir / "significance.csv", sig_rows)
        parts.append(f"`*`: the focal cell's paired difference to its baseline at pass@1 is significant (two-sided "
                     f"α = 0.05, {sig_rows[0]['method']} interval, m = {sig_rows[0]['m']}, "
                     f"{sig_rows[0]['iterations']} iterations); all k in significance.csv\n")
    if "curves" in tables:
        md = curves(pairs, plan, out_dir)
        (out_dir / "tables12_14.md").write_text(md, encoding="utf-8")
        if any(base.final is not None and focal.final is not None for base, focal in pairs):
            parts.append(md)
        else:
            empty.append("tables12_14")
    return _finish(parts, empty, reports, out_dir)


# ------------------------------------------------------------------------------------------------ validation (Table 4)
# (the paper's Table 4 is paper_numbers.TABLE_4; its cells are of this data source only)
TABLE_4_SOURCE = "maze"  # the data_source of the maze's held-out set (fgrpo_verl/tasks/maze/data.py)
_VAL_KEY = re.compile(r"^val-core/(.+)/pass@(\d+)$")
_TAIL_START = 1 << 20  # a log is searched from its end: the last validation is near it


def last_validation(log_dir: Path, job_name: str) -> tuple[int, dict[str, dict[int, float]]] | None:
    """``(step, {source: {k: pass@k}})`` of the latest step whose verl console line (in the run's Slurm logs,
    ``<log_dir>/<job name>-<job id>.out``) carries ``val-core/<source>/pass@<k>``; None when none does."""
    from fgrpo_verl.monitoring.console import step_fields

    best = None
    for path in Path(log_dir).glob(f"{glob.escape(job_name)}-*.out"):
        size = path.stat().st_size
        window = _TAIL_START
        while True:
            with open(path, "rb") as f:
                f.seek(max(0, size - window))
                lines = f.read().splitlines()
            if size > window:
                lines = lines[1:]  # cut mid-line
            found = None
            for raw in reversed(lines):
                if b"val-core/" not in raw:
                    continue
                fields = step_fields(raw.decode(errors="replace"))
                values: dict[str, dict[int, float]] = {}
                for key, value in (fields or {}).items():
                    match = _VAL_KEY.match(key.strip())
                    if match:
                        try:
                            values.setdefault(match.group(1), {})[int(match.group(2))] = float(value)
                        except ValueError:
                            continue
                if values:
                    found = (int(float(fields["step"])), values)
                    break
            if found is not None or window >= size:
                break
            window *= 4
        if found is not None and (best is None or found[0] > best[0]):
            best = found
    return best


@dataclass
class ValidationRun:
    name: str
    job: object
    family: str
    gamma: float
    group_size: int
    total: int | None
    state: str
    step: int | None                          # the step of the last validation found
    values: dict[str, dict[int, float]]       # its pass@k per source (fraction)
    missing: list[str] = field(default_factory=list)

    @property
    def final(self) -> bool:
        return self.step is not None and self.total is not None and self.step >= self.total


def collect_validation(jobs: list, log_dir: Path) -> list[ValidationRun]:
    """Each planned run's state (checkpoint dir) and its last validation (Slurm logs)."""
    from fgrpo_verl.job.tracking import config_algo

    out = []
    for job in jobs:
        config = job.config
        gamma = float(config.algorithm.fgrpo.gamma)
        algo = config_algo(config)
        planned = config.trainer.get("total_training_steps")
        total = int(planned) if planned is not None else job.total_steps
        run_dir = Path(job.checkpoint_dir)
        found = last_validation(log_dir, job.job_name)
        step, values = found if found is not None else (None, {})
        if ck.training_done(run_dir, total):
            state = "done"
        elif ck.tracker_step(run_dir) > 0 or ck.saved_steps(run_dir) or found is not None:
            state = "training"
        else:
            state = "not started"
        run = ValidationRun(job.run.name, job, algo[1:] if gamma > 0 and algo.startswith("f") else algo, gamma,
                            int(config.actor_rollout_ref.rollout.n), total, state, step, values)
        where = f"{log_dir}/{job.job_name}-*.out"
        if state == "not started":
            run.missing.append("not started")
        elif state == "training":
            run.missing.append(f"training not finished (step {ck.tracker_step(run_dir)} of {total or '?'})")
        if state != "not started" and not run.final:
            run.missing.append(f"no validation at the last step ({total}) in {where}"
                               + (f": the last one is at step {step}" if step is not None else
                                  ": no verl step line with val-core/<source>/pass@<k> there"))
        out.append(run)
    return out


def validation_report(recipe, jobs: list, log_dir: Path, out_dir: Path) -> str:
    """A recipe without an ``evaluation:`` block whose runs validate while training (maze: Table 4): each run's
    pass@k at its last step, from verl's validation metrics in its Slurm logs, beside the paper's Table 4."""
    tested = sorted({int(j.config.trainer.test_freq) for j in jobs})
    if not jobs or all(t <= 0 for t in tested):
        raise ValueError(f"recipe {recipe.name}: no evaluation block and its runs do not validate while training "
                         f"(trainer.test_freq={tested[0] if tested else '?'}), so they write no pass@k to report; "
                         "add an evaluation block (docs/recipes.md, 'evaluation')")
    runs = collect_validation(jobs, log_dir)
    total = sorted({r.total for r in runs if r.total})
    started = sum(r.state != "not started" for r in runs)
    finished = sum(r.state == "done" for r in runs)
    validated = sum(r.final for r in runs)
    val_n = sorted({int(j.config.actor_rollout_ref.rollout.val_kwargs.n) for j in jobs})
    parts = [f"# {recipe.name}: {recipe.reproduces}", "",
             f"{started} of {len(runs)} runs started, {finished} finished, {validated} validated at their last step "
             f"({'/'.join(map(str, total)) or '?'})", "",
             f"ours: verl's validation at each run's last step (val-core/<source>/pass@k, n={'/'.join(map(str, val_n))} "
             f"samples per prompt), read from the runs' Slurm logs {log_dir}/<job name>-<job id>.out", ""]
    out_dir.mkdir(parents=True, exist_ok=True)
    sources = list(dict.fromkeys(s for r in runs if r.final for s in r.values)) or [TABLE_4_SOURCE]
    ks = [k for k in paper_numbers.TABLE_4_KS if k <= min(val_n)] or [1]
    gammas = sorted({r.gamma for r in runs})
    sizes = sorted({r.group_size for r in runs})
    paper = paper_numbers.table_4()
    csv_rows, empty = [], []
    for source in sources:
        key = "table4" if len(sources) == 1 else f"table4_{source}"
        labels = {g: ("GRPO" if g == 0 else f"γ={g:g}") for g in gammas}
        columns = [(k, g) for k in ks for g in gammas]
        lines = [f"### Table 4: pass@k (%) at the last step, data source {source}", "",
                 "| N | | " + " | ".join(f"p@{k} {labels[g]}" for k, g in columns) + " |",
                 "|---" * (len(columns) + 2) + "|"]
        has_ours = False
        for size in sizes:
            mine, ref = [], []
            for k, g in columns:
                run = next((r for r in runs if r.group_size == size and r.gamma == g), None)
                value = run.values.get(source, {}).get(k) if run is not None and run.final else None
                has_ours = has_ours or value is not None
                theirs = paper.get((size, k, g)) if source == TABLE_4_SOURCE else None
                mine.append("-" if value is None else f"{100 * value:.1f}")
                ref.append("-" if theirs is None else f"{theirs:.1f}")
                csv_rows.append({"table": key, "N": size, "gamma": g, "metric": f"pass@{k}",
                                 "ours": "" if value is None else f"{100 * value:.4f}",
                                 "paper": "" if theirs is None else theirs,
                                 "step": "" if run is None or run.step is None else run.step,
                                 "run": "" if run is None else run.name})
            lines.append(f"| {size} | ours | " + " | ".join(mine) + " |")
            lines.append("| | paper | " + " | ".join(ref) + " |")
        md = "\n".join(lines) + "\n"
        (out_dir / f"{key}.md").write_text(md, encoding="utf-8")
        if has_ours:
            parts.append(md)
        else:
            empty.append(key)
    _write_csv(out_dir / "table4.csv", csv_rows)
    return _finish(parts, empty, runs, out_dir)


def _finish(parts: list[str], empty: list[str], runs, out_dir: Path) -> str:
    """The report's text, written to report.md: ``parts``, one line naming the tables left out (no number of ours
    yet; their files hold the paper's), then what is missing."""
    if empty:
        parts.append(f"no numbers of ours yet: {', '.join(empty)} not printed (the paper's numbers are in "
                     f"{out_dir}/<table>.md)\n")
    parts.append(_missing_section(runs, out_dir))
    text = "\n".join(parts)
    (out_dir / "report.md").write_text(text, encoding="utf-8")
    return text


def _missing_section(runs, out_dir: Path) -> str:
    """``missing.md`` (every run and what keeps its cells empty, a line each) and its printed form, in which the runs
    not started are one line."""
    every = [f"- {r.name} ({r.job.job_name}): {m}" for r in runs for m in r.missing]
    (out_dir / "missing.md").write_text(
        "### Missing\n\n" + ("\n".join(every) if every else "nothing: every run is finished and evaluated") + "\n",
        encoding="utf-8")
    idle = [r.name for r in runs if r.missing == ["not started"]]
    shown = [f"- {r.name} ({r.job.job_name}): {m}" for r in runs if r.name not in idle for m in r.missing]
    if idle:
        shown.insert(0, f"- not started: {len(idle)} run(s), " + (", ".join(idle) if len(idle) <= 6 else
                                                                    f"{', '.join(idle[:6])}, ... (missing.md)"))
    return "### Missing\n\n" + ("\n".join(shown) if shown else "nothing: every run is finished and evaluated") + "\n"
