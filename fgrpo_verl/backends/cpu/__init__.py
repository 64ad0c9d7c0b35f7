"""Backend ``cpu``: run verl 0.9.1's real PPO trainer (Ray, TaskRunner, FSDP2 actor, the ``hf`` rollout, reward
loop, checkpoints) without an accelerator.

Selected by ``fgrpo-verl train backend=cpu`` (``hydra_configs/backend/cpu.yaml``), which sets
``VERL_USE_EXTERNAL_MODULES=fgrpo_verl.backends.cpu`` and ``VERL_PLATFORM=cpu`` in every process. verl imports
this package during ``import verl``; importing it registers the backend (idempotent). Nothing imports it
otherwise.

Every touch of verl internals for the CPU:

=====================================================  ===============================================================
verl internal                                          why
=====================================================  ===============================================================
``PlatformRegistry.register("cpu")`` (platform.py)      verl has no CPU platform; ``VERL_PLATFORM=cpu`` selects ours
``verl.utils.distributed.initialize_global_process_     verl builds ``"cpu:gloo,cpu:gloo"`` on a cpu device, which
group_ray`` wrapped (verl_patches.py)                   torch rejects; on the cpu platform we pass ``"gloo"``
``verl.utils.fsdp_utils.apply_fsdp2`` wrapped           verl hard-codes a *pinned* CPU offload for forward-only FSDP2
(verl_patches.py)                                       models (the KL reference); pinning needs an accelerator
the ``hf`` rollout (``fgrpo_verl.backends.hf_rollout``)  verl ships vllm/sglang/trtllm rollouts only
``VERL_ENGINE_DEVICE=cuda`` (config env var)            verl's FSDP engines register for cuda/npu only; the engine code
                                                        itself is device-agnostic and follows the platform
=====================================================  ===============================================================
"""

from __future__ import annotations


def register() -> None:
    """Register the ``cpu`` platform, gloo process groups and the ``hf`` rollout in this process (idempotent); on
    another verl release, one line saying which it needs (``train`` and verl's ``validate_config`` say it before Ray)."""
    from fgrpo_verl import verl_compat

    verl_compat.require(verl_compat.CPU_BACKEND, "backend=cpu (fgrpo_verl.backends.cpu)")
    from fgrpo_verl.backends import hf_rollout
    from fgrpo_verl.backends.cpu import platform, verl_patches

    # the platform first: nothing below may resolve verl's platform before ``cpu`` is registered
    platform.register_platform()
    verl_patches.install()
    hf_rollout.register()


register()
