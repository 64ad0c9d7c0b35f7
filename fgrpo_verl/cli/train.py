"""``fgrpo-verl train [hydra overrides and flags...]``: verl's ``main_ppo`` on fgrpo-verl's config.

Order of work, all in the driver before Ray starts:

1. compose the config (without importing verl, see ``fgrpo_verl.config.compose``);
2. export the environment variables the selected groups declare in ``ray_kwargs.ray_init.runtime_env.env_vars``
   (Ray gives them to every actor; the driver needs them too, before ``import verl`` resolves verl's platform);
3. import verl (its plugins load with that environment) and register fgrpo-verl strictly (a broken install or an
   unsupported verl fails here, not as "Unknown trainer" in a worker);
4. validate: verl version, the ``algorithm.fgrpo`` block, verl's ``validate_config``;
5. run verl's ``main_ppo`` with the same overrides and flags.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys

HELP = (
    "Run verl's PPO trainer (main_ppo) with fgrpo-verl's config; every verl Hydra override is accepted, and Hydra's "
    "--cfg job|hydra|all, --info [topic], --package, --resolve (inspect the config, no training)."
)

# Every later argument is ours verbatim (fgrpo_verl/cli/__init__.py): Hydra flags keep their values.
PASS_THROUGH = True

logger = logging.getLogger("fgrpo_verl")

# Hydra flags that only inspect the config, and whether each takes a value (--info's is optional).
INSPECT_FLAGS = {"--cfg": True, "-c": True, "--info": None, "-i": None, "--package": True, "-p": True, "--resolve": False}
INFO_TOPICS = ("all", "config", "defaults", "defaults-tree", "plugins", "searchpath")
RAY_ENV_KEY = "ray_kwargs.ray_init.runtime_env.env_vars"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "overrides",
        nargs=argparse.REMAINDER,
        help="Hydra overrides, e.g. algo=grpo algorithm.fgrpo.gamma=1.0; Hydra's --cfg job / --info also work",
    )


def split_hydra_args(args: list[str]) -> tuple[list[str], list[str]]:
    """``(hydra_flags, overrides)``; refuses what ``train`` cannot do, with what to use instead."""
    flags, overrides = [], []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("-m", "--multirun"):
            raise SystemExit(
                "fgrpo-verl train runs one job; for a sweep (several gamma, seeds, ...) use `fgrpo-verl launch "
                "<recipe.yaml>` (docs/recipes.md), which submits one job per run"
            )
        if arg.startswith("-") and arg not in INSPECT_FLAGS:
            raise SystemExit(
                f"fgrpo-verl train: Hydra flag {arg!r} is not supported here; supported: "
                f"{', '.join(sorted(INSPECT_FLAGS))} (the config is always fgrpo_trainer: select groups with overrides)"
            )
        if arg.startswith("-"):
            takes = INSPECT_FLAGS[arg]
            flags.append(arg)
            nxt = args[i + 1] if i + 1 < len(args) else None
            if takes is True:
                if nxt is None:
                    raise SystemExit(f"fgrpo-verl train: Hydra flag {arg} needs a value")
                flags.append(nxt)
                i += 1
            elif takes is None and nxt in INFO_TOPICS:
                flags.append(nxt)
                i += 1
        else:
            overrides.append(arg)
        i += 1
    return flags, overrides


def export_ray_env_vars(config) -> dict[str, str]:
    """Export the config's Ray ``env_vars`` into this (driver) process; returns what was exported.

    Generic on purpose: whatever a backend group declares there (``VERL_PLATFORM``, ``VERL_USE_EXTERNAL_MODULES``,
    ...) holds in the driver as in every Ray process. ``VERL_USE_EXTERNAL_MODULES`` is read by ``import verl``; if
    verl was imported already (``train`` called in-process), its modules are imported here, loudly, as verl would.
    """
    from omegaconf import OmegaConf

    env_vars = OmegaConf.select(config, RAY_ENV_KEY, default=None) or {}
    for key, value in env_vars.items():
        if not isinstance(value, str):  # Ray's ray.init refuses it too; say so before anything is exported
            raise ValueError(
                f"{RAY_ENV_KEY}.{key}={value!r} is invalid: Ray takes environment variables as strings only; "
                f"quote the value ({RAY_ENV_KEY}.{key}='{value}') or remove the key"
            )
    exported = {str(k): v for k, v in env_vars.items()}
    os.environ.update(exported)
    modules = exported.get("VERL_USE_EXTERNAL_MODULES", "")
    if modules and "verl" in sys.modules:
        from verl.utils.import_utils import import_external_libs

        import_external_libs([m for m in modules.split(",") if m])
    return exported


def check_driver_platform(exported: dict[str, str]) -> str | None:
    """With an exported ``VERL_PLATFORM``: the device of the platform verl resolves in this process, or an error
    if it is another platform. Without one, nothing is resolved here (verl's auto-detection decides later)."""
    from verl.plugin.platform import platform_manager
    from verl.plugin.platform.platform_manager import PlatformRegistry

    wanted = exported.get("VERL_PLATFORM", "").strip().lower()
    if not wanted:
        return None
    resolved_early = platform_manager._current_platform
    platform = platform_manager.get_platform()
    if type(platform) is not PlatformRegistry.get(wanted):
        raise RuntimeError(
            f"verl's platform in the driver is {type(platform).__name__} ({platform.device_name}), but the config "
            f"exports VERL_PLATFORM={wanted} (registered: {', '.join(PlatformRegistry.registered_names())})"
            + (": it was resolved before fgrpo-verl train exported the environment" if resolved_early else "")
        )
    return platform.device_name


# Keys an algo= preset sets whose verl default makes a poor run: (key, verl's default, why).
PRESET_KEYS = (
    ("actor_rollout_ref.rollout.n", 1, "one rollout per prompt: every group advantage is 0"),
    ("data.train_batch_size", 1024, "verl's default prompts per step"),
)


def warn_without_algo_preset(overrides: list[str], config) -> None:
    """WARNING when no ``algo=`` preset is selected and a key it would set is still at verl's default."""
    from omegaconf import OmegaConf

    if any(re.match(r"^[+~]*algo(=|$)", o) for o in overrides):
        return
    left = [f"{key}={default} ({why})" for key, default, why in PRESET_KEYS
            if OmegaConf.select(config, key, default=None) == default]
    if left:
        logger.warning(
            "fgrpo-verl train: no algo= preset selected, so verl's defaults apply: %s. Add algo=grpo (or dapo, "
            "cispo) for the paper's settings, or set these keys yourself.", "; ".join(left)
        )


def prepare(overrides: list[str], inspect_only: bool = False):
    """Steps 1-4 of the module docstring; returns the composed, validated config."""
    from fgrpo_verl.config.compose import compose, validate

    config = compose(overrides)
    exported = export_ray_env_vars(config)
    import verl  # noqa: F401  (plugins load now, with the run's environment)

    from fgrpo_verl.integration.plugin import register_all

    register_all(strict=True)
    check_driver_platform(exported)
    if not inspect_only:
        warn_without_algo_preset(overrides, config)
        validate(config)
    return config


def run(args: argparse.Namespace) -> int:
    from fgrpo_verl.config.paths import CONFIG_NAME, config_dir

    flags, overrides = split_hydra_args(list(args.overrides))
    prepare(overrides, inspect_only=bool(flags))
    from verl.trainer import main_ppo

    argv = [sys.argv[0], "--config-path", str(config_dir()), "--config-name", CONFIG_NAME, *flags, *overrides]
    old_argv = sys.argv
    sys.argv = argv
    try:
        main_ppo.main()
    finally:
        sys.argv = old_argv
    return 0
