"""``fgrpo-verl simulate``: the paper's categorical simulation (§5.1, Fig. 2), quick by default or ``--paper``.

Quick default (≲ 1 minute on 2 cores): the paper's policy scaled down 10× (12,800 actions, 1,000 correct, the
same logits, so Q_pos = 0.631 and each non-anchor correct action has 6.3e-4 instead of 6.3e-5), N = 2, 8, …,
32768, γ ∈ {0, 1}, 2 seeds, 1,000 steps. Being 10× smaller, its concentration zone sits 10× lower in N.
``--paper``: 128,000 actions, 10,000 correct, N = 2, 4, …, 131072, γ ∈ {0, 1}, 4 seeds, 1,000 steps.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HELP = "Categorical simulation of concentration (paper §5.1, Fig. 2): CSV/JSON numbers and Fig. 2 PNGs."

QUICK = {"actions": 12_800, "correct": 1_000, "n": [2**k for k in range(1, 16, 2)], "gamma": [0.0, 1.0], "seeds": 2, "steps": 1000}
PAPER = {"actions": 128_000, "correct": 10_000, "n": [2**k for k in range(1, 18)], "gamma": [0.0, 1.0], "seeds": 4, "steps": 1000}
PAPER_CURVES = [2, 256, 8192, 131072]  # the N drawn in the paper's Fig. 2 (a, b)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--paper", action="store_true", help="the paper's full grid (17 N x 2 gamma x 4 seeds, 128k actions)")
    parser.add_argument("--n", type=int, nargs="+", help=f"group sizes N (quick default {QUICK['n']})")
    parser.add_argument("--gamma", type=float, nargs="+", help="focal strengths gamma >= 0 (default 0 1)")
    parser.add_argument("--seeds", type=int, help="independent runs per (N, gamma) (quick 2, paper 4)")
    parser.add_argument("--steps", type=int, help="training steps (default 1000)")
    parser.add_argument("--actions", type=int, help="number of actions (quick 12800, paper 128000)")
    parser.add_argument("--correct", type=int, help="number of correct actions, the anchor included (quick 1000, paper 10000)")
    parser.add_argument("--lr", type=float, default=1e-2, help="learning rate eta (paper 1e-2)")
    parser.add_argument("--surrogate", choices=["log", "linear"], default="log", help="objective; see docs/theory.md (default log)")
    parser.add_argument("--optimizer", choices=["adam", "sgd"], default="adam", help="ascent rule; see docs/theory.md (default adam)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the sampling generator (default 0)")
    parser.add_argument(
        "--zone-threshold",
        type=float,
        default=0.5,
        help="zone II (concentration) = the N whose final M_ret at the first gamma, mean over seeds, is below this (default 0.5)",
    )
    parser.add_argument("--out", default="simulate_out", help="output directory (default ./simulate_out)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def _config(args):
    from fgrpo_verl.theory.categorical import CategoricalSetup, SimulationConfig

    base = PAPER if args.paper else QUICK
    if args.paper:
        given = [f"--{k}" for k in ("n", "gamma", "seeds", "steps", "actions", "correct") if getattr(args, k) is not None]
        if given:
            raise ValueError(f"--paper fixes the grid; drop {', '.join(given)} (or drop --paper to set them yourself)")
    pick = {k: (getattr(args, k) if getattr(args, k) is not None else base[k]) for k in base}
    if not 0 < args.zone_threshold <= 1:
        raise ValueError(f"zone_threshold={args.zone_threshold!r} is invalid: must be in (0, 1]")
    setup = CategoricalSetup(num_actions=pick["actions"], num_correct=pick["correct"])
    return SimulationConfig(
        group_sizes=tuple(pick["n"]),
        gammas=tuple(pick["gamma"]),
        seeds=pick["seeds"],
        steps=pick["steps"],
        lr=args.lr,
        surrogate=args.surrogate,
        optimizer=args.optimizer,
        seed=args.seed,
        setup=setup,
    )


def _curve_ns(ns):
    if all(n in ns for n in PAPER_CURVES):
        return PAPER_CURVES
    picks = sorted({ns[round(i * (len(ns) - 1) / 3)] for i in range(4)})
    return picks


def write_outputs(result, out: Path, zone_threshold: float) -> dict:
    """final.csv (one row per run), curves.csv (seed means per step), summary.json, and the Fig. 2 PNGs."""
    import numpy as np

    from fgrpo_verl.theory.categorical import concentration_zone
    from fgrpo_verl.theory.plots import plot_simulation

    cfg = result.config
    out.mkdir(parents=True, exist_ok=True)
    ns, gammas = list(cfg.group_sizes), list(cfg.gammas)
    with open(out / "final.csv", "w") as f:
        f.write("n,gamma,seed,q_pos,m_ret,anchor,entropy\n")
        for i, n in enumerate(ns):
            for gi, g in enumerate(gammas):
                for s in range(cfg.seeds):
                    f.write(
                        f"{n},{g:g},{s},{result.q_pos[-1, i, gi, s]:.6f},{result.m_ret[-1, i, gi, s]:.6f},"
                        f"{result.anchor[-1, i, gi, s]:.6g},{result.final_entropy[i, gi, s]:.4f}\n"
                    )
    q_mean, m_mean = result.q_pos.mean(-1), result.m_ret.mean(-1)
    with open(out / "curves.csv", "w") as f:
        f.write("step,n,gamma,q_pos_mean,m_ret_mean\n")
        for t in range(q_mean.shape[0]):
            for i, n in enumerate(ns):
                for gi, g in enumerate(gammas):
                    f.write(f"{t},{n},{g:g},{q_mean[t, i, gi]:.6f},{m_mean[t, i, gi]:.6f}\n")
    zone = concentration_zone(ns, m_mean[-1, :, 0], threshold=zone_threshold)
    curve_ns = _curve_ns(ns)
    pngs = plot_simulation(result, out, curve_ns, zone)
    summary = {
        "config": {
            "group_sizes": ns,
            "gammas": gammas,
            "seeds": cfg.seeds,
            "steps": cfg.steps,
            "lr": cfg.lr,
            "surrogate": cfg.surrogate,
            "optimizer": cfg.optimizer,
            "seed": cfg.seed,
            "num_actions": cfg.setup.num_actions,
            "num_correct": cfg.setup.num_correct,
        },
        "initial": cfg.setup.initial_masses(),
        "seconds": round(result.seconds, 2),
        "zone_threshold": zone_threshold,
        "zone_II": None if zone is None else {"first_n": zone[0], "last_n": zone[1]},
        "final": [
            {
                "n": n,
                "gamma": g,
                "q_pos_mean": float(q_mean[-1, i, gi]),
                "m_ret_mean": float(m_mean[-1, i, gi]),
                "m_ret_min_over_seeds": float(result.m_ret[-1, i, gi].min()),
                "m_ret_max_over_seeds": float(result.m_ret[-1, i, gi].max()),
                "entropy_mean": float(np.mean(result.final_entropy[i, gi])),
            }
            for i, n in enumerate(ns)
            for gi, g in enumerate(gammas)
        ],
        "plots": [p.name for p in pngs],
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary


def run(args) -> int:
    try:
        config = _config(args)
    except ValueError as err:
        print(f"fgrpo-verl simulate: error: {err}", file=sys.stderr)
        return 2
    from fgrpo_verl.theory.categorical import simulate

    result = simulate(config, progress=not args.no_progress)
    summary = write_outputs(result, Path(args.out), args.zone_threshold)
    print(f"{'N':>7} {'gamma':>5} {'Q_pos':>7} {'M_ret':>7}")
    for row in summary["final"]:
        print(f"{row['n']:>7d} {row['gamma']:>5g} {row['q_pos_mean']:>7.3f} {row['m_ret_mean']:>7.3f}")
    zone = summary["zone_II"]
    print(
        f"zone II (M_ret < {args.zone_threshold:g} at gamma={config.gammas[0]:g}): "
        + ("none" if zone is None else f"N = {zone['first_n']} .. {zone['last_n']}")
    )
    print(f"simulated {len(config.group_sizes) * len(config.gammas) * config.seeds} runs in {result.seconds:.1f} s; wrote {args.out}/")
    return 0
