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

Each table is written as markdown (ours and the paper's on two rows per method) and CSV (one row per cell and
metric: ours, paper, the paper's source table, significance). The paper's numbers come from paper_numbers.py;
a cell the paper does not have (another model, a benchmark it did not use) is "-". Everything that keeps a cell
empty is listed under "Missing": runs not started or not finished, checkpoints not evaluated, selections that
cannot be made yet, final passes not run. Nothing is dropped silently.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path

from fgrpo_verl.job import checkpoints as ck
from fgrpo_verl.evaluation import paper_numbers
from fgrpo_verl.evaluation.protocol import choose, run_scores
from fgrpo_verl.evaluation.selection import RunSelection, select_gamma

TABLE3_ROWS = {"low_lr": "GRPO low-LR (6.8e-7)", "entropy": "GRPO-H (entropy 1e-3)", "kl": "GRPO-KL (1e-3)"}
SIGNIFICANCE_RATIO = 4  # m = n / 4: the paper's 256 of 1024 (App. Q)


@dataclass
class RunReport:
    """One recipe run as the report sees it."""

    name: str                 # recipe run name
    job: object               # its JobScript (planned identity)
    plan: dict                # its evaluation plan (eval_jobs.plan_for_run)
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
    from fgrpo_verl.evaluation.checkpoint_eval import pass_label, run_steps
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
        run_dir = Path(plan["run_dir"])
        scores[job.job_name] = run_scores(rep.name, run_dir, run_steps(plan["steps"]), pass_label(plan, "selection"),
                                          plan["select_by"])
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
                                  run_steps(rep.plan["baseline"]["steps"]), pass_label(rep.plan, "selection"),
                                  rep.plan["select_by"])
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
        rep.final = ck.current_result(Path(rep.plan["run_dir"]), step, pass_label(rep.plan, "final"))
        if rep.final is None:
            rep.missing.append(f"final pass (n={rep.plan['passes']['final']['n']}) of the selected checkpoint {step} "
                               "not evaluated")
    return reports


# ------------------------------------------------------------------------------------------------ cells
def report_k(reports: list[RunReport]) -> int:
    """K of pass@1/pass@K: 256 (the paper's), or the largest power of two every final pass's n allows."""
    ns = [int(r.plan["passes"]["final"]["n"]) for r in reports]
    limit = min([256, *ns]) if ns else 256
    return 1 << int(math.floor(math.log2(limit)))


def columns_of(plan: dict) -> list[str]:
    """Table columns in the paper's order: each average before its benchmarks, then the remaining benchmarks."""
    out: list[str] = []
    for avg, members in plan["averages"].items():
        if set(members) <= set(plan["passes"]["final"]["benchmarks"]):
            out += [avg, *members]
    out += [b for b in plan["passes"]["final"]["benchmarks"] if b not in out]
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
def _counts(result: dict):
    from fgrpo_verl.evaluation.report import collect_scores
    from fgrpo_verl.evaluation.scoring import Scorer, count_correct

    paths = [Path(p) for p in result.get("generations", [])]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing or not paths:
        raise ValueError(f"generation files {missing or '(none recorded)'} not found")
    with Scorer(lambda _b: "math", 1.0, {}) as scorer:
        scores = collect_scores(count_correct(paths, scorer))
    return {bench: s for (_run, bench), s in scores.items()}


def pair_significance(base: RunReport, focal: RunReport, plan: dict, k: int, iterations: int, method: str,
                      seed: int) -> tuple[dict, list[dict]]:
    """``({column: "*"}, rows)``: the paired subsampling test of focal - baseline at k = 1 (and K when K <= m)."""
    from fgrpo_verl.evaluation.seeds import request_seed
    from fgrpo_verl.evaluation.significance import combine_draws, subsample_draws, summarise

    a, b = _counts(base.final), _counts(focal.final)
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
    for avg, members in plan["averages"].items():
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
    return marks, rows


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
                marks, part = pair_significance(base, chosen, base.plan, k, *significance)
                sig_rows += part
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
    averages = [a for a in plan["averages"] if a in columns_of(plan)] or [plan["select_by"]]
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
    benches = plan["passes"]["final"]["benchmarks"]
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


def build_report(recipe_arg: str, workdir: Path, out_dir: Path, significance: tuple | None) -> str:
    """Write the report's files into ``out_dir``; returns its markdown. ``significance``: (iterations, method,
    seed), or None to skip the test."""
    from fgrpo_verl.launch import plan_jobs

    recipe, jobs = plan_jobs(recipe_arg, None, [], Path(workdir) / "slurm_logs", Path(workdir))
    if recipe.evaluation is None:
        raise ValueError(f"recipe {recipe.name} has no evaluation block: nothing to report "
                         "(docs/recipes.md, 'evaluation')")
    out_dir.mkdir(parents=True, exist_ok=True)
    reports = collect_runs(jobs)
    plan = reports[0].plan
    columns = columns_of(plan)
    k = report_k(reports)
    tables = recipe.evaluation.get("tables") or ["table1"]
    parts = [f"# {recipe.name}: {recipe.reproduces}", "",
             f"{len(reports)} runs; evaluation: protocol {plan['protocol']}, selection n="
             f"{plan['passes']['selection']['n']}, final n={plan['passes']['final']['n']}", ""]
    selection_md, selection_rows = selection_table(reports)
    parts.append(selection_md)
    _write_csv(out_dir / "selection.csv", selection_rows)
    pairs, sig_rows = [], []
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
        parts.append(md)
    if sig_rows:
        _write_csv(out_dir / "significance.csv", sig_rows)
        parts.append(f"`*`: the focal cell's paired difference to its baseline at pass@1 is significant (two-sided "
                     f"α = 0.05, {sig_rows[0]['method']} interval, m = {sig_rows[0]['m']}, "
                     f"{sig_rows[0]['iterations']} iterations); all k in significance.csv\n")
    if "curves" in tables:
        md = curves(pairs, plan, out_dir)
        (out_dir / "tables12_14.md").write_text(md, encoding="utf-8")
        parts.append(md)
    missing = [f"- {r.name} ({r.job.job_name}): {m}" for r in reports for m in r.missing]
    missing_md = "### Missing\n\n" + ("\n".join(missing) if missing else "nothing: every run is finished and evaluated")
    parts.append(missing_md + "\n")
    (out_dir / "missing.md").write_text(missing_md + "\n", encoding="utf-8")
    text = "\n".join(parts)
    (out_dir / "report.md").write_text(text, encoding="utf-8")
    return text
