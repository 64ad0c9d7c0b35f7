"""``fgrpo-verl launch RECIPE [--only NAME ...] [--dry-run | --status] [--fresh] [--force] [overrides ...]``: one Slurm
job per recipe run; the run lifecycle (identity, requeue, status) is described in docs/slurm.md."""

from __future__ import annotations

import argparse
import contextlib
import re
from pathlib import Path

HELP = ("Submit a recipe's runs as Slurm jobs (one job each, Ray over all nodes); --dry-run prints what a submit "
        "would do and what it still needs (exit status 3 while a submit from here would be refused).")
# the dry run's exit status when its NOT READY list is not empty: scripts can tell "plan fine, inputs missing" from
# a bad recipe or override (2) and from success (0)
NOT_READY = 3


def _add_arguments(parser: argparse.ArgumentParser, overrides_nargs) -> None:
    parser.add_argument("recipe", help="recipe file (recipes/paper_main.yaml) or shipped recipe name (paper_main)")
    parser.add_argument(
        "--only",
        nargs="+",
        action="extend",
        metavar="NAME",
        default=None,
        help="submit only these runs (names as in the recipe; repeatable: --only A --only B means both); "
        "arguments containing '=' after it are overrides",
    )
    parser.add_argument(
        "--dry-run", action="store_true",
        help="submit nothing; print a table of the runs (GPUs, steps, GPU-hours, storage, preflight) and what a "
        "submit needs that is not here (exit status 3 while anything is missing, 0 when a submit would go)",
    )
    parser.add_argument(
        "--status", action="store_true", help="submit nothing; print each run's state: queued, running, done, failed, not started (checks no config "
        "with verl: --dry-run does)"
    )
    parser.add_argument(
        "--fresh", action="store_true", help="new runs of these configs (new checkpoint dirs and W&B runs), not resumes"
    )
    parser.add_argument(
        "--force", action="store_true", help="submit runs that are already queued or running (held until those end)"
    )
    parser.add_argument(
        "--no-eval", action="store_true",
        help="submit training only, not the recipe's evaluation jobs (a later launch submits them)",
    )
    parser.add_argument(
        "--script-dir", default=None,
        help="where the job scripts are written (default: slurm_jobs/<recipe>); with --dry-run the scripts are "
        "written only when this is given ('-': printed, with the details of each job)",
    )
    parser.add_argument("--log-dir", default=None, help="job output files, <job name>-<job id>.out (default: slurm_logs)")
    parser.add_argument(
        "overrides",
        nargs=overrides_nargs,
        help="Hydra overrides applied to every run, e.g. algorithm.fgrpo.gamma=0.7 trainer.nnodes=4",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # argparse cannot take options after a `nargs="*"` positional that already matched (`launch R --dry-run
    # x=1` would reject x=1). So everything after RECIPE is collected here and parsed again, intermixed, in run.
    _add_arguments(parser, argparse.REMAINDER)


def _reparse(args: argparse.Namespace) -> argparse.Namespace:
    """Options given after RECIPE (mixed with overrides) merged with those given before it."""
    from fgrpo_verl.cli import OneLineParser

    parser = OneLineParser(prog="fgrpo-verl launch")
    _add_arguments(parser, "*")
    late = parser.parse_intermixed_args([args.recipe, *args.overrides])
    only = (args.only or []) + (late.only or [])
    return argparse.Namespace(
        recipe=args.recipe,
        only=only or None,
        dry_run=args.dry_run or late.dry_run,
        status=args.status or late.status,
        fresh=args.fresh or late.fresh,
        force=args.force or late.force,
        no_eval=args.no_eval or late.no_eval,
        script_dir=late.script_dir or args.script_dir,
        log_dir=late.log_dir or args.log_dir or "slurm_logs",
        overrides=late.overrides,
    )


# a run label as the dry run, --status and a submit print it: `name [key=value ...]` (Recipe.label)
_LABEL = re.compile(r"^(?P<name>[^\s=\[\]]+)\s+\[(?P<changed>.*=.*)\]$")


def _unlabel(values: list[str]) -> list[str]:
    """A pasted label's parts as a name and overrides: ``"a [x=1 y=2]"`` (quoted) and ``a`` ``[x=1`` ``y=2]``
    (unquoted) both give ``a x=1 y=2``."""
    out = []
    for value in values:
        text = value.strip()
        match = _LABEL.match(text)
        if match:
            out += [match["name"], *match["changed"].split()]
            continue
        if "=" in text and text.startswith("["):  # no Hydra override starts with '[': the label's bracket
            text = text[1:]
        if "=" in text and text.endswith("]") and text.count("]") > text.count("["):
            text = text[:-1]
        out.append(text)
    return out


def split_only(only: list[str] | None, overrides: list[str]) -> tuple[list[str] | None, list[str]]:
    """``--only a b x=1`` gives only=[a, b] and the override x=1 (run names never contain '='); a label as the dry
    run prints it, ``a [x=1]``, gives the same."""
    if only is None:
        return None, list(overrides)
    only = _unlabel(only)
    names = [o for o in only if "=" not in o]
    moved = [o for o in only if "=" in o]
    if not names:
        raise ValueError(f"--only needs at least one run name, got only overrides {moved}")
    return names, moved + list(overrides)


def _not_final(recipe, job) -> str:
    """Why ``job``'s dry-run script differs from the one a submit would render, or ``""``: a recipe with
    ``save_per_epoch`` sets ``trainer.save_freq`` to the steps per epoch of the run's training data, which a
    submit requires and a dry run without the data cannot count (fgrpo_verl/launch/steps.py)."""
    if job.total_steps is not None or not recipe.save_per_epoch:
        return ""
    return (f"training data {job.config.data.train_files} not found here, so trainer.save_freq=<steps per epoch> "
            "(recipe save_per_epoch) is missing below; prepare the data (docs/recipes.md) to see the exact script")


def _print_scripts(recipe, jobs) -> None:
    """Every job's scripts with what the dry run knows about each (``--dry-run --script-dir -``)."""
    import sys

    from fgrpo_verl.launch.eval_dry_run import dry_run_lines, dry_run_total

    incomplete = []
    for job in jobs:
        print(f"### job {job.job_name} (run {job.run_label}): {job.nodes} node(s) x {job.gpus_per_node} GPU(s); "
              f"{_disk_note(job)}")
        print(f"### {job.preflight}")
        missing = _not_final(recipe, job)
        if missing:
            incomplete.append(job.run_label)
            print(f"### NOT the script a submit renders: {missing}")
        print(job.text)
        for line in dry_run_lines(job):
            print(line)
    for line in dry_run_total(jobs):
        print(line)
    print(f"### {len(jobs)} job(s) from recipe {recipe.name} ({recipe.reproduces}); dry run, nothing submitted")
    if incomplete:
        print(f"fgrpo-verl launch: note: {len(incomplete)} of {len(jobs)} script(s) cannot be rendered exactly yet "
              f"(their training data is not here, see the '### NOT' lines): {', '.join(incomplete)}",
              file=sys.stderr)


def _dry_run(recipe, jobs, script_dir: str | None, workdir: Path) -> int:
    """The summary table, each distinct preflight, what a submit still needs; the scripts only on request."""
    from fgrpo_verl.launch import summary
    from fgrpo_verl.launch.eval_baseline import missing_baseline

    if script_dir == "-":
        _print_scripts(recipe, jobs)
    for line in summary.table_lines(recipe, jobs):
        print(line)
    print("\nSlurm requests (each job's sbatch options, plus SBATCH_* from your environment; your site's nodes must "
          "offer them):")
    for line in summary.request_lines(jobs):
        print(f"  {line}")
    preflight = summary.preflight_lines(jobs)
    if preflight:
        print("\npreflight (what verl's start-up and the GPUs' memory allow; docs/slurm.md):")
        for line in preflight:
            print(f"  {line}")
    baseless: dict[str, list[str]] = {}
    for job in jobs if script_dir != "-" else ():  # the printed scripts said it for each job
        why = missing_baseline(job)
        if why:
            baseless.setdefault(why, []).append(job.run_label)
    for why, labels in baseless.items():
        print(f"\nno γ = 0 baseline for {', '.join(labels[:3])}{f' and {len(labels) - 3} more' if len(labels) > 3 else ''}"
              f" ({why}): checkpoints selected on their own scores, with no compute limit")
    if script_dir and script_dir != "-":
        written = summary.write_scripts(jobs, Path(script_dir).resolve())
        print(f"\n{len(written)} script(s) written to {Path(script_dir).resolve()} (as a submit would name them)")
        not_final = [job.run_label for job in jobs if _not_final(recipe, job)]
        if not_final:
            print(f"NOT the scripts a submit renders for {len(not_final)} run(s): their training data is not here, so "
                  "trainer.save_freq=<steps per epoch> (recipe save_per_epoch) is missing; prepare the data first")
    elif script_dir != "-":
        print("\nscripts: not printed; --script-dir DIR writes them, --script-dir - prints them with each job's details")
    missing = summary.readiness(jobs, workdir)
    if missing:
        print(f"\nNOT READY: a submit from {workdir} would refuse until these are fixed:")
        for line in missing:
            print(line)
        return NOT_READY
    print("\nready: a submit from here has every input it checks (data, models, benchmarks, scorers)")
    return 0


def _disk_note(job) -> str:
    from fgrpo_verl.launch.disk import checkpoint_disk

    return checkpoint_disk(job.config, job.total_steps)


def _recorded_runs(recipe_arg: str, only, overrides, workdir: Path, evaluation: bool):
    """The runs a submit of the same plan recorded (fgrpo_verl/launch/manifest.py), or None."""
    from fgrpo_verl.launch.manifest import manifest_path, plan_key, read_manifest
    from fgrpo_verl.launch.recipe import load_recipe

    recipe = load_recipe(recipe_arg)
    return read_manifest(manifest_path(workdir, recipe.name), plan_key(recipe.path, only, overrides, evaluation))


def _print_status(runs) -> int:
    """Each run's state (and its evaluation's progress) from Slurm and its checkpoint dir."""
    from fgrpo_verl.launch import run_states
    from fgrpo_verl.launch.eval_submit import progress_line

    for planned, status in zip(runs, run_states(runs)):
        print(f"{planned.run_name}  {status.line(planned.job_name)}")
        if planned.eval_plan is not None:
            print(f"{' ' * len(planned.run_name)}  {progress_line(planned.eval_plan)}")
    return 0


def run(args: argparse.Namespace) -> int:
    """Errors are raised and mapped to a line and an exit status by fgrpo_verl.cli.errors (bad input 2, the
    environment 1)."""
    import os
    import time

    from fgrpo_verl import verl_compat
    from fgrpo_verl.launch import plan_jobs, submit_jobs

    verl_compat.require(verl_compat.TRAIN, "this command")
    args = _reparse(args)
    if args.script_dir == "-" and not args.dry_run:
        raise ValueError("--script-dir - (print the scripts) is for --dry-run; a submit writes them to a folder")
    if args.script_dir not in (None, "-") and Path(args.script_dir).exists() and not Path(args.script_dir).is_dir():
        raise ValueError(f"--script-dir {args.script_dir}: exists and is not a folder")
    workdir = Path.cwd()
    log_dir = (workdir / args.log_dir).resolve()
    submit = not (args.dry_run or args.status)
    if args.status:
        from fgrpo_verl.launch.queue import require_slurm

        require_slurm()  # before dozens of configs are composed
    only, overrides = split_only(args.only, args.overrides)
    if args.status and not args.fresh:
        recorded = _recorded_runs(args.recipe, only, overrides, workdir, evaluation=not args.no_eval)
        if recorded is not None:
            return _print_status(recorded)
    recipe, jobs = plan_jobs(
        args.recipe,
        only,
        overrides,
        log_dir,
        workdir,
        fresh=time.strftime("%Y%m%dT%H%M%S", time.gmtime()) if args.fresh else None,
        wandb_run_id=os.environ.get("WANDB_RUN_ID") or None,
        require_data=submit,
        evaluation=not args.no_eval,
        check=not args.status,  # a status submits nothing: verl's verdicts are the submit's and the dry run's
    )
    if args.dry_run:
        return _dry_run(recipe, jobs, args.script_dir, workdir)
    if args.status:
        from fgrpo_verl.launch.manifest import planned_runs

        return _print_status(planned_runs(jobs))
    from fgrpo_verl.launch.manifest import manifest_path, plan_key, write_manifest

    script_dir = Path(args.script_dir) if args.script_dir else workdir / "slurm_jobs" / recipe.name
    # what --status reads instead of composing the runs again (the names are the same until the plan changes);
    # written after a partial submit too, whose jobs are queued, without hiding why the submit stopped
    record = lambda: write_manifest(manifest_path(workdir, recipe.name),  # noqa: E731
                                    plan_key(recipe.path, only, overrides, not args.no_eval), jobs)
    try:
        submitted = submit_jobs(jobs, script_dir.resolve(), log_dir, force=args.force)
    except Exception:
        with contextlib.suppress(OSError):
            record()
        raise
    record()
    print(f"{submitted.line(recipe.name)}; scripts in {script_dir}, logs in {log_dir}")
    return 0
