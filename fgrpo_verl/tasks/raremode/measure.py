"""Metrics of a rare-mode policy on held-out prompts: exact, sampling-free ones (teacher-forced log-probs) per saved
checkpoint, and sampled pass@k.

Every prompt x has k correct responses y = (a, <|endoftext|>), a in x's symbols, so the policy's correct mass is
a finite sum, computed exactly from one forward pass over the k candidates per prompt:

    pi(a | x)  = exp(log pi(a | x) + log pi(eos | x, a))
    Q_pos(x)   = sum_{a in C(x)} pi(a | x)                               (the categorical Q_pos, paper eq. 4)

The **rare set** E_x is fixed on the warm-start (base) policy pi_0: the correct answers whose base probability is
below ``rare_share`` of the prompt's base correct mass, pi_0(a | x) < rare_share * Q_pos,0(x). Then

    M_ret(x)   = 1 - sum_{a in E_x} max(0, pi_0(a|x) - pi_t(a|x)) / sum_{a in E_x} pi_0(a|x)   (paper eq. 26 on E_x)
    dNLL_rare  = mean over (x, a in E_x) of [NLL_t(y|x) - NLL_0(y|x)],  NLL = -(1/|y|) log pi(y|x)   (App. M.2)
    rare share = tau_E(x) / Q_pos(x)   (the paper's rho, fraction of correct mass in the rare set)

Reported values are means over held-out prompts (prompts whose E_x is empty are left out of M_ret). The NLLs
come from ``fgrpo_verl.evaluation.rare_nll.length_normalised_nll`` (the App. M.2 implementation), so |y| = 2.

Per-step exact metrics come from the checkpoints verl writes every step (``trainer.save_freq=1`` with
``actor_rollout_ref.actor.checkpoint.save_contents=[hf_model]``: a plain HF model dir per step, a few hundred kB
for the tiny policy); they are read back after the run, so nothing inside verl's trainer changes.

Sampled pass@k: ``n`` responses per held-out prompt at T = 1 (the maze's sampler, ``generate`` with at most
``MAX_RESPONSE_LENGTH`` = 2 new tokens as in the rollouts), scored with the task's reward, and the unbiased
estimator ``fgrpo_verl.pass_at_k.mean_pass_at_k``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from fgrpo_verl.evaluation.generate import load_model
from fgrpo_verl.evaluation.rare_nll import length_normalised_nll
from fgrpo_verl.job.checkpoints import checkpoint_dir, saved_steps
from fgrpo_verl.pass_at_k import mean_pass_at_k
from fgrpo_verl.tasks.maze.evaluate import sample_correct_counts
from fgrpo_verl.tasks.raremode.build import DATA_SOURCE, MAX_RESPONSE_LENGTH
from fgrpo_verl.tasks.raremode.generator import RarePrompt
from fgrpo_verl.tasks.raremode.reward import compute_score

DEFAULT_RARE_SHARE = 0.2


@dataclass(frozen=True)
class Candidates:
    """Per-prompt correct candidates: ``probs[i, j]`` = pi(prompts[i].correct[j] | prompts[i])."""

    probs: np.ndarray  # (prompts, k)

    @property
    def q_pos(self) -> np.ndarray:
        return self.probs.sum(axis=1)


def candidate_probs(model, tokenizer, prompts: list[RarePrompt]) -> Candidates:
    """Exact probability of every correct response of every prompt (no sampling)."""
    eos = tokenizer.eos_token_id
    pairs = [(tokenizer.encode(p.text, add_special_tokens=False), tokenizer.encode(a, add_special_tokens=False) + [eos])
             for p in prompts for a in p.correct]
    nll = length_normalised_nll(model, pairs)
    lengths = np.array([len(c) for _, c in pairs], dtype=np.float64)
    # every prompt of a task directory has the same k (its build's)
    return Candidates(probs=np.exp(-nll * lengths).reshape(len(prompts), -1))


def rare_mask(base: Candidates, rare_share: float = DEFAULT_RARE_SHARE) -> np.ndarray:
    """E_x as a boolean (prompts, k) mask: base probability < rare_share * base Q_pos(x)."""
    if not 0 < rare_share <= 1:
        raise ValueError(f"rare_share must be in (0, 1], got {rare_share!r}")
    return base.probs < rare_share * base.q_pos[:, None]


@dataclass(frozen=True)
class ExactMetrics:
    q_pos: float  # mean over prompts of the correct mass
    m_ret: float  # mean over prompts with a non-empty rare set of eq. 26 on that set
    delta_nll_rare: float  # mean over rare (prompt, answer) pairs
    rare_mass: float  # mean over prompts of tau_E(x)
    rare_fraction: float  # mean over prompts of tau_E(x) / Q_pos(x)
    anchor_mass: float  # mean over prompts of the most probable (under pi_0) correct answer's probability

    def as_dict(self) -> dict:
        return asdict(self)


def exact_metrics(base: Candidates, current: Candidates, rare: np.ndarray) -> ExactMetrics:
    has_rare = rare.any(axis=1)
    if not has_rare.any():
        raise ValueError("no held-out prompt has a rare correct answer under this rare_share; raise it")
    p0, pt = base.probs, current.probs
    lost = (np.maximum(0.0, p0 - pt) * rare).sum(axis=1)
    m_ret = 1.0 - lost[has_rare] / (p0 * rare).sum(axis=1)[has_rare]
    # |y| = 2 for every candidate, so the length-normalised NLL difference is half the log-prob difference
    dnll = (np.log(p0[rare]) - np.log(pt[rare])) / 2.0
    tau = (pt * rare).sum(axis=1)
    anchor = pt[np.arange(len(p0)), p0.argmax(axis=1)]
    return ExactMetrics(
        q_pos=float(current.q_pos.mean()),
        m_ret=float(m_ret.mean()),
        delta_nll_rare=float(dnll.mean()),
        rare_mass=float(tau.mean()),
        rare_fraction=float((tau / current.q_pos).mean()),
        anchor_mass=float(anchor.mean()),
    )


def step_metrics(checkpoints, tokenizer, prompts: list[RarePrompt], base: Candidates, rare) -> dict[int, ExactMetrics]:
    """Exact metrics of every saved step (step 0, the warm start, is the caller's ``base``)."""
    steps = saved_steps(checkpoints)  # the checkpoints verl finished (its resume point) and logged
    if not steps:
        raise FileNotFoundError(f"no complete global_step_*/actor checkpoints under {checkpoints}")
    out = {0: exact_metrics(base, base, rare)}
    for step in steps:
        model, _ = load_model(checkpoint_dir(checkpoints, step) / "actor" / "huggingface")
        out[step] = exact_metrics(base, candidate_probs(model, tokenizer, prompts), rare)
    return out


def sampled_pass_at_k(model, tokenizer, prompts: list[RarePrompt], n: int, ks: list[int], seed: int = 0) -> dict[int, float]:
    counts = sample_correct_counts(
        model, tokenizer, [p.text for p in prompts], ["".join(p.correct) for p in prompts],
        lambda text, truth: compute_score(DATA_SOURCE, text, truth), n, MAX_RESPONSE_LENGTH, batch_size=4096, seed=seed,
    )
    return {k: mean_pass_at_k(n, counts, k) for k in ks}
