"""``fgrpo-verl train [hydra overrides and flags...]``: verl's ``main_ppo`` on fgrpo-verl's config.

Order of work, all in the driver before Ray starts:

1. compose the config (without importing verl, see ``fgrpo_verl.config.compose``);
2. export the environment variables the selected groups declare in ``ray_kwargs.ray_init.runtime_env.env_vars``
   (Ray gives them to every actor; the driver needs them too, before ``import verl`` resolves verl's platform);
3. import verl (its plugins load with that environment) and register what the driver uses strictly (an unsupported
   verl or a broken estimator fails here); the trainer modes register in the TaskRunner, where verl imports its
   trainer stack, strictly too (``FGRPO_VERL_STRICT_REGISTRATION`` in the run's Ray environment,
   ``fgrpo_verl/integration/plugin.py``): the driver does not import that stack (~2.8 s);
4. validate (``fgrpo_verl.integration.validation``, the checks verl's own ``main_ppo`` runs for ``fgrpo`` too): verl
   version, the ``algorithm.fgrpo`` block, the GPU count against the batch sizes, verl's ``validate_config``; for a
   run (not Hydra's flags) its data files, W&B usable when ``trainer.logger`` has wandb, a GPU or the CPU backend;
5. run verl's ``main_ppo`` with the same overrides and flags; a local Ray cluster that starts slowly on a busy
   machine is started again (``fgrpo_verl/job/ray_start.py``).

Hydra's own flags (``--cfg job``, ``--info``, ``--resolve``, ...) go to Hydra as they are, after the overrides were
composed and validated (``--info``, which shows how a config is composed, also when it is not valid: composed
only); ``-m`` is refused: a sweep is ``fgrpo-verl launch``'s (one job per run).

Output: on a terminal (or with ``--quiet``) verl's and Ray's output goes to ``<trainer.default_local_dir>/train.log``
and the terminal shows one line per step and fgrpo-verl's warnings (``fgrpo_verl/cli/quiet.py``); piped, in a
Slurm job or with ``--verbose``, everything passes through as verl prints it.

W&B names: ``FGRPO_PROJECT_NAME`` / ``FGRPO_EXPERIMENT_NAME`` (exported by ``fgrpo-verl wandb-env``) become
``trainer.project_name`` / ``trainer.experiment_name`` unless the command line sets those
(``fgrpo_verl.job.tracking.check_env_run_name``).
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
import time
from pathlib import Path

from fgrpo_verl.cli import held_platform_notices

HELP = (
    "Run verl's PPO trainer (main_ppo) with fgrpo-verl's config; every verl Hydra override is accepted, and Hydra's "
    "--cfg job|hydra|all, --info [topic], --package, --resolve (inspect the config, no training)."
)


def epilog() -> str:
    """``train --help``'s list of config groups and options, read from the shipped ``hydra_configs/``."""
    from fgrpo_verl.config.paths import config_dir, config_groups

    groups = "\n".join(f"  {group}={'|'.join(options)}" for group, options in config_groups().items())
    return (
        "config groups (select with GROUP=OPTION; see docs/recipes.md):\n" + groups + "\n\n"
        f"verl's own command on this config: python -m verl.trainer.main_ppo --config-path {config_dir()} "
        "--config-name fgrpo_trainer ...\n\n"
        "examples:\n"
        "  fgrpo-verl train algo=grpo algorithm.fgrpo.gamma=1.0 data.train_files=... actor_rollout_ref.model.path=...\n"
        "  fgrpo-verl train algo=dapo backend=cpu --cfg job     # the composed config, validated; no training\n\n"
        "output: on a terminal, one line per step; verl's and Ray's output in <trainer.default_local_dir>/train.log.\n"
        "  --verbose: everything on the terminal (the default when piped or in a Slurm job); --quiet: the reverse.\n"
        "W&B: FGRPO_PROJECT_NAME / FGRPO_EXPERIMENT_NAME (`fgrpo-verl wandb-env`) name the run unless overridden."
    )

# Every later argument is ours verbatim (fgrpo_verl/cli/__init__.py): Hydra flags keep their values.
PASS_THROUGH = True

logger = logging.getLogger("fgrpo_verl")

# fgrpo-verl's own output flags (not Hydra's): where verl's and Ray's output goes (fgrpo_verl/cli/quiet.py)
OUTPUT_FLAGS = {"--quiet": True, "--verbose": False}
# Hydra's flags that show how a config is composed, also an invalid one: composed, not validated
COMPOSE_ONLY = ("--info", "-i")
RAY_ENV_KEY = "ray_kwargs.ray_init.runtime_env.env_vars"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "overrides",
        nargs=argparse.REMAINDER,
        help="Hydra overrides, e.g. algo=grpo algorithm.fgrpo.gamma=1.0; Hydra's --cfg job / --info also work",
    )


def split_args(args: list[str]) -> tuple[list[str], list[str], bool | None]:
    """``(hydra_flags, overrides, quiet?)``. ``--quiet`` / ``--verbose`` are fgrpo-verl's (quiet None when neither is
    given: quiet on a terminal); any other argument starting with ``-`` is Hydra's flag, and so is the argument after
    it when that is not an override (``--cfg job``, ``--info defaults``); Hydra itself checks the flags."""
    quiet, flags, overrides = {OUTPUT_FLAGS[a] for a in args if a in OUTPUT_FLAGS}, [], []
    if len(quiet) > 1:
        raise ValueError("--quiet and --verbose contradict each other: give one")
    for arg in (a for a in args if a not in OUTPUT_FLAGS):
        if arg in ("-m", "--multirun"):
            raise ValueError(
                "fgrpo-verl train runs one job; for a sweep (several gamma, seeds, ...) use `fgrpo-verl launch "
                "<recipe.yaml>` (docs/recipes.md), which submits one job per run"
            )
        if arg.split("=")[0] in ("-cn", "--config-name", "-cp", "--config-path", "-cd", "--config-dir"):
            raise ValueError(f"{arg}: fgrpo-verl train's config is fgrpo_trainer (select its groups with overrides); "
                             "for a config of your own run verl's `python -m verl.trainer.main_ppo`")
        takes_value = flags and flags[-1].startswith("-") and "=" not in arg and not arg.startswith(("~", "-"))
        (flags if arg.startswith("-") or takes_value else overrides).append(arg)
    return flags, overrides, (quiet.pop() if quiet else None)


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


def check_driver_platform(exported: dict[str, str]) -> None:
    """With an exported ``VERL_PLATFORM``, an error if the platform verl resolves in this process is another one.
    Without one, nothing is resolved here (verl's auto-detection decides later)."""
    from verl.plugin.platform import platform_manager
    from verl.plugin.platform.platform_manager import PlatformRegistry

    wanted = exported.get("VERL_PLATFORM", "").strip().lower()
    resolved_early = platform_manager._current_platform
    platform = platform_manager.get_platform() if wanted else None
    if wanted and type(platform) is not PlatformRegistry.get(wanted):
        raise RuntimeError(
            f"verl's platform in the driver is {type(platform).__name__} ({platform.device_name}), but the config "
            f"exports VERL_PLATFORM={wanted} (registered: {', '.join(PlatformRegistry.registered_names())})"
            + (": it was resolved before fgrpo-verl train exported the environment" if resolved_early else "")
        )


def warn_without_algo_preset(overrides: list[str], config) -> None:
    """WARNING when no ``algo=`` preset is selected and a key it would set is still at verl's default: the prompts
    per step (rollout.n=1 is said by the config check, with what it does to this run:
    fgrpo_verl/integration/validation.py)."""
    if not any(re.match(r"^[+~]*algo(=|$)", o) for o in overrides) and config.data.get("train_batch_size") == 1024:
        logger.warning(
            "fgrpo-verl train: no algo= preset selected, so verl's defaults apply: data.train_batch_size=1024 (verl's "
            "default prompts per step). Add algo=grpo (or dapo, cispo) for the paper's settings, or set it "
            "yourself."
        )


def with_env_run_names(overrides: list[str]) -> list[str]:
    """``overrides`` plus ``trainer.project_name`` / ``trainer.experiment_name`` from ``FGRPO_PROJECT_NAME`` /
    ``FGRPO_EXPERIMENT_NAME`` (``fgrpo-verl wandb-env``), for the keys the command line does not set."""
    from fgrpo_verl.job.tracking import env_run_names

    named = dict(zip(("trainer.project_name", "trainer.experiment_name"), env_run_names()))
    keys = {o.split("=", 1)[0].strip().lstrip("+~") for o in overrides}
    return [*overrides, *(f"{key}={value}" for key, value in named.items() if value is not None and key not in keys)]


def check_env_names(overrides: list[str], config) -> None:
    """A run named from ``FGRPO_EXPERIMENT_NAME`` must be the run that name describes (tracking.check_env_run_name)."""
    from fgrpo_verl.job.tracking import EXPERIMENT_ENV, check_env_run_name, env_run_names

    project, experiment = env_run_names()
    if experiment is not None and f"trainer.experiment_name={experiment}" in overrides:
        check_env_run_name(config, experiment, str(config.trainer.project_name) if project is not None else None)
        print(f"fgrpo-verl train: W&B run {config.trainer.project_name}/{experiment} (from {EXPERIMENT_ENV})",
              file=sys.stderr)


def prepare(overrides: list[str], inspect_only: bool = False):
    """Steps 1-4 of the module docstring but a run's own checks (``check_before_ray``); returns the composed,
    validated config. ``inspect_only``: compose and export only (Hydra's --info)."""
    from fgrpo_verl import verl_compat
    from fgrpo_verl.config.compose import compose
    from fgrpo_verl.integration.validation import validate

    verl_compat.require(verl_compat.TRAIN, "this command")
    config = compose(overrides)
    exported = export_ray_env_vars(config)
    import verl  # noqa: F401  (plugins load now, with the run's environment)

    from fgrpo_verl.integration.plugin import V1, register_all

    register_all(strict=True, leave_scheduled=(V1,))
    check_driver_platform(exported)
    if not inspect_only:
        warn_without_algo_preset(overrides, config)
        check_env_names(overrides, config)
        validate(config)
    return config


def strict_registration_override(config) -> list[str]:
    """The override that makes the run's Ray processes register fgrpo-verl strictly (see step 3 above); none when
    the config sets the variable itself."""
    from omegaconf import OmegaConf

    from fgrpo_verl.integration.plugin import STRICT_ENV

    if STRICT_ENV in (OmegaConf.select(config, RAY_ENV_KEY, default=None) or {}):
        return []
    return [f"++{RAY_ENV_KEY}.{STRICT_ENV}='1'"]


def _run_main_ppo(argv: list[str]) -> None:
    from verl.trainer import main_ppo

    old_argv = sys.argv
    sys.argv = argv
    try:
        main_ppo.main()
    finally:
        sys.argv = old_argv


def run(args: argparse.Namespace) -> int:
    from fgrpo_verl.config.paths import CONFIG_NAME, config_dir
    from fgrpo_verl.integration.validation import check_before_ray
    from fgrpo_verl.job import ray_start

    flags, overrides, quiet = split_args(list(args.overrides))
    overrides = with_env_run_names(overrides)
    with held_platform_notices():
        config = prepare(overrides, inspect_only=any(f in COMPOSE_ONLY for f in flags))
        if not flags:
            # not for Hydra's flags: they print a config, which may name another machine's files
            check_before_ray(config)
            overrides += strict_registration_override(config)
    # overrides before flags: `--info` takes an optional topic and would read an override after it as one
    argv = [sys.argv[0], "--config-path", str(config_dir()), "--config-name", CONFIG_NAME, *overrides, *flags]
    if flags:
        # verl's `import verl` adds a stderr handler to the root logger; Hydra's --info logs through its own
        # handler, so every line came twice (once as "INFO:<time>:...")
        logging.getLogger().handlers.clear()
        _run_main_ppo(argv)
        return 0
    if quiet is None:
        quiet = sys.stdout.isatty() and not getattr(args, "debug", False)
    with ray_start.retrying_init():
        if not quiet:
            _run_main_ppo(argv)
            return 0
        from fgrpo_verl.cli.quiet import last_error, quiet_terminal

        # verl's and Ray's output, next to the run's checkpoints
        path = (Path(str(config.trainer.default_local_dir)) / "train.log").resolve()
        total = config.trainer.get("total_training_steps")
        print(f"fgrpo-verl train: verl's and Ray's output -> {path} (--verbose shows it here)", flush=True)
        started = time.monotonic()
        try:
            with quiet_terminal(path, total_steps=total):
                try:
                    _run_main_ppo(argv)
                finally:
                    # Ray forwards its workers' last lines when it shuts down (at exit otherwise): into the log
                    import ray

                    ray.shutdown()
        except SystemExit as exc:
            if exc.code not in (0, None):
                error = last_error(path) or f"exit status {exc.code}"
                raise RuntimeError(f"training failed: {error}; full log: {path}") from None
        print(f"fgrpo-verl train: done in {time.monotonic() - started:.0f} s; full log: {path}", flush=True)
    return 0
