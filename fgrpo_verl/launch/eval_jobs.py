"""Evaluation work launched with a recipe's training runs: one Slurm job per evaluation pass and run, planned here
(its script, with the plan it carries) from the recipe's ``evaluation:`` block (eval_spec.py; every key in
docs/recipes.md "Format"); its memory (eval_memory.py), its baseline (eval_baseline.py), what the dry run says of it
(summary.py) and what a relaunch still submits (eval_submit.py).

Jobs per run (names: the run's Slurm job name, so ``--dependency=singleton`` keeps every job of a run, training
and evaluation, from running at the same time; they are told apart by the run record's ``eval_jobs``):

    training           (launch/plan.py)
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
import re
from collections import namedtuple
from pathlib import Path

from fgrpo_verl.evaluation.cost import KNOWN_PROBLEMS
from fgrpo_verl.evaluation.formats import load_benchmark
from fgrpo_verl.evaluation.model_presets import eval_setting
from fgrpo_verl.evaluation.plan import Baseline, BenchmarkFile, Pass, Passes, Plan, Sampling, Steps, Wandb
from fgrpo_verl.evaluation.scorers import resolve_scorer
from fgrpo_verl.job.wandb_online import logs_to_wandb
from fgrpo_verl.launch.disk import model_params
from fgrpo_verl.launch.eval_baseline import find_baselines
from fgrpo_verl.launch.eval_memory import eval_memory
from fgrpo_verl.launch.eval_spec import EvalSpec
from fgrpo_verl.launch.render import render_script, sbatch_directives

TEMPLATE = "eval.sbatch.template"
# Signal lead of an evaluation job: enough to stop a generation call and requeue
EVAL_SIGNAL_LEAD_S = 120
# One evaluation job of one run: its pass, its plan, what it runs after ("training", "selection", "baseline
# selection") and its script, rendered once (the ids it depends on are given to sbatch)
EvalJob = namedtuple("EvalJob", "phase plan depends_on text", defaults=("",))
# The evaluation of one planned run: its jobs and what its cost is computed from (summary.eval_cost): its EvalSpec,
# where the submit looks for the benchmark files and scorers (check_submission), benchmark -> problem count and the
# model's parameters (None: unknown here), and where the jobs' --mem comes from (eval_memory)
RunEvaluation = namedtuple("RunEvaluation", "jobs spec workdir problems params memory_line", defaults=("",))


def _steps(job) -> Steps:
    c = job.config
    per_epoch = bool(c.trainer.get("save_per_epoch")) and c.trainer.get("total_training_steps") is None
    return Steps(save_freq=int(c.trainer.save_freq), total=job.total_steps,
                 train_batch_size=int(c.data.train_batch_size), group_size=int(c.actor_rollout_ref.rollout.n),
                 epochs_only=int(c.trainer.total_epochs) if per_epoch else None)


def plan_for_run(spec: EvalSpec, recipe, job, workdir: Path, baseline_job=None) -> Plan:
    """The plan an evaluation job of ``job`` (a training JobScript) reads (eval_job.py)."""
    config = job.config
    setting = eval_setting(str(config.actor_rollout_ref.model.path), int(config.data.max_response_length),
                           spec.prompt_preset, spec.max_new_tokens)
    return Plan(
        recipe=recipe.name, run=job.run.name, experiment=job.job_name,
        project=str(config.trainer.project_name), run_dir=str(job.checkpoint_dir),
        gamma=float(config.algorithm.fgrpo.gamma),
        wandb=Wandb(run_id=job.wandb_run_id, log=logs_to_wandb(config.trainer.get("logger"))),
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
    """The job script of one evaluation pass (slurm/eval.sbatch.template) with its training job's exports; ``mem``:
    its sbatch --mem (eval_memory.py). Its dependencies on other jobs are not in it: the submit gives them to
    sbatch."""
    vllm = spec.backend == "vllm"
    resources = spec.resources.model_copy(update={"request_gpus": vllm and spec.resources.request_gpus,
                                                  "mem": mem or spec.resources.mem})
    directives = sbatch_directives(job.job_name, 1, spec.gpus_per_node if vllm else 0, resources, log_dir, workdir,
                                   (job.config.get("slurm") or {}).get("time"), EVAL_SIGNAL_LEAD_S)
    return render_script(TEMPLATE, recipe, job.run, directives, job.exports, PHASE=phase, EXPERIMENT=job.job_name,
                         PLAN=plan.to_json())


def attach_evaluation(recipe, jobs: list, plan_more, log_dir: Path, workdir: Path) -> list:
    """``jobs`` with their :class:`RunEvaluation` (``JobScript.evaluation``) and γ = 0 twin (``baseline_job``).
    ``plan_more(names)`` plans recipe runs that are not selected (a focal run's baseline outside ``--only``),
    without evaluation."""
    spec = EvalSpec.parse(recipe.evaluation, f"{recipe.path}: evaluation")
    names = {job.run.name for job in jobs}
    groups = {job.run.group for job in jobs if float(job.config.algorithm.fgrpo.gamma) > 0}
    others = [r.name for r in recipe.runs if r.group in groups and r.name not in names]
    baselines = find_baselines(jobs, [*jobs, *plan_more(others)])
    problems = {}
    for name, b in spec.benchmarks.items():
        path = Path(workdir) / b.file
        counted = len(load_benchmark(str(path), path.stem)) if not b.unset and path.is_file() else None
        problems[name] = counted if counted is not None else KNOWN_PROBLEMS.get(name)
    out = []
    for job in jobs:
        base = baselines[job.job_name]
        plan = plan_for_run(spec, recipe, job, workdir, base)
        params = model_params(str(job.config.actor_rollout_ref.model.path))
        mem, memory_line = eval_memory(spec, job.config, params)
        evals = [EvalJob(phase, plan, ("training",) if phase == "selection" else
                         ("selection",) + (("baseline selection",) if base is not None else ()),
                         render_eval_job(recipe, job, phase, plan, spec, log_dir, workdir, mem))
                 for phase in spec.passes()]
        evaluation = RunEvaluation(tuple(evals), spec, Path(workdir), problems, params, memory_line)
        out.append(dataclasses.replace(job, evaluation=evaluation, baseline_job=base))
    return out


def benchmark_problems(spec: EvalSpec, workdir: Path) -> list[str]:
    """What stops evaluation jobs from working, one line each with how to fix it: variables not set, benchmark
    files not found, scorers that do not resolve (the dry run lists them, a submit refuses them)."""
    unset, absent, unresolved = [], [], []
    for name, b in spec.benchmarks.items():
        if b.unset:
            unset.append(f"benchmark {name}: {', '.join(b.unset)} not set: export {b.unset[0]}=module:function "
                         "(a verifier you provide, importable on the compute nodes; README)")
            continue
        if not (Path(workdir) / b.file).is_file():
            absent.append((name, Path(workdir) / b.file))
        try:
            resolve_scorer(b.scorer)
        except (ValueError, ImportError, AttributeError) as exc:
            reason = re.sub(rf"^scorer {re.escape(repr(b.scorer))}:? ?", "", str(exc))
            fix = f"fix evaluation.benchmarks.{name}.scorer in the recipe (or the variable it reads)"
            if isinstance(exc, ImportError) or isinstance(exc.__cause__, ImportError):
                fix = f"put its module on PYTHONPATH here and on the compute nodes, or {fix}"
            unresolved.append(f"benchmark {name}: scorer {b.scorer!r} does not resolve here ({reason}): {fix}")
    if absent:
        folders = sorted({str(path.parent) for _, path in absent})
        unset.insert(0, f"benchmark file(s) of {', '.join(name for name, _ in absent)} not found in "
                        f"{', '.join(folders)}: fgrpo-verl prepare-benchmarks --out {folders[0]} --verl-parquet "
                        "(hub access; GPQA is gated: accept its terms and `hf auth login` first)")
    return unset + unresolved


def check_submission(jobs: list) -> None:
    """Refuse (ValueError naming each problem) evaluation that could not run, before anything is submitted."""
    evaluations = [job.evaluation for job in jobs if job.evaluation is not None]
    if not evaluations:
        return
    problems = benchmark_problems(evaluations[0].spec, evaluations[0].workdir)
    if problems:
        raise ValueError("the recipe's evaluation cannot run: " + "; ".join(problems) +
                         ". Fix the recipe's evaluation block or the files, or launch with --no-eval (training only)")
