"""The recipe's runs as the report sees them: what each run is (model, base algorithm, γ, N), how far it got, and
for a recipe with an evaluation block the protocol's choices (protocol.py decides as the final job does); and the
report's text files, ``report.md`` (the printed text) and ``missing.md`` (what keeps each run's cells empty)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from fgrpo_verl.evaluation.plan import Plan
from fgrpo_verl.evaluation.protocol import RunSelection, choose, run_scores, select_gamma
from fgrpo_verl.job import checkpoints as ck


@dataclass
class Run:
    """One recipe run: what it is and how far it got (``missing``: what keeps its cells empty)."""

    name: str                 # recipe run name
    job: object               # its JobScript (planned identity)
    model: str                # the paper's table name of its base model (or the model path's last component)
    family: str               # grpo / dapo / cispo / ...
    gamma: float
    group_size: int
    total: int | None         # the steps it trains
    state: str                # not started | training | done
    missing: list[str] = field(default_factory=list)

    @property
    def method(self) -> str:
        base = self.family.upper()
        return base if self.gamma == 0 else f"F-{base}"

    @classmethod
    def of(cls, job, total: int | None, logged: bool = False, **extra):
        """The run of ``job`` with its state from its checkpoint directory (``logged``: its logs show it started)."""
        from fgrpo_verl.evaluation.model_presets import known_model
        from fgrpo_verl.job.tracking import config_algo

        config = job.config
        path = str(config.actor_rollout_ref.model.path)
        model = known_model(path)
        gamma = float(config.algorithm.fgrpo.gamma)
        algo = config_algo(config)
        run_dir = Path(job.checkpoint_dir)
        step = ck.tracker_step(run_dir)
        state = ("done" if ck.training_done(run_dir, total) else
                 "training" if step > 0 or ck.saved_steps(run_dir) or logged else "not started")
        run = cls(job.run.name, job, model.table_name if model is not None else path.rstrip("/").rsplit("/", 1)[-1],
                  algo[1:] if gamma > 0 and algo.startswith("f") else algo, gamma,
                  int(config.actor_rollout_ref.rollout.n), total, state, **extra)
        if state == "not started":
            run.missing.append("not started")
        elif state == "training":
            run.missing.append(f"training not finished (step {step} of {total or '?'})")
        return run


@dataclass
class RunReport(Run):
    """A run of a recipe with an evaluation block: its plan, the protocol's checkpoint and that checkpoint's final
    pass."""

    plan: Plan | None = None          # its evaluation plan (eval_jobs.plan_for_run)
    selection: RunSelection | None = None
    final: dict | None = None         # the final pass's result at the selected checkpoint

    def final_score(self) -> float | None:
        """The score γ is chosen on: ``select_by``'s pass@1 in the final pass at the selected checkpoint (in the
        selection pass where the recipe's final pass leaves ``select_by``'s benchmarks out); None before it ran."""
        if self.final is None:
            return None
        if self.plan.select_by not in self.final["pass_at_k"]:
            return self.selection.checkpoint.score
        return ck.score(self.final, self.plan.select_by, 1)


def collect_runs(jobs: list) -> list[RunReport]:
    """Each planned run's state, scores, selection and final result."""
    from fgrpo_verl.evaluation.checkpoint_eval import pass_label

    reports, scores = [], {}
    for job in jobs:
        plan = job.evaluation.jobs[0].plan
        label = pass_label(plan, "selection")
        own = scores[job.job_name] = run_scores(job.run.name, Path(plan.run_dir), plan.steps, label, plan.select_by)
        reports.append(RunReport.of(job, own.total, plan=plan))
    for rep in reports:
        own, plan, base_job = scores[rep.job.job_name], rep.plan, rep.job.baseline_job
        base = None
        if base_job is not None:
            base = scores.get(base_job.job_name) or run_scores(  # a baseline outside this report's runs
                base_job.run.name, base_job.checkpoint_dir, plan.baseline.steps, pass_label(plan, "selection"),
                plan.select_by)
        rep.selection = choose(own, rep.gamma, base)
        if own.unscored:
            rep.missing.append(f"selection pass: checkpoints {own.unscored} not evaluated")
        if rep.selection.checkpoint is None:
            if rep.state == "done":
                rep.missing.append(f"no checkpoint selected: {rep.selection.constraint}")
            continue
        step = rep.selection.checkpoint.step
        rep.final = ck.current_result(Path(plan.run_dir), step, pass_label(plan, "final"))
        if rep.final is None:
            rep.missing.append(f"final pass (n={plan.passes.final.n}) of the selected checkpoint {step} not evaluated")
    return reports


def baseline_groups(reports: list[RunReport]) -> list[tuple[RunReport, dict[float, RunReport], float | None]]:
    """(baseline, {γ: focal run}, the chosen γ or None) for every γ = 0 run, in recipe order. γ is chosen on each
    focal run's final pass (selection.select_gamma)."""
    groups = []
    for rep in reports:
        if rep.gamma != 0:
            continue
        focal = {r.gamma: r for r in reports
                 if r.job.baseline_job is not None and r.job.baseline_job.job_name == rep.job.job_name}
        groups.append((rep, focal, select_gamma({g: r.final_score() for g, r in focal.items()})))
    return groups


def add_table(parts: list[str], empty: list[str], path: Path, md: str, has_ours: bool) -> None:
    """Write a table's markdown to ``path``; print it (``parts``) when a cell of ours has a number, else name it in
    ``empty`` (:func:`finish`'s line on the tables left out)."""
    path.write_text(md, encoding="utf-8")
    if has_ours:
        parts.append(md)
    else:
        empty.append(path.stem)


def finish(parts: list[str], empty: list[str], runs, out_dir: Path) -> str:
    """The report's text, written to report.md: ``parts``, one line naming the tables left out (no number of ours
    yet; their files hold the paper's), then what is missing: in ``missing.md`` every run and what keeps its cells
    empty, a line each; printed, the runs not started on one line."""
    def missing(lines: list[str]) -> str:
        return "### Missing\n\n" + "\n".join(lines or ["nothing: every run is finished and evaluated"]) + "\n"

    if empty:
        parts.append(f"no numbers of ours yet: {', '.join(empty)} not printed (the paper's numbers are in "
                     f"{out_dir}/<table>.md)\n")
    every = [f"- {r.name} ({r.job.job_name}): {m}" for r in runs for m in r.missing]
    (out_dir / "missing.md").write_text(missing(every), encoding="utf-8")
    idle = [r.name for r in runs if r.missing == ["not started"]]
    shown = [f"- {r.name} ({r.job.job_name}): {m}" for r in runs if r.name not in idle for m in r.missing]
    if idle:
        shown.insert(0, f"- not started: {len(idle)} run(s), " + (", ".join(idle) if len(idle) <= 6 else
                                                                    f"{', '.join(idle[:6])}, ... (missing.md)"))
    text = "\n".join([*parts, missing(shown)])
    (out_dir / "report.md").write_text(text, encoding="utf-8")
    return text
