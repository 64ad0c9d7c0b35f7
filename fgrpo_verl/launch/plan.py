"""``plan_jobs``: a recipe's selected runs, each composed, checked with verl, named and rendered as a job script."""

from __future__ import annotations

from pathlib import Path

from fgrpo_verl.environment import environment_with
from fgrpo_verl.launch.recipe import Recipe, load_recipe
from fgrpo_verl.launch.render import JobScript, render_job


def plan_jobs(
    recipe_arg: str,
    only: list[str] | None,
    overrides: list[str],
    log_dir: Path,
    workdir: Path,
    fresh: str | None = None,
    wandb_run_id: str | None = None,
    require_data: bool = False,
    evaluation: bool = True,
    check: bool = True,
) -> tuple[Recipe, list[JobScript]]:
    """Every selected run's job script. Each run's config is composed and checked by verl's
    ``validate_config`` first, so a typo fails here, not hours later on the cluster.

    Identity (identity.py): ``trainer.experiment_name`` is fgrpo_verl.job.tracking's readable run name
    ``{algo}-g{γ}-n{N}-{model}-s{seed}[-<variant>]`` plus ``-<hash of the resolved config>``; the checkpoint dir,
    the W&B run id and the Slurm job name follow from it. ``fresh`` salts the hash (a new run of the same
    config; once submitted, later plain launches of the config mean that run); ``wandb_run_id`` (the user's
    explicit ``WANDB_RUN_ID``) replaces the derived id, for one run only; a run submitted before keeps the id
    pinned in its run record (fgrpo_verl/job/run_record.py), so a relaunch continues its W&B run.
    ``require_data``: refuse runs whose training data or model is missing here (a submit), instead of not checking
    the step count and the model files (a dry run). ``evaluation``: plan the recipe's evaluation jobs too
    (eval_jobs.py), when it has an ``evaluation:`` block. ``check=False`` (``--status``, which submits nothing):
    no ``validate_config`` and no preflight, so verl is not imported; the runs are named exactly as a submit names
    them (the name hashes the composed config, not a verdict)."""
    from omegaconf import open_dict
    from omegaconf.errors import OmegaConfBaseException

    from fgrpo_verl.config.compose import SharedComposer
    from fgrpo_verl.config.errors import omegaconf_reason
    from fgrpo_verl.job.run_record import check_record, recorded_run_id
    from fgrpo_verl.job.tracking import check_run_id, config_run_name, config_run_tags
    from fgrpo_verl.job.identity import check_user_overrides, job_environment, name_run
    from fgrpo_verl.preflight import PreflightError, check_run
    from fgrpo_verl.data.records import parquet_rows
    from fgrpo_verl.launch.steps import missing_data, step_plan

    check_user_overrides(overrides)
    if wandb_run_id is not None:
        check_run_id(wandb_run_id)
    recipe = load_recipe(recipe_arg)
    runs = recipe.select(only)
    if wandb_run_id is not None and len(runs) != 1:
        raise ValueError(
            f"WANDB_RUN_ID={wandb_run_id} is set but {len(runs)} runs are selected: one W&B run cannot hold them; "
            "select one run with --only, or unset WANDB_RUN_ID"
        )
    jobs, names = [], {}
    composer = SharedComposer()  # the runs share their config groups: composed once per distinct selection
    for run in runs:
        run_overrides = recipe.run_overrides(run, overrides)
        where = f"recipe {recipe.name}, run {run.name}"
        try:
            check_user_overrides([*recipe.common, *run.overrides])
            with environment_with(recipe.env):
                config = composer.compose(run_overrides)
                rows = parquet_rows(config.data.train_files, workdir)
                if rows is None and require_data:
                    raise ValueError(missing_data(config, workdir))
                plan = None if rows is None else step_plan(config, rows)
                # `${oc.env:...}` (data and model dirs) frozen as the job sees them, with the recipe's `env:`;
                # resolved once: the hash, the validation, the preflight and the evaluation's baseline search; a
                # plain launch after a submitted --fresh means that fresh run
                config, digest, experiment, base_dir = name_run(config, workdir, config_run_name(config, run.variant),
                                                                fresh)
                # after the hash: save_freq follows from the data (hashed by its path), and a launch that cannot
                # see the data here (--status on a login node) must name the same run
                if plan is not None and recipe.save_per_epoch:
                    run_overrides.append(f"trainer.save_freq={plan.steps_per_epoch}")
                    config.trainer.save_freq = plan.steps_per_epoch
                if recipe.save_per_epoch:
                    # the parquet's rows // batch is an upper bound: verl drops over-long prompts with the trained
                    # model's tokenizer, so the trainer sets save_freq to verl's own steps per epoch at its start
                    # (`+`: not a key of the config, so not part of the run's identity either)
                    run_overrides.append("+trainer.save_per_epoch=true")
                    with open_dict(config):
                        config.trainer.save_per_epoch = True
                run_overrides.append(f"trainer.experiment_name={experiment}")
                run_dir = Path(workdir) / str(config.trainer.default_local_dir)
                record = check_record(run_dir, digest)
            # verl's validate_config, then what verl's worker start-up would refuse and whether it fits; skipped
            # by --status, which so never imports verl (the recipe's env travels with the config)
            verdict = check_run(config, str(workdir), require_data, dict(recipe.env)) if check else ""
        except PreflightError as exc:  # one line per refusal
            raise ValueError("\n".join(f"{where}: {line}" for line in str(exc).splitlines())) from None
        except (ValueError, OmegaConfBaseException) as exc:
            # what the user's config can cause: a ValueError (fgrpo's checks; composition's ConfigError, which
            # explains Hydra's errors) or OmegaConf's (an interpolation that does not resolve); each gets the run's
            # name. Anything else is a bug here and surfaces as one, not as a config to fix
            reason = omegaconf_reason(exc) if isinstance(exc, OmegaConfBaseException) else exc
            raise ValueError(f"{where}: invalid config: {reason}") from exc
        if digest in names:
            # same config = same experiment, whatever the labels: one of them would only repeat the other
            raise ValueError(
                f"recipe {recipe.name}: runs {names[digest]!r} and {run.name!r} have the same config (run "
                f"{experiment!r}); remove one, or make a setting differ (a `variant:` label alone does not)"
            )
        names[digest] = run.name
        env = job_environment(config, workdir, recipe.name, [*config_run_tags(config), f"group:{run.group}"])
        # a submitted run keeps the W&B run it logs to (pinned in its record); an explicit id replaces it
        pinned = recorded_run_id(record, run_dir)
        if wandb_run_id is not None or pinned is not None:
            env["WANDB_RUN_ID"] = wandb_run_id if wandb_run_id is not None else pinned
        jobs.append(render_job(recipe, run, run_overrides, config, env, log_dir, workdir, experiment, digest,
                               total_steps=None if plan is None else plan.total_steps,
                               fresh=None if fresh is None else (base_dir, fresh), preflight=verdict,
                               run_label=recipe.label(run, overrides), command_line=tuple(overrides)))
    if evaluation and recipe.evaluation is not None:
        from fgrpo_verl.launch.eval_jobs import attach_evaluation

        def plan_more(names: list[str]) -> list[JobScript]:
            # one at a time: command-line overrides may make them equal to each other (all γ set alike)
            return [job for name in names
                    for job in plan_jobs(recipe_arg, [name], overrides, log_dir, workdir, evaluation=False,
                                         check=check)[1]]

        jobs = attach_evaluation(recipe, jobs, plan_more, log_dir, workdir)
    return recipe, jobs
