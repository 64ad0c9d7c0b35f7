"""End to end: verl 0.9.1's real PPO trainer (``main_ppo`` via ``fgrpo-verl train backend=cpu``) on the CPU backend.

Two runs serve every assertion (each run costs a Ray start-up, ~30-40 s on 2 cores):

- the suite's shared maze run (conftest ``maze_fgrpo_run``, tests/verl_runs.py): F-GRPO (γ = 0.5), 2 steps, a
  checkpoint saved at every step (``train --quiet``: its log, ``train.log``, sits beside them and is copied too);
- a resume: a copy of that run's checkpoints (the last one is the only one with optimizer states: fgrpo-verl
  prunes the earlier ones, fgrpo_verl/job/resume_point.py) and the same command with DAPO group filtering on and
  ``trainer.total_training_steps=3 trainer.resume_mode=auto``: it must load the step-2 checkpoint and run step 3
  only (with validation, n = 2 samples per held-out maze), keeping only groups with mixed outcomes.

The data is the maze task (7x7 mazes, tiny Qwen2) with a parity reward (``cpu_backend_parity_reward.py``) so
that groups mix successes and failures. Metrics come from verl's ``file`` logger (one JSON line per step);
rollouts (uid, score) from ``trainer.rollout_data_dir``. Wall time and peak memory (PSS, summed over the
run's whole process tree: driver, Ray, workers) of each run are printed (``pytest -s``).
"""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from pathlib import Path

import pytest
import torch
from verl_runs import SHARED_GAMMA, SHARED_GROUP_N, SHARED_STEPS, maze_common_overrides
from verl_runs import metrics as _metrics
from verl_runs import run_train as _run_train

GAMMA = SHARED_GAMMA
GROUP_N = SHARED_GROUP_N
RESUMED_STEP = SHARED_STEPS + 1

pytestmark = pytest.mark.e2e


def _rollouts(rollout_dir: Path, step: int) -> list[dict]:
    return [json.loads(line) for line in (rollout_dir / f"{step}.jsonl").read_text().splitlines()]


def _expected_advantage_range(rollouts: list[dict], gamma: float) -> tuple[float, float]:
    """(max, min) of F-GRPO advantages recomputed from the dumped scores with fgrpo_verl.focal."""
    from fgrpo_verl.focal import FocalSettings, compute_focal_advantage

    # verl keys each sample "<prompt uid>_<rollout>_<output>": the prompt uid is the group
    groups = [r["uid"].rsplit("_", 2)[0] for r in rollouts]
    scores = torch.tensor([[float(r["score"])] for r in rollouts])
    settings = FocalSettings(gamma=gamma, success_threshold=0.0, smoothing_alpha=0.0, base="grpo")
    result = compute_focal_advantage(scores, torch.ones_like(scores), groups, settings)
    return float(result.advantages.max()), float(result.advantages.min())


@pytest.fixture(scope="module")
def runs(maze_fgrpo_run, tmp_path_factory):
    shared = maze_fgrpo_run
    _assert_ok(shared)
    root = tmp_path_factory.mktemp("cpu_backend_e2e_resume")
    # a copy: the resumed run writes and prunes checkpoints in its own directory, never in the shared run's
    ckpt = root / "checkpoints"
    shutil.copytree(shared["ckpt"], ckpt)
    resumed = _run_train(
        [*maze_common_overrides(shared["maze"], filter_groups=True), "actor_rollout_ref.rollout.val_kwargs.n=2",
         "trainer.logger=[console,file]", "trainer.project_name=cpu_backend_e2e", "trainer.experiment_name=resumed",
         "trainer.save_freq=1", f"trainer.test_freq={RESUMED_STEP}", "trainer.val_before_train=False",
         f"trainer.default_local_dir={ckpt}", f"trainer.rollout_data_dir={root / 'rollouts'}",
         f"trainer.total_training_steps={RESUMED_STEP}", "trainer.resume_mode=auto"],
        root / "resumed",
    )
    return {"shared": shared, "ckpt": ckpt, "resumed": resumed, "resumed_rollouts": root / "rollouts",
            "resumed_metrics": _metrics(root / "resumed") if resumed["rc"] == 0 else {}}


def _assert_ok(run: dict) -> None:
    assert run["rc"] == 0, "training run failed; end of its log:\n" + run["log"][-6000:]


def test_fgrpo_with_dapo_filtering_runs_and_rollout_logprobs_match_actor(runs):
    _assert_ok(runs["shared"])
    _assert_ok(runs["resumed"])
    # both steps of the fresh run, and the step the resumed run took from the loaded checkpoint
    checked = [("shared", 1, runs["shared"]["steps"][1], runs["shared"]["rollouts"]),
               ("shared", 2, runs["shared"]["steps"][2], runs["shared"]["rollouts"]),
               ("resumed", RESUMED_STEP, runs["resumed_metrics"][RESUMED_STEP], runs["resumed_rollouts"])]
    for run, step, m, rollout_dir in checked:
        assert m["training/global_step"] == step
        # the rollout server's sampled-token log-probs vs the actor's recomputation (verl's own metric)
        assert m["training/rollout_probs_diff_valid"] == 1.0
        assert m["training/rollout_probs_diff_max"] < 1e-3, (run, step, m["training/rollout_probs_diff_max"])
        # the focal estimator ran: the logged advantage range is F-GRPO's for the dumped scores, not GRPO's
        rollouts = _rollouts(rollout_dir, step)
        assert len(rollouts) == 4 * GROUP_N
        hi, lo = _expected_advantage_range(rollouts, GAMMA)
        hi0, lo0 = _expected_advantage_range(rollouts, 0.0)
        assert hi > 0 > lo, "a group with mixed outcomes gives advantages of both signs"
        assert m["critic/advantages/max"] == pytest.approx(hi, abs=1e-4)
        assert m["critic/advantages/min"] == pytest.approx(lo, abs=1e-4)
        assert abs(hi - hi0) > 1e-2 and abs(lo - lo0) > 1e-2, "gamma must change this batch's advantages"
        by_group = defaultdict(set)
        for r in rollouts:
            by_group[r["uid"].rsplit("_", 2)[0]].add(float(r["score"]) > 0)
        if run == "resumed":
            # DAPO filtering: every kept group has both outcomes (uniform groups were evicted and regenerated)
            assert all(outcomes == {True, False} for outcomes in by_group.values()), (run, step, by_group)
        else:
            assert len(by_group) == 4, (run, step, by_group)
    # validation with n samples ran at the resumed run's last step
    val_keys = [k for k in runs["resumed_metrics"][RESUMED_STEP] if k.startswith("val-core/") and "mean@2" in k]
    assert val_keys, sorted(k for k in runs["resumed_metrics"][RESUMED_STEP] if k.startswith("val"))


def test_resume_auto_continues_at_step_3(runs):
    _assert_ok(runs["shared"])
    _assert_ok(runs["resumed"])
    # the checkpoint the resume starts from is the fresh run's last; that run logged exactly its own steps
    # (0: validation before training)
    assert sorted(runs["shared"]["steps"]) == [0, 1, 2]
    assert (runs["shared"]["ckpt"] / "global_step_1").is_dir() and (runs["shared"]["ckpt"] / "global_step_2").is_dir()
    assert (runs["shared"]["ckpt"] / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    assert f"Resuming from {runs['ckpt'] / 'global_step_2'}" in runs["resumed"]["log"]
    # the resumed run logs step 3 only: nothing repeated, nothing skipped
    assert sorted(runs["resumed_metrics"]) == [RESUMED_STEP]
    assert (runs["ckpt"] / f"global_step_{RESUMED_STEP}").is_dir()
    assert (runs["ckpt"] / "latest_checkpointed_iteration.txt").read_text().strip() == str(RESUMED_STEP)
