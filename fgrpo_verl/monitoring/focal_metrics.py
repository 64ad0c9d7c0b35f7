"""Per-step focal diagnostics (``fgrpo/...``), computed from the :class:`~fgrpo_verl.focal.FocalResult` that the
``fgrpo`` estimator already built for the step: nothing is recomputed.

For a step with G prompt groups (group g has N_g rollouts, X_g correct, μ̂_g, focal weight w_g = (1 - μ̂_g)^γ)
and rollouts i with base advantage A_i (one scalar per rollout, see ``FocalResult.base_scalars``):

    frac_all_correct = #{g : X_g = N_g} / G          (these groups get A = 0 and w = 0)
    frac_all_wrong   = #{g : X_g = 0} / G            (A = 0, w = 1)
    frac_mixed       = #{g : 0 < X_g < N_g} / G      (the "active" groups: the only ones with a gradient)
    g_mean           = mean_g w_g                     g_mean_active = mean over mixed groups
    mu_hat_mean, mu_hat_q{10,25,50,75,90}             μ̂ over all groups (its W&B histogram: trainer.py)
    adv_abs_mean_base  = mean_i |A_i|                 adv_abs_mean_focal = mean_i |w_{g(i)} A_i|
    adv_scale          = adv_abs_mean_focal / adv_abs_mean_base    (the realised shrink of the update size)
    m_gamma            = the paper's average shrink m_γ (App. N, ``fgrpo_verl.theory.mean_shrink``), μ ~ U[0, 1]
    adv_scale_over_m_gamma = adv_scale / m_gamma

Averages over rollouts are per rollout, not per token (the paper's m_γ is a per-rollout quantity).
Rows that verl added as padding (``is_padding`` tags) are left out; a metric with no data this step (e.g.
``g_mean_active`` when no group is mixed, ``adv_scale`` when every |A| is 0) is omitted rather than logged as 0.
"""

from __future__ import annotations

import torch

from fgrpo_verl.focal import FocalResult
from fgrpo_verl.theory import mean_shrink

PREFIX = "fgrpo/"
MU_HAT_QUANTILES = (0.10, 0.25, 0.50, 0.75, 0.90)


def real_groups(result: FocalResult, real_rows: torch.Tensor) -> torch.Tensor:
    """(G,) bool: the groups holding at least one of the (B,) ``real_rows`` (the non-padding rollouts)."""
    hits = torch.zeros(result.group_size.numel(), dtype=torch.int64, device=real_rows.device)
    hits.index_add_(0, result.group_index, real_rows.to(torch.int64))
    return hits > 0


def focal_step_metrics(result: FocalResult, gamma: float, real_rows: torch.Tensor | None = None) -> dict[str, float]:
    """The ``fgrpo/...`` scalars for one advantage computation (see the module docstring for each formula).

    Args:
        result: what :func:`fgrpo_verl.focal.compute_focal_advantage` returned for the batch.
        gamma: the focal strength γ the result was computed with (for ``m_gamma``).
        real_rows: (B,) bool, False for padding rollouts; None means every rollout is real.
    """
    rows = torch.ones_like(result.base_scalars, dtype=torch.bool) if real_rows is None else real_rows.to(torch.bool)
    keep_group = real_groups(result, rows)
    n, x = result.group_size[keep_group].double(), result.group_correct[keep_group].double()
    mu, w = result.mu_hat[keep_group].double(), result.focal_weight[keep_group].double()
    num_groups = int(n.numel())
    if num_groups == 0:
        return {}

    all_correct, all_wrong = x == n, x == 0
    mixed = ~(all_correct | all_wrong)
    out = {
        "num_groups": float(num_groups),
        "frac_all_correct": all_correct.double().mean().item(),
        "frac_all_wrong": all_wrong.double().mean().item(),
        "frac_mixed": mixed.double().mean().item(),
        "g_mean": w.mean().item(),
        "mu_hat_mean": mu.mean().item(),
        "m_gamma": mean_shrink(gamma),
    }
    if bool(mixed.any()):
        out["g_mean_active"] = w[mixed].mean().item()
    for q, value in zip(MU_HAT_QUANTILES, torch.quantile(mu, torch.tensor(MU_HAT_QUANTILES, dtype=mu.dtype)).tolist()):
        out[f"mu_hat_q{round(q * 100):02d}"] = value

    base = result.base_scalars[rows].double().abs()
    focal = base * result.focal_weight[result.group_index[rows]].double()
    if base.numel():
        out["adv_abs_mean_base"] = base.mean().item()
        out["adv_abs_mean_focal"] = focal.mean().item()
        if out["adv_abs_mean_base"] > 0:
            out["adv_scale"] = out["adv_abs_mean_focal"] / out["adv_abs_mean_base"]
            if out["m_gamma"] > 0:
                out["adv_scale_over_m_gamma"] = out["adv_scale"] / out["m_gamma"]
    return {PREFIX + key: value for key, value in out.items()}

