"""Batched autoregressive sampling from a transformers causal LM, with the log-prob of every sampled token.

For one decoding step of row b with logits z (vocabulary V), temperature T > 0, top-k K and top-p P:

    log π(v)  = log_softmax(z / T)_v                         the log-prob that is returned
    keep(v)   = rank(v) < K  and  Σ_{u ranked before v} softmax(z/T)_u < P     (the best token is always kept)
    v ~ softmax(z / T) restricted to keep(v)

The returned log-probs are those of the *untruncated* temperature-scaled distribution, which is exactly what
verl's actor recomputes (``log_softmax(logits / rollout temperature)``), so ``training/rollout_probs_diff_*``
measures only numerical differences between the two forward passes (KV-cached decode vs full sequence).
T = 0 means greedy decoding; its log-prob is taken from the T = 1 distribution.

Prompts of different lengths are left-padded into one batch (attention mask + explicit position ids), and
each row stops independently at a stop token or at its own ``max_tokens``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

# Request keys we accept from verl's agent loop and what they mean here.
_SUPPORTED_KEYS = (
    "temperature", "top_p", "top_k", "max_tokens", "max_new_tokens", "logprobs", "repetition_penalty",
    "ignore_eos", "stop_token_ids",
)


@dataclass(frozen=True)
class SamplingParams:
    """Validated per-request sampling settings."""

    temperature: float
    top_p: float
    top_k: int  # <= 0: no top-k cut
    max_tokens: int
    stop_token_ids: frozenset[int]

    @classmethod
    def from_request(cls, params: dict, default_max_tokens: int, eos_token_ids: frozenset[int]) -> "SamplingParams":
        """Parse verl's ``sampling_params`` dict (vLLM-style keys); reject what this backend cannot honour."""
        unknown = sorted(set(params) - set(_SUPPORTED_KEYS))
        if unknown:
            raise ValueError(
                f"sampling_params has unsupported key(s) {unknown} for the hf rollout; supported: {list(_SUPPORTED_KEYS)}"
            )
        rep = params.get("repetition_penalty", 1.0)
        if rep is not None and float(rep) != 1.0:
            raise ValueError(f"sampling_params.repetition_penalty={rep!r} is not supported by the hf rollout: use 1.0")
        temperature = float(params.get("temperature", 1.0))
        if not math.isfinite(temperature) or temperature < 0:
            raise ValueError(f"sampling_params.temperature={temperature!r} is invalid: expected a finite number >= 0")
        top_p = float(params.get("top_p", 1.0))
        if not (0.0 < top_p <= 1.0):
            raise ValueError(f"sampling_params.top_p={top_p!r} is invalid: expected 0 < top_p <= 1")
        top_k = -1 if params.get("top_k") is None else params["top_k"]
        if isinstance(top_k, bool) or int(top_k) != top_k or (top_k == 0):
            raise ValueError(f"sampling_params.top_k={top_k!r} is invalid: expected -1 (off) or an integer >= 1")
        max_tokens = params.get("max_tokens", params.get("max_new_tokens", default_max_tokens))
        if isinstance(max_tokens, bool) or int(max_tokens) != max_tokens or max_tokens < 1:
            raise ValueError(f"sampling_params.max_tokens={max_tokens!r} is invalid: expected an integer >= 1")
        stops = frozenset() if params.get("ignore_eos", False) else frozenset(eos_token_ids)
        stops |= frozenset(int(t) for t in (params.get("stop_token_ids") or ()))
        return cls(temperature=temperature, top_p=top_p, top_k=int(top_k), max_tokens=int(max_tokens),
                   stop_token_ids=stops)


@dataclass
class SampleResult:
    token_ids: list[int]
    log_probs: list[float]
    finish_reason: str  # "stop" (a stop token was sampled, and is included) or "length"


def _choose_tokens(logits: torch.Tensor, params: list[SamplingParams], generator: torch.Generator | None):
    """One decoding step for the batch: returns (tokens (B,), log-probs (B,)) following the module docstring."""
    logits = logits.float()
    batch, vocab = logits.shape
    temps = torch.tensor([p.temperature if p.temperature > 0 else 1.0 for p in params], dtype=logits.dtype,
                         device=logits.device)
    log_probs = torch.log_softmax(logits / temps[:, None], dim=-1)
    greedy = torch.tensor([p.temperature == 0 for p in params], device=logits.device)

    sorted_logp, order = log_probs.sort(dim=-1, descending=True)
    ranks = torch.arange(vocab, device=logits.device)[None, :]
    top_k = torch.tensor([p.top_k if p.top_k > 0 else vocab for p in params], device=logits.device)
    top_p = torch.tensor([p.top_p for p in params], dtype=logits.dtype, device=logits.device)
    probs_sorted = sorted_logp.exp()
    mass_before = probs_sorted.cumsum(dim=-1) - probs_sorted
    keep = (ranks < top_k[:, None]) & (mass_before < top_p[:, None])
    keep[:, 0] = True
    weights = torch.where(keep, probs_sorted, torch.zeros_like(probs_sorted))
    picked_rank = torch.multinomial(weights, 1, generator=generator).squeeze(-1)
    sampled = order.gather(-1, picked_rank[:, None]).squeeze(-1)
    tokens = torch.where(greedy, order[:, 0], sampled)
    return tokens, log_probs.gather(-1, tokens[:, None]).squeeze(-1)


@torch.no_grad()
def sample_batch(
    model,
    prompts: list[list[int]],
    params: list[SamplingParams],
    pad_token_id: int,
    generator: torch.Generator | None = None,
) -> list[SampleResult]:
    """Sample one continuation per prompt (rows may differ in length and settings)."""
    if len(prompts) != len(params):
        raise ValueError(f"got {len(prompts)} prompts but {len(params)} sampling params")
    if not prompts:
        return []
    if any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token")
    device = next(model.parameters()).device
    batch = len(prompts)
    width = max(len(p) for p in prompts)
    input_ids = torch.full((batch, width), pad_token_id, dtype=torch.long, device=device)
    attention = torch.zeros((batch, width), dtype=torch.long, device=device)
    for row, prompt in enumerate(prompts):
        input_ids[row, width - len(prompt):] = torch.tensor(prompt, dtype=torch.long, device=device)
        attention[row, width - len(prompt):] = 1
    positions = (attention.cumsum(-1) - 1).clamp(min=0)

    out = model(input_ids=input_ids, attention_mask=attention, position_ids=positions, use_cache=True)
    past, logits = out.past_key_values, out.logits[:, -1, :]
    next_pos = positions[:, -1] + 1

    results = [SampleResult([], [], "length") for _ in prompts]
    active = [True] * batch
    for step in range(max(p.max_tokens for p in params)):
        tokens, logps = _choose_tokens(logits, params, generator)
        # one conversion per step: per-element tensor indexing costs microseconds per row
        token_list, logp_list = tokens.tolist(), logps.tolist()
        for row in range(batch):
            if not active[row]:
                continue
            token = token_list[row]
            results[row].token_ids.append(token)
            results[row].log_probs.append(logp_list[row])
            if token in params[row].stop_token_ids:
                results[row].finish_reason = "stop"
                active[row] = False
            elif len(results[row].token_ids) >= params[row].max_tokens:
                active[row] = False
        if not any(active):
            break
        # Finished rows keep decoding (their outputs are ignored) so the batch stays rectangular.
        attention = torch.cat([attention, torch.ones((batch, 1), dtype=attention.dtype, device=device)], dim=-1)
        out = model(input_ids=tokens[:, None], attention_mask=attention, position_ids=next_pos[:, None],
                    past_key_values=past, use_cache=True)
        past, logits = out.past_key_values, out.logits[:, -1, :]
        next_pos = next_pos + 1
    return results
