"""``fgrpo-verl m-gamma``: the mean shrink factor m_γ (paper App. N), the scale-matched control's learning rate, and
with ``--plot`` the paper's Fig. 4 (g·|A| against μ, App. I).

m_γ = (4/√π) Γ(γ + 3/2) / Γ(γ + 3) is the mean of F-GRPO's weight (1 − μ)^γ over groups, with the
std-normalised |A| ∝ sqrt(μ(1 − μ)) and μ ~ U[0, 1] (``fgrpo_verl.theory.shrink``, docs/theory.md §2): F-GRPO's
mean |advantage| is m_γ times GRPO's, and so would its mean update be under plain SGD; under Adam(W) a common scale
cancels (docs/raremode.md). The paper's control for "is the gain more than a smaller step?" is GRPO with
``actor_rollout_ref.actor.optim.lr`` = lr × m_γ (1e-6 × 0.679 = 6.8e-7 for γ = 0.5, App. N / Table 3).
"""

from __future__ import annotations

import argparse
import json

HELP = ("Mean shrink factor m_gamma (paper App. N) of each gamma, the lr x m_gamma of the scale-matched GRPO control; "
        "--plot: Fig. 4, g x |A| against mu")
TABLE_GAMMAS, FIG4_GAMMAS = [0.5, 1.0, 2.0], [0.0, 0.5, 1.0]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--gamma", type=float, nargs="+", default=None,
                        help="focal strengths gamma >= 0 (default: the paper's sweep 0.5 1 2; with --plot, Fig. 4's 0 0.5 1)")
    parser.add_argument("--plot", metavar="PATH",
                        help="also draw the paper's Fig. 4 (App. I) as a PNG: g x |A^GRPO| against mu for each gamma, "
                             "solid for a correct rollout, dashed for a wrong one (1/0 rewards)")
    parser.add_argument("--lr", type=float, default=1e-6,
                        help="GRPO learning rate to scale (default 1e-6, the paper's; the control uses lr x m_gamma)")
    parser.add_argument("--json", action="store_true", help='print a JSON list of {"gamma", "m_gamma", "control_lr"}')


def run(args: argparse.Namespace) -> int:
    import math

    import numpy as np

    from fgrpo_verl.theory.shrink import mean_shrink

    if not (math.isfinite(args.lr) and args.lr > 0):
        raise ValueError(f"--lr {args.lr!r} is invalid: must be a finite number > 0")
    gammas = args.gamma or (FIG4_GAMMAS if args.plot else TABLE_GAMMAS)
    try:
        shrinks = [float(m) for m in np.atleast_1d(mean_shrink(gammas))]
    except ValueError as err:
        raise ValueError(f"--gamma: {err}") from err
    rows = [{"gamma": gamma, "m_gamma": m, "control_lr": args.lr * m} for gamma, m in zip(gammas, shrinks)]
    if args.plot:
        import sys

        from fgrpo_verl.theory.plots import plot_focal_weight

        print(f"wrote {plot_focal_weight(gammas, args.plot)}", file=sys.stderr)
    if args.json:
        print(json.dumps(rows))
        return 0
    print(f"{'gamma':>8} {'m_gamma':>9} {'control lr (lr x m_gamma)':>27}")
    for r in rows:
        print(f"{r['gamma']:>8g} {r['m_gamma']:>9.4f} {r['control_lr']:>27.3g}")
    print(f"control: GRPO (algorithm.fgrpo.gamma=0) with actor_rollout_ref.actor.optim.lr=<control lr>, from lr {args.lr:g}")
    return 0
