"""The fgrpo trainers: registration, the trainer_mode mapping, and each metrics hook on synthetic data."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from fgrpo_verl.config.compose import compose
from fgrpo_verl.focal import FocalSettings
from fgrpo_verl.integration.plugin import register_all
from fgrpo_verl.integration.trainer import MU_HAT_HISTOGRAM, FocalMetricsMixin, FocalSyncTrainer, TRAINERS


def test_registered_and_selected_by_our_config():
    from verl.trainer.ppo.v1 import PPOTrainerSync, get_trainer_cls

    register_all()
    cfg = compose()
    assert cfg.trainer.v1.trainer_mode == "fgrpo_sync"
    assert get_trainer_cls(cfg.trainer.v1.trainer_mode) is FocalSyncTrainer
    assert issubclass(FocalSyncTrainer, PPOTrainerSync)
    assert get_trainer_cls("sync") is PPOTrainerSync  # verl's own modes untouched


@pytest.mark.parametrize("cls", TRAINERS)
def test_trainer_mode_reports_the_wrapped_verl_mode(cls):
    trainer = object.__new__(cls)
    trainer.trainer_mode = cls.name  # what verl's __init__ assigns from trainer.v1.trainer_mode
    assert trainer.trainer_mode == cls.verl_mode  # so `self.trainer_mode == "sync"` branches hold for fgrpo_sync
    with pytest.raises(ValueError, match="trainer_mode"):
        trainer.trainer_mode = "something_else"


class _FakeVerlTrainer:
    """Stands in for verl's trainer where it needs TransferQueue/Ray: runs verl's real compute_advantage."""

    def __init__(self, config):
        self.config = config
        self.logged = []

    def _compute_advantage(self, batch, metrics):
        from verl import DataProto
        from verl.trainer.ppo.ray_trainer import compute_advantage

        data = DataProto.from_dict(
            tensors={"token_level_rewards": batch.rewards, "response_mask": batch.mask},
            non_tensors={"uid": batch.uids},
        )
        batch.out = compute_advantage(data, adv_estimator=self.config.algorithm.adv_estimator, config=self.config.algorithm)
        return batch

    def _update_actor(self, batch, metrics):
        metrics.update({"actor/fgrpo/adv_pos_share": 0.25, "actor/fgrpo/pos_logprob_x_share": -0.5,
                        "actor/fgrpo/pos_ratio_x_share": 0.3})
        return batch

    def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
        metrics["verl/own"] = 1.0


class _FakeTracking:
    def __init__(self, backends):
        self.logger = {name: None for name in backends}
        self.calls = []

    def log(self, data, step, backend=None):
        self.calls.append((data, step, backend))


class _Trainer(FocalMetricsMixin, _FakeVerlTrainer):
    verl_mode, name = "sync", "fgrpo_test"


def _batch():
    rewards = torch.zeros(10, 2)
    rewards[[0, 1, 2, 4], -1] = 1.0  # group a: 3 of 4 correct, group b: 1 of 4, 2 padding rows (uid pad)
    mask = torch.ones(10, 2)
    mask[8:] = 0
    uids = np.array(["a"] * 4 + ["b"] * 4 + ["pad"] * 2, dtype=object)
    tags = [{}] * 8 + [{"is_padding": True}] * 2
    return SimpleNamespace(rewards=rewards, mask=mask, uids=uids, tags=tags)


@pytest.mark.parametrize("backends", [["console", "wandb"], ["console"]])
def test_step_hooks_add_focal_and_loss_metrics(backends):
    register_all()
    trainer = _Trainer(compose(["algorithm.fgrpo.gamma=1.0"]))
    trainer.logger = _FakeTracking(backends)
    metrics = {}
    batch = trainer._compute_advantage(_batch(), metrics)
    assert metrics["fgrpo/num_groups"] == 2
    assert metrics["fgrpo/frac_mixed"] == 1.0
    assert metrics["fgrpo/mu_hat_mean"] == pytest.approx((0.75 + 0.25) / 2)
    assert metrics["fgrpo/g_mean"] == pytest.approx((0.25 + 0.75) / 2)
    # the advantages verl received are the focal ones the metrics describe
    adv = batch.out.batch["advantages"][:8, -1]
    assert float(adv.abs().mean()) == pytest.approx(metrics["fgrpo/adv_abs_mean_focal"], rel=1e-6)

    trainer._update_actor(batch, metrics)
    assert metrics["actor/fgrpo/pos_logprob_mean"] == pytest.approx(-2.0)
    assert metrics["actor/fgrpo/pos_ratio_mean"] == pytest.approx(1.2)

    trainer._compute_metrics(batch, metrics, {}, global_steps=7, epoch=0)
    assert metrics["verl/own"] == 1.0
    if "wandb" in backends:
        ((data, step, backend),) = trainer.logger.calls
        assert step == 7 and backend == ["wandb"]
        hist = data[MU_HAT_HISTOGRAM]
        counts = np.asarray(hist.histogram)
        edges = np.asarray(hist.bins)
        assert counts.sum() == 2 and len(edges) == 4 + 2  # one bin per j/4, j = 0..4
        centres = (edges[:-1] + edges[1:]) / 2
        assert sorted(centres[counts > 0].round(6).tolist()) == [0.25, 0.75]
    else:
        assert trainer.logger.calls == []  # histograms never reach scalar-only loggers


def test_other_estimators_are_a_no_op():
    register_all()
    trainer = _Trainer(compose(["algorithm.adv_estimator=grpo_vectorized"]))
    metrics = {}
    trainer._compute_advantage(_batch(), metrics)
    assert not any(k.startswith("fgrpo/") for k in metrics)


def test_validation_hook_adds_pass_at_k_next_to_verls_metrics():
    trainer = object.__new__(FocalSyncTrainer)
    trainer._fgrpo_settings = FocalSettings(gamma=0.5, success_threshold=0.0, smoothing_alpha=0.0, base="grpo")
    # 2 prompts x 4 samples: 1 correct and 2 correct
    rewards = [1, 0, 0, 0, 1, 1, 0, 0]
    out = trainer._val_metrics_update(
        ["maze"] * 8, ["p"] * 4 + ["q"] * 4, {"reward": [float(r) for r in rewards]}, [1] * 8, expected_acc_counts={}
    )
    assert out["val-core/maze/pass@1"] == pytest.approx((0.25 + 0.5) / 2)
    assert out["val-core/maze/pass@2"] == pytest.approx(((1 - 3 / 6) + (1 - 1 / 6)) / 2)
    assert out["val-core/maze/pass@4"] == pytest.approx(1.0)
    assert "val-core/maze/reward/mean@4" in out  # verl's own metrics are still there


def test_trainer_requires_the_fgrpo_block():
    cfg = OmegaConf.create({"algorithm": {"adv_estimator": "grpo"}})
    with pytest.raises(ValueError, match="algorithm.fgrpo"):
        _Trainer(cfg)


@pytest.mark.parametrize("mode, verl_mode", [(cls.name, cls.verl_mode) for cls in TRAINERS])
def test_trainer_v1_blocks_are_aliased_for_code_that_reads_them_by_mode_name(mode, verl_mode):
    # verl's rollout skip reads trainer.v1.<trainer_mode>.parameter_sync_step by the configured name.
    cfg = compose([f"trainer.v1.trainer_mode={mode}", f"++trainer.v1.{verl_mode}.parameter_sync_step=7"])
    assert OmegaConf.select(cfg, f"trainer.v1.{cfg.trainer.v1.trainer_mode}.parameter_sync_step", default=1) == 7
    OmegaConf.resolve(cfg)  # as verl's TaskRunner does
    assert cfg.trainer.v1[mode] == cfg.trainer.v1[verl_mode]


@pytest.mark.parametrize("cls", TRAINERS)
def test_every_hook_is_a_method_of_verls_trainer_with_the_same_parameters(cls):
    """A hook whose verl method was renamed would never run (the metrics vanish silently) and one whose parameters
    changed would crash mid-run: each method the fgrpo trainers override exists on the verl trainer they wrap, with
    the parameters it passes on (``*args`` hooks take whatever verl passes)."""
    import inspect

    base = cls.__mro__[cls.__mro__.index(FocalMetricsMixin) + 1]
    hooks = [name for name, method in vars(FocalMetricsMixin).items()
             if inspect.isfunction(method) and not name.startswith(("__", "_fgrpo"))]
    assert {"_compute_advantage", "_update_actor", "_val_metrics_update", "_compute_metrics", "on_step_begin",
            "on_step_end", "on_init_end", "_save_checkpoint", "fit"} <= set(hooks)
    for name in hooks:
        ours, theirs = (list(inspect.signature(getattr(c, name)).parameters) for c in (FocalMetricsMixin, base))
        assert ours == theirs or ours == ["self", "args", "kwargs"], (name, ours, theirs)


class _FakeMultiOutputTrainer(_FakeVerlTrainer):
    """verl's v1 call, with batch keys: the multi-output session rule applies."""

    def _compute_advantage(self, batch, metrics):
        from verl import DataProto
        from verl.trainer.ppo.v1 import trainer_base

        data = DataProto.from_dict(
            tensors={"token_level_rewards": batch.rewards, "response_mask": batch.mask},
            non_tensors={"uid": batch.uids},
        )
        batch.out = trainer_base.compute_advantage_for_multi_trajectories(
            data, batch_keys=batch.keys, adv_estimator=self.config.algorithm.adv_estimator, config=self.config.algorithm
        )
        return batch


class _MultiOutputTrainer(FocalMetricsMixin, _FakeMultiOutputTrainer):
    verl_mode, name = "sync", "fgrpo_test_multi"


def test_step_metrics_count_sessions_for_multi_output_agent_loops():
    register_all()
    trainer = _MultiOutputTrainer(compose(["algorithm.fgrpo.gamma=1.0"]))
    # prompt a: 2 sessions of 3 outputs (final outputs: 1 correct, 1 wrong); prompt b: 2 single-output sessions,
    # both correct; then 2 padding rows. Non-final outputs carry rewards that must not count.
    keys = ["a_0_0", "a_0_1", "a_0_2", "a_1_0", "a_1_1", "a_1_2", "b_0_0", "b_1_0", "pad_0_0", "pad_1_0"]
    final_reward = [1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0]
    rewards = torch.zeros(10, 2)
    rewards[:, -1] = torch.tensor(final_reward)
    uids = np.array(["a"] * 6 + ["b"] * 2 + ["pad"] * 2, dtype=object)
    tags = [{}] * 8 + [{"is_padding": True}] * 2
    batch = SimpleNamespace(rewards=rewards, mask=torch.ones(10, 2), uids=uids, tags=tags, keys=keys)
    metrics = {}
    trainer._compute_advantage(batch, metrics)
    assert metrics["fgrpo/num_groups"] == 2  # a and b; the padding group is left out
    assert metrics["fgrpo/mu_hat_mean"] == pytest.approx((0.5 + 1.0) / 2)  # sessions, not outputs (a: 1 of 2)
    assert metrics["fgrpo/frac_all_correct"] == 0.5
