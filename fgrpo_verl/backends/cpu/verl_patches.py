"""The two verl functions the CPU backend wraps, because verl offers no configuration that reaches them.

Both wrappers defer to verl's original unless the process runs on the ``cpu`` platform.

1. gloo process groups. verl 0.9.1 builds the backend string ``f"cpu:gloo,{device}:{ccl}"`` in
``verl.utils.distributed.initialize_global_process_group_ray`` (the RL workers' init). With device ``cpu`` that
is ``"cpu:gloo,cpu:gloo"``, which ``torch.distributed.init_process_group`` rejects ("Duplicate device type cpu").
verl offers no hook for the string, so :func:`install` wraps the function: on the ``cpu`` platform it passes
plain ``"gloo"``. (verl's torchrun-style init for its SFT trainer has the same string; nothing here runs verl's
SFT trainer, so it is left alone.)

2. unpinned FSDP2 CPU offload. verl's FSDP engine gives every forward-only FSDP2 model (the reference policy
used by ``use_kl_loss`` / ``use_kl_in_reward``) ``CPUOffloadPolicy(pin_memory=True)``, and pinning host memory
needs an accelerator ("Cannot access accelerator device when none is available"). ``apply_fsdp2`` is wrapped
to use ``pin_memory=False`` on the ``cpu`` platform, where the "offload" target is already the compute device.
"""

from __future__ import annotations

_ORIGINALS: dict[str, object] = {}


def _on_cpu_platform() -> bool:
    from verl.utils.device import get_device_name

    return get_device_name() == "cpu"


def initialize_global_process_group_ray(timeout_second=None, backend=None):
    """verl's Ray-worker process-group init with ``backend="gloo"`` on the cpu platform."""
    if backend is None and _on_cpu_platform():
        backend = "gloo"
    return _ORIGINALS["initialize_global_process_group_ray"](timeout_second=timeout_second, backend=backend)


def apply_fsdp2(model, fsdp_kwargs, config):
    """verl's ``apply_fsdp2`` with an unpinned ``CPUOffloadPolicy`` on the cpu platform."""
    policy = fsdp_kwargs.get("offload_policy")
    if policy is not None and getattr(policy, "pin_memory", False) and _on_cpu_platform():
        from torch.distributed.fsdp import CPUOffloadPolicy

        fsdp_kwargs = {**fsdp_kwargs, "offload_policy": CPUOffloadPolicy(pin_memory=False)}
    return _ORIGINALS["apply_fsdp2"](model, fsdp_kwargs, config)


def install() -> None:
    """Swap the verl functions above for their wrappers (idempotent).

    The defining modules and modules that imported the names already (``from ... import``) are
    patched, so the result does not depend on import order.
    """
    import sys

    import verl.utils.distributed as dist
    import verl.utils.fsdp_utils as fsdp_utils

    # (defining module, function, wrapper, modules that bind the name with `from ... import`)
    targets = [
        # verl builds "cpu:gloo,cpu:gloo" (invalid) on the cpu platform; no config knob reaches the string
        (dist, "initialize_global_process_group_ray", initialize_global_process_group_ray,
         ("verl.workers.engine_workers",)),
        # verl hard-codes CPUOffloadPolicy(pin_memory=True) for forward-only FSDP2 models; pinning needs a GPU
        (fsdp_utils, "apply_fsdp2", apply_fsdp2, ("verl.workers.engine.fsdp.transformer_impl",)),
    ]
    for module, name, wrapper, importers in targets:
        current = getattr(module, name)
        if current is not wrapper:
            _ORIGINALS.setdefault(name, current)
            setattr(module, name, wrapper)
        for importer_name in importers:
            importer = sys.modules.get(importer_name)
            if importer is not None and getattr(importer, name, None) is _ORIGINALS[name]:
                # imported verl's original by name before install() ran
                setattr(importer, name, wrapper)
