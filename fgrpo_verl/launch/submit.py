"""What Slurm holds of planned runs (``run_states``) and their submission (``submit_jobs``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from fgrpo_verl.launch.render import JobScript, sbatch, script_name


def run_states(jobs: list[JobScript]) -> list:
    """:class:`fgrpo_verl.launch.queue.RunStatus` of each planned job (a JobScript, or a run recorded by a submit:
    launch/manifest.py), from ``squeue`` and its checkpoint dir."""
    from fgrpo_verl.job.checkpoints import read_steps
    from fgrpo_verl.launch.queue import queued, run_status

    queue = queued({job.job_name: job.checkpoint_dir for job in jobs})
    states = []
    for job in jobs:
        training, _, record = queue[job.job_name]
        # what verl actually trains (recorded by the trainer: over-long prompts dropped), else the plan from the
        # data here, else what the submit recorded (a launch without the data)
        total = (read_steps(job.checkpoint_dir) or {}).get("total_training_steps", job.total_steps)
        total = total if total is not None else (record or {}).get("total_steps")
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
    from fgrpo_verl.job.run_record import write_record
    from fgrpo_verl.launch.eval_jobs import check_submission
    from fgrpo_verl.launch.eval_submit import submit_eval_jobs
    from fgrpo_verl.job.identity import write_fresh

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
