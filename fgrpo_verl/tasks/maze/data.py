"""Train / held-out parquet files in verl's RL dataset format (``verl.utils.dataset.rl_dataset.RLHFDataset``).

Columns: ``data_source`` ("maze", selects the reward via ``data.reward_fn_key``), ``prompt`` (list of chat
messages; verl applies the tokenizer's chat template, ours concatenates), ``ability``, ``reward_model``
({"style": "rule", "ground_truth": <action string>}), ``extra_info`` ({"split", "index", "size", "maze",
"path_length"}; ``index`` is what verl reports per sample, ``maze`` feeds the ``reach`` reward rule).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fgrpo_verl.data.records import write_rows
from fgrpo_verl.tasks.maze.generator import Maze, generate_split
from fgrpo_verl.tasks.maze.prompt import DATA_SOURCE, prompt_messages, prompt_text

ABILITY = "maze_navigation"


def maze_row(maze: Maze, split: str, index: int) -> dict:
    """One parquet row for ``maze``."""
    return {
        "data_source": DATA_SOURCE,
        "prompt": prompt_messages(maze),
        "ability": ABILITY,
        "reward_model": {"style": "rule", "ground_truth": maze.path},
        "extra_info": {
            "split": split,
            "index": index,
            "size": maze.size,
            "maze": prompt_text(maze),
            "path_length": len(maze.path),
        },
    }


@dataclass(frozen=True)
class Splits:
    """A task's train and held-out items (mazes here, prompts in the rare-mode task)."""

    train: list
    val: list


def make_splits(size: int, n_train: int, n_val: int, seed: int) -> Splits:
    """Held-out mazes first, then train mazes from another seed stream with every held-out maze excluded."""
    val = generate_split(size, n_val, seed, "val")
    train = generate_split(size, n_train, seed, "train", exclude={m.key() for m in val})
    return Splits(train=train, val=val)


def write_parquet(mazes: list[Maze], split: str, path: str | Path) -> Path:
    return write_rows([maze_row(m, split, i) for i, m in enumerate(mazes)], path)
