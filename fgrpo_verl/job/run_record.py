"""A run directory's record, ``<checkpoint dir>/fgrpo_run.json``: which config (fingerprint) the directory belongs
to, its overrides, the Slurm jobs submitted for it and the W&B run they log to.

The launcher writes it at each submit (fgrpo_verl/job/identity.py names the runs); every job checks it first
thing on its node, ``python -m fgrpo_verl.job.run_record check DIR FINGERPRINT``: a directory that holds another
config's run (a hash prefix collision, a hand-set experiment name, a copied directory) is refused instead of
resumed or overwritten.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from fgrpo_verl.job.checkpoints import read_json, write_json

RECORD = "fgrpo_run.json"


def read_record(checkpoint_dir: Path) -> dict | None:
    return read_json(Path(checkpoint_dir) / RECORD, "move it away if the directory is yours")


def check_record(checkpoint_dir: Path, digest: str) -> dict | None:
    """The run record of ``checkpoint_dir``; refuses when it belongs to another config. A directory that holds
    checkpoints but no record (made by hand) is refused too: it is not provably this run."""
    checkpoint_dir = Path(checkpoint_dir)
    record = read_record(checkpoint_dir)
    if record is None:
        if any(checkpoint_dir.glob("global_step_*")):
            raise ValueError(
                f"{checkpoint_dir} holds checkpoints but no {RECORD}: it was not written by this config's launch; "
                "move it away or launch with --fresh"
            )
        return None
    if record.get("fingerprint") != digest:
        raise ValueError(
            f"{checkpoint_dir} holds a run of a different config (fingerprint {str(record.get('fingerprint'))[:12]}, "
            f"this config {digest[:12]}): refusing to resume or overwrite it. Its overrides: "
            f"{record.get('overrides')}. Launch with --fresh for a new run, or move the directory away."
        )
    return record


def recorded_run_id(record: dict | None, checkpoint_dir: Path) -> str | None:
    """The W&B run id the run in ``checkpoint_dir`` already logs to, from its run record; None for a run never
    submitted, or for a copy of a run whose original is still in place (a copy is a run of its own).

    A run keeps its W&B run whatever changes around it: an explicit ``WANDB_RUN_ID`` given at its first launch, a
    launch directory moved, a package upgrade that changes how ids are derived. So the id is pinned in the record
    (``wandb_run_id``, with the directory it was pinned in, ``wandb_run_dir``) when the run is first submitted."""
    pinned = (record or {}).get("wandb_run_id")
    if not pinned:
        return None
    home = record.get("wandb_run_dir")
    if home and _is_other_copy(Path(home), Path(checkpoint_dir), str(pinned)):
        return None
    return str(pinned)


def _is_other_copy(home: Path, here: Path, pinned: str) -> bool:
    """Whether ``here`` is a copy of the run still recorded at ``home`` (a move leaves nothing at ``home``)."""
    try:
        if not home.exists() or (here.exists() and os.path.samefile(home, here)):
            return False
        return (read_record(home) or {}).get("wandb_run_id") == pinned
    except (OSError, ValueError):
        return False


def write_record(
    checkpoint_dir: Path, digest: str, experiment: str, overrides, job_id: str | None = None, total_steps=None,
    wandb_run_id: str | None = None, eval_job: tuple[str, str] | None = None,
) -> dict:
    """Create or update the run record (atomically: a reader never sees half a file); appends ``job_id``, sets
    ``total_steps`` (the run's step count, for ``--status`` where its data is not at hand) and ``wandb_run_id``
    (the W&B run its jobs log to, :func:`recorded_run_id`); ``eval_job`` = (job id, pass) appends an evaluation job
    (``eval_jobs``: they share the run's job name, fgrpo_verl/launch/eval_jobs.py)."""
    checkpoint_dir = Path(checkpoint_dir)
    record = check_record(checkpoint_dir, digest) or {
        "fingerprint": digest,
        "experiment": experiment,
        "overrides": list(overrides),
        "jobs": [],
    }
    if total_steps is not None:
        record["total_steps"] = int(total_steps)
    if job_id is not None:
        record["jobs"] = [*record.get("jobs", []), str(job_id)]
    if eval_job is not None:
        record["eval_jobs"] = [*record.get("eval_jobs", []), {"id": str(eval_job[0]), "phase": eval_job[1]}]
    if wandb_run_id is not None:
        record["wandb_run_id"] = str(wandb_run_id)
        record["wandb_run_dir"] = os.path.abspath(checkpoint_dir)
    write_json(checkpoint_dir / RECORD, record)
    return record


def main(argv: list[str] | None = None) -> int:
    """``python -m fgrpo_verl.job.run_record check DIR FINGERPRINT``: what a job runs before training."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 3 or args[0] != "check":
        print("usage: python -m fgrpo_verl.job.run_record check CHECKPOINT_DIR FINGERPRINT", file=sys.stderr)
        return 2
    try:
        check_record(Path(args[1]), args[2])
    except ValueError as exc:
        print(f"fgrpo: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
