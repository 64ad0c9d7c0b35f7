"""Which verl release is installed and what fgrpo-verl offers on it: every difference between the supported releases
lives here, so that the next release is one table row and the checks that read it.

The core reads only what is the same in verl 0.8.0, 0.9.0 and 0.9.1 (``core_algos``' two registries and their
``register_*`` decorators, ``get_policy_loss_fn``, ``ray_trainer.compute_advantage``, ``PolicyLossConfig``,
``utils.config.validate_config``): the ``fgrpo`` estimator, the ``fgrpo`` loss and the config check. What differs:

- ``import verl`` loads ``verl.plugins`` entry points from 0.9.0 on; 0.8.0 only imports the modules listed in
  ``VERL_USE_EXTERNAL_MODULES``, so there the variable names the module the entry point names.
- 0.8.0 runs ``validate_config`` inside its TaskRunner (after Ray started); 0.9.x in the driver, before Ray.
- verl's v1 trainer (its registry and the private methods the trainer modes hook), the platform registry and the
  rollout registries the CPU backend extends exist from 0.9.0, but fgrpo-verl extends them as 0.9.1 has them: the
  ``fgrpo/*`` metrics, the trainer modes, the CPU backend, ``train`` and ``launch`` are 0.9.1's only.

This module imports no verl (it reads the installed version from the package metadata), so ``launch`` and the
backends can refuse another release before anything heavy is imported.
"""

from __future__ import annotations

# the release whose internals the trainer modes, the CPU backend, train and launch extend (and setup.py's gpu extra)
FULL = "0.9.1"
# the releases the suite tests (``make test``, tests/test_verl_releases_on_cpu.py); setup.py accepts 0.8.0 <= verl < 0.10
RELEASES = ("0.8.0", "0.9.0", FULL)
PLUGIN_MODULE = "fgrpo_verl.integration.plugin"

# feature -> what it is on each release in RELEASES (None: not on that release)
FEATURES = {
    "registration": (f"VERL_USE_EXTERNAL_MODULES={PLUGIN_MODULE}", "entry point (automatic)", "entry point (automatic)"),
    "`fgrpo` advantage estimator": ("yes", "yes", "yes"),
    "`fgrpo` policy loss (actor/fgrpo/*)": ("yes", "yes", "yes"),
    "config check in verl's validate_config": ("yes, in the TaskRunner (after Ray starts)", "yes, before Ray", "yes, before Ray"),
    "fgrpo/* step metrics, trainer modes": (None, None, "yes"),
    "DS-GRPO control (`ds_grpo`, Table 3)": (None, None, "yes"),
    "CPU backend (backend=cpu, cpu_vllm)": (None, None, "yes"),
    "fgrpo-verl train, launch, report": (None, None, "yes"),
}
TRAINER_MODES, CPU_BACKEND, TRAIN = "fgrpo/* step metrics, trainer modes", "CPU backend (backend=cpu, cpu_vllm)", "fgrpo-verl train, launch, report"
DS_GRPO = "DS-GRPO control (`ds_grpo`, Table 3)"


def installed() -> str:
    """The installed verl's version ("not installed" without one), from its metadata: no import of verl."""
    from importlib import metadata

    try:
        return metadata.version("verl")
    except metadata.PackageNotFoundError:
        return "not installed"


def supports(feature: str | None, version: str | None = None) -> bool:
    """Whether ``feature`` (a key of :data:`FEATURES`; None: the core) is offered on ``version`` (the installed verl
    by default). A release outside :data:`RELEASES` gets what every tested release has: the core."""
    if feature is None:
        return True
    version = installed() if version is None else version
    values = FEATURES[feature]
    return values[RELEASES.index(version)] is not None if version in RELEASES else all(v is not None for v in values)


def require(feature: str, what: str) -> None:
    """One line naming the release ``what`` needs when the installed verl lacks ``feature``."""
    if not supports(feature):
        raise RuntimeError(
            f"{what} needs verl=={FULL}; this environment has verl {installed()}, on which fgrpo-verl offers "
            f"{', '.join(offered())} (README, \"verl releases\"): pip install 'fgrpo-verl[gpu]' brings verl {FULL}"
        )


def offered(version: str | None = None) -> list[str]:
    version = installed() if version is None else version
    return [feature for feature in FEATURES if feature != "registration" and supports(feature, version)]


def summary(version: str | None = None) -> str:
    """``doctor``'s line: what the installed release gets, and how fgrpo-verl registers on it."""
    version = installed() if version is None else version
    missing = [feature for feature in FEATURES if not supports(feature, version)]
    how = FEATURES["registration"][RELEASES.index(version) if version in RELEASES else -1]
    tested = "" if version in RELEASES else f" (untested release: tested are {', '.join(RELEASES)})"
    return (f"verl {version}{tested}: {'; '.join(offered(version))}; registration: {how}"
            + (f"; not on this release: {'; '.join(missing)} (need verl {FULL})" if missing else ""))


def markdown_table() -> str:
    """The README's table of features per release (a test holds the README to it)."""
    lines = ["| | " + " | ".join(f"verl {r}" for r in RELEASES) + " |", "|---" * (len(RELEASES) + 1) + "|"]
    for feature, values in FEATURES.items():
        lines.append(f"| {feature} | " + " | ".join(v or "no" for v in values) + " |")
    return "\n".join(lines)
