"""SFT warm start of the rare-mode policy on answers drawn from the skewed warm-start distribution.

Each step draws ``batch_size`` train prompts and, for each, a fresh answer from
``generator.warm_start_distribution`` (anchor / rare / incorrect), then minimises next-token cross-entropy of the
answer and the termination token (prompt positions unlabelled). The fitted policy approximates that
distribution on unseen prompts, which gives the RL phase an anchor correct answer, rare correct answers, and
incorrect mass. Plain torch AdamW with a constant learning rate.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from fgrpo_verl.tasks.raremode.generator import RarePrompt, WarmStart, sample_warm_answer
from fgrpo_verl.tasks.raremode.tokenizer import SYMBOLS


@dataclass(frozen=True)
class SFTConfig:
    steps: int = 300
    batch_size: int = 64
    lr: float = 3e-3
    seed: int = 0

    def __post_init__(self):
        for name in ("steps", "batch_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"SFTConfig.{name} must be an int >= 1, got {v!r}")
        if not (isinstance(self.lr, (int, float)) and self.lr > 0):
            raise ValueError(f"SFTConfig.lr must be > 0, got {self.lr!r}")


def sft(model, tokenizer, prompts: list[RarePrompt], warm: WarmStart, config: SFTConfig) -> list[float]:
    """Train ``model`` in place; returns per-step losses. All prompts have one length, so no padding."""
    import torch

    rng = random.Random(f"{config.seed}:sft")
    prompt_ids = [tokenizer.encode(p.text, add_special_tokens=False) for p in prompts]
    eos = tokenizer.eos_token_id
    symbol_id = {s: tokenizer.convert_tokens_to_ids(s) for s in SYMBOLS}
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=0.0)
    model.train()
    losses = []
    for _ in range(config.steps):
        idx = [rng.randrange(len(prompts)) for _ in range(config.batch_size)]
        rows = [prompt_ids[i] + [symbol_id[sample_warm_answer(prompts[i], warm, rng)], eos] for i in idx]
        ids = torch.tensor(rows)
        labels = torch.full_like(ids, -100)
        labels[:, -2:] = ids[:, -2:]
        loss = model(input_ids=ids, labels=labels).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    model.eval()
    return losses
