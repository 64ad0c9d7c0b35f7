"""``fgrpo-verl train [hydra overrides...]``: verl's ``main_ppo`` on fgrpo-verl's config."""

from __future__ import annotations

import argparse
import sys

HELP = "Run verl's PPO trainer (main_ppo) with fgrpo-verl's config; every verl Hydra override is accepted."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "overrides",
        nargs=argparse.REMAINDER,
        help="Hydra overrides, e.g. algorithm.fgrpo.gamma=1.0 actor_rollout_ref.rollout.n=8",
    )


def _export_ray_env_vars(overrides: list[str]) -> None:
    """Export the config's Ray ``env_vars`` into this (driver) process too, before verl picks its platform.

    Ray actors get them from ``ray_kwargs.ray_init.runtime_env.env_vars``; the driver would otherwise resolve
    verl's platform without them (e.g. ``backend=cpu`` sets ``VERL_PLATFORM=cpu`` and ``FGRPO_VERL_BACKEND``).
    """
    import os

    from omegaconf import OmegaConf

    from fgrpo_verl.compose import compose

    env_vars = OmegaConf.select(compose(overrides), "ray_kwargs.ray_init.runtime_env.env_vars", default=None) or {}
    os.environ.update({str(k): str(v) for k, v in env_vars.items()})


def run(args: argparse.Namespace) -> int:
    from fgrpo_verl.paths import CONFIG_NAME, config_dir
    from fgrpo_verl.plugin import register_all

    _export_ray_env_vars(args.overrides)
    # verl swallows plugin import errors; registering here makes a broken install fail before Ray starts.
    register_all()
    from verl.trainer import main_ppo

    argv = [sys.argv[0], "--config-path", str(config_dir()), "--config-name", CONFIG_NAME, *args.overrides]
    old_argv = sys.argv
    sys.argv = argv
    try:
        main_ppo.main()
    finally:
        sys.argv = old_argv
    return 0
