"""Build everything the maze task needs into one directory: data, tokenizer and an initial model.

Layout of ``out_dir``::

    data/train.parquet, data/val.parquet   verl RL datasets (held-out = "val")
    init_model/                            random-init Qwen2 + tokenizer (a complete HF model dir)
    build.json                             the arguments and derived lengths (prompt / longest path)
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from fgrpo_verl.tasks.maze.data import Splits, make_splits, prompt_text, write_parquet
from fgrpo_verl.tasks.maze.generator import max_possible_path_length
from fgrpo_verl.tasks.maze.model import build_model, save_model_dir
from fgrpo_verl.tasks.maze.tokenizer import build_tokenizer


@dataclass(frozen=True)
class TaskBuild:
    """A task directory as ``build.json`` records it. These fields are the ones the verl run overrides read
    (``fgrpo_verl.tasks.maze.rl.maze_overrides``), the same for the maze and the rare-mode task."""

    out_dir: str
    train_file: str
    val_file: str
    model_dir: str
    n_train: int
    n_val: int
    model_preset: str
    seed: int
    prompt_length: int  # tokens in every prompt (all prompts of one task directory have the same length)
    max_response_length: int  # data.max_response_length

    def save(self) -> None:
        Path(self.out_dir, "build.json").write_text(json.dumps(asdict(self), indent=2))


def write_task_dir(out: Path, splits: Splits, write_split, tokenizer, first_prompt: str, model_preset: str,
                   seed: int) -> dict:
    """data/{train,val}.parquet (``write_split(items, split, path)``) and init_model/ into ``out``: the fields of a
    :class:`TaskBuild` they fix."""
    model = build_model(model_preset, tokenizer, seed)
    return dict(out_dir=str(out), train_file=str(write_split(splits.train, "train", out / "data" / "train.parquet")),
                val_file=str(write_split(splits.val, "val", out / "data" / "val.parquet")),
                model_dir=str(save_model_dir(model, tokenizer, out / "init_model")), n_train=len(splits.train),
                n_val=len(splits.val), model_preset=model_preset, seed=seed,
                prompt_length=len(tokenizer.encode(first_prompt, add_special_tokens=False)))


@dataclass(frozen=True)
class MazeBuild(TaskBuild):
    size: int
    max_path_length: int  # longest target action sequence over train and held-out
    # max_response_length: a data.max_response_length that no unterminated response can pass at: longer than any
    # path this size can have (c x c cells: at most 2c^2 - 1 open squares, so at most 2c^2 - 2 moves), plus the
    # <|endoftext|> token


def build(out_dir, size: int = 17, n_train: int = 10000, n_val: int = 256, model_preset: str = "paper", seed: int = 0) -> MazeBuild:
    """Write train/held-out parquet files and a random-init model dir into ``out_dir``; returns a :class:`MazeBuild`."""
    return build_with_splits(out_dir, size, n_train, n_val, model_preset, seed)[0]


def build_with_splits(out_dir, size: int = 17, n_train: int = 10000, n_val: int = 256, model_preset: str = "paper", seed: int = 0) -> tuple[MazeBuild, Splits]:
    """:func:`build`, also returning the generated mazes (the demo's SFT and evaluation use them directly)."""
    splits = make_splits(size, n_train, n_val, seed)
    result = MazeBuild(
        **write_task_dir(Path(out_dir), splits, write_parquet, build_tokenizer(), prompt_text(splits.train[0]),
                         model_preset, seed),
        size=size, max_path_length=max(len(m.path) for m in splits.train + splits.val),
        max_response_length=max_possible_path_length(size) + 1,
    )
    result.save()
    return result, splits
