"""A checkpoint each epoch, whatever verl keeps of the training data (``+trainer.save_per_epoch=true``).

Recipes with ``save_per_epoch: true`` add the override (``fgrpo-verl launch``; with ``+``: it is not a key of
verl's config, and it is not part of the run's identity, fgrpo_verl/job/identity.py).

The paper keeps one checkpoint per epoch for its checkpoint selection (§5.3). verl's epoch is
``len(train_dataset) // data.train_batch_size`` steps, and ``train_dataset`` is what remains after verl dropped the
prompts longer than ``data.max_prompt_length`` *with the tokenizer and chat template of the model being trained*
(``data.filter_overlong_prompts``). One ``train.parquet`` prepared with the Qwen tokenizer serves all three of the
paper's models; Llama-3.2's template adds its date header to every prompt, so verl may keep fewer rows for Llama, and
a ``save_freq`` computed from the parquet's row count would drift off the epoch boundaries (and ``--status`` would
wait for steps that never come). So the fgrpo trainers, once verl has built its data loader (``on_init_end``):

    save_freq  <- verl's steps per epoch
    <checkpoint dir>/fgrpo_steps.json <- steps per epoch, save_freq, total steps, rows kept

The record is what the launcher's ``--status`` and the evaluation jobs read for the run's real step plan
(fgrpo_verl/job/checkpoints.py).
"""

from __future__ import annotations

from pathlib import Path

from fgrpo_verl.job.checkpoints import write_steps


def apply(trainer) -> dict | None:
    """Set ``trainer.save_freq`` to verl's steps per epoch when ``trainer.save_per_epoch`` is on; record the steps.
    Returns the record (None when the option is off)."""
    from omegaconf import open_dict

    config = trainer.config
    if not bool(config.trainer.get("save_per_epoch", False)):
        return None
    per_epoch = int(trainer.steps_per_epoch)
    if per_epoch < 1:
        raise ValueError(f"trainer.save_per_epoch: verl kept {len(trainer.train_dataset)} training prompts, fewer than "
                         f"one batch of data.train_batch_size={config.data.train_batch_size}")
    before = config.trainer.get("save_freq")
    with open_dict(config):
        config.trainer.save_freq = per_epoch
    rows = len(trainer.train_dataset)
    record = write_steps(Path(str(config.trainer.default_local_dir)), per_epoch, per_epoch,
                         int(trainer.total_training_steps), rows, int(config.data.train_batch_size))
    print(f"[fgrpo] a checkpoint each epoch: verl kept {rows} training prompts, {per_epoch} steps per epoch; "
          f"trainer.save_freq {before} -> {per_epoch}; {trainer.total_training_steps} steps in all")
    return record
