"""ΔNLL_rare (paper App. M.2): how far a trained checkpoint moved away from the base model's rare correct answers.

    1. Roll out the base model on training prompts (paper: 256 prompts x 800 rollouts) and keep the correct ones.
    2. For each kept trajectory y with prompt x, its length-normalised NLL under the base model,
           NLL(y | x) = -(1 / |y|) * sum_t log pi_base(y_t | x, y_<t),
       over the completion tokens only (the prompt is conditioning; EOS is not part of the stored text).
    3. The rare set is the top ``fraction`` (paper: 1%, 1,263 trajectories) of those by base NLL; it stays fixed.
    4. For each checkpoint theta: ΔNLL_rare = mean over the rare set of [NLL_theta(y | x) - NLL_base(y | x)]
       (lower = the rare correct solutions kept more of their probability).

Token ids: prompt and completion texts are tokenised separately (no added special tokens) and concatenated, each
model with its own tokenizer; checkpoints fine-tuned from the base share its tokenizer, so every model scores
the same token sequence.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from fgrpo_verl.data.records import read_records

DEFAULT_FRACTION = 0.01


def tokenize_pairs(tokenizer, prompts: list[str], completions: list[str]) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, completion ids) per trajectory, without added special tokens."""
    ids = [list(tokenizer(text, add_special_tokens=False)["input_ids"]) for text in [*prompts, *completions]]
    return list(zip(ids[:len(prompts)], ids[len(prompts):], strict=True))


def length_normalised_nll(model, pairs, device: str = "cpu", max_tokens_per_batch: int = 16384,
                          logits_chunk: int = 1024) -> np.ndarray:
    """Mean per-token NLL of each completion given its prompt under ``model`` (a HF causal LM).

    Sequences are sorted by length and packed into right-padded batches of at most ``max_tokens_per_batch``
    tokens (padding never influences earlier positions of a causal LM). Cross-entropy is taken over
    ``logits_chunk`` positions at a time so a 150k vocabulary at 8k tokens does not need a float32 copy of all
    logits at once.
    """
    import torch
    import torch.nn.functional as F

    if any(len(c) == 0 for _, c in pairs):
        raise ValueError("every completion must have at least one token (empty completions have no NLL)")
    if any(len(p) == 0 for p, _ in pairs):
        raise ValueError("every prompt must have at least one token")
    lengths = np.array([len(p) + len(c) for p, c in pairs])
    order = np.argsort(lengths, kind="stable")
    result = np.empty(len(pairs), dtype=np.float64)
    start = 0
    while start < len(order):
        end = start + 1
        while end < len(order) and lengths[order[end]] * (end + 1 - start) <= max_tokens_per_batch:
            end += 1
        idx = order[start:end]
        width = int(lengths[idx].max())
        ids = torch.zeros((len(idx), width), dtype=torch.long)
        attention = torch.zeros_like(ids)
        target_mask = torch.zeros((len(idx), width - 1), dtype=torch.bool)
        for row, i in enumerate(idx):
            p, c = pairs[i]
            seq = p + c
            ids[row, : len(seq)] = torch.tensor(seq)
            attention[row, : len(seq)] = 1
            # logits at position t predict token t+1: completion tokens are targets len(p)..len(seq)-1
            target_mask[row, len(p) - 1 : len(seq) - 1] = True
        ids, attention, target_mask = ids.to(device), attention.to(device), target_mask.to(device)
        with torch.no_grad():
            logits = model(input_ids=ids, attention_mask=attention).logits
            nll_sum = torch.zeros(len(idx), dtype=torch.float64, device=device)
            for s in range(0, width - 1, logits_chunk):
                e = min(width - 1, s + logits_chunk)
                ce = F.cross_entropy(logits[:, s:e].float().transpose(1, 2), ids[:, s + 1 : e + 1], reduction="none")
                nll_sum += (ce * target_mask[:, s:e]).sum(dim=1, dtype=torch.float64)
        counts = target_mask.sum(dim=1).to(torch.float64)
        result[idx] = (nll_sum / counts).cpu().numpy()
        start = end
    return result


def select_rare(nll: np.ndarray, fraction: float = DEFAULT_FRACTION) -> np.ndarray:
    """Indices of the ceil(fraction * len) highest-NLL trajectories (ties broken by input order), highest first."""
    if not (isinstance(fraction, float) and 0.0 < fraction <= 1.0):
        raise ValueError(f"fraction must be a float in (0, 1], got {fraction!r}")
    nll = np.asarray(nll, dtype=np.float64)  # one NLL per trajectory, at least one (build_rare_set)
    count = max(1, math.ceil(fraction * nll.size - 1e-9))
    return np.argsort(-nll, kind="stable")[:count]


@dataclass
class RareTrajectory:
    run: str
    benchmark: str
    problem_id: str
    sample: int            # index of the completion in its generation line
    prompt: str
    completion: str
    base_nll: float


def correct_trajectories(records) -> list[tuple[object, int]]:
    """(record, sample index) of every correct completion; records need 'prompt', 'completions', 'correct'."""
    out = []
    for rec in records:
        if rec.correct is None or rec.completions is None or not isinstance(rec.prompt, str):
            raise ValueError(f"rollout line {rec.key} needs 'prompt' (the exact text), 'completions' and 'correct'; "
                             "write them with `fgrpo-verl eval --model base=PATH --bench train=FILE` "
                             "(generations.jsonl)")
        out.extend((rec, i) for i, ok in enumerate(rec.correct) if ok)
    if not out:
        raise ValueError("the rollouts hold no correct completion; the rare set would be empty")
    return out


def build_rare_set(records, base_model, base_tokenizer, fraction: float = DEFAULT_FRACTION, device: str = "cpu",
                   max_tokens_per_batch: int = 16384) -> tuple[list[RareTrajectory], dict]:
    """Steps 1-3: the fixed rare set (highest base NLL first) and statistics of the candidate pool."""
    candidates = correct_trajectories(records)
    pairs = tokenize_pairs(base_tokenizer, [rec.prompt for rec, _ in candidates],
                           [rec.completions[i] for rec, i in candidates])
    # An empty completion (EOS straight away) has no token to score; it is counted and left out.
    nonempty = [j for j, (_, c) in enumerate(pairs) if c]
    if not nonempty:
        raise ValueError("every correct completion is empty; no NLL can be computed")
    kept = [candidates[j] for j in nonempty]
    nll = length_normalised_nll(base_model, [pairs[j] for j in nonempty], device, max_tokens_per_batch)
    chosen = select_rare(nll, fraction)
    rare = [RareTrajectory(run=kept[j][0].run, benchmark=kept[j][0].benchmark, problem_id=kept[j][0].problem_id,
                           sample=int(kept[j][1]), prompt=kept[j][0].prompt,
                           completion=kept[j][0].completions[kept[j][1]], base_nll=float(nll[j])) for j in chosen]
    stats = dict(correct_trajectories=len(kept), skipped_empty=len(candidates) - len(kept), rare_trajectories=len(rare), fraction=fraction,
                 base_nll_mean_all=float(nll.mean()), base_nll_threshold=float(nll[chosen].min()))
    return rare, stats


def delta_nll(rare: list[RareTrajectory], model, tokenizer, device: str = "cpu",
              max_tokens_per_batch: int = 16384) -> dict:
    """Step 4 for one checkpoint: mean/median NLL change on the fixed rare set."""
    if not rare:
        raise ValueError("the rare set is empty")
    pairs = tokenize_pairs(tokenizer, [r.prompt for r in rare], [r.completion for r in rare])
    nll = length_normalised_nll(model, pairs, device, max_tokens_per_batch)
    base = np.array([r.base_nll for r in rare])
    diff = nll - base
    return dict(num_trajectories=len(rare), base_nll=float(base.mean()), nll=float(nll.mean()),
                delta_nll=float(diff.mean()), median_delta_nll=float(np.median(diff)),
                share_increased=float(np.mean(diff > 0)))


def write_rare_set(path: Path, rare: list[RareTrajectory], stats: dict) -> None:
    lines = [{"_stats": stats}, *map(asdict, rare)]
    Path(path).write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8")


def read_rare_set(path: Path) -> tuple[list[RareTrajectory], dict]:
    lines = read_records(path, f"--rare-set {path}")  # JSONL whose completions may hold U+2028 and the like
    if not lines or "_stats" not in lines[0]:
        raise ValueError(f"{path}: not a rare set written by `fgrpo-verl rare-nll` (first line must hold _stats)")
    fields = set(RareTrajectory.__dataclass_fields__)
    rare = []
    for lineno, obj in enumerate(lines[1:], 2):
        if set(obj) != fields:
            raise ValueError(f"{path}:{lineno}: expected keys {sorted(fields)}, got {sorted(obj)}")
        rare.append(RareTrajectory(**obj))
    return rare, lines[0]["_stats"]
