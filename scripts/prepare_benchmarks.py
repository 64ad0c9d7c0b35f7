#!/usr/bin/env python
"""Kept for existing command lines: the same as ``fgrpo-verl prepare-benchmarks`` (fgrpo_verl/cli/prepare_benchmarks.py),
which ships with the package; this file does not."""

from __future__ import annotations

import sys

from fgrpo_verl.cli import main

if __name__ == "__main__":
    print("scripts/prepare_benchmarks.py: use `fgrpo-verl prepare-benchmarks` (the same options)", file=sys.stderr)
    sys.exit(main(["prepare-benchmarks", *sys.argv[1:]]))
