"""Where the shipped Hydra configs are: inside the wheel, or at the root of a source checkout."""

from __future__ import annotations

from pathlib import Path

import fgrpo_verl

# the package directory (fgrpo_verl/), wherever this module sits inside it
PACKAGE_DIR = Path(fgrpo_verl.__file__).resolve().parent

CONFIG_NAME = "fgrpo_trainer"


def _shipped_dir(name: str, marker: str) -> Path:
    """``name/`` shipped inside the wheel as ``fgrpo_verl/<name>``, or at the root of a source checkout (an editable
    install, or a checkout on ``PYTHONPATH``)."""
    package = PACKAGE_DIR
    for candidate in (package / name, package.parent / name):
        if (candidate / marker).is_file():
            return candidate
    raise FileNotFoundError(f"{marker} not found in {package / name} (wheel) or {package.parent / name} (checkout): "
                            "reinstall fgrpo-verl")


def config_dir() -> Path:
    """Absolute path of the directory that holds ``fgrpo_trainer.yaml`` (``hydra_configs/``)."""
    return _shipped_dir("hydra_configs", f"{CONFIG_NAME}.yaml")


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
