"""``fgrpo-verl report RECIPE``: the paper's tables from a recipe's runs (fgrpo_verl/report/).

Reads the run directories under the launch directory (the current one) and, for a recipe without an evaluation block
(maze: Table 4, Figs. 6-7), the runs' Slurm logs; needs no GPU, model or Slurm."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = ("The paper's tables (1, 2, 3, 4, 6, 12-14) from a recipe's evaluated checkpoints (Table 4 and Figs. 6-7: the "
        "maze runs' validation), beside the paper's; the sweep's state first, and what is missing.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("recipe", help="recipe file or shipped recipe name (paper_main), as given to launch")
    parser.add_argument("--out", default=None, help="output directory (default: reports/<recipe name>)")
    parser.add_argument("--log-dir", default="slurm_logs",
                        help="the runs' Slurm logs, as given to launch (default: slurm_logs); read for maze")
    parser.add_argument("--significance-iterations", type=int, default=50_000,
                        help="subsampling iterations of the paired test (paper App. Q: 50,000)")
    parser.add_argument("--significance-method", choices=("paper", "rescaled", "rescaled-fpc"), default="paper",
                        help="interval of the paired test (docs/evaluation.md: paper = the paper's, for comparability)")
    parser.add_argument("--no-significance", action="store_true", help="skip the paired significance test")
    parser.add_argument("--seed", type=int, default=0, help="seed of the significance test's draws")


def run(args: argparse.Namespace) -> int:
    from fgrpo_verl import verl_compat
    from fgrpo_verl.launch.recipe import load_recipe
    from fgrpo_verl.report.build import build_report

    # the report composes each run's config as the launcher did: the full release's config tree
    verl_compat.require(verl_compat.TRAIN, "this command")

    if args.significance_iterations < 1:
        raise ValueError(f"--significance-iterations must be >= 1, got {args.significance_iterations}")
    out = Path(args.out) if args.out else Path("reports") / load_recipe(args.recipe).name
    significance = None if args.no_significance else (args.significance_iterations, args.significance_method,
                                                      args.seed)
    text = build_report(args.recipe, Path.cwd(), out, significance, Path.cwd() / args.log_dir)
    print(text)
    print(f"[report] written to {out}/ (report.md, per-table .md and .csv, missing.md)", file=sys.stderr)
    return 0
