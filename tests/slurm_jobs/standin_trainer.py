"""A stand-in for verl's trainer in the time-limit test (tests/test_slurm_lifecycle_on_cpu.py, test (e)).

A real verl start on the CPU backend takes 50-100 s before its first step on a 2-core CI machine, so a job with a
1-2 minute time limit cannot show a requeue cycle with verl inside it. This program keeps everything of the
lifecycle real except the model: it is started by the launcher-rendered job script in place of
``python -m fgrpo_verl train``, runs the training loop in the shape of verl's ``PPOTrainerBase.fit`` (resume from
``latest_checkpointed_iteration.txt``; per step: work, the ``save_freq``/last-step checkpoint, ``on_step_end``,
log, ``global_steps += 1``; loop while ``global_steps <= total_training_steps``), carries the real hook
(fgrpo_verl.job.preempt.stop_at_step_boundary) and logs every step to W&B (offline, the job's
WANDB_RUN_ID/WANDB_RESUME) and to the console as ``step:N - score:x``.

Step HOLD_STEP (optional) lasts until the job's stop request ($FGRPO_STOP_FILE) exists, at most HOLD_MAX_S: a
step longer than the time left, so the start that reaches it is always the one the time limit's USR1 stops, at
whatever moment Slurm's periodic limit check sends it; a start that resumes after it does not run it again.

    standin_trainer.py CHECKPOINT_DIR TOTAL_STEPS SAVE_FREQ STEP_SECONDS [HOLD_STEP]
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from fgrpo_verl.job.preempt import stop_at_step_boundary, stop_requested

# longer than a time limit of one minute: a hold that outlasts it ends in TIMEOUT, which the test reports
HOLD_MAX_S = 300


class _VerlShapedBase:
    def on_step_end(self):
        pass


class StandInTrainer(_VerlShapedBase):
    def __init__(self, checkpoint_dir: Path, total: int, save_freq: int, step_s: float, hold_step: int = 0):
        self.checkpoint_dir, self.step_s, self.hold_step = checkpoint_dir, step_s, hold_step
        self.total_training_steps = total
        self.config = type("C", (), {"trainer": type("T", (), {"save_freq": save_freq})()})()
        marker = checkpoint_dir / "latest_checkpointed_iteration.txt"
        self.global_steps = int(marker.read_text()) if marker.exists() else 0
        if self.global_steps:
            print(f"Resuming from {checkpoint_dir}/global_step_{self.global_steps}", flush=True)

    def on_step_end(self):
        # as the trainer mixin's hook does (fgrpo_verl/integration/trainer.py)
        super().on_step_end()
        stop_at_step_boundary(self)

    def _save_checkpoint(self):
        (self.checkpoint_dir / f"global_step_{self.global_steps}").mkdir(parents=True, exist_ok=True)
        (self.checkpoint_dir / "latest_checkpointed_iteration.txt").write_text(str(self.global_steps))

    def fit(self, run) -> None:
        self.global_steps += 1
        while self.global_steps <= self.total_training_steps:
            is_last_step = self.global_steps >= self.total_training_steps
            time.sleep(self.step_s)  # the step's work
            if self.global_steps == self.hold_step:
                deadline = time.monotonic() + HOLD_MAX_S
                while stop_requested() is None and time.monotonic() < deadline:
                    time.sleep(0.2)
            # a value that depends only on the step: the history must hold exactly these, once each
            score = round(1.0 / self.global_steps, 6)
            save_freq = self.config.trainer.save_freq
            if save_freq > 0 and (is_last_step or self.global_steps % save_freq == 0):
                self._save_checkpoint()
            self.on_step_end()
            run.log({"critic/score/mean": score}, step=self.global_steps)
            print(f"step:{self.global_steps} - critic/score/mean:{score}", flush=True)
            self.global_steps += 1
            if is_last_step:
                return


def main() -> int:
    import wandb

    checkpoint_dir, total, save_freq, step_s = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    hold_step = int(sys.argv[5]) if len(sys.argv) > 5 else 0
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    trainer = StandInTrainer(checkpoint_dir, total, save_freq, step_s, hold_step)
    run = wandb.init(project=os.environ["FGRPO_PROJECT"], name=os.environ["FGRPO_EXPERIMENT"])
    trainer.fit(run)
    run.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
