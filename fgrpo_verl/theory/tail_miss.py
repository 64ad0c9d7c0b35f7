"""Tail-miss probability (paper §3.1, eq. 7, Lemma 3.1, App. D), vectorised with numpy broadcasting.

A group of N i.i.d. rollouts of one prompt; μ = Pr(correct) (eq. 2), τ = Pr(rollout lands in a rare correct
subset E ⊂ C), 0 < τ < μ (eq. 6). Three disjoint regions: E (prob. τ), C \\ E (μ - τ), wrong (1 - μ).

    active    Pr(A_N) = 1 - μ^N - (1 - μ)^N                                   (eq. 7: 0 < X < N, a non-zero GRPO signal)
    tail miss Pr(B_E,N) = (1 - τ)^N - (μ - τ)^N - (1 - μ)^N                    (Lemma 3.1: active, yet nothing in E)

"no rollout in E" has probability (1 - τ)^N; subtract its two inactive sub-cases: all rollouts in C \\ E and all
rollouts wrong. Pr(B) rises with N while groups turn active, then falls once coverage (1 - τ)^N bites, so it
peaks at an intermediate N (``peak_group_size``).

Numerics: (1 - x)^N is evaluated as exp(N · log1p(-x)), which keeps full relative precision for tiny x and
huge N (μ = 0.64, τ = 6.3e-5, N = 2^17 gives 2.6e-4, not a rounding residue).
"""

from __future__ import annotations

import numpy as np

from fgrpo_verl.theory._checks import group_size_array, real_array


def _one_minus_pow(x: np.ndarray, n: np.ndarray) -> np.ndarray:
    """(1 - x)^n for x in [0, 1], accurate when x is tiny and n is huge."""
    with np.errstate(divide="ignore"):  # log1p(-1) = -inf -> exp(-inf) = 0 = 0^n for n >= 1
        return np.exp(n * np.log1p(-x))


def _mu_tau_n(mu, tau, n):
    mu = real_array("mu", mu, low=0.0, high=1.0)
    tau = real_array("tau", tau, low=0.0, high=1.0, low_open=True, high_open=True)
    n = group_size_array("n", n)
    mu_b, tau_b = np.broadcast_arrays(mu, tau)
    bad = tau_b >= mu_b
    if bad.any():
        i = np.flatnonzero(bad.reshape(-1))[0]
        raise ValueError(
            f"tau={tau_b.reshape(-1)[i].item()!r} is invalid for mu={mu_b.reshape(-1)[i].item()!r}: "
            "the rare subset's mass must satisfy 0 < tau < mu"
        )
    return mu, tau, n


def active_probability(mu, n) -> np.ndarray:
    """Pr(0 < X < N) = 1 - μ^N - (1 - μ)^N (eq. 7). μ in [0, 1], N whole >= 1; broadcasts."""
    mu = real_array("mu", mu, low=0.0, high=1.0)
    n = group_size_array("n", n)
    p = 1.0 - np.power(mu, n) - _one_minus_pow(mu, n)
    # A single rollout is never "active"; write the exact 0 instead of a 1e-17 rounding residue.
    return np.where(n == 1, 0.0, p)


def tail_miss_probability(mu, tau, n) -> np.ndarray:
    """Pr(active and no rollout in E) = (1 - τ)^N - (μ - τ)^N - (1 - μ)^N (Lemma 3.1); broadcasts.

    μ in [0, 1], τ in (0, μ), N whole >= 1.
    """
    mu, tau, n = _mu_tau_n(mu, tau, n)
    p = _one_minus_pow(tau, n) - np.power(mu - tau, n) - _one_minus_pow(mu, n)
    return np.where(n == 1, 0.0, p)  # exact 0 at N = 1 (see active_probability)


def peak_group_size(mu, tau, n_max: int = 1 << 20):
    """The N in 1..n_max that maximises the tail-miss probability, and that maximum; broadcasts over μ, τ.

    Returns ``(n_star, p_star)`` (int64 and float64 arrays of the broadcast shape of μ, τ; 0-d for scalars).
    The search is exhaustive over 1..n_max, so no unimodality is assumed; if the maximum sits at n_max the
    true peak may lie beyond it and a ValueError asks for a larger n_max.
    """
    mu, tau, _ = _mu_tau_n(mu, tau, 1)
    n_max = int(group_size_array("n_max", n_max))
    mu_b, tau_b = np.broadcast_arrays(mu, tau)
    n_star = np.empty(mu_b.shape, dtype=np.int64)
    p_star = np.empty(mu_b.shape, dtype=np.float64)
    grid = np.arange(1, n_max + 1, dtype=np.int64)
    # One (μ, τ) pair at a time keeps memory at O(n_max) for any number of pairs.
    for idx in np.ndindex(mu_b.shape):
        probs = tail_miss_probability(mu_b[idx], tau_b[idx], grid)
        k = int(np.argmax(probs))
        if k == n_max - 1 and n_max > 1:
            raise ValueError(
                f"n_max={n_max} is too small for mu={mu_b[idx]!r}, tau={tau_b[idx]!r}: the tail-miss probability "
                "still rises at n_max; pass a larger n_max"
            )
        n_star[idx], p_star[idx] = grid[k], probs[k]
    return n_star, p_star
