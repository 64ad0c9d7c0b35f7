"""End to end: verl 0.9.1's trainer with its own vLLM rollout (the engine GPU runs use), on vLLM's CPU build.

- A 3-step F-GRPO run with DAPO's group filtering, started as a verl user starts one: verl's own
  ``python -m verl.trainer.main_ppo`` with ``algorithm.adv_estimator=fgrpo`` on fgrpo-verl's config (``--config-path
  <hydra_configs> --config-name fgrpo_trainer backend=cpu_vllm``, README "Train"), which logs the ``fgrpo/*`` and
  ``actor/fgrpo/*`` metrics; maze task, the demo's 1M-parameter Qwen2 (vLLM's CPU attention needs head_dim >= 32),
  validation through vLLM at the last step.
  The parity reward (``cpu_backend_parity_reward.py``, with every prompt of even index solved) leaves about half
  the groups uniform: filtering evicts them and generates again until the step's 4 groups all mix outcomes, which
  the rollout dump of every step shows. verl's
  ``training/rollout_probs_diff_*`` compares the probabilities vLLM sampled with against the actor's own for the
  same tokens: after updates (steps 2 and 3) they only agree if the actor's weights reached the engine. Measured
  once with the weight load skipped after the first sync (docs/cpu_backend.md): max 0.048 and 0.044 at steps 2
  and 3, against ~4e-8 with it; the bound below sits between them.
- A vLLM server that cannot start (a KV cache smaller than one sequence) ends the run with vLLM's error, within
  a bounded time, and leaves no process behind.

The two runs are independent (own directory, own Ray cluster, own logger path) and run side by side: on CPU most
of a run is one process at a time importing torch/verl/vLLM, so the second run fills the idle core.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from side_by_side import wait_for_ray
# the CPU backend's e2e test recomputes F-GRPO advantages from verl's rollout dump: the same check here
from test_cpu_backend_e2e_on_cpu import _expected_advantage_range, _rollouts
from verl_runs import metrics, run_train, stopping_on_error

from fgrpo_verl.config.paths import CONFIG_NAME, config_dir

pytestmark = pytest.mark.e2e

REWARD_FILE = Path(__file__).resolve().parent / "cpu_backend_parity_reward.py"
STEPS = 3
GAMMA = 1.0
# verl's own entry point on fgrpo-verl's config (the plain verl path, README "Train")
MAIN_PPO = (sys.executable, "-m", "verl.trainer.main_ppo", "--config-path", str(config_dir()), "--config-name", CONFIG_NAME)
# max |p_vLLM - p_actor| over sampled tokens: ~4e-8 when synced, ~0.04 when the engine keeps old weights
SYNCED_PROBS_DIFF = 1e-4


def _overrides(maze, root: Path) -> list[str]:
    return [
        # the settings of the measured negative control above (verl's optimiser defaults: no warm-up), plus DAPO's
        # group filtering, which chooses the groups a step trains on and leaves the weight sync as it is
        "backend=cpu_vllm", "algorithm.adv_estimator=fgrpo", f"algorithm.fgrpo.gamma={GAMMA}",
        "algorithm.use_kl_in_reward=False", "actor_rollout_ref.actor.use_kl_loss=False",
        f"data.train_files={maze.train_file}", f"data.val_files={maze.val_file}", "data.train_batch_size=4",
        f"data.max_prompt_length={maze.prompt_length}", f"data.max_response_length={maze.max_response_length}",
        f"actor_rollout_ref.model.path={maze.model_dir}", "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16", "actor_rollout_ref.actor.optim.lr=1e-3",
        "actor_rollout_ref.rollout.val_kwargs.n=2", "actor_rollout_ref.rollout.val_kwargs.do_sample=True",
        "actor_rollout_ref.rollout.val_kwargs.temperature=1.0",
        f"reward.custom_reward_function.path={REWARD_FILE}",
        "reward.custom_reward_function.name=compute_score_even_prompts_solved",
        "algorithm.filter_groups.enable=True", f"trainer.rollout_data_dir={root / 'rollouts'}",
        "trainer.logger=[console,file]", "trainer.project_name=cpu_vllm_e2e", f"trainer.experiment_name={root.name}",
        "trainer.save_freq=-1", f"trainer.test_freq={STEPS}", "trainer.val_before_train=False",
        f"trainer.total_training_steps={STEPS}", f"trainer.default_local_dir={root / 'ckpt'}",
    ]


def _failed_start(maze, root: Path) -> dict:
    """The run whose vLLM server cannot start: 4 KiB of KV cache cannot hold one 74-token sequence, which vLLM
    refuses at engine start-up. Its leftover processes are listed the moment the run has ended."""
    import psutil

    run = run_train([*_overrides(maze, root), "actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_memory_bytes=4096"],
                    root, timeout_s=420, label="cpu_vllm start-up failure")
    run["leftovers"] = [p.info["cmdline"] for p in psutil.process_iter(["cmdline", "environ"])
                        if (p.info["environ"] or {}).get("VERL_FILE_LOGGER_PATH") == str(root / "metrics.jsonl")]
    return run


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Both runs of the module, side by side (the failing one starts once the training run's Ray node is up):
    ((training run, its metrics), failed-start run)."""
    from fgrpo_verl.tasks.maze import build

    maze = build(tmp_path_factory.mktemp("cpu_vllm") / "maze", size=7, n_train=64, n_val=4, model_preset="small",
                 seed=0)
    root, failing_root = tmp_path_factory.mktemp("trained"), tmp_path_factory.mktemp("failed_start")
    with ThreadPoolExecutor(1) as pool, stopping_on_error() as stop:
        training = pool.submit(run_train, _overrides(maze, root), root, label="cpu_vllm e2e", stop=stop,
                               program=MAIN_PPO)
        wait_for_ray(root / "train.log", training)
        failed = _failed_start(maze, failing_root)
        run = {**training.result(), "rollouts": root / "rollouts"}
    return (run, metrics(root) if run["rc"] == 0 else None), failed


@pytest.fixture(scope="module")
def trained(runs):
    run, steps = runs[0]
    assert run["rc"] == 0, "training run failed; end of its log:\n" + run["log"][-6000:]
    return run, steps


def test_verls_vllm_rollout_samples_with_the_actors_updated_weights(trained):
    run, steps = trained
    assert sorted(steps) == list(range(1, STEPS + 1))
    assert "vLLMHttpServer" in run["log"]  # verl's own vLLM server ran the rollout, not the hf one
    for step, m in steps.items():
        assert m["training/rollout_probs_diff_valid"] == 1.0
        assert m["training/rollout_probs_diff_max"] < SYNCED_PROBS_DIFF, (step, m["training/rollout_probs_diff_max"])
        assert m["actor/grad_norm"] > 0  # the actor moved, so every later step samples from new weights
        assert m["fgrpo/num_groups"] == 4  # the focal estimator saw the 4 groups of n=4
        assert 0 < m["fgrpo/g_mean"] <= 1 and "actor/fgrpo/adv_pos_share" in m  # the trainer mode's and the loss's
    # validation sampled through the engine too (val_kwargs.n = 2 per held-out maze)
    assert any(k.startswith("val-core/") and k.endswith("/mean@2") for k in steps[STEPS]), sorted(steps[STEPS])


def test_dapo_filtering_keeps_mixed_groups_and_the_focal_estimator_scales_their_advantages(trained):
    """verl dumps a step's rollouts after filtering (the batch it trains on): every kept group has both outcomes,
    and the logged advantage range is F-GRPO's (γ = 1) recomputed from the dumped scores, not GRPO's."""
    run, steps = trained
    # the filter evicted something (else the mixed-groups check below would hold without it)
    assert sum(m.get("training/filter_groups/evicted_samples", 0) for m in steps.values()) > 0, steps
    for step, m in steps.items():
        rollouts = _rollouts(run["rollouts"], step)
        by_group = defaultdict(set)
        for sample in rollouts:
            by_group[sample["uid"].rsplit("_", 2)[0]].add(float(sample["score"]) > 0)
        assert len(by_group) == 4 and all(o == {True, False} for o in by_group.values()), (step, by_group)
        hi, lo = _expected_advantage_range(rollouts, GAMMA)
        hi0, lo0 = _expected_advantage_range(rollouts, 0.0)
        assert m["critic/advantages/max"] == pytest.approx(hi, abs=1e-4), step
        assert m["critic/advantages/min"] == pytest.approx(lo, abs=1e-4), step
        # every kept group mixes outcomes (0 < μ̂ < 1), so γ = 1 scales both ends of the range
        assert abs(hi - hi0) > 1e-2 and abs(lo - lo0) > 1e-2, "gamma must change this batch's advantages"


def test_no_weight_sync_noise_in_the_log(trained):
    """The rotary cache has no checkpoint weight: vLLM's reload says so at every sync unless we filter it."""
    run, _ = trained
    assert "RotaryEmbedding: Failed to load weights" not in run["log"]
    assert "BufferError" not in run["log"] and "weight_loader" not in run["log"]


def test_a_vllm_server_that_cannot_start_ends_the_run_with_its_error(runs):
    """4 KiB of KV cache cannot hold one 74-token sequence: vLLM refuses at engine start-up."""
    run = runs[1]
    assert not run["timed_out"], "the run hung after the vLLM server failed; end of its log:\n" + run["log"][-4000:]
    assert run["rc"] != 0
    log = run["log"]
    assert "To serve at least one request with the model's max seq len" in log  # vLLM's own reason
    assert "Engine core initialization failed" in "\n".join(log.splitlines()[-6:])  # the run's last word
    assert not run["leftovers"], run["leftovers"]
