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

Everything is vectorised over the batch: one group index, one fused scatter-add for the group counts, sums and
successes (plus the centred squares for the std), no Python loop.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, fields, is_dataclass

import numpy as np
import torch

BASES = ("grpo", "rloo")


# The documented defaults of every key but gamma: hydra_configs/fgrpo_trainer.yaml declares the same values (a test
# holds them equal), and a plain verl run that gives only +algorithm.fgrpo.gamma gets these.
# success_threshold 0.5: the midpoint of a 1/0 reward (math-verify, the maze's exact match); it also separates
# verl's +/-1 math scores. The one rule for other rewards is in fgrpo_trainer.yaml's comment.
DEFAULTS = {"success_threshold": 0.5, "smoothing_alpha": 0.0, "base": "grpo"}


@dataclass(frozen=True)
class FocalSettings:
    """The ``algorithm.fgrpo`` block, validated. ``gamma`` is required; the other keys default to :data:`DEFAULTS`."""

    gamma: float
    success_threshold: float
    smoothing_alpha: float
    base: str

    @classmethod
    def from_config(cls, fgrpo_cfg, prefix: str = "algorithm.fgrpo") -> "FocalSettings":
        defaults = ", ".join(f"{k}={v}" for k, v in DEFAULTS.items())
        if fgrpo_cfg is None:
            raise ValueError(
                f"{prefix} is missing: add +{prefix}.gamma=0.5 (the focal strength; 0.5 is the paper's most "
                f"frequent pick) to verl's command line, or run `fgrpo-verl train` (config `fgrpo_trainer`, which "
                f"declares the block); the other keys default to {defaults}"
            )
        block = _as_plain_dict(fgrpo_cfg)
        names = [f.name for f in fields(cls)]
        unknown = sorted(set(block) - set(names))
        if unknown:
            raise ValueError(f"{prefix} has unknown key(s) {', '.join(unknown)}; valid keys: {', '.join(names)}")
        if "gamma" not in block:
            raise ValueError(
                f"{prefix}.gamma is missing: add +{prefix}.gamma=0.5 (focal strength >= 0; 0 = the base algorithm); "
                f"the other keys default to {defaults}"
            )
        block = {**DEFAULTS, **block}
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
    # One conversion up front: item access on an OmegaConf node costs ~5-25 us each.
    from omegaconf import OmegaConf

    if OmegaConf.is_config(cfg):
        cfg = OmegaConf.to_container(cfg, resolve=True)
    elif is_dataclass(cfg):
        return {f.name: getattr(cfg, f.name) for f in fields(cfg)}
    if not isinstance(cfg, Mapping):
        raise ValueError(f"algorithm.fgrpo={cfg!r} is invalid: expected a block of keys, e.g. {{gamma: 0.5}}")
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
    """Everything one call computes; the diagnostics read the group tensors."""

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
    """``(gidx, G)``: (B,) group ids with exactly verl's partition of the labels (``as_torch_index``), and the
    number of groups when the ids are known to be 0..G-1 without gaps (None: integer labels may leave gaps).

    verl's uid labels are uuid strings, which ``as_torch_index`` maps with ``np.unique`` on Python objects: a sort
    with Python string comparisons, the largest fixed cost of the estimator at 4096 rollouts (~1 ms of ~2). A hash
    factorisation gives the same partition in O(B) (ids in order of first appearance instead of sorted order; no
    per-row value depends on that order). Any other label type, and strings verl would coerce to integers, go
    through verl's function.
    """
    from verl.utils.groupwise import as_torch_index

    if isinstance(index, list):
        index = np.asarray(index, dtype=object)
    if isinstance(index, np.ndarray) and index.dtype == object and index.ndim == 1 and _non_numeric_strings(index):
        import pandas as pd

        codes, uniques = pd.factorize(index, sort=False)
        return torch.from_numpy(codes.astype(np.int64, copy=False)).to(device), len(uniques)
    return as_torch_index(index, device=device), None


def _non_numeric_strings(labels: np.ndarray) -> bool:
    from pandas.api.types import infer_dtype

    if infer_dtype(labels, skipna=False) != "string":
        return False
    try:  # verl's as_torch_index turns all-numeric strings into integers ("05" == "5"); leave those to it
        labels.astype(np.int64)
    except (ValueError, TypeError, OverflowError):
        return True
    return False


def _group_sums(scores32, gidx, num_groups, threshold):
    """(count, sum, successes) per group in one scatter-add over the batch: (G, 3) float32.

    Column-wise the accumulation order is the row order, as in verl's separate ``index_add_`` calls, so the
    sums are bit-identical to ``verl.utils.groupwise.group_mean_std``'s.
    """
    if num_groups is None:
        num_groups = int(gidx.max()) + 1 if gidx.numel() else 0
    cols = torch.stack((torch.ones_like(scores32), scores32, (scores32 > threshold).to(torch.float32)), dim=1)
    return torch.zeros(num_groups, 3, dtype=torch.float32, device=scores32.device).index_add_(0, gidx, cols)


def _compact(gidx, sums):
    # Integer labels (e.g. 0, 5, 9) leave empty ids in between; the per-group outputs list real groups only.
    keep = sums[:, 0] > 0
    if bool(keep.all()):
        return gidx, sums
    return (torch.cumsum(keep, 0) - 1)[gidx], sums[keep]


def _grpo_scalars(scores, scores32, gidx, count, total, epsilon, norm_by_std):
    """verl's ``grpo_vectorized`` arithmetic, op for op: mean = S/N, unbiased std from centred squares (a second
    pass: the one-pass sum-of-squares formula rounds differently), singleton groups mean 0 / std 1."""
    raw_mean = total / count.clamp_min(1.0)
    single = count <= 1.0
    mean = torch.where(single, 0.0, raw_mean)
    if not norm_by_std:
        return scores - mean[gidx]
    centred = scores32 - raw_mean[gidx]
    var_num = torch.zeros_like(count).index_add_(0, gidx, centred * centred)
    std = torch.sqrt(torch.clamp(var_num / (count - 1.0).clamp_min(1.0), min=0.0))
    std = torch.where(single, 1.0, std)
    return (scores - mean[gidx]) / (std[gidx] + epsilon)


def _rloo_scalars(scores, gidx):
    # Leave-one-out baseline: R_i - (S_g - R_i)/(N_g - 1) = (N_g R_i - S_g)/(N_g - 1); 0 for singletons.
    # verl's rloo_vectorized arithmetic (bincount in the scores' dtype), so gamma = 0 reproduces it bit for bit.
    c = torch.bincount(gidx)[gidx].to(scores.dtype)
    sums = torch.bincount(gidx, weights=scores)[gidx]
    return ((c * scores - sums) / (c - 1).clamp_min(1)) * (c > 1)


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
    scores32 = scores.to(torch.float32)
    gidx, num_groups = _group_index(index, scores.device)
    sums = _group_sums(scores32, gidx, num_groups, settings.success_threshold)
    # A NaN/inf reward makes its group's sum non-finite: one check over G groups instead of B rollouts. (Finite
    # rewards can still overflow a group sum, so count per rollout before blaming the rewards.)
    if not bool(torch.isfinite(sums[:, 1]).all()):
        bad = ~torch.isfinite(scores)
        if bool(bad.any()):
            raise ValueError(
                f"token_level_rewards holds NaN or inf in {int(bad.sum())} of {scores.numel()} rollouts "
                "(summed over tokens); fix the reward function: fgrpo does not drop or clamp rewards"
            )
    if num_groups is None:
        gidx, sums = _compact(gidx, sums)
    count, total, x = sums.unbind(1)

    if settings.base == "grpo":
        scalars = _grpo_scalars(scores, scores32, gidx, count, total, epsilon, norm_adv_by_std_in_grpo)
    else:
        scalars = _rloo_scalars(scores, gidx)

    alpha = settings.smoothing_alpha
    mu_hat = x / count if alpha == 0 else (x + alpha) / (count + 2.0 * alpha)
    g = focal_weight(mu_hat, settings.gamma)

    # g == 1 exactly when gamma == 0: skipping the multiply is the same bits, one gather and product cheaper.
    focal_scalars = scalars if settings.gamma == 0 else scalars * g[gidx].to(scalars.dtype)
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
