"""SFT warm start of the rare-mode policy on answers drawn from the skewed warm-start distribution.

Each step draws ``batch_size`` train prompts and, for each, a fresh answer from
``generator.warm_start_distribution`` (anchor / rare / incorrect), then minimises next-token cross-entropy of the
answer and the termination token (prompt positions unlabelled). The fitted policy approximates that
distribution on unseen prompts, which gives the RL phase an anchor correct answer, rare correct answers, and
incorrect mass. The maze's loop and config (``fgrpo_verl.tasks.maze.sft``), with a constant learning rate.
"""

from __future__ import annotations

import random

from fgrpo_verl.tasks.maze.sft import SFTConfig, train_steps
from fgrpo_verl.tasks.raremode.generator import SYMBOLS, RarePrompt, WarmStart, sample_warm_answer

__all__ = ["SFTConfig", "sft"]


def sft(model, tokenizer, prompts: list[RarePrompt], warm: WarmStart, config: SFTConfig) -> list[float]:
    """Train ``model`` in place; returns per-step losses. All prompts have one length, so no padding."""
    import torch

    rng = random.Random(f"{config.seed}:sft")
    prompt_ids = [tokenizer.encode(p.text, add_special_tokens=False) for p in prompts]
    eos = tokenizer.eos_token_id
    symbol_id = {s: tokenizer.convert_tokens_to_ids(s) for s in SYMBOLS}

    def next_batch():
        idx = [rng.randrange(len(prompts)) for _ in range(config.batch_size)]
        ids = torch.tensor([prompt_ids[i] + [symbol_id[sample_warm_answer(prompts[i], warm, rng)], eos] for i in idx])
        labels = torch.full_like(ids, -100)
        labels[:, -2:] = ids[:, -2:]
        return ids, labels

    return train_steps(model, next_batch, config)
