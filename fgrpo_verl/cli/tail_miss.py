"""``fgrpo-verl tail-miss``: Lemma 3.1's tail-miss probability (and eq. 7's active probability) for a grid."""

from __future__ import annotations

import argparse
import itertools
import json
import sys

HELP = "Tail-miss probability (Lemma 3.1) and active probability (eq. 7) for every (mu, tau, n); table, JSON or plot."
# the theory modules name their arguments; the command line has flags for them
FLAGS = {"mu": "--mu", "tau": "--tau", "rho": "--rho", "n_max": "--n-max", "n": "--n"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mu", type=float, nargs="+", help="success probability mu_pos in [0, 1] (one or more)")
    rare = parser.add_mutually_exclusive_group()
    rare.add_argument("--tau", type=float, nargs="+", help="rare-subset mass tau in (0, mu) (one or more)")
    rare.add_argument("--rho", type=float, nargs="+", help="rare fraction rho = tau/mu in (0, 1), instead of --tau")
    parser.add_argument("--n", type=float, nargs="+", help="group size N, a whole number >= 1 (one or more)")
    parser.add_argument("--json", action="store_true", help='print a JSON list of {"mu","tau","n","active","tail_miss"}')
    parser.add_argument(
        "--plot",
        metavar="PATH",
        help="draw the App. Fig. 3-style PNG: one panel per --mu (default 0.8 0.5 0.2), one curve per --rho "
        "(default 0.01 0.05 0.1 0.2; or --tau/mu), N = 1..--n-max on a log axis, peaks starred",
    )
    parser.add_argument("--n-max", type=int, default=512, help="largest N drawn by --plot (default 512)")


def _check_rho(rhos) -> None:
    from fgrpo_verl.theory._checks import real_array

    real_array("rho", rhos, low=0.0, high=1.0, low_open=True, high_open=True)


def run(args) -> int:
    from fgrpo_verl.cli.errors import flag_names
    from fgrpo_verl.theory.tail_miss import active_probability, tail_miss_probability

    table = args.mu is not None and args.n is not None and (args.tau is not None or args.rho is not None)
    rows = []
    with flag_names(FLAGS):
        if args.plot is None and not table:
            raise ValueError("give --mu, --tau (or --rho) and --n; or --plot PATH for the figure")
        if args.plot is not None:
            from fgrpo_verl.theory._checks import group_size_array
            from fgrpo_verl.theory.plots import plot_tail_miss

            group_size_array("n_max", args.n_max)
            mus = args.mu or [0.8, 0.5, 0.2]
            if args.tau is not None and len(mus) > 1:
                raise ValueError("--tau with --plot needs exactly one --mu (curves are per rho = tau/mu); or use --rho")
            rhos = args.rho or [0.01, 0.05, 0.1, 0.2] if args.tau is None else sorted({t / mus[0] for t in args.tau})
            _check_rho(rhos)
            print(f"wrote {plot_tail_miss(mus, rhos, args.plot, n_max=args.n_max)}", file=sys.stderr)
        if table and args.rho is not None:
            _check_rho(args.rho)
        for mu, r, n in itertools.product(args.mu, args.tau or args.rho, args.n) if table else ():
            tau = r if args.tau is not None else r * mu
            tail = float(tail_miss_probability(mu, tau, n))  # checks n before int() below
            rows.append({"mu": mu, "tau": tau, "n": int(n), "active": float(active_probability(mu, n)),
                         "tail_miss": tail})
    if not table:
        return 0
    if args.json:
        print(json.dumps(rows))
        return 0
    print(f"{'mu':>8} {'tau':>10} {'n':>8} {'active':>10} {'tail_miss':>10}")
    for r in rows:
        print(f"{r['mu']:>8.4g} {r['tau']:>10.4g} {r['n']:>8d} {r['active']:>10.4f} {r['tail_miss']:>10.4g}")
    return 0
