"""Supervised warm start of the maze policy on the target trajectories (paper §5.2, App. K).

The paper: SFT from scratch, 1,500 steps, batch 32, AdamW, lr 5e-4; it sets up the output format and gives a
non-zero pass rate before RL. This is a plain torch loop, not verl's SFT trainer: verl 0.9.1's SFT trainer runs
through ``torchrun`` and an FSDP engine that registers only for CUDA/NPU devices, so on CPU it would need the
whole CPU platform just to fit a few-hundred-thousand-parameter model for a minute; a 40-line loop is clearer.
The rare-mode task's warm start (``fgrpo_verl.tasks.raremode.generator.sft``) runs the same loop on its own batches.

Loss: next-token cross-entropy on the response tokens only (the actions and the closing ``<|endoftext|>``); prompt
positions get label -100. All prompts of one maze size have the same length, so a batch is
[prompt | response | right padding] with the padding also labelled -100.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from fgrpo_verl.tasks.maze.generator import Maze
from fgrpo_verl.tasks.maze.data import prompt_text, response_text
from fgrpo_verl.theory._checks import real_array, whole


@dataclass
class SFTConfig:
    steps: int = field(default=1500, metadata={"help": "optimizer steps (paper: 1500)"})
    batch_size: int = field(default=32, metadata={"help": "mazes per step (paper: 32)"})
    lr: float = field(default=5e-4, metadata={"help": "AdamW learning rate (paper: 5e-4)"})
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay (paper: not stated)"})
    warmup_steps: int = field(default=0, metadata={"help": "linear warm-up steps (paper: not stated)"})
    seed: int = field(default=0, metadata={"help": "seed of the batch sampler"})
    log_every: int = field(default=50, metadata={"help": "print the mean loss every this many steps (0 = never)"})

    def __post_init__(self):
        for name, low in (("steps", 1), ("batch_size", 1), ("warmup_steps", 0), ("log_every", 0)):
            whole(f"SFTConfig.{name}", getattr(self, name), low)
        real_array("SFTConfig.lr", self.lr, low=0.0, high=math.inf, low_open=True, high_open=True)
        real_array("SFTConfig.weight_decay", self.weight_decay, low=0.0, high=math.inf, high_open=True)


def train_steps(model, next_batch, config: SFTConfig) -> list[float]:
    """Train ``model`` in place for ``config.steps`` AdamW steps on ``next_batch()`` = (input_ids, labels), labels
    -100 where no loss is taken; returns the per-step losses."""
    import torch

    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / config.warmup_steps) if config.warmup_steps else 1.0
    )
    device = next(model.parameters()).device  # batches follow the model (cpu, or cuda on a GPU node)
    model.train()
    losses: list[float] = []
    for step in range(config.steps):
        input_ids, labels = next_batch()
        out = model(input_ids=input_ids.to(device), labels=labels.to(device))
        optimizer.zero_grad(set_to_none=True)
        out.loss.backward()
        optimizer.step()
        schedule.step()
        losses.append(out.loss.item())
        if config.log_every and (step + 1) % config.log_every == 0:
            recent = losses[-config.log_every :]
            print(f"sft step {step + 1}/{config.steps}  loss {sum(recent) / len(recent):.4f}", flush=True)
    model.eval()
    return losses


def encode_examples(mazes: list[Maze], tokenizer):
    """(input_ids, labels) tensors of shape (len(mazes), L): prompt + response, labels only on the response."""
    import torch

    prompts = [tokenizer.encode(prompt_text(m), add_special_tokens=False) for m in mazes]
    responses = [tokenizer.encode(response_text(m), add_special_tokens=False) for m in mazes]
    length = max(len(p) + len(r) for p, r in zip(prompts, responses))
    input_ids = torch.full((len(mazes), length), tokenizer.pad_token_id, dtype=torch.long)
    labels = torch.full((len(mazes), length), -100, dtype=torch.long)
    for i, (p, r) in enumerate(zip(prompts, responses)):
        input_ids[i, : len(p) + len(r)] = torch.tensor(p + r)
        labels[i, len(p) : len(p) + len(r)] = torch.tensor(r)
    return input_ids, labels


def sft(model, tokenizer, mazes: list[Maze], config: SFTConfig) -> list[float]:
    """Train ``model`` in place on ``mazes``' target responses; returns the per-step losses."""
    import torch

    input_ids, labels = encode_examples(mazes, tokenizer)
    sampler = torch.Generator().manual_seed(config.seed)

    def next_batch():
        idx = torch.randint(len(mazes), (config.batch_size,), generator=sampler)
        used = int((labels[idx] != -100).nonzero()[:, 1].max()) + 1  # trim the shared right padding of this batch
        return input_ids[idx, :used], labels[idx, :used]

    return train_steps(model, next_batch, config)
