"""CPU backend: run verl 0.9.1's real PPO trainer (Ray, TaskRunner, FSDP2 actor, rollout, reward loop,
checkpoints) without an accelerator, and sample rollouts from a transformers model anywhere.

Selected by ``fgrpo-verl train backend=cpu`` (``hydra_configs/backend/cpu.yaml``), which sets
``FGRPO_VERL_BACKEND=cpu`` in every Ray process; ``fgrpo_verl.plugin`` then calls :func:`register` in each
process that imports verl. Nothing here is imported otherwise.

Every touch of verl internals is in this subpackage:

=====================================================  ===============================================================
verl internal                                          why
=====================================================  ===============================================================
``PlatformRegistry.register("cpu")`` (platform.py)      verl has no CPU platform; ``VERL_PLATFORM=cpu`` selects ours
``verl.utils.distributed.initialize_global_process_     verl builds ``"cpu:gloo,cpu:gloo"`` on a cpu device, which
group{,_ray}`` wrapped (verl_patches.py)                torch rejects; on the cpu platform we pass ``"gloo"``
``verl.utils.fsdp_utils.apply_fsdp2`` wrapped           verl hard-codes a *pinned* CPU offload for forward-only FSDP2
(verl_patches.py)                                       models (the KL reference); pinning needs an accelerator
``RolloutReplicaRegistry.register("hf", ...)``          verl ships vllm/sglang/trtllm replicas only
``verl.workers.rollout.base._ROLLOUT_REGISTRY``         the worker-side rollout class is looked up in this private dict
(private dict, one new key)                             and nowhere else
``VERL_ENGINE_DEVICE=cuda`` (config env var)            verl's FSDP engines register for cuda/npu only; the engine code
                                                        itself is device-agnostic and follows the platform
=====================================================  ===============================================================
"""

from __future__ import annotations

ROLLOUT_NAME = "hf"
_ADAPTER_FQN = "fgrpo_verl.backends.cpu.replica.HFServerAdapter"


def _load_replica():
    from fgrpo_verl.backends.cpu.replica import HFReplica

    return HFReplica


def register() -> None:
    """Register the ``cpu`` platform, gloo process groups and the ``hf`` rollout in this process (idempotent)."""
    from verl.workers.rollout import base as rollout_base
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    from fgrpo_verl.backends.cpu import platform, verl_patches

    platform.register_platform()
    verl_patches.install()
    RolloutReplicaRegistry.register(ROLLOUT_NAME, _load_replica)
    # get_rollout_class() reads only this private dict (name, mode) -> "module.Class"; it has no register().
    rollout_base._ROLLOUT_REGISTRY[(ROLLOUT_NAME, "async")] = _ADAPTER_FQN
