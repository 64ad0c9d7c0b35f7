"""``fgrpo-verl job-env [--wandb-group G] [overrides ...]``: what the plain ``sbatch slurm/train.sbatch`` job runs on
its node before Ray starts. It prints the job's exports (for ``eval``), as ``fgrpo-verl launch`` renders them into
its job scripts:

    WANDB_RUN_ID, WANDB_RESUME=allow, WANDB_RUN_GROUP, WANDB_TAGS    fgrpo_verl.job.tracking.wandb_env (the id also
                                                                     hashes the absolute checkpoint dir)
    FGRPO_EXPERIMENT, FGRPO_CHECKPOINT_DIR, FGRPO_FINGERPRINT        for the job's log and the train command
    FGRPO_LAUNCH_DIR, FGRPO_WANDB_LOGGER                             checked on the node (job.sbatch.template)
    FGRPO_SAVE_PER_EPOCH                                             1 when the run sets no trainer.save_freq
    FGRPO_STOP_FILE                                                  slurm/lifecycle.sh's stop request

A requeued job runs its script again and verl resumes from the newest checkpoint under
``trainer.default_local_dir``, but verl's W&B logger opens a new run unless told which one to continue: hence the
id. Without ``trainer.experiment_name`` among the overrides the name is tracking's
``{algo}-g{γ}-n{N}-{model}-s{seed}`` plus ``-<config hash>`` (fgrpo_verl/job/identity.py).

Before printing it composes the config, runs verl's ``validate_config`` and the launcher's preflight on the job's
allocation (a config verl would reject fails before a Ray cluster starts), refuses secret-looking overrides, and,
inside a Slurm job, requires the model files here and checks and writes the checkpoint dir's run record (a
directory of another config is refused). Without ``trainer.save_freq`` the run saves once per epoch, as the
launcher does for ``save_per_epoch`` recipes (verl's default -1 never saves: a requeue would start over).

A command, not a module of fgrpo_verl/job/: it composes and checks with verl and the preflight, which the job layer
sits below. API keys never pass through here: W&B reads ``WANDB_API_KEY`` / ``~/.netrc`` from the environment.
"""

from __future__ import annotations

import argparse

HELP = "Print the exports of a plain `sbatch slurm/train.sbatch` job (run identity, W&B run id); what that job runs."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--wandb-group", default=None, help="W&B group of the run (WANDB_RUN_GROUP), e.g. the sweep")
    parser.add_argument("overrides", nargs="*", help="the job's Hydra overrides")


def _on_allocation(config):
    """``config`` sized like the Slurm allocation this job runs on (train.sbatch passes the same ``trainer.nnodes``
    / ``trainer.n_gpus_per_node`` to verl); unchanged outside a job."""
    import os

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


def run(args: argparse.Namespace) -> int:
    import contextlib
    import os
    import sys
    from pathlib import Path

    from fgrpo_verl.config.compose import compose
    from fgrpo_verl.integration.validation import validate
    from fgrpo_verl.job.run_record import check_record, recorded_run_id, write_record
    from fgrpo_verl.job.tracking import check_run_id, config_run_name, config_run_tags
    from fgrpo_verl import preflight
    from fgrpo_verl.job.identity import check_user_overrides, job_environment, name_run, override_key, shell_exports

    # the launcher's secret check; the keys it owns are this job's own to set (train.sbatch's experiment name)
    check_user_overrides(args.overrides, owned=False)
    config = compose(args.overrides)
    keys = {override_key(o) for o in args.overrides}
    # the W&B naming convention unless the job names itself; train.sbatch passes it back as
    # trainer.experiment_name=$FGRPO_EXPERIMENT
    given = str(config.trainer.experiment_name) if "trainer.experiment_name" in keys else None
    config, digest, experiment, _ = name_run(config, Path.cwd(), config_run_name(config), experiment=given)
    # verl reports on stdout, which is what the job evals: to stderr
    with contextlib.redirect_stdout(sys.stderr):
        validate(config)
    # what verl's worker start-up would refuse, on the allocation this job has (fgrpo_verl/preflight/)
    in_job = bool(os.environ.get("SLURM_JOB_ID"))
    preflight.run(_on_allocation(config), Path.cwd(), require_model=in_job)
    checkpoint_dir = Path(str(config.trainer.default_local_dir))
    env = job_environment(config, Path.cwd(), args.wandb_group, config_run_tags(config))
    # your own WANDB_RUN_ID (sbatch passes your environment) wins, as with `fgrpo-verl launch`; else a run started
    # before keeps its W&B run (pinned in its record at its first start)
    explicit = os.environ.get("WANDB_RUN_ID")
    pinned = (explicit and check_run_id(explicit)) or recorded_run_id(check_record(checkpoint_dir, digest),
                                                                      checkpoint_dir)
    if pinned is not None:
        env["WANDB_RUN_ID"] = pinned
    if in_job:
        write_record(checkpoint_dir, digest, experiment, args.overrides, os.environ["SLURM_JOB_ID"],
                     wandb_run_id=env["WANDB_RUN_ID"])
    env["FGRPO_FINGERPRINT"] = digest
    if not {"trainer.save_freq", "trainer.save_per_epoch"} & keys and int(config.trainer.save_freq) <= 0 and \
            not bool(config.trainer.get("save_per_epoch", False)):
        env["FGRPO_SAVE_PER_EPOCH"] = "1"
    # for slurm/lifecycle.sh: absolute, the trainer (a Ray actor) may run in another directory or on another node
    env["FGRPO_STOP_FILE"] = str(checkpoint_dir.resolve() / ".fgrpo-stop")
    print(shell_exports(env))
    return 0
