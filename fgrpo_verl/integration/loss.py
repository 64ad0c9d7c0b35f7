"""The ``fgrpo`` policy-loss mode: the base loss, unchanged, plus per-micro-batch concentration diagnostics.

F-GRPO changes only the advantages (``fgrpo_verl/integration/estimator.py``); the policy loss of the base optimiser stays
as it is ("orthogonal to the clipping and importance-weighting choices", paper §4). This mode therefore calls
the configured base loss (``vanilla`` for GRPO/DAPO, ``cispo`` for CISPO, or any registered mode) with the very
same arguments and returns its loss tensor untouched, so loss and gradient are bit-identical to the base mode.
It only adds, under ``actor/fgrpo/``, where the update's weight sits, per micro-batch, over response tokens
(mask m, advantage A, current log-prob log π, ratio r = exp(log π - log π_old)):

    adv_pos_share / adv_neg_share / adv_zero_share = Σ m·[A>0] / Σ m, ...   (sum to 1)
    adv_abs_mean                                   = Σ m·|A| / Σ m
    pos_logprob_x_share = Σ m·[A>0]·log π / Σ m     pos_ratio_x_share = Σ m·[A>0]·r / Σ m

verl averages loss metrics over micro-batches and data-parallel ranks, and a micro-batch may hold no positive
token, so a per-micro-batch "mean over positive tokens" is not always defined. The two ``*_x_share`` values are
always defined; ``fgrpo_verl/integration/trainer.py`` divides their step averages by ``adv_pos_share`` to log
``actor/fgrpo/pos_logprob_mean`` and ``actor/fgrpo/pos_ratio_mean`` (exact when micro-batches hold equal token
counts, a ratio-of-means estimate otherwise).

Config: ``actor_rollout_ref.actor.policy_loss`` with ``_target_: fgrpo_verl.integration.loss.FocalPolicyLossConfig``,
``loss_mode: fgrpo`` and ``base_loss_mode`` (see ``hydra_configs/fgrpo_trainer.yaml``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from verl.workers.config import PolicyLossConfig

from fgrpo_verl.integration import plugin

LOSS_MODE = "fgrpo"
METRIC_PREFIX = "actor/fgrpo/"
BASE_KEY = "actor_rollout_ref.actor.policy_loss.base_loss_mode"


@dataclass
class FocalPolicyLossConfig(PolicyLossConfig):
    """verl's ``PolicyLossConfig`` plus ``base_loss_mode``: the registered loss the ``fgrpo`` mode delegates to.

    Naming this class in ``policy_loss._target_`` lets verl's ``validate_config`` accept the extra key.
    """

    base_loss_mode: str = "vanilla"

    def __post_init__(self):
        parent = getattr(super(), "__post_init__", None)
        if parent is not None:
            parent()
        _check_base_mode(self.base_loss_mode)
        # With our _target_, `loss_mode: cispo` would skip the fgrpo mode and leave base_loss_mode unused: a
        # config that looks like it selects one loss and runs another. verl's legacy trainer itself rewrites
        # loss_mode to bypass_mode for rollout-correction bypass, which we let through.
        if self.loss_mode not in (LOSS_MODE, self.base_loss_mode, "bypass_mode"):
            raise ValueError(
                f"actor_rollout_ref.actor.policy_loss.loss_mode={self.loss_mode!r} with base_loss_mode="
                f"{self.base_loss_mode!r}: choose the base optimiser with base_loss_mode={self.loss_mode} and keep "
                f"loss_mode={LOSS_MODE} (same loss, plus actor/fgrpo/* diagnostics); to run without the "
                f"diagnostics set both to {self.loss_mode!r}"
            )


def _check_base_mode(base: Any) -> None:
    from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY

    if not isinstance(base, str) or base == LOSS_MODE or base not in POLICY_LOSS_REGISTRY:
        valid = sorted(name for name in POLICY_LOSS_REGISTRY if name != LOSS_MODE)
        raise ValueError(
            f"{BASE_KEY}={base!r} is invalid: it names the loss that `{LOSS_MODE}` delegates to and must be a "
            f"registered policy loss other than {LOSS_MODE!r}; registered: {', '.join(valid)}"
        )


def base_loss_mode(config) -> str:
    """The base mode from the actor config, failing loudly if the ``_target_`` was not our config class."""
    base = getattr(getattr(config, "policy_loss", None), "base_loss_mode", None)
    if base is None:
        raise ValueError(
            f"policy loss `{LOSS_MODE}` needs {BASE_KEY}; set actor_rollout_ref.actor.policy_loss._target_="
            "fgrpo_verl.integration.loss.FocalPolicyLossConfig (fgrpo-verl's config does) and base_loss_mode=vanilla|cispo|..."
        )
    _check_base_mode(base)
    return base


@torch.no_grad()
def concentration_metrics(old_log_prob, log_prob, advantages, response_mask) -> dict[str, float]:
    """The ``actor/fgrpo/`` diagnostics of one micro-batch (module docstring); reads detached copies only."""
    mask = response_mask.detach().to(torch.float64)
    adv = advantages.detach().to(torch.float64)
    logp = log_prob.detach().to(torch.float64)
    # Same clamp as verl's losses, so r is the ratio the loss saw.
    ratio = torch.exp(torch.clamp(logp - old_log_prob.detach().to(torch.float64), -20.0, 20.0))
    pos, neg = (adv > 0).to(torch.float64) * mask, (adv < 0).to(torch.float64) * mask
    tokens = mask.sum().clamp_min(1.0)  # an all-padding micro-batch reports zeros, not NaN
    sums = {
        "adv_pos_share": pos.sum(),
        "adv_neg_share": neg.sum(),
        "adv_zero_share": mask.sum() - pos.sum() - neg.sum(),
        "adv_abs_mean": (adv.abs() * mask).sum(),
        "pos_logprob_x_share": (logp * pos).sum(),
        "pos_ratio_x_share": (ratio * pos).sum(),
    }
    return {METRIC_PREFIX + name: float(value / tokens) for name, value in sums.items()}


def compute_policy_loss_fgrpo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config=None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """Return ``base_loss(...)`` exactly (same tensor, same graph) and its metrics plus ``actor/fgrpo/*``."""
    if config is None:
        raise ValueError(f"policy loss `{LOSS_MODE}` needs the actor config; got config=None")
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    base_fn = get_policy_loss_fn(base_loss_mode(config))
    loss, metrics = base_fn(
        old_log_prob=old_log_prob,
        log_prob=log_prob,
        advantages=advantages,
        response_mask=response_mask,
        loss_agg_mode=loss_agg_mode,
        config=config,
        rollout_is_weights=rollout_is_weights,
    )
    metrics = dict(metrics)
    metrics.update(concentration_metrics(old_log_prob, log_prob, advantages, response_mask))
    return loss, metrics


def register() -> None:
    """Register ``fgrpo`` in verl's policy-loss registry (which silently overwrites, so the duplicate policy of
    ``fgrpo_verl.integration.plugin`` is what keeps us from replacing another plugin's loss, or it ours)."""
    plugin.register_in_core_algos("policy loss", LOSS_MODE, compute_policy_loss_fgrpo)
