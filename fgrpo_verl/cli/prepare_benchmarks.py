"""``fgrpo-verl prepare-benchmarks``: the paper's evaluation benchmarks from the Hugging Face hub to local files.

Writes ``OUT/<NAME>.jsonl`` (the format of ``fgrpo-verl eval``) for MATH500, AIME24, AIME25, AMC23, Minerva,
Olympiad, GPQA, IFEval and SynLogic, and prints the matching ``--bench`` / ``--bench-scorer`` flags on stdout
(progress on stderr). Needs hub access; GPQA is gated (accept its terms and ``hf auth login`` first). The
conversion is ``fgrpo_verl.evaluation.prepare``.

    fgrpo-verl prepare-benchmarks --out data/benchmarks
    fgrpo-verl prepare-benchmarks --out data/benchmarks --only MATH500 AIME24 --source AIME24=Maxwell-Jia/AIME_2024:train
    fgrpo-verl prepare-benchmarks --out data/benchmarks --verl-parquet   # + AIME25.parquet etc. (validation=aime25)
"""

from __future__ import annotations

import argparse

HELP = ("Download the paper's evaluation benchmarks (hub access; GPQA is gated) and write OUT/<NAME>.jsonl for "
        "`fgrpo-verl eval`; prints the matching --bench flags.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from fgrpo_verl.evaluation.prepare import BENCHMARKS, SOURCE_FORMAT

    parser.add_argument("--out", required=True, help="directory for the <NAME>.jsonl files")
    parser.add_argument("--only", nargs="+", choices=list(BENCHMARKS), help="prepare only these benchmarks")
    parser.add_argument("--source", action="append", default=[], metavar=SOURCE_FORMAT,
                        help="override a benchmark's hub source (repeat)")
    parser.add_argument("--verl-parquet", action="store_true",
                        help="also write OUT/<NAME>.parquet in verl's RL format with the training prompt (math "
                             "benchmarks; validation=aime25 reads AIME25.parquet)")


def run(args: argparse.Namespace) -> int:
    from fgrpo_verl.evaluation.prepare import parse_source_overrides, prepare_benchmarks

    # every --source is checked before the first download
    sources = parse_source_overrides(args.source)
    flags = prepare_benchmarks(args.out, args.only, sources, verl_parquet=args.verl_parquet)
    print(" \\\n  ".join(flags))
    return 0
