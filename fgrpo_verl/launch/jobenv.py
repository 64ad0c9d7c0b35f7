"""The environment a training job exports before ``fgrpo-verl train``: W&B run identity and resume.

A Slurm job that is requeued (preemption, node failure, ``scontrol requeue``) runs its script again. verl then
resumes from the newest checkpoint (``trainer.resume_mode=auto`` under ``trainer.default_local_dir``, which is
keyed by project and experiment name), but verl's W&B logger opens a *new* run unless told which one to
continue. So every job exports

    WANDB_RUN_ID, WANDB_RESUME=allow, WANDB_RUN_GROUP, WANDB_TAGS    from fgrpo_verl.job.tracking.wandb_env (the id
                                                                     also hashes the absolute checkpoint dir)
    FGRPO_EXPERIMENT, FGRPO_CHECKPOINT_DIR                           for the job's log and the train command
    FGRPO_SAVE_PER_EPOCH                                             plain sbatch path: 1 when the run sets no
                                                                     trainer.save_freq (a checkpoint each epoch)

All naming, id and W&B logic lives in ``fgrpo_verl/job/tracking.py``; this module only reads the composed config.
``fgrpo-verl launch`` renders these into each job script; the plain ``sbatch slurm/train.sbatch`` path runs
``python -m fgrpo_verl.launch.jobenv [overrides]`` inside the job, which prints the same exports for ``eval``;
without ``trainer.experiment_name`` among the overrides the name is tracking's ``{algo}-g{γ}-n{N}-{model}-s{seed}``
plus ``-<config hash>`` (fgrpo_verl/launch/identity.py). It runs the launcher's preflight (fgrpo_verl/launch/
preflight.py) on the job's allocation, and, without ``trainer.save_freq``, has the job save once per epoch as the
launcher does for ``save_per_epoch`` recipes (verl's default -1 never saves: a requeue would start over). Inside a
Slurm job it also requires the model files here, checks and writes the run record of the checkpoint dir (a
directory of another config is refused) and refuses secret-looking overrides.
API keys never pass through here: W&B reads ``WANDB_API_KEY`` / ``~/.netrc`` from the user's environment.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from fgrpo_verl.job.tracking import check_run_id, config_run_name, config_run_tags, wandb_env

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def job_environment(config, workdir: Path, wandb_group: str | None = None, tags=()) -> dict[str, str]:
    """Variables a job exports for the run described by the composed ``config``: fgrpo_verl.job.tracking's W&B
    variables for (project, experiment name, absolute checkpoint dir: ``trainer.default_local_dir`` from the
    launch directory ``workdir``), plus the experiment name and checkpoint dir for the job's log."""
    project, experiment = str(config.trainer.project_name), str(config.trainer.experiment_name)
    home = os.path.abspath(os.path.join(workdir, str(config.trainer.default_local_dir)))
    env = wandb_env(project, experiment, wandb_group, tags, checkpoint_dir=home)
    env["FGRPO_EXPERIMENT"] = experiment
    env["FGRPO_CHECKPOINT_DIR"] = str(config.trainer.default_local_dir)
    return env


def shell_exports(env: Mapping[str, str]) -> str:
    """``export NAME=value`` lines, values shell-quoted."""
    lines = []
    for name, value in env.items():
        if not _ENV_NAME.match(name):
            raise ValueError(f"environment variable name {name!r} is not a valid shell name")
        lines.append(f"export {name}={shlex.quote(str(value))}")
    return "\n".join(lines)


def _on_allocation(config):
    """A copy of ``config`` sized like the Slurm allocation this job runs on (train.sbatch passes the same
    ``trainer.nnodes`` / ``trainer.n_gpus_per_node`` to verl); ``config`` itself outside a job."""
    from omegaconf import OmegaConf

    nodes = os.environ.get("SLURM_NNODES")
    gpus = os.environ.get("FGRPO_GPUS_PER_NODE") or os.environ.get("SLURM_GPUS_ON_NODE") or \
        os.environ.get("SLURM_GPUS_PER_NODE")
    sized = OmegaConf.create(OmegaConf.to_container(config))
    if nodes and nodes.isdigit():
        sized.trainer.nnodes = int(nodes)
    if gpus and gpus.rsplit(":", 1)[-1].isdigit():
        sized.trainer.n_gpus_per_node = int(gpus.rsplit(":", 1)[-1])
    return sized


def _saves_per_epoch(config, overrides) -> bool:
    """Whether the run sets no checkpoint frequency (verl's default ``trainer.save_freq`` -1 never saves, so a
    requeue would restart at step 0): then it saves once per epoch, as ``fgrpo-verl launch`` does for
    ``save_per_epoch`` recipes (``+trainer.save_per_epoch=true``, fgrpo_verl/job/save_per_epoch.py)."""
    from fgrpo_verl.launch.identity import override_key

    keys = {override_key(o) for o in overrides}
    if {"trainer.save_freq", "trainer.save_per_epoch"} & keys:
        return False
    return int(config.trainer.save_freq) <= 0 and not bool(config.trainer.get("save_per_epoch", False))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Print a training job's exports (W&B run id, resume) for eval.")
    parser.add_argument("--wandb-group", default=None, help="W&B group of the run (WANDB_RUN_GROUP), e.g. the sweep")
    parser.add_argument("overrides", nargs="*", help="the job's Hydra overrides")
    args = parser.parse_args(argv)
    from fgrpo_verl.config.compose import compose
    from fgrpo_verl.integration.validation import validate
    from fgrpo_verl import preflight
    from fgrpo_verl.launch.identity import (
        check_record,
        experiment_name,
        fingerprint,
        override_key,
        recorded_run_id,
        secret_in_override,
        write_record,
    )

    secret = [where for o in args.overrides if (where := secret_in_override(o)) is not None]
    if secret:
        print(f"fgrpo jobenv: error: override(s) {secret} look like secrets: export them instead", file=sys.stderr)
        return 2
    config = compose(args.overrides)
    digest = fingerprint(config, workdir=Path.cwd())
    if not any(override_key(o) == "trainer.experiment_name" for o in args.overrides):
        # the W&B naming convention; train.sbatch passes it back as trainer.experiment_name=$FGRPO_EXPERIMENT
        config.trainer.experiment_name = experiment_name(config_run_name(config), digest)
    # Fail before a Ray cluster is started for a config verl would reject anyway. verl reports on stdout,
    # which is what the job evals: send it to stderr.
    with contextlib.redirect_stdout(sys.stderr):
        validate(config)
    in_job = bool(os.environ.get("SLURM_JOB_ID"))
    try:
        # what verl's worker start-up would refuse, on the allocation this job has (launch/preflight.py)
        preflight.run(_on_allocation(config), Path.cwd(), require_model=in_job)
    except ValueError as exc:
        for line in str(exc).splitlines():
            print(f"fgrpo jobenv: error: {line}", file=sys.stderr)
        return 2
    checkpoint_dir = Path(str(config.trainer.default_local_dir))
    env = job_environment(config, Path.cwd(), args.wandb_group, config_run_tags(config))
    experiment = str(config.trainer.experiment_name)
    try:
        # your own WANDB_RUN_ID (sbatch passes your environment) wins, as with `fgrpo-verl launch`; else a run
        # started before keeps its W&B run (pinned in its record at its first start)
        explicit = os.environ.get("WANDB_RUN_ID")
        pinned = (explicit and check_run_id(explicit)) or recorded_run_id(
            check_record(checkpoint_dir, digest), str(config.trainer.project_name), experiment, checkpoint_dir
        )
        if pinned is not None:
            env["WANDB_RUN_ID"] = pinned
        if os.environ.get("SLURM_JOB_ID"):
            write_record(checkpoint_dir, digest, experiment, args.overrides, os.environ["SLURM_JOB_ID"],
                         wandb_run_id=env["WANDB_RUN_ID"])
    except ValueError as exc:
        print(f"fgrpo jobenv: error: {exc}", file=sys.stderr)
        return 1
    env["FGRPO_FINGERPRINT"] = digest
    if _saves_per_epoch(config, args.overrides):
        env["FGRPO_SAVE_PER_EPOCH"] = "1"
    # for slurm/lifecycle.sh: absolute, the trainer (a Ray actor) may run in another directory or on another node
    env["FGRPO_STOP_FILE"] = str(checkpoint_dir.resolve() / ".fgrpo-stop")
    print(shell_exports(env))
    return 0


if __name__ == "__main__":
    sys.exit(main())
