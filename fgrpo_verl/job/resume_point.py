"""Resume only from a step whose metrics were logged.

verl's training loop saves step k's checkpoint, and writes ``latest_checkpointed_iteration.txt`` = k (the step a
restarted run resumes from), *before* it validates and logs step k. A job killed in between (a node failure, a
preemption without notice, ``scontrol requeue``; with ``trainer.test_freq`` the gap is the whole validation,
minutes on a large eval set) resumes after k, so step k's training and validation metrics are never logged
anywhere: not on the console, not in W&B.

The fgrpo trainers keep the tracker at the previous checkpoint until step k has been logged:

    _save_checkpoint()   verl saves ``global_step_k`` and writes k; the previous value is put back (the file is
                         removed when there was none: a restart then trains from the start)
    on_step_begin()      step k + 1 begins, so step k is logged (and its W&B row closed): the tracker says k
    fit() returns        the last step, or a stop at a step boundary, is logged: the tracker says k

A job killed before the tracker says k resumes from the previous checkpoint and trains step k again (its new
checkpoint replaces the unreleased ``global_step_k``); the W&B offline trim at the start
(``fgrpo_verl/job/wandb_offline.py``) drops whatever the killed start logged past that checkpoint. The price
is that a kill in the gap recomputes ``trainer.save_freq`` steps instead of none.

Once the tracker says k, no resume needs the optimizer states of the checkpoints before k: :func:`release` removes
them (verl's FSDP files ``global_step_<j>/<role>/optim_world_size_<W>_rank_<r>.pt``, j < k; AdamW's two fp32 moments,
8 of the 12 bytes per parameter of a checkpoint) and keeps their weights (``model_*``, ``extra_state_*``, ``data.pt``,
``huggingface/``) for checkpoint selection and evaluation. ``FGRPO_KEEP_OPTIMIZER_STATES=1`` keeps them all (to resume
deliberately from an older step with ``trainer.resume_mode=resume_path``). A checkpoint held back as the resume point
keeps its states until a later step is released.

Not deferred (the tracker says k at once, as in verl): when the previous checkpoint can no longer be loaded
(``max_actor_ckpt_to_keep`` / ``max_critic_ckpt_to_keep`` = 1 or ``remove_previous_ckpt_in_save``: verl's
rotation deletes ``global_step_<j>/actor`` and ``/critic`` but leaves the folder with its ``data.pt``, so the
role folders are what is checked), when the tracker did not name an earlier step (another run's tracker in a
reused directory with ``resume_mode=disable`` or ``resume_path``, or a damaged file), and when verl did not write
the tracker itself (``checkpoint.async_save``). Writes are atomic (a temporary file renamed over the tracker).
"""

from __future__ import annotations

import os
from pathlib import Path

from fgrpo_verl.job.checkpoints import TRACKER, write_text


def _tracker(trainer) -> Path:
    return Path(str(trainer.config.trainer.default_local_dir)) / TRACKER


def read_tracker(trainer) -> str | None:
    """The tracker's text (stripped), None when there is none."""
    try:
        return _tracker(trainer).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None


def _loadable(trainer, step: int) -> bool:
    """Whether verl's ``_load_checkpoint`` finds what it loads in ``global_step_<step>``: the actor folder and,
    with a critic, the critic folder (verl's names; ``data.pt`` is optional to verl)."""
    folder = _tracker(trainer).parent / f"global_step_{step}"
    roles = ("actor", "critic") if getattr(trainer, "use_critic", False) else ("actor",)
    return all((folder / role).is_dir() for role in roles)


def hold_back(trainer, before: str | None) -> int | None:
    """After verl's ``_save_checkpoint`` of step ``trainer.global_steps``: put the tracker back to ``before`` (its
    text before the save) and return the step to release later; None when nothing was held back."""
    path, step = _tracker(trainer), int(trainer.global_steps)
    if read_tracker(trainer) != str(step):
        return None
    if before is None:
        path.unlink()
        return step
    if not before.isdigit() or int(before) >= step or not _loadable(trainer, int(before)):
        return None
    write_text(path, str(int(before)))
    return step


# verl's FSDP checkpoint manager names each rank's optimizer shard this way (verl/utils/checkpoint/
# fsdp_checkpoint_manager.py save_checkpoint)
OPTIMIZER_FILES = "global_step_*/*/optim_world_size_*_rank_*.pt"


def release(trainer, step: int | None) -> None:
    """Step ``step`` is logged: the tracker says ``step``, and earlier checkpoints lose their optimizer states
    (module docstring; nothing to do for None)."""
    if step is not None:
        write_text(_tracker(trainer), str(int(step)))
        if os.environ.get("FGRPO_KEEP_OPTIMIZER_STATES", "0") != "1":
            prune_optimizer_states(_tracker(trainer).parent, int(step))


def prune_optimizer_states(root: Path, step: int) -> None:
    """Remove the optimizer shards of ``root``'s checkpoints before ``step``."""
    for path in Path(root).glob(OPTIMIZER_FILES):
        number = path.parent.parent.name.removeprefix("global_step_")
        if number.isdigit() and int(number) < step:
            path.unlink(missing_ok=True)
