"""Render one Slurm job script per recipe run from ``slurm/job.sbatch.template``.

The script holds everything a reader needs to see what runs: the ``#SBATCH`` lines, the exports (W&B run
identity), and the exact ``fgrpo-verl train`` command with every override. Values Slurm only knows at run
time (node count, GPUs per node, head IP) appear as shell variables set by ``slurm/ray_cluster.sh``.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from fgrpo_verl.launch.recipe import Recipe, Resources, Run
from fgrpo_verl.paths import slurm_dir

TEMPLATE = "job.sbatch.template"

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


def sbatch_directives(
    job_name: str, nodes: int, gpus_per_node: int, resources: Resources, log_dir: Path, workdir: Path
) -> list[str]:
    lines = [
        f"--job-name={job_name}",
        # relative paths (checkpoints/<project>/<experiment>, data/...) resolve here, on every (re)start
        f"--chdir={workdir}",
        f"--nodes={nodes}",
        # one task per node: the Ray head or worker; Ray schedules the GPUs itself
        "--ntasks-per-node=1",
    ]
    if resources.request_gpus:
        lines.append(f"--gpus-per-node={gpus_per_node}")
    if resources.cpus_per_task:
        lines.append(f"--cpus-per-task={resources.cpus_per_task}")
    for key in ("time", "partition", "account", "qos", "mem"):
        value = getattr(resources, key)
        if value is not None:
            lines.append(f"--{key}={value}")
    if resources.exclusive:
        lines.append("--exclusive")
    lines += [
        # a preempted or requeued job runs again (and resumes), appending to the same log
        "--requeue",
        "--open-mode=append",
        f"--output={log_dir}/%x-%j.out",
        *resources.extra,
    ]
    return [f"#SBATCH {line}" for line in lines]


def train_command(overrides: tuple[str, ...] | list[str]) -> str:
    parts = ["fgrpo-verl train", "trainer.resume_mode=auto", *(shlex.quote(o) for o in overrides), *RUNTIME_OVERRIDES]
    return " \\\n    ".join(parts)


def render_job(
    recipe: Recipe, run: Run, overrides: list[str], config, env: dict[str, str], log_dir: Path, workdir: Path
) -> JobScript:
    """The job script of ``run``; ``config`` is its composed config (sizes the allocation)."""
    from fgrpo_verl.launch.jobenv import shell_exports

    nodes, gpus = int(config.trainer.nnodes), int(config.trainer.n_gpus_per_node)
    for key, value in (("trainer.nnodes", nodes), ("trainer.n_gpus_per_node", gpus)):
        if value < 1:
            raise ValueError(f"run {run.name}: {key} must be >= 1 to size a Slurm job, got {value}")
    job_name = recipe.job_name(run)
    exports = dict(recipe.env)
    exports.update(env)
    if not run.resources.request_gpus:
        # no GPUs from Slurm: Ray nodes offer trainer.n_gpus_per_node logical GPUs (backend=cpu)
        exports["FGRPO_GPUS_PER_NODE"] = str(gpus)
    if run.resources.ray_num_cpus:
        exports["FGRPO_RAY_NUM_CPUS"] = str(run.resources.ray_num_cpus)
    if run.resources.ray_join_timeout:
        exports["FGRPO_RAY_JOIN_TIMEOUT"] = str(run.resources.ray_join_timeout)
    template = (slurm_dir() / TEMPLATE).read_text(encoding="utf-8")
    text = (
        template.replace("{{SBATCH}}", "\n".join(sbatch_directives(job_name, nodes, gpus, run.resources, log_dir, workdir)))
        .replace("{{RECIPE_PATH}}", str(recipe.path))
        .replace("{{RUN}}", run.name)
        .replace("{{CHECKPOINT_DIR}}", str(config.trainer.default_local_dir))
        .replace("{{EXPORTS}}", shell_exports(exports))
        .replace("{{SLURM_DIR}}", shlex.quote(str(slurm_dir())))
        .replace("{{TRAIN_COMMAND}}", train_command(overrides))
    )
    return JobScript(
        run=run, job_name=job_name, overrides=tuple(overrides), nodes=nodes, gpus_per_node=gpus, text=text, config=config
    )
