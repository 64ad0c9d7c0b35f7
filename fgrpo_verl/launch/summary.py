"""What ``fgrpo-verl launch --dry-run`` prints: a table with one row per run (nodes x GPUs, steps, training and
evaluation GPU-hours, checkpoint storage, preflight) and the recipe's totals, then what a submit needs that is
not here, one line each with the command that fixes it. The scripts themselves go to a folder on request
(``--script-dir DIR``; ``-``: standard output).

The readiness list is made of the checks a submit runs before anything reaches Slurm (training data:
``plan_jobs(require_data=True)`` with :func:`fgrpo_verl.launch.steps.train_rows`; models:
:func:`fgrpo_verl.preflight.models.missing_model` in the preflight; evaluation: :func:`eval_jobs.benchmark_gaps`),
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
from collections import OrderedDict
from pathlib import Path

# Hub organisations whose models need an accepted licence and a login before `hf download` works
GATED_PREFIXES = ("meta-llama/",)


def _assumptions(job):
    from fgrpo_verl.evaluation.cost import CostAssumptions

    ev = job.evaluation
    return ev.spec.cost if ev is not None and ev.spec is not None else CostAssumptions()


def training_gpu_hours_per_step(config, params: float, a) -> float:
    """GPU-hours of one training step of ``config`` (module docstring)."""
    from fgrpo_verl.evaluation.cost import REFERENCE_PARAMS

    samples = int(config.data.train_batch_size) * int(config.actor_rollout_ref.rollout.n)
    response = a.mean_response_fraction * int(config.data.max_response_length)
    length = a.mean_response_fraction * (int(config.data.max_prompt_length) + int(config.data.max_response_length))
    rollout_s = samples * response / (a.tokens_per_gpu_second_7b * REFERENCE_PARAMS / params)
    kl = bool(config.actor_rollout_ref.actor.get("use_kl_loss")) or bool(config.algorithm.get("use_kl_in_reward"))
    passes = 6 + 2 + (2 if kl else 0)
    update_s = passes * params * samples * length / a.training_flops_per_gpu_second
    return (rollout_s + update_s) / 3600.0


def _hours(value: float | None) -> str:
    return "?" if value is None else f"{value:,.0f}" if value >= 10 else f"{value:,.1f}"


def _row(job) -> dict:
    from fgrpo_verl.launch.disk import checkpoint_storage, model_params

    params = model_params(str(job.config.actor_rollout_ref.model.path))
    per_step = None if params is None else training_gpu_hours_per_step(job.config, params, _assumptions(job))
    train = None if per_step is None or job.total_steps is None else per_step * job.total_steps
    ev = job.evaluation
    chosen = None if ev is None or not ev.hours else ev.hours["select" if ev.spec.protocol == "select" else "full"]
    storage = checkpoint_storage(job.config, job.total_steps)
    return {"run": job.run_label, "shape": f"{job.nodes} x {job.gpus_per_node}",
            "steps": "?" if job.total_steps is None else str(job.total_steps),
            "per_step": per_step, "train": train, "eval": chosen, "has_eval": ev is not None,
            "storage": None if storage is None else storage[2],
            "preflight": "passed" if job.preflight else "not checked"}


def table_lines(recipe, jobs: list) -> list[str]:
    """The summary table and its totals, then the assumptions behind its numbers."""
    from fgrpo_verl.launch.disk import size_text

    rows = [_row(job) for job in jobs]
    header = ("run", "nodes x GPUs", "steps", "train GPU-h", "eval GPU-h", "checkpoints", "preflight")
    cells = []
    for r in rows:
        train = _hours(r["train"]) if r["train"] is not None else (
            "?" if r["per_step"] is None else f"? ({r['per_step']:.2f}/step)")
        cells.append((r["run"], r["shape"], r["steps"], train, _hours(r["eval"]) if r["has_eval"] else "-",
                       "?" if r["storage"] is None else size_text(r["storage"]), r["preflight"]))

    def total(key):
        values = [r[key] for r in rows]
        return sum(v for v in values if v is not None), sum(v is None for v in values)

    train_sum, train_unknown = total("train")
    eval_rows = [r for r in rows if r["has_eval"]]
    eval_sum = sum(r["eval"] or 0 for r in eval_rows)
    eval_unknown = sum(r["eval"] is None for r in eval_rows)
    disk_sum, disk_unknown = total("storage")

    def with_unknown(text, unknown, count):
        return "?" if unknown == count else text + (f" + {unknown} unknown" if unknown else "")

    per_step = [r["per_step"] for r in rows if r["train"] is None and r["per_step"] is not None]
    train_total = with_unknown(_hours(train_sum), train_unknown, len(rows))
    if train_total == "?" and per_step:
        train_total = f"? ({sum(per_step):.1f}/step)"
    cells.append((f"total ({len(rows)} run{'' if len(rows) == 1 else 's'})", "", "", train_total,
                  with_unknown(_hours(eval_sum), eval_unknown, len(eval_rows)) if eval_rows else "-",
                  with_unknown(size_text(disk_sum), disk_unknown, len(rows)), ""))
    widths = [max(len(str(c[i])) for c in [header, *cells]) for i in range(len(header))]

    def fmt(c):
        return "  ".join(str(v).ljust(w) if i == 0 else str(v).rjust(w) for i, (v, w) in enumerate(zip(c, widths)))

    lines = [f"recipe {recipe.name} ({recipe.reproduces}): {len(jobs)} run(s); dry run, nothing submitted", "",
             fmt(header), *[fmt(c) for c in cells[:-1]], "-" * len(fmt(header)), fmt(cells[-1]), ""]
    a = _assumptions(jobs[0]) if jobs else None
    if a is not None:
        lines.append(f"GPU-hours are planning estimates (fgrpo_verl/launch/summary.py, evaluation/cost.py): "
                     f"{a.describe()}; training {a.training_flops_per_gpu_second:.1e} FLOP/s per GPU sustained."
                     + (" '?' steps: the training data is not here (see below)." if any(r["steps"] == "?" for r in rows)
                        else ""))
    uncounted = sorted({b for job in jobs if job.evaluation is not None and job.evaluation.hours
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
    from fgrpo_verl.launch.render import sbatch_unquote

    found = {option: sbatch_unquote(value) for option, value in _SBATCH.findall(script) if option in REQUEST_OPTIONS}
    return " ".join(o if not found[o] else f"{o}={found[o]}" for o in REQUEST_OPTIONS if o in found)


def request_lines(jobs: list) -> list[str]:
    """What the jobs ask Slurm for, read from their rendered scripts: each distinct request once, with how many
    training and evaluation jobs make it (sbatch refuses a request no node can satisfy)."""
    groups: OrderedDict[tuple[str, str], int] = OrderedDict()
    for job in jobs:
        key = ("training", _request(job.text))
        groups[key] = groups.get(key, 0) + 1
        for ev in job.evaluation.jobs if job.evaluation is not None else ():
            key = ("evaluation", _request(ev.text))
            groups[key] = groups.get(key, 0) + 1
    return [f"{kind}, {count} job{'s' if count != 1 else ''}: {request}" for (kind, request), count in groups.items()]


def preflight_lines(jobs: list) -> list[str]:
    """Each distinct preflight summary once, with the runs it is about."""
    groups: OrderedDict[str, list[str]] = OrderedDict()
    for job in jobs:
        if job.preflight:
            groups.setdefault(job.preflight, []).append(job.run_label)
    lines = []
    for text, runs in groups.items():
        who = runs[0] if len(runs) == 1 else f"{len(runs)} runs ({runs[0]}, ...)"
        lines.append(f"{who}: {text}")
    return lines


def readiness(jobs: list, workdir: Path) -> list[str]:
    """What a submit of ``jobs`` from ``workdir`` needs that is not here: one line each (what, then the command
    that fixes it); empty when a submit would go."""
    from fgrpo_verl.launch.eval_jobs import benchmark_gaps
    from fgrpo_verl.preflight.models import missing_model
    from fgrpo_verl.launch.steps import train_rows

    items: OrderedDict[str, list[str]] = OrderedDict()
    for job in jobs:
        config = job.config
        if train_rows(config, workdir) is None:
            how = ("fgrpo-verl prepare-deepscaler --input deepscaler.json --tokenizer <model> --out-dir data/deepscaler"
                   if "deepscaler" in str(config.data.train_files) else "the recipe's header says how")
            items.setdefault(f"training data {config.data.train_files} not found under {workdir}: prepare it ({how}),"
                             " or launch from the directory that holds it", []).append(job.run_label)
        path = str(config.actor_rollout_ref.model.path)
        missing = missing_model(path, workdir)
        if missing is not None:
            gated = path.startswith(GATED_PREFIXES)
            items.setdefault(f"model {path}: {missing[0]}; {missing[1]}" + (
                f" (gated: accept its licence at huggingface.co/{path} and `hf auth login` first)" if gated else ""),
                []).append(job.run_label)
    evaluated = [job for job in jobs if job.evaluation is not None]
    if evaluated:
        runs = [job.run_label for job in evaluated]
        gaps = benchmark_gaps(evaluated[0].evaluation.spec, evaluated[0].evaluation.workdir)
        if gaps["absent"]:
            folders = sorted({str(path.parent) for _, path in gaps["absent"]})
            items[f"benchmark file(s) of {', '.join(name for name, _ in gaps['absent'])} not found in "
                  f"{', '.join(folders)}: fgrpo-verl prepare-benchmarks --out {folders[0]} --verl-parquet "
                  "(hub access; GPQA is gated: accept its terms and `hf auth login` first)"] = runs
        for name, names in gaps["unset"]:
            items[f"benchmark {name}: {', '.join(names)} not set: export {names[0]}=module:function "
                  "(a verifier you provide, importable on the compute nodes; README)"] = runs
        for name, scorer, exc in gaps["unresolved"]:
            reason = re.sub(rf"^scorer {re.escape(repr(scorer))}:? ?", "", str(exc))
            fix = f"fix evaluation.benchmarks.{name}.scorer in the recipe (or the variable it reads)"
            if isinstance(exc, ImportError) or isinstance(exc.__cause__, ImportError):
                fix = f"put its module on PYTHONPATH here and on the compute nodes, or {fix}"
            items[f"benchmark {name}: scorer {scorer!r} does not resolve here ({reason}): {fix}"] = runs
    lines = []
    for text, runs in items.items():
        who = f"{len(runs)} runs" if len(runs) > 1 else runs[0]
        lines.append(f"- {text} [{who}]")
    return lines


def write_scripts(jobs: list, script_dir: Path) -> list[Path]:
    """Each job's training script and evaluation scripts, as a submit names them (``<job>.sbatch``,
    ``<job>-<pass>.sbatch``)."""
    from fgrpo_verl.launch.render import script_name

    script_dir.mkdir(parents=True, exist_ok=True)
    texts = {}
    for job in jobs:
        texts[script_name(job.job_name)] = job.text
        for e in job.evaluation.jobs if job.evaluation is not None else ():
            texts[script_name(job.job_name, e.phase)] = e.text
    for name, text in texts.items():
        (script_dir / name).write_text(text, encoding="utf-8")
    return [script_dir / name for name in texts]
