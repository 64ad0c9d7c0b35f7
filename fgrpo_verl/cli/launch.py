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


# everything after `launch` is parsed here (run), with options and overrides in any order: argparse's subcommand
# parser cannot take options after a `nargs="*"` positional that already matched (`launch R --dry-run x=1`)
PASS_THROUGH = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
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
    parser.add_argument("--log-dir", default="slurm_logs",
                        help="job output files, <job name>-<job id>.out (default: slurm_logs)")
    parser.add_argument(
        "overrides",
        nargs="*",
        help="Hydra overrides applied to every run, e.g. algorithm.fgrpo.gamma=0.7 trainer.nnodes=4",
    )


# a run label as the dry run, --status and a submit print it: `name [key=value ...]` (Recipe.label)
_LABEL = re.compile(r"^[^\s=\[\]]+\s+\[.*=.*\]$")


def _unlabel(values: list[str]) -> list[str]:
    """A pasted label's parts as a name and overrides: ``"a [x=1 y=2]"`` (quoted) and ``a`` ``[x=1`` ``y=2]``
    (unquoted) both give ``a x=1 y=2``."""
    out = []
    for value in values:
        # a quoted label is its words; an override may hold spaces
        for text in value.split() if _LABEL.match(value.strip()) else [value.strip()]:
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
    from fgrpo_verl.cli import OneLineParser
    from fgrpo_verl.launch import plan_jobs, submit_jobs
    from fgrpo_verl.launch.manifest import manifest_path, plan_key, planned_runs, read_manifest, write_manifest
    from fgrpo_verl.launch.queue import require_slurm
    from fgrpo_verl.launch.recipe import load_recipe

    verl_compat.require(verl_compat.TRAIN, "this command")
    parser = OneLineParser(prog="fgrpo-verl launch", description=HELP)
    add_arguments(parser)
    args = parser.parse_intermixed_args(args.overrides)  # all of `launch ...` (PASS_THROUGH)
    if args.script_dir == "-" and not args.dry_run:
        raise ValueError("--script-dir - (print the scripts) is for --dry-run; a submit writes them to a folder")
    if args.script_dir not in (None, "-") and Path(args.script_dir).exists() and not Path(args.script_dir).is_dir():
        raise ValueError(f"--script-dir {args.script_dir}: exists and is not a folder")
    workdir = Path.cwd()
    log_dir = (workdir / args.log_dir).resolve()
    submit = not (args.dry_run or args.status)
    only, overrides = split_only(args.only, args.overrides)
    if args.status:
        (recipe := load_recipe(args.recipe)).select(only)  # the recipe's and --only's mistakes before Slurm's
        require_slurm()  # before dozens of configs are composed
    if args.status and not args.fresh:
        # the runs a submit of the same plan recorded, if one did
        recorded = read_manifest(manifest_path(workdir, recipe.name), plan_key(recipe.path, only, overrides,
                                                                                 not args.no_eval))
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
        from fgrpo_verl.launch.summary import dry_run

        return 0 if dry_run(recipe, jobs, args.script_dir, workdir) else NOT_READY
    if args.status:
        return _print_status(planned_runs(jobs))
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
