"""The categorical simulation (paper §5.1, Fig. 2): initial masses, the count-based gradient against autograd,
the sampler against the multinomial law, and the paper's qualitative findings at a reduced scale."""

import numpy as np
import pytest
import torch

from fgrpo_verl.focal import focal_weight
from fgrpo_verl.theory.categorical import (
    CategoricalSetup,
    CountSampler,
    SimulationConfig,
    concentration_zone,
    simulate,
    surrogate_gradient_,
)


def test_initial_masses_match_paper():
    masses = CategoricalSetup().initial_masses()
    assert masses["q_pos"] == pytest.approx(0.630, abs=5e-4)
    assert masses["anchor"] == pytest.approx(4.65e-4, rel=2e-3)
    assert masses["other_correct"] == pytest.approx(6.30e-5, rel=2e-3)


@pytest.mark.parametrize("surrogate", ["log", "linear"])
@pytest.mark.parametrize("gamma", [0.0, 1.0, 2.5])
def test_count_gradient_equals_autograd_of_per_sample_surrogate(surrogate, gamma):
    setup = CategoricalSetup(num_actions=40, num_correct=6)
    torch.manual_seed(0)
    z = (setup.initial_logits() + 0.3 * torch.randn(40, dtype=torch.float64)).requires_grad_(True)
    p = torch.softmax(z, 0)
    n = 9
    draws = torch.multinomial(p.detach(), n, replacement=True)
    rewards = torch.where(draws < setup.num_correct, setup.reward_correct, setup.reward_incorrect).double()
    mu_hat = (draws < setup.num_correct).double().mean()
    g = focal_weight(mu_hat, gamma)
    r_tilde = rewards - rewards.mean()
    f = torch.log(p[draws]) if surrogate == "log" else p[draws]
    (g * (r_tilde * f).mean()).backward()

    counts = torch.bincount(draws, minlength=40).double().unsqueeze(0)
    grad = surrogate_gradient_(
        counts, p.detach().unsqueeze(0), torch.tensor([[float(n)]], dtype=torch.float64),
        torch.tensor([gamma], dtype=torch.float64), setup, surrogate,
    )
    torch.testing.assert_close(grad[0], z.grad, rtol=1e-10, atol=1e-14)


def test_sampler_counts_follow_the_multinomial_law():
    # Two blocks (N = 3 and N = 5000) over a skewed 50-action distribution, 400 repetitions.
    actions = 50
    logits = torch.linspace(-6, 2, actions)
    p = torch.softmax(logits, 0).float().unsqueeze(0).repeat(3, 1)
    sampler = CountSampler(3, actions, [(1, 3), (2, 5000)], seed=7, workers=2)
    out = torch.empty(3, actions)
    totals = torch.zeros(3, actions, dtype=torch.float64)
    for _ in range(400):
        sampler(p, out=out)
        assert out.sum(1).tolist() == [3.0, 5000.0, 5000.0]
        totals += out
    sampler.close()
    p64 = p[0].double()
    for row, n in ((0, 3), (1, 5000), (2, 5000)):
        expected = 400 * n * p64
        z = (totals[row] - expected) / torch.sqrt(expected * (1 - p64))
        assert z.abs().max() < 5.0, (row, z.abs().max())


def test_control_is_grpo_at_lr_times_m_gamma_and_leaves_the_gamma_runs_alone():
    """The control rows are exactly GRPO at lr x m_gamma: equal, bit for bit, to a plain gamma = 0 run at that lr
    drawing from the same sampling generator (block index 1 in both), and adding them changes no gamma run."""
    from fgrpo_verl.theory import mean_shrink

    setup = CategoricalSetup(400, 40)
    with_control = SimulationConfig(group_sizes=(16,), gammas=(1.0,), seeds=3, steps=25, lr=0.02, setup=setup, controls=(1.0,))
    labels = [(c.name, c.gamma, c.lr, c.control_of) for c in with_control.configurations]
    assert labels == [("fgrpo_g1", 1.0, 0.02, None), ("grpo_lr_x_m1", 0.0, 0.02 * mean_shrink(1.0), 1.0)]
    a = simulate(with_control)
    assert a.q_pos.shape == (26, 1, 2, 3) and a.final_entropy.shape == (1, 2, 3)
    plain = simulate(SimulationConfig(group_sizes=(16,), gammas=(1.0,), seeds=3, steps=25, lr=0.02, setup=setup))
    np.testing.assert_array_equal(a.q_pos[:, :, :1], plain.q_pos)
    np.testing.assert_array_equal(a.m_ret[:, :, :1], plain.m_ret)
    # the second block of this run (N = 16, gamma 0, lr 0.01) draws from the same generator as the control block
    grpo = simulate(SimulationConfig(group_sizes=(2, 16), gammas=(0.0,), seeds=3, steps=25, lr=0.01, setup=setup))
    np.testing.assert_array_equal(a.q_pos[:, 0, 1], grpo.q_pos[:, 1, 0])
    np.testing.assert_array_equal(a.m_ret[:, 0, 1], grpo.m_ret[:, 1, 0])
    assert not np.array_equal(a.q_pos[:, 0, 0], a.q_pos[:, 0, 1])  # the control did move differently
    for kwargs, needle in [(dict(controls=(0.0,)), "controls=0.0 is invalid"), (dict(controls=(1.0, 1.0)), "repeats"),
                           (dict(gammas=(1.0, 1.0)), "repeated configurations")]:
        with pytest.raises(ValueError, match=needle):
            SimulationConfig(**{**dict(group_sizes=(16,), gammas=(1.0,), seeds=1, steps=1, setup=setup), **kwargs})


def test_simulation_is_reproducible_and_validates():
    cfg = SimulationConfig(group_sizes=(2, 64), gammas=(0.0, 1.0), seeds=2, steps=5, setup=CategoricalSetup(400, 40))
    a, b = simulate(cfg), simulate(cfg, workers=1)
    np.testing.assert_array_equal(a.m_ret, b.m_ret)
    assert a.q_pos.shape == (6, 2, 2, 2)
    assert np.allclose(a.m_ret[0], 1.0) and np.allclose(a.q_pos[0], CategoricalSetup(400, 40).initial_masses()["q_pos"])
    for kwargs, needle in [
        (dict(group_sizes=(0,)), "group_sizes=0 is invalid"),
        (dict(gammas=(-1.0,)), "gammas=-1.0 is invalid"),
        (dict(steps=0), "steps=0"),
        (dict(lr=float("nan")), "lr=nan"),
        (dict(surrogate="square"), "surrogate='square'"),
    ]:
        base = dict(group_sizes=(2,), gammas=(0.0,), seeds=1, steps=1)
        base.update(kwargs)
        with pytest.raises(ValueError) as err:
            SimulationConfig(**base)
        assert needle in str(err.value)
    with pytest.raises(ValueError, match="num_correct=10 is invalid for num_actions=10"):
        CategoricalSetup(num_actions=10, num_correct=10)


# --- the paper's qualitative findings at reduced scale -----------------------------------------------------------
# 1,280 actions / 100 correct (the paper's logits, so Q_pos = 0.644 and each non-anchor correct action has
# 6.1e-3), 500 steps, 4 seeds, ~1 s. Being 100x smaller than the paper's policy, the concentration zone sits ~100x
# lower in N: regime I at N = 2, II at N = 16-64, III at N = 1024. Measured over sampling seeds 0-4 (2 runs each):
# M_ret(γ=0) = 0.94-0.96 / 0.39-0.45 / 0.49-0.55 / 1.00 at N = 2 / 16 / 64 / 1024; M_ret(γ=1) - M_ret(γ=0) =
# 0.28-0.37 at N = 16 and 0.35-0.43 at N = 64; the smallest Q_pos gain 0.061. The bounds below leave ~half of
# each gap as margin.
REDUCED = SimulationConfig(
    group_sizes=(2, 16, 64, 1024), gammas=(0.0, 1.0), seeds=4, steps=500, setup=CategoricalSetup(1280, 100)
)


@pytest.fixture(scope="module")
def reduced():
    return simulate(REDUCED)


def test_q_pos_grows_for_every_run(reduced):
    gain = reduced.q_pos[-1] - reduced.q_pos[0]
    assert gain.min() > 0.03, gain


def test_m_ret_is_non_monotonic_in_n(reduced):
    m = reduced.m_ret[-1, :, 0].mean(-1)  # γ = 0, mean over seeds, per N
    assert m[0] > 0.85  # I: small N keeps the mass (mostly inactive groups)
    assert max(m[1], m[2]) < 0.7  # II: intermediate N concentrates
    assert m[3] > 0.95  # III: large N covers every correct action
    assert concentration_zone(REDUCED.group_sizes, m, threshold=0.7) == (16, 64)


def test_focal_weight_retains_more_mass_inside_the_zone(reduced):
    m = reduced.m_ret[-1].mean(-1)  # (N, γ)
    for i in (1, 2):  # N = 16, 64
        assert m[i, 1] - m[i, 0] > 0.15, m


def test_why_the_default_update_is_log_surrogate_with_adam():
    # Same reduced scale as REDUCED. Measured: the literal reading (linear surrogate, plain gradient ascent,
    # η = 1e-2) moves Q_pos by at most 1.1e-4 in 500 steps (its gradient is O(η p²)); the linear surrogate with
    # Adam concentrates even at the largest N (M_ret 0.117 at N = 1024), so it has no regime III.
    literal = simulate(SimulationConfig(**{**_fields(REDUCED), "surrogate": "linear", "optimizer": "sgd"}))
    assert abs(literal.q_pos[-1] - literal.q_pos[0]).max() < 1e-3
    linear_adam = simulate(SimulationConfig(**{**_fields(REDUCED), "surrogate": "linear", "optimizer": "adam"}))
    assert linear_adam.m_ret[-1, -1, 0].mean() < 0.5


def _fields(cfg):
    return {f: getattr(cfg, f) for f in cfg.__dataclass_fields__}
