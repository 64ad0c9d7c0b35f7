"""``report`` of a recipe without an evaluation block whose runs validate while training (maze): Table 4 and
Figs. 6-7 from the step lines verl's console logger prints (``step:N - key:value - ...``) into each run's Slurm logs.

The Slurm logs are the record of a run that survives its restarts: ``launch`` writes them with
``--open-mode=append`` (launch/render.py), so a requeued start (same job id) appends to the same
``<log dir>/<job name>-<job id>.out`` and a resubmission writes a new job id's file beside it, while verl's FileLogger
opens its file for writing at each start and keeps only the last start's steps. A restart resumes from a checkpoint
k and logs k + 1 again; what an earlier start logged from there on (a killed start's steps past its checkpoint) is
not part of the run and is dropped, as the W&B offline trim drops it from W&B.

    table4   each run's pass@1/128/256 at its last step (val-core/<source>/pass@k), N x γ, beside the paper's
    fig6     -log pass@K (K = 1, 128, 1024, 2048) at the last step against N, a line per γ (the paper prints no
             numbers for it; fig6.png, fig6.csv)
    fig7     train reward (critic/score/mean), test pass@1 and test pass@K (K = 2048, the validation's n) against the
             step, a row of panels per N, a line per γ (fig7.png, fig7.csv)
"""

from __future__ import annotations

import glob
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from fgrpo_verl.evaluation import paper_numbers
from fgrpo_verl.evaluation.report import write_csv
from fgrpo_verl.monitoring.console import step_fields
from fgrpo_verl.report.runs import Run, add_table, finish
from fgrpo_verl.theory.plots import pyplot, save

TABLE_4_SOURCE = "maze"  # the data_source of the maze's held-out set (fgrpo_verl/tasks/maze/data.py)
TRAIN_REWARD = "critic/score/mean"
FIG6_KS = (1, 128, 1024, 2048)
_VAL_KEY = re.compile(r"^val-core/(.+)/pass@(\d+)$")
_JOB_ID = re.compile(r"-(\d+)\.out$")


def logged_steps(log_dir: Path, job_name: str) -> dict[int, dict[str, float]]:
    """``{step: {metric: value}}`` of the run's trajectory (the train reward and ``val-core/*`` only), from its
    Slurm logs in job id order; a step below the last one logged starts a restart, which replaces every step from
    there on."""
    def job_id(path: Path) -> int:
        match = _JOB_ID.search(path.name)
        return int(match.group(1)) if match else -1

    def number(text: str) -> float | None:
        try:
            return float(text)
        except ValueError:
            return None

    history: dict[int, dict[str, float]] = {}
    last = -1
    for path in sorted(Path(log_dir).glob(f"{glob.escape(job_name)}-*.out"), key=job_id):
        with open(path, "rb") as fh:
            for raw in fh:
                fields = step_fields(raw.decode(errors="replace")) if b"step:" in raw else None
                kept = {key.strip(): number(value) for key, value in (fields or {}).items()
                        if key.strip() == TRAIN_REWARD or key.strip().startswith("val-core/")}
                kept = {key: value for key, value in kept.items() if value is not None}
                # a line without these metrics is not a step of the run's (a timing line, another format)
                step = number(fields["step"]) if kept else None
                if step is None:
                    continue
                if int(step) < last:
                    history = {s: metrics for s, metrics in history.items() if s < int(step)}
                last = int(step)
                history.setdefault(last, {}).update(kept)
    return history


def pass_at(metrics: dict[str, float]) -> dict[str, dict[int, float]]:
    """``{source: {k: pass@k}}`` of a step's ``val-core/<source>/pass@<k>``."""
    out: dict[str, dict[int, float]] = {}
    for key, value in metrics.items():
        match = _VAL_KEY.match(key)
        if match:
            out.setdefault(match.group(1), {})[int(match.group(2))] = value
    return out


@dataclass
class MazeRun(Run):
    history: dict[int, dict[str, float]] = field(default_factory=dict)
    step: int | None = None                                          # the step of the last validation found
    values: dict[str, dict[int, float]] = field(default_factory=dict)  # its pass@k per source (fraction)
    final: bool = False                                              # that validation is at the last step


def collect(jobs: list, log_dir: Path) -> list[MazeRun]:
    """Each planned run's state (checkpoint dir) and its logged trajectory (Slurm logs)."""
    out = []
    for job in jobs:
        planned = job.config.trainer.get("total_training_steps")
        history = logged_steps(log_dir, job.job_name)
        run = MazeRun.of(job, int(planned) if planned is not None else job.total_steps, bool(history),
                         history=history)
        run.step = max((s for s, m in history.items() if pass_at(m)), default=None)
        run.values = pass_at(history[run.step]) if run.step is not None else {}
        run.final = run.step is not None and run.total is not None and run.step >= run.total
        if run.state != "not started" and not run.final:
            run.missing.append(f"no validation at the last step ({run.total}) in {log_dir}/{job.job_name}-*.out"
                               + (f": the last one is at step {run.step}" if run.step is not None else
                                  ": no verl step line with val-core/<source>/pass@<k> there"))
        out.append(run)
    return out


def table4(runs: list[MazeRun], source: str, ks: list[int], key: str) -> tuple[str, list[dict], bool]:
    """Table 4 of ``source``: (markdown, CSV rows, whether a cell of ours has a number)."""
    gammas = sorted({r.gamma for r in runs})
    labels = {g: ("GRPO" if g == 0 else f"γ={g:g}") for g in gammas}
    columns = [(k, g) for k in ks for g in gammas]
    paper = paper_numbers.table_4() if source == TABLE_4_SOURCE else {}
    lines = [f"### Table 4: pass@k (%) at the last step, data source {source}", "",
             "| N | | " + " | ".join(f"p@{k} {labels[g]}" for k, g in columns) + " |",
             "|---" * (len(columns) + 2) + "|"]
    rows = []
    for size in sorted({r.group_size for r in runs}):
        mine, ref = [], []
        for k, g in columns:
            run = next((r for r in runs if r.group_size == size and r.gamma == g), None)
            value = run.values.get(source, {}).get(k) if run is not None and run.final else None
            theirs = paper.get((size, k, g))
            mine.append("-" if value is None else f"{100 * value:.1f}")
            ref.append("-" if theirs is None else f"{theirs:.1f}")
            rows.append({"table": key, "N": size, "gamma": g, "metric": f"pass@{k}",
                         "ours": "" if value is None else f"{100 * value:.4f}",
                         "paper": "" if theirs is None else theirs,
                         "step": "" if run is None or run.step is None else run.step,
                         "run": "" if run is None else run.name})
        lines += [f"| {size} | ours | " + " | ".join(mine) + " |", "| | paper | " + " | ".join(ref) + " |"]
    return "\n".join(lines) + "\n", rows, any(row["ours"] != "" for row in rows)


def _plot(path: Path, panels: list[tuple[str, str, dict]], columns: int, xlabel: str, log_x: bool) -> None:
    """One PNG of ``panels`` (title, y label, {line label: [(x, y)]}), ``columns`` to a row."""
    rows = math.ceil(len(panels) / columns)
    fig, axes = pyplot().subplots(rows, columns, figsize=(3.7 * columns, 2.8 * rows), squeeze=False)
    for ax, (title, ylabel, lines) in zip(axes.flat, panels):
        for label, points in lines.items():
            ax.plot([x for x, _ in points], [y for _, y in points], marker="o" if log_x else None, label=label)
        if log_x:
            ax.set_xscale("log", base=2)
        ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=7)
    save(fig, path)


def figures(runs: list[MazeRun], source: str, val_n: int, out_dir: Path) -> list[str]:
    """Figs. 6 and 7 of ``source``, each a PNG and the CSV of its points; the files written (none without a
    number to plot)."""
    label = {g: ("GRPO" if g == 0 else f"F-GRPO γ={g:g}") for g in sorted({r.gamma for r in runs})}
    written = []
    fig6 = [{"N": r.group_size, "gamma": r.gamma, "k": k, "pass_at_k": v, "neg_log": -math.log(v) if v > 0 else ""}
            for r in runs if r.final for k, v in sorted(r.values.get(source, {}).items()) if k in FIG6_KS]
    if fig6:
        _plot(out_dir / "fig6.png", [(f"K = {k}", f"-log pass@{k}", {
            label[g]: sorted((row["N"], row["neg_log"]) for row in fig6
                             if row["k"] == k and row["gamma"] == g and row["neg_log"] != "") for g in label})
            for k in sorted({row["k"] for row in fig6})], 4, "N (rollouts per prompt)", True)
        write_csv(out_dir / "fig6.csv", fig6)
        written += ["fig6.png", "fig6.csv"]
    top = 1 << int(math.log2(val_n))
    keys = {"train reward": TRAIN_REWARD, "test pass@1": f"val-core/{source}/pass@1",
            f"test pass@{top}": f"val-core/{source}/pass@{top}"}
    fig7 = [{"run": r.name, "N": r.group_size, "gamma": r.gamma, "step": step,
             **{name: metrics.get(key, "") for name, key in keys.items()}}
            for r in runs for step, metrics in sorted(r.history.items())]
    if fig7:
        _plot(out_dir / "fig7.png", [(f"N = {size}", name, {
            label[g]: [(row["step"], row[name]) for row in fig7
                       if row["N"] == size and row["gamma"] == g and row[name] != ""] for g in label})
            for size in sorted({r.group_size for r in runs if r.history}) for name in keys], 3, "step", False)
        write_csv(out_dir / "fig7.csv", fig7)
        written += ["fig7.png", "fig7.csv"]
    return written


def validation_report(recipe, jobs: list, log_dir: Path, out_dir: Path) -> str:
    """Table 4 and Figs. 6-7 of a recipe whose runs validate while training, beside the paper's Table 4."""
    tested = sorted({int(j.config.trainer.test_freq) for j in jobs})
    if not jobs or all(t <= 0 for t in tested):
        raise ValueError(f"recipe {recipe.name}: no evaluation block and its runs do not validate while training "
                         f"(trainer.test_freq={tested[0] if tested else '?'}), so they write no pass@k to report; "
                         "add an evaluation block (docs/recipes.md, 'evaluation')")
    runs = collect(jobs, log_dir)
    total = sorted({r.total for r in runs if r.total})
    val_n = sorted({int(j.config.actor_rollout_ref.rollout.val_kwargs.n) for j in jobs})
    parts = [f"# {recipe.name}: {recipe.reproduces}", "",
             f"{sum(r.state != 'not started' for r in runs)} of {len(runs)} runs started, "
             f"{sum(r.state == 'done' for r in runs)} finished, {sum(r.final for r in runs)} validated at their last "
             f"step ({'/'.join(map(str, total)) or '?'})", "",
             f"ours: verl's validation at each run's last step (val-core/<source>/pass@k, "
             f"n={'/'.join(map(str, val_n))} samples per prompt), read from the runs' Slurm logs "
             f"{log_dir}/<job name>-<job id>.out", ""]
    out_dir.mkdir(parents=True, exist_ok=True)
    sources = list(dict.fromkeys(s for r in runs if r.final for s in r.values)) or [TABLE_4_SOURCE]
    ks = [k for k in paper_numbers.TABLE_4_KS if k <= min(val_n)] or [1]
    csv_rows, empty = [], []
    for source in sources:
        key = "table4" if len(sources) == 1 else f"table4_{source}"
        md, rows, has_ours = table4(runs, source, ks, key)
        add_table(parts, empty, out_dir / f"{key}.md", md, has_ours)
        csv_rows += rows
    write_csv(out_dir / "table4.csv", csv_rows)
    source = TABLE_4_SOURCE if TABLE_4_SOURCE in sources else sources[0]
    drawn = figures(runs, source, min(val_n), out_dir)
    parts.append(f"Figs. 6-7 (data source {source}): "
                 + (f"{', '.join(drawn)} in {out_dir}\n" if drawn else "no step of ours logged yet\n"))
    return finish(parts, empty, runs, out_dir)
