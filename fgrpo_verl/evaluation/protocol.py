"""The selection protocol (selection.py) applied to run directories: read each checkpoint's selection-pass score,
check that the run is finished and fully scored, and choose. Used by the final evaluation job
(checkpoint_eval.py) and by ``fgrpo-verl report`` (fgrpo_verl/report/runs.py), so both make the same choice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from fgrpo_verl.job import checkpoints as ck
from fgrpo_verl.evaluation.plan import Steps
from fgrpo_verl.evaluation.selection import CheckpointScore, RunSelection, compute_of, select_baseline, select_focal


@dataclass
class RunScores:
    run: str
    done: bool                     # training reached its last step
    step: int                      # verl's resume point
    total: int | None
    expected: list[int]            # epoch checkpoints a finished run has
    scores: list[CheckpointScore] = field(default_factory=list)
    unscored: list[int] = field(default_factory=list)  # expected and saved, but no current selection result
    absent: list[int] = field(default_factory=list)    # expected, not saved (yet)

    @property
    def complete(self) -> bool:
        return self.done and not self.unscored and not self.absent

    def problem(self) -> str | None:
        """Why this run cannot be selected yet (None: it can)."""
        if not self.done:
            if self.step == 0 and not self.scores and not self.unscored:
                return "not started (no checkpoint yet)"
            return f"training not finished (step {self.step} of {self.total if self.total else '?'})"
        if self.absent:
            return f"checkpoints {self.absent} missing from the run directory"
        if self.unscored:
            return f"checkpoints {self.unscored} not evaluated by the selection pass"
        return None


def run_scores(name: str, run_dir: Path, steps: Steps, label: str, select_by: str) -> RunScores:
    """Every epoch checkpoint of ``run_dir`` with its score (``select_by``'s pass@1 in the ``label`` pass); ``steps``:
    the plan's (plan.py), what the run's checkpoints are as planned at launch (the trainer's record wins)."""
    run_dir = Path(run_dir)
    save_freq, total = ck.step_plan(run_dir, steps.save_freq, steps.total)
    saved = set(ck.saved_steps(run_dir))
    expected = ck.epoch_steps(save_freq, total)
    out = RunScores(name, ck.training_done(run_dir, steps.total), ck.tracker_step(run_dir), total, expected)
    for step in expected:
        if step not in saved:
            out.absent.append(step)
            continue
        result = ck.current_result(run_dir, step, label)
        if result is None:
            out.unscored.append(step)
            continue
        out.scores.append(CheckpointScore(step, compute_of(step, steps.train_batch_size, steps.group_size),
                                          ck.score(result, select_by, 1)))
    return out


def choose(own: RunScores, gamma: float, baseline: RunScores | None) -> RunSelection:
    """The protocol's checkpoint for a run (γ = 0: the baseline rule; γ > 0: the focal rule against ``baseline``).
    A run or baseline that is not complete gets no checkpoint; the constraint says why."""
    why = own.problem()
    if why is not None:
        return RunSelection(own.run, None, why)
    if gamma == 0:
        return select_baseline(own.run, own.scores)
    if baseline is None:
        return select_focal(own.run, own.scores, None)
    why = baseline.problem()
    if why is not None:
        return RunSelection(own.run, None, f"baseline {baseline.run}: {why}")
    return select_focal(own.run, own.scores, select_baseline(baseline.run, baseline.scores))
