"""End to end: verl 0.9.1's real PPO trainer (``main_ppo`` via ``fgrpo-verl train backend=cpu``) on the CPU backend.

One module-scoped pair of runs serves every assertion (each run costs a Ray start-up, ~30-40 s on 2 cores):

- run 1: F-GRPO (γ = 1) with DAPO group filtering, 1 step, checkpoint saved at step 1;
- run 2: the same command with ``trainer.total_training_steps=2 trainer.resume_mode=auto``: it must load the
  step-1 checkpoint and run step 2 only (with validation, n = 2 samples per held-out maze).

The data is the maze task (7x7 mazes, tiny Qwen2) with a parity reward (``cpu_backend_parity_reward.py``) so
that groups mix successes and failures. Metrics come from verl's ``file`` logger (one JSON line per step);
rollouts (uid, score) from ``trainer.rollout_data_dir``. Wall time and peak memory (PSS, summed over the
run's whole process tree: driver, Ray, workers) of each run are printed (``pytest -s``).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest
import torch
from verl_runs import metrics as _metrics
from verl_runs import run_train as _run_train

REWARD_FILE = Path(__file__).resolve().parent / "cpu_backend_parity_reward.py"
GAMMA = 1.0
GROUP_N = 4

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
def runs(tmp_path_factory):
    from fgrpo_verl.tasks.maze import build

    root = tmp_path_factory.mktemp("cpu_backend_e2e")
    maze = build(root / "maze", size=7, n_train=64, n_val=4, model_preset="tiny", seed=0)
    ckpt = root / "checkpoints"
    common = [
        "backend=cpu",
        f"data.train_files={maze.train_file}", f"data.val_files={maze.val_file}",
        "data.train_batch_size=4", f"data.max_prompt_length={maze.prompt_length}",
        f"data.max_response_length={maze.max_response_length}", "data.seed=0",
        f"actor_rollout_ref.model.path={maze.model_dir}",
        f"actor_rollout_ref.rollout.n={GROUP_N}",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16",
        "actor_rollout_ref.actor.optim.lr=1e-3", "actor_rollout_ref.actor.use_kl_loss=False",
        "actor_rollout_ref.rollout.val_kwargs.n=2", "actor_rollout_ref.rollout.val_kwargs.do_sample=True",
        "actor_rollout_ref.rollout.val_kwargs.temperature=1.0",
        "algorithm.adv_estimator=fgrpo", f"algorithm.fgrpo.gamma={GAMMA}", "algorithm.use_kl_in_reward=False",
        "algorithm.filter_groups.enable=True",
        f"reward.custom_reward_function.path={REWARD_FILE}", "reward.custom_reward_function.name=compute_score",
        "trainer.logger=[console,file]", "trainer.project_name=cpu_backend_e2e",
        "trainer.save_freq=1", "trainer.test_freq=2", "trainer.val_before_train=False",
        f"trainer.default_local_dir={ckpt}", f"trainer.rollout_data_dir={root / 'rollouts'}",
    ]
    first = _run_train([*common, "trainer.total_training_steps=1", "trainer.experiment_name=first"], root / "first")
    second = _run_train(
        [*common, "trainer.total_training_steps=2", "trainer.resume_mode=auto", "trainer.experiment_name=second"],
        root / "second",
    )
    return {"root": root, "ckpt": ckpt, "first": first, "second": second,
            "first_metrics": _metrics(root / "first") if first["rc"] == 0 else {},
            "second_metrics": _metrics(root / "second") if second["rc"] == 0 else {}}


def _assert_ok(run: dict) -> None:
    assert run["rc"] == 0, "training run failed; end of its log:\n" + run["log"][-6000:]


def test_fgrpo_with_dapo_filtering_runs_and_rollout_logprobs_match_actor(runs):
    _assert_ok(runs["first"])
    _assert_ok(runs["second"])
    steps = {1: runs["first_metrics"][1], 2: runs["second_metrics"][2]}
    for step, m in steps.items():
        assert m["training/global_step"] == step
        # the rollout server's sampled-token log-probs vs the actor's recomputation (verl's own metric)
        assert m["training/rollout_probs_diff_valid"] == 1.0
        assert m["training/rollout_probs_diff_max"] < 1e-3, (step, m["training/rollout_probs_diff_max"])
        # the focal estimator ran: the logged advantage range is F-GRPO's for the dumped scores, not GRPO's
        rollouts = _rollouts(runs["root"] / "rollouts", step)
        assert len(rollouts) == 4 * GROUP_N
        hi, lo = _expected_advantage_range(rollouts, GAMMA)
        hi0, lo0 = _expected_advantage_range(rollouts, 0.0)
        assert hi > 0 > lo, "DAPO filtering keeps only groups with mixed outcomes, so both signs must appear"
        assert m["critic/advantages/max"] == pytest.approx(hi, abs=1e-4)
        assert m["critic/advantages/min"] == pytest.approx(lo, abs=1e-4)
        assert abs(hi - hi0) > 1e-2 and abs(lo - lo0) > 1e-2, "gamma must change this batch's advantages"
        # DAPO filtering: every kept group has both outcomes (uniform groups were evicted and regenerated)
        by_group = defaultdict(set)
        for r in rollouts:
            by_group[r["uid"].rsplit("_", 2)[0]].add(float(r["score"]) > 0)
        assert all(outcomes == {True, False} for outcomes in by_group.values()), by_group
    # validation with n samples ran at the last step
    val_keys = [k for k in steps[2] if k.startswith("val-core/") and "mean@2" in k]
    assert val_keys, sorted(k for k in steps[2] if k.startswith("val"))


def test_resume_auto_continues_at_step_2(runs):
    _assert_ok(runs["first"])
    _assert_ok(runs["second"])
    assert sorted(runs["first_metrics"]) == [1]
    assert (runs["ckpt"] / "global_step_1").is_dir()
    assert f"Resuming from {runs['ckpt'] / 'global_step_1'}" in runs["second"]["log"]
    # the resumed run logs step 2 only: nothing repeated, nothing skipped
    assert sorted(runs["second_metrics"]) == [2]
    assert (runs["ckpt"] / "global_step_2").is_dir()
    assert (runs["ckpt"] / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
