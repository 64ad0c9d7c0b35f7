"""Figures for the theory tools: App. Fig. 3 (tail-miss vs N), Fig. 4 (g·|A| vs μ) and Fig. 2 (a, b, c) of the
categorical simulation.

matplotlib is imported inside each function with the non-interactive Agg backend, so importing this module
is cheap and plotting works on machines without a display.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fgrpo_verl.theory.shrink import focal_advantage_magnitudes
from fgrpo_verl.theory.tail_miss import peak_group_size, tail_miss_probability


def pyplot():
    """matplotlib's pyplot on the Agg backend (every figure of the package is drawn through this)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig, path, dpi: int = 110) -> Path:
    """Lay out ``fig``, write it to ``path`` (its folder created) and close it."""
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)
    return path


def plot_tail_miss(mus, rhos, path, n_max: int = 512) -> Path:
    """One panel per μ, one curve per ρ = τ/μ over N = 1..n_max (log axis), peaks starred (App. Fig. 3)."""
    mus, rhos = list(mus), list(rhos)
    n = np.arange(1, n_max + 1)
    fig, axes = pyplot().subplots(1, len(mus), figsize=(4.2 * len(mus), 3.4), sharey=True, squeeze=False)
    for ax, mu in zip(axes[0], mus):
        for rho in rhos:
            probs = tail_miss_probability(mu, rho * mu, n)
            (line,) = ax.plot(n, probs, label=f"ρ={rho:g}")
            n_star, p_star = peak_group_size(mu, rho * mu, n_max=max(n_max, 1 << 16))
            if n_star <= n_max:
                ax.plot([n_star], [p_star], marker="*", markersize=12, color=line.get_color())
        ax.set(xscale="log", xlim=(1, n_max), title=f"μ_pos = {mu:g}", xlabel="group size N")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("Pr(active, no rollout in E)")
    axes[0][-1].legend(fontsize=8)
    fig.suptitle("Tail-miss probability (Lemma 3.1); ★ = peak", fontsize=10)
    return save(fig, path)


def plot_focal_weight(gammas, path) -> Path:
    """Fig. 4 (App. I): g·|A| against μ for each γ, solid for a correct rollout (|A+|), dashed for a wrong one."""
    mu = np.linspace(0.005, 0.995, 199)
    fig, ax = pyplot().subplots(figsize=(5.2, 3.6))
    for gamma in gammas:
        pos, neg = focal_advantage_magnitudes(mu, gamma)
        (line,) = ax.plot(mu, pos, label=f"γ={gamma:g}, |A+|")
        ax.plot(mu, neg, linestyle="--", color=line.get_color(), label=f"γ={gamma:g}, |A−|")
    ax.set(xlim=(0, 1), ylim=(0, 1.4), xlabel="μ_pos (group success rate)", ylabel="g · |A^GRPO|")
    ax.set_title("Focal weight times GRPO's |A| (Fig. 4; 1/0 rewards)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    return save(fig, path)


def _label(c) -> str:
    return f"γ={c.gamma:g}" if c.control_of is None else f"γ=0, lr×m_{c.control_of:g}"


def plot_simulation(result, out_dir, curve_ns, zone) -> list:
    """Fig. 2: (a) Q_pos vs step, (b) M_ret vs step for ``curve_ns`` (one line style per configuration: solid
    for the first γ, then dashed, dotted, dash-dot, the controls last; mean over seeds),
    (c) final Q_pos and M_ret vs N with regimes I / II / III from ``zone`` = (first_n, last_n) or None,
    (d) M_ret vs Q_pos along the curves of ``curve_ns`` (not in the paper: the frontier that the equal-Q_pos readout
    reads)."""
    plt = pyplot()
    cfg = result.config
    out_dir = Path(out_dir)
    ns = list(cfg.group_sizes)
    q_mean, m_mean = result.q_pos.mean(-1), result.m_ret.mean(-1)  # (step, N, configuration)
    steps = np.arange(result.q_pos.shape[0])
    # one dash pattern per configuration (5 distinct: 3 γ and 2 controls in the documented run), then repeat
    styles = ["-", "--", ":", "-.", (0, (6, 1, 1, 1, 1, 1))]
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    paths = []
    steps_grid = np.broadcast_to(steps[:, None, None], q_mean.shape)
    q_label, m_label = "Q_pos (correct mass)", "M_ret (retained positive mass)"
    panels = (  # (d): the frontier, where runs that move at different speeds are compared at equal Q_pos
        ("a", steps_grid, q_mean, "step", q_label, "fig2a_q_pos_vs_step.png", "Q_pos vs step"),
        ("b", steps_grid, m_mean, "step", m_label, "fig2b_m_ret_vs_step.png", "M_ret vs step"),
        ("d", q_mean, m_mean, q_label, m_label, "fig2d_m_ret_vs_q_pos.png", "M_ret vs Q_pos, the frontier"),
    )
    for key, xs, ys, xlabel, ylabel, name, title in panels:
        fig, ax = plt.subplots(figsize=(5.2, 3.6))
        for ci, n in enumerate(curve_ns):
            i = ns.index(n)
            for gi, c in enumerate(cfg.configurations):
                ax.plot(xs[:, i, gi], ys[:, i, gi], linestyle=styles[gi % len(styles)], color=colors[ci % len(colors)],
                        label=f"N={n}, {_label(c)}")
        ax.set(xlabel=xlabel, ylabel=ylabel)
        ax.set_title(f"({key}) {title} (mean of {cfg.seeds} seed(s))", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
        paths.append(save(fig, out_dir / name, dpi=100))

    fig, ax = plt.subplots(figsize=(5.6, 3.8))
    for gi, c in enumerate(cfg.configurations):
        ax.plot(ns, q_mean[-1, :, gi], linestyle=styles[gi % len(styles)], marker="o", color=colors[0], label=f"Q_pos, {_label(c)}")
        ax.plot(ns, m_mean[-1, :, gi], linestyle=styles[gi % len(styles)], marker="s", color=colors[1], label=f"M_ret, {_label(c)}")
    ax.set_xscale("log", base=2)
    ax.set(ylim=(-0.05, 1.08), xlabel="group size N", ylabel=f"value at step {cfg.steps}")
    if zone is not None:
        # Shade zone II between the geometric midpoints to its neighbouring grid points.
        first, last = ns.index(zone[0]), ns.index(zone[1])
        lo = np.sqrt(ns[first - 1] * ns[first]) if first > 0 else ns[0]
        hi = np.sqrt(ns[last] * ns[last + 1]) if last + 1 < len(ns) else ns[-1]
        ax.axvspan(lo, hi, color="grey", alpha=0.2)
        ax.text(np.sqrt(lo * hi), 1.02, "II", ha="center", fontsize=11)
        if first > 0:
            ax.text(np.sqrt(ns[0] * lo), 1.02, "I", ha="center", fontsize=11)
        if last + 1 < len(ns):
            ax.text(np.sqrt(hi * ns[-1]), 1.02, "III", ha="center", fontsize=11)
    ax.set_title(f"(c) final state vs N; II = M_ret(γ={cfg.gammas[0]:g}) below threshold", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower left")
    paths.append(save(fig, out_dir / "fig2c_final_vs_n.png", dpi=100))
    return paths
