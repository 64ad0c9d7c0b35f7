"""Bare-torch GRPO / F-GRPO on the rare-mode task: the same algorithm as the demo's verl runs, without verl.

The measurement behind docs/raremode.md's bare-torch sections (the regime, the large-N diagnostic): a script, not
part of the package. Import it (``importlib``, as tests/test_raremode_on_cpu.py does) and call :func:`run`. One step:
draw ``batch_size`` train prompts, sample N responses each at T = 1 (a symbol, then one more token: the response
ends after the termination token or after ``max_response_length`` = 2 tokens), reward 1 iff the response is a
prompt symbol followed by the termination token, advantages from ``fgrpo_verl.focal.compute_focal_advantage``
(the estimator verl runs: GRPO std normalisation, times g = (1 - mu_hat)^gamma), token-mean policy-gradient loss
(on-policy, one update per step: PPO's ratio is 1), AdamW (weight decay 0.01) with grad-norm clip 1.0 as verl's
actor defaults.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class ProtoSettings:
    steps: int = 30
    batch_size: int = 16
    n: int = 8
    lr: float = 1e-4
    gamma: float = 0.0
    seed: int = 0


def sample_responses(model, prompt_ids, n: int, eos: int, generator):
    """(rows, 2) sampled token ids (second column = eos padding when the first token is eos) and the mask."""
    import torch

    ids = torch.tensor(prompt_ids).repeat_interleave(n, dim=0)
    with torch.no_grad():
        first = torch.multinomial(torch.softmax(model(input_ids=ids).logits[:, -1].float(), -1), 1, generator=generator)
        second = torch.multinomial(
            torch.softmax(model(input_ids=torch.cat([ids, first], 1)).logits[:, -1].float(), -1), 1, generator=generator
        )
    ended = first[:, 0] == eos
    second = torch.where(ended[:, None], torch.full_like(second, eos), second)
    mask = torch.stack([torch.ones_like(ended), ~ended], 1).float()
    return ids, torch.cat([first, second], 1), mask


def run(model, tokenizer, train, settings: ProtoSettings, on_step=None):
    """Train ``model`` in place; ``on_step(step, model)`` is called after every update (and at step 0)."""
    import torch

    from fgrpo_verl.focal import FocalSettings, compute_focal_advantage

    eos = tokenizer.eos_token_id
    focal = FocalSettings(gamma=settings.gamma, success_threshold=0.5, smoothing_alpha=0.0, base="grpo")
    rng = random.Random(f"{settings.seed}:proto")
    gen = torch.Generator().manual_seed(settings.seed)
    optim = torch.optim.AdamW(model.parameters(), lr=settings.lr, weight_decay=0.01)
    symbols = {p: set(tokenizer.convert_tokens_to_ids(list(p.correct))) for p in train}
    if on_step:
        on_step(0, model)
    for step in range(1, settings.steps + 1):
        batch = [train[rng.randrange(len(train))] for _ in range(settings.batch_size)]
        prompt_ids = [tokenizer.encode(p.text, add_special_tokens=False) for p in batch]
        model.eval()
        ids, resp, mask = sample_responses(model, prompt_ids, settings.n, eos, gen)
        owner = [p for p in batch for _ in range(settings.n)]
        reward = torch.tensor([float(int(r[0]) in symbols[p] and int(r[1]) == eos) for r, p in zip(resp, owner)])
        token_reward = torch.zeros_like(mask)
        token_reward[torch.arange(len(reward)), mask.sum(1).long() - 1] = reward
        index = [str(i // settings.n) for i in range(len(reward))]
        adv = compute_focal_advantage(token_reward, mask, index, focal).advantages
        model.train()
        logits = model(input_ids=torch.cat([ids, resp], 1)).logits[:, ids.shape[1] - 1 : -1].float()
        logp = torch.log_softmax(logits, -1).gather(-1, resp[..., None])[..., 0]
        loss = -(adv * logp * mask).sum() / mask.sum()
        optim.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optim.step()
        if on_step:
            on_step(step, model)
    model.eval()
