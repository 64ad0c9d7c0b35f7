"""End to end: verl 0.9.1's real PPO trainer (``main_ppo`` via ``fgrpo-verl train backend=cpu``) on the CPU backend,
read from the suite's shared maze run (conftest ``maze_fgrpo_run``, tests/verl_runs.py): F-GRPO (γ = 0.5), 2 steps,
a checkpoint saved at every step, the rollouts of every step dumped.

The data is the maze task (7x7 mazes, tiny Qwen2) with a parity reward (``cpu_backend_parity_reward.py``) so that
groups mix successes and failures. Metrics come from verl's ``file`` logger (one JSON line per step); rollouts
(uid, score) from ``trainer.rollout_data_dir``.

What continues from such checkpoints is checked where a run does it anyway: ``trainer.resume_mode=auto`` (what
every Slurm job of ``fgrpo-verl launch`` runs) resumes twice in tests/test_slurm_launch_e2e_on_cpu.py, from a
checkpoint verl saved and from one saved on a stop request (where the suite can start Slurm: as root, as in CI);
DAPO's group filtering runs in tests/test_cpu_vllm_e2e_on_cpu.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from verl_runs import SHARED_GAMMA, SHARED_GROUP_N

GAMMA = SHARED_GAMMA
GROUP_N = SHARED_GROUP_N

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


def _assert_ok(run: dict) -> None:
    assert run["rc"] == 0, "training run failed; end of its log:\n" + run["log"][-6000:]


def test_the_focal_estimator_gives_the_advantages_and_rollout_logprobs_match_the_actor(maze_fgrpo_run):
    run = maze_fgrpo_run
    _assert_ok(run)
    for step in (1, 2):
        m = run["steps"][step]
        assert m["training/global_step"] == step
        # the rollout server's sampled-token log-probs vs the actor's recomputation (verl's own metric)
        assert m["training/rollout_probs_diff_valid"] == 1.0
        assert m["training/rollout_probs_diff_max"] < 1e-3, (step, m["training/rollout_probs_diff_max"])
        # the focal estimator ran: the logged advantage range is F-GRPO's for the dumped scores, not GRPO's
        rollouts = _rollouts(run["rollouts"], step)
        assert len(rollouts) == 4 * GROUP_N
        hi, lo = _expected_advantage_range(rollouts, GAMMA)
        hi0, lo0 = _expected_advantage_range(rollouts, 0.0)
        assert hi > 0 > lo, "a group with mixed outcomes gives advantages of both signs"
        assert m["critic/advantages/max"] == pytest.approx(hi, abs=1e-4)
        assert m["critic/advantages/min"] == pytest.approx(lo, abs=1e-4)
        assert abs(hi - hi0) > 1e-2 and abs(lo - lo0) > 1e-2, "gamma must change this batch's advantages"
        assert len({r["uid"].rsplit("_", 2)[0] for r in rollouts}) == 4


def test_each_step_is_checkpointed_and_only_the_resume_point_keeps_optimizer_states(maze_fgrpo_run):
    """What a resume reads: the run logged exactly its own steps (0: validation before training), saved both, and
    the tracker names the last; once step 2 is logged, step 1's optimizer shards are gone
    (fgrpo_verl/job/resume_point.py): only the resume point needs them."""
    run = maze_fgrpo_run
    _assert_ok(run)
    ckpt = run["ckpt"]
    assert sorted(run["steps"]) == [0, 1, 2]
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    actor = lambda step: sorted(p.name for p in (ckpt / f"global_step_{step}" / "actor").glob("*.pt"))  # noqa: E731
    assert actor(1) == ["extra_state_world_size_1_rank_0.pt", "model_world_size_1_rank_0.pt"]
    assert actor(2) == [*actor(1), "optim_world_size_1_rank_0.pt"]
