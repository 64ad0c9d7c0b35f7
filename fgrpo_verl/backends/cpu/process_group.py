"""gloo process groups on the ``cpu`` platform.

verl 0.9.1 builds the backend string ``f"cpu:gloo,{device}:{ccl}"`` in ``verl.utils.distributed``
(``initialize_global_process_group_ray`` for RL workers, ``initialize_global_process_group`` for the SFT
trainer). With device ``cpu`` that is ``"cpu:gloo,cpu:gloo"``, which ``torch.distributed.init_process_group``
rejects ("Duplicate device type cpu"). verl offers no hook for the string, so :func:`install` wraps the two
functions: on the ``cpu`` platform they pass plain ``"gloo"``; on every other platform they call verl's
originals unchanged.
"""

from __future__ import annotations

import os
from datetime import timedelta

_ORIGINALS: dict[str, object] = {}


def _on_cpu_platform() -> bool:
    from verl.utils.device import get_device_name

    return get_device_name() == "cpu"


def initialize_global_process_group_ray(timeout_second=None, backend=None):
    """verl's Ray-worker process-group init with ``backend="gloo"`` on the cpu platform."""
    if backend is None and _on_cpu_platform():
        backend = "gloo"
    return _ORIGINALS["initialize_global_process_group_ray"](timeout_second=timeout_second, backend=backend)


def initialize_global_process_group(timeout_second=36000):
    """verl's torchrun-style process-group init (SFT trainer); gloo on the cpu platform.

    Returns ``(local_rank, rank, world_size)`` like verl's function.
    """
    if not _on_cpu_platform():
        return _ORIGINALS["initialize_global_process_group"](timeout_second=timeout_second)
    import torch.distributed

    torch.distributed.init_process_group(
        backend="gloo",
        timeout=timedelta(seconds=timeout_second),
        init_method=os.environ.get("DIST_INIT_METHOD", None),
    )
    return int(os.environ["LOCAL_RANK"]), int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])


def install() -> None:
    """Swap verl's two process-group initialisers for the wrappers above (idempotent).

    Both ``verl.utils.distributed`` and modules that imported the names already (``from ... import``) are
    patched, so the result does not depend on import order.
    """
    import sys

    import verl.utils.distributed as dist

    wrappers = {
        "initialize_global_process_group_ray": initialize_global_process_group_ray,
        "initialize_global_process_group": initialize_global_process_group,
    }
    for name, wrapper in wrappers.items():
        current = getattr(dist, name)
        if current is not wrapper:
            _ORIGINALS.setdefault(name, current)
            # verl builds "cpu:gloo,cpu:gloo" (invalid) on the cpu platform; no config knob reaches the string.
            setattr(dist, name, wrapper)
    for module_name in ("verl.workers.engine_workers", "verl.trainer.sft_trainer"):
        module = sys.modules.get(module_name)
        for name, wrapper in wrappers.items():
            if module is not None and getattr(module, name, None) is _ORIGINALS.get(name):
                # this module bound verl's original by `from verl.utils.distributed import ...` before install()
                setattr(module, name, wrapper)
