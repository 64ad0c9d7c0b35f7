"""Per-step curves of the rare-mode experiment (like the paper's Fig. 2 a/b): mean over seeds with the 95% band;
and the frontier, M_ret against Q_pos along the seed-mean curves (where the equal-Q_pos table reads them)."""

from __future__ import annotations

from pathlib import Path

from fgrpo_verl.tasks.raremode.stats import t_interval

METRICS = (("q_pos", "Q_pos (held-out correct mass)"), ("m_ret", "M_ret of the initially rare correct answers"),
           ("delta_nll_rare", "ΔNLL_rare (App. M.2)"))


def plot_curves(curves: dict[str, dict[int, dict[int, dict]]], path: Path, title: str) -> Path:
    """``curves[config][seed][step]`` = metrics dict; one panel per metric."""
    from fgrpo_verl.theory.plots import pyplot, save

    # per configuration: the steps every seed has, and per metric the seed mean and 95% interval at each
    seed_stats = {}
    for name, by_seed in curves.items():
        steps = sorted(set.intersection(*(set(s) for s in by_seed.values())))
        seed_stats[name] = steps, {key: [t_interval([by_seed[seed][t][key] for seed in by_seed]) for t in steps]
                                   for key, _ in METRICS}
    fig, axes = pyplot().subplots(1, len(METRICS) + 1, figsize=(5 * (len(METRICS) + 1), 4))
    for ax, (key, label) in zip(axes, METRICS):
        for name, by_seed in curves.items():
            steps, by_key = seed_stats[name]
            stats = by_key[key]
            mean = [s.mean for s in stats]
            line = ax.plot(steps, mean, label=f"{name} ({len(by_seed)} seeds)")[0]
            if all(s.n > 1 for s in stats):
                ax.fill_between(steps, [s.mean - s.half_width for s in stats], [s.mean + s.half_width for s in stats],
                                color=line.get_color(), alpha=0.2)
        ax.set_xlabel("RL step")
        ax.set_title(label, fontsize=10)
        ax.grid(alpha=0.3)
    frontier = axes[-1]
    for name, (_, by_key) in seed_stats.items():
        frontier.plot([s.mean for s in by_key["q_pos"]], [s.mean for s in by_key["m_ret"]], marker=".", label=name)
    frontier.set(xlabel="Q_pos (seed mean)", ylabel="M_ret (seed mean)")
    frontier.set_title("M_ret vs Q_pos along the curves (the frontier)", fontsize=10)
    frontier.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    return save(fig, path, dpi=120)
