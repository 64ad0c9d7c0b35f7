"""How many steps a run takes, checked at launch against its data: verl stops at whichever comes first of
``trainer.total_training_steps`` and ``trainer.total_epochs`` epochs.

    steps per epoch  S = rows // data.train_batch_size      (verl's loader drops the last partial batch)
    total steps      T = trainer.total_training_steps, or S * trainer.total_epochs when it is null

A run whose ``total_training_steps`` exceeds ``S * total_epochs`` would stop early without saying so (the maze
recipe once stopped at 1,170 of its 20,000 steps): refused at launch, naming the epochs it needs,
ceil(T / S). ``rows`` is the parquet row count; verl may drop overlong prompts at load time, so S is an upper
bound and the check never refuses a run that would reach T.
"""

from __future__ import annotations

import math
from collections import namedtuple
from pathlib import Path

StepPlan = namedtuple("StepPlan", "steps_per_epoch total_steps")


def missing_data(config, workdir: Path) -> str:
    """What a run whose training data is not under ``workdir`` lacks, and the command that makes it."""
    how = ("fgrpo-verl prepare-deepscaler --input deepscaler.json --tokenizer <model> --out-dir data/deepscaler"
           if "deepscaler" in str(config.data.train_files) else "the recipe's header says how")
    return (f"training data {config.data.train_files} not found under {workdir}: prepare it ({how}), or launch from "
            "the directory that holds it")


def positive_int(value, key: str) -> int:
    """``value`` when it is an integer >= 1 (not a bool); else a ValueError naming ``key`` and the value."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{key}={value!r}: expected an integer >= 1")
    return value


def step_plan(config, rows: int) -> StepPlan:
    """:class:`StepPlan` of ``config`` for ``rows`` training rows; ValueError when T is unreachable."""
    batch = positive_int(config.data.train_batch_size, "data.train_batch_size")
    per_epoch = rows // batch
    if per_epoch < 1:
        raise ValueError(f"data.train_batch_size={batch} is larger than the {rows} training rows: no step fits")
    epochs = positive_int(config.trainer.total_epochs, "trainer.total_epochs")
    requested = config.trainer.get("total_training_steps")
    if requested is None:
        return StepPlan(per_epoch, per_epoch * epochs)
    requested = positive_int(requested, "trainer.total_training_steps")
    if requested > per_epoch * epochs:
        raise ValueError(
            f"trainer.total_training_steps={requested} is not reachable: verl also stops after "
            f"trainer.total_epochs={epochs} epochs of {per_epoch} steps ({rows} rows // data.train_batch_size={batch})"
            f" = {per_epoch * epochs} steps; set trainer.total_epochs={math.ceil(requested / per_epoch)} (or more data)"
        )
    return StepPlan(per_epoch, requested)
