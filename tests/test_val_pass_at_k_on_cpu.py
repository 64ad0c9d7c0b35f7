"""val-core/<source>/pass@<k> from a synthetic validation output, checked against hand-computed values."""

from math import comb

import numpy as np
import pytest

from fgrpo_verl.monitoring.val_pass_at_k import validation_pass_at_k


def _exact(n, c, k):
    return 1 - comb(n - c, k) / comb(n, k)


@pytest.mark.parametrize("n,ks", [(1, [1]), (8, [1, 2, 4, 8]), (6, [1, 2, 4, 6])])
def test_the_ks_are_powers_of_two_and_n(n, ks):
    metrics = validation_pass_at_k(["s"] * n, ["u"] * n, {"reward": [1.0] * n}, 0.5)
    assert list(metrics) == [f"val-core/s/pass@{k}" for k in ks]


def test_two_sources_acc_and_reward_and_failed_sessions():
    # source "math": reports acc (0/1) with rewards that would disagree (+-1 scores): acc decides.
    # prompt m1: 4 samples, acc 1,0,0,0 ; prompt m2: 3 samples returned of 4 expected, acc 1,1,0 (+ 1 failed session)
    # source "maze": reward only, threshold 0: prompt z1 rewards 1,0.5,0,0 (2 correct) ; z2 all 0
    sources = ["math"] * 7 + ["maze"] * 8
    uids = ["m1"] * 4 + ["m2"] * 3 + ["z1"] * 4 + ["z2"] * 4
    acc = [1, 0, 0, 0, 1, 1, 0] + [None] * 8
    reward = [-1.0, 1.0, 1.0, 1.0, -1.0, -1.0, 1.0] + [1.0, 0.5, 0.0, 0.0] + [0.0] * 4
    expected = {("math", "m1"): 4, ("math", "m2"): 4, ("maze", "z1"): 4, ("maze", "z2"): 4}
    out = validation_pass_at_k(sources, uids, {"reward": reward, "acc": acc}, 0.0, expected)
    assert sorted(out) == sorted(f"val-core/{s}/pass@{k}" for s in ("math", "maze") for k in (1, 2, 4))
    for k in (1, 2, 4):
        assert out[f"val-core/math/pass@{k}"] == pytest.approx((_exact(4, 1, k) + _exact(4, 2, k)) / 2)
        assert out[f"val-core/maze/pass@{k}"] == pytest.approx((_exact(4, 2, k) + 0.0) / 2)
    assert out["val-core/math/pass@1"] == pytest.approx(0.375)


def test_threshold_and_unequal_group_sizes():
    # prompt a: 6 samples (2 above 0.5), prompt b: 3 samples (1 above 0.5): k is bounded by the smaller n = 3
    sources = ["s"] * 9
    uids = ["a"] * 6 + ["b"] * 3
    reward = [1, 0.6, 0.5, 0.2, 0, 0, 0.9, 0.1, 0.5]
    out = validation_pass_at_k(sources, uids, {"reward": reward}, 0.5)
    assert sorted(out) == ["val-core/s/pass@1", "val-core/s/pass@2", "val-core/s/pass@3"]
    for k in (1, 2, 3):
        assert out[f"val-core/s/pass@{k}"] == pytest.approx((_exact(6, 2, k) + _exact(3, 1, k)) / 2)


def test_bad_input_names_the_problem():
    with pytest.raises(ValueError, match="reward"):
        validation_pass_at_k(["s"], ["a"], {"acc": [1]}, 0.0)
    with pytest.raises(ValueError, match="differ in length"):
        validation_pass_at_k(["s", "s"], ["a"], {"reward": [1.0]}, 0.0)


@pytest.mark.parametrize("key", ["reward", "acc"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_rewards_raise_like_training(key, bad):
    """Training refuses a NaN/inf reward (fgrpo_verl.focal); validation pass@k must not count it as incorrect."""
    import torch

    from fgrpo_verl.focal import FocalSettings, compute_focal_advantage

    values = [1.0, bad, 0.0]
    infos = {"reward": [1.0, 0.0, 0.0], key: values}
    with pytest.raises(ValueError, match=r"sample 1 \(data_source 's', uid 'a'\).*finite"):
        validation_pass_at_k(["s"] * 3, ["a"] * 3, infos, 0.5)
    rewards = torch.zeros(3, 2)
    rewards[:, -1] = torch.tensor(values)
    with pytest.raises(ValueError, match="NaN or inf"):
        compute_focal_advantage(rewards, torch.ones(3, 2), np.array(["a"] * 3), FocalSettings(gamma=0.5, success_threshold=0.5, smoothing_alpha=0.0, base="grpo"))
