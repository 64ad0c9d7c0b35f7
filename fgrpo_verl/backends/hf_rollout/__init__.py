"""The ``hf`` rollout: sampling from a transformers model in a Ray actor, for verl's agent loop.

Used by both backends (``cpu`` on the host, ``gpu_hf`` on the training worker's GPU). Importing this package
registers nothing; :func:`register` does.

=====================================================  ===============================================================
verl internal                                          why
=====================================================  ===============================================================
``RolloutReplicaRegistry.register("hf", ...)``          verl ships vllm/sglang/trtllm replicas only
``verl.workers.rollout.base._ROLLOUT_REGISTRY``         the worker-side rollout class is looked up in this private dict
(private dict, one new key)                             and nowhere else
=====================================================  ===============================================================
"""

from __future__ import annotations

ROLLOUT_NAME = "hf"
_ADAPTER_FQN = "fgrpo_verl.backends.hf_rollout.replica.HFServerAdapter"


def _load_replica():
    from fgrpo_verl.backends.hf_rollout.replica import HFReplica

    return HFReplica


def register() -> None:
    """Register the ``hf`` rollout's replica (trainer side) and adapter (worker side) with verl (idempotent).

    Each entry is added when verl's registry module is imported (now, if it is already): processes that never
    touch a rollout (TransferQueue, reward workers) do not import verl's rollout stack for it.
    """
    from wrapt import register_post_import_hook

    register_post_import_hook(lambda module: module.RolloutReplicaRegistry.register(ROLLOUT_NAME, _load_replica),
                              "verl.workers.rollout.replica")
    # get_rollout_class() reads only this private dict (name, mode) -> "module.Class"; it has no register().
    register_post_import_hook(lambda module: module._ROLLOUT_REGISTRY.update({(ROLLOUT_NAME, "async"): _ADAPTER_FQN}),
                              "verl.workers.rollout.base")
