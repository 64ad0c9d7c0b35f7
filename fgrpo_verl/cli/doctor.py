"""``fgrpo-verl doctor``: is this environment able to train with fgrpo?

Exit status: 0 all checks passed, 2 the overrides given are not a valid config (the input), 1 anything else
failed (the environment). verl's import-time notices (engines that are not installed, the accelerator fallback)
are not repeated: the ``platform`` line says what verl resolved and what it means here.
"""

from __future__ import annotations

import argparse
import os
import logging
import sys
import traceback
from collections.abc import Callable

HELP = ("Check versions, the plugin registration (driver and a Ray actor) and that the config composes and validates; "
        "with --recipe, the launcher's preflight of every run.")

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray-actor check (it starts a local Ray)")
    parser.add_argument(
        "--recipe", default=None,
        help="also run the launcher's preflight on every run of this recipe (file or shipped name), with the "
        "overrides below applied to each: what verl's worker start-up would refuse, and whether it fits",
    )
    parser.add_argument("--only", nargs="+", action="extend", metavar="NAME", default=None,
                        help="with --recipe: only these runs")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides to compose and validate with")


def _versions() -> str:
    import ray
    import torch
    import verl

    py = sys.version_info
    if not ((3, 10) <= py[:2] < (3, 13)):
        raise RuntimeError(f"python {py.major}.{py.minor} is unsupported: need >=3.10,<3.13")
    return f"python {py.major}.{py.minor}.{py.micro}, verl {verl.__version__}, torch {torch.__version__}, ray {ray.__version__}"


def _registry_driver() -> str:
    from fgrpo_verl.integration.plugin import register_all

    register_all()
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    fn = get_adv_estimator_fn("fgrpo")
    return f"fgrpo -> {fn.__module__}.{fn.__qualname__}"


def registry_in_ray_actor() -> str:
    """Start a local Ray (or use the running one) and ask a fresh actor process for the estimator."""
    import ray

    from fgrpo_verl.job import ray_start

    started = not ray.is_initialized()
    if started:
        ray_start.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:

        @ray.remote(num_cpus=0)
        class _Probe:
            def lookup(self) -> str:
                # A bare `import verl` in a fresh worker must load the plugin through its entry point.
                import verl  # noqa: F401
                from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY

                fn = ADV_ESTIMATOR_REGISTRY.get("fgrpo")
                return f"{fn.__module__}.{fn.__qualname__}" if fn else ""

        probe = _Probe.remote()
        found = ray.get(probe.lookup.remote(), timeout=300)
        ray.kill(probe)
    finally:
        if started:
            ray.shutdown()
    if not found:
        raise RuntimeError(
            "fgrpo is not in verl's registry inside a Ray actor: the `verl.plugins` entry point did not load there; "
            "install fgrpo-verl in the same environment on every node"
        )
    return f"fgrpo -> {found} (Ray actor)"


def _platform() -> str:
    """The platform verl resolves in this process (what the driver of a run without ``backend=`` would use)."""
    from verl.plugin.platform import platform_manager

    platform = platform_manager.get_platform()
    name = type(platform).__name__
    if platform.is_available():
        return f"{name} ({platform.device_name})"
    return (f"{name} ({platform.device_name}), no accelerator here: train on this machine with backend=cpu "
            "(docs/cpu_backend.md)")


def _config_checks(overrides: list[str]) -> list[tuple[str, Callable[[], str]]]:
    """The config composed and validated as ``train`` would, then whether W&B answers from here when it logs
    online (fgrpo_verl/job/wandb_online.py, which jobs run on their node)."""
    composed = []

    def config() -> str:
        from fgrpo_verl.config.compose import compose
        from fgrpo_verl.integration.validation import validate

        composed.append(compose(overrides))
        validate(composed[0])
        cfg, f = composed[0], composed[0].algorithm.fgrpo
        return (
            f"adv_estimator={cfg.algorithm.adv_estimator}, gamma={f.gamma}, success_threshold={f.success_threshold}, "
            f"smoothing_alpha={f.smoothing_alpha}, base={f.base}"
        )

    def wandb_host() -> str:
        from fgrpo_verl.job.wandb_online import check_wandb

        if not composed:
            return "not checked: the config does not compose (above)"
        try:
            return check_wandb(composed[0].trainer.get("logger"))
        except RuntimeError as exc:
            if os.environ.get("WANDB_MODE"):
                raise
            # online only by W&B's default here: the jobs may well set WANDB_MODE themselves (a recipe's env:)
            raise UserWarning(f"{exc} (WANDB_MODE is unset here: online by default)") from exc

    return [("config composes + verl validate_config", config), ("W&B host", wandb_host)]


def _preflight(recipe: str, only: list[str] | None, overrides: list[str]) -> tuple[str, Callable[[], str]]:
    """The launcher's plan of ``recipe`` as ``launch --dry-run`` makes it (compose, validate_config, preflight)."""
    from pathlib import Path

    from fgrpo_verl.launch.recipe import load_recipe

    try:
        loaded = load_recipe(recipe)
        count = len(loaded.select(only))
        name = f"preflight (recipe {loaded.name}, {count} run{'s' if count != 1 else ''})"
    except ValueError:
        name = f"preflight (recipe {recipe})"

    def check() -> str:
        from fgrpo_verl.launch import plan_jobs

        workdir = Path.cwd()
        _, jobs = plan_jobs(recipe, only, overrides, workdir / "slurm_logs", workdir)
        notes = {job.preflight for job in jobs}
        return next(iter(notes)) if len(notes) == 1 else f"{len(jobs)} runs pass"

    return name, check


def run(args: argparse.Namespace) -> int:
    from fgrpo_verl import verl_compat
    from fgrpo_verl.cli import held_platform_notices
    from fgrpo_verl.cli.launch import split_only

    # `--only a b x=1`: run names a, b and the override x=1, as for `launch`
    only, overrides = split_only(args.only, args.overrides)
    checks: list[tuple[str, Callable[[], str]]] = [
        ("versions", _versions),
        ("registry (driver)", _registry_driver),
        ("platform", _platform),
        *_config_checks(overrides),
    ]
    if args.recipe is not None:
        checks.append(_preflight(args.recipe, only, overrides))
    if not args.no_ray:
        checks.append(("registry (Ray actor)", registry_in_ray_actor))
    failures, input_failures = 0, 0
    print("fgrpo-verl doctor")
    print(f"  {verl_compat.summary()}")
    # the checks below (train's config, the trainer modes, Ray) are the full release's: one line, nothing started
    verl_compat.require(verl_compat.TRAIN, "this command")
    # verl's accelerator auto-detection WARNINGs while the checks import verl: the `platform` check says the outcome
    with held_platform_notices(keep=logging.ERROR):
        for name, check in checks:
            try:
                detail = check()
                print(f"  [ok]   {name}: {detail}")
            except UserWarning as exc:  # worth knowing, not a failure
                print(f"  [warn] {name}: {exc}")
            except Exception as exc:  # report every failing check, not only the first
                failures += 1
                input_failures += name.startswith("config") and isinstance(exc, ValueError)
                print(f"  [FAIL] {name}: {type(exc).__name__}: {exc}")
                if args.debug:
                    traceback.print_exc()
    print("all checks passed" if not failures else f"{failures} check(s) failed")
    if not failures:
        return 0
    return 2 if failures == input_failures else 1
