"""Unit and property tests of the F-GRPO math (fgrpo_verl.focal), paper eqs. 11-13."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from conftest import algo_config, make_batch
from hypothesis import given, settings
from hypothesis import strategies as st

from fgrpo_verl.integration.estimator import compute_fgrpo_outcome_advantage
from fgrpo_verl.focal import FocalSettings, compute_focal_advantage


def _settings(gamma=0.5, threshold=0.0, alpha=0.0, base="grpo"):
    return FocalSettings(gamma=gamma, success_threshold=threshold, smoothing_alpha=alpha, base=base)


def _outcomes(groups):
    """groups: list of reward lists -> (rewards (B,1), mask (B,1), index) in group order."""
    scores = [r for g in groups for r in g]
    index = np.array([f"p{i}" for i, g in enumerate(groups) for _ in g], dtype=object)
    rewards = torch.tensor(scores, dtype=torch.float32).unsqueeze(-1)
    return rewards, torch.ones_like(rewards), index


def _per_rollout(result):
    return result.advantages[:, 0].tolist()


def test_hand_computed_grpo_gamma_half():
    # Group p0: 1 of 4 correct: mean .25, unbiased std .5 -> A = +1.5 / -0.5; g = .75**.5.
    # Group p1: 3 of 4 correct: A = +0.5 / -1.5; g = .25**.5 = .5.
    # Group p2 all correct, p3 all wrong: A = 0. Singletons: verl's mean 0 / std 1, then g.
    rewards, mask, index = _outcomes([[1, 0, 0, 0], [1, 1, 1, 0], [1, 1], [0, 0], [1], [0]])
    res = compute_focal_advantage(rewards, mask, index, _settings(gamma=0.5))
    g0, eps = math.sqrt(0.75), 1e-6
    expected = [1.5 * g0, -0.5 * g0, -0.5 * g0, -0.5 * g0]
    expected += [0.5 * 0.5, 0.5 * 0.5, 0.5 * 0.5, -1.5 * 0.5]
    expected += [0.0, 0.0, 0.0, 0.0]
    expected += [1.0 / (1.0 + eps) * 0.0, 0.0]
    # the std of p0/p1 is exactly .5, so A = ±x / (.5 + 1e-6)
    scale = 0.5 / (0.5 + eps)
    expected = [e * scale if i < 8 else e for i, e in enumerate(expected)]
    assert _per_rollout(res) == pytest.approx(expected, abs=1e-6)
    assert res.mu_hat.tolist() == pytest.approx([0.25, 0.75, 1.0, 0.0, 1.0, 0.0])
    assert res.focal_weight.tolist() == pytest.approx([g0, 0.5, 0.0, 1.0, 0.0, 1.0])


def test_hand_computed_dr_grpo_and_rloo_gamma_one():
    rewards, mask, index = _outcomes([[1, 0, 0, 0], [1, 1, 0]])
    dr = compute_focal_advantage(rewards, mask, index, _settings(gamma=1.0), norm_adv_by_std_in_grpo=False)
    assert _per_rollout(dr) == pytest.approx([0.75 * 0.75, -0.25 * 0.75, -0.25 * 0.75, -0.25 * 0.75,
                                              (1 / 3) * (1 / 3), (1 / 3) * (1 / 3), (-2 / 3) * (1 / 3)])
    rl = compute_focal_advantage(rewards, mask, index, _settings(gamma=1.0, base="rloo"))
    # RLOO: R_i - mean of the others. p0: 1 - 0 = 1, 0 - 1/3; p1: 1 - .5, 0 - 1.
    assert _per_rollout(rl) == pytest.approx([1 * 0.75, -1 / 3 * 0.75, -1 / 3 * 0.75, -1 / 3 * 0.75,
                                              0.5 / 3, 0.5 / 3, -1.0 / 3])


def test_smoothing_alpha():
    rewards, mask, index = _outcomes([[1, 1, 1, 1], [0, 0]])
    res = compute_focal_advantage(rewards, mask, index, _settings(gamma=1.0, alpha=0.5))
    assert res.mu_hat.tolist() == pytest.approx([4.5 / 5.0, 0.5 / 3.0])
    # smoothing changes g, never the fact that uniform groups carry no signal
    assert res.focal_weight.tolist() == pytest.approx([0.1, 2.5 / 3.0])
    assert torch.count_nonzero(res.advantages) == 0


def test_focal_scales_every_token_of_the_group(batch):
    rewards, mask, index = batch
    base = compute_focal_advantage(rewards, mask, index, _settings(gamma=0.0))
    focal = compute_focal_advantage(rewards, mask, index, _settings(gamma=2.0))
    g_per_rollout = focal.focal_weight[focal.group_index]
    torch.testing.assert_close(focal.advantages, base.advantages * g_per_rollout[:, None], rtol=1e-6, atol=1e-7)
    # masked tokens stay exactly zero
    assert torch.all(focal.advantages[mask == 0] == 0)


def test_zero_one_and_plus_minus_one_rewards_give_same_mu_and_weight():
    # no singleton group: verl gives a singleton mean 0 / std 1, so its advantage is the raw reward (0 vs -1)
    r01, mask, index = make_batch([4, 4, 8, 2, 3], reward_kind="binary", seed=3)
    rpm = torch.where(r01 != 0, r01 * 2 - 1, r01)  # 1 -> 1, 0 stays 0 on non-reward tokens
    # put -1 where the outcome was 0 (on the reward token = last valid token)
    last = mask.sum(-1).long() - 1
    rpm[torch.arange(len(last)), last] = r01[torch.arange(len(last)), last] * 2 - 1
    a = compute_focal_advantage(r01, mask, index, _settings(gamma=0.5))
    b = compute_focal_advantage(rpm, mask, index, _settings(gamma=0.5))
    torch.testing.assert_close(a.mu_hat, b.mu_hat, rtol=0, atol=0)
    torch.testing.assert_close(a.focal_weight, b.focal_weight, rtol=0, atol=0)
    # std-normalised GRPO is invariant to the affine map up to epsilon
    torch.testing.assert_close(a.advantages, b.advantages, rtol=1e-4, atol=1e-5)


def test_dapo_overlong_shaped_rewards_with_recommended_threshold():
    # verl's DAPO scorer: +1 correct / -1 wrong, minus up to penalty_factor (1.0) for overlong responses:
    # correct 1.0, correct half into the buffer 0.5, correct fully overlong 0.0 (truncated: not a success),
    # wrong -1.0, wrong and overlong -1.5 / -2.0. The documented threshold 0.0 counts exactly the first two.
    rewards, mask, index = _outcomes([[1.0, 0.5, 0.0, -1.0], [-1.5, -2.0, 1.0, 0.5]])
    res = compute_focal_advantage(rewards, mask, index, _settings(gamma=1.0, threshold=0.0))
    assert res.group_correct.tolist() == [2.0, 2.0]
    assert res.mu_hat.tolist() == pytest.approx([0.5, 0.5])


def test_monotonicity_in_success_rate():
    # For fixed N and gamma > 0: the weight g and the advantage of a correct rollout shrink as X grows.
    n = 8
    for gamma in (0.5, 1.0, 2.0):
        groups = [[1] * x + [0] * (n - x) for x in range(1, n)]
        rewards, mask, index = _outcomes(groups)
        res = compute_focal_advantage(rewards, mask, index, _settings(gamma=gamma))
        g = res.focal_weight.tolist()
        assert all(a > b for a, b in zip(g, g[1:])), g
        pos = [res.advantages[i * n, 0].item() for i in range(len(groups))]  # first rollout of each group is correct
        assert all(a > b for a, b in zip(pos, pos[1:])), pos


@pytest.mark.parametrize(
    "key,value,message",
    [
        ("gamma", -0.1, "algorithm.fgrpo.gamma=-0.1 is invalid"),
        ("gamma", float("nan"), "not NaN or inf"),
        ("gamma", float("inf"), "not NaN or inf"),
        ("gamma", "half", "algorithm.fgrpo.gamma='half' is invalid: expected a finite real number"),
        ("gamma", True, "algorithm.fgrpo.gamma=True is invalid"),
        ("smoothing_alpha", -1.0, "algorithm.fgrpo.smoothing_alpha=-1.0 is invalid"),
        ("success_threshold", None, "algorithm.fgrpo.success_threshold=None is invalid"),
        ("base", "ppo", "algorithm.fgrpo.base='ppo' is invalid: valid bases are grpo, rloo"),
    ],
)
def test_bad_settings_name_key_value_and_valid_range(key, value, message):
    cfg = algo_config()
    cfg.fgrpo[key] = value
    rewards, mask, index = make_batch([2, 2])
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        compute_fgrpo_outcome_advantage(rewards, mask, index=index, config=cfg)


def test_missing_unknown_and_absent_blocks():
    rewards, mask, index = make_batch([2, 2])
    cfg = algo_config()
    del cfg.fgrpo["gamma"]
    with pytest.raises(ValueError, match=r"algorithm.fgrpo.gamma is missing: add \+algorithm.fgrpo.gamma=0.5"):
        compute_fgrpo_outcome_advantage(rewards, mask, index=index, config=cfg)
    with pytest.raises(ValueError, match=r"algorithm.fgrpo=0.5 is invalid: expected a block of keys"):
        compute_fgrpo_outcome_advantage(rewards, mask, index=index, config=OmegaConf.create({"fgrpo": 0.5}))
    cfg = algo_config()
    cfg.fgrpo["gama"] = 1.0
    with pytest.raises(ValueError, match="unknown key.*gama"):
        compute_fgrpo_outcome_advantage(rewards, mask, index=index, config=cfg)
    cfg = algo_config()
    del cfg["fgrpo"]
    with pytest.raises(ValueError, match="algorithm.fgrpo is missing"):
        compute_fgrpo_outcome_advantage(rewards, mask, index=index, config=cfg)
    with pytest.raises(ValueError, match="got config=None"):
        compute_fgrpo_outcome_advantage(rewards, mask, index=index, config=None)
    cfg = algo_config()
    cfg.norm_adv_by_std_in_grpo = "yes"
    with pytest.raises(ValueError, match="norm_adv_by_std_in_grpo='yes'"):
        compute_fgrpo_outcome_advantage(rewards, mask, index=index, config=cfg)


def test_bad_batches():
    rewards, mask, index = make_batch([3, 3, 2])
    cfg = algo_config()
    with pytest.raises(ValueError, match="needs the group index"):
        compute_fgrpo_outcome_advantage(rewards, mask, index=None, config=cfg)
    bad = rewards.clone()
    bad[0, 0] = float("nan")
    bad[3, 1] = float("inf")
    with pytest.raises(ValueError, match="NaN or inf in 2 of 8 rollouts"):
        compute_fgrpo_outcome_advantage(bad, mask, index=index, config=cfg)
    with pytest.raises(ValueError, match=r"response_mask shape \(8, 6\) does not match"):
        compute_fgrpo_outcome_advantage(rewards, mask[:, :6], index=index, config=cfg)
    with pytest.raises(ValueError, match="index has 7 entries but token_level_rewards has 8 rows"):
        compute_fgrpo_outcome_advantage(rewards, mask, index=index[:7], config=cfg)
    with pytest.raises(ValueError, match="must be 2-D"):
        compute_fgrpo_outcome_advantage(rewards[:, 0], mask[:, 0], index=index, config=cfg)


# ---------------------------------------------------------------- property-based (random group layouts)

layouts = st.lists(st.integers(min_value=1, max_value=9), min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(sizes=layouts, seed=st.integers(0, 2**16), gamma=st.floats(0.0, 4.0), kind=st.sampled_from(["binary", "pm1"]),
       base=st.sampled_from(["grpo", "rloo"]), norm=st.booleans())
def test_properties_over_random_layouts(sizes, seed, gamma, kind, base, norm):
    rewards, mask, index = make_batch(sizes, reward_kind=kind, seed=seed)
    res = compute_focal_advantage(rewards, mask, index, _settings(gamma=gamma, base=base), norm_adv_by_std_in_grpo=norm)
    g = res.focal_weight
    assert torch.all((g >= 0) & (g <= 1))
    # groups of two or more with uniform outcome carry no advantage, whatever gamma
    scores = res.scores
    for gid in range(len(res.group_size)):
        members = res.group_index == gid
        if members.sum() >= 2 and torch.unique(scores[members]).numel() == 1:
            assert torch.all(res.advantages[members] == 0)
    # focal advantage = g(group) * base advantage, for every rollout
    torch.testing.assert_close(res.advantages[:, 0] / mask[:, 0].clamp_min(1),
                               (res.base_scalars * g[res.group_index]) * mask[:, 0], rtol=1e-6, atol=1e-7)
    # gamma = 0 is the identity on the base advantage
    zero = compute_focal_advantage(rewards, mask, index, _settings(gamma=0.0, base=base), norm_adv_by_std_in_grpo=norm)
    assert torch.equal(zero.advantages, zero.base_scalars.unsqueeze(-1) * mask)
    assert torch.all(zero.focal_weight == 1)


@pytest.mark.parametrize(
    "labels, sizes",
    [
        # uuid-like strings: the hash factorisation
        (np.array(["u-a", "u-b", "u-a", "u-c", "u-b", "u-a", "u-c", "u-c"], dtype=object), [2, 3, 3]),
        # numeric strings: verl merges "05" and "5"
        (np.array(["05", "5", "7", "07", "5", "9", "9", "05"], dtype=object), [2, 2, 4]),
        # mixed objects: verl's fallback (str) merges 1 and "1"
        (np.array([1, "1", 2, "2", 1, 2, "1", "2"], dtype=object), [4, 4]),
        # integers with gaps
        (np.array([9, 9, 0, 5, 5, 0, 9, 0]), [2, 3, 3]),
    ],
)
def test_groups_are_verls_partition_for_any_label_kind(labels, sizes):
    from verl.trainer.ppo.core_algos import compute_grpo_vectorized_outcome_advantage

    rewards, mask, _ = make_batch([8], seed=11, shuffle=False)
    ours = compute_focal_advantage(rewards, mask, labels, _settings(gamma=0.0))
    theirs, _ = compute_grpo_vectorized_outcome_advantage(rewards, mask, labels)
    assert torch.equal(ours.advantages, theirs)
    assert sorted(ours.group_size.tolist()) == [float(n) for n in sizes]
