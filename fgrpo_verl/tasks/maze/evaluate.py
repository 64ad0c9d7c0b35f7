"""Held-out evaluation of a maze policy by sampling with transformers: per-maze correct counts and pass@k.

pass@k is the unbiased estimator of Chen et al. 2021 (``fgrpo_verl.pass_at_k``) over ``n`` samples
per maze at temperature ``temperature`` (paper: n = 2048 at T = 1.0 on 256 held-out mazes).
"""

from __future__ import annotations

from dataclasses import dataclass

from fgrpo_verl.tasks.maze.generator import Maze, max_possible_path_length
from fgrpo_verl.tasks.maze.prompt import DATA_SOURCE, prompt_text
from fgrpo_verl.tasks.maze.reward import compute_score


@dataclass(frozen=True)
class MazeEval:
    n: int  # samples per maze
    correct: list[int]  # correct samples per maze
    pass_at: dict[int, float]  # k -> mean unbiased pass@k over mazes


def sample_correct_counts(model, tokenizer, mazes: list[Maze], n: int, temperature: float = 1.0, batch_size: int = 256, seed: int = 0) -> list[int]:
    """For each maze, how many of ``n`` sampled responses score 1 under the exact-match reward."""
    import torch

    if n < 1 or batch_size < 1:
        raise ValueError(f"n and batch_size must be >= 1, got n={n!r}, batch_size={batch_size!r}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")
    size = mazes[0].size
    max_new = max_possible_path_length(size) + 1
    torch.manual_seed(seed)
    # one row per (maze, sample); all prompts of one size have the same length, so no padding is needed
    jobs = [i for i in range(len(mazes)) for _ in range(n)]
    correct = [0] * len(mazes)
    model.eval()
    with torch.no_grad():
        for start in range(0, len(jobs), batch_size):
            chunk = jobs[start : start + batch_size]
            ids = torch.tensor([tokenizer.encode(prompt_text(mazes[i]), add_special_tokens=False) for i in chunk])
            out = model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                do_sample=True,
                temperature=temperature,
                top_k=0,
                top_p=1.0,
                max_new_tokens=max_new,
                eos_token_id=tokenizer.eos_token_id,
                pad_token_id=tokenizer.pad_token_id,
            )
            for row, i in zip(out[:, ids.shape[1] :], chunk):
                text = tokenizer.decode(row.tolist(), skip_special_tokens=True)
                correct[i] += int(compute_score(DATA_SOURCE, text, mazes[i].path) == 1.0)
    return correct


def evaluate(model, tokenizer, mazes: list[Maze], n: int, ks: list[int], temperature: float = 1.0, batch_size: int = 256, seed: int = 0) -> MazeEval:
    """Sample ``n`` responses per maze and return the counts and mean pass@k for each k in ``ks`` (k <= n)."""
    from fgrpo_verl.pass_at_k import mean_pass_at_k

    correct = sample_correct_counts(model, tokenizer, mazes, n, temperature, batch_size, seed)
    return MazeEval(n=n, correct=correct, pass_at={k: mean_pass_at_k(n, correct, k) for k in ks})
