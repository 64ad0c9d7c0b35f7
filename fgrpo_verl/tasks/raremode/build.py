"""Build the rare-mode task into one directory: data, tokenizer, a random-init tiny Qwen2, and ``build.json``.

Layout of ``out_dir``: ``data/{train,val}.parquet`` (verl RL datasets, held-out = "val"; the maze task's columns:
``reward_model.ground_truth`` is the string of the prompt's correct symbols, ``extra_info`` carries the split, the
index and the anchor symbol), ``init_model/`` (a complete HF model dir; the maze's model presets, since both
tokenizers have 32 ids), ``build.json``. The fields of ``fgrpo_verl.tasks.maze.build.TaskBuild`` are the ones the
verl run overrides read (``fgrpo_verl.tasks.maze.rl.maze_overrides`` is task-agnostic apart from reward and project).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fgrpo_verl.data.records import write_rows
from fgrpo_verl.tasks.maze.build import TaskBuild, write_task_dir
from fgrpo_verl.tasks.maze.data import Splits
from fgrpo_verl.tasks.raremode.generator import RarePrompt, build_tokenizer, generate_split

DATA_SOURCE = "raremode"
# one symbol and the termination token: any other 2-token response is wrong, and nothing longer is possible
MAX_RESPONSE_LENGTH = 2


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


@dataclass(frozen=True)
class RareBuild(TaskBuild):
    k: int


def build(out_dir, k: int = 4, n_train: int = 2000, n_val: int = 128, model_preset: str = "tiny", seed: int = 0) -> tuple[RareBuild, Splits]:
    splits = make_splits(k, n_train, n_val, seed)
    result = RareBuild(**write_task_dir(Path(out_dir), splits, write_parquet, build_tokenizer(), splits.train[0].text,
                                        model_preset, seed), k=k, max_response_length=MAX_RESPONSE_LENGTH)
    result.save()
    return result, splits
