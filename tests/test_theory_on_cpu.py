"""Tail-miss probability (eq. 7, Lemma 3.1) and the shrink factor m_γ (App. N) against the paper and against
independent computations (Monte-Carlo sampling, numerical integration)."""

import math

import numpy as np
import pytest

from fgrpo_verl.theory import (active_probability, focal_advantage_magnitudes, mean_shrink, peak_group_size,
                               tail_miss_probability)


# --- Lemma 3.1 against the values the paper digest recomputes (§2 and §10.14) -----------------------------------


@pytest.mark.parametrize("n, expected", [(2, 0.450), (8, 0.658), (32, 0.194)])
def test_tail_miss_matches_paper_values(n, expected):
    assert tail_miss_probability(0.5, 0.05, n) == pytest.approx(expected, abs=5e-4)


def test_peak_matches_paper_value():
    n_star, p_star = peak_group_size(0.5, 0.05, n_max=4096)
    assert int(n_star) == 5
    assert float(p_star) == pytest.approx(0.724, abs=5e-4)


def test_tiny_tail_at_huge_n_is_accurate():
    # App. J: the simulation's non-anchor correct action, mu=0.64, tau=6.3e-5: Pr ≈ 2.6e-4 at N = 2^17.
    p = float(tail_miss_probability(0.64, 6.3e-5, 2**17))
    assert p == pytest.approx(2.6e-4, rel=0.01)
    # The same number from the exact term alone (the other two are < 1e-300): (1 - τ)^N via log1p.
    assert p == pytest.approx(math.exp(2**17 * math.log1p(-6.3e-5)), rel=1e-12)


def test_peak_table_of_app_fig3():
    # Digest §2 table (computed from Lemma 3.1): rows mu = 0.8, 0.5, 0.2; columns rho = 0.01, 0.05, 0.1, 0.2.
    mu = np.array([[0.8], [0.5], [0.2]])
    rho = np.array([0.01, 0.05, 0.1, 0.2])
    n_star, p_star = peak_group_size(mu, rho * mu, n_max=4096)
    assert n_star.tolist() == [[15, 8, 6, 4], [8, 6, 5, 4], [21, 15, 12, 9]]
    np.testing.assert_allclose(
        p_star, [[0.856, 0.610, 0.467, 0.328], [0.953, 0.832, 0.724, 0.568], [0.950, 0.825, 0.716, 0.558]], atol=6e-4
    )


def test_broadcasting_and_edge_values():
    n = np.array([1, 2, 4, 8])
    probs = tail_miss_probability(np.array([[0.3], [0.5]]), 0.03, n)
    assert probs.shape == (2, 4)
    assert probs[:, 0].tolist() == [0.0, 0.0]  # one rollout is never active
    np.testing.assert_allclose(active_probability(0.5, n), [0.0, 0.5, 0.875, 1 - 2 * 0.5**8])
    assert active_probability(1.0, 3) == 0.0 and active_probability(0.0, 3) == 0.0


@pytest.mark.parametrize("mu, tau", [(0.5, 0.05), (0.3, 0.03), (0.8, 0.4)])
def test_lemma_against_monte_carlo(mu, tau):
    rng = np.random.default_rng(1234)
    trials = 200_000
    for n in (2, 5, 8, 32):
        u = rng.random((trials, n))
        correct = (u < mu).sum(1)
        in_e = (u < tau).sum(1)  # E = [0, τ) ⊂ C = [0, μ)
        active = (correct > 0) & (correct < n)
        p_act, p_tail = active.mean(), (active & (in_e == 0)).mean()
        exact_act, exact_tail = float(active_probability(mu, n)), float(tail_miss_probability(mu, tau, n))
        # 5 standard errors of a Bernoulli mean over 200k trials.
        for emp, exact in ((p_act, exact_act), (p_tail, exact_tail)):
            se = math.sqrt(max(exact * (1 - exact), 1e-12) / trials)
            assert abs(emp - exact) < 5 * se + 1e-6, (mu, tau, n, emp, exact)


@pytest.mark.parametrize(
    "call, needle",
    [
        (lambda: tail_miss_probability(1.2, 0.1, 2), "mu=1.2"),
        (lambda: tail_miss_probability(-0.1, 0.1, 2), "mu=-0.1"),
        (lambda: tail_miss_probability(0.5, 0.5, 2), "tau=0.5 is invalid for mu=0.5"),
        (lambda: tail_miss_probability(0.5, 0.0, 2), "tau=0.0"),
        (lambda: tail_miss_probability(0.5, [0.1, 0.7], 2), "tau=0.7"),
        (lambda: tail_miss_probability(0.5, 0.1, 0), "n=0"),
        (lambda: tail_miss_probability(0.5, 0.1, 2.5), "n=2.5"),
        (lambda: tail_miss_probability(0.5, 0.1, True), "n=True"),
        (lambda: tail_miss_probability(float("nan"), 0.1, 2), "mu=nan"),
        (lambda: tail_miss_probability(0.5, float("nan"), 2), "tau=nan"),
        (lambda: tail_miss_probability(0.5, 0.1, float("inf")), "n=inf"),
        (lambda: active_probability("0.5", 2), "mu='0.5'"),
        (lambda: peak_group_size(0.5, 1e-6, n_max=8), "n_max=8 is too small"),
        (lambda: mean_shrink(-0.5), "gamma=-0.5"),
        (lambda: mean_shrink(float("nan")), "gamma=nan"),
        (lambda: focal_advantage_magnitudes(1.0, 0.5), "mu=1.0"),
        (lambda: focal_advantage_magnitudes(0.5, -1.0), "gamma=-1.0"),
    ],
)
def test_bad_arguments_raise_named_value_error(call, needle):
    with pytest.raises(ValueError) as err:
        call()
    assert needle in str(err.value)


# --- m_γ against the paper and against numerical integration ----------------------------------------------------


def _shrink_by_quadrature(gamma: float, panels: int = 2000) -> float:
    """∫(1-μ)^γ sqrt(μ(1-μ)) dμ / ∫ sqrt(μ(1-μ)) dμ by composite Simpson after μ = sin²θ (smooth integrand)."""
    theta = np.linspace(0.0, math.pi / 2, 2 * panels + 1)
    s, c = np.sin(theta), np.cos(theta)
    weights = np.ones_like(theta)
    weights[1:-1:2], weights[2:-1:2] = 4.0, 2.0
    base = 2 * s**2 * c**2  # sqrt(μ(1-μ)) dμ = sinθ cosθ · 2 sinθ cosθ dθ
    return float((weights * base * c ** (2 * gamma)).sum() / (weights * base).sum())


@pytest.mark.parametrize("gamma, paper", [(0.0, 1.0), (0.5, 0.679), (1.0, 0.5), (2.0, 0.3125)])
def test_mean_shrink_paper_values_and_quadrature(gamma, paper):
    assert mean_shrink(gamma) == pytest.approx(paper, abs=5e-4)
    assert mean_shrink(gamma) == pytest.approx(_shrink_by_quadrature(gamma), rel=1e-9)


def test_mean_shrink_vectorised_and_large_gamma():
    values = mean_shrink([0.0, 0.5, 1.0, 3.7])
    np.testing.assert_allclose(values, [mean_shrink(g) for g in (0.0, 0.5, 1.0, 3.7)])
    assert 0 < mean_shrink(400.0) < mean_shrink(200.0)  # lgamma: no overflow where Γ itself would


# --- Fig. 4: g·|A| against μ, by hand ------------------------------------------------------------------------------
# 1/0 rewards at success rate μ: population std sqrt(μ(1-μ)), a correct rollout's A = (1-μ)/std = sqrt((1-μ)/μ), a
# wrong one's |A| = μ/std = sqrt(μ/(1-μ)); g = (1-μ)^γ.
#   μ = 0.5: |A±| = 1;        g = 1, sqrt(0.5) = 0.70711, 0.5          for γ = 0, 0.5, 1
#   μ = 0.2: |A+| = 2, |A-| = 0.5;  g = 1, sqrt(0.8) = 0.89443, 0.8  ->  A+ 2, 1.78885, 1.6;   A- 0.5, 0.44721, 0.4
#   μ = 0.8: |A+| = 0.5, |A-| = 2;  g = 1, sqrt(0.2) = 0.44721, 0.2  ->  A+ 0.5, 0.22361, 0.1; A- 2, 0.89443, 0.4
@pytest.mark.parametrize("mu, pos, neg", [
    (0.5, [1.0, 0.70711, 0.5], [1.0, 0.70711, 0.5]),
    (0.2, [2.0, 1.78885, 1.6], [0.5, 0.44721, 0.4]),
    (0.8, [0.5, 0.22361, 0.1], [2.0, 0.89443, 0.4]),
])
def test_fig4_focal_advantage_magnitudes_by_hand(mu, pos, neg):
    got_pos, got_neg = focal_advantage_magnitudes(mu, [0.0, 0.5, 1.0])
    np.testing.assert_allclose(got_pos, pos, atol=1e-5)
    np.testing.assert_allclose(got_neg, neg, atol=1e-5)
    assert focal_advantage_magnitudes(mu, 0.5) == pytest.approx((pos[1], neg[1]), abs=1e-5)
