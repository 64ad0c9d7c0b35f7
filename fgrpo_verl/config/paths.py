"""Where the shipped Hydra configs are: inside the wheel, or at the root of a source checkout."""

from __future__ import annotations

from pathlib import Path

import fgrpo_verl

# the package directory (fgrpo_verl/), wherever this module sits inside it
PACKAGE_DIR = Path(fgrpo_verl.__file__).resolve().parent

CONFIG_NAME = "fgrpo_trainer"


def config_dir() -> Path:
    """Absolute path of the directory that holds ``fgrpo_trainer.yaml``.

    A wheel ships ``hydra_configs/`` as ``fgrpo_verl/hydra_configs``; an editable install or a checkout on
    ``PYTHONPATH`` reads the repository's top-level ``hydra_configs/``.
    """
    package = PACKAGE_DIR
    for candidate in (package / "hydra_configs", package.parent / "hydra_configs"):
        if (candidate / f"{CONFIG_NAME}.yaml").is_file():
            return candidate
    raise FileNotFoundError(
        f"{CONFIG_NAME}.yaml not found in {package / 'hydra_configs'} (wheel) or {package.parent / 'hydra_configs'} "
        "(checkout): reinstall fgrpo-verl"
    )


def _shipped_dir(name: str, marker: str) -> Path:
    """``name/`` shipped inside the wheel as ``fgrpo_verl/<name>``, or at the root of a source checkout."""
    package = PACKAGE_DIR
    for candidate in (package / name, package.parent / name):
        if (candidate / marker).is_file():
            return candidate
    raise FileNotFoundError(f"{marker} not found in {package / name} (wheel) or {package.parent / name} (checkout)")


def slurm_dir() -> Path:
    """Directory of the Slurm job scripts and templates (``slurm/``): sourced by jobs, rendered by the launcher."""
    return _shipped_dir("slurm", "ray_cluster.sh")


def recipes_dir() -> Path:
    """Directory of the shipped sweep recipes (``recipes/*.yaml``)."""
    return _shipped_dir("recipes", "paper_main.yaml")


def config_groups() -> dict[str, list[str]]:
    """fgrpo-verl's own config groups and their options (``hydra_configs/<group>/<option>.yaml``)."""
    root = config_dir()
    return {
        d.name: sorted(p.stem for p in d.glob("*.yaml"))
        for d in sorted(root.iterdir())
        if d.is_dir() and not d.name.startswith(("_", "."))
    }
