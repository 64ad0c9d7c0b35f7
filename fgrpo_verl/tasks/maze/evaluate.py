"""Held-out evaluation of a maze policy by sampling with transformers: per-maze correct counts and pass@k.

pass@k is the unbiased estimator of Chen et al. 2021 (``fgrpo_verl.pass_at_k``) over ``n`` samples
per maze at temperature ``temperature`` (paper: n = 2048 at T = 1.0 on 256 held-out mazes).
"""

from __future__ import annotations

from dataclasses import dataclass

from fgrpo_verl.pass_at_k import mean_pass_at_k
from fgrpo_verl.tasks.maze.generator import Maze, max_possible_path_length
from fgrpo_verl.tasks.maze.data import DATA_SOURCE, prompt_text
from fgrpo_verl.tasks.maze.reward import compute_score


@dataclass(frozen=True)
class MazeEval:
    n: int  # samples per maze
    correct: list[int]  # correct samples per maze
    pass_at: dict[int, float]  # k -> mean unbiased pass@k over mazes


def sample_correct_counts(model, tokenizer, prompts: list[str], truths: list, score, n: int, max_new_tokens: int,
                          temperature: float = 1.0, batch_size: int = 256, seed: int = 0) -> list[int]:
    """For each prompt, how many of ``n`` responses sampled with transformers' ``generate`` get
    ``score(response, truth) == 1`` (the maze's exact match here, the rare-mode task's answer check there). All
    prompts must have one length (true of either task), so no padding is needed."""
    import torch

    torch.manual_seed(seed)
    encoded = [tokenizer.encode(p, add_special_tokens=False) for p in prompts]
    jobs = [i for i in range(len(prompts)) for _ in range(n)]  # one row per (prompt, sample)
    correct = [0] * len(prompts)
    model.eval()
    with torch.no_grad():
        for start in range(0, len(jobs), batch_size):
            chunk = jobs[start : start + batch_size]
            ids = torch.tensor([encoded[i] for i in chunk])
            out = model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                do_sample=True,
                temperature=temperature,
                top_k=0,
                top_p=1.0,
                max_new_tokens=max_new_tokens,
                eos_token_id=tokenizer.eos_token_id,
                pad_token_id=tokenizer.pad_token_id,
            )
            for row, i in zip(out[:, ids.shape[1] :], chunk):
                correct[i] += int(score(tokenizer.decode(row.tolist(), skip_special_tokens=True), truths[i]) == 1.0)
    return correct


def evaluate(model, tokenizer, mazes: list[Maze], n: int, ks: list[int], temperature: float = 1.0, batch_size: int = 256, seed: int = 0) -> MazeEval:
    """Sample ``n`` responses per maze and return the counts and mean pass@k for each k in ``ks`` (k <= n)."""
    correct = sample_correct_counts(
        model, tokenizer, [prompt_text(m) for m in mazes], [m.path for m in mazes],
        lambda text, truth: compute_score(DATA_SOURCE, text, truth), n, max_possible_path_length(mazes[0].size) + 1,
        temperature, batch_size, seed,
    )
    return MazeEval(n=n, correct=correct, pass_at={k: mean_pass_at_k(n, correct, k) for k in ks})
