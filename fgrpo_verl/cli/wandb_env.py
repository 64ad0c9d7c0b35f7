"""``fgrpo-verl wandb-env``: the W&B naming/resume variables for one run, for shell scripts and Slurm jobs.

    eval "$(fgrpo-verl wandb-env --project fgrpo --algo fgrpo --gamma 0.5 --n 8 --model Qwen/Qwen2.5-7B --seed 1 \\
        --group gamma-sweep)"
    fgrpo-verl train algo=grpo algorithm.fgrpo.gamma=0.5 ...     # W&B project fgrpo, run fgrpo-g0.5-n8-Qwen2.5-7B-s1

``train`` reads ``FGRPO_PROJECT_NAME`` / ``FGRPO_EXPERIMENT_NAME`` as ``trainer.project_name`` /
``trainer.experiment_name`` unless the command line sets them, and refuses a name whose γ or N is not the run's
(left over from another run in the same shell). Plain ``python -m verl.trainer.main_ppo`` does not read them:
give it ``trainer.project_name=$FGRPO_PROJECT_NAME trainer.experiment_name=$FGRPO_EXPERIMENT_NAME``.

``--format hydra`` prints the equivalent Hydra overrides instead (run name + Ray runtime_env variables).
"""

from __future__ import annotations

import argparse

HELP = "Print the W&B run name, deterministic run id (resume-safe), group and tags for one run."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--project", required=True, help="W&B project (= trainer.project_name)")
    parser.add_argument("--algo", required=True, help="algorithm label in the run name, e.g. fgrpo, fdapo, fcispo, grpo")
    parser.add_argument("--gamma", required=True, type=float, help="focal strength γ (algorithm.fgrpo.gamma)")
    parser.add_argument("--n", required=True, type=int, help="group size N (actor_rollout_ref.rollout.n)")
    parser.add_argument("--model", required=True, help="model path or HF id; its last path component is used")
    parser.add_argument("--seed", required=True, type=int, help="seed label for the run name")
    parser.add_argument("--group", default=None, help="W&B group, normally the sweep name")
    parser.add_argument("--mode", default=None, choices=["online", "offline", "disabled"], help="export WANDB_MODE")
    parser.add_argument("--format", default="shell", choices=["shell", "hydra"], help="shell exports or Hydra overrides")


def run(args: argparse.Namespace) -> int:
    import re

    from fgrpo_verl.job import tracking
    from fgrpo_verl.job.identity import shell_exports

    try:
        name = tracking.run_name(args.algo, args.gamma, args.n, args.model, args.seed)
        env = tracking.wandb_env(args.project, name, args.group, tracking.run_tags(args.algo, args.gamma, args.n),
                                 args.mode)
    except ValueError as err:  # tracking names the argument ("gamma=-1.0 is invalid: ..."): name the flag
        raise ValueError(re.sub(r"^([a-z]+)=", r"--\1 ", str(err))) from err
    if args.format == "hydra":
        print("\n".join(tracking.experiment_overrides(args.project, name) + tracking.ray_env_overrides(env)))
        return 0
    print(shell_exports({**env, tracking.PROJECT_ENV: args.project, tracking.EXPERIMENT_ENV: name}))
    return 0
