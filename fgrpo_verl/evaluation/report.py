"""pass@k tables in the paper's Tables 12-14 layout (markdown + CSV) and pass@k-curve plots.

Layout (paper App. A): one row per k = 1, 2, 4, ..., 256, one column per benchmark, each cell the runs' pass@k in
percent joined by "/" in run order (two runs: "baseline/focal", e.g. ``15.0/15.9``). A cell shows "-" for a run
whose smallest per-problem n is below k (pass@k is unbiased only for k <= n). Optional average columns
(``--average "Math Avg=AIME24,AIME25,..."``) average the benchmark means, as the paper's Math/OOD Avg.
"""

from __future__ import annotations

import csv
import math
import re
from pathlib import Path

import numpy as np

from fgrpo_verl.evaluation.formats import load_benchmark
from fgrpo_verl.evaluation.plan import BenchmarkFile
from fgrpo_verl.evaluation.scorers import resolve_scorer
from fgrpo_verl.evaluation.scoring import Scorer, count_correct
from fgrpo_verl.theory.plots import pyplot, save


def scored_counts(result: dict, benches: dict[str, BenchmarkFile], threshold: float) -> tuple[dict, list[str]]:
    """``({benchmark: BenchmarkScores}, skipped)`` of a final result's generation files. A line the evaluation scored
    keeps its verdict; a line it left unscored is scored with its own benchmark's scorer (the plan's ``benches``,
    which the evaluation used: ``boxed`` for GPQA, ``ifeval`` for IFEval, ...), never another benchmark's. A benchmark
    whose scorer cannot score here (SynLogic's ``FGRPO_SYNLOGIC_SCORER`` not set, a missing dependency, no answers)
    is left out of the test, whole, with one line in ``skipped`` naming it and why; ``threshold``: the plan's."""
    paths = [Path(p) for p in result.get("generations", [])]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing or not paths:
        raise ValueError(f"generation files {missing or '(none recorded)'} not found")
    references: dict[str, dict] = {}
    skipped: dict[str, str] = {}

    def unavailable(bench: str, needs_reference: bool) -> str | None:
        """Why ``bench``'s unscored lines cannot be scored here, or None."""
        if bench not in benches:
            return "not a benchmark of the recipe's evaluation, so its scorer is unknown"
        spec = benches[bench].scorer
        unset = re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)", spec)
        if unset:
            return f"its scorer {spec} is not set here: export {unset[0]}=module:function"
        try:
            resolve_scorer(spec)  # imported once: the import system keeps the module
        except ValueError as exc:
            return str(exc)
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
        scores = count_correct(paths, scorer)
    counts = {bench: s for (_run, bench), s in scores.items() if bench not in skipped}
    return counts, [f"{bench}: {why}" for bench, why in skipped.items()]


def check_same_problems(scores, runs, benchmarks) -> None:
    """Every run must cover the same problem ids on a benchmark, else its table cells are not comparable."""
    problems = []
    for bench in benchmarks:
        have = {run: set(scores[(run, bench)].problem_ids) for run in runs if (run, bench) in scores}
        union = set().union(*have.values())
        problems += [f"{bench}: run {run!r} has no generations" for run in runs if run not in have]
        for run, ids in have.items():
            lack = sorted(union - ids)
            if lack:
                problems.append(f"{bench}: run {run!r} lacks {len(lack)} of {len(union)} problems, e.g. {lack[:5]}")
    if problems:
        raise ValueError("the runs are not evaluated on the same problems, so their pass@k are not comparable:\n  "
                         + "\n  ".join(problems))


def table_rows(scores, runs, benchmarks, ks, averages=None) -> list[dict]:
    """Long-form rows: one per (run, column, k) with pass@k in [0, 1] (NaN when k > n)."""
    rows = []
    for run in runs:  # an average column: its members' mean curve (every run has every member: check_same_problems)
        for name, members, extra in [(b, [b], {}) for b in benchmarks if (run, b) in scores] + [
                (name, members, {"average": True}) for name, members in (averages or {}).items()]:
            parts = [scores[(run, b)] for b in members]
            for k, value in zip(ks, np.mean([s.curve(ks) for s in parts], axis=0)):
                rows.append(dict(run=run, benchmark=name, k=k, pass_at_k=float(value),
                                 num_problems=sum(len(s.problem_ids) for s in parts),
                                 min_n=min(int(s.n.min()) for s in parts), max_n=max(int(s.n.max()) for s in parts),
                                 score_errors=sum(s.errors for s in parts), **extra))
    return rows


def _fmt(value: float) -> str:
    return "-" if math.isnan(value) else f"{100 * value:.1f}"


def markdown_table(rows, runs, columns, ks, marks=None) -> str:
    """Rows k, columns benchmarks, cells run1/run2/... pass@k in %; ``marks[(run, column, k)]`` is appended."""
    marks = marks or {}
    value = {(r["run"], r["benchmark"], r["k"]): r["pass_at_k"] for r in rows}
    lines = [f"*pass@k (%), cells: {'/'.join(runs)}*", "", "| k | " + " | ".join(columns) + " |",
             "|---" * (len(columns) + 1) + "|"]
    for k in ks:
        cells = ["/".join(_fmt(value.get((run, col, k), math.nan)) + marks.get((run, col, k), "") for run in runs)
                 for col in columns]
        lines.append(f"| {k} | " + " | ".join(cells) + " |")
    errors = {(r["run"], r["benchmark"]): r["score_errors"] for r in rows if r.get("score_errors") and not r.get("average")}
    if errors:
        lines += ["", "**Scorer errors** (samples whose scorer raised, counted as incorrect; messages in generations.jsonl "
                  "'score_errors'): " + ", ".join(f"{run} on {bench}: {count}" for (run, bench), count in errors.items())]
    return "\n".join(lines) + "\n"


def write_csv(path: Path, rows: list[dict]) -> None:
    """``rows`` as CSV with their keys as header (an empty file when there are none)."""
    with path.open("w", newline="", encoding="utf-8") as fh:
        if rows:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


def write_tables(out_dir: Path, rows, runs, columns, ks, marks=None) -> dict[str, Path]:
    """Write ``pass_at_k.md`` (paper layout), ``pass_at_k_table.csv`` (same grid, one column per benchmark/run,
    values in %) and ``pass_at_k_long.csv`` (tidy rows, values in [0, 1])."""
    out_dir.mkdir(parents=True, exist_ok=True)
    md = out_dir / "pass_at_k.md"
    md.write_text(markdown_table(rows, runs, columns, ks, marks), encoding="utf-8")

    value = {(r["run"], r["benchmark"], r["k"]): r["pass_at_k"] for r in rows}
    wide = out_dir / "pass_at_k_table.csv"
    cell = {(run, col, k): "" if math.isnan(v) else f"{100 * v:.4f}" for (run, col, k), v in value.items()}
    write_csv(wide, [{"k": k, **{f"{col}/{run}": cell.get((run, col, k), "") for col in columns for run in runs}}
                     for k in ks])

    long = out_dir / "pass_at_k_long.csv"
    fields = ["run", "benchmark", "k", "pass_at_k", "num_problems", "min_n", "max_n", "score_errors"]
    plain = [{f: r[f] for f in fields} for r in rows]
    write_csv(long, [{**r, "pass_at_k": "" if math.isnan(r["pass_at_k"]) else repr(r["pass_at_k"])} for r in plain])
    return {"markdown": md, "wide_csv": wide, "long_csv": long}


def plot_curves(out_dir: Path, rows, runs, columns, ks, reference=None) -> list[Path]:
    """One PNG per column (``pass_at_k_<column>.png``) plus ``pass_at_k_all.png``: pass@k (%) against k (log2),
    one line per run; ``reference`` ``{(run, column): {k: pass@k in %}}`` (the paper's) dashed in its run's colour."""
    plt = pyplot()
    value = {(r["run"], r["benchmark"], r["k"]): r["pass_at_k"] for r in rows}

    def draw(ax, col):
        for run in runs:
            ys = [100 * value.get((run, col, k), math.nan) for k in ks]
            if not all(math.isnan(y) for y in ys):
                (line,) = ax.plot(ks, ys, marker="o", markersize=3, label=run)
                ref = (reference or {}).get((run, col), {})
                if ref:
                    ax.plot(sorted(ref), [ref[k] for k in sorted(ref)], color=line.get_color(), linestyle="--",
                            label=f"{run} (paper)")
        ax.set_xscale("log", base=2)
        ax.set_xticks(ks, [str(k) for k in ks], fontsize=7)
        ax.set(xlabel="k", ylabel="pass@k (%)", title=col)
        ax.grid(alpha=0.3)

    paths = []
    for col in columns:
        fig, ax = plt.subplots(figsize=(4.5, 3.5))
        draw(ax, col)
        ax.legend(fontsize=8)
        safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in col)
        paths.append(save(fig, out_dir / f"pass_at_k_{safe}.png", dpi=120))

    cols = min(3, len(columns))
    nrows = math.ceil(len(columns) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.2 * cols, 3.3 * nrows), squeeze=False)
    for ax, col in zip(axes.flat, columns):
        draw(ax, col)
    for ax in list(axes.flat)[len(columns):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=8)
    return [*paths, save(fig, out_dir / "pass_at_k_all.png")]
