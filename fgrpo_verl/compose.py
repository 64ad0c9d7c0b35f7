"""Compose fgrpo-verl's Hydra config exactly as ``fgrpo-verl train`` would, and validate it with verl."""

from __future__ import annotations

from collections.abc import Sequence

from fgrpo_verl.paths import CONFIG_NAME, config_dir


def compose(overrides: Sequence[str] = (), config_name: str = CONFIG_NAME):
    """Return the composed ``DictConfig`` for ``overrides`` (Hydra command-line syntax)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(config_dir()), version_base=None):
        return hydra_compose(config_name=config_name, overrides=list(overrides))


def validate(config) -> None:
    """verl's own ``validate_config`` (the check ``main_ppo`` runs before starting Ray)."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    from fgrpo_verl.focal import FocalSettings

    if config.algorithm.adv_estimator == "fgrpo":
        FocalSettings.from_config(config.algorithm.get("fgrpo"))
    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
