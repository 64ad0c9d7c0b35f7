"""Render one Slurm job script per recipe run from ``slurm/job.sbatch.template``.

The script holds everything a reader needs to see what runs: the ``#SBATCH`` lines, the exports (run identity,
W&B), and the exact training command with every override. Values Slurm only knows at run time (node count, GPUs
per node, head IP) appear as shell variables set by ``slurm/ray_cluster.sh``.

Rendering is hardened against values that would otherwise become code or silently change the job:

- one pass: ``{{NAME}}`` placeholders are replaced by a single regex substitution, so a value that itself
  contains ``{{...}}`` is never expanded again;
- any control character (newline, CR, tab, NUL, ESC, ...) in any value is refused: a newline in an ``#SBATCH``
  value would end sbatch's directive scan (dropping ``--requeue`` and everything after it) or start a command;
- every ``#SBATCH`` value is double-quoted with ``\\`` and ``"`` backslash-escaped (sbatch's own directive
  parser honours both; an unquoted ``#`` would start a comment, a space would split the argument);
- every shell word is ``shlex.quote``d; the interpreter is ``sys.executable``, not whatever PATH finds.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from fgrpo_verl.launch.recipe import MEMORY_OPTIONS, Recipe, Resources, Run
from fgrpo_verl.config.paths import slurm_dir
from fgrpo_verl.job.identity import check_value, shell_exports

TEMPLATE = "job.sbatch.template"
# Seconds between Slurm's USR1 and the time limit when neither the recipe nor the config says (cluster groups set
# slurm.signal_lead_s): enough for one LLM step plus a checkpoint at the paper's scale.
DEFAULT_SIGNAL_LEAD_S = 900
# Host memory of a training job whose recipe gives none: all of each node's (sbatch --mem=0). verl's trainer takes
# what the node has: it loads the model in fp32 on every rank before sharding (100-130 GB per node for Qwen3-4B or
# Llama-3.2-3B on 8 GPUs), Ray's object store takes a share of the memory it sees, CPU offload holds parameters
# and optimizer states; no number computed here is safe, and the shipped recipes take whole nodes (`exclusive`)
# anyway. Without a request a site's DefMemPerCPU applies (e.g. 2 GB x CPUs), and the ranks are OOM-killed at
# start-up. A recipe that shares nodes sets resources.mem (or a memory option in resources.extra).
TRAIN_MEM = "0"
_PLACEHOLDER = re.compile(r"\{\{([A-Z_]+)\}\}")
# every job of a run carries the run's name: Slurm never runs two of them at once, whoever submitted them
SINGLETON = "singleton"

# Appended to every training command. The job, not the recipe, knows the allocation: these come last so that
# they win over the cluster preset (Hydra applies overrides in order). verl's ray.init then joins the job's
# cluster (RAY_ADDRESS) from the head's IP; connecting to an existing cluster forbids num_cpus / num_gpus.
RUNTIME_OVERRIDES = (
    '"trainer.nnodes=${SLURM_NNODES}"',
    '"trainer.n_gpus_per_node=${FGRPO_GPUS_PER_NODE}"',
    '"+ray_kwargs.ray_init._node_ip_address=${FGRPO_HEAD_IP}"',
    '"++ray_kwargs.ray_init.num_cpus=null"',
    '"++ray_kwargs.ray_init.num_gpus=null"',
)


@dataclass(frozen=True)
class JobScript:
    run: Run
    job_name: str
    overrides: tuple[str, ...]
    nodes: int
    gpus_per_node: int
    text: str
    # the composed config the job was validated with (what `fgrpo-verl train` will compose from the same overrides)
    config: object
    # what every job of the run exports (its evaluation jobs' scripts too): the recipe's env, run identity, W&B
    exports: dict
    # absolute checkpoint directory and config fingerprint (fgrpo_verl/job/identity.py)
    checkpoint_dir: Path | None = None
    fingerprint: str = ""
    # steps the run trains (None: its data is not on this machine, fgrpo_verl/launch/steps.py)
    total_steps: int | None = None
    # (unsalted run dir, salt) of a --fresh rerun: recorded there on submit (identity.write_fresh)
    fresh: tuple[Path, str] | None = None
    # the W&B run id the script exports (pinned in the run record on submit)
    wandb_run_id: str = ""
    # what the preflight found (fgrpo_verl/preflight Report.summary), printed by --dry-run
    preflight: str = ""
    # the run's evaluation jobs (fgrpo_verl/launch/eval_jobs.py RunEvaluation; None: the recipe has none)
    evaluation: object = None
    # the JobScript of its γ = 0 twin, the baseline its checkpoint is selected against (None: γ = 0, or none)
    baseline_job: object = None
    # what the dry run, --status and a submit call the run (Recipe.label: its name and what the command line
    # changed in it)
    run_label: str = ""
    # the overrides given on the command line (every run of the plan got them)
    command_line: tuple[str, ...] = ()


_SLURM_TIME = re.compile(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?")


def slurm_seconds(text) -> int | None:
    """Seconds of a Slurm time limit (``M``, ``M:S``, ``H:M:S``, ``D-H``, ``D-H:M``, ``D-H:M:S``); None for
    ``UNLIMITED``/``INFINITE``."""
    text = str(text).strip()
    if text.upper() in ("UNLIMITED", "INFINITE"):
        return None
    match = _SLURM_TIME.fullmatch(text)
    if not match:
        raise ValueError(
            f"slurm time limit {text!r}: expected minutes, M:S, H:M:S, D-H, D-H:M or D-H:M:S (as sbatch --time)"
        )
    days, *parts = match.groups()
    parts = [int(p) for p in parts if p is not None]
    # with days the first number is hours (D-H[:M[:S]]); without, minutes unless there are three (M, M:S, H:M:S)
    hours, minutes, seconds = (parts + [0, 0])[:3] if days else parts if len(parts) == 3 else [0, *parts, 0][:3]
    return ((int(days or 0) * 24 + hours) * 60 + minutes) * 60 + seconds


def sbatch_quote(what: str, value) -> str:
    """A value for an ``#SBATCH --opt=<value>`` line: double-quoted, ``\\`` and ``"`` escaped."""
    text = check_value(what, value)
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def sbatch_unquote(text: str) -> str:
    """The value :func:`sbatch_quote` quoted (a rendered ``#SBATCH`` line read back)."""
    if len(text) < 2 or not (text.startswith('"') and text.endswith('"')):
        return text
    return re.sub(r"\\(.)", r"\1", text[1:-1])


def sbatch_directives(
    job_name: str,
    nodes: int,
    gpus_per_node: int,
    resources: Resources,
    log_dir: Path,
    workdir: Path,
    time_limit: str | None = None,
    signal_lead_s: int | None = DEFAULT_SIGNAL_LEAD_S,
) -> list[str]:
    """The ``#SBATCH`` lines of a job. ``signal_lead_s`` None: no USR1 ahead of the limit. Dependencies on other
    jobs (known only once those are submitted) come on the command line, :func:`sbatch`."""
    log_dir_text = check_value("log dir", log_dir)
    if "%" in log_dir_text:
        raise ValueError(f"log dir {log_dir_text!r} contains '%', which sbatch expands in --output; pick another")
    options = {
        "job-name": job_name,
        # relative paths (checkpoints/<project>/<experiment>, data/...) resolve here, on every (re)start
        "chdir": workdir,
        "nodes": nodes,
        # one task per node: the Ray head or worker; Ray schedules the GPUs itself
        "ntasks-per-node": 1,
        "gpus-per-node": gpus_per_node if resources.request_gpus else None,
        "cpus-per-task": resources.cpus_per_task,
        "time": resources.time or time_limit,
        **{key: getattr(resources, key) for key in ("partition", "account", "qos", "mem")},
        # USR1 to the batch shell ahead of the limit: checkpoint at the step boundary, then requeue (lifecycle.sh)
        "signal": None if signal_lead_s is None else f"B:USR1@{int(signal_lead_s)}",
        # never two jobs of one run (same name = same run identity) running at once, whoever submitted them
        "dependency": SINGLETON,
        # a preempted or requeued job runs again (and resumes), appending to the same log
        "requeue": True,
        "open-mode": "append",
        "output": f"{log_dir_text}/%x-%j.out",
        "exclusive": resources.exclusive or None,
    }
    # True: an option without a value; None: left out
    lines = [f"#SBATCH --{key}" if value is True else f"#SBATCH --{key}={sbatch_quote(f'sbatch --{key}', value)}"
             for key, value in options.items() if value is not None]
    for extra in resources.extra:  # each "--option[=value]" (recipe.Resources)
        name, sep, value = check_value("resources.extra", extra).partition("=")
        lines.append(f"#SBATCH {name}" + (f"={sbatch_quote(f'sbatch {name}', value)}" if sep else ""))
    return lines


def script_name(job_name: str, phase: str | None = None) -> str:
    """The file name of a job's script in the script folder: ``<job>.sbatch`` for training, ``<job>-<pass>.sbatch``
    for an evaluation pass (the same on submit and in the dry run's folder)."""
    return f"{job_name}-{phase}.sbatch" if phase else f"{job_name}.sbatch"


def sbatch_command(script: Path | str, after: Sequence[str] = ()) -> list[str]:
    """The sbatch command line that submits ``script``. ``after``: dependencies on other jobs (``afterany:<id>``);
    sbatch's --dependency replaces the script's ``#SBATCH --dependency`` instead of adding to it, so singleton is
    given again with them."""
    command = ["sbatch", "--parsable"]
    if after:
        command.append(f"--dependency={','.join([*(check_value('dependency', a) for a in after), SINGLETON])}")
    return [*command, str(script)]


def sbatch(script: Path, after: Sequence[str] = ()) -> str:
    """Submit ``script`` (:func:`sbatch_command`); returns its job id (RuntimeError when sbatch fails)."""
    done = subprocess.run(sbatch_command(script, after), capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"sbatch {script} failed (exit {done.returncode}): "
                           f"{done.stderr.strip() or done.stdout.strip()}")
    # --parsable prints "<id>" or "<id>;<cluster>"
    match = re.match(r"^(\d+)", done.stdout.strip())
    if not match:
        raise RuntimeError(f"sbatch {script}: unexpected output {done.stdout!r}")
    return match.group(1)


def train_command(overrides: tuple[str, ...] | list[str]) -> str:
    words = ['"$FGRPO_PYTHON" -m fgrpo_verl train', "trainer.resume_mode=auto"]
    words += [shlex.quote(check_value("override", o)) for o in overrides]
    return " \\\n    ".join([*words, *RUNTIME_OVERRIDES])


def render_template(template: str, values: dict[str, str]) -> str:
    """Replace every ``{{NAME}}`` of ``template`` in one pass; unknown names are an error."""

    def sub(match: re.Match) -> str:
        name = match.group(1)
        if name not in values:
            raise ValueError(f"job template: no value for placeholder {{{{{name}}}}}")
        return values[name]

    return _PLACEHOLDER.sub(sub, template)


def render_script(template: str, recipe: Recipe, run: Run, directives: list[str], exports: dict[str, str],
                  **values: str) -> str:
    """A job script of ``run`` from ``slurm/<template>``: its ``#SBATCH`` lines, its exports, the template's other
    placeholders."""
    text = (slurm_dir() / template).read_text(encoding="utf-8")
    return render_template(text, {"SBATCH": "\n".join(directives), "EXPORTS": shell_exports(exports),
                                  "RECIPE": shlex.quote(check_value("recipe path", recipe.path)),
                                  "RUN": check_value("run name", run.name), **values})


def render_job(
    recipe: Recipe,
    run: Run,
    overrides: list[str],
    config,
    env: dict[str, str],
    log_dir: Path,
    workdir: Path,
    job_name: str,
    fingerprint: str = "",
    **planned,
) -> JobScript:
    """The job script of ``run`` named ``job_name`` (its run identity); ``config`` is its composed config (sizes
    the allocation, gives the time limit and signal lead of its cluster group), ``env`` its W&B and identity
    variables (fgrpo_verl.job.identity.job_environment); ``planned``: the JobScript's other fields."""
    nodes, gpus = int(config.trainer.nnodes), int(config.trainer.n_gpus_per_node)
    for key, value in (("trainer.nnodes", nodes), ("trainer.n_gpus_per_node", gpus)):
        if value < 1:
            raise ValueError(f"run {run.name}: {key} must be >= 1 to size a Slurm job, got {value}")
    slurm_cfg = config.get("slurm") or {}
    lead = slurm_cfg.get("signal_lead_s", DEFAULT_SIGNAL_LEAD_S)
    if isinstance(lead, bool) or not isinstance(lead, int) or not 10 <= lead <= 65535:
        raise ValueError(f"run {run.name}: slurm.signal_lead_s must be an integer number of seconds in 10..65535, got {lead!r}")
    checkpoint_dir = Path(workdir) / str(config.trainer.default_local_dir)
    shared = {**recipe.env, **env, "FGRPO_RUN": run.name, "FGRPO_PYTHON": sys.executable,
              "FGRPO_CHECKPOINT_DIR": str(checkpoint_dir), "FGRPO_FINGERPRINT": fingerprint}
    resources = run.resources
    # the training job's own (None: left out). The trainer gets most of the lead to finish its step, the rest is for
    # the requeue itself; with no GPUs from Slurm, Ray nodes offer trainer.n_gpus_per_node logical GPUs (backend=cpu)
    own = {"FGRPO_SLURM_DIR": slurm_dir(), "FGRPO_LOG_DIR": log_dir, "FGRPO_STOP_FILE": checkpoint_dir / ".fgrpo-stop",
           "FGRPO_STOP_GRACE": lead - max(10, min(60, lead // 10)),
           "FGRPO_GPUS_PER_NODE": None if resources.request_gpus else gpus,
           "FGRPO_RAY_NUM_CPUS": resources.ray_num_cpus, "FGRPO_RAY_JOIN_TIMEOUT": resources.ray_join_timeout}
    exports = {**shared, **{name: str(value) for name, value in own.items() if value is not None}}
    if resources.mem is None and not any(o.partition("=")[0] in MEMORY_OPTIONS for o in resources.extra):
        resources = resources.model_copy(update={"mem": TRAIN_MEM})
    time = resources.time or slurm_cfg.get("time")
    limit = None if time is None else slurm_seconds(time)
    if limit is not None and limit <= lead:
        # USR1 would come at once: every start would train one step, checkpoint and requeue itself
        raise ValueError(
            f"run {run.name}: time limit {time} ({limit} s) is not longer than slurm.signal_lead_s={lead}: the stop "
            "signal would come at the start of every job; lower slurm.signal_lead_s or raise the time limit"
        )
    directives = sbatch_directives(job_name, nodes, gpus, resources, log_dir, workdir, time, lead)
    text = render_script(TEMPLATE, recipe, run, directives, exports, SIGNAL_LEAD=str(lead),
                         TRAIN_COMMAND=train_command(overrides))
    return JobScript(run=run, job_name=job_name, overrides=tuple(overrides), nodes=nodes, gpus_per_node=gpus,
                     text=text, config=config, exports=shared, checkpoint_dir=checkpoint_dir, fingerprint=fingerprint,
                     wandb_run_id=env["WANDB_RUN_ID"], **planned)
