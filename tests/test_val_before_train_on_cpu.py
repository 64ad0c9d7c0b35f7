"""``trainer.val_before_train`` validates a fresh start only, not each resume (``fgrpo_verl/integration/trainer.py``).

Driven through verl's own code: verl's ``_load_checkpoint`` finds the run's checkpoint (as in its ``_setup``) and
verl's ``PPOTrainerBase.fit`` makes the decision; a stand-in ``_validate`` records the call and the first thing
``fit`` does after the decision (``_reissue_inflight_prompts``) stops it. Failure mode: every Slurm requeue re-ran
the before-training validation (AIME25 x 64 in the recipes) and logged it as a W&B row at the resumed step, off
the run's validation grid.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from fgrpo_verl.config.compose import compose
from fgrpo_verl.integration.plugin import register_all


class _Stop(Exception):
    pass


def _trainer(tmp_path, *overrides, saved_step: int | None = None):
    register_all()
    from fgrpo_verl.integration.trainer import FocalSyncTrainer

    ckpt_dir = tmp_path / "checkpoints"
    ckpt_dir.mkdir()
    if saved_step is not None:
        (ckpt_dir / f"global_step_{saved_step}" / "actor").mkdir(parents=True)
        (ckpt_dir / "latest_checkpointed_iteration.txt").write_text(str(saved_step))
    config = compose(["trainer.logger=[console]", "trainer.val_before_train=true", "trainer.resume_mode=auto",
                      f"trainer.default_local_dir={ckpt_dir}", *overrides])
    trainer = object.__new__(FocalSyncTrainer)  # verl's _setup would start Ray worker groups: its parts as stand-ins
    trainer.config = config
    trainer._fgrpo_open_row = trainer._fgrpo_unreleased = None  # what the mixin's __init__ sets
    trainer.use_critic = False
    trainer.loaded = []
    trainer.actor_rollout_wg = SimpleNamespace(load_checkpoint=lambda **kw: trainer.loaded.append(kw["local_path"]))
    trainer.train_dataloader = None
    trainer.steps_per_epoch = 25
    trainer.total_training_steps = 100
    trainer.validated = []

    def validate():
        trainer.validated.append(trainer.global_steps)
        return {"val-core/aime25/acc/mean@64": 0.25}

    def stop(*args, **kwargs):
        raise _Stop

    trainer._validate = validate
    trainer._reissue_inflight_prompts = stop  # the first call after the decision
    trainer._shutdown_dump_executor = lambda: None
    trainer._load_checkpoint()  # verl's: sets global_steps from the checkpoint it resumes from
    return trainer


def _fit(trainer):
    try:
        trainer.fit(agent_loop_manager=None)
    except _Stop:
        return "training"
    return "returned"


def test_a_fresh_start_validates_before_training(tmp_path):
    trainer = _trainer(tmp_path)
    assert trainer.global_steps == 0 and not trainer.loaded
    assert _fit(trainer) == "training"
    assert trainer.validated == [0]


def test_a_resumed_start_does_not_validate_again(tmp_path, capsys):
    trainer = _trainer(tmp_path, saved_step=25)
    assert trainer.global_steps == 25 and trainer.loaded  # verl resumed from step 25
    assert _fit(trainer) == "training"
    assert trainer.validated == []
    assert "skipping the validation before training" in capsys.readouterr().out
    # the setting itself is unchanged afterwards
    assert trainer.config.trainer.val_before_train is True


def test_a_resumed_start_keeps_it_when_fit_fails(tmp_path):
    trainer = _trainer(tmp_path, saved_step=25)
    assert _fit(trainer) == "training"  # _Stop raised out of verl's fit
    assert trainer.config.trainer.val_before_train is True


@pytest.mark.parametrize("saved_step", [None, 25])
def test_val_only_validates_a_resumed_checkpoint_too(tmp_path, saved_step):
    # val_only: evaluating a checkpoint is the point
    trainer = _trainer(tmp_path, "trainer.val_only=true", saved_step=saved_step)
    assert _fit(trainer) == "returned"
    assert trainer.validated == [saved_step or 0]


def test_off_stays_off(tmp_path):
    trainer = _trainer(tmp_path, "trainer.val_before_train=false", saved_step=25)
    assert _fit(trainer) == "training"
    assert trainer.validated == []
