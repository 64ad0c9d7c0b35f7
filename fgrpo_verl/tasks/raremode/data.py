"""Train / held-out parquet files in verl's RL dataset format (same columns as the maze task's ``data.py``).

``reward_model.ground_truth`` is the string of the prompt's correct symbols; ``extra_info`` carries the split,
the index and the anchor symbol.
"""

from __future__ import annotations

from pathlib import Path

from fgrpo_verl.data.records import write_rows
from fgrpo_verl.tasks.maze.data import Splits
from fgrpo_verl.tasks.raremode.generator import RarePrompt, generate_split

DATA_SOURCE = "raremode"


def prompt_row(prompt: RarePrompt, split: str, index: int) -> dict:
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": prompt.text}],
        "ability": "rare_mode",
        "reward_model": {"style": "rule", "ground_truth": "".join(prompt.correct)},
        "extra_info": {"split": split, "index": index, "anchor": prompt.symbols[0]},
    }


def make_splits(k: int, n_train: int, n_val: int, seed: int) -> Splits:
    val = generate_split(k, n_val, seed, "val")
    train = generate_split(k, n_train, seed, "train", exclude=frozenset(p.symbols for p in val))
    return Splits(train=train, val=val)


def write_parquet(prompts: list[RarePrompt], split: str, path: str | Path) -> Path:
    return write_rows([prompt_row(p, split, i) for i, p in enumerate(prompts)], path)
