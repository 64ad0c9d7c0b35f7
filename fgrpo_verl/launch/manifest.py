"""What a submit planned, kept for ``launch --status``: ``<launch dir>/slurm_jobs/<recipe>.runs.json``.

A run's job name and checkpoint dir hash its composed config (identity.py), so naming a recipe's runs means
composing them all (most of ``--status``'s time). A submit records them here, keyed by everything the plan was
made from that ``--status`` is given too (the recipe file, ``--only``, the overrides, ``--no-eval``, the Hydra
config files, fgrpo-verl's and verl's versions); a status with the same key reads them instead of composing, any
other composes as a submit would. It is written once the jobs are submitted: a submit that fails leaves no record.
"""

from __future__ import annotations

import hashlib
import json
from collections import namedtuple
from pathlib import Path

from fgrpo_verl.evaluation.plan import Plan
from fgrpo_verl.job.checkpoints import write_json

# What ``--status`` reads of a planned job (fgrpo_verl.launch.render.JobScript's fields of the same names;
# ``eval_plan``: its first evaluation job's plan, None without evaluation)
PlannedRun = namedtuple("PlannedRun", "run_name job_name checkpoint_dir total_steps eval_plan")


def manifest_path(workdir: Path, recipe_name: str) -> Path:
    return Path(workdir) / "slurm_jobs" / f"{recipe_name}.runs.json"


def plan_key(recipe_path: Path, only: list[str] | None, overrides: list[str], evaluation: bool) -> str:
    """What the plan was made from: the recipe file, the command line, the Hydra config files the runs compose
    (an edited YAML renames runs), and the versions of fgrpo-verl and verl (verl's own configs)."""
    from importlib.metadata import PackageNotFoundError, version

    import fgrpo_verl
    from fgrpo_verl.config.paths import config_dir

    try:
        verl_version = version("verl")
    except PackageNotFoundError:
        verl_version = None
    digest = hashlib.sha256(Path(recipe_path).read_bytes())
    digest.update(json.dumps([only, list(overrides), evaluation, fgrpo_verl.__version__, verl_version]).encode())
    root = Path(config_dir())
    for path in sorted(root.rglob("*.yaml")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def planned_runs(jobs: list) -> list[PlannedRun]:
    return [PlannedRun(job.run_label, job.job_name, Path(job.checkpoint_dir), job.total_steps,
                       None if job.evaluation is None else job.evaluation.jobs[0].plan) for job in jobs]


def write_manifest(path: Path, key: str, jobs: list) -> None:
    """Record ``jobs`` under ``key`` (other keys' entries kept: a submit of some runs, then of others)."""
    entries = _read(path)
    entries[key] = [{"run_name": r.run_name, "job_name": r.job_name, "checkpoint_dir": str(r.checkpoint_dir),
                     "total_steps": r.total_steps, "eval_plan": r.eval_plan and r.eval_plan.model_dump()}
                    for r in planned_runs(jobs)]
    write_json(path, entries)


def read_manifest(path: Path, key: str) -> list[PlannedRun] | None:
    """The runs recorded under ``key``, or None (no manifest, another plan, an unreadable file)."""
    entry = _read(path).get(key)
    if not isinstance(entry, list):
        return None
    try:
        return [PlannedRun(e["run_name"], e["job_name"], Path(e["checkpoint_dir"]), e["total_steps"],
                           None if e["eval_plan"] is None else Plan.read(e["eval_plan"])) for e in entry]
    except (KeyError, TypeError, ValueError):   # ValueError: a plan of another version (plan.py)
        return None


def _read(path: Path) -> dict:
    try:
        found = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}
