"""Everything ``fgrpo-verl launch --dry-run`` prints: a table with one row per run (nodes x GPUs, steps, training
and evaluation GPU-hours, checkpoint storage, preflight) and the recipe's totals, the Slurm requests, then what a
submit needs that is not here, one line each with the command that fixes it. The scripts themselves go to a folder
on request (``--script-dir DIR``; ``-``: standard output, each with what the dry run knows of its job: its
evaluation jobs, their baseline, memory and GPU-hours, the formula and its assumptions in evaluation/cost.py).

The readiness list is made of the checks a submit runs before anything reaches Slurm (training data:
``plan_jobs(require_data=True)`` with :func:`fgrpo_verl.data.records.parquet_rows`; models:
:func:`fgrpo_verl.preflight.models.missing_model` in the preflight; evaluation: :func:`eval_jobs.benchmark_problems`),
so a submit refuses everything the dry run lists.

Training GPU-hours of one step, with the evaluation's assumptions (``evaluation.cost`` of the recipe, else the
defaults of :class:`fgrpo_verl.evaluation.cost.CostAssumptions`; printed under the table):

    S = data.train_batch_size x actor_rollout_ref.rollout.n                    samples per step
    rollout = S x f x data.max_response_length / R(p)                          GPU-seconds (R: the decode rate)
    update  = k x p x S x f x (data.max_prompt_length + data.max_response_length) / F        GPU-seconds
    k = 6 (update: forward and backward) + 2 (old log-probs) + 2 (reference model, when a KL term is on)

f = mean_response_fraction (a sample's mean length over its cap), p = parameters, F = sustained training FLOP/s
per GPU. No GPU ran here: these are planning numbers, not measurements.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path

from fgrpo_verl.data.records import parquet_rows
from fgrpo_verl.evaluation.cost import REFERENCE_PARAMS, CostAssumptions, PassPlan, pass_gpu_hours, protocol_hours
from fgrpo_verl.job.checkpoints import epoch_steps
from fgrpo_verl.launch.disk import checkpoint_disk, checkpoint_storage, model_params, size_text
from fgrpo_verl.launch.eval_baseline import missing_baseline
from fgrpo_verl.launch.eval_jobs import benchmark_problems
from fgrpo_verl.launch.render import sbatch_command, sbatch_unquote, script_name
from fgrpo_verl.launch.steps import missing_data
from fgrpo_verl.preflight.models import missing_model

# Hub organisations whose models need an accepted licence and a login before `hf download` works
GATED_PREFIXES = ("meta-llama/",)


def _assumptions(job):
    ev = job.evaluation
    return ev.spec.cost if ev is not None and ev.spec is not None else CostAssumptions()


def training_gpu_hours_per_step(config, params: float, a) -> float:
    """GPU-hours of one training step of ``config`` (module docstring)."""
    samples = int(config.data.train_batch_size) * int(config.actor_rollout_ref.rollout.n)
    response = a.mean_response_fraction * int(config.data.max_response_length)
    length = a.mean_response_fraction * (int(config.data.max_prompt_length) + int(config.data.max_response_length))
    rollout_s = samples * response / (a.tokens_per_gpu_second_7b * REFERENCE_PARAMS / params)
    kl = bool(config.actor_rollout_ref.actor.get("use_kl_loss")) or bool(config.algorithm.get("use_kl_in_reward"))
    passes = 6 + 2 + (2 if kl else 0)
    update_s = passes * params * samples * length / a.training_flops_per_gpu_second
    return (rollout_s + update_s) / 3600.0


def eval_cost(ev) -> tuple[list[str], dict]:
    """The cost lines of a run's evaluation (:class:`eval_jobs.RunEvaluation`) and ``{"select": GPU-hours, "full":
    GPU-hours}`` (empty: unknown)."""
    spec, plan, params, problems = ev.spec, ev.jobs[0].plan, ev.params, ev.problems
    if params is None:
        return ["eval cost: unknown (parameter count of the base model not known here)"], {}
    # without the step count, a checkpoint each epoch (epochs_only) gives as many as epochs, whatever the data
    checkpoints = len(epoch_steps(plan.steps.save_freq, plan.steps.total)) or plan.steps.epochs_only
    if not checkpoints:
        return ["eval cost: unknown (the run's step count needs its training data here)"], {}
    length = plan.sampling.max_new_tokens

    def pass_plan(name, p, count) -> PassPlan:
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
    lines = [f"eval cost (GPU-hours, {spec.protocol} chosen): select = {checkpoints} ckpt x {each_sel:,.1f} "
             f"(n={sel.n}, {sel.problems} problems) + 1 x {each_fin:,.1f} (n={fin1.n}, {fin1.problems} problems) = "
             f"{select_h:,.1f}; full = {checkpoints} x {each_fin:,.1f} = {full_h:,.1f}"]
    missing = sorted(set(sel.uncounted) | set(fin1.uncounted))
    if missing:
        lines.append(f"eval cost: {missing} left out (problem count unknown here: benchmark file not found)")
    return lines, {"select": select_h, "full": full_h}


def _hours(value: float | None) -> str:
    return "?" if value is None else f"{value:,.0f}" if value >= 10 else f"{value:,.1f}"


def _total(values: list, text) -> str:
    """The sum of the known ``values`` as ``text`` gives it, with how many are unknown; "?" when none is known."""
    known = [v for v in values if v is not None]
    unknown = len(values) - len(known)
    return "?" if not known else text(sum(known)) + (f" + {unknown} unknown" if unknown else "")


def table_lines(recipe, jobs: list) -> list[str]:
    """The summary table and its totals, then the assumptions behind its numbers."""
    header = ("run", "nodes x GPUs", "steps", "train GPU-h", "eval GPU-h", "checkpoints", "preflight")
    cells, train, per_step, evals, storage = [], [], [], [], []
    for job in jobs:
        params = model_params(str(job.config.actor_rollout_ref.model.path))
        step = None if params is None else training_gpu_hours_per_step(job.config, params, _assumptions(job))
        train.append(None if step is None or job.total_steps is None else step * job.total_steps)
        if train[-1] is None and step is not None:
            per_step.append(step)
        ev = job.evaluation
        if ev is not None:
            evals.append(eval_cost(ev)[1].get(ev.spec.protocol))
        disk = checkpoint_storage(job.config, job.total_steps)
        storage.append(None if disk is None else disk[2])
        cells.append((job.run_label, f"{job.nodes} x {job.gpus_per_node}",
                      "?" if job.total_steps is None else str(job.total_steps),
                      _hours(train[-1]) if train[-1] is not None else "?" if step is None else f"? ({step:.2f}/step)",
                      "-" if ev is None else _hours(evals[-1]), "?" if storage[-1] is None else size_text(storage[-1]),
                      "passed" if job.preflight else "not checked"))
    train_total = _total(train, _hours)
    if train_total == "?" and per_step:
        train_total = f"? ({sum(per_step):.1f}/step)"
    cells.append((f"total ({len(jobs)} run{'' if len(jobs) == 1 else 's'})", "", "", train_total,
                  _total(evals, _hours) if evals else "-", _total(storage, size_text), ""))
    widths = [max(len(str(c[i])) for c in [header, *cells]) for i in range(len(header))]

    def fmt(c):
        return "  ".join(str(v).ljust(w) if i == 0 else str(v).rjust(w) for i, (v, w) in enumerate(zip(c, widths)))

    lines = [f"recipe {recipe.name} ({recipe.reproduces}): {len(jobs)} run(s); dry run, nothing submitted", "",
             fmt(header), *[fmt(c) for c in cells[:-1]], "-" * len(fmt(header)), fmt(cells[-1]), ""]
    a = _assumptions(jobs[0]) if jobs else None
    if a is not None:
        lines.append(f"GPU-hours are planning estimates (fgrpo_verl/launch/summary.py, evaluation/cost.py): "
                     f"{a.describe()}; training {a.training_flops_per_gpu_second:.1e} FLOP/s per GPU sustained."
                     + (" '?' steps: the training data is not here (see below)."
                        if any(job.total_steps is None for job in jobs) else ""))
    uncounted = sorted({b for job in jobs if job.evaluation is not None and eval_cost(job.evaluation)[1]
                        for b, count in job.evaluation.problems.items() if count is None})
    if uncounted:
        lines.append(f"eval GPU-h leave out {', '.join(uncounted)}: problem count unknown here (benchmark file not "
                     "found)")
    return lines


# the #SBATCH options that size a job: what a site's nodes and limits must offer for it to start
REQUEST_OPTIONS = ("--partition", "--account", "--qos", "--reservation", "--nodes", "--nodelist", "--gpus-per-node",
                   "--gpus", "--gpus-per-task", "--gres", "--cpus-per-task", "--cpus-per-gpu", "--mem",
                   "--mem-per-gpu", "--mem-per-cpu", "--constraint", "--time", "--exclusive")
_SBATCH = re.compile(r"^#SBATCH (--[\w-]+)(?:=(.*))?$", re.MULTILINE)


def _request(script: str) -> str:
    """A job script's resource request, as sbatch options (values unquoted as sbatch reads them)."""
    found = {option: sbatch_unquote(value) for option, value in _SBATCH.findall(script) if option in REQUEST_OPTIONS}
    return " ".join(o if not found[o] else f"{o}={found[o]}" for o in REQUEST_OPTIONS if o in found)


def request_lines(jobs: list) -> list[str]:
    """What the jobs ask Slurm for, read from their rendered scripts: each distinct request once, with how many
    training and evaluation jobs make it (sbatch refuses a request no node can satisfy)."""
    groups = Counter((kind, _request(text)) for job in jobs
                     for kind, text in [("training", job.text), *(("evaluation", e.text) for e in
                                                                  (job.evaluation.jobs if job.evaluation else ()))])
    return [f"{kind}, {count} job{'s' if count != 1 else ''}: {request}" for (kind, request), count in groups.items()]


def _grouped(pairs) -> dict[str, list[str]]:
    """``(text, run label)`` pairs as each distinct text (but "") with its runs, in order."""
    groups: dict[str, list[str]] = {}
    for text, label in pairs:
        if text:
            groups.setdefault(text, []).append(label)
    return groups


def readiness(jobs: list, workdir: Path) -> list[str]:
    """What a submit of ``jobs`` from ``workdir`` needs that is not here: one line each (what, then the command
    that fixes it); empty when a submit would go."""
    found = []
    for job in jobs:
        config = job.config
        if parquet_rows(config.data.train_files, workdir) is None:
            found.append((missing_data(config, workdir), job.run_label))
        path = str(config.actor_rollout_ref.model.path)
        missing = missing_model(path, workdir)
        if missing is not None:
            found.append((f"model {path}: {missing[0]}; {missing[1]}" + (
                f" (gated: accept its licence at huggingface.co/{path} and `hf auth login` first)"
                if path.startswith(GATED_PREFIXES) else ""), job.run_label))
    evaluated = [job for job in jobs if job.evaluation is not None]
    for line in benchmark_problems(evaluated[0].evaluation.spec, evaluated[0].evaluation.workdir) if evaluated else ():
        found += [(line, job.run_label) for job in evaluated]
    return [f"- {text} [{f'{len(runs)} runs' if len(runs) > 1 else runs[0]}]" for text, runs in _grouped(found).items()]


def eval_lines(job) -> list[str]:
    """What ``--dry-run --script-dir -`` prints about a run's evaluation after its training script."""
    ev = job.evaluation
    if ev is None:
        return []
    spec, sampling = ev.spec, ev.jobs[0].plan.sampling
    benches = ", ".join(
        f"{b} (prompt group {spec.benchmarks[b].group}, scorer {spec.benchmarks[b].scorer}"
        + (f"; {', '.join(spec.benchmarks[b].unset)} not set here, needed to submit" if spec.benchmarks[b].unset
           else "") + ")" for b in spec.final.benchmarks)
    lines = [f"### evaluation of {job.job_name} (run {job.run_label}): eval setting: preset {sampling.prompt_preset}, "
             f"{sampling.max_new_tokens} new tokens ({ev.jobs[0].plan.setting_source}); T={spec.temperature:g}, "
             f"top-p={spec.top_p:g}, seed {spec.seed}; benchmarks: {benches}"]
    why = missing_baseline(job)
    if job.baseline_job:
        lines.append(f"### checkpoint selection against the γ = 0 baseline run {job.baseline_job.run.name} (equal or "
                     "less compute)")
    elif why:
        lines.append(f"### no γ = 0 baseline for {job.run_label} in the recipe ({why}): its checkpoint is selected"
                     f" on its own scores, with no compute limit")
    for e in ev.jobs:
        p = e.plan.passes[e.phase]
        what = f"n={p.n} on every epoch checkpoint" if e.phase == "selection" else f"n={p.n} on the selected checkpoint"
        lines.append(f"### eval job {job.job_name} [{e.phase} pass: {what}, benchmarks {', '.join(p.benchmarks)}]"
                     f" after: {', '.join(e.depends_on)} (afterany), and singleton with the run's other jobs")
        # the ids exist only at submit (afterany:<job id>): on the command line, not in the script
        script = f"<script dir>/{script_name(job.job_name, e.phase)}"
        after = [f"afterany:<{d} job>" for d in e.depends_on]
        lines.append(f"### submitted as: {' '.join(sbatch_command(script, after))}")
        lines.append(e.text)
    if ev.memory_line:
        lines.append(f"### {ev.memory_line}")
    return lines + [f"### {line}" for line in eval_cost(ev)[0]]


def eval_total(jobs: list) -> list[str]:
    """The recipe's evaluation cost per protocol, with the formula and its assumptions."""
    evaluations = [job.evaluation for job in jobs if job.evaluation is not None]
    if not evaluations:
        return []
    spec = evaluations[0].spec
    known = [hours for hours in (eval_cost(ev)[1] for ev in evaluations) if hours]
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


def not_final(recipe, job) -> bool:
    """Whether ``job``'s dry-run script differs from the one a submit would render: a recipe with ``save_per_epoch``
    sets ``trainer.save_freq`` to the steps per epoch of the run's training data, which a submit requires and a dry
    run without the data cannot count (fgrpo_verl/launch/steps.py)."""
    return job.total_steps is None and recipe.save_per_epoch


def print_scripts(recipe, jobs) -> None:
    """Every job's scripts with what the dry run knows about each (``--dry-run --script-dir -``)."""
    incomplete = []
    for job in jobs:
        print(f"### job {job.job_name} (run {job.run_label}): {job.nodes} node(s) x {job.gpus_per_node} GPU(s); "
              f"{checkpoint_disk(job.config, job.total_steps)}")
        print(f"### {job.preflight}")
        if not_final(recipe, job):
            incomplete.append(job.run_label)
            print(f"### NOT the script a submit renders: training data {job.config.data.train_files} not found here, "
                  "so trainer.save_freq=<steps per epoch> (recipe save_per_epoch) is missing below; prepare the data "
                  "(docs/recipes.md) to see the exact script")
        print(job.text)
        for line in eval_lines(job):
            print(line)
    for line in eval_total(jobs):
        print(line)
    print(f"### {len(jobs)} job(s) from recipe {recipe.name} ({recipe.reproduces}); dry run, nothing submitted")
    if incomplete:
        print(f"fgrpo-verl launch: note: {len(incomplete)} of {len(jobs)} script(s) cannot be rendered exactly yet "
              f"(their training data is not here, see the '### NOT' lines): {', '.join(incomplete)}",
              file=sys.stderr)


def dry_run(recipe, jobs, script_dir: str | None, workdir: Path) -> bool:
    """Print the summary table, each distinct preflight, what a submit still needs; the scripts only on request.
    Whether a submit from ``workdir`` would go."""
    if script_dir == "-":
        print_scripts(recipe, jobs)
    print("\n".join(table_lines(recipe, jobs)))
    print("\nSlurm requests (each job's sbatch options, plus SBATCH_* from your environment; your site's nodes must "
          "offer them):")
    print("\n".join(f"  {line}" for line in request_lines(jobs)))
    preflight = _grouped((job.preflight, job.run_label) for job in jobs)
    if preflight:
        print("\npreflight (what verl's start-up and the GPUs' memory allow; docs/slurm.md):")
        for text, runs in preflight.items():
            print(f"  {runs[0] if len(runs) == 1 else f'{len(runs)} runs ({runs[0]}, ...)'}: {text}")
    # the printed scripts said it for each job
    baseless = _grouped((missing_baseline(job), job.run_label) for job in jobs if script_dir != "-")
    for why, labels in baseless.items():
        print(f"\nno γ = 0 baseline for {', '.join(labels[:3])}{f' and {len(labels) - 3} more' if len(labels) > 3 else ''}"
              f" ({why}): checkpoints selected on their own scores, with no compute limit")
    if script_dir and script_dir != "-":
        # each job's training and evaluation scripts, as a submit names them
        folder = Path(script_dir).resolve()
        folder.mkdir(parents=True, exist_ok=True)
        texts = {script_name(job.job_name): job.text for job in jobs}
        texts.update((script_name(job.job_name, e.phase), e.text) for job in jobs if job.evaluation
                     for e in job.evaluation.jobs)
        for name, text in texts.items():
            (folder / name).write_text(text, encoding="utf-8")
        print(f"\n{len(texts)} script(s) written to {folder} (as a submit would name them)")
        incomplete = [job.run_label for job in jobs if not_final(recipe, job)]
        if incomplete:
            print(f"NOT the scripts a submit renders for {len(incomplete)} run(s): their training data is not here, so "
                  "trainer.save_freq=<steps per epoch> (recipe save_per_epoch) is missing; prepare the data first")
    elif script_dir != "-":
        print("\nscripts: not printed; --script-dir DIR writes them, --script-dir - prints them with each job's details")
    missing = readiness(jobs, workdir)
    if missing:
        print(f"\nNOT READY: a submit from {workdir} would refuse until these are fixed:")
        print("\n".join(missing))
        return False
    print("\nready: a submit from here has every input it checks (data, models, benchmarks, scorers)")
    return True
