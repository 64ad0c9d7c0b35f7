"""Evaluation work launched with a recipe's training runs: one Slurm job per evaluation pass and run, its
dependencies, its cost, and what a relaunch still has to submit. The recipe's ``evaluation:`` block (eval_spec.py):

    evaluation:
      benchmarks:                       # NAME: file, or NAME: {file, scorer, group}; ${VAR} / ${VAR:-default} expand
        AIME24: ${FGRPO_BENCH_DIR:-data/benchmarks}/AIME24.jsonl
        SynLogic: {file: ..., scorer: "${FGRPO_SYNLOGIC_SCORER}"}
      averages: {Math Avg: [AIME24, ...], OOD Avg: [IFEval, SynLogic, GPQA]}
      select_by: Math Avg               # the score of the protocol (paper: average in-domain math pass@1)
      selection: {n: 32}                # pass 1, every epoch checkpoint; benchmarks default: select_by's
      final: {n: 1024}                  # pass 2, the selected checkpoint; benchmarks default: all
      protocol: select                  # or full: the final pass's n and benchmarks on every checkpoint
      backend: vllm                     # fgrpo-verl eval --backend
      prompt_preset / max_new_tokens:   # only for models that are not the paper's (model_presets.py)
      engine: {tensor_parallel_size: 1} # more fgrpo-verl eval options (gpu_memory_utilization, device, ...)
      gpus_per_node: 8                  # GPUs of an evaluation job (one node); GPUs / TP worker processes
      workers: 1                        # worker processes on the CPU back-end (no GPUs)
      resources: {time: "1-00:00:00"}   # sbatch settings of evaluation jobs (as a recipe's resources)
      cost: {tokens_per_gpu_second_7b: 5000, mean_response_fraction: 0.25}   # cost.py assumptions
      tables: [table1, table6, curves]  # what `fgrpo-verl report` builds

Jobs per run (names: the run's Slurm job name, so ``--dependency=singleton`` keeps every job of a run, training
and evaluation, from running at the same time; they are told apart by the run record's ``eval_jobs``):

    training           (launch/__init__.py)
    selection   afterany:<training>          every epoch checkpoint: merge, evaluate, W&B
    final       afterany:<selection>, afterany:<the γ = 0 baseline's selection>    (protocol select only)

Each script is rendered once, when the launch plans it; the job ids it waits for are known only at submit, so they
go on sbatch's command line (render.sbatch), never into the script.

afterany: an evaluation runs whatever way its training ended (a failed run's checkpoints are evaluated too; its
final pass then refuses until the run is finished). A training job that requeues itself keeps its job id and is
not ended, so its evaluation waits. A relaunch submits what is missing: training that is not done (as before), a
selection pass for runs with unevaluated checkpoints, a final pass for runs without a current final result; not
for a run with an evaluation job queued or running. ``--fresh`` runs have their own directories, jobs and
evaluations. The baseline of a focal run is the recipe run with the same config except γ = 0.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

from fgrpo_verl.evaluation.cost import KNOWN_PROBLEMS, PassPlan, pass_gpu_hours, protocol_hours
from fgrpo_verl.evaluation.plan import Baseline, BenchmarkFile, Pass, Passes, Plan, Sampling, Steps, Wandb
from fgrpo_verl.launch.eval_spec import EvalSpec, load_eval_spec  # noqa: F401 (load_eval_spec: callers)
from fgrpo_verl.launch.recipe import MEMORY_OPTIONS

TEMPLATE = "eval.sbatch.template"
# Signal lead of an evaluation job: enough to stop a generation call and requeue
EVAL_SIGNAL_LEAD_S = 120

# Host memory of an evaluation job (sbatch --mem, per node), from the parameter count P of the run's model and the
# number W of FSDP ranks whose shards make up a checkpoint (trainer.nnodes x trainer.n_gpus_per_node). The most is
# held by verl's model merger (run once per checkpoint, before any evaluation): it loads every rank's fp32 shard
# (4 B/param in all) and keeps them until each tensor has its bf16 copy (2 B/param), with rank 0's shard loaded a
# second time and held to the end (4/W B/param); it then saves from the bf16 tensors and an empty bf16 model
# (4 B/param + 4/W), less. The evaluation after it streams bf16 weights to the GPUs. A fixed allowance covers the
# interpreter, torch and the tokenizer:
#     mem = (6 + 4/W) x P B + 4 GiB, rounded up to whole GiB      (7.62B params, W = 16: 49 GiB)
# Each evaluation worker (gpus_per_node / tensor_parallel_size vLLM engines, each a process with its own CUDA
# context, engine core and tokenizer on the host) merges a checkpoint under the merge lock and then samples from
# it, so one worker's merge of the next checkpoint runs beside the other workers' engines: the job asks for both,
# with VLLM_WORKER_HOST_GIB per engine: an allowance, not a measurement (no GPU measured it here).
# Without it a site's default memory per job (often a few GB) kills the merger. A recipe's
# evaluation.resources.mem replaces it; a memory option in evaluation.resources.extra (--mem-per-gpu,
# --mem-per-cpu: sbatch refuses them beside --mem) leaves it out.
#     mem = (6 + 4/W) x P B + E x 8 GiB + 4 GiB, rounded up                 (7.62B, W = 16, E = 8: 113 GiB)
MERGE_BYTES_PER_PARAM = 6
EVAL_MEM_ALLOWANCE_GIB = 4
VLLM_WORKER_HOST_GIB = 8


def eval_host_memory(params: float, world_size: int, engines: int = 0) -> str:
    """sbatch --mem of an evaluation job of a ``params``-parameter model trained on ``world_size`` ranks, evaluated
    by ``engines`` vLLM engines (above)."""
    merge = (MERGE_BYTES_PER_PARAM + 4 / max(1, world_size)) * params / 2**30
    return f"{math.ceil(merge + engines * VLLM_WORKER_HOST_GIB + EVAL_MEM_ALLOWANCE_GIB)}G"


def eval_memory(spec: EvalSpec, config, params: float | None) -> tuple[str | None, str]:
    """(sbatch --mem of the run's evaluation jobs or None, the dry run's line saying where it comes from)."""
    # Resources refuses a --mem beside another memory option (sbatch takes one)
    given = [o for o in spec.resources.extra if o.partition("=")[0] in MEMORY_OPTIONS]
    if spec.resources.mem is not None:
        return spec.resources.mem, f"eval job memory: --mem={spec.resources.mem} (evaluation.resources.mem)"
    if given:
        return None, f"eval job memory: {given[0]} (evaluation.resources.extra; no --mem beside it)"
    model = str(config.actor_rollout_ref.model.path)
    if params is None:
        return None, (f"eval job memory: no --mem (parameter count of {model} not known here): the site's default "
                      "per job, which may be too small for verl's model merger; set evaluation.resources.mem")
    world = int(config.trainer.nnodes) * int(config.trainer.n_gpus_per_node)
    # vLLM engines on GPUs; the CPU back-end's workers hold the model in the same host memory the merge needed
    engines = spec.gpus_per_node // int(spec.engine.get("tensor_parallel_size", 1)) if spec.backend == "vllm" else 0
    mem = eval_host_memory(params, world, engines)
    return mem, (f"eval job memory: --mem={mem} = verl's model merger, ({MERGE_BYTES_PER_PARAM} + 4/{world}) B x "
                 f"{params / 1e9:.2f}B params, beside {engines} vLLM engine(s) x {VLLM_WORKER_HOST_GIB} GiB, + "
                 f"{EVAL_MEM_ALLOWANCE_GIB} GiB (evaluation.resources.mem overrides)")


# ------------------------------------------------------------------------------------------------ per-run plan
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


def plan_for_run(spec: EvalSpec, recipe, job, workdir: Path, baseline_job=None) -> Plan:
    """The plan an evaluation job of ``job`` (a training JobScript) reads (checkpoint_eval.py)."""
    from fgrpo_verl.evaluation.model_presets import eval_setting

    config = job.config
    setting = eval_setting(str(config.actor_rollout_ref.model.path), int(config.data.max_response_length),
                           spec.prompt_preset, spec.max_new_tokens)
    logger = config.trainer.get("logger") or []
    logger = [logger] if isinstance(logger, str) else list(logger)

    def steps_of(j) -> Steps:
        c = j.config
        per_epoch = bool(c.trainer.get("save_per_epoch")) and c.trainer.get("total_training_steps") is None
        return Steps(save_freq=int(c.trainer.save_freq), total=j.total_steps,
                     train_batch_size=int(c.data.train_batch_size), group_size=int(c.actor_rollout_ref.rollout.n),
                     epochs_only=int(c.trainer.total_epochs) if per_epoch else None)

    return Plan(
        recipe=recipe.name, run=job.run.name, experiment=job.job_name,
        project=str(config.trainer.project_name), run_dir=str(job.checkpoint_dir),
        gamma=float(config.algorithm.fgrpo.gamma),
        wandb=Wandb(run_id=job.wandb_run_id, log="wandb" in logger),
        steps=steps_of(job),
        benchmarks={b.name: BenchmarkFile(file=str(Path(workdir) / b.file), scorer=b.scorer, group=b.group)
                    for b in spec.benchmarks.values()},
        averages={k: tuple(v) for k, v in spec.averages.items()},
        select_by=spec.select_by,
        passes=Passes(selection=spec.passes()["selection"], final=spec.final),
        protocol=spec.protocol,
        sampling=Sampling(backend=spec.backend, **spec.sampling, prompt_preset=setting.preset,
                          max_new_tokens=setting.max_new_tokens),
        setting_source=setting.source,
        engine=dict(spec.engine),
        gpus=spec.gpus_per_node,
        workers=spec.workers,
        baseline=None if baseline_job is None else Baseline(
            run=baseline_job.run.name, experiment=baseline_job.job_name,
            run_dir=str(baseline_job.checkpoint_dir), steps=steps_of(baseline_job)),
    )


def render_eval_job(recipe, job, phase: str, plan: Plan, spec: EvalSpec, log_dir: Path, workdir: Path,
                    mem: str | None = None) -> str:
    """The job script of one evaluation pass (slurm/eval.sbatch.template); ``mem``: its sbatch --mem
    (:func:`eval_memory`). Its dependencies on other jobs are not in it: :func:`submit_eval_jobs` gives them to
    sbatch."""
    from fgrpo_verl.launch.render import check_value, job_environment, render_template, sbatch_directives, shell_exports
    from fgrpo_verl.config.paths import slurm_dir
    from fgrpo_verl.job.tracking import config_run_tags

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


# Settings of training-time validation: they do not change what is trained, so a focal run validating on AIME25
# (validation=aime25) is still selected against its γ = 0 twin that does not (paper_main's Qwen3 runs, App. P)
VALIDATION_KEYS = ("trainer.test_freq", "trainer.val_before_train", "trainer.val_only", "data.val_files",
                   "data.val_batch_size", "actor_rollout_ref.rollout.val_kwargs")


def _as_value(node):
    """Numbers as the values they are: a recipe may write ``0`` where another writes ``0.0`` (bools stay bools)."""
    if isinstance(node, dict):
        return {k: _as_value(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_as_value(v) for v in node]
    if isinstance(node, int) and not isinstance(node, bool):
        return float(node)
    return node


def _config_text(job, gamma: float | None = None) -> str:
    """The job's resolved config as text with its own name taken out (values interpolate it), numbers compared as
    values, without validation settings and, when given, with γ replaced: two runs with equal texts train the same
    but for γ."""
    from omegaconf import OmegaConf

    tree = _as_value(OmegaConf.to_container(job.config, resolve=True))
    if gamma is not None:
        tree["algorithm"]["fgrpo"]["gamma"] = float(gamma)
    for dotted in VALIDATION_KEYS:
        *parents, last = dotted.split(".")
        node = tree
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(last, None)
    return json.dumps(tree, sort_keys=True, default=str).replace(job.job_name, "<experiment>")


def find_baseline(job, candidates: list, texts: dict | None = None):
    """The job among ``candidates`` whose config is ``job``'s with γ = 0 (None for γ = 0 or when absent).
    ``texts``: a cache of :func:`_config_text` kept across calls over the same candidates (a recipe's 36 runs
    compare each focal run with every baseline: one text per job, not one per pair)."""
    if float(job.config.algorithm.fgrpo.gamma) == 0:
        return None
    texts = {} if texts is None else texts

    def text(j, gamma: float | None = None) -> str:
        key = (id(j), gamma)
        if key not in texts:
            texts[key] = _config_text(j, gamma)
        return texts[key]

    want = text(job, 0.0)
    for other in candidates:
        if other is not job and float(other.config.algorithm.fgrpo.gamma) == 0 and text(other) == want:
            return other
    return None


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

    def pass_plan(name, p: Pass, count) -> PassPlan:
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


def plan_evaluation(spec: EvalSpec, recipe, jobs: list, log_dir: Path, workdir: Path, baseline_jobs: dict) -> list:
    """A :class:`RunEvaluation` per training job; ``baseline_jobs[job_name]`` is that run's γ = 0 twin's JobScript
    (or None)."""
    from fgrpo_verl.launch.disk import model_params

    problems = {}
    for b in spec.benchmarks.values():
        counted = None if b.unset else _count_problems(Path(workdir) / b.file)
        problems[b.name] = counted if counted is not None else KNOWN_PROBLEMS.get(b.name)
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
                   f"new tokens ({plan.setting_source}); T={spec.sampling['temperature']:g}, "
                   f"top-p={spec.sampling['top_p']:g}, seed {spec.sampling['seed']}; benchmarks: {benches}")
        cost, hours = describe_cost(spec, plan, params, problems)
        out.append(RunEvaluation(setting, tuple(evals), tuple(cost), None if base is None else base.run.name, problems,
                                 spec, recipe, Path(workdir), hours, memory_line))
    return out


def benchmark_gaps(spec: EvalSpec, workdir: Path) -> dict[str, list]:
    """What stops evaluation jobs from working, by kind: ``unset`` (benchmark, variables), ``absent``
    (benchmark, file), ``unresolved`` (benchmark, scorer, why)."""
    from fgrpo_verl.evaluation.scorers import resolve_scorer

    gaps = {"unset": [], "absent": [], "unresolved": []}
    for b in spec.benchmarks.values():
        if b.unset:
            gaps["unset"].append((b.name, list(b.unset)))
            continue
        if not (Path(workdir) / b.file).is_file():
            gaps["absent"].append((b.name, Path(workdir) / b.file))
        try:
            resolve_scorer(b.scorer)
        except (ValueError, ImportError, AttributeError) as exc:
            gaps["unresolved"].append((b.name, b.scorer, exc))
    return gaps


def submission_problems(spec: EvalSpec, workdir: Path) -> list[str]:
    """:func:`benchmark_gaps` as one sentence each, found before anything is submitted."""
    gaps = benchmark_gaps(spec, workdir)
    return ([f"benchmark {name}: environment variable(s) {names} not set" for name, names in gaps["unset"]]
            + [f"benchmark {name}: file {path} not found (fgrpo-verl prepare-benchmarks writes the paper's)"
               for name, path in gaps["absent"]]
            + [f"benchmark {name}: scorer {scorer!r} does not resolve ({exc})"
               for name, scorer, exc in gaps["unresolved"]])


# ------------------------------------------------------------------------------------------------ what is done
def pass_complete(plan: Plan, phase: str) -> bool:
    """Whether ``phase`` has nothing left to do for this run (a finished run, every candidate evaluated)."""
    from fgrpo_verl.evaluation import checkpoint_eval as ce
    from fgrpo_verl.job import checkpoints as ck

    run_dir = Path(plan.run_dir)
    if not ck.training_done(run_dir, plan.steps.total):
        return False
    label = ce.pass_label(plan, phase)
    if phase == "selection":
        save_freq, total = ck.step_plan(run_dir, plan.steps.save_freq, plan.steps.total)
        return all(ck.current_result(run_dir, s, label) is not None for s in ck.epoch_steps(save_freq, total))
    selected = ck.read_json(run_dir / ck.EVAL_DIR / ce.SELECTED)
    return bool(selected) and selected.get("selection_label") == ce.pass_label(plan, "selection") \
        and ck.current_result(run_dir, selected["step"], label) is not None


def progress_line(plan: Plan) -> str:
    """``eval: selection 4/10 checkpoints; final: step 459 evaluated`` for ``--status``."""
    from fgrpo_verl.evaluation import checkpoint_eval as ce
    from fgrpo_verl.job import checkpoints as ck

    run_dir = Path(plan.run_dir)
    save_freq, total = ck.step_plan(run_dir, plan.steps.save_freq, plan.steps.total)
    expected = ck.epoch_steps(save_freq, total)
    label = ce.pass_label(plan, "selection")
    done = sum(ck.current_result(run_dir, s, label) is not None for s in expected if s in ck.saved_steps(run_dir))
    parts = [f"selection {done}/{len(expected) if expected else '?'} checkpoints"]
    if plan.protocol == "select":
        selected = ck.read_json(run_dir / ck.EVAL_DIR / ce.SELECTED)
        if not selected:
            parts.append("final: not yet")
        else:
            ok = ck.current_result(run_dir, selected["step"], ce.pass_label(plan, "final")) is not None
            parts.append(f"final: step {selected['step']} {'evaluated' if ok else 'selected, not evaluated'}")
    return "eval: " + "; ".join(parts)


def split_queue(entries: list[tuple[str, str]], record: dict | None) -> tuple[list, list]:
    """(training, evaluation) entries of a run's queue entries: evaluation job ids are in its record."""
    evals = {str(e["id"]) for e in (record or {}).get("eval_jobs", [])}
    return [e for e in entries if e[0] not in evals], [e for e in entries if e[0] in evals]


@dataclass(frozen=True)
class SelectionOf:
    """A dependency on the selection job this launch submits for run ``job_name`` (its id is not known yet)."""

    job_name: str


@dataclass(frozen=True)
class EvalDecision:
    job_name: str
    phase: str
    depends_on: tuple[str | SelectionOf, ...]   # job ids, or selection jobs of this launch
    why: str


def decide(jobs: list, evaluations: list, train_ids: dict[str, str | None], active_evals: dict[str, list],
           baseline_names: dict[str, str | None]) -> tuple[list[EvalDecision], list[str]]:
    """Which evaluation jobs a launch submits, with their dependencies, and why others are not.

    ``train_ids[name]``: the run's training job queued, running or just submitted (None: none, the run is done
    or not resubmitted); ``active_evals[name]``: its evaluation jobs in the queue; ``baseline_names[name]``: its
    γ = 0 twin's job name. Selections are decided first (a final pass depends on the baseline's selection job)."""
    decisions, notes = [], []
    selection_jobs: set[str] = set()  # runs whose selection job this launch submits
    for job, ev in zip(jobs, evaluations):
        name = job.job_name
        if active_evals.get(name):
            ids = ", ".join(i for i, _ in active_evals[name])
            notes.append(f"{job.run_label}: evaluation job(s) {ids} already queued or running")
            continue
        plan = ev.jobs[0].plan
        if pass_complete(plan, "selection"):
            continue
        deps = (train_ids[name],) if train_ids.get(name) else ()
        decisions.append(EvalDecision(name, "selection", deps, "checkpoints to evaluate"))
        selection_jobs.add(name)
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
        decisions.append(EvalDecision(name, "final", tuple(deps), "selected checkpoint to evaluate"))
    return decisions, notes


def attach_evaluation(recipe, jobs: list, plan_more, log_dir: Path, workdir: Path) -> list:
    """``jobs`` with their :class:`RunEvaluation` (``JobScript.evaluation``). ``plan_more(names)`` plans recipe runs
    that are not selected (a focal run's baseline outside ``--only``), without evaluation."""
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


def check_submission(jobs: list) -> None:
    """Refuse (ValueError naming each problem) evaluation that could not run, before anything is submitted."""
    evaluations = [job.evaluation for job in jobs if job.evaluation is not None]
    if not evaluations:
        return
    problems = submission_problems(evaluations[0].spec, evaluations[0].workdir)
    if problems:
        raise ValueError("the recipe's evaluation cannot run: " + "; ".join(problems) +
                         ". Fix the recipe's evaluation block or the files, or launch with --no-eval (training only)")


def submit_eval_jobs(jobs: list, train_ids: dict[str, str | None], script_dir: Path, log_dir: Path,
                     out=print, submitted: list | None = None) -> list[tuple[str, str, str]]:
    """Submit the evaluation jobs a launch still needs (:func:`decide`), each with the script planned for it and
    its dependencies on sbatch's command line; returns (run, pass, job id) of each, also appended to
    ``submitted`` as each one goes (what a failing sbatch leaves queued)."""
    from fgrpo_verl.job.run_record import read_record, write_record
    from fgrpo_verl.launch.queue import active_jobs
    from fgrpo_verl.launch.render import sbatch, script_name

    jobs = [job for job in jobs if job.evaluation is not None]
    if not jobs:
        return []
    by_name = {job.job_name: job for job in jobs}
    baselines = {job.job_name: job.baseline_job for job in jobs}
    names = sorted(set(by_name) | {b.job_name for b in baselines.values() if b is not None})
    queue = active_jobs(names)
    dirs = {**{b.job_name: b.checkpoint_dir for b in baselines.values() if b is not None},
            **{name: job.checkpoint_dir for name, job in by_name.items()}}
    active, train_ids = {}, dict(train_ids)
    for name in names:
        training, evals = split_queue(queue.get(name, []), read_record(dirs[name]))
        active[name] = evals
        if training and not train_ids.get(name):
            train_ids[name] = training[0][0]
    decisions, notes = decide(jobs, [job.evaluation for job in jobs], train_ids, active,
                              {n: (b.job_name if b is not None else None) for n, b in baselines.items()})
    for note in notes:
        out(f"skipped evaluation of {note}")
    submitted_selection: dict[str, str] = {}
    done = [] if submitted is None else submitted
    for d in decisions:
        job = by_name[d.job_name]
        deps = [submitted_selection[dep.job_name] if isinstance(dep, SelectionOf) else dep for dep in d.depends_on]
        path = script_dir / script_name(job.job_name, d.phase)
        path.write_text(next(e.text for e in job.evaluation.jobs if e.phase == d.phase), encoding="utf-8")
        job_id = sbatch(path, [f"afterany:{i}" for i in deps])
        write_record(job.checkpoint_dir, job.fingerprint, job.job_name, job.overrides, eval_job=(job_id, d.phase))
        if d.phase == "selection":
            submitted_selection[d.job_name] = job_id
        after = f" after job(s) {', '.join(deps)}" if deps else ""
        out(f"submitted {d.phase} evaluation of {job.run_label}: job {job_id} {job.job_name}{after}")
        done.append((job.run.name, d.phase, job_id))
    return done


def missing_baseline(job) -> str:
    """Why a focal run's evaluation has no γ = 0 baseline to select its checkpoint against; "" when it has one,
    is not focal, or has no evaluation."""
    ev = job.evaluation
    if ev is None or ev.baseline or float(job.config.algorithm.fgrpo.gamma) <= 0:
        return ""
    # a command-line γ applies to every run of the plan, the recipe's γ = 0 twin included
    if any(o.lstrip("+").startswith(("algorithm.fgrpo.gamma=", "algorithm.fgrpo={", "algorithm={"))
           for o in job.command_line):
        return "algorithm.fgrpo.gamma on the command line sets every run's γ, the γ = 0 run's too"
    return "no run with the same config but γ = 0"


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
