"""``python -m fgrpo_verl.tasks.maze OUT_DIR [--size 17 ...]``: build maze data, tokenizer and model."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from fgrpo_verl.tasks.maze.build import build
from fgrpo_verl.tasks.maze.model import PRESETS


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m fgrpo_verl.tasks.maze", description=__doc__)
    p.add_argument("out_dir", help="directory to write data/, init_model/ and build.json into")
    p.add_argument("--size", type=int, default=17, help="grid side including walls, odd >= 5 (paper: 17)")
    p.add_argument("--n-train", type=int, default=10000, help="number of distinct training mazes")
    p.add_argument("--n-val", type=int, default=256, help="number of held-out mazes (paper: 256)")
    p.add_argument("--model-preset", choices=sorted(PRESETS), default="paper", help="model size preset")
    p.add_argument("--seed", type=int, default=0, help="seed of maze streams and model init")
    a = p.parse_args(argv)
    result = build(a.out_dir, size=a.size, n_train=a.n_train, n_val=a.n_val, model_preset=a.model_preset, seed=a.seed)
    print(json.dumps(asdict(result), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
