"""Execution backends that let verl run where it otherwise cannot (see ``fgrpo_verl/backends/cpu``).

This package is deliberately tiny: ``fgrpo_verl.plugin`` imports it in every process that imports verl, and
only imports a backend's subpackage when that backend is selected, so a GPU run never loads CPU code.
"""

from __future__ import annotations

import os

# Environment variable that selects a backend in every process of a run. ``hydra_configs/backend/cpu.yaml``
# sets it in ``ray_kwargs.ray_init.runtime_env.env_vars`` (every Ray actor inherits it) and ``fgrpo-verl
# train`` exports the same variables into the driver.
BACKEND_ENV = "FGRPO_VERL_BACKEND"

# backend name -> module exposing ``register()``
BACKENDS = {"cpu": "fgrpo_verl.backends.cpu"}


def selected_backend() -> str | None:
    """The backend named by ``$FGRPO_VERL_BACKEND`` (None when unset or empty); unknown names raise."""
    name = os.environ.get(BACKEND_ENV, "").strip()
    if not name:
        return None
    if name not in BACKENDS:
        raise ValueError(f"{BACKEND_ENV}={name!r} is invalid: valid backends are {', '.join(sorted(BACKENDS))} (or unset)")
    return name


def register_selected() -> str | None:
    """Import and register the selected backend, if any; return its name."""
    import importlib

    name = selected_backend()
    if name is not None:
        importlib.import_module(BACKENDS[name]).register()
    return name
