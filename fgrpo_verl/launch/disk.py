"""Disk a run's checkpoints take, printed by ``fgrpo-verl launch --dry-run``.

verl's FSDP checkpoint of the actor holds the fp32 weights and AdamW's two fp32 moments (``save_contents``
model + optimizer + extra): about 12 bytes per parameter. A run keeps ``trainer.max_actor_ckpt_to_keep`` of them
(all when null), and saves every ``save_freq`` steps plus the last step:

    per checkpoint = 12 B x P        kept = min(keep, ceil(T / save_freq))        total = kept x per checkpoint

P: from a local model directory, the weight files' bytes over their dtype's size; for the paper's HF ids, their
published parameter counts (no download at launch).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from fgrpo_verl.evaluation.model_presets import MODELS

BYTES_PER_PARAM = 12
# published parameter counts of the paper's models (fgrpo_verl/evaluation/model_presets.py)
KNOWN_PARAMS = {m.hf_id: m.params for m in MODELS.values()}
_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


def model_params(path: str) -> float | None:
    if path in KNOWN_PARAMS:
        return KNOWN_PARAMS[path]
    model = Path(path)
    if not model.is_dir():
        return None
    weights = [*model.glob("*.safetensors"), *model.glob("pytorch_model*.bin")]
    if not weights:
        return None
    dtype = "float32"
    config = model / "config.json"
    if config.is_file():
        dtype = json.loads(config.read_text()).get("torch_dtype") or dtype
    return sum(w.stat().st_size for w in weights) / _DTYPE_BYTES.get(dtype, 4)


def _size(nbytes: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if nbytes < 1000 or unit == "TB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1000
    raise AssertionError


def checkpoint_disk(config, total_steps: int | None) -> str:
    """One line: per-checkpoint size, how many are kept, the total."""
    path = str(config.actor_rollout_ref.model.path)
    params = model_params(path)
    if params is None:
        return f"checkpoint disk: unknown (parameter count of {path} not known here)"
    each = BYTES_PER_PARAM * params
    save_freq = int(config.trainer.save_freq)
    if save_freq <= 0 or total_steps is None:
        count = None
    else:
        count = math.ceil(total_steps / save_freq)
        keep = config.trainer.get("max_actor_ckpt_to_keep")
        if keep is not None:
            count = min(count, int(keep))
    if count is None:
        return f"checkpoint disk: {_size(each)} per checkpoint ({params / 1e9:.2f}B params x {BYTES_PER_PARAM} B)"
    return (
        f"checkpoint disk: {_size(each)} per checkpoint ({params / 1e9:.2f}B params x {BYTES_PER_PARAM} B), "
        f"{count} kept = {_size(each * count)}"
    )
