"""``fgrpo-verl launch``: one Slurm job per recipe run (recipe.py: the format, render.py: the job script).

    plan_jobs()    load the recipe, compose + validate every selected run with verl, check what verl's worker
                   start-up would refuse and whether it fits (preflight.py), give it its identity (identity.py),
                   check its steps against its data (steps.py), render its job script
    run_states()   queued / running / done / failed / not started per planned run (queue.py)
    submit_jobs()  skip runs that are done, queued or running; write the scripts, record and ``sbatch`` the rest
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from fgrpo_verl.config.compose import batch_session
from fgrpo_verl.environment import environment_with
from fgrpo_verl.launch.recipe import Recipe, load_recipe
from fgrpo_verl.launch.render import JobScript, render_job, sbatch, script_name


@batch_session()  # dozens of configs resolved: share the parsing of their ${...} strings
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
    pinned in its run record (identity.recorded_run_id), so a relaunch continues its W&B run.
    ``require_data``: refuse runs whose training data or model is missing here (a submit), instead of not checking
    the step count and the model files (a dry run). ``evaluation``: plan the recipe's evaluation jobs too
    (eval_jobs.py), when it has an ``evaluation:`` block. ``check=False`` (``--status``, which submits nothing):
    no ``validate_config`` and no preflight, so verl is not imported; the runs are named exactly as a submit names
    them (the name hashes the composed config, not a verdict)."""
    from omegaconf import OmegaConf, open_dict
    from omegaconf.errors import OmegaConfBaseException

    from fgrpo_verl.config.compose import SharedComposer
    from fgrpo_verl.launch.identity import (
        check_record,
        check_user_overrides,
        experiment_name,
        fingerprint,
        read_fresh,
        recorded_run_id,
    )
    from fgrpo_verl.launch.jobenv import job_environment
    from fgrpo_verl.launch.steps import step_plan, train_rows
    from fgrpo_verl.job.tracking import check_run_id, config_run_name, config_run_tags

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
    # verl checks each config (validate_config, then the preflight of launch/preflight.py), in a second process
    # while this one composes the next (importing verl costs as much as composing them all) unless verl is
    # imported here already; a composition error is reported at once. Unchecked (--status): no validator at all
    validator = None
    if check:
        from fgrpo_verl.preflight import check_run
        from fgrpo_verl.launch.validator import Validator

        validator = Validator(check_run, len(runs))
    wheres = []
    for run in runs:
        run_overrides = recipe.run_overrides(run, overrides)
        where = f"recipe {recipe.name}, run {run.name}"
        try:
            check_user_overrides([*recipe.common, *run.overrides])
            with environment_with(recipe.env):
                config = composer.compose(run_overrides)
                rows = train_rows(config, workdir)
                plan = None
                if rows is not None:
                    plan = step_plan(config, rows)
                elif require_data:
                    raise ValueError(
                        f"training data {config.data.train_files} not found under {workdir}: prepare it first "
                        "(docs/recipes.md), or launch from the directory that holds it"
                    )
                readable = config_run_name(config, run.variant)
                # a plain launch after a submitted --fresh means that fresh run (identity.read_fresh)
                base = fingerprint(config, workdir=workdir)
                config.trainer.experiment_name = experiment_name(readable, base)
                base_dir = Path(workdir) / str(config.trainer.default_local_dir)
                salt = fresh if fresh is not None else read_fresh(base_dir)
                digest = base if salt is None else fingerprint(config, salt, workdir)
                experiment = experiment_name(readable, digest)
                # trainer.default_local_dir interpolates the experiment name: set it before anything reads the dir
                config.trainer.experiment_name = experiment
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
                # `${oc.env:...}` (data and model dirs) frozen as the job sees them, with the recipe's `env:`; and
                # resolved once: the validation, the preflight and the evaluation's baseline search read it again
                OmegaConf.resolve(config)
                run_dir = Path(workdir) / str(config.trainer.default_local_dir)
                record = check_record(run_dir, digest)
                # verl's validate_config, then what verl's worker start-up would refuse and whether it fits
                # (the recipe's env travels with the config: the check may run in a process without it)
                verdict = None if validator is None else validator.submit(config, str(workdir), require_data,
                                                                           dict(recipe.env))
                wheres.append(where)
        except (ValueError, OmegaConfBaseException) as exc:
            # what the user's config can cause: a ValueError (fgrpo's checks; composition's ConfigError, which
            # explains Hydra's errors) or OmegaConf's (an interpolation that does not resolve); each gets the run's
            # name. Anything else is a bug here and surfaces as one, not as a config to fix
            _close(validator)
            raise ValueError(f"{where}: invalid config: {exc}") from exc
        except BaseException:  # a bug, Ctrl-C: unchanged, but the validating process ends with it
            _close(validator)
            raise
        if verdict is not None:  # checked here already (not in the pool): stop at the first bad run
            _raise_refused(where, verdict, validator)
        if digest in names:
            # same config = same experiment, whatever the labels: one of them would only repeat the other
            _close(validator)
            raise ValueError(
                f"recipe {recipe.name}: runs {names[digest]!r} and {run.name!r} have the same config (run "
                f"{experiment!r}); remove one, or make a setting differ (a `variant:` label alone does not)"
            )
        names[digest] = run.name
        env = job_environment(config, workdir, recipe.name, [*config_run_tags(config), f"group:{run.group}"])
        # a submitted run keeps the W&B run it logs to (pinned in its record); an explicit id replaces it
        pinned = recorded_run_id(record, str(config.trainer.project_name), experiment, run_dir)
        if wandb_run_id is not None or pinned is not None:
            env["WANDB_RUN_ID"] = wandb_run_id if wandb_run_id is not None else pinned
        job = render_job(recipe, run, run_overrides, config, env, log_dir, workdir, experiment, digest)
        jobs.append(
            dataclasses.replace(
                job,
                total_steps=None if plan is None else plan.total_steps,
                fresh=None if fresh is None else (base_dir, fresh),
                wandb_run_id=env["WANDB_RUN_ID"],
                label=recipe.label(run, overrides),
                command_line=tuple(overrides),
            )
        )
    verdicts = [("ok", "")] * len(jobs) if validator is None else validator.results()
    for where, verdict in zip(wheres, verdicts):
        _raise_refused(where, verdict, validator)
    jobs = [dataclasses.replace(job, preflight=summary) for job, (_, summary) in zip(jobs, verdicts)]
    if evaluation and recipe.evaluation is not None:
        from fgrpo_verl.launch.eval_jobs import attach_evaluation

        def plan_more(names: list[str]) -> list[JobScript]:
            # one at a time: command-line overrides may make them equal to each other (all γ set alike)
            return [job for name in names
                    for job in plan_jobs(recipe_arg, [name], overrides, log_dir, workdir, evaluation=False,
                                         check=check)[1]]

        jobs = attach_evaluation(recipe, jobs, plan_more, log_dir, workdir)
    return recipe, jobs


def _close(validator) -> None:
    if validator is not None:
        validator.close()


def _raise_refused(where: str, verdict: tuple[str, str], validator) -> None:
    """A run's verdict from launch/preflight.py's ``check_run``: nothing for ``ok``, else a ``ValueError`` naming
    the run (one line per preflight refusal)."""
    kind, text = verdict
    if kind == "ok":
        return
    _close(validator)
    if kind == "refused":
        raise ValueError("\n".join(f"{where}: {line}" for line in text.splitlines()))
    raise ValueError(f"{where}: invalid config: {text}")


def run_states(jobs: list[JobScript]) -> list:
    """:class:`fgrpo_verl.launch.queue.RunStatus` of each planned job (a JobScript, or a run recorded by a submit:
    launch/manifest.py), from ``squeue`` and its checkpoint dir."""
    from fgrpo_verl.launch.identity import read_record
    from fgrpo_verl.launch.queue import active_jobs, run_status

    from fgrpo_verl.job.checkpoints import read_steps
    from fgrpo_verl.launch.eval_submit import split_queue

    queue = active_jobs([job.job_name for job in jobs])
    states = []
    for job in jobs:
        record = read_record(job.checkpoint_dir)
        # what verl actually trains (recorded by the trainer: over-long prompts dropped), else the plan from the
        # data here, else what the submit recorded (a launch without the data)
        total = (read_steps(job.checkpoint_dir) or {}).get("total_training_steps", job.total_steps)
        total = total if total is not None else (record or {}).get("total_steps")
        # evaluation jobs share the run's name (singleton); they are not its training
        training, _ = split_queue(queue.get(job.job_name, []), record)
        states.append(run_status(job.checkpoint_dir, total, training, record))
    return states


@dataclasses.dataclass
class Submitted:
    """What one launch submitted: ``(job, Slurm job id)`` per training job, ``(run, pass, job id)`` per
    evaluation job."""

    training: list = dataclasses.field(default_factory=list)
    evaluation: list = dataclasses.field(default_factory=list)

    def line(self, recipe: str) -> str:
        if not (self.training or self.evaluation):
            return f"nothing submitted from recipe {recipe}: every run is done, queued or running (above)"
        return (f"{len(self.training)} training and {len(self.evaluation)} evaluation job(s) submitted from recipe "
                f"{recipe}")


def submit_jobs(
    jobs: list[JobScript], script_dir: Path, log_dir: Path, force: bool = False, out=print
) -> Submitted:
    """Write each script to ``script_dir/<job name>.sbatch`` and submit it, saying so through ``out`` as each one
    goes. Runs that are done are never submitted (a finished run is not trained further); runs already queued or
    running are skipped unless ``force`` (then Slurm's singleton dependency holds the new job until the old one
    ends). An sbatch that fails stops the launch with an error that counts what was submitted before it (those
    jobs stay queued: a relaunch skips them and submits the rest)."""
    from fgrpo_verl.launch.identity import write_fresh, write_record

    from fgrpo_verl.launch.eval_jobs import check_submission
    from fgrpo_verl.launch.eval_submit import submit_eval_jobs

    # evaluation that could not work (a benchmark file or scorer missing) is refused before any job is submitted
    check_submission(jobs)
    script_dir.mkdir(parents=True, exist_ok=True)
    log_dir.mkdir(parents=True, exist_ok=True)
    submitted = Submitted()
    train_ids: dict[str, str | None] = {}
    for job, status in zip(jobs, run_states(jobs)):
        if status.state == "done":
            out(f"skipped {job.run_label}: {status.line(job.job_name)}")
            continue
        if status.state in ("queued", "running") and not force:
            out(f"skipped {job.run_label}: {status.line(job.job_name)}; --force submits another (held by singleton)")
            train_ids[job.job_name] = status.job
            continue
        write_record(job.checkpoint_dir, job.fingerprint, job.job_name, job.overrides, total_steps=job.total_steps,
                     wandb_run_id=job.wandb_run_id)
        path = script_dir / script_name(job.job_name)
        path.write_text(job.text, encoding="utf-8")
        try:
            # no dependency but the script's singleton
            job_id = sbatch(path)
        except (RuntimeError, OSError, ValueError) as exc:
            raise _partly_submitted(exc, submitted) from None
        write_record(job.checkpoint_dir, job.fingerprint, job.job_name, job.overrides, job_id=job_id)
        if job.fresh is not None:
            write_fresh(*job.fresh)
        submitted.training.append((job, job_id))
        train_ids[job.job_name] = job_id
        out(f"submitted {job.run_label}: job {job_id} {job.job_name} ({job.nodes} node(s) x {job.gpus_per_node} "
            "GPU(s))")
    # after the training jobs: evaluation jobs depend on them (afterany), eval_jobs.py
    try:
        submit_eval_jobs(jobs, train_ids, script_dir, log_dir, out, submitted=submitted.evaluation)
    except (RuntimeError, OSError, ValueError) as exc:
        raise _partly_submitted(exc, submitted) from None
    return submitted


def _partly_submitted(exc: Exception, submitted: Submitted) -> Exception:
    """``exc`` as it is when nothing was submitted; else an error that also says what stays queued (a submit that
    stopped half-way is the environment's failure, not the input's)."""
    if not (submitted.training or submitted.evaluation):
        return exc
    ids = [i for _, i in submitted.training] + [i for *_, i in submitted.evaluation]
    listed = ", ".join(ids) if len(ids) <= 6 else f"{ids[0]}, ... {ids[-1]}"
    return RuntimeError(f"{exc}; {len(submitted.training)} training and {len(submitted.evaluation)} evaluation "
                        f"job(s) were submitted before it and stay queued (job ids {listed}); a relaunch without "
                        "--force skips them and submits the rest")
