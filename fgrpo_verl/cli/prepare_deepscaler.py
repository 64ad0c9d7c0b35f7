"""``fgrpo-verl prepare-deepscaler``: DeepScaleR from a local copy to verl parquet, as the F-GRPO paper did."""

from __future__ import annotations

import argparse

HELP = "Prepare DeepScaleR (local copy) as the paper did: <=1024-token prompts, no conflicting duplicates, boxed prompt."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input", action="append", required=True, help="DeepScaleR file (.parquet/.jsonl/.json); repeatable")
    parser.add_argument("--tokenizer", required=True, help="tokenizer of the model to train (local dir or cached hub id)")
    parser.add_argument("--out-dir", required=True, help="writes train.parquet, val.parquet and prepare.json here")
    parser.add_argument("--val-input", action="append", default=[], help="held-out problems, same format; repeatable (default: val.parquet = 64 training prompts)")
    parser.add_argument("--max-prompt-tokens", type=int, default=1024, help="drop longer prompts (paper: 1024)")


def run(args: argparse.Namespace) -> int:
    import json
    from dataclasses import asdict

    from fgrpo_verl.config.errors import require_files
    from fgrpo_verl.data.deepscaler import prepare_files

    require_files("--input", args.input)
    require_files("--val-input", args.val_input)
    results = prepare_files(args.input, args.tokenizer, args.out_dir, args.val_input, args.max_prompt_tokens)
    print(json.dumps({split: asdict(stats) for split, stats in results.items()}, indent=2))
    return 0
