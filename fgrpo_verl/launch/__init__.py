"""``fgrpo-verl launch``: one Slurm job per recipe run (recipe.py: the format, render.py: the job script).

    plan_jobs()    load the recipe, compose + validate every selected run with verl, render its job script
    submit_jobs()  write the scripts and ``sbatch`` each one; returns the Slurm job ids
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
from pathlib import Path

from fgrpo_verl.launch.recipe import Recipe, load_recipe
from fgrpo_verl.launch.render import JobScript, render_job


def plan_jobs(
    recipe_arg: str, only: list[str] | None, overrides: list[str], log_dir: Path, workdir: Path
) -> tuple[Recipe, list[JobScript]]:
    """Every selected run's job script. Each run's config is composed and checked by verl's
    ``validate_config`` first, so a typo fails here, not hours later on the cluster.

    W&B naming (issue 6, fgrpo_verl/tracking.py): ``trainer.experiment_name`` is the run name
    ``{algo}-g{γ}-n{N}-{model}-s{seed}[-<variant>]`` read from the composed config, the W&B group is the recipe
    (the sweep), the tags are ``algo:/gamma:/n:`` plus ``group:<run group>``. The checkpoint dir follows the
    experiment name, so a requeued job resumes it."""
    from fgrpo_verl.compose import compose, validate
    from fgrpo_verl.launch.jobenv import job_environment
    from fgrpo_verl.tracking import config_run_name, config_run_tags

    recipe = load_recipe(recipe_arg)
    jobs, names = [], {}
    for run in recipe.select(only):
        run_overrides = recipe.run_overrides(run, overrides)
        try:
            config = compose(run_overrides)
            experiment = config_run_name(config, run.variant)
            # trainer.default_local_dir interpolates the experiment name: set it before anything reads the dir
            config.trainer.experiment_name = experiment
            run_overrides.append(f"trainer.experiment_name={experiment}")
            # verl prints its verdict on stdout, which --dry-run reserves for the scripts
            with contextlib.redirect_stdout(sys.stderr):
                validate(config)
        except Exception as exc:  # composition and validation errors carry the key; add the run
            raise ValueError(f"recipe {recipe.name}, run {run.name}: invalid config: {exc}") from exc
        if experiment in names:
            # same name = same checkpoint dir and W&B run: the two jobs would resume each other
            raise ValueError(
                f"recipe {recipe.name}: runs {names[experiment]!r} and {run.name!r} both get the run name "
                f"{experiment!r}; give one of them a `variant:` naming what differs"
            )
        names[experiment] = run.name
        env = job_environment(config, recipe.name, [*config_run_tags(config), f"group:{run.group}"])
        jobs.append(render_job(recipe, run, run_overrides, config, env, log_dir, workdir))
    return recipe, jobs


def submit_jobs(jobs: list[JobScript], script_dir: Path, log_dir: Path) -> list[str]:
    """Write each script to ``script_dir/<job name>.sbatch`` and submit it; returns Slurm job ids in order."""
    script_dir.mkdir(parents=True, exist_ok=True)
    log_dir.mkdir(parents=True, exist_ok=True)
    ids = []
    for job in jobs:
        path = script_dir / f"{job.job_name}.sbatch"
        path.write_text(job.text, encoding="utf-8")
        done = subprocess.run(["sbatch", "--parsable", str(path)], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(
                f"sbatch {path} failed (exit {done.returncode}): {done.stderr.strip() or done.stdout.strip()}"
                + (f"; submitted before it: {ids}" if ids else "")
            )
        # --parsable prints "<id>" or "<id>;<cluster>"
        match = re.match(r"^(\d+)", done.stdout.strip())
        if not match:
            raise RuntimeError(f"sbatch {path}: unexpected output {done.stdout!r}")
        ids.append(match.group(1))
    return ids
