"""Evaluation of rare-mode policies: exact metrics per saved checkpoint, and sampled pass@k on held-out prompts.

Per-step exact metrics come from the checkpoints verl writes every step (``trainer.save_freq=1`` with
``actor_rollout_ref.actor.checkpoint.save_contents=[hf_model]``: a plain HF model dir per step, a few hundred kB
for the tiny policy); they are read back after the run, so nothing inside verl's trainer changes.

Sampled pass@k: ``n`` responses per held-out prompt at T = 1 (the maze's sampler, ``generate`` with at most
``MAX_RESPONSE_LENGTH`` = 2 new tokens as in the rollouts), scored with the task's reward, and the unbiased
estimator ``fgrpo_verl.pass_at_k.mean_pass_at_k``.
"""

from __future__ import annotations

from fgrpo_verl.job.checkpoints import checkpoint_dir, saved_steps
from fgrpo_verl.tasks.maze.evaluate import sample_correct_counts
from fgrpo_verl.tasks.raremode.build import MAX_RESPONSE_LENGTH
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


def sampled_pass_at_k(model, tokenizer, prompts: list[RarePrompt], n: int, ks: list[int], seed: int = 0) -> dict[int, float]:
    from fgrpo_verl.pass_at_k import mean_pass_at_k

    counts = sample_correct_counts(
        model, tokenizer, [p.text for p in prompts], ["".join(p.correct) for p in prompts],
        lambda text, truth: compute_score(DATA_SOURCE, text, truth), n, MAX_RESPONSE_LENGTH, batch_size=4096, seed=seed,
    )
    return {k: mean_pass_at_k(n, counts, k) for k in ks}
