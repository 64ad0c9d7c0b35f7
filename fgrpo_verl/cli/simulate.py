"""``fgrpo-verl simulate``: the paper's categorical simulation (§5.1, Fig. 2), quick by default or ``--paper``.

Quick default (≲ 1 minute on 2 cores): the paper's policy scaled down 10× (12,800 actions, 1,000 correct, the
same logits, so Q_pos = 0.631 and each non-anchor correct action has 6.3e-4 instead of 6.3e-5), N = 2, 8, …,
32768, γ ∈ {0, 1}, 2 seeds, 1,000 steps. Being 10× smaller, its concentration zone sits 10× lower in N.
``--paper``: 128,000 actions, 10,000 correct, N = 2, 4, …, 131072, γ ∈ {0, 1}, 4 seeds, 1,000 steps.
``--control``: for every γ > 0, also GRPO (γ = 0) at lr × m_γ (the paper's scale-matched control, App. N).

Besides the final state, the readout at equal Q_pos (summary.json "equal_q_pos", printed): for each N, each
configuration's seed-mean curve is read where its Q_pos first reaches a level (``fgrpo_verl.evaluation.frontier``,
linear interpolation between steps): M_ret there and the (fractional) step. Levels: ``--q-levels``, or by default
per N the highest level every configuration's mean curve reaches and the midpoint from the initial Q_pos.
"""

from __future__ import annotations

import argparse
import itertools
import json
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
    parser.add_argument("--control", action="store_true",
                        help="also run, for every gamma > 0, GRPO (gamma 0) at lr x m_gamma (scale-matched control)")
    parser.add_argument("--q-levels", type=float, nargs="+",
                        help="Q_pos levels in (0, 1) of the equal-Q_pos readout, used at every N, reported in increasing "
                             "order (default per N: the highest level every configuration reaches, and the midpoint "
                             "from the initial Q_pos)")
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
    controls = tuple(g for g in pick["gamma"] if g > 0) if args.control else ()
    if args.control and not controls:
        raise ValueError(f"--control needs a gamma > 0 in --gamma (got {pick['gamma']}): the control is GRPO at lr x m_gamma")
    return SimulationConfig(
        group_sizes=tuple(pick["n"]),
        gammas=tuple(pick["gamma"]),
        seeds=pick["seeds"],
        steps=pick["steps"],
        setup=setup,
        controls=controls,
        **{key: getattr(args, key) for key in ("lr", "surrogate", "optimizer", "seed")},  # the flags of these names
    )


def equal_q_pos(result, levels=None) -> list:
    """Per N: each configuration's seed-mean (Q_pos, M_ret) curve read where Q_pos first reaches each level
    (``frontier.at_level``), and each seed's own curve read the same way (``m_ret_per_seed``, ``step_per_seed``:
    the spread behind the mean). ``levels`` None: per N, ``frontier.default_levels`` of the initial Q_pos and the
    peaks of the configurations' mean curves. A level a curve never reaches gives None."""
    from fgrpo_verl.evaluation.frontier import above_start, at_level, default_levels

    cfg = result.config
    q_mean, m_mean = result.q_pos.mean(-1), result.m_ret.mean(-1)  # (step, N, configuration)
    steps = list(range(q_mean.shape[0]))
    out = []
    for i, n in enumerate(cfg.group_sizes):
        q0 = float(q_mean[0, i, 0])  # every configuration starts from the same logits
        at_n = levels if levels is not None else default_levels(q0, q_mean[:, i, :].max(0).tolist())
        at_n, at_start = above_start(at_n, q0)
        rows = []
        for level in at_n:
            for ci, c in enumerate(cfg.configurations):
                hit = at_level(steps, q_mean[:, i, ci], {"m_ret": m_mean[:, i, ci]}, level)
                seeds = [at_level(steps, result.q_pos[:, i, ci, s], {"m_ret": result.m_ret[:, i, ci, s]}, level)
                         for s in range(cfg.seeds)]
                rows.append({"q_pos": level, "config": c.name, "gamma": c.gamma, "lr": c.lr,
                             "m_ret": None if hit is None else hit.values["m_ret"], "step": None if hit is None else hit.step,
                             "m_ret_per_seed": [None if h is None else h.values["m_ret"] for h in seeds],
                             "step_per_seed": [None if h is None else h.step for h in seeds]})
        out.append({"n": int(n), "levels": list(at_n), "levels_source": "default" if levels is None else "given",
                    "levels_at_or_below_start": at_start, "start_q_pos": q0, "rows": rows})
    return out


def write_outputs(result, out: Path, zone_threshold: float, q_levels=None) -> dict:
    """final.csv (one row per run), curves.csv (seed means per step), summary.json, and the Fig. 2 PNGs.

    Both CSVs end with the columns config (``RunConfig.name``) and lr; with ``--control`` the control's rows have
    gamma 0 (the γ it trains with) and config ``grpo_lr_x_m<γ>``."""
    import numpy as np

    from fgrpo_verl.theory.categorical import concentration_zone
    from fgrpo_verl.theory.plots import plot_simulation

    cfg = result.config
    out.mkdir(parents=True, exist_ok=True)
    ns, configs = list(cfg.group_sizes), cfg.configurations
    runs = list(itertools.product(enumerate(ns), enumerate(configs)))  # ((N's index, N), (its index, RunConfig))
    with open(out / "final.csv", "w") as f:
        f.write("n,gamma,seed,q_pos,m_ret,anchor,entropy,config,lr\n")
        for ((i, n), (gi, c)), s in itertools.product(runs, range(cfg.seeds)):
            f.write(f"{n},{c.gamma:g},{s},{result.q_pos[-1, i, gi, s]:.6f},{result.m_ret[-1, i, gi, s]:.6f},"
                    f"{result.anchor[-1, i, gi, s]:.6g},{result.final_entropy[i, gi, s]:.4f},{c.name},{c.lr:g}\n")
    q_mean, m_mean = result.q_pos.mean(-1), result.m_ret.mean(-1)
    with open(out / "curves.csv", "w") as f:
        f.write("step,n,gamma,q_pos_mean,m_ret_mean,config,lr\n")
        for t, ((i, n), (gi, c)) in itertools.product(range(q_mean.shape[0]), runs):
            f.write(f"{t},{n},{c.gamma:g},{q_mean[t, i, gi]:.6f},{m_mean[t, i, gi]:.6f},{c.name},{c.lr:g}\n")
    zone = concentration_zone(ns, m_mean[-1, :, 0], threshold=zone_threshold)
    # the N of Fig. 2's curve panels: the paper's where the grid has them, else four spread over it
    spread = sorted({ns[round(i * (len(ns) - 1) / 3)] for i in range(4)})
    pngs = plot_simulation(result, out, PAPER_CURVES if all(n in ns for n in PAPER_CURVES) else spread, zone)
    summary = {
        "config": {
            "group_sizes": ns,
            "gammas": list(cfg.gammas),
            "controls": list(cfg.controls),
            "configurations": [{"config": c.name, "gamma": c.gamma, "lr": c.lr} for c in configs],
            **{key: getattr(cfg, key) for key in ("seeds", "steps", "lr", "surrogate", "optimizer", "seed")},
            **{key: getattr(cfg.setup, key) for key in ("num_actions", "num_correct")},
        },
        "initial": cfg.setup.initial_masses(),
        "seconds": round(result.seconds, 2),
        "zone_threshold": zone_threshold,
        "zone_II": None if zone is None else {"first_n": zone[0], "last_n": zone[1]},
        "final": [
            {
                "n": n,
                "gamma": c.gamma,
                "config": c.name,
                "lr": c.lr,
                "q_pos_mean": float(q_mean[-1, i, gi]),
                "m_ret_mean": float(m_mean[-1, i, gi]),
                "m_ret_min_over_seeds": float(result.m_ret[-1, i, gi].min()),
                "m_ret_max_over_seeds": float(result.m_ret[-1, i, gi].max()),
                "entropy_mean": float(np.mean(result.final_entropy[i, gi])),
            }
            for (i, n), (gi, c) in runs
        ],
        "equal_q_pos": equal_q_pos(result, q_levels),
        "plots": [p.name for p in pngs],
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary


# the theory modules name their arguments; the command line has flags for them
FLAGS = {"zone_threshold": "--zone-threshold", "num_actions": "--actions", "num_correct": "--correct",
         "group_sizes": "--n", "gammas": "--gamma", "seeds": "--seeds", "steps": "--steps", "lr": "--lr"}


def run(args) -> int:
    from fgrpo_verl.cli.errors import flag_names
    from fgrpo_verl.evaluation.frontier import check_levels

    with flag_names(FLAGS):
        config = _config(args)
        q_levels = None if args.q_levels is None else check_levels("--q-levels", args.q_levels)
    from fgrpo_verl.theory.categorical import simulate

    result = simulate(config, progress=not args.no_progress)
    summary = write_outputs(result, Path(args.out), args.zone_threshold, q_levels)
    print(f"{'N':>7} {'config':>16} {'lr':>9} {'Q_pos':>7} {'M_ret':>7}")
    for row in summary["final"]:
        print(f"{row['n']:>7d} {row['config']:>16} {row['lr']:>9.3g} {row['q_pos_mean']:>7.3f} {row['m_ret_mean']:>7.3f}")
    print("at equal Q_pos (seed-mean curves, first crossing, linear interpolation): M_ret @ step")
    print(f"{'N':>7} {'Q_pos':>6} " + " ".join(f"{c.name:>20}" for c in config.configurations))
    for block in summary["equal_q_pos"]:
        if block["levels_at_or_below_start"]:
            print(f"{block['n']:>7d} level(s) {', '.join(f'{x:.3f}' for x in block['levels_at_or_below_start'])} at or "
                  f"below the initial Q_pos {block['start_q_pos']:.3f}: every run is there at step 0, not read")
        for level in block["levels"]:
            cells = [r for r in block["rows"] if r["q_pos"] == level]
            print(f"{block['n']:>7d} {level:>6.3f} " + " ".join(
                f"{'never reached':>20}" if r["m_ret"] is None else f"{r['m_ret']:>9.3f} @ {r['step']:>8.1f}" for r in cells))
    zone = summary["zone_II"]
    print(
        f"zone II (M_ret < {args.zone_threshold:g} at gamma={config.gammas[0]:g}): "
        + ("none" if zone is None else f"N = {zone['first_n']} .. {zone['last_n']}")
    )
    print(f"simulated {len(config.group_sizes) * len(config.configurations) * config.seeds} runs in {result.seconds:.1f} s; wrote {args.out}/")
    return 0
