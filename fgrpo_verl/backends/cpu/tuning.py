"""Hydra overrides that make a small-model ``backend=cpu`` run fast without changing what it computes.

Measured in ``benchmarks/bench_cpu_step.py`` (docs/cpu_backend.md, "Step time"). They are not defaults of the
``cpu`` config group because the first one turns off the rollout-vs-actor log-prob check
(``training/rollout_probs_diff_*``) that the backend's own tests rely on.
"""

from __future__ import annotations


def fast_overrides(rollouts_per_step: int) -> list[str]:
    """Overrides for a run whose steps hold ``rollouts_per_step`` = ``data.train_batch_size * rollout.n`` samples.

    - ``algorithm.rollout_correction.bypass_mode=true``: verl takes the old log-probs from the rollout instead of
      a second forward pass of the actor. The rollout samples in fp32 with the actor's weights of this step, so
      the two agree to ~1e-7 (the backend's e2e test measures it); with one PPO epoch the update is the same.
    - micro-batches of the whole step: one forward/backward instead of several. Memory grows with it; at the
      demo shape (128 rollouts, ~1M parameters) it is tens of MB.
    """
    if isinstance(rollouts_per_step, bool) or not isinstance(rollouts_per_step, int) or rollouts_per_step < 1:
        raise ValueError(f"rollouts_per_step must be an int >= 1, got {rollouts_per_step!r}")
    return [
        "algorithm.rollout_correction.bypass_mode=true",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={rollouts_per_step}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={rollouts_per_step}",
        f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={rollouts_per_step}",
    ]
