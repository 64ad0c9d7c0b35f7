"""The ``fgrpo`` advantage estimator, registered in verl's ``ADV_ESTIMATOR_REGISTRY``.

verl's ``ray_trainer.compute_advantage`` calls every non-built-in estimator as
``fn(token_level_rewards=(B,T), response_mask=(B,T), config=<algorithm DictConfig>, index=<uids>)``
(plus ``reward_baselines`` when present, ignored here) and expects ``(advantages, returns)``.
The math lives in :mod:`fgrpo_verl.focal`.
"""

from __future__ import annotations

import contextlib
import contextvars

import torch

from fgrpo_verl.focal import FocalSettings, compute_focal_advantage

ESTIMATOR_NAME = "fgrpo"


def compute_fgrpo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index=None,
    config=None,
    epsilon: float = 1e-6,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """F-GRPO: A_i = (1 - μ̂)^γ · A_i^base with μ̂ = X/N per prompt group (paper eqs. 11-13).

    Args:
        token_level_rewards: (B, T) rewards; a rollout's outcome is their sum.
        response_mask: (B, T) 1 for response tokens.
        index: (B,) group labels (verl's ``uid``); rollouts of one prompt share one.
        config: verl's ``algorithm`` config; reads ``fgrpo.{gamma, success_threshold, smoothing_alpha, base}``
            and ``norm_adv_by_std_in_grpo`` (verl's own key, default True as in verl).
        epsilon: added to the group std, 1e-6 as in verl's GRPO.

    Returns:
        (advantages, returns), both (B, T) and equal, as for every outcome-only estimator in verl.
    """
    if config is None:
        raise ValueError("fgrpo needs the `algorithm` config (with its `fgrpo` block); got config=None")
    settings = FocalSettings.from_config(config.get("fgrpo") if hasattr(config, "get") else getattr(config, "fgrpo", None))
    norm = config.get("norm_adv_by_std_in_grpo", True) if hasattr(config, "get") else True
    if not isinstance(norm, bool):
        raise ValueError(f"algorithm.norm_adv_by_std_in_grpo={norm!r} is invalid: expected true or false")
    result = compute_focal_advantage(
        token_level_rewards, response_mask, index, settings, norm_adv_by_std_in_grpo=norm, epsilon=epsilon
    )
    sink = _RESULT_SINK.get()
    if sink is not None:
        sink.append((settings, result))
    return result.advantages, result.advantages


# verl drops everything but (advantages, returns), so a caller that wants the per-group numbers (the focal
# metrics in fgrpo_verl/trainer.py) opens a capture around verl's advantage call and reads them afterwards.
_RESULT_SINK: contextvars.ContextVar[list | None] = contextvars.ContextVar("fgrpo_result_sink", default=None)


@contextlib.contextmanager
def capture_results():
    """Collect ``(FocalSettings, FocalResult)`` of every ``fgrpo`` estimator call made inside the block."""
    sink: list = []
    token = _RESULT_SINK.set(sink)
    try:
        yield sink
    finally:
        _RESULT_SINK.reset(token)


def register() -> None:
    """Put ``fgrpo`` in verl's registry; idempotent even if this module is imported under two names."""
    from verl.trainer.ppo import core_algos

    current = core_algos.ADV_ESTIMATOR_REGISTRY.get(ESTIMATOR_NAME)
    if current is compute_fgrpo_outcome_advantage:
        return
    if current is not None and getattr(current, "__qualname__", None) == compute_fgrpo_outcome_advantage.__qualname__:
        # Same function from a second import of this module (e.g. a checkout on sys.path next to the wheel).
        core_algos.ADV_ESTIMATOR_REGISTRY[ESTIMATOR_NAME] = compute_fgrpo_outcome_advantage
        return
    core_algos.register_adv_est(ESTIMATOR_NAME)(compute_fgrpo_outcome_advantage)
