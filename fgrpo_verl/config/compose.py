"""Compose fgrpo-verl's Hydra config exactly as ``fgrpo-verl train`` would, and validate it with verl."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path

from fgrpo_verl.config.paths import CONFIG_NAME, config_dir


def verl_config_dir() -> Path:
    """verl's own config directory, found without importing verl (``find_spec`` of a top-level package does not
    execute it)."""
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.origin:
        raise ModuleNotFoundError("verl is not installed: pip install 'verl[verl-core]==0.9.1'")
    return Path(spec.origin).parent / "trainer" / "config"


def compose(overrides: Sequence[str] = (), config_name: str = CONFIG_NAME):
    """Return the composed ``DictConfig`` for ``overrides`` (Hydra command-line syntax).

    Composing does not import verl: ``fgrpo_trainer.yaml`` searches ``pkg://verl.trainer.config``, which would
    import verl (and load every verl plugin) before ``fgrpo-verl train`` has exported the run's environment
    (``VERL_PLATFORM``, ...); the same directory is given to Hydra as a file path instead.
    """
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    searchpath = f"hydra.searchpath=[file://{verl_config_dir()}]"
    with initialize_config_dir(config_dir=str(config_dir()), version_base=None):
        return hydra_compose(config_name=config_name, overrides=[searchpath, *overrides])


def validate(config) -> None:
    """Everything ``fgrpo-verl train`` checks before Ray starts: the verl version, the ``algorithm.fgrpo`` block
    and verl's own ``validate_config`` (the check ``main_ppo`` runs)."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    from fgrpo_verl.integration.registration import require_supported_verl
    from fgrpo_verl.integration.validation import check_fgrpo

    require_supported_verl()
    check_fgrpo(config)
    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
