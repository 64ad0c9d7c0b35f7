"""verl-facing halves of the ``hf`` rollout: the replica (trainer side) and the adapter (worker side).

- :class:`HFReplica` (a ``verl.workers.rollout.replica.RolloutReplica``, registered in
  ``RolloutReplicaRegistry`` under :data:`ROLLOUT_NAME`) starts one :class:`HFRolloutServer` actor per replica
  on the node of its first training worker.
- :class:`HFServerAdapter` (a ``verl.workers.rollout.base.BaseRollout``) lives inside each actor/rollout worker.
  After every actor update verl's naive weight sync calls ``update_weights(<(name, tensor) generator>)`` on it;
  it drains the generator (for FSDP each item is an all-gather, a collective) and ships the full tensors to its
  replica's server through Ray's object store. A replica is one training rank (rollout parallel sizes are 1).
"""

from __future__ import annotations

import os

import ray
from verl.plugin.platform import get_platform
from verl.utils.device import get_device_name, get_resource_name
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica

from fgrpo_verl.backends.hf_rollout import ROLLOUT_NAME
from fgrpo_verl.backends.hf_rollout.server import HFRolloutServer


def _server_actor_name(replica_rank: int) -> str:
    return f"hf_rollout_server_{replica_rank}"


class HFReplica(RolloutReplica):
    """One transformers sampling server per replica, next to the replica's first training worker."""

    async def launch_servers(self):
        if self.world_size != 1:
            raise ValueError(
                f"rollout.name={ROLLOUT_NAME} serves one model copy per replica: set "
                "actor_rollout_ref.rollout.tensor_model_parallel_size=1 (and data/pipeline parallel 1); "
                f"got a replica world size of {self.world_size}"
            )
        if not self.workers:
            raise ValueError("the hf rollout needs the training workers (hybrid mode); standalone is not supported")
        node_id, accelerator = await self.workers[0].__ray_call__.remote(
            lambda worker: (
                ray.get_runtime_context().get_node_id(),
                ray.get_runtime_context().get_accelerator_ids().get(get_resource_name(), []),
            )
        )
        device = get_device_name()
        env_vars = {}
        if device != "cpu":
            # Share the first worker's accelerator, as verl's vLLM replica does for its server.
            env_vars = {var: "1" for var in get_platform().ray_noset_envvars()}
            env_vars[get_platform().visible_devices_envvar()] = ",".join(accelerator)
            device = f"{device}:0"
        server = ray.remote(HFRolloutServer).options(
            scheduling_strategy=ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(
                node_id=node_id, soft=False
            ),
            runtime_env={"env_vars": env_vars},
            name=_server_actor_name(self.replica_rank),
            max_concurrency=self.max_concurrency,
            num_cpus=0,
        ).remote(config=self.config, model_config=self.model_config, replica_rank=self.replica_rank, device=device)
        self.servers = [server]
        self._server_handle = server
        self._server_address = await server.get_server_address.remote()


class HFServerAdapter(BaseRollout):
    """Worker-side client of the replica's server: forwards weight updates, nothing else to manage."""

    def __init__(self, config, model_config, device_mesh, replica_rank: int = -1):
        super().__init__(config, model_config, device_mesh)
        cfg = self.config
        if cfg.tensor_model_parallel_size * cfg.data_parallel_size * cfg.pipeline_model_parallel_size != 1:
            raise ValueError(f"rollout.name={ROLLOUT_NAME} needs tensor/data/pipeline parallel size 1 per replica")
        # one training rank per replica (HFReplica enforces it), so the replica is this worker's rank
        self.replica_rank = int(os.environ["RANK"]) if replica_rank == -1 else replica_rank
        self._server = None

    def _server_handle(self):
        if self._server is None:
            self._server = ray.get_actor(_server_actor_name(self.replica_rank))
        return self._server

    async def resume(self, tags: list[str]):
        return None  # the server keeps its weights resident; nothing was released

    async def release(self):
        return None

    async def update_weights(self, weights, wire_format: str = "named_tensors", global_steps=None,
                             peft_config=None, **kwargs):
        if wire_format != "named_tensors":
            raise ValueError(f"rollout.name={ROLLOUT_NAME} takes wire_format='named_tensors'; got {wire_format!r}")
        if peft_config is not None:
            raise ValueError(
                f"rollout.name={ROLLOUT_NAME} takes merged weights only: set actor_rollout_ref.model.lora.merge=True"
            )
        # Drain the whole generator: for FSDP each item is an all-gather, a collective every rank must join.
        if hasattr(weights, "__aiter__"):
            collected = {name: tensor.detach().to("cpu", copy=True) async for name, tensor in weights}
        else:
            collected = {name: tensor.detach().to("cpu", copy=True) for name, tensor in weights}
        await self._server_handle().update_weights.remote(collected, global_steps=global_steps)

