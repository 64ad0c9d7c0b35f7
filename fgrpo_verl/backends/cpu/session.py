"""One local Ray cluster shared by several ``fgrpo-verl train backend=cpu`` runs.

Each run is its own process (fresh Hydra state, memory returned when it ends), but verl's ``main_ppo`` only
calls ``ray.init(**ray_kwargs.ray_init)`` when the process is not connected yet, and ``ray.init`` joins the
cluster named by ``$RAY_ADDRESS`` when that is set. So a parent (the demo) can start Ray once and hand each
child run the cluster's address: the child skips starting the GCS, raylet and agents and stopping them again
(measured in docs/cpu_backend.md), and its actors still end with its job. Each run is a separate Ray job with
its own namespace for verl's named actors, except TransferQueue's controller, which verl 0.9.1's TransferQueue
names in the fixed namespace ``transfer_queue``: two runs in one session at the same time share it and corrupt
each other's batches (seen in a demo with two runs at once). Runs of one session therefore go one at a time;
runs at the same time would need a cluster each.
The run's workers are started by the session's raylet, so they see the parent's environment plus the run's
``runtime_env``, not the child's environment (:meth:`RaySession.run_overrides`).

Joining a cluster rejects ``num_cpus``/``num_gpus`` (Ray raises), so the child's values are nulled and the
parent declares the logical resources ``backend=cpu`` asks for. Runs share those: with the default single logical
GPU, a second concurrent run would wait for the first's GPU bundle (and must not run beside it anyway, above).

    with RaySession() as ray_session:
        for gamma in gammas:
            run_env = {"VERL_FILE_LOGGER_PATH": ..., "WANDB_MODE": ...}  # what the run's workers must see
            subprocess.run([..., "fgrpo_verl", "train", ..., *ray_session.run_overrides(run_env)],
                           env={**os.environ, **run_env, **ray_session.env})   # as tasks/maze/rl.train_maze does
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

# Overrides that make a small-model run in a session fast without changing what it computes (measured in
# benchmarks/bench_cpu_step.py, docs/cpu_backend.md "Step time"). With bypass mode verl takes the old log-probs from
# the rollout instead of a second forward pass of the actor: the rollout samples in fp32 with this step's weights, so
# the two agree to ~1e-7 (the backend's e2e test measures it), and with one PPO epoch the update is the same. Not
# defaults of the ``cpu`` config group: bypass mode turns off the rollout-vs-actor log-prob check
# (``training/rollout_probs_diff_*``) that the backend's own tests rely on. Micro-batch sizes are left to the caller:
# at the demo shape one micro-batch of 128 rollouts was not faster than two of 64 (docs/cpu_backend.md).
FAST_OVERRIDES = ("algorithm.rollout_correction.bypass_mode=true",)


class RaySession:
    """Start a local Ray cluster with the ``backend=cpu`` resources on enter; shut it down on exit.

    ``num_cpus`` / ``num_gpus`` default to ``hydra_configs/backend/cpu.yaml``'s (logical) values; ``num_gpus``
    must be ``trainer.nnodes * trainer.n_gpus_per_node`` of the runs, as in that file.
    """

    def __init__(self, num_cpus: int | None = None, num_gpus: int | None = None):
        for name, value in (("num_cpus", num_cpus), ("num_gpus", num_gpus)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"RaySession({name}={value!r}): expected an int >= 1 or None (the cpu config's)")
        self.num_cpus, self.num_gpus = num_cpus, num_gpus
        self.address: str | None = None

    def __enter__(self) -> "RaySession":
        import ray

        if ray.is_initialized():
            raise RuntimeError("RaySession: this process is already connected to Ray; use one session per process")
        if os.environ.get("RAY_ADDRESS"):
            raise RuntimeError(
                f"RaySession: RAY_ADDRESS={os.environ['RAY_ADDRESS']!r} is set, so ray.init would join that cluster "
                "instead of starting one; unset it"
            )
        from fgrpo_verl.config.compose import compose
        from fgrpo_verl.environment import environment_with
        from fgrpo_verl.job import ray_start

        # the backend=cpu config's logical CPUs and GPUs, and its Ray settings read from the environment (RAY_* of its
        # env_vars: the raylet this session starts reads them)
        ray_init = compose(["backend=cpu"]).ray_kwargs.ray_init
        ray_settings = {k: str(v) for k, v in ray_init.runtime_env.env_vars.items() if k.startswith("RAY_")}
        # Ray 2.60 turns token authentication on for a new local cluster and warns that it did: the cluster is
        # protected as it should be, and the warning tells a demo user nothing to act on. Asking for the mode with
        # RAY_AUTH_MODE=token would not do: Ray reads it when it is imported, which may be before this point.
        auth_log = logging.getLogger("ray._private.authentication.authentication_token_setup")
        auth_level = auth_log.level
        auth_log.setLevel(logging.ERROR)
        try:
            # for the raylet started now (worker niceness); this process's environment as before afterwards
            with environment_with(ray_settings):
                # a slow start on a busy machine is retried (fgrpo_verl/job/ray_start.py)
                ray_start.init(num_cpus=self.num_cpus or int(ray_init.num_cpus),
                               num_gpus=self.num_gpus or int(ray_init.num_gpus),
                               include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
        finally:
            auth_log.setLevel(auth_level)
        self.address = ray.get_runtime_context().gcs_address
        return self

    def __exit__(self, *exc) -> None:
        import ray

        ray.shutdown()
        self.address = None

    @property
    def env(self) -> dict[str, str]:
        """Environment of a child run: the cluster to join."""
        if self.address is None:
            raise RuntimeError("RaySession is not started (use it as a context manager)")
        return {"RAY_ADDRESS": self.address}

    def run_overrides(self, env_vars: Mapping[str, str] | None = None) -> list[str]:
        """Hydra overrides of a child run: no resource declaration (Ray rejects it when joining), and
        ``env_vars`` in the run's Ray ``runtime_env``.

        A child's own environment does not reach its Ray workers: they are started by this session's raylet,
        which has the parent's environment. Whatever the run's workers must see (``VERL_FILE_LOGGER_PATH``,
        ``WANDB_*``, ...) has to travel in ``runtime_env.env_vars``, as ``backend=cpu``'s own variables do.
        """
        from fgrpo_verl.job.tracking import ray_env_overrides

        nulls = ["ray_kwargs.ray_init.num_cpus=null", "ray_kwargs.ray_init.num_gpus=null"]
        return nulls + ray_env_overrides(env_vars or {})
