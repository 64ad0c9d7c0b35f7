"""fgrpo/* step metrics on a hand-computed batch, m_γ, and the trainer hooks that log them."""

import math

import numpy as np
import pytest
import torch

from fgrpo_verl.focal import FocalSettings, compute_focal_advantage
from fgrpo_verl.monitoring.focal_metrics import focal_step_metrics
from fgrpo_verl.theory import mean_shrink

EPS = 1e-6
PAPER_M_GAMMA = {0.0: 1.0, 0.5: 0.679, 1.0: 0.5, 2.0: 0.3125}  # paper App. N (0.679: lr 6.8e-7 at gamma = 0.5)


def _settings(gamma):
    return FocalSettings(gamma=gamma, success_threshold=0.0, smoothing_alpha=0.0, base="grpo")


def _batch():
    """4 groups of N = 4 (all correct, all wrong, 1 of 4, 2 of 4) and 2 padding rows of their own uid."""
    rewards = [1, 1, 1, 1, 0, 0, 0, 0, 1, 0, 0, 0, 1, 1, 0, 0, 0, 0]
    uids = ["a"] * 4 + ["b"] * 4 + ["c"] * 4 + ["d"] * 4 + ["pad"] * 2
    T = 3
    scores = torch.tensor(rewards, dtype=torch.float32)
    token_rewards = torch.zeros(len(rewards), T)
    token_rewards[:, -1] = scores
    mask = torch.ones(len(rewards), T)
    mask[-2:] = 0  # padding rows have no response token
    real = torch.tensor([True] * 16 + [False] * 2)
    return token_rewards, mask, np.array(uids, dtype=object), real


# GRPO base advantages by hand (unbiased std, ε = 1e-6):
# group c: rewards 1,0,0,0: mean 1/4, std sqrt((9/16 + 3/16)/3) = 1/2 -> |A| = 0.75/(0.5+ε) once, 0.25/(0.5+ε) 3x
# group d: rewards 1,1,0,0: mean 1/2, std sqrt(1/3)          -> |A| = 0.5/(sqrt(1/3)+ε) 4x
C_ABS = (0.75 + 3 * 0.25) / (0.5 + EPS)
D_ABS = 4 * 0.5 / (math.sqrt(1 / 3) + EPS)


@pytest.mark.parametrize("gamma", [0.0, 0.5, 1.0, 2.0])
def test_hand_computed_batch(gamma):
    token_rewards, mask, uids, real = _batch()
    result = compute_focal_advantage(token_rewards, mask, uids, _settings(gamma))
    m = focal_step_metrics(result, gamma, real)

    g = {"a": 0.0 ** gamma, "b": 1.0, "c": 0.75**gamma, "d": 0.5**gamma}  # (1 - mu_hat)^gamma, 0^0 = 1
    assert m["fgrpo/num_groups"] == 4  # the padding group is left out
    assert m["fgrpo/frac_all_correct"] == pytest.approx(0.25)
    assert m["fgrpo/frac_all_wrong"] == pytest.approx(0.25)
    assert m["fgrpo/frac_mixed"] == pytest.approx(0.5)
    assert m["fgrpo/g_mean"] == pytest.approx(sum(g.values()) / 4)
    assert m["fgrpo/g_mean_active"] == pytest.approx((g["c"] + g["d"]) / 2)
    assert m["fgrpo/mu_hat_mean"] == pytest.approx((1 + 0 + 0.25 + 0.5) / 4)
    # sorted mu_hat = 0, 0.25, 0.5, 1; linear interpolation at (4-1)q
    assert m["fgrpo/mu_hat_q10"] == pytest.approx(0.3 * 0.25)
    assert m["fgrpo/mu_hat_q50"] == pytest.approx(0.375)
    assert m["fgrpo/mu_hat_q90"] == pytest.approx(0.5 + 0.7 * 0.5)
    before = (C_ABS + D_ABS) / 16
    after = (g["c"] * C_ABS + g["d"] * D_ABS) / 16
    assert m["fgrpo/adv_abs_mean_base"] == pytest.approx(before, rel=1e-6)
    assert m["fgrpo/adv_abs_mean_focal"] == pytest.approx(after, rel=1e-6)
    assert m["fgrpo/adv_scale"] == pytest.approx(after / before, rel=1e-6)
    assert m["fgrpo/m_gamma"] == pytest.approx(PAPER_M_GAMMA[gamma], abs=5e-4)
    assert m["fgrpo/adv_scale_over_m_gamma"] == pytest.approx(after / before / mean_shrink(gamma), rel=1e-6)
    if gamma == 0.0:
        assert m["fgrpo/g_mean"] == 1.0 and m["fgrpo/adv_scale"] == 1.0


def test_no_mixed_group_omits_the_undefined_metrics():
    token_rewards = torch.tensor([[1.0], [1.0], [0.0], [0.0]])
    result = compute_focal_advantage(token_rewards, torch.ones(4, 1), np.array(["a", "a", "b", "b"], dtype=object), _settings(1.0))
    m = focal_step_metrics(result, 1.0)
    assert m["fgrpo/frac_mixed"] == 0.0 and m["fgrpo/adv_abs_mean_base"] == 0.0
    assert "fgrpo/g_mean_active" not in m and "fgrpo/adv_scale" not in m
    assert focal_step_metrics(result, 1.0, torch.zeros(4, dtype=torch.bool)) == {}
