"""verl platform ``cpu``: torch on the host CPU, gloo collectives, a *logical* Ray ``GPU`` per worker.

verl 0.9.1 resolves every device question through ``verl.plugin.platform.get_platform()`` (one singleton per
process, chosen by ``$VERL_PLATFORM`` or auto-detection that falls back to ``nvidia``). It ships cuda, npu and
rocm platforms only. This module adds ``cpu`` to ``PlatformRegistry`` (verl's public extension point); the
backend config selects it with ``VERL_PLATFORM=cpu``.

Why a *logical* ``GPU`` Ray resource: verl's resource pools and worker groups reserve one accelerator bundle
per training rank (``trainer.n_gpus_per_node``). On CPU, ``ray.init(num_gpus=...)`` declares logical GPUs, so
the same scheduling code runs unchanged and each rank still gets exactly one bundle.
"""

from __future__ import annotations

import types
from contextlib import contextmanager
from typing import Any, Optional

import psutil
import torch
from verl.plugin.platform import PlatformBase, PlatformRegistry

PLATFORM_NAME = "cpu"


def _mem_get_info(*args, **kwargs) -> tuple[int, int]:
    """(free, total) bytes of host memory: what verl's memory logging asks of an accelerator."""
    vm = psutil.virtual_memory()
    return int(vm.available), int(vm.total)


def _build_device_module() -> types.ModuleType:
    """A ``torch.<device>``-like namespace for the host.

    verl calls ``get_torch_device().<fn>`` (empty_cache, synchronize, mem_get_info, get_rng_state, ...).
    ``torch.cpu`` has only some of them; the rest are no-ops or host equivalents here.
    """
    module = types.ModuleType("fgrpo_verl_cpu_device", "torch.cpu plus the accelerator calls verl makes")
    for name in ("current_device", "device_count", "is_available", "synchronize", "set_device", "current_stream",
                 "stream", "Stream", "Event"):
        setattr(module, name, getattr(torch.cpu, name))
    # host memory is returned to the allocator by Python/torch itself
    for name in ("empty_cache", "ipc_collect", "set_per_process_memory_fraction", "reset_peak_memory_stats"):
        setattr(module, name, lambda *args, **kwargs: None)
    # verl only logs these numbers
    for name in ("memory_allocated", "memory_reserved", "max_memory_allocated", "max_memory_reserved"):
        setattr(module, name, lambda *args, **kwargs: 0)
    module.mem_get_info = _mem_get_info
    module.get_rng_state = torch.get_rng_state  # checkpoints save/restore "device" RNG next to the CPU one
    module.set_rng_state = torch.set_rng_state
    module.manual_seed = module.manual_seed_all = torch.manual_seed
    module.get_device_name = lambda *args, **kwargs: "cpu"
    return module


CPU_DEVICE_MODULE = _build_device_module()


class PlatformCPU(PlatformBase):
    """Host CPU: gloo process groups, no IPC, no profiler ranges, logical Ray GPUs."""

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> types.ModuleType:
        return CPU_DEVICE_MODULE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        # Never auto-detected: only an explicit VERL_PLATFORM=cpu selects it, so GPU hosts keep nvidia.
        return False

    def current_device(self) -> str:
        # verl passes this to tensor.to(...) and device=...; the int 0 would mean cuda:0.
        return "cpu"

    def device_count(self) -> int:
        return 1

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    manual_seed_all = manual_seed

    # nothing to select, wait for or free on the host; allocator settings (expandable segments etc.) are CUDA
    # caching-allocator options; no profiler ranges
    def set_device(self, *args, **kwargs) -> None:
        return None

    synchronize = set_allocator_settings = empty_cache = profiler_start = profiler_stop = set_device

    def get_device_capability(self, device_index: int = 0) -> tuple[Optional[int], Optional[int]]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        # Ray sets it for (logical) GPU actors; nothing on the host reads it.
        return "CUDA_VISIBLE_DEVICES"

    @contextmanager
    def nvtx_range(self, msg: str):
        yield

    def ray_resource_name(self) -> str:
        # logical: declared by ray_init.num_gpus in hydra_configs/backend/cpu.yaml (verl's default resource options
        # then ask for num_gpus)
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None


def register_platform() -> None:
    """Add ``cpu`` to verl's ``PlatformRegistry`` (idempotent)."""
    if PlatformRegistry.get(PLATFORM_NAME) is not PlatformCPU:
        PlatformRegistry.register(platform=PLATFORM_NAME)(PlatformCPU)
