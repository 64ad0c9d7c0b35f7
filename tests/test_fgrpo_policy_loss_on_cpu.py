"""The `fgrpo` policy-loss mode returns the base loss and gradient bit for bit and adds actor/fgrpo/* diagnostics."""

import pytest
import torch

from fgrpo_verl.config.compose import compose
from fgrpo_verl.integration.loss import FocalPolicyLossConfig, compute_policy_loss_fgrpo, concentration_metrics
from fgrpo_verl.integration.plugin import register_all

AGG_MODES = ["token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]


@pytest.fixture(scope="module")
def actor_configs():
    """verl's actor dataclass, built from fgrpo-verl's composed config exactly as validate_config/the worker do."""
    from verl.utils.config import omega_conf_to_dataclass

    register_all()
    out = {}
    for base, clip in (("vanilla", ("0.2", "0.28")), ("cispo", ("1.0", "5.0"))):
        cfg = compose(
            [
                f"actor_rollout_ref.actor.policy_loss.base_loss_mode={base}",
                f"actor_rollout_ref.actor.clip_ratio_low={clip[0]}",
                f"actor_rollout_ref.actor.clip_ratio_high={clip[1]}",
            ]
        )
        out[base] = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    return out


def _inputs(seed, batch=6, length=9):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(batch, length, generator=g, dtype=torch.float32) * 3
    new = old + 0.3 * torch.randn(batch, length, generator=g)
    adv = torch.randn(batch, 1, generator=g).expand(batch, length).clone()
    adv[0] = 0.0  # a zero-advantage rollout (all-correct or all-wrong group)
    lengths = torch.randint(1, length + 1, (batch,), generator=g)
    mask = torch.arange(length)[None, :] < lengths[:, None]
    weights = torch.rand(batch, length, generator=g) + 0.5
    return old, new, adv, mask, weights


@pytest.mark.parametrize("base", ["vanilla", "cispo"])
@pytest.mark.parametrize("agg", AGG_MODES)
@pytest.mark.parametrize("with_is_weights", [False, True])
def test_loss_and_grad_are_bitwise_the_base(actor_configs, base, agg, with_is_weights):
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    config = actor_configs[base]
    assert config.policy_loss.loss_mode == "fgrpo" and config.policy_loss.base_loss_mode == base
    for seed in range(3):
        old, new, adv, mask, weights = _inputs(seed)
        # the keys verl's ppo_loss fills before calling the loss
        config.global_batch_info.update(
            dp_size=1, batch_num_tokens=int(mask.sum()), global_batch_size=mask.shape[0], loss_scale_factor=None
        )
        is_w = weights if with_is_weights else None
        results = []
        for fn in (get_policy_loss_fn(base), get_policy_loss_fn("fgrpo")):
            log_prob = new.clone().requires_grad_(True)
            loss, metrics = fn(
                old_log_prob=old, log_prob=log_prob, advantages=adv, response_mask=mask,
                loss_agg_mode=agg, config=config, rollout_is_weights=is_w,
            )
            loss.backward()
            results.append((loss.detach(), log_prob.grad.clone(), metrics))
        (base_loss, base_grad, base_metrics), (f_loss, f_grad, f_metrics) = results
        assert torch.equal(base_loss, f_loss), (base_loss.item(), f_loss.item())
        assert torch.equal(base_grad, f_grad)
        assert base_grad.abs().sum() > 0  # a real gradient, not two zeros
        for key, value in base_metrics.items():
            assert f_metrics[key] == value
        assert {k for k in f_metrics if k.startswith("actor/fgrpo/")} == {
            "actor/fgrpo/" + n
            for n in ("adv_pos_share", "adv_neg_share", "adv_zero_share", "adv_abs_mean", "pos_logprob_x_share", "pos_ratio_x_share")
        }


def test_diagnostics_match_a_hand_computed_micro_batch():
    # 2 rollouts x 3 tokens; the second rollout has 2 response tokens.
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=torch.bool)
    adv = torch.tensor([[2.0, 2.0, 2.0], [-1.0, 0.0, 5.0]])  # masked-out 5.0 must not count
    old = torch.log(torch.tensor([[0.5, 0.25, 0.5], [0.5, 0.5, 0.5]]))
    new = torch.log(torch.tensor([[0.5, 0.5, 0.25], [0.25, 0.5, 0.9]]))
    m = concentration_metrics(old, new, adv, mask)
    assert m["actor/fgrpo/adv_pos_share"] == pytest.approx(3 / 5)
    assert m["actor/fgrpo/adv_neg_share"] == pytest.approx(1 / 5)
    assert m["actor/fgrpo/adv_zero_share"] == pytest.approx(1 / 5)
    assert m["actor/fgrpo/adv_abs_mean"] == pytest.approx((2 + 2 + 2 + 1 + 0) / 5)
    import math

    pos_logp = math.log(0.5) + math.log(0.5) + math.log(0.25)
    assert m["actor/fgrpo/pos_logprob_x_share"] == pytest.approx(pos_logp / 5)
    assert m["actor/fgrpo/pos_ratio_x_share"] == pytest.approx((1.0 + 2.0 + 0.5) / 5)
    # the trainer's step-level division turns them into positive-token means
    from fgrpo_verl.integration.trainer import positive_token_means

    means = positive_token_means(m)
    assert means["actor/fgrpo/pos_logprob_mean"] == pytest.approx(pos_logp / 3)
    assert means["actor/fgrpo/pos_ratio_mean"] == pytest.approx(3.5 / 3)
    assert positive_token_means({**m, "actor/fgrpo/adv_pos_share": 0.0}) == {}


def test_all_padding_micro_batch_reports_zeros_not_nan():
    z = torch.zeros(2, 3)
    m = concentration_metrics(z, z, z, torch.zeros(2, 3, dtype=torch.bool))
    assert all(v == 0.0 for v in m.values())


def test_bad_base_modes_are_rejected_with_the_key_name():
    register_all()
    for bad in ("fgrpo", "no_such_loss", 3):
        with pytest.raises(ValueError, match="base_loss_mode"):
            FocalPolicyLossConfig(loss_mode="fgrpo", base_loss_mode=bad)
    with pytest.raises(ValueError, match="base_loss_mode"):
        _to_actor(compose(["actor_rollout_ref.actor.policy_loss.base_loss_mode=fgrpo"]))


def test_loss_mode_that_bypasses_fgrpo_must_match_the_base():
    register_all()
    # a recipe that sets loss_mode=cispo on top of fgrpo-verl's config would silently ignore base_loss_mode
    with pytest.raises(ValueError, match="base_loss_mode=cispo"):
        _to_actor(compose(["actor_rollout_ref.actor.policy_loss.loss_mode=cispo"]))
    # opting out of the diagnostics explicitly is fine
    actor = _to_actor(compose(["actor_rollout_ref.actor.policy_loss.loss_mode=cispo",
                               "actor_rollout_ref.actor.policy_loss.base_loss_mode=cispo"]))
    assert actor.policy_loss.loss_mode == "cispo"


def _to_actor(cfg):
    from hydra.errors import InstantiationException
    from verl.utils.config import omega_conf_to_dataclass

    try:
        return omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    except InstantiationException as err:  # hydra wraps the ValueError raised in __post_init__
        raise ValueError(str(err)) from err


def test_a_plain_policy_loss_config_fails_loudly():
    from types import SimpleNamespace

    from verl.workers.config import PolicyLossConfig

    register_all()
    # verl's own PolicyLossConfig (the `_target_` left at verl's default) has no base_loss_mode
    config = SimpleNamespace(policy_loss=PolicyLossConfig(loss_mode="fgrpo"))
    old, new, adv, mask, _ = _inputs(0)
    with pytest.raises(ValueError, match="FocalPolicyLossConfig"):
        compute_policy_loss_fgrpo(old, new, adv, mask, config=config)


def test_registration_leaves_builtins_alone():
    from verl.trainer.ppo import core_algos

    register_all()
    register_all()
    assert core_algos.POLICY_LOSS_REGISTRY["fgrpo"] is compute_policy_loss_fgrpo
    assert core_algos.POLICY_LOSS_REGISTRY["vanilla"] is core_algos.compute_policy_loss_vanilla
    assert core_algos.POLICY_LOSS_REGISTRY["cispo"] is core_algos.compute_policy_loss_cispo
