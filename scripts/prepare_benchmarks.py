#!/usr/bin/env python
"""Download the paper's evaluation benchmarks with `datasets` and write the local format of `fgrpo-verl eval`.

Needs Hugging Face hub access (GPQA is gated: accept its terms and `hf auth login` first). Writes
OUT/<NAME>.jsonl for MATH500, AIME24, AIME25, AMC23, Minerva, Olympiad, GPQA, IFEval, SynLogic and prints the
matching `--bench` / `--bench-scorer` flags. The conversion is `fgrpo_verl.evaluation.prepare` (tested offline).

    python scripts/prepare_benchmarks.py --out data/benchmarks
    python scripts/prepare_benchmarks.py --out data/benchmarks --only MATH500 AIME24 --source AIME24=Maxwell-Jia/AIME_2024:train
    python scripts/prepare_benchmarks.py --out data/benchmarks --verl-parquet   # + AIME25.parquet etc. (validation=aime25)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from fgrpo_verl.evaluation.prepare import BENCHMARKS, convert_rows, parse_source


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="directory for the <NAME>.jsonl files")
    parser.add_argument("--only", nargs="+", choices=list(BENCHMARKS), help="prepare only these benchmarks")
    parser.add_argument("--source", action="append", default=[], metavar="NAME=REPO[:CONFIG]:SPLIT",
                        help="override a benchmark's hub source (repeat)")
    parser.add_argument("--verl-parquet", action="store_true",
                        help="also write OUT/<NAME>.parquet in verl's RL format with the training prompt (math "
                             "benchmarks; validation=aime25 reads AIME25.parquet)")
    args = parser.parse_args(argv)

    overrides = {}
    for item in args.source:
        name, sep, value = item.partition("=")
        if not sep or name not in BENCHMARKS:
            parser.error(f"--source expects NAME=REPO[:CONFIG]:SPLIT with NAME in {list(BENCHMARKS)}, got {item!r}")
        overrides[name] = parse_source(value)

    from datasets import load_dataset  # needs hub access; imported here so --help works offline

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    flags = []
    for name in args.only or list(BENCHMARKS):
        spec = BENCHMARKS[name]
        src = overrides.get(name, spec.source)
        if src.data_files and name not in overrides:
            rows = load_dataset(src.repo, data_files={src.split: src.data_files}, split=src.split)
        else:
            rows = load_dataset(src.repo, src.config, split=src.split)
        records = convert_rows(name, rows)
        path = out / f"{name}.jsonl"
        with path.open("w", encoding="utf-8") as fh:
            for rec in records:
                fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
        print(f"{name}: {len(records)} problems -> {path}", file=sys.stderr)
        if args.verl_parquet and spec.scorer == "math":
            from fgrpo_verl.data.parquet import write_rows
            from fgrpo_verl.evaluation.prepare import verl_rows

            write_rows(verl_rows(name, records), out / f"{name}.parquet")
            print(f"{name}: verl validation rows -> {out / f'{name}.parquet'}", file=sys.stderr)
        if spec.scorer == "MODULE:FUNCTION":
            print(f"{name}: no verifier ships with fgrpo-verl; replace MODULE:FUNCTION with one taking "
                  "(data_source, solution_str, ground_truth, extra_info)", file=sys.stderr)
        flags.append(f"--bench {name}={path}" + ("" if spec.scorer == "math" else f" --bench-scorer {name}={spec.scorer}"))
    print(" \\\n  ".join(flags))
    return 0


if __name__ == "__main__":
    sys.exit(main())
