"""Run verl 0.9.1's ``ActorRolloutRefWorker.init_model`` in this process, on one CPU rank, for a composed config.

    python tests/verl_init_probe.py CONFIG.yaml

This is the start-up of verl's actor/rollout worker (FSDP actor, then the rollout's device mesh and its
world-size assert, then the rollout adapter) without Ray or a trainer: seconds instead of a verl start. Prints
``INIT OK`` or ``INIT REFUSED: <verl's message>`` (exit 0 either way; any other failure exits non-zero).
The caller sets the CPU platform's environment (the ``backend=cpu`` group's env vars) and RANK / WORLD_SIZE /
MASTER_ADDR / MASTER_PORT.
"""

from __future__ import annotations

import sys


def main(path: str) -> int:
    from omegaconf import OmegaConf

    import verl  # noqa: F401  (loads the plugin and, through VERL_USE_EXTERNAL_MODULES, the cpu backend)
    from verl.workers.engine_workers import ActorRolloutRefWorker

    config = OmegaConf.load(path)
    worker = ActorRolloutRefWorker(config.actor_rollout_ref, role="actor_rollout")
    try:
        worker.init_model()
    except AssertionError as exc:
        print(f"INIT REFUSED: {exc}", flush=True)
        return 0
    print("INIT OK", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
