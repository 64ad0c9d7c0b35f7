"""Stop at the next step boundary with a checkpoint when the Slurm job asks (time limit, preemption notice).

The job script (slurm/job.sbatch.template) carries ``#SBATCH --signal=B:USR1@<lead>``: ``<lead>`` seconds before
the time limit Slurm sends USR1 to the batch shell, which creates the file ``$FGRPO_STOP_FILE`` (on the shared
file system, next to the checkpoints). verl's training loop runs in a Ray actor that may sit on any node, so a
file is the one channel both see.

After step k's own checkpoint check (verl saves when ``k % save_freq == 0`` or k is the last step), the trainer
looks for the file. If it is there and k < T:

1. it saves step k (unless verl just did),
2. it sets the loop's bound to k: verl then logs step k's metrics, increments to k + 1 and leaves its
   ``while global_steps <= total_training_steps`` loop normally (no exception, W&B closes cleanly),
3. it writes ``$FGRPO_STOP_FILE.ack`` holding k, which tells the job script to ``scontrol requeue`` itself.

The next start resumes from global_step_k and logs k + 1, ...: no step is lost or repeated, and W&B's history
continues at k + 1. A stop file that appears during the last step changes nothing (the run is done).
"""

from __future__ import annotations

import os

STOP_ENV = "FGRPO_STOP_FILE"


def stop_requested() -> str | None:
    path = os.environ.get(STOP_ENV)
    return path if path and os.path.exists(path) else None


def stop_at_step_boundary(trainer) -> None:
    """What the trainer runs after each step's checkpoint check (verl's ``on_step_end`` hook, right after it): the
    numbered steps above when a stop is requested."""
    path = stop_requested()
    step, total = int(trainer.global_steps), int(trainer.total_training_steps)
    if path is None or step >= total:
        return
    save_freq = int(trainer.config.trainer.save_freq)
    if not (save_freq > 0 and step % save_freq == 0):
        trainer._save_checkpoint()
    trainer.total_training_steps = step
    with open(f"{path}.ack", "w", encoding="utf-8") as ack:
        ack.write(f"{step}\n")
    print(f"[fgrpo] stop requested ({path}): saved global_step_{step} of {total}; leaving the training loop")
