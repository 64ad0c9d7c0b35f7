"""The three verl internals the CPU backend wraps, because verl offers no configuration that reaches them.

Every wrapper defers to verl's original unless the process runs on the ``cpu`` platform. Each is installed
when verl's module is imported (a post-import hook), so a process that never imports, say, verl's FSDP utilities
does not pay for importing them, and ``import verl`` resolves no platform.

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

3. the replay buffer's poll interval. verl's v1 trainer waits for a step's rollouts by polling TransferQueue
every ``poll_interval`` seconds, 2.0 by default, and builds its ``ReplayBuffer`` without passing one (no config
key reaches it). Generation therefore takes a whole multiple of 2 s: 4.0 s per step at the demo shape when
sampling itself needs ~1.5 s. On the ``cpu`` platform the default becomes :data:`CPU_POLL_INTERVAL_S`; an
explicit ``poll_interval`` (a custom sampler's) is kept. Each poll is one TransferQueue metadata round trip.
"""

from __future__ import annotations

import functools
import sys

from wrapt import register_post_import_hook

ORIGINALS: dict[str, object] = {}
# seconds between the replay buffer's TransferQueue polls on the cpu platform (verl: 2.0)
CPU_POLL_INTERVAL_S = 0.02


def _on_cpu_platform() -> bool:
    from verl.utils.device import get_device_name

    return get_device_name() == "cpu"


def initialize_global_process_group_ray(timeout_second=None, backend=None):
    """verl's Ray-worker process-group init with ``backend="gloo"`` on the cpu platform."""
    if backend is None and _on_cpu_platform():
        backend = "gloo"
    return ORIGINALS["initialize_global_process_group_ray"](timeout_second=timeout_second, backend=backend)


def apply_fsdp2(model, fsdp_kwargs, config):
    """verl's ``apply_fsdp2`` with an unpinned ``CPUOffloadPolicy`` on the cpu platform."""
    policy = fsdp_kwargs.get("offload_policy")
    if policy is not None and getattr(policy, "pin_memory", False) and _on_cpu_platform():
        from torch.distributed.fsdp import CPUOffloadPolicy

        fsdp_kwargs = {**fsdp_kwargs, "offload_policy": CPUOffloadPolicy(pin_memory=False)}
    return ORIGINALS["apply_fsdp2"](model, fsdp_kwargs, config)


def replay_buffer_init(self, *args, **kwargs):
    """verl's ``ReplayBuffer.__init__`` with ``poll_interval`` defaulting to :data:`CPU_POLL_INTERVAL_S` on the
    cpu platform."""
    if "poll_interval" not in kwargs and len(args) < 6 and _on_cpu_platform():
        kwargs["poll_interval"] = CPU_POLL_INTERVAL_S
    return ORIGINALS["ReplayBuffer.__init__"](self, *args, **kwargs)


def wrap(module, name: str, wrapper, importers=()) -> None:
    """Set ``module.<name>`` (dotted: an attribute of a class in it) to ``wrapper``, keeping the original."""
    owner_name, _, attr = name.rpartition(".")
    owner = getattr(module, owner_name) if owner_name else module
    current = getattr(owner, attr)
    if current is wrapper:
        return
    ORIGINALS.setdefault(name, current)
    setattr(owner, attr, wrapper)
    for importer_name in importers:
        importer = sys.modules.get(importer_name)
        if importer is not None and getattr(importer, name, None) is ORIGINALS[name]:
            # imported verl's original by name before the wrapper was installed
            setattr(importer, name, wrapper)


# (verl's module, the name wrapped in it, the wrapper, modules that bind the original by name): 1.-3. above
WRAPPERS = (
    ("verl.utils.distributed", "initialize_global_process_group_ray", initialize_global_process_group_ray,
     ("verl.workers.engine_workers",)),
    ("verl.utils.fsdp_utils", "apply_fsdp2", apply_fsdp2, ("verl.workers.engine.fsdp.transformer_impl",)),
    ("verl.trainer.ppo.v1.replay_buffer", "ReplayBuffer.__init__", replay_buffer_init, ()),
)


def install() -> None:
    """Install :data:`WRAPPERS`, each when (or now, if) verl's module is imported (idempotent).

    Modules that already bound an original with ``from ... import`` are patched too, so the result does not
    depend on import order.
    """
    for module_name, name, wrapper, importers in WRAPPERS:
        register_post_import_hook(functools.partial(wrap, name=name, wrapper=wrapper, importers=importers), module_name)
