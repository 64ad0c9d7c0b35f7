"""What Slurm and the checkpoint directory say about a run: for ``--status`` and for resubmission.

A run (one identity = one Slurm job name, fgrpo_verl/job/identity.py) is

    queued       a job with its name is PENDING (or REQUEUED, held) in ``squeue``
    running      a job with its name is RUNNING (or CONFIGURING, COMPLETING, SUSPENDED)
    done         latest_checkpointed_iteration.txt has reached the run's total steps
    failed       it was submitted (run record) or has checkpoints, no job is queued or running, and it is not done;
                 the last job's state comes from ``sacct`` (or ``scontrol`` while the controller still knows it)
    not started  none of the above

``squeue`` is asked for every user's jobs: a colleague's job on the same run (shared launch directory) counts.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from fgrpo_verl.job.checkpoints import tracker_step
from fgrpo_verl.job.run_record import read_record

RUNNING = {"RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "RESIZING", "SIGNALING", "STAGE_OUT"}


@dataclass(frozen=True)
class RunStatus:
    state: str  # queued | running | done | failed | not started
    step: int
    total: int | None
    job: str | None = None
    detail: str = ""

    def line(self, name: str) -> str:
        steps = f"{self.step}/{self.total if self.total is not None else '?'} steps"
        job = f" job {self.job}" if self.job else ""
        detail = f" ({self.detail})" if self.detail else ""
        return f"{name}: {self.state}{job}, {steps}{detail}"


def _run(cmd: list[str]) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None


def require_slurm() -> None:
    """Slurm answers here (``squeue`` reaches the controller). ``launch --status`` asks this before it plans a
    recipe (composing and validating dozens of configs), so a laptop or a node without Slurm hears it at once."""
    active_jobs(["fgrpo-verl-probe"])


def active_jobs(names: list[str]) -> dict[str, list[tuple[str, str]]]:
    """``{job name: [(job id, state), ...]}`` for jobs of any user in the queue under one of ``names``."""
    if not names:
        return {}
    done = _run(["squeue", "-h", "-o", "%i|%j|%T", f"--name={','.join(names)}"])
    if done is None or done.returncode != 0:
        lines = [] if done is None else [line.strip() for line in done.stderr.splitlines() if line.strip()]
        # squeue's last line is its verdict ("squeue: fatal: Could not establish a configuration source")
        why = "squeue not found" if done is None else (lines[-1] if lines else f"exit {done.returncode}")
        raise RuntimeError(f"cannot ask Slurm which runs are queued ({why}); is this a Slurm login node?")
    found: dict[str, list[tuple[str, str]]] = {}
    wanted = set(names)
    for line in done.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 3 and parts[1] in wanted:
            found.setdefault(parts[1], []).append((parts[0], parts[2]))
    return found


def queued(dirs: dict[str, Path]) -> dict[str, tuple[list, list, dict | None]]:
    """``{job name: (its training jobs, its evaluation jobs, its run record)}`` for the runs whose checkpoint dirs
    are ``dirs`` (by job name), from the queue (:func:`active_jobs`): evaluation jobs share the run's name
    (singleton) and are told apart by the ids in its record (fgrpo_verl/job/run_record.py)."""
    queue, found = active_jobs(list(dirs)), {}
    for name, run_dir in dirs.items():
        record = read_record(run_dir)
        evals = {str(e["id"]) for e in (record or {}).get("eval_jobs", [])}
        entries = queue.get(name, [])
        found[name] = ([e for e in entries if e[0] not in evals], [e for e in entries if e[0] in evals], record)
    return found


def finished_job_state(job_id: str) -> str | None:
    """Final state of a job that left the queue: ``sacct`` (accounting), else ``scontrol`` (recent jobs)."""
    done = _run(["sacct", "-n", "-X", "-P", "-j", str(job_id), "-o", "State"])
    if done is not None and done.returncode == 0 and done.stdout.strip():
        return done.stdout.split()[0].split()[0]
    done = _run(["scontrol", "-o", "show", "job", str(job_id)])
    words = done.stdout.split() if done is not None and done.returncode == 0 else []
    return next((word.split("=", 1)[1] for word in words if word.startswith("JobState=")), None)


def run_status(checkpoint_dir: Path, total: int | None, jobs: list[tuple[str, str]], record: dict | None) -> RunStatus:
    """The status of one run from its queue entries ``jobs``, checkpoint dir and run record."""
    step = tracker_step(checkpoint_dir)
    for job_id, state in jobs:
        if state in RUNNING:
            return RunStatus("running", step, total, job_id, state.lower() if state != "RUNNING" else "")
    if jobs:
        job_id, state = jobs[0]
        return RunStatus("queued", step, total, job_id, state.lower() if state != "PENDING" else "")
    if total is not None and step >= total:
        return RunStatus("done", step, total)
    submitted = (record or {}).get("jobs") or []
    if submitted:
        last = submitted[-1]
        state = finished_job_state(last)
        detail = f"last job ended {state}" if state else "last job no longer known to Slurm"
        return RunStatus("failed", step, total, last, f"{detail}; relaunch resumes from step {step}")
    if step > 0:
        return RunStatus("failed", step, total, None, f"checkpoints up to step {step}, no job; relaunch resumes")
    return RunStatus("not started", 0, total)
