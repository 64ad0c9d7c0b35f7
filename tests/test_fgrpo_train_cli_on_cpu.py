"""`fgrpo-verl train` validates everything before Ray, takes Hydra's flags, selects the backend's platform in the
driver; plain `verl.trainer.main_ppo` with `algorithm.adv_estimator=fgrpo` works with gamma only or fails early."""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import make_batch
from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

import verl  # noqa: F401  (loads the plugin)
from verl import DataProto
from verl.trainer.ppo.ray_trainer import compute_advantage

from fgrpo_verl.cli import train
from fgrpo_verl.config.compose import verl_config_dir
from fgrpo_verl.focal import FocalSettings, compute_focal_advantage


def _env():
    return {k: v for k, v in os.environ.items() if not k.startswith(("VERL_", "FGRPO_VERL"))}


@pytest.fixture
def no_ray(monkeypatch):
    import ray

    def refuse(*args, **kwargs):
        raise AssertionError("ray.init was called: validation must fail before Ray starts")

    monkeypatch.setattr(ray, "init", refuse)
    yield
    assert not ray.is_initialized()


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["algo=grpo", "algorithm.fgrpo.gamma=-1"], r"algorithm.fgrpo.gamma=-1.0 is invalid"),
        (["algo=grpo", "algorithm.fgrpo.base=ppo"], r"algorithm.fgrpo.base='ppo' is invalid"),
        # verl's own validate_config runs too: 256 prompts x 8 rollouts are not divisible into 3 GPUs
        (["algo=grpo", "trainer.n_gpus_per_node=3"], r"must be divisible by minimal possible batch size"),
    ],
)
def test_bad_config_fails_before_any_ray_process(no_ray, overrides, message):
    with pytest.raises((ValueError, AssertionError), match=message):
        train.run(argparse.Namespace(overrides=overrides))


def test_train_without_an_algo_preset_warns(caplog):
    from fgrpo_verl.config.compose import compose

    bare = ["algorithm.fgrpo.gamma=1"]
    with caplog.at_level(logging.WARNING, logger="fgrpo_verl"):
        train.warn_without_algo_preset(bare, compose(bare))
    assert "no algo= preset selected" in caplog.text and "data.train_batch_size=1024" in caplog.text
    for overrides in (["algo=dapo", "algorithm.fgrpo.gamma=1"], ["data.train_batch_size=64"]):  # set by hand (the maze)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="fgrpo_verl"):
            train.warn_without_algo_preset(overrides, compose(overrides))
        assert caplog.text == ""


def test_train_backend_cpu_cfg_job_says_cpu_and_the_driver_platform_is_cpu():
    # The CLI in a fresh process, as a user runs it; then the platform verl resolved in that driver process.
    code = ("import sys\nfrom fgrpo_verl.cli import main\nmain(['train', 'backend=cpu', '--cfg', 'job'])\n"
            "from verl.utils.device import get_device_name\nprint('DRIVER_PLATFORM', get_device_name())\n")
    out = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert lines[-1] == "DRIVER_PLATFORM cpu"
    printed = OmegaConf.create("\n".join(lines[:-1]))
    assert printed.trainer.device == "cpu"
    assert "Falling back to 'nvidia'" not in out.stderr


def _plain_verl_config(overrides):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(verl_config_dir()), version_base=None):
        return hydra_compose(config_name="ppo_trainer", overrides=overrides)


def test_plain_verl_with_only_gamma_uses_the_documented_defaults():
    cfg = _plain_verl_config(["algorithm.adv_estimator=fgrpo", "+algorithm.fgrpo.gamma=1"])
    from verl.utils.config import validate_config

    from fgrpo_verl.integration.validation import check_fgrpo

    check_fgrpo(cfg)  # what the plugin adds to verl's validate_config
    assert getattr(validate_config, "__fgrpo_verl_id__", None) == "verl.utils.config.validate_config"
    rewards, mask, index = make_batch([4, 3, 5], seed=4)
    data = DataProto.from_dict(tensors={"token_level_rewards": rewards, "response_mask": mask},
                               non_tensors={"uid": np.asarray(index, dtype=object)})
    out = compute_advantage(data, adv_estimator="fgrpo", config=cfg.algorithm)
    expected = compute_focal_advantage(
        rewards, mask, index, FocalSettings(gamma=1.0, success_threshold=0.5, smoothing_alpha=0.0, base="grpo")
    )
    assert torch.equal(out.batch["advantages"], expected.advantages)


def test_plain_verl_main_ppo_without_gamma_fails_before_ray_saying_what_to_add():
    out = subprocess.run([sys.executable, "-m", "verl.trainer.main_ppo", "algorithm.adv_estimator=fgrpo"],
                         env=_env(), capture_output=True, text=True, timeout=300)
    assert out.returncode != 0
    assert "algorithm.fgrpo is missing: add +algorithm.fgrpo.gamma=0.5" in out.stderr + out.stdout
    assert "ray init kwargs" not in out.stdout  # verl prints this line right before ray.init


def test_a_non_string_ray_env_var_is_refused_before_it_is_exported(monkeypatch):
    # Ray takes str values only (ray.init raises TypeError on 1 or null); the driver must not export str(1) / "None"
    # first and leave the process half-configured: name the key and say how to write it.
    monkeypatch.delenv("FGRPO_TEST_THREADS", raising=False)
    monkeypatch.delenv("FGRPO_TEST_NULL", raising=False)
    for value, key in ((4, "FGRPO_TEST_THREADS"), (None, "FGRPO_TEST_NULL")):
        config = OmegaConf.create({"ray_kwargs": {"ray_init": {"runtime_env": {"env_vars": {key: value}}}}})
        with pytest.raises(ValueError, match=rf"ray_kwargs.ray_init.runtime_env.env_vars.{key}={value!r} is invalid"):
            train.export_ray_env_vars(config)
        assert key not in os.environ
    ok = OmegaConf.create({"ray_kwargs": {"ray_init": {"runtime_env": {"env_vars": {"FGRPO_TEST_THREADS": "4"}}}}})
    assert train.export_ray_env_vars(ok) == {"FGRPO_TEST_THREADS": "4"} and os.environ["FGRPO_TEST_THREADS"] == "4"


@pytest.mark.parametrize("backend", [[], ["backend=cpu"]])
def test_the_run_gets_strict_registration_as_a_string_unless_the_config_sets_it(backend):
    """The override ``train`` adds to verl's command line composes to the string Ray requires, with or without a
    backend group that declares other variables; a config that sets the variable keeps its value."""
    from fgrpo_verl.config.compose import compose
    from fgrpo_verl.integration.plugin import STRICT_ENV

    config = compose(["algo=grpo", *backend])
    added = train.strict_registration_override(config)
    env_vars = OmegaConf.select(compose(["algo=grpo", *backend, *added]), train.RAY_ENV_KEY)
    assert env_vars[STRICT_ENV] == "1" and isinstance(env_vars[STRICT_ENV], str)
    if backend:  # the backend's own variables are kept beside it
        assert env_vars["VERL_PLATFORM"] == "cpu"
    own = compose(["algo=grpo", *backend, f"++{train.RAY_ENV_KEY}.{STRICT_ENV}='0'"])
    assert train.strict_registration_override(own) == []
