"""F-GRPO focal scaling, readable top to bottom (paper arXiv 2602.06717, §4, eqs. 11-13).

For every prompt group (the rollouts that share one ``uid``) of size N with X correct rollouts:

    μ̂  = (X + α) / (N + 2α)                       eq. 11 (α = 0 is the paper; α > 0 is opt-in smoothing)
    g   = (1 - μ̂)^γ                               eq. 12 (γ = 0 gives g ≡ 1: the base algorithm exactly)
    A_i ← g · A_i^base   for every rollout i and response token of the group      eq. 13

A rollout is correct when its summed token reward is ``> success_threshold``. Multiplying *rewards* by
g before the group normalisation would cancel, so g multiplies the final base advantage, positive and
negative alike, with no gradient (it is a function of rewards only) and no renormalisation over the batch.

Base advantages (``base``):
- ``grpo``: (R_i - mean_g) / (std_g + ε), unbiased std, ε = 1e-6, a singleton group gets mean 0 and
  std 1; with ``norm_adv_by_std_in_grpo=False`` (Dr.GRPO) only the mean is removed. Same arithmetic as
  verl's ``grpo_vectorized``, so γ = 0 reproduces it bit for bit.
- ``rloo``: R_i minus the mean of the other N - 1 rewards of its group; 0 for a singleton group. Same
  arithmetic as verl's ``rloo_vectorized``.

Everything is vectorised over the batch: one group index, a handful of scatter-adds, no Python loop.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, fields, is_dataclass

import numpy as np
import torch

BASES = ("grpo", "rloo")


@dataclass(frozen=True)
class FocalSettings:
    """The ``algorithm.fgrpo`` block, validated. Defaults live in ``hydra_configs/fgrpo_trainer.yaml`` only."""

    gamma: float
    success_threshold: float
    smoothing_alpha: float
    base: str

    @classmethod
    def from_config(cls, fgrpo_cfg, prefix: str = "algorithm.fgrpo") -> "FocalSettings":
        if fgrpo_cfg is None:
            raise ValueError(
                f"{prefix} is missing: compose fgrpo-verl's config (`fgrpo-verl train ...`, config "
                f"`fgrpo_trainer`) or pass every key, e.g. +{prefix}.gamma=0.5 +{prefix}.success_threshold=0.0 "
                f"+{prefix}.smoothing_alpha=0.0 +{prefix}.base=grpo"
            )
        block = _as_plain_dict(fgrpo_cfg)
        names = [f.name for f in fields(cls)]
        missing = [n for n in names if n not in block]
        if missing:
            raise ValueError(f"{prefix} lacks key(s) {', '.join(missing)}; required keys: {', '.join(names)}")
        unknown = sorted(set(block) - set(names))
        if unknown:
            raise ValueError(f"{prefix} has unknown key(s) {', '.join(unknown)}; valid keys: {', '.join(names)}")
        gamma = _real(block, "gamma", prefix)
        if gamma < 0:
            raise ValueError(f"{prefix}.gamma={gamma!r} is invalid: the focal strength must be a finite number >= 0")
        alpha = _real(block, "smoothing_alpha", prefix)
        if alpha < 0:
            raise ValueError(f"{prefix}.smoothing_alpha={alpha!r} is invalid: it must be a finite number >= 0 (0 = paper)")
        threshold = _real(block, "success_threshold", prefix)
        base = block["base"]
        if base not in BASES:
            raise ValueError(f"{prefix}.base={base!r} is invalid: valid bases are {', '.join(BASES)}")
        return cls(gamma=gamma, success_threshold=threshold, smoothing_alpha=alpha, base=base)


def _as_plain_dict(cfg) -> dict:
    # One conversion up front: item access on an OmegaConf node costs ~5 us each, and this runs every step.
    from omegaconf import OmegaConf

    if OmegaConf.is_config(cfg):
        return OmegaConf.to_container(cfg, resolve=True)
    if is_dataclass(cfg):
        return {f.name: getattr(cfg, f.name) for f in fields(cfg)}
    return dict(cfg)


def _real(block, key, prefix):
    value = block[key]
    # bool is an int subclass; `gamma: true` is a typo, not 1.0.
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{prefix}.{key}={value!r} is invalid: expected a finite real number")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{prefix}.{key}={value!r} is invalid: expected a finite real number, not NaN or inf")
    return value


def focal_weight(mu_hat: torch.Tensor, gamma) -> torch.Tensor:
    """g = (1 - μ̂)^γ (eq. 12), one scalar per group; γ may be a float or a tensor broadcasting with μ̂.

    pow(·, 0) == 1 exactly, 0**0 included, so γ = 0 is the base algorithm bit for bit.
    """
    return torch.pow(1.0 - mu_hat, gamma)


@dataclass
class FocalResult:
    """Everything one call computes; the diagnostics (issue: focal metrics) read the group tensors."""

    advantages: torch.Tensor  # (B, T) focal-scaled advantage, masked
    base_scalars: torch.Tensor  # (B,) base advantage per rollout before focal scaling
    scores: torch.Tensor  # (B,) summed token reward per rollout
    group_index: torch.Tensor  # (B,) contiguous group id 0..G-1
    group_size: torch.Tensor  # (G,) N per group
    group_correct: torch.Tensor  # (G,) X per group
    mu_hat: torch.Tensor  # (G,) empirical success rate (eq. 11)
    focal_weight: torch.Tensor  # (G,) g (eq. 12)


def _check_inputs(token_level_rewards, response_mask, index):
    if index is None:
        raise ValueError(
            "fgrpo needs the group index (`index`, verl's non_tensor_batch['uid']): rollouts of one prompt "
            "must share a uid; got index=None"
        )
    if token_level_rewards.dim() != 2:
        raise ValueError(
            f"token_level_rewards must be 2-D (batch, response_length); got shape {tuple(token_level_rewards.shape)}"
        )
    if tuple(response_mask.shape) != tuple(token_level_rewards.shape):
        raise ValueError(
            f"response_mask shape {tuple(response_mask.shape)} does not match token_level_rewards shape "
            f"{tuple(token_level_rewards.shape)}"
        )
    n = len(index)
    if n != token_level_rewards.shape[0]:
        raise ValueError(f"index has {n} entries but token_level_rewards has {token_level_rewards.shape[0]} rows")


def _group_index(index, device):
    # verl's own label -> 0..G-1 mapping, so groups match its estimators exactly.
    from verl.utils.groupwise import as_torch_index

    return as_torch_index(index if not isinstance(index, list) else np.asarray(index, dtype=object), device=device)


def _grpo_scalars(scores, gidx, epsilon, norm_by_std):
    from verl.utils.groupwise import group_mean_std

    mean_g, std_g, count = group_mean_std(scores, gidx, eps=0.0, device=scores.device)
    if norm_by_std:
        return (scores - mean_g[gidx]) / (std_g[gidx] + epsilon), count
    return scores - mean_g[gidx], count


def _rloo_scalars(scores, gidx):
    # Leave-one-out baseline: R_i - (S_g - R_i)/(N_g - 1) = (N_g R_i - S_g)/(N_g - 1); 0 for singletons.
    counts = torch.bincount(gidx)
    c = counts[gidx].to(scores.dtype)
    sums = torch.bincount(gidx, weights=scores)[gidx]
    return ((c * scores - sums) / (c - 1).clamp_min(1)) * (c > 1), counts.to(torch.float32)


@torch.no_grad()
def compute_focal_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index,
    settings: FocalSettings,
    norm_adv_by_std_in_grpo: bool = True,
    epsilon: float = 1e-6,
) -> FocalResult:
    """F-GRPO advantages A_i = (1 - μ̂_g)^γ · A_i^base (eqs. 11-13), see the module docstring."""
    _check_inputs(token_level_rewards, response_mask, index)
    scores = token_level_rewards.sum(dim=-1)
    # One reduction on the fast path; a NaN/inf anywhere makes the total non-finite. (A finite total can still
    # overflow to inf, so count per rollout before blaming the rewards.)
    bad = ~torch.isfinite(scores) if not bool(torch.isfinite(scores.sum())) else None
    if bad is not None and bool(bad.any()):
        raise ValueError(
            f"token_level_rewards holds NaN or inf in {int(bad.sum())} of {scores.numel()} rollouts "
            "(summed over tokens); fix the reward function: fgrpo does not drop or clamp rewards"
        )
    gidx = _group_index(index, scores.device)

    if settings.base == "grpo":
        scalars, count = _grpo_scalars(scores, gidx, epsilon, norm_adv_by_std_in_grpo)
    else:
        scalars, count = _rloo_scalars(scores, gidx)

    correct = (scores > settings.success_threshold).to(torch.float32)
    x = torch.zeros_like(count).index_add_(0, gidx, correct)
    alpha = settings.smoothing_alpha
    mu_hat = x / count if alpha == 0 else (x + alpha) / (count + 2.0 * alpha)
    g = focal_weight(mu_hat, settings.gamma)

    focal_scalars = scalars * g[gidx].to(scalars.dtype)
    advantages = focal_scalars.unsqueeze(-1) * response_mask
    return FocalResult(
        advantages=advantages,
        base_scalars=scalars,
        scores=scores,
        group_index=gidx,
        group_size=count,
        group_correct=x,
        mu_hat=mu_hat,
        focal_weight=g,
    )
