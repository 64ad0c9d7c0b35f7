"""What ``fgrpo-verl launch --dry-run`` says about a recipe's evaluation: each run's evaluation jobs, their
baseline, memory and GPU-hours (the formula and its assumptions: evaluation/cost.py), and the recipe's total."""

from __future__ import annotations

from fgrpo_verl.evaluation.cost import PassPlan, pass_gpu_hours, protocol_hours
from fgrpo_verl.evaluation.plan import Plan
from fgrpo_verl.launch.eval_baseline import missing_baseline
from fgrpo_verl.launch.eval_spec import EvalSpec, PassEntry


def describe_cost(spec: EvalSpec, plan: Plan, params: float | None,
                  problems: dict[str, int | None]) -> tuple[list[str], dict]:
    """The dry run's cost lines of one run and ``{"select": GPU-hours, "full": GPU-hours}`` (empty: unknown)."""
    if params is None:
        return ["eval cost: unknown (parameter count of the base model not known here)"], {}
    from fgrpo_verl.job.checkpoints import epoch_steps

    save_freq, total = plan.steps.save_freq, plan.steps.total
    if total and save_freq > 0:
        checkpoints = len(epoch_steps(save_freq, total))
    elif plan.steps.epochs_only:
        checkpoints = plan.steps.epochs_only  # a checkpoint each epoch: as many as epochs, whatever the data
    else:
        return ["eval cost: unknown (the run's step count needs its training data here)"], {}
    length = plan.sampling.max_new_tokens

    def pass_plan(name, p: PassEntry, count) -> PassPlan:
        known = [b for b in p.benchmarks if problems.get(b) is not None]
        return PassPlan(name, p.n, sum(problems[b] for b in known),
                        tuple(b for b in p.benchmarks if b not in known), count)

    sel = pass_plan("selection", spec.selection, checkpoints)
    fin1 = pass_plan("final", spec.final, 1)
    fin_all = pass_plan("final", spec.final, checkpoints)
    select_h = protocol_hours([sel, fin1], length, params, spec.cost)
    full_h = protocol_hours([fin_all], length, params, spec.cost)
    each_sel = pass_gpu_hours(sel.problems, sel.n, length, params, spec.cost)
    each_fin = pass_gpu_hours(fin1.problems, fin1.n, length, params, spec.cost)
    chosen = "select" if spec.protocol == "select" else "full"
    lines = [f"eval cost (GPU-hours, {chosen} chosen): select = {checkpoints} ckpt x {each_sel:,.1f} "
             f"(n={sel.n}, {sel.problems} problems) + 1 x {each_fin:,.1f} (n={fin1.n}, {fin1.problems} problems) = "
             f"{select_h:,.1f}; full = {checkpoints} x {each_fin:,.1f} = {full_h:,.1f}"]
    missing = sorted(set(sel.uncounted) | set(fin1.uncounted))
    if missing:
        lines.append(f"eval cost: {missing} left out (problem count unknown here: benchmark file not found)")
    return lines, {"select": select_h, "full": full_h}


def dry_run_lines(job) -> list[str]:
    """What ``--dry-run`` prints about a run's evaluation after its training script."""
    from fgrpo_verl.launch.render import sbatch_command, script_name

    ev = job.evaluation
    if ev is None:
        return []
    lines = [f"### evaluation of {job.job_name} (run {job.run_label}): {ev.setting_line}"]
    why = missing_baseline(job)
    if ev.baseline:
        lines.append(f"### checkpoint selection against the γ = 0 baseline run {ev.baseline} (equal or less compute)")
    elif why:
        lines.append(f"### no γ = 0 baseline for {job.run_label} in the recipe ({why}): its checkpoint is selected"
                     f" on its own scores, with no compute limit")
    for e in ev.jobs:
        p = e.plan.passes[e.phase]
        what = f"n={p.n} on every epoch checkpoint" if e.phase == "selection" else f"n={p.n} on the selected checkpoint"
        lines.append(f"### eval job {job.job_name} [{e.phase} pass: {what}, benchmarks {', '.join(p.benchmarks)}]"
                     f" after: {', '.join(e.depends_on)} (afterany), and singleton with the run's other jobs")
        # the ids exist only at submit: on the command line, not in the script
        script = f"<script dir>/{script_name(job.job_name, e.phase)}"
        lines.append(f"### submitted as: {' '.join(sbatch_command(script, e.after()))}")
        lines.append(e.text)
    if ev.memory_line:
        lines.append(f"### {ev.memory_line}")
    lines += [f"### {line}" for line in ev.cost_lines]
    return lines


def dry_run_total(jobs: list) -> list[str]:
    """The recipe's evaluation cost per protocol, with the formula and its assumptions."""
    evaluations = [job.evaluation for job in jobs if job.evaluation is not None]
    if not evaluations:
        return []
    spec = evaluations[0].spec
    known = [ev.hours for ev in evaluations if ev.hours]
    lines = []
    if known:
        select = sum(h["select"] for h in known)
        full = sum(h["full"] for h in known)
        unknown = len(evaluations) - len(known)
        lines.append(f"### evaluation cost of the {len(known)} run(s) with known sizes: protocol select "
                     f"{select:,.0f} GPU-hours, protocol full {full:,.0f} GPU-hours (recipe: protocol "
                     f"{spec.protocol})" + (f"; {unknown} run(s) unknown" if unknown else ""))
    lines.append("### cost formula (fgrpo_verl/evaluation/cost.py): GPU-hours of a pass = n x problems x L / R / 3600, "
                 "L = mean response length, R = decode tokens/s per GPU; select = checkpoints x selection pass + "
                 "1 x final pass, full = checkpoints x final pass; " + spec.cost.describe())
    return lines
