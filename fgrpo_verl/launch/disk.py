"""Disk a run's checkpoints take, printed by ``fgrpo-verl launch --dry-run``.

verl's FSDP checkpoint of the actor holds the fp32 weights and AdamW's two fp32 moments (``save_contents``
model + optimizer + extra): about 12 bytes per parameter. A run keeps ``trainer.max_actor_ckpt_to_keep`` of them
(all when null), and saves every ``save_freq`` steps plus the last step. The fgrpo trainers remove the optimizer
states of every checkpoint before the resume point (fgrpo_verl/job/resume_point.py), so at most two checkpoints
(the resume point and a newer one not yet logged) hold 12 B per parameter and the others 4 B (their weights);
``FGRPO_KEEP_OPTIMIZER_STATES=1`` keeps 12 B in all:

    full = 12 B x P    weights = 4 B x P    kept = min(keep, ceil(T / save_freq))
    total = min(kept, 2) x full + (kept - min(kept, 2)) x weights        (kept x full when all are kept)

P: from the model's files (a local directory or the Hugging Face cache: the weight files' bytes over their dtype's
size), else the paper's models' published counts (fgrpo_verl/preflight/models.py; no download at launch).
"""

from __future__ import annotations

import math
import os

from fgrpo_verl.preflight.models import architecture

BYTES_PER_PARAM = 12
# fp32 weights alone: a checkpoint whose optimizer states were removed
WEIGHT_BYTES_PER_PARAM = 4


def model_params(path: str) -> float | None:
    """Parameters of the model at ``path`` (fgrpo_verl/preflight/models.py: its files, or the paper's published
    counts); None when unknown here."""
    arch = architecture(path)
    return None if arch is None else arch.params


def size_text(nbytes: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if nbytes < 1000 or unit == "TB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1000
    raise AssertionError


def checkpoint_storage(config, total_steps: int | None) -> tuple[float, int | None, float | None] | None:
    """(bytes per checkpoint, checkpoints kept, total bytes) of a run; None when its parameter count is unknown
    here. The count is None when the step count is (no data here and no checkpoint each epoch); a run that saves
    once per epoch (``trainer.save_per_epoch``) keeps ``total_epochs`` checkpoints whatever its data."""
    params = model_params(str(config.actor_rollout_ref.model.path))
    if params is None:
        return None
    each = BYTES_PER_PARAM * params
    save_freq = int(config.trainer.save_freq)
    if total_steps is not None and save_freq > 0:
        count = math.ceil(total_steps / save_freq)
    elif config.trainer.get("save_per_epoch") and config.trainer.get("total_training_steps") is None:
        count = int(config.trainer.total_epochs)
    else:
        return each, None, None
    # verl keeps them all for a null or non-positive max_actor_ckpt_to_keep, one with remove_previous_ckpt_in_save
    keep = 1 if config.trainer.get("remove_previous_ckpt_in_save") else config.trainer.get("max_actor_ckpt_to_keep")
    if keep is not None and int(keep) >= 1:
        count = min(count, int(keep))
    full = count if _keep_optimizer_states() else min(count, 2)
    return each, count, full * each + (count - full) * WEIGHT_BYTES_PER_PARAM * params


def _keep_optimizer_states() -> bool:
    return os.environ.get("FGRPO_KEEP_OPTIMIZER_STATES", "0") == "1"


def checkpoint_disk(config, total_steps: int | None) -> str:
    """One line: per-checkpoint size, how many are kept, the total."""
    path = str(config.actor_rollout_ref.model.path)
    storage = checkpoint_storage(config, total_steps)
    if storage is None:
        return f"checkpoint disk: unknown (parameter count of {path} not known here)"
    each, count, total = storage
    head = (f"checkpoint disk: {size_text(each)} per checkpoint ({each / BYTES_PER_PARAM / 1e9:.2f}B params x "
            f"{BYTES_PER_PARAM} B)")
    if count is None:
        return head
    if _keep_optimizer_states():
        return f"{head}, {count} kept = {size_text(total)}"
    return (f"{head}, {count} kept, optimizer states only in the resume point and a newer one "
            f"({WEIGHT_BYTES_PER_PARAM} B per param in the others) = {size_text(total)}")
