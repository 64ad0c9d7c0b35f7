"""fgrpo against verl's real code: registry, compute_advantage, Hydra compose + validate_config, plugin loading."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
import torch
from conftest import algo_config, make_batch
from hypothesis import given, settings
from hypothesis import strategies as st

import verl  # noqa: F401  (loads the plugin through its entry point)
from verl import DataProto
from verl.trainer.ppo.core_algos import get_adv_estimator_fn
from verl.trainer.ppo.ray_trainer import compute_advantage

from fgrpo_verl.config.compose import compose

from fgrpo_verl.integration.validation import validate
from fgrpo_verl.config.errors import ConfigError


def _verl(name, rewards, mask, index, norm=True):
    fn = get_adv_estimator_fn(name)
    kwargs = {"norm_adv_by_std_in_grpo": norm} if name == "grpo_vectorized" else {}
    return fn(token_level_rewards=rewards, response_mask=mask, index=index, **kwargs)


def _fgrpo(rewards, mask, index, **cfg):
    return get_adv_estimator_fn("fgrpo")(token_level_rewards=rewards, response_mask=mask, index=index,
                                         config=algo_config(**cfg))


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.integers(1, 10), min_size=1, max_size=16), seed=st.integers(0, 2**20),
       kind=st.sampled_from(["binary", "pm1", "normal"]), norm=st.booleans())
def test_gamma_zero_is_bitwise_verl_grpo_vectorized(sizes, seed, kind, norm):
    rewards, mask, index = make_batch(sizes, reward_kind=kind, seed=seed)
    ours, ours_ret = _fgrpo(rewards, mask, index, gamma=0.0, norm=norm)
    theirs, _ = _verl("grpo_vectorized", rewards, mask, index, norm=norm)
    assert torch.equal(ours, theirs)
    assert torch.equal(ours_ret, theirs)


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.integers(1, 10), min_size=1, max_size=16), seed=st.integers(0, 2**20),
       kind=st.sampled_from(["binary", "pm1", "normal"]))
def test_gamma_zero_is_bitwise_verl_rloo_vectorized(sizes, seed, kind):
    rewards, mask, index = make_batch(sizes, reward_kind=kind, seed=seed)
    ours, _ = _fgrpo(rewards, mask, index, gamma=0.0, base="rloo")
    theirs, _ = _verl("rloo_vectorized", rewards, mask, index)
    assert torch.equal(ours, theirs)


def test_gamma_zero_matches_verl_loop_grpo_up_to_float_rounding():
    # verl's loop `grpo` differs from its own `grpo_vectorized` in float rounding (the README's qualifier: ~5e-7)
    rewards, mask, index = make_batch([8] * 16 + [1, 3], seed=11)
    ours, _ = _fgrpo(rewards, mask, index, gamma=0.0)
    loop, _ = get_adv_estimator_fn("grpo")(token_level_rewards=rewards.clone(), response_mask=mask, index=index)
    assert float((ours - loop).abs().max()) <= 1e-6


def _data_proto(rewards, mask, index):
    return DataProto.from_dict(tensors={"token_level_rewards": rewards, "response_mask": mask},
                               non_tensors={"uid": index})


def test_compute_advantage_on_dataproto_with_composed_config():
    cfg = compose(["algorithm.fgrpo.gamma=1.0"])
    rewards, mask, index = make_batch([8, 8, 8, 4, 1, 2], seed=5)
    data = compute_advantage(_data_proto(rewards, mask, index), adv_estimator=cfg.algorithm.adv_estimator,
                             config=cfg.algorithm)
    expected, _ = _fgrpo(rewards, mask, index, gamma=1.0)
    assert torch.equal(data.batch["advantages"], expected)
    assert torch.equal(data.batch["returns"], expected)
    # gamma really acts: the same batch at gamma=0 differs wherever a mixed group has mu_hat > 0
    base = compute_advantage(_data_proto(rewards, mask, index), adv_estimator="grpo_vectorized",
                             config=compose(["algorithm.adv_estimator=grpo_vectorized"]).algorithm)
    assert not torch.equal(base.batch["advantages"], expected)
    zero = compute_advantage(_data_proto(rewards, mask, index), adv_estimator="fgrpo",
                             config=compose(["algorithm.fgrpo.gamma=0"]).algorithm)
    assert torch.equal(zero.batch["advantages"], base.batch["advantages"])


def test_compose_overrides_without_plus_and_validate():
    cfg = compose(["algorithm.fgrpo.gamma=1.0", "algorithm.fgrpo.base=rloo", "algorithm.fgrpo.smoothing_alpha=0.5",
                   "actor_rollout_ref.rollout.n=8"])
    assert cfg.algorithm.adv_estimator == "fgrpo"
    assert cfg.algorithm.fgrpo.gamma == 1.0 and cfg.algorithm.fgrpo.base == "rloo"
    assert cfg.algorithm.gamma == 1.0  # verl's GAE discount is untouched and separate
    validate(cfg)  # verl's validate_config on the composed config


def test_defaults_are_the_documented_ones():
    from fgrpo_verl.focal import DEFAULTS

    f = compose([]).algorithm.fgrpo
    assert (f.gamma, f.success_threshold, f.smoothing_alpha, f.base) == (0.5, 0.5, 0.0, "grpo")
    # One truth: the yaml's defaults are the ones a plain verl run gets when it gives only gamma; every preset
    # keeps them.
    assert {k: f[k] for k in DEFAULTS} == DEFAULTS
    for algo in ("grpo", "dapo", "cispo"):
        assert compose([f"algo={algo}"]).algorithm.fgrpo == f


def test_misspelt_key_fails_at_composition():
    with pytest.raises(ConfigError, match=r"^algorithm.fgrpo.gama=1.0: no key 'gama' under 'algorithm.fgrpo'; "
                                          r"did you mean 'gamma'\?"):
        compose(["algorithm.fgrpo.gama=1.0"])


def test_bad_value_fails_validation_with_named_key():
    cfg = compose(["algorithm.fgrpo.gamma=-1"])
    with pytest.raises(ValueError, match=r"algorithm.fgrpo.gamma=-1.0 is invalid"):
        validate(cfg)


def _clean_env():
    env = {k: v for k, v in os.environ.items() if not k.startswith("VERL_USE_EXTERNAL")}
    env["WANDB_MODE"] = "offline"  # no W&B host here (doctor asks it when online)
    return env


@pytest.fixture
def said(monkeypatch):
    """fgrpo-verl's warnings, each said once per process (validation._warn_once), from a fresh start."""
    import logging

    from fgrpo_verl.integration import validation

    messages = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: messages.append(record.getMessage())
    logger = logging.getLogger("fgrpo_verl")
    monkeypatch.setattr(logger, "disabled", False)
    monkeypatch.setattr(logger, "level", logging.WARNING)
    validation._warn_once.cache_clear()
    logger.addHandler(handler)
    yield messages
    logger.removeHandler(handler)
    validation._warn_once.cache_clear()


def test_train_and_main_ppo_validating_one_config_say_its_warnings_once(said):
    from verl.utils.config import validate_config

    config = compose(["actor_rollout_ref.rollout.n=1", "backend=cpu"])
    validate(config)
    with pytest.raises(ValueError):  # verl's own checks of what train composed for main_ppo, after ours
        validate_config(config, use_reference_policy=False, use_critic=False)
    assert sum("actor_rollout_ref.rollout.n=1:" in m for m in said) == 1, said


def _verl_config(overrides):
    """verl's own ppo_trainer, as ``python -m verl.trainer.main_ppo`` composes it."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from fgrpo_verl.config.compose import verl_config_dir

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(verl_config_dir()), version_base=None):
        return hydra_compose(config_name="ppo_trainer", overrides=overrides)


def _main_ppo_check(overrides):
    """What verl's main_ppo runs before Ray: its validate_config, which the plugin wraps."""
    from verl.utils.config import validate_config

    validate_config(_verl_config(overrides), use_reference_policy=False, use_critic=False)


# data files that exist (the checks before Ray look at them first)
PLAIN = ["algorithm.adv_estimator=fgrpo", "+algorithm.fgrpo.gamma=0.5", f"data.train_files={__file__}",
         f"data.val_files={__file__}", "trainer.logger=[console]"]
LOSS = "actor_rollout_ref.actor.policy_loss"


def test_the_mistakes_of_the_plain_verl_path_are_one_line_before_ray(said):
    # the fgrpo loss without its config class: verl would fail at the first actor update, after Ray started
    with pytest.raises(ValueError, match=rf"^{LOSS}.loss_mode=fgrpo needs {LOSS}._target_=fgrpo_verl.integration.loss."
                                         rf"FocalPolicyLossConfig and \+{LOSS}.base_loss_mode=vanilla"):
        _main_ppo_check([*PLAIN, f"{LOSS}.loss_mode=fgrpo"])
    # no GPU here and no CPU backend: verl would start Ray and hang
    with pytest.raises(RuntimeError, match=r"^no GPU on this machine and no CPU backend selected: .* backend=cpu"):
        _main_ppo_check(PLAIN)
    # ...after saying that this run logs no fgrpo metrics, and what to add for them
    (line,) = [m for m in said if "this run logs none of" in m]
    assert "add trainer.v1.trainer_mode=fgrpo_sync" in line and f"+{LOSS}.base_loss_mode=vanilla" in line
    # an fgrpo block beside another estimator: trained as that estimator, said once
    with pytest.raises(Exception, match="ppo_micro_batch_size"):  # verl's own checks of its bare config, after ours
        _main_ppo_check(["algorithm.adv_estimator=grpo", "+algorithm.fgrpo.gamma=0.5"])
    assert [m for m in said if "algorithm.fgrpo is set" in m] == [
        "fgrpo-verl: algorithm.fgrpo is set but algorithm.adv_estimator=grpo: this run trains grpo and ignores it; "
        "for F-GRPO set algorithm.adv_estimator=fgrpo"]


@pytest.mark.parametrize("fgrpo, effect", [
    ({"gamma": 0.0}, "each advantage is the rollout's own score"),
    ({"gamma": 0.5}, "a correct rollout (score > 0.5) gets focal weight 0"),
    ({"gamma": 0.5, "base": "rloo"}, "every advantage is 0 and nothing is learned"),
])
def test_a_single_rollout_per_prompt_is_said_as_it_acts_on_this_run(fgrpo, effect, said):
    from omegaconf import OmegaConf

    from fgrpo_verl.integration.validation import check_fgrpo

    check_fgrpo(OmegaConf.create({"algorithm": {"adv_estimator": "fgrpo", "fgrpo": fgrpo},
                                  "actor_rollout_ref": {"rollout": {"n": 1}}}))
    (line,) = [m for m in said if "rollout.n=1" in m]
    assert effect in line
    # and what is said matches what the estimator does with groups of one (1/0 rewards)
    rewards, mask, index = make_batch([1] * 6, seed=1)
    advantages, _ = _fgrpo(rewards, mask, index, **{"threshold": 0.5, **fgrpo})
    scores = rewards.sum(-1)
    if fgrpo.get("base") == "rloo" or fgrpo["gamma"] > 0:
        assert not advantages.any()
    else:
        assert torch.allclose(advantages.sum(-1) / mask.sum(-1), scores, atol=1e-5)


def test_scores_that_never_pass_the_threshold_warn_once_that_fgrpo_acts_as_grpo(said, monkeypatch):
    from fgrpo_verl.integration import estimator

    monkeypatch.setattr(estimator, "_WARNED_NO_SUCCESS", [])
    rewards, mask, index = make_batch([4, 4, 4], seed=2)
    half = rewards * 0.5  # correct answers score exactly the default threshold 0.5
    ours, _ = _fgrpo(half, mask, index, gamma=0.5, threshold=0.5)
    base, _ = _verl("grpo_vectorized", half, mask, index)
    assert torch.equal(ours, base)  # every group "all wrong": g = 1
    _fgrpo(half, mask, index, gamma=0.5, threshold=0.5)
    lines = [m for m in said if "none is > algorithm.fgrpo.success_threshold=0.5" in m]
    assert len(lines) == 1 and "F-GRPO acts as GRPO" in lines[0], said
    said.clear()
    monkeypatch.setattr(estimator, "_WARNED_NO_SUCCESS", [])
    _fgrpo(rewards, mask, index, gamma=0.5, threshold=0.5)  # 1/0 rewards pass it: nothing to say
    assert said == []


REGISTERS = ("import verl\nfrom verl.trainer.ppo.core_algos import get_adv_estimator_fn\n"
             "print(get_adv_estimator_fn('fgrpo').__module__)")
SWITCHED_OFF = ("import verl\nfrom verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY\n"
                "print('fgrpo' in ADV_ESTIMATOR_REGISTRY)")


@pytest.fixture(scope="module", autouse=True)
def fresh(request):
    """The fresh processes of this module's tests (each imports verl anew, in its own environment), started with
    the module's first test so that they run beside its in-process tests; each test waits for its own."""
    import side_by_side

    run = {"env": _clean_env(), "timeout": 600}
    started = side_by_side.start(side_by_side.selected(request, {
        "registers": ("test_plain_import_verl_registers_fgrpo_in_a_fresh_process",
                      {**run, "args": [sys.executable, "-c", REGISTERS]}),
        "switched_off": ("test_plugin_can_be_switched_off_like_any_verl_plugin",
                         {**run, "args": [sys.executable, "-c", SWITCHED_OFF],
                          "env": {**_clean_env(), "VERL_USE_EXTERNAL_PLUGINS": "none"}}),
        "doctor": ("test_doctor_passes_including_ray_actor", {**run, "args": [sys.executable, "-m", "fgrpo_verl",
                                                                              "doctor"]}),
        "doctor_bad_config": ("test_doctor_fails_loudly_on_bad_config",
                              {**run, "args": [sys.executable, "-m", "fgrpo_verl", "doctor", "--no-ray",
                                               "algorithm.fgrpo.base=ppo"]}),
    }))
    yield started
    started.close()


def test_plain_import_verl_registers_fgrpo_in_a_fresh_process(fresh):
    out = fresh.result("registers")
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "fgrpo_verl.integration.estimator"


def test_plugin_can_be_switched_off_like_any_verl_plugin(fresh):
    # Proves the registration really comes from the entry point (and not from an import side effect here).
    out = fresh.result("switched_off")
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "False"


@pytest.mark.ray
def test_doctor_passes_including_ray_actor(fresh):
    out = fresh.result("doctor")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "[ok]   registry (Ray actor): fgrpo -> fgrpo_verl.integration.estimator.compute_fgrpo_outcome_advantage" in out.stdout
    assert "all checks passed" in out.stdout


def test_doctor_fails_loudly_on_bad_config(fresh):
    out = fresh.result("doctor_bad_config")
    assert out.returncode == 2  # a bad config given on the command line is a user error (exit 2, as argparse)
    assert "[FAIL] config composes + verl validate_config: ValueError: algorithm.fgrpo.base='ppo' is invalid" in out.stdout


def test_index_may_be_integers_or_strings():
    rewards, mask, index = make_batch([3, 3, 2], seed=2, shuffle=False)
    as_int = np.array([0, 0, 0, 1, 1, 1, 2, 2])
    a, _ = _fgrpo(rewards, mask, index, gamma=0.5)
    b, _ = _fgrpo(rewards, mask, as_int, gamma=0.5)
    assert torch.equal(a, b)
