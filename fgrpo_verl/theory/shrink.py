"""Mean advantage-scale shrink factor m_γ (paper App. N; the "GRPO low-LR" control's lr multiplier).

With binary rewards and std normalisation the mean |A^GRPO| of a group with success rate μ is ∝ sqrt(μ(1-μ));
F-GRPO multiplies it by (1-μ)^γ. Averaged over μ ~ Uniform[0, 1]:

    m_γ = ∫ (1-μ)^γ sqrt(μ(1-μ)) dμ / ∫ sqrt(μ(1-μ)) dμ = B(3/2, γ+3/2) / B(3/2, 3/2)
        = (4 / sqrt(π)) · Γ(γ + 3/2) / Γ(γ + 3)

m_0 = 1, m_0.5 = 0.679 (lr 1e-6 -> 6.8e-7 in the paper), m_1 = 0.5, m_2 = 0.3125. m_γ is the mean advantage
magnitude, not the step: with Adam(W) a scale common to all groups cancels (docs/theory.md §2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fgrpo_verl.theory._checks import real_array


def mean_shrink(gamma):
    """m_γ = (4/sqrt(π)) Γ(γ+3/2)/Γ(γ+3) for γ >= 0 (finite); a float for a scalar, else a float64 array."""
    g = real_array("gamma", gamma, low=0.0, high=math.inf, high_open=True)
    # lgamma keeps large γ finite (Γ overflows past ~171); the ratio is taken in log space.
    out = np.vectorize(lambda x: 4.0 / math.sqrt(math.pi) * math.exp(math.lgamma(x + 1.5) - math.lgamma(x + 3.0)))(g)
    return float(out) if out.ndim == 0 else out.astype(np.float64)


def focal_advantage_magnitudes(mu, gamma):
    """``(g·|A+|, g·|A−|)`` at success rate μ ∈ (0, 1), the curves of the paper's Fig. 4 (App. I).

    g = (1 − μ)^γ times GRPO's advantage magnitude of a correct and of a wrong rollout, for 1/0 rewards and the
    population std sqrt(μ(1 − μ)): |A+| = sqrt((1 − μ)/μ), |A−| = sqrt(μ/(1 − μ)). The paper plots the curves without
    the formula; this is the standard algebra. μ and γ broadcast; float64 arrays (floats for scalars)."""
    m = real_array("mu", mu, low=0.0, high=1.0, low_open=True, high_open=True)
    g = real_array("gamma", gamma, low=0.0, high=math.inf, high_open=True)
    weight = np.power(1.0 - m, g)
    pos, neg = weight * np.sqrt((1.0 - m) / m), weight * np.sqrt(m / (1.0 - m))
    return (float(pos), float(neg)) if pos.ndim == 0 else (pos, neg)


def run_label(gamma: float, control_of: float | None = None) -> str:
    """The name of a run configuration, the same in every experiment: ``grpo`` (γ = 0), ``fgrpo_g<γ>``, and
    ``grpo_lr_x_m<γ>`` for the scale-matched control (GRPO at lr × m_γ)."""
    if control_of is not None:
        return f"grpo_lr_x_m{control_of:g}"
    return "grpo" if gamma == 0 else f"fgrpo_g{gamma:g}"


@dataclass(frozen=True)
class RunConfig:
    """One configuration of an experiment: its name (:func:`run_label`), the γ it trains with, its learning rate."""

    name: str
    gamma: float
    lr: float
    control_of: float | None = None  # for the scale-matched control: the γ whose m_γ scaled the lr
    overrides: tuple[str, ...] = ()  # what else the run sets (the rare-mode demo's DS-GRPO arm: its verl overrides)


def configurations(gammas, lr: float, controls=()) -> list[RunConfig]:
    """GRPO / F-GRPO for each γ (in order), then for each γ in ``controls`` the scale-matched control, GRPO at
    lr × m_γ (App. N): the configurations of the simulation and of the rare-mode demo."""
    return [RunConfig(run_label(g), float(g), lr) for g in gammas] + [
        RunConfig(run_label(0.0, control_of=g), 0.0, lr * float(mean_shrink(g)), float(g)) for g in controls
    ]
