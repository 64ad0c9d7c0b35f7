"""Evaluation work launched with a recipe's training runs: one Slurm job per evaluation pass and run, planned here
(its script, with the plan it carries) from the recipe's ``evaluation:`` block (eval_spec.py; every key in
docs/recipes.md "Format"); its memory (eval_memory.py), its baseline (eval_baseline.py), what the dry run says of it
(eval_dry_run.py) and what a relaunch still submits (eval_submit.py).

Jobs per run (names: the run's Slurm job name, so ``--dependency=singleton`` keeps every job of a run, training
and evaluation, from running at the same time; they are told apart by the run record's ``eval_jobs``):

    training           (launch/__init__.py)
    selection   afterany:<training>          every epoch checkpoint: merge, evaluate, W&B
    final       afterany:<selection>, afterany:<the γ = 0 baseline's selection>    (protocol select only)

Each script is rendered once, when the launch plans it; the job ids it waits for are known only at submit, so they
go on sbatch's command line (render.sbatch), never into the script.

afterany: an evaluation runs whatever way its training ended (a failed run's checkpoints are evaluated too; its
final pass then refuses until the run is finished). A training job that requeues itself keeps its job id and is
not ended, so its evaluation waits. ``--fresh`` runs have their own directories, jobs and evaluations.
"""

from __future__ import annotations

import dataclasses
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

from fgrpo_verl.evaluation.cost import KNOWN_PROBLEMS
from fgrpo_verl.evaluation.plan import Baseline, BenchmarkFile, Pass, Passes, Plan, Sampling, Steps, Wandb
from fgrpo_verl.launch.eval_memory import eval_memory
from fgrpo_verl.launch.eval_spec import EvalSpec, load_eval_spec

TEMPLATE = "eval.sbatch.template"
# Signal lead of an evaluation job: enough to stop a generation call and requeue
EVAL_SIGNAL_LEAD_S = 120


@dataclass(frozen=True)
class EvalJob:
    """One evaluation job of one run: its script, rendered once (the ids it depends on are given to sbatch)."""

    phase: str
    plan: Plan
    depends_on: tuple[str, ...]   # "training", "selection", "baseline selection"
    text: str = ""

    def after(self) -> list[str]:
        """Its dependencies as the dry run shows them (at submit: afterany:<job id>)."""
        return [f"afterany:<{d} job>" for d in self.depends_on]


@dataclass(frozen=True)
class RunEvaluation:
    """The evaluation of one planned run: its jobs, the setting each benchmark is evaluated with, the cost."""

    setting_line: str
    jobs: tuple[EvalJob, ...]
    cost_lines: tuple[str, ...]
    baseline: str | None = None   # the γ = 0 run (recipe run name) a focal run is selected against
    problems: dict = field(default_factory=dict)
    # what the submit checks (check_submission)
    spec: EvalSpec | None = None
    recipe: object = None
    workdir: Path | None = None
    hours: dict = field(default_factory=dict)  # protocol -> GPU-hours (None: unknown)
    memory_line: str = ""   # where the jobs' --mem comes from (eval_memory)


def _count_problems(path: Path) -> int | None:
    if not path.is_file():
        return None
    from fgrpo_verl.evaluation.formats import load_benchmark

    return len(load_benchmark(str(path), path.stem))


def _steps(job) -> Steps:
    c = job.config
    per_epoch = bool(c.trainer.get("save_per_epoch")) and c.trainer.get("total_training_steps") is None
    return Steps(save_freq=int(c.trainer.save_freq), total=job.total_steps,
                 train_batch_size=int(c.data.train_batch_size), group_size=int(c.actor_rollout_ref.rollout.n),
                 epochs_only=int(c.trainer.total_epochs) if per_epoch else None)


def plan_for_run(spec: EvalSpec, recipe, job, workdir: Path, baseline_job=None) -> Plan:
    """The plan an evaluation job of ``job`` (a training JobScript) reads (eval_job.py)."""
    from fgrpo_verl.evaluation.model_presets import eval_setting

    config = job.config
    setting = eval_setting(str(config.actor_rollout_ref.model.path), int(config.data.max_response_length),
                           spec.prompt_preset, spec.max_new_tokens)
    logger = config.trainer.get("logger") or []
    logger = [logger] if isinstance(logger, str) else list(logger)
    return Plan(
        recipe=recipe.name, run=job.run.name, experiment=job.job_name,
        project=str(config.trainer.project_name), run_dir=str(job.checkpoint_dir),
        gamma=float(config.algorithm.fgrpo.gamma),
        wandb=Wandb(run_id=job.wandb_run_id, log="wandb" in logger),
        steps=_steps(job),
        benchmarks={name: BenchmarkFile(file=str(Path(workdir) / b.file), scorer=b.scorer, group=b.group)
                    for name, b in spec.benchmarks.items()},
        averages=spec.averages, select_by=spec.select_by,
        passes=Passes(**{phase: Pass(n=p.n, benchmarks=p.benchmarks) for phase, p in
                         {"selection": spec.passes()["selection"], "final": spec.final}.items()}),
        protocol=spec.protocol,
        sampling=Sampling(backend=spec.backend, temperature=spec.temperature, top_p=spec.top_p, seed=spec.seed,
                          threshold=spec.threshold, prompt_preset=setting.preset,
                          max_new_tokens=setting.max_new_tokens),
        setting_source=setting.source, engine=spec.engine, gpus=spec.gpus_per_node, workers=spec.workers,
        baseline=None if baseline_job is None else Baseline(
            run=baseline_job.run.name, experiment=baseline_job.job_name,
            run_dir=str(baseline_job.checkpoint_dir), steps=_steps(baseline_job)),
    )


def render_eval_job(recipe, job, phase: str, plan: Plan, spec: EvalSpec, log_dir: Path, workdir: Path,
                    mem: str | None = None) -> str:
    """The job script of one evaluation pass (slurm/eval.sbatch.template); ``mem``: its sbatch --mem
    (eval_memory.py). Its dependencies on other jobs are not in it: the submit gives them to sbatch."""
    from fgrpo_verl.config.paths import slurm_dir
    from fgrpo_verl.job.tracking import config_run_tags
    from fgrpo_verl.launch.render import check_value, job_environment, render_template, sbatch_directives, shell_exports

    config = job.config
    env = dict(recipe.env)
    env.update(job_environment(config, workdir, recipe.name, [*config_run_tags(config), f"group:{job.run.group}"]))
    env.update(WANDB_RUN_ID=job.wandb_run_id, FGRPO_RUN=job.run.name, FGRPO_PYTHON=sys.executable,
               FGRPO_CHECKPOINT_DIR=str(job.checkpoint_dir), FGRPO_FINGERPRINT=job.fingerprint)
    resources = spec.resources
    time = resources.time or (config.get("slurm") or {}).get("time")
    directives = sbatch_directives(job.job_name, 1, spec.gpus_per_node if spec.backend == "vllm" else 0,
                                   dataclasses.replace(resources, request_gpus=spec.backend == "vllm"
                                                       and resources.request_gpus, mem=mem or resources.mem),
                                   log_dir, workdir, time, EVAL_SIGNAL_LEAD_S)
    template = (slurm_dir() / TEMPLATE).read_text(encoding="utf-8")
    return render_template(template, {
        "SBATCH": "\n".join(directives),
        "RECIPE": shlex.quote(check_value("recipe path", recipe.path)),
        "RUN": check_value("run name", job.run.name),
        "PHASE": phase,
        "EXPERIMENT": job.job_name,
        "EXPORTS": shell_exports(env),
        "PLAN": plan.to_json(),
    })


def plan_evaluation(spec: EvalSpec, recipe, jobs: list, log_dir: Path, workdir: Path, baseline_jobs: dict) -> list:
    """A :class:`RunEvaluation` per training job; ``baseline_jobs[job_name]`` is that run's γ = 0 twin's JobScript
    (or None)."""
    from fgrpo_verl.launch.disk import model_params
    from fgrpo_verl.launch.eval_dry_run import describe_cost

    problems = {}
    for name, b in spec.benchmarks.items():
        counted = None if b.unset else _count_problems(Path(workdir) / b.file)
        problems[name] = counted if counted is not None else KNOWN_PROBLEMS.get(name)
    out = []
    for job in jobs:
        base = baseline_jobs.get(job.job_name)
        plan = plan_for_run(spec, recipe, job, workdir, base)
        params = model_params(str(job.config.actor_rollout_ref.model.path))
        mem, memory_line = eval_memory(spec, job.config, params)
        evals = []
        for phase in spec.passes():
            deps = ("training",) if phase == "selection" else \
                ("selection",) + (("baseline selection",) if base is not None else ())
            text = render_eval_job(recipe, job, phase, plan, spec, log_dir, workdir, mem)
            evals.append(EvalJob(phase, plan, deps, text))
        benches = ", ".join(
            f"{b} (prompt group {spec.benchmarks[b].group}, scorer {spec.benchmarks[b].scorer}"
            + (f"; {', '.join(spec.benchmarks[b].unset)} not set here, needed to submit" if spec.benchmarks[b].unset
               else "") + ")" for b in spec.final.benchmarks)
        setting = (f"eval setting: preset {plan.sampling.prompt_preset}, {plan.sampling.max_new_tokens} "
                   f"new tokens ({plan.setting_source}); T={spec.temperature:g}, top-p={spec.top_p:g}, seed "
                   f"{spec.seed}; benchmarks: {benches}")
        cost, hours = describe_cost(spec, plan, params, problems)
        out.append(RunEvaluation(setting, tuple(evals), tuple(cost), None if base is None else base.run.name, problems,
                                 spec, recipe, Path(workdir), hours, memory_line))
    return out


def attach_evaluation(recipe, jobs: list, plan_more, log_dir: Path, workdir: Path) -> list:
    """``jobs`` with their :class:`RunEvaluation` (``JobScript.evaluation``). ``plan_more(names)`` plans recipe runs
    that are not selected (a focal run's baseline outside ``--only``), without evaluation."""
    from fgrpo_verl.launch.eval_baseline import find_baseline

    spec = load_eval_spec(recipe.evaluation, str(recipe.path))
    names = {job.run.name for job in jobs}
    candidates = list(jobs)
    groups = {job.run.group for job in jobs if float(job.config.algorithm.fgrpo.gamma) > 0}
    others = [r.name for r in recipe.runs if r.group in groups and r.name not in names]
    if others:
        candidates += plan_more(others)
    texts: dict = {}
    baselines = {job.job_name: find_baseline(job, candidates, texts) for job in jobs}
    evaluations = plan_evaluation(spec, recipe, jobs, log_dir, workdir, baselines)
    return [dataclasses.replace(job, evaluation=ev, baseline_job=baselines[job.job_name])
            for job, ev in zip(jobs, evaluations)]


def benchmark_gaps(spec: EvalSpec, workdir: Path) -> dict[str, list]:
    """What stops evaluation jobs from working, by kind: ``unset`` (benchmark, variables), ``absent``
    (benchmark, file), ``unresolved`` (benchmark, scorer, why)."""
    from fgrpo_verl.evaluation.scorers import resolve_scorer

    gaps = {"unset": [], "absent": [], "unresolved": []}
    for name, b in spec.benchmarks.items():
        if b.unset:
            gaps["unset"].append((name, list(b.unset)))
            continue
        if not (Path(workdir) / b.file).is_file():
            gaps["absent"].append((name, Path(workdir) / b.file))
        try:
            resolve_scorer(b.scorer)
        except (ValueError, ImportError, AttributeError) as exc:
            gaps["unresolved"].append((name, b.scorer, exc))
    return gaps


def submission_problems(spec: EvalSpec, workdir: Path) -> list[str]:
    """:func:`benchmark_gaps` as one sentence each, found before anything is submitted."""
    gaps = benchmark_gaps(spec, workdir)
    return ([f"benchmark {name}: environment variable(s) {names} not set" for name, names in gaps["unset"]]
            + [f"benchmark {name}: file {path} not found (fgrpo-verl prepare-benchmarks writes the paper's)"
               for name, path in gaps["absent"]]
            + [f"benchmark {name}: scorer {scorer!r} does not resolve ({exc})"
               for name, scorer, exc in gaps["unresolved"]])


def check_submission(jobs: list) -> None:
    """Refuse (ValueError naming each problem) evaluation that could not run, before anything is submitted."""
    evaluations = [job.evaluation for job in jobs if job.evaluation is not None]
    if not evaluations:
        return
    problems = submission_problems(evaluations[0].spec, evaluations[0].workdir)
    if problems:
        raise ValueError("the recipe's evaluation cannot run: " + "; ".join(problems) +
                         ". Fix the recipe's evaluation block or the files, or launch with --no-eval (training only)")
