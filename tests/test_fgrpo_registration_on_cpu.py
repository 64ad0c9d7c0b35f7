"""One duplicate policy; release-gated, independently failing steps on post-import hooks."""

from __future__ import annotations

import importlib
import importlib.util
import logging

import pytest
import torch
from conftest import algo_config, make_batch

import verl  # noqa: F401  (loads the plugin)
from verl.trainer.ppo import core_algos

from fgrpo_verl import verl_compat
from fgrpo_verl.integration import estimator, plugin


def _load_copy(module, name):
    spec = importlib.util.spec_from_file_location(name, module.__file__)
    copy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(copy)
    return copy


def test_a_second_copy_of_the_estimator_module_keeps_the_first_and_the_metrics():
    plugin.register_all()
    first = core_algos.ADV_ESTIMATOR_REGISTRY["fgrpo"]
    copy = _load_copy(estimator, "fgrpo_estimator_second_copy")
    copy.register()  # no "already registered" error, and nothing replaced
    assert core_algos.ADV_ESTIMATOR_REGISTRY["fgrpo"] is first
    rewards, mask, index = make_batch([4, 4])
    fn = core_algos.get_adv_estimator_fn("fgrpo")
    # The trainer may have imported either copy: both captures see the call verl makes.
    for capture in (estimator.capture_results, copy.capture_results):
        with capture() as captured:
            fn(token_level_rewards=rewards, response_mask=mask, index=index, config=algo_config())
        assert len(captured) == 1 and captured[0][1].mu_hat.numel() == 2


def test_reloading_the_estimator_module_keeps_the_metrics():
    plugin.register_all()
    reloaded = importlib.reload(estimator)
    rewards, mask, index = make_batch([3, 5])
    with reloaded.capture_results() as captured:
        core_algos.get_adv_estimator_fn("fgrpo")(token_level_rewards=rewards, response_mask=mask, index=index,
                                                  config=algo_config())
    assert len(captured) == 1


def test_a_foreign_object_under_our_name_is_refused_naming_it():
    registry = {"fgrpo": len}
    with pytest.raises(ValueError, match=r"advantage estimator name 'fgrpo' is already registered to builtins.len"):
        plugin.register(registry, "fgrpo", estimator.compute_fgrpo_outcome_advantage, "advantage estimator",
                        core_algos.register_adv_est)
    assert registry["fgrpo"] is len


def test_each_step_fails_on_its_own_with_a_warning(tmp_path, monkeypatch, caplog):
    (tmp_path / "fgrpo_steps_probe.py").write_text(
        "CALLS = []\ndef broken():\n    raise RuntimeError('registry moved')\ndef loss():\n    CALLS.append('loss')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(plugin, "STEPS", (
        ("advantage estimator `fgrpo`", "fgrpo_steps_probe:broken", None, None),
        ("policy loss `fgrpo`", "fgrpo_steps_probe:loss", None, None),
    ))
    with caplog.at_level(logging.WARNING, logger="fgrpo_verl"):
        plugin.register_all(strict=False)
    assert importlib.import_module("fgrpo_steps_probe").CALLS == ["loss"]
    assert "fgrpo-verl: advantage estimator `fgrpo` not registered: RuntimeError: registry moved" in caplog.text
    with pytest.raises(RuntimeError, match="registry moved"):
        plugin.register_all(strict=True)


def test_another_release_schedules_the_core_only_and_says_what_it_lacks(monkeypatch, caplog):
    # What `import verl` runs on verl 0.9.0: the core's steps wait for their modules, the rest is not scheduled.
    monkeypatch.setattr(verl_compat, "installed", lambda: "0.9.0")
    scheduled = []
    monkeypatch.setattr(plugin.wrapt, "register_post_import_hook", lambda hook, module: scheduled.append(module))
    with caplog.at_level(logging.WARNING, logger="fgrpo_verl"):
        plugin.install()
    assert "fgrpo-verl on verl 0.9.0: `fgrpo` advantage estimator" in caplog.text
    assert "not on this release: fgrpo/* step metrics, trainer modes" in caplog.text
    assert scheduled == [plugin.CORE_ALGOS, plugin.CORE_ALGOS, plugin.VERL_CONFIG]
    monkeypatch.setattr(verl_compat, "installed", lambda: verl_compat.FULL)
    scheduled.clear()
    plugin.install()
    assert scheduled == [plugin.CORE_ALGOS, plugin.CORE_ALGOS, plugin.CORE_ALGOS, plugin.VERL_CONFIG, plugin.V1, plugin.V1]


def test_the_verl_commands_refuse_another_release_in_one_line(monkeypatch):
    monkeypatch.setattr(verl_compat, "installed", lambda: "0.8.0")
    with pytest.raises(RuntimeError, match=r"^fgrpo-verl train needs verl==0\.9\.1; this environment has verl 0\.8\.0, "
                                           r"on which fgrpo-verl offers `fgrpo` advantage estimator") as exc:
        verl_compat.require(verl_compat.TRAIN, "fgrpo-verl train")
    assert "\n" not in str(exc.value)
    verl_compat.require("`fgrpo` policy loss (actor/fgrpo/*)", "the loss")  # the core is on every release


def test_readme_table_is_the_one_doctor_prints_from():
    from pathlib import Path

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    assert verl_compat.markdown_table() in readme


def test_a_config_changed_in_place_is_read_again():
    # A gamma schedule that writes config.algorithm.fgrpo.gamma between steps: the next call must use the new
    # value (and a bad one must be refused), not the settings cached for the same config object.
    from fgrpo_verl.focal import FocalSettings, compute_focal_advantage

    rewards, mask, index = make_batch([4, 4, 3], seed=7)
    cfg = algo_config(gamma=0.5)
    estimator.compute_fgrpo_outcome_advantage(rewards, mask, index=index, config=cfg)
    cfg.fgrpo.gamma = 2.0
    cfg.norm_adv_by_std_in_grpo = False
    got, _ = estimator.compute_fgrpo_outcome_advantage(rewards, mask, index=index, config=cfg)
    want = compute_focal_advantage(rewards, mask, index, FocalSettings(2.0, 0.0, 0.0, "grpo"),
                                   norm_adv_by_std_in_grpo=False).advantages
    assert torch.equal(got, want)
    cfg.fgrpo.gamma = -1.0
    with pytest.raises(ValueError, match=r"algorithm.fgrpo.gamma=-1.0 is invalid"):
        estimator.compute_fgrpo_outcome_advantage(rewards, mask, index=index, config=cfg)


def test_importing_the_trainer_module_first_still_registers_the_trainer_modes():
    """A script that imports fgrpo_verl.integration.trainer before anything else imports verl's v1 stack from inside it; the
    plugin's hook then fires while fgrpo_verl.integration.trainer is half-built: registering then would fail ("partially
    initialized module") and leave `fgrpo_sync` unknown to verl, so the module registers when it is complete."""
    import subprocess
    import sys

    script = (
        "import fgrpo_verl.integration.trainer\n"
        "from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY\n"
        "print(sorted(name for name in TRAINER_REGISTRY if name.startswith('fgrpo_')))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "['fgrpo_colocate_async', 'fgrpo_separate_async', 'fgrpo_sync']"
    assert "not registered" not in out.stderr, out.stderr[-3000:]


def test_trains_driver_leaves_the_trainer_stack_to_the_taskrunner_which_registers_strictly():
    """``train``'s driver registers what validation reads and never imports verl's v1 trainer stack (and the vLLM
    import it pulls in). Where that stack is imported with ``FGRPO_VERL_STRICT_REGISTRATION=1`` (what ``train``
    puts in the run's Ray environment), a trainer mode another plugin registered first fails the import, naming
    both, instead of leaving the other plugin's trainer to run behind a WARNING."""
    import subprocess
    import sys

    script = (
        "import os, sys\n"
        "os.environ['FGRPO_VERL_STRICT_REGISTRATION'] = '1'\n"
        "import wrapt\n"
        "class Foreign: pass\n"
        "def other_plugin(_module):\n"
        "    from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY\n"
        "    TRAINER_REGISTRY['fgrpo_sync'] = Foreign\n"
        "wrapt.register_post_import_hook(other_plugin, 'verl.trainer.ppo.v1')\n"
        "from fgrpo_verl.cli.train import prepare\n"
        "prepare(['algo=grpo', 'backend=cpu'])\n"
        "from verl.trainer.ppo.core_algos import get_adv_estimator_fn\n"
        "print('driver', get_adv_estimator_fn('fgrpo').__name__, 'verl.trainer.ppo.v1' in sys.modules,"
        " 'vllm' in sys.modules)\n"
        "try:\n"
        "    import verl.trainer.ppo.v1\n"
        "except ValueError as exc:\n"
        "    print('refused', exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    assert lines[-2] == "driver compute_fgrpo_outcome_advantage False False", out.stdout
    assert lines[-1].startswith("refused trainer mode name 'fgrpo_sync' is already registered to __main__.Foreign"), \
        out.stdout
