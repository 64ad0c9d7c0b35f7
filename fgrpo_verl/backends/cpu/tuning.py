"""Hydra overrides that make a small-model ``backend=cpu`` run fast without changing what it computes.

Measured in ``benchmarks/bench_cpu_step.py`` (docs/cpu_backend.md, "Step time"). They are not defaults of the
``cpu`` config group because bypass mode turns off the rollout-vs-actor log-prob check
(``training/rollout_probs_diff_*``) that the backend's own tests rely on.
"""

from __future__ import annotations


def fast_overrides() -> list[str]:
    """Overrides to add to every small-model ``backend=cpu`` run:

    - ``algorithm.rollout_correction.bypass_mode=true``: verl takes the old log-probs from the rollout instead of
      a second forward pass of the actor. The rollout samples in fp32 with the actor's weights of this step, so
      the two agree to ~1e-7 (the backend's e2e test measures it); with one PPO epoch the update is the same.

    Micro-batch sizes are left to the caller: at the demo shape one micro-batch of 128 rollouts was not faster
    than two of 64 (measured side by side, docs/cpu_backend.md).
    """
    return ["algorithm.rollout_correction.bypass_mode=true"]
