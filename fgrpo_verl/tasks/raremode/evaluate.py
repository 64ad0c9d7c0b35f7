"""Evaluation of rare-mode policies: exact metrics per saved checkpoint, and sampled pass@k on held-out prompts.

Per-step exact metrics come from the checkpoints verl writes every step (``trainer.save_freq=1`` with
``actor_rollout_ref.actor.checkpoint.save_contents=[hf_model]``: a plain HF model dir per step, a few hundred kB
for the tiny policy); they are read back after the run, so nothing inside verl's trainer changes.

Sampled pass@k: ``n`` responses per held-out prompt at T = 1 (``prototype.sample_responses``, the same two-token
sampling the rollouts do), scored with the task's reward, and the unbiased estimator
``fgrpo_verl.evaluation.mean_pass_at_k``.
"""

from __future__ import annotations

from fgrpo_verl.job.checkpoints import checkpoint_dir, saved_steps
from fgrpo_verl.tasks.raremode.data import DATA_SOURCE
from fgrpo_verl.tasks.raremode.generator import RarePrompt
from fgrpo_verl.tasks.raremode.measure import Candidates, ExactMetrics, candidate_probs, exact_metrics
from fgrpo_verl.tasks.raremode.reward import compute_score


def load_policy(model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(model_dir)).eval()


def step_metrics(checkpoints, tokenizer, prompts: list[RarePrompt], base: Candidates, rare) -> dict[int, ExactMetrics]:
    """Exact metrics of every saved step (step 0, the warm start, is the caller's ``base``)."""
    steps = saved_steps(checkpoints)  # the checkpoints verl finished (its resume point) and logged
    if not steps:
        raise FileNotFoundError(f"no complete global_step_*/actor checkpoints under {checkpoints}")
    out = {0: exact_metrics(base, base, rare)}
    for step in steps:
        model = load_policy(checkpoint_dir(checkpoints, step) / "actor" / "huggingface")
        out[step] = exact_metrics(base, candidate_probs(model, tokenizer, prompts), rare)
    return out


def sampled_correct_counts(model, tokenizer, prompts: list[RarePrompt], n: int, seed: int = 0, chunk: int = 4096) -> list[int]:
    import torch

    from fgrpo_verl.tasks.raremode.prototype import sample_responses

    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n (samples per prompt) must be an int >= 1, got {n!r}")
    gen = torch.Generator().manual_seed(seed)
    per_chunk = max(1, chunk // n)
    counts = []
    for start in range(0, len(prompts), per_chunk):
        part = prompts[start : start + per_chunk]
        ids = [tokenizer.encode(p.text, add_special_tokens=False) for p in part]
        _, resp, _ = sample_responses(model, ids, n, tokenizer.eos_token_id, gen)
        texts = tokenizer.batch_decode(resp.tolist(), skip_special_tokens=True)
        for i, p in enumerate(part):
            truth = "".join(p.correct)
            counts.append(sum(compute_score(DATA_SOURCE, t, truth) == 1.0 for t in texts[i * n : (i + 1) * n]))
    return counts


def sampled_pass_at_k(model, tokenizer, prompts: list[RarePrompt], n: int, ks: list[int], seed: int = 0) -> dict[int, float]:
    from fgrpo_verl.pass_at_k import mean_pass_at_k

    counts = sampled_correct_counts(model, tokenizer, prompts, n, seed)
    return {k: mean_pass_at_k(n, counts, k) for k in ks}
