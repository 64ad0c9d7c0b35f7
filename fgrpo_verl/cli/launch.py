"""``fgrpo-verl launch RECIPE [--only NAME ...] [--dry-run] [overrides ...]``: one Slurm job per recipe run."""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "Submit a recipe's runs as Slurm jobs (one job each, Ray over all nodes); --dry-run prints the scripts."


def _add_arguments(parser: argparse.ArgumentParser, overrides_nargs) -> None:
    parser.add_argument("recipe", help="recipe file (recipes/paper_main.yaml) or shipped recipe name (paper_main)")
    parser.add_argument(
        "--only",
        nargs="+",
        metavar="NAME",
        default=None,
        help="submit only these runs (names as in the recipe); arguments containing '=' after it are overrides",
    )
    parser.add_argument("--dry-run", action="store_true", help="submit nothing; print every job's sbatch script")
    parser.add_argument(
        "--script-dir", default=None, help="where the job scripts are written (default: slurm_jobs/<recipe>)"
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
    parser = argparse.ArgumentParser(prog="fgrpo-verl launch")
    _add_arguments(parser, "*")
    late = parser.parse_intermixed_args([args.recipe, *args.overrides])
    only = (args.only or []) + (late.only or [])
    return argparse.Namespace(
        recipe=args.recipe,
        only=only or None,
        dry_run=args.dry_run or late.dry_run,
        script_dir=late.script_dir or args.script_dir,
        log_dir=late.log_dir or args.log_dir or "slurm_logs",
        overrides=late.overrides,
    )


def split_only(only: list[str] | None, overrides: list[str]) -> tuple[list[str] | None, list[str]]:
    """``--only a b x=1`` gives only=[a, b] and the override x=1 (run names never contain '=')."""
    if only is None:
        return None, list(overrides)
    names = [o for o in only if "=" not in o]
    moved = [o for o in only if "=" in o]
    if not names:
        raise ValueError(f"--only needs at least one run name, got only overrides {moved}")
    return names, moved + list(overrides)


def run(args: argparse.Namespace) -> int:
    import sys

    from fgrpo_verl.launch import plan_jobs, submit_jobs

    args = _reparse(args)
    workdir = Path.cwd()
    log_dir = (workdir / args.log_dir).resolve()
    try:
        only, overrides = split_only(args.only, args.overrides)
        recipe, jobs = plan_jobs(args.recipe, only, overrides, log_dir, workdir)
    except ValueError as exc:
        print(f"fgrpo-verl launch: error: {exc}", file=sys.stderr)
        return 2
    if args.dry_run:
        for job in jobs:
            print(f"### job {job.job_name}: {job.nodes} node(s) x {job.gpus_per_node} GPU(s)")
            print(job.text)
        print(f"### {len(jobs)} job(s) from recipe {recipe.name} ({recipe.reproduces}); dry run, nothing submitted")
        return 0
    script_dir = Path(args.script_dir) if args.script_dir else workdir / "slurm_jobs" / recipe.name
    ids = submit_jobs(jobs, script_dir.resolve(), log_dir)
    for job, job_id in zip(jobs, ids):
        print(f"submitted {job.job_name}: job {job_id} ({job.nodes} node(s) x {job.gpus_per_node} GPU(s))")
    print(f"{len(ids)} job(s) submitted from recipe {recipe.name}; scripts in {script_dir}, logs in {log_dir}")
    return 0
