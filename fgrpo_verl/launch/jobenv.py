"""The environment a training job exports before ``fgrpo-verl train``: W&B run identity and resume.

A Slurm job that is requeued (preemption, node failure, ``scontrol requeue``) runs its script again. verl then
resumes from the newest checkpoint (``trainer.resume_mode=auto`` under ``trainer.default_local_dir``, which is
keyed by project and experiment name), but verl's W&B logger opens a *new* run unless told which one to
continue. So every job exports

    WANDB_RUN_ID   = wandb_run_id(project, experiment)   deterministic: the same run after every requeue
    WANDB_RESUME   = allow                              continue that run if it exists, else create it
    WANDB_RUN_GROUP (optional)                          the recipe's W&B group

``fgrpo-verl launch`` renders these into each job script; the plain ``sbatch slurm/train.sbatch`` path runs
``python -m fgrpo_verl.launch.jobenv [overrides]`` inside the job, which prints the same exports for ``eval``.
API keys never pass through here: W&B reads ``WANDB_API_KEY`` / ``~/.netrc`` from the user's environment.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import re
import shlex
import sys
from collections.abc import Mapping, Sequence

# W&B run ids: letters, digits, '-' and '_' only; 16 hex characters of a hash are far from colliding.
_RUN_ID_CHARS = 16
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def wandb_run_id(project: str, experiment: str) -> str:
    """Deterministic W&B run id of ``experiment`` in ``project`` (sha256 of both, 16 hex characters)."""
    for name, value in (("project", project), ("experiment", experiment)):
        if not isinstance(value, str) or not value:
            raise ValueError(f"{name} must be a non-empty string, got {value!r}")
    digest = hashlib.sha256(f"{project}\x00{experiment}".encode()).hexdigest()
    return digest[:_RUN_ID_CHARS]


def job_environment(config, wandb_group: str | None = None) -> dict[str, str]:
    """Variables a job exports for the run described by the composed ``config``."""
    project, experiment = str(config.trainer.project_name), str(config.trainer.experiment_name)
    env = {
        "WANDB_RUN_ID": wandb_run_id(project, experiment),
        "WANDB_RESUME": "allow",
        "FGRPO_EXPERIMENT": experiment,
        "FGRPO_CHECKPOINT_DIR": str(config.trainer.default_local_dir),
    }
    if wandb_group:
        env["WANDB_RUN_GROUP"] = wandb_group
    return env


def shell_exports(env: Mapping[str, str]) -> str:
    """``export NAME=value`` lines, values shell-quoted."""
    lines = []
    for name, value in env.items():
        if not _ENV_NAME.match(name):
            raise ValueError(f"environment variable name {name!r} is not a valid shell name")
        lines.append(f"export {name}={shlex.quote(str(value))}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Print a training job's exports (W&B run id, resume) for eval.")
    parser.add_argument("--wandb-group", default=None, help="W&B group of the run (WANDB_RUN_GROUP)")
    parser.add_argument("overrides", nargs="*", help="the job's Hydra overrides")
    args = parser.parse_args(argv)
    from fgrpo_verl.compose import compose, validate

    config = compose(args.overrides)
    # Fail before a Ray cluster is started for a config verl would reject anyway. verl reports on stdout,
    # which is what the job evals: send it to stderr.
    with contextlib.redirect_stdout(sys.stderr):
        validate(config)
    print(shell_exports(job_environment(config, args.wandb_group)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
