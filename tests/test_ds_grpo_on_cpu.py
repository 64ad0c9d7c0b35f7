"""DS-GRPO (fgrpo_verl/integration/ds_grpo.py) against a hand computation, through verl's own compute_advantage and
get_policy_loss_fn, and its Hydra selection through fgrpo-verl's compose and verl's validate_config.

The batch, six rollouts of three prompts, 1/0 rewards, response lengths 2, 1, 2, 3, 1, 2 (padding holds -100 in the
old log-probs, which must not count):

    prompt a: rewards 1, 0  mixed   GRPO: mean 0.5, unbiased std sqrt(0.5), A = +-0.5 / (sqrt(0.5) + 1e-6)
    prompt b: rewards 1, 1  all correct   A = +0.0, +0.0
    prompt c: rewards 0, 0  all wrong     A = -0.0, -0.0 (the estimator's sign bit: wrong)

    log pi_old(y|x) per rollout: a1 -1.0 (-0.25, -0.75), a2 -2.0 (-2.0), b1 -0.5 (-0.5, 0.0), b2 -3.0 (-1, -1, -1),
                                 c1 -1.0 (-1.0), c2 -4.0 (-1.5, -2.5)
    gamma_p = 0.1 (correct: A - 0.1 log pi), gamma_n = 0.2 (wrong: A + 0.2 log pi):
    a1 0.70710629 + 0.1 = 0.80710629   a2 -0.70710629 - 0.4 = -1.10710629
    b1 0.05   b2 0.3   c1 -0.2   c2 -0.8
"""

import math
import re

import numpy as np
import pytest
import torch

from fgrpo_verl.config.compose import compose
from fgrpo_verl.integration import ds_grpo
from fgrpo_verl.integration.plugin import register_all

PAD = -100.0
REWARDS = [1.0, 0.0, 1.0, 1.0, 0.0, 0.0]
LENGTHS = [2, 1, 2, 3, 1, 2]
OLD_LOG_PROB = [[-0.25, -0.75, PAD], [-2.0, PAD, PAD], [-0.5, 0.0, PAD], [-1.0, -1.0, -1.0], [-1.0, PAD, PAD],
                [-1.5, -2.5, PAD]]
UIDS = ["a", "a", "b", "b", "c", "c"]
A_MIXED = 0.5 / (math.sqrt(0.5) + 1e-6)
HAND = [A_MIXED + 0.1, -A_MIXED - 0.4, 0.05, 0.3, -0.2, -0.8]
GAMMAS = ["actor_rollout_ref.actor.policy_loss.gamma_p=0.1", "actor_rollout_ref.actor.policy_loss.gamma_n=0.2"]


@pytest.fixture(scope="module")
def registered():
    register_all()
    ds_grpo.register()


@pytest.fixture(scope="module")
def cfg(registered):
    return compose(["algo=grpo", "control=ds_grpo", "algorithm.fgrpo.gamma=0", *GAMMAS])


@pytest.fixture(scope="module")
def actor(cfg):
    from verl.utils.config import omega_conf_to_dataclass

    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    mask = _mask()
    actor.global_batch_info.update(dp_size=1, batch_num_tokens=int(mask.sum()), global_batch_size=6,
                                   loss_scale_factor=None)
    return actor


def _mask():
    return torch.arange(3)[None, :] < torch.tensor(LENGTHS)[:, None]


def _verl_advantages(cfg, scores=REWARDS):
    """verl's ray_trainer.compute_advantage with adv_estimator=ds_grpo, as the trainer calls it."""
    from verl.protocol import DataProto
    from verl.trainer.ppo.ray_trainer import compute_advantage

    mask = _mask()
    rewards = torch.zeros(6, 3)
    rewards[torch.arange(6), torch.tensor(LENGTHS) - 1] = torch.tensor(scores)  # the reward on the last token
    data = DataProto.from_dict(tensors={"token_level_rewards": rewards, "response_mask": mask.float()},
                               non_tensors={"uid": np.array(UIDS, dtype=object)})
    return compute_advantage(data, adv_estimator=cfg.algorithm.adv_estimator, config=cfg.algorithm).batch["advantages"]


def test_verl_calls_the_estimator_and_it_signs_each_rollouts_correctness(cfg):
    adv = _verl_advantages(cfg)
    first = adv[:, 0]
    assert first[:2].tolist() == pytest.approx([A_MIXED, -A_MIXED], abs=1e-6)
    assert first[2:].tolist() == [0.0, 0.0, 0.0, 0.0]
    assert torch.signbit(first).tolist() == [False, True, False, False, True, True]  # +0.0 correct, -0.0 wrong
    assert torch.equal(torch.signbit(adv) & _mask(), torch.signbit(first)[:, None].expand(6, 3) & _mask())


def test_smoothed_advantages_match_the_hand_computation(cfg):
    adv = _verl_advantages(cfg)
    smoothed, correct, shift = ds_grpo.smoothed_advantages(adv, torch.tensor(OLD_LOG_PROB), _mask(), 0.1, 0.2)
    assert correct.tolist() == [True, False, True, True, False, False]
    assert shift.tolist() == pytest.approx([0.1, -0.4, 0.05, 0.3, -0.2, -0.8])
    assert smoothed[:, 0].tolist() == pytest.approx(HAND, abs=1e-6)
    assert torch.equal(smoothed * _mask(), smoothed[:, :1].expand(6, 3) * _mask())  # one value per response
    # gamma_n = 0 leaves wrong rollouts alone, gamma_p = 0 correct ones
    only_p, _, _ = ds_grpo.smoothed_advantages(adv, torch.tensor(OLD_LOG_PROB), _mask(), 0.1, 0.0)
    assert only_p[:, 0].tolist() == pytest.approx([A_MIXED + 0.1, -A_MIXED, 0.05, 0.3, 0.0, 0.0], abs=1e-6)


def test_the_loss_verl_gets_is_the_base_loss_at_the_hand_advantages(cfg, actor):
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    assert actor.policy_loss.loss_mode == "ds_grpo" and actor.policy_loss.base_loss_mode == "vanilla"
    adv = _verl_advantages(cfg)
    old = torch.tensor(OLD_LOG_PROB)
    new = old + torch.tensor([[0.1, -0.2, 0.0], [0.3, 0.0, 0.0], [-0.1, 0.05, 0.0], [0.2, 0.1, -0.3], [-0.4, 0.0, 0.0],
                              [0.15, -0.05, 0.0]])
    hand = torch.tensor(HAND)[:, None].expand(6, 3) * _mask()
    results = []
    for mode, advantages in (("ds_grpo", adv), ("vanilla", hand)):
        log_prob = new.clone().requires_grad_(True)
        out, metrics = get_policy_loss_fn(mode)(old_log_prob=old, log_prob=log_prob, advantages=advantages,
                                                response_mask=_mask(), loss_agg_mode="token-mean", config=actor)
        out.backward()
        results.append((out.detach(), log_prob.grad, metrics))
    (ds_loss, ds_grad, ds_metrics), (base_loss, base_grad, _) = results
    assert ds_loss.item() == pytest.approx(base_loss.item(), abs=1e-6)
    assert torch.allclose(ds_grad, base_grad, atol=1e-7) and base_grad.abs().sum() > 0
    assert ds_metrics["actor/ds_grpo/correct_share"] == pytest.approx(3 / 6)
    assert ds_metrics["actor/ds_grpo/shift_mean"] == pytest.approx((0.1 - 0.4 + 0.05 + 0.3 - 0.2 - 0.8) / 6)
    assert "actor/fgrpo/adv_pos_share" in ds_metrics  # the base loss runs through the fgrpo mode


@pytest.mark.parametrize("scores", [
    [1.0, 0.0, 1.0, 0.6, 0.0, 0.0],  # two correct grades in one group: the 0.6 rollout gets A < 0
    [1.0, 0.0, 1.0, 1.0, -0.2, 0.0],  # a shaped wrong score
    [1.0, 0.0, 1.0, 1.0 + 1e-6, 0.0, 0.0],  # float noise: the 1.0 rollout gets A < 0 all the same
])
def test_graded_rewards_are_refused_at_the_first_batch_naming_what_is_valid(cfg, scores):
    with pytest.raises(ValueError, match=r"ds_grpo needs binary rewards.*success_threshold=0\.5.*"
                                         r"reward\.custom_reward_function") as raised:
        _verl_advantages(cfg, scores)
    assert "\n" not in str(raised.value)


def test_two_valued_rewards_other_than_1_0_pass(cfg):
    signs = torch.signbit(_verl_advantages(cfg, [2 * r - 1 for r in REWARDS])[:, 0])  # +-1: correct above 0.5
    assert signs.tolist() == [False, True, False, False, True, True]


def test_binary_rewards_within_each_group_pass_on_different_scales(cfg):
    """verl scores one data source 1/0 and another +-1: each group is binary, every sign is right."""
    signs = torch.signbit(_verl_advantages(cfg, [1.0, 0.0, 1.0, 1.0, -1.0, -1.0])[:, 0])
    assert signs.tolist() == [False, True, False, False, True, True]


def test_the_control_composes_and_passes_verls_validate_config(registered, monkeypatch):
    from fgrpo_verl.integration import validation

    said = []
    monkeypatch.setattr(validation, "_warn_once", said.append)
    for algo, base in (("grpo", "vanilla"), ("cispo", "cispo")):
        c = compose([f"algo={algo}", "control=ds_grpo", "algorithm.fgrpo.gamma=0",
                     "data.train_files=x.parquet", "data.val_files=x.parquet"])
        validation.validate(c)
        loss = c.actor_rollout_ref.actor.policy_loss
        assert (c.algorithm.adv_estimator, loss.loss_mode, loss.base_loss_mode) == ("ds_grpo", "ds_grpo", base)
    assert not [line for line in said if "algorithm.fgrpo is set" in line]  # ds_grpo reads it: no "ignored" warning


@pytest.mark.parametrize("override,match", [
    ("algorithm.adv_estimator=fgrpo", "algorithm.adv_estimator='fgrpo'"),
    ("actor_rollout_ref.actor.policy_loss.gamma_p=-1", "gamma_p=-1"),
    ("actor_rollout_ref.actor.policy_loss.gamma_n=inf", "gamma_n=inf"),
    ("actor_rollout_ref.actor.policy_loss.loss_mode=fgrpo", "loss_mode='fgrpo'"),
    ("actor_rollout_ref.actor.policy_loss.base_loss_mode=ds_grpo", "base_loss_mode='ds_grpo'"),
])
def test_bad_settings_are_refused_naming_the_key(registered, override, match):
    from fgrpo_verl.integration.validation import validate

    c = compose(["algo=grpo", "control=ds_grpo", override, "data.train_files=x.parquet", "data.val_files=x.parquet"])
    with pytest.raises(ValueError, match=match) as raised:  # what `train` prints as one line, exit 2
        validate(c)
    assert "\n" not in str(raised.value) and "InstantiationException" not in str(raised.value)


@pytest.mark.parametrize("key", ["algorithm.use_kl_in_reward", "reward.reward_kwargs.overlong_buffer_cfg.enable",
                                 "reward_model.reward_kwargs.overlong_buffer_cfg.enable"])
def test_rewards_the_config_makes_graded_are_refused_before_ray_by_train_and_launch(registered, key, tmp_path):
    from fgrpo_verl.integration.validation import validate
    from fgrpo_verl.preflight import check_run

    data = ["data.train_files=x.parquet", "data.val_files=x.parquet"]
    c = compose(["algo=grpo", "control=ds_grpo", f"++{key}=true", *data])
    # train's check (before Ray), then launch's and its --dry-run's (check_run)
    for check in (validate, lambda config: check_run(config, str(tmp_path))):
        with pytest.raises(ValueError, match=rf"^{re.escape(key)}=true with algorithm.adv_estimator=ds_grpo: .*"
                                             rf"binary.*set {re.escape(key)}=false or another estimator") as raised:
            check(c)
        assert "\n" not in str(raised.value)
    validate(compose(["algo=grpo", f"++{key}=true", *data]))  # fgrpo takes graded rewards


def test_registration_follows_the_duplicate_policy(registered):
    from verl.trainer.ppo import core_algos

    ds_grpo.register()  # again: kept, no error
    assert core_algos.get_policy_loss_fn("ds_grpo") is ds_grpo.compute_policy_loss_ds_grpo
    assert core_algos.get_adv_estimator_fn("ds_grpo") is ds_grpo.compute_ds_grpo_outcome_advantage
    saved = core_algos.POLICY_LOSS_REGISTRY.pop("ds_grpo")
    core_algos.POLICY_LOSS_REGISTRY["ds_grpo"] = lambda **kwargs: None  # another plugin's
    try:
        with pytest.raises(ValueError, match="already registered"):
            ds_grpo.register()
    finally:
        core_algos.POLICY_LOSS_REGISTRY["ds_grpo"] = saved


def test_the_demos_opt_in_arm_composes_with_the_maze_overrides(registered, tmp_path):
    from verl.utils.config import omega_conf_to_dataclass

    from fgrpo_verl.tasks.raremode.experiment import configs, run_overrides

    cs = configs([0.0, 1.0], 1e-3, None, ds_grpo=True)
    assert [c.name for c in cs] == ["grpo", "fgrpo_g1", "ds_grpo"] and cs[2].gamma == 0.0 and cs[2].lr == 1e-3
    assert [c.name for c in configs([0.0], 1e-3, None)] == ["grpo"]  # opt-in
    # the maze overrides name algorithm.adv_estimator=fgrpo on the command line; the arm's own overrides come later
    c = compose(["algorithm.adv_estimator=fgrpo", *run_overrides(cs[2], 0)])
    loss = omega_conf_to_dataclass(c.actor_rollout_ref.actor).policy_loss
    assert (c.algorithm.adv_estimator, loss.loss_mode, loss.gamma_p, loss.gamma_n) == ("ds_grpo", "ds_grpo", 0.1, 0.1)


@pytest.mark.parametrize("flag", [["--ds-grpo"], ["--q-levels", "0.5"]])
def test_raremode_only_flags_are_refused_for_the_maze_demo(tmp_path, flag):
    from fgrpo_verl.cli import build_parser

    args = build_parser().parse_args(["demo", "--task", "maze", "--out-dir", str(tmp_path), *flag])
    with pytest.raises(ValueError, match=f"{flag[0]} is a \\[raremode\\] option"):
        args._run(args)
    assert not (tmp_path / "maze").exists()
