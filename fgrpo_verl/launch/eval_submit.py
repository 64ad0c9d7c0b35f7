"""What a (re)launch submits of a recipe's evaluation, and how far it got (``--status``).

A relaunch submits what is missing: a selection pass for runs with unevaluated checkpoints, a final pass for runs
without a current final result; nothing for a run with an evaluation job queued or running. Each goes with the
script planned for it (eval_jobs.py) and its dependencies on sbatch's command line.
"""

from __future__ import annotations

from collections import namedtuple
from pathlib import Path

from fgrpo_verl.evaluation.checkpoint_eval import pass_label
from fgrpo_verl.evaluation.eval_job import SELECTED
from fgrpo_verl.evaluation.plan import Plan
from fgrpo_verl.job import checkpoints as ck


def pass_complete(plan: Plan, phase: str) -> bool:
    """Whether ``phase`` has nothing left to do for this run (a finished run, every candidate evaluated)."""
    run_dir = Path(plan.run_dir)
    if not ck.training_done(run_dir, plan.steps.total):
        return False
    label = pass_label(plan, phase)
    if phase == "selection":
        save_freq, total = ck.step_plan(run_dir, plan.steps.save_freq, plan.steps.total)
        return all(ck.current_result(run_dir, s, label) is not None for s in ck.epoch_steps(save_freq, total))
    selected = ck.read_json(run_dir / ck.EVAL_DIR / SELECTED)
    return bool(selected) and selected.get("selection_label") == pass_label(plan, "selection") \
        and ck.current_result(run_dir, selected["step"], label) is not None


def progress_line(plan: Plan) -> str:
    """``eval: selection 4/10 checkpoints; final: step 459 evaluated`` for ``--status``."""
    run_dir = Path(plan.run_dir)
    save_freq, total = ck.step_plan(run_dir, plan.steps.save_freq, plan.steps.total)
    expected = ck.epoch_steps(save_freq, total)
    label = pass_label(plan, "selection")
    done = sum(ck.current_result(run_dir, s, label) is not None for s in expected if s in ck.saved_steps(run_dir))
    parts = [f"selection {done}/{len(expected) if expected else '?'} checkpoints"]
    if plan.protocol == "select":
        selected = ck.read_json(run_dir / ck.EVAL_DIR / SELECTED)
        if not selected:
            parts.append("final: not yet")
        else:
            ok = ck.current_result(run_dir, selected["step"], pass_label(plan, "final")) is not None
            parts.append(f"final: step {selected['step']} {'evaluated' if ok else 'selected, not evaluated'}")
    return "eval: " + "; ".join(parts)


# a dependency on the selection job this launch submits for run `job_name` (its id is not known yet)
SelectionOf = namedtuple("SelectionOf", "job_name")
# an evaluation job to submit; depends_on: job ids, or selection jobs of this launch (SelectionOf)
EvalDecision = namedtuple("EvalDecision", "job_name phase depends_on")


def decide(jobs: list, evaluations: list, train_ids: dict[str, str | None], active_evals: dict[str, list],
           baseline_names: dict[str, str | None]) -> tuple[list[EvalDecision], list[str]]:
    """Which evaluation jobs a launch submits, with their dependencies, and why others are not.

    ``train_ids[name]``: the run's training job queued, running or just submitted (None: none, the run is done
    or not resubmitted); ``active_evals[name]``: its evaluation jobs in the queue; ``baseline_names[name]``: its
    γ = 0 twin's job name. Selections are decided first (a final pass depends on the baseline's selection job)."""
    decisions, notes = [], []
    for job, ev in zip(jobs, evaluations):
        name = job.job_name
        if active_evals.get(name):
            ids = ", ".join(i for i, _ in active_evals[name])
            notes.append(f"{job.run_label}: evaluation job(s) {ids} already queued or running")
            continue
        if not pass_complete(ev.jobs[0].plan, "selection"):
            decisions.append(EvalDecision(name, "selection", (train_ids[name],) if train_ids.get(name) else ()))
    selection_jobs = {d.job_name for d in decisions}  # runs whose selection job this launch submits
    for job, ev in zip(jobs, evaluations):
        name = job.job_name
        if active_evals.get(name) or len(ev.jobs) < 2 or pass_complete(ev.jobs[1].plan, "final"):
            continue
        deps: list[str | SelectionOf] = [SelectionOf(name)] if name in selection_jobs else []
        base = baseline_names.get(name)
        if base is not None and base in selection_jobs:
            deps.append(SelectionOf(base))
        elif base is not None and active_evals.get(base):
            deps += [i for i, _ in active_evals[base]]
        elif base is not None and train_ids.get(base):
            deps.append(train_ids[base])
        decisions.append(EvalDecision(name, "final", tuple(deps)))
    return decisions, notes


def submit_eval_jobs(jobs: list, train_ids: dict[str, str | None], script_dir: Path, log_dir: Path,
                     out=print, submitted: list | None = None) -> list[tuple[str, str, str]]:
    """Submit the evaluation jobs a launch still needs (:func:`decide`), each with the script planned for it and
    its dependencies on sbatch's command line; returns (run, pass, job id) of each, also appended to
    ``submitted`` as each one goes (what a failing sbatch leaves queued)."""
    from fgrpo_verl.job.run_record import write_record
    from fgrpo_verl.launch.queue import queued
    from fgrpo_verl.launch.render import sbatch, script_name

    jobs = [job for job in jobs if job.evaluation is not None]
    if not jobs:
        return []
    by_name = {job.job_name: job for job in jobs}
    baselines = {job.job_name: job.baseline_job for job in jobs}
    queue = queued({**{b.job_name: b.checkpoint_dir for b in baselines.values() if b is not None},
                    **{name: job.checkpoint_dir for name, job in by_name.items()}})
    active, train_ids = {}, dict(train_ids)
    for name, (training, evals, _) in queue.items():
        active[name] = evals
        if training and not train_ids.get(name):
            train_ids[name] = training[0][0]
    decisions, notes = decide(jobs, [job.evaluation for job in jobs], train_ids, active,
                              {n: (b.job_name if b is not None else None) for n, b in baselines.items()})
    for note in notes:
        out(f"skipped evaluation of {note}")
    ids: dict[tuple[str, str], str] = {}  # (run's job name, pass) -> job id, of this launch
    done = [] if submitted is None else submitted
    for d in decisions:
        job = by_name[d.job_name]
        deps = [ids[dep.job_name, "selection"] if isinstance(dep, SelectionOf) else dep for dep in d.depends_on]
        path = script_dir / script_name(job.job_name, d.phase)
        path.write_text(next(e.text for e in job.evaluation.jobs if e.phase == d.phase), encoding="utf-8")
        job_id = sbatch(path, [f"afterany:{i}" for i in deps])
        write_record(job.checkpoint_dir, job.fingerprint, job.job_name, job.overrides, eval_job=(job_id, d.phase))
        ids[d.job_name, d.phase] = job_id
        after = f" after job(s) {', '.join(deps)}" if deps else ""
        out(f"submitted {d.phase} evaluation of {job.run_label}: job {job_id} {job.job_name}{after}")
        done.append((job.run.name, d.phase, job_id))
    return done
