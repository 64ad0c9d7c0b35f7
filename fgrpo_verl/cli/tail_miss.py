"""``fgrpo-verl tail-miss``: Lemma 3.1's tail-miss probability (and eq. 7's active probability) for a grid."""

from __future__ import annotations

import argparse
import itertools
import json
import sys

HELP = "Tail-miss probability (Lemma 3.1) and active probability (eq. 7) for every (mu, tau, n); table, JSON or plot."


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


def _rows(args):
    from fgrpo_verl.theory.tail_miss import active_probability, tail_miss_probability

    rows = []
    rare = args.tau if args.tau is not None else args.rho
    for mu, r, n in itertools.product(args.mu, rare, args.n):
        tau = r if args.tau is not None else r * mu
        if args.rho is not None and not 0 < r < 1:
            raise ValueError(f"rho={r!r} is invalid: must be in (0, 1)")
        tail = float(tail_miss_probability(mu, tau, n))
        rows.append({"mu": mu, "tau": tau, "n": int(n), "active": float(active_probability(mu, n)), "tail_miss": tail})
    return rows


def _plot(args):
    from fgrpo_verl.theory._checks import group_size_array
    from fgrpo_verl.theory.plots import plot_tail_miss

    group_size_array("n_max", args.n_max)
    mus = args.mu or [0.8, 0.5, 0.2]
    if args.tau is not None:
        rhos = sorted({t / mu for t in args.tau for mu in mus})
        if len(mus) > 1:
            raise ValueError("--tau with --plot needs exactly one --mu (curves are per rho = tau/mu); or use --rho")
    else:
        rhos = args.rho or [0.01, 0.05, 0.1, 0.2]
    for r in rhos:
        if not 0 < r < 1:
            raise ValueError(f"rho={r!r} is invalid: must be in (0, 1)")
    return plot_tail_miss(mus, rhos, args.plot, n_max=args.n_max)


def run(args) -> int:
    try:
        if args.plot is None and (args.mu is None or args.n is None or (args.tau is None and args.rho is None)):
            raise ValueError("give --mu, --tau (or --rho) and --n; or --plot PATH for the figure")
        if args.plot is not None:
            path = _plot(args)
            print(f"wrote {path}", file=sys.stderr)
            if args.mu is None or args.n is None or (args.tau is None and args.rho is None):
                return 0
        rows = _rows(args)
    except ValueError as err:  # errors: fgrpo_verl/cli/errors.py (exit 2), with the theory's names as the flags
        from fgrpo_verl.cli.errors import with_flag_names

        flags = {"mu": "--mu", "tau": "--tau", "rho": "--rho", "n_max": "--n-max", "n": "--n"}
        raise ValueError(with_flag_names(str(err), flags)) from err
    if args.json:
        print(json.dumps(rows))
        return 0
    print(f"{'mu':>8} {'tau':>10} {'n':>8} {'active':>10} {'tail_miss':>10}")
    for r in rows:
        print(f"{r['mu']:>8.4g} {r['tau']:>10.4g} {r['n']:>8d} {r['active']:>10.4f} {r['tail_miss']:>10.4g}")
    return 0
