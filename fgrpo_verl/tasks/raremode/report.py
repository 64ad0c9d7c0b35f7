"""The rare-mode demo's report: seed statistics, the table at equal correct mass Q_pos and the per-step curves.

Statistics over seeds: with s seeds the 95% interval of a mean is mean +- t_{0.975, s-1} * sd / sqrt(s) (sd with
ddof = 1). The paired comparison of two configurations uses the per-seed differences (same seed = same SFT model,
same data order), so seed-to-seed variation shared by both configurations cancels.

The table at equal Q_pos (docs/raremode.md, "M_ret and ΔNLL_rare at equal Q_pos"). A configuration that learns more
slowly (the lr × m_γ control) keeps more rare mass at a fixed step simply because it has moved less; at equal Q_pos
the comparison is like for like. Each run's per-step curve is read where its Q_pos first reaches the level
(``fgrpo_verl.evaluation.frontier.at_level``: linear interpolation between the two steps around the crossing, which
also gives the fractional step reached). Then, per configuration, the seed mean ± 95 % t-interval of M_ret,
ΔNLL_rare and the step (:func:`t_interval`), and the paired difference to GRPO over the seeds where both reached the
level (:func:`paired_difference`).

Levels: by default the highest level every completed run reaches (the lowest per-run peak of Q_pos, rounded down
to 3 decimals) and the midpoint between the SFT start's Q_pos and it (``frontier.default_levels``); or the user's.
A run that never reaches a level is counted and named, never dropped silently. A run whose Q_pos curve holds a
non-finite value (a diverged policy) is not read at all: it is counted as not reaching any level, named under
``invalid_seeds`` and in the table, and left out of the default levels.

Works on the demo's in-memory results and on a loaded ``raremode_results.json`` alike (seed and step keys are
ints in memory, strings in JSON).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from fgrpo_verl.evaluation.frontier import above_start, at_level, default_levels
from fgrpo_verl.theory.plots import pyplot, save


@dataclass(frozen=True)
class Interval:
    mean: float
    half_width: float  # nan with a single seed
    n: int

    def __str__(self) -> str:
        if math.isnan(self.half_width):
            return f"{self.mean:.3f}"
        return f"{self.mean:.3f} ± {self.half_width:.3f}"

    @property
    def excludes_zero(self) -> bool:
        return not math.isnan(self.half_width) and abs(self.mean) > self.half_width

    def marked(self) -> str:
        """The interval as text, with ``*`` when it excludes 0 (how the tables mark a paired difference)."""
        return str(self) + ("*" if self.excludes_zero else "")


def t_quantile(p: float, df: int) -> float:
    """Quantile of Student's t with ``df`` degrees of freedom, p in (0.5, 1): bisection on the CDF, whose
    integral from 0 is a Simpson sum of the density over the substitution x = tan(u) (finite interval)."""
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)

    def cdf(x: float) -> float:
        u = np.linspace(0.0, math.atan(x), 2001)
        xs = np.tan(u)
        f = np.exp(log_c - (df + 1) / 2 * np.log1p(xs * xs / df)) / np.cos(u) ** 2
        h = u[1] - u[0]
        return 0.5 + h / 3 * (f[0] + f[-1] + 4 * f[1:-1:2].sum() + 2 * f[2:-1:2].sum())

    lo, hi = 0.0, 1.0
    while cdf(hi) < p:
        hi *= 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < p else (lo, mid)
    return (lo + hi) / 2


def t_interval(values, level: float = 0.95) -> Interval:
    v = np.asarray(values, dtype=np.float64)  # one value per seed, at least one (the callers' completed runs)
    if v.size == 1:
        return Interval(float(v[0]), float("nan"), 1)
    half = float(t_quantile(0.5 + level / 2, v.size - 1) * v.std(ddof=1) / math.sqrt(v.size))
    return Interval(float(v.mean()), half, int(v.size))


def paired_difference(a, b, level: float = 0.95) -> Interval:
    """Interval of mean(a - b) over seeds; ``a[i]`` and ``b[i]`` must come from the same seed."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"paired values need one value per seed on both sides, got {a.shape} and {b.shape}")
    return t_interval(a - b, level)


EQUAL_Q_METRICS = ("m_ret", "delta_nll_rare")
REFERENCE = "grpo"


def _curve(run: dict):
    """(steps, Q_pos, {metric: values}) in step order; None when Q_pos is not finite everywhere (a diverged run:
    its crossing is undefined)."""
    points = sorted((int(t), m) for t, m in run["curve"].items())
    q = [m["q_pos"] for _, m in points]
    if not all(math.isfinite(x) for x in q):
        return None
    return [t for t, _ in points], q, {k: [m[k] for _, m in points] for k in EQUAL_Q_METRICS}


def equal_q_report(runs: dict, start_q: float, levels: list[float] | None = None) -> tuple[list[str], dict]:
    """Table lines and the JSON block for ``runs`` ({config: {seed: {"curve": {step: metrics}}}}, completed runs
    only) at ``levels`` (None: the default levels, module docstring)."""
    curves = {name: {int(seed): _curve(run) for seed, run in by_seed.items()}
              for name, by_seed in runs.items() if by_seed}
    if not curves:
        return ["at equal Q_pos: no completed run"], {"levels": [], "by_level": []}
    source = "given"
    if levels is None:
        source = "default"
        peaks = [max(c[1]) for by_seed in curves.values() for c in by_seed.values() if c is not None]
        if not peaks:
            return ["at equal Q_pos: no completed run has a finite Q_pos curve"], {"levels": [], "by_level": []}
        levels = default_levels(start_q, peaks)
    levels, at_start = above_start(levels, start_q)
    about = {"levels_source": source, "levels_at_or_below_start": at_start, "start_q_pos": start_q}
    if not levels:
        why = (f"level(s) {', '.join(f'{x:.3f}' for x in at_start)} at or below" if at_start
               else "no run's Q_pos rises above")
        return ([f"at equal Q_pos: {why} the SFT start {start_q:.3f}: every run is there at step 0, nothing to compare"],
                {"levels": [], **about, "by_level": []})
    header = (f"{'configuration':<20}{'reached':>9}{'step':>16}{'M_ret':>16}{'ΔNLL_rare':>16}"
              f"{'M_ret - grpo':>17}{'ΔNLL - grpo':>17}")
    lines = ["", f"at equal Q_pos (levels {', '.join(f'{x:.3f}' for x in levels)}, {source}; SFT start "
                 f"{start_q:.3f}): each run read where its Q_pos first reaches the level (linear interpolation "
                 "between steps); mean ± 95% CI over the seeds that reach it; paired differences to GRPO over seeds "
                 "where both do, * = CI excludes 0"]
    if at_start:
        lines.append(f"level(s) {', '.join(f'{x:.3f}' for x in at_start)} at or below the SFT start: every run is there "
                     "at step 0, not read")
    invalid = {name: sorted(s for s, c in by_seed.items() if c is None) for name, by_seed in curves.items()}
    for name, seeds in invalid.items():
        if seeds:
            lines.append(f"{name}: seed(s) {seeds} have a non-finite Q_pos in their curve: not read, counted as not reached")
    blocks = []
    for level in levels:
        # {config: {seed: Crossing, or None where the run never reaches the level or has no finite curve}}
        hits = {name: {s: None if c is None else at_level(*c, level) for s, c in by_seed.items()}
                for name, by_seed in curves.items()}
        lines += ["", f"Q_pos {level:.3f}", header, "-" * len(header)]
        block = {"q_pos": level, "configs": {}}
        for name, by_seed in hits.items():
            reached = {s: c for s, c in by_seed.items() if c is not None}
            entry = {"seeds": len(by_seed), "reached": len(reached),
                     "not_reached_seeds": sorted(s for s, c in by_seed.items() if c is None),
                     "invalid_seeds": invalid[name],
                     "per_seed": {str(s): None if c is None else {"step": c.step, **c.values} for s, c in by_seed.items()}}
            block["configs"][name] = entry
            count = f"{len(reached)}/{len(by_seed)}"
            if not reached:
                lines.append(f"{name:<20}{count:>9}  never reaches Q_pos {level:.3f}")
                continue
            seeds = sorted(reached)
            stats = {"step": t_interval([reached[s].step for s in seeds]),
                     **{k: t_interval([reached[s].values[k] for s in seeds]) for k in EQUAL_Q_METRICS}}
            entry.update({k: asdict(v) for k, v in stats.items()})
            diffs = []
            ref = hits.get(REFERENCE, {})
            common = [s for s in seeds if ref.get(s) is not None]
            if name != REFERENCE and common:
                for k in EQUAL_Q_METRICS:
                    d = paired_difference([reached[s].values[k] for s in common], [ref[s].values[k] for s in common])
                    entry[f"diff_vs_grpo_{k}"] = {**asdict(d), "seeds": common}
                    diffs.append(d.marked())
            lines.append(f"{name:<20}{count:>9}{str(stats['step']):>16}{str(stats['m_ret']):>16}"
                         f"{str(stats['delta_nll_rare']):>16}" + "".join(f"{c:>17}" for c in diffs))
        blocks.append(block)
    return lines, {"levels": list(levels), **about, "by_level": blocks}


def report_from_results(results: dict, levels: list[float] | None = None) -> tuple[list[str], dict]:
    """``equal_q_report`` over a loaded ``raremode_results.json``."""
    return equal_q_report(results["runs"], results["sft_start"]["q_pos"], levels)


CURVES = (("q_pos", "Q_pos (held-out correct mass)"), ("m_ret", "M_ret of the initially rare correct answers"),
          ("delta_nll_rare", "ΔNLL_rare (App. M.2)"))


def plot_curves(curves: dict[str, dict[int, dict[int, dict]]], path: Path, title: str) -> Path:
    """Per-step curves (like the paper's Fig. 2 a/b): ``curves[config][seed][step]`` = metrics dict, one panel per
    metric, the mean over seeds with its 95% band; and the frontier, M_ret against Q_pos along the seed-mean curves
    (where the equal-Q_pos table reads them)."""
    # per configuration: the steps every seed has, and per metric the seed mean and 95% interval at each
    seed_stats = {}
    for name, by_seed in curves.items():
        steps = sorted(set.intersection(*(set(s) for s in by_seed.values())))
        seed_stats[name] = steps, {key: [t_interval([by_seed[seed][t][key] for seed in by_seed]) for t in steps]
                                   for key, _ in CURVES}
    fig, axes = pyplot().subplots(1, len(CURVES) + 1, figsize=(5 * (len(CURVES) + 1), 4))
    for ax, (key, label) in zip(axes, CURVES):
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
