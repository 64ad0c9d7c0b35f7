"""Build the rare-mode task into one directory: data, tokenizer, a random-init tiny Qwen2, and ``build.json``.

Layout of ``out_dir``: ``data/{train,val}.parquet`` (verl RL datasets, held-out = "val"), ``init_model/`` (a
complete HF model dir; the maze's model presets, since both tokenizers have 32 ids), ``build.json``. The fields
``train_file``, ``val_file``, ``n_val``, ``prompt_length`` and ``max_response_length`` are the ones the verl run
overrides read (``fgrpo_verl.tasks.maze.rl.maze_overrides`` is task-agnostic apart from reward and project).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from fgrpo_verl.tasks.maze.data import Splits
from fgrpo_verl.tasks.maze.model import build_model, save_model_dir
from fgrpo_verl.tasks.raremode.data import make_splits, write_parquet
from fgrpo_verl.tasks.raremode.tokenizer import build_tokenizer

# one symbol and the termination token: any other 2-token response is wrong, and nothing longer is possible
MAX_RESPONSE_LENGTH = 2


@dataclass(frozen=True)
class RareBuild:
    out_dir: str
    train_file: str
    val_file: str
    model_dir: str
    k: int
    n_train: int
    n_val: int
    model_preset: str
    seed: int
    prompt_length: int
    max_response_length: int = MAX_RESPONSE_LENGTH

    def save(self) -> None:
        Path(self.out_dir, "build.json").write_text(json.dumps(asdict(self), indent=2))


def build(out_dir, k: int = 4, n_train: int = 2000, n_val: int = 128, model_preset: str = "tiny", seed: int = 0) -> tuple[RareBuild, Splits]:
    out = Path(out_dir)
    splits = make_splits(k, n_train, n_val, seed)
    tokenizer = build_tokenizer()
    result = RareBuild(
        out_dir=str(out),
        train_file=str(write_parquet(splits.train, "train", out / "data" / "train.parquet")),
        val_file=str(write_parquet(splits.val, "val", out / "data" / "val.parquet")),
        model_dir=str(save_model_dir(build_model(model_preset, tokenizer, seed), tokenizer, out / "init_model")),
        k=k,
        n_train=n_train,
        n_val=n_val,
        model_preset=model_preset,
        seed=seed,
        prompt_length=len(tokenizer.encode(splits.train[0].text, add_special_tokens=False)),
    )
    result.save()
    return result, splits
