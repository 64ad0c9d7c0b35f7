"""The paper's checkpoint and γ selection (§5.3 "Checkpoint selection", App. L.3 / Table 7), written once.

    1. a checkpoint is saved each epoch;
    2. baseline (γ = 0): its checkpoint with the best average in-domain math pass@1;
    3. each focal run (γ > 0, otherwise the baseline's config): its best checkpoint by the same score among those
       "obtained with equal or less compute" than the baseline's selected one;
    4. γ: the focal γ whose selected checkpoint has the best average in-domain math pass@1 (Table 7).

Which evaluation each score comes from is where this differs from the paper, which gives n = 1024 samples per
problem for its final tables and does not say with which n it scored the checkpoints it selected from. Steps 2-3
score every epoch checkpoint with the recipe's selection pass (``protocol: select``, the shipped default: n = 32 on
the math benchmarks; ``protocol: full``: the final pass's n and benchmarks). Step 4 scores each γ's selected
checkpoint with its final pass (n = 1024), which every γ gets anyway: the choice between γ, whose margins in the
paper's Table 6 are as small as 0.5 points, is not left to the n = 32 pass's noise (docs/evaluation.md).

Compute is the number of rollouts sampled up to a checkpoint, step x data.train_batch_size x rollout.n (prompts per
step times group size): for a focal run and its baseline (same batch and N) that is the step, and it stays
comparable where N differs. The score is the mean over the math benchmarks of pass@1
(fgrpo_verl/evaluation/checkpoint_eval.py writes it per checkpoint). Ties go to less compute (an earlier checkpoint;
the paper's "equal or less compute" prefers it) and, for γ, to the smaller γ (closer to the baseline). A run
without a baseline in its recipe (a control, or a focal run whose γ = 0 twin is not in the recipe) gets its best
checkpoint over all of its own; the report says so. Selection needs every candidate checkpoint scored: a run with
unscored checkpoints is not selected (the report lists what is missing) rather than selected among a subset.

The rules are applied to run directories by :func:`run_scores` and :func:`choose` (read each checkpoint's
selection-pass score, check that the run is finished and fully scored, and choose), for the final evaluation job
(eval_job.py) and ``fgrpo-verl report`` (fgrpo_verl/report/runs.py) alike, so both make the same choice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from fgrpo_verl.evaluation.plan import Steps
from fgrpo_verl.job import checkpoints as ck


@dataclass(frozen=True)
class CheckpointScore:
    step: int
    compute: float  # rollouts sampled up to this checkpoint
    score: float    # average math pass@1 of the selection pass, in [0, 1]


@dataclass(frozen=True)
class RunSelection:
    run: str
    checkpoint: CheckpointScore | None  # None: no checkpoint qualifies (or the run is not complete)
    constraint: str                     # how it was chosen, for the report


def compute_of(step: int, train_batch_size: int, group_size: int) -> float:
    """Rollouts sampled by the end of ``step``: step x prompts per step x rollouts per prompt."""
    return float(step) * train_batch_size * group_size


def best_checkpoint(scores: list[CheckpointScore], max_compute: float | None = None) -> CheckpointScore | None:
    """The highest-scoring checkpoint with compute <= ``max_compute`` (all when None); ties: less compute, then the
    earlier step. None when no checkpoint qualifies. ``scores``: one per saved step, pass@1 of our own results
    (protocol.run_scores)."""
    candidates = [s for s in scores if max_compute is None or s.compute <= max_compute]
    if not candidates:
        return None
    return min(candidates, key=lambda s: (-s.score, s.compute, s.step))


def select_baseline(run: str, scores: list[CheckpointScore]) -> RunSelection:
    return RunSelection(run, best_checkpoint(scores), "best average math pass@1 over all checkpoints")


def select_focal(run: str, scores: list[CheckpointScore], baseline: RunSelection | None) -> RunSelection:
    """A focal run's checkpoint: best with equal or less compute than the baseline's selected checkpoint; without a
    baseline (none in the recipe), the best over all of its checkpoints."""
    if baseline is None:
        return RunSelection(run, best_checkpoint(scores),
                            "best average math pass@1 over all checkpoints (no γ = 0 baseline in the recipe)")
    if baseline.checkpoint is None:
        return RunSelection(run, None, f"waits for its baseline {baseline.run}'s selection")
    limit = baseline.checkpoint.compute
    chosen = best_checkpoint(scores, max_compute=limit)
    how = (f"best average math pass@1 with compute <= baseline {baseline.run}'s selected step "
           f"{baseline.checkpoint.step} ({limit:.0f} rollouts)")
    if chosen is None:
        how += ": no checkpoint qualifies"
    return RunSelection(run, chosen, how)


def select_gamma(final: dict[float, float | None]) -> float | None:
    """The γ whose selected checkpoint has the best average math pass@1 in its final pass (``final``: γ -> that
    score; ties: smaller γ); None when some γ has no final score yet (the choice would change once it has one) or
    there is none."""
    if not final or any(score is None for score in final.values()):
        return None
    return min(final, key=lambda g: (-final[g], g))


@dataclass
class RunScores:
    run: str
    done: bool                     # training reached its last step
    step: int                      # verl's resume point
    total: int | None
    # the epoch checkpoints a finished run has: scored, saved but without a current selection result, not saved yet
    scores: list[CheckpointScore] = field(default_factory=list)
    unscored: list[int] = field(default_factory=list)
    absent: list[int] = field(default_factory=list)

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
    out = RunScores(name, ck.training_done(run_dir, steps.total), ck.tracker_step(run_dir), total)
    for step in ck.epoch_steps(save_freq, total):
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
