"""The ``fgrpo`` advantage estimator, registered in verl's ``ADV_ESTIMATOR_REGISTRY``.

verl's ``ray_trainer.compute_advantage`` calls every non-built-in estimator as
``fn(token_level_rewards=(B,T), response_mask=(B,T), config=<algorithm DictConfig>, index=<uids>)``
(plus ``reward_baselines`` when present, ignored here) and expects ``(advantages, returns)``.
The math lives in :mod:`fgrpo_verl.focal`.
"""

from __future__ import annotations

import logging

import torch

from fgrpo_verl.focal import FocalSettings, compute_focal_advantage
from fgrpo_verl.integration import plugin

logger = logging.getLogger("fgrpo_verl")

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
    settings, norm = settings_of(config)
    result = compute_focal_advantage(
        token_level_rewards, response_mask, index, settings, norm_adv_by_std_in_grpo=norm, epsilon=epsilon
    )
    warn_if_no_rollout_succeeds(settings, result)
    plugin.report(RESULTS, (settings, result))
    return result.advantages, result.advantages


def settings_of(config) -> tuple[FocalSettings, bool]:
    """``(FocalSettings, norm_adv_by_std_in_grpo)`` of verl's ``algorithm`` config, validated (~0.04 ms a call: read
    at every call, so a config changed in place between steps is what the next step uses)."""
    if config is None:
        raise ValueError("fgrpo needs the `algorithm` config (with its `fgrpo` block); got config=None")
    getter = config.get if hasattr(config, "get") else lambda key, default=None: getattr(config, key, default)
    settings = FocalSettings.from_config(getter("fgrpo"))
    norm = getter("norm_adv_by_std_in_grpo", True)
    if not isinstance(norm, bool):
        raise ValueError(f"algorithm.norm_adv_by_std_in_grpo={norm!r} is invalid: expected true or false")
    return settings, norm


# said once per process (the estimator runs in the run's one TaskRunner)
_WARNED_NO_SUCCESS = []


def warn_if_no_rollout_succeeds(settings: FocalSettings, result) -> None:
    """With scores but no rollout above ``success_threshold``, every group counts as all wrong (μ̂ = 0, g = 1): the
    focal weight never acts and the run is the base algorithm. Usually a threshold at or above the reward's score of
    a correct answer (a 0.5 reward for correct answers with the default 0.5)."""
    if _WARNED_NO_SUCCESS or settings.gamma == 0 or bool(result.group_correct.any()) or not bool(result.scores.any()):
        return
    _WARNED_NO_SUCCESS.append(True)
    logger.warning(
        "fgrpo-verl: this step's scores are nonzero (max %.4g) but none is > algorithm.fgrpo.success_threshold="
        "%g: every group counts as all wrong, so F-GRPO acts as %s; set success_threshold between the scores of wrong "
        "and correct answers (said once per run)", float(result.scores.max()), settings.success_threshold,
        settings.base.upper())


RESULTS = "fgrpo estimator results"


def capture_results():
    """Collect ``(FocalSettings, FocalResult)`` of every ``fgrpo`` estimator call made inside the block (the focal
    metrics in fgrpo_verl/integration/trainer.py open one around verl's advantage call)."""
    return plugin.collecting(RESULTS)


def register() -> None:
    """Put ``fgrpo`` in verl's registry (``fgrpo_verl.integration.plugin``'s duplicate policy)."""
    plugin.register_in_core_algos("advantage estimator", ESTIMATOR_NAME, compute_fgrpo_outcome_advantage)
