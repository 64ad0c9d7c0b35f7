"""``python -m fgrpo_verl.tasks.maze OUT_DIR [--size 17 ...] [--sft]``: build maze data, tokenizer and model,
optionally followed by the paper's SFT warm start (§5.2: 1,500 steps, batch 32, AdamW lr 5e-4) into
``OUT_DIR/sft_model``, the model the paper-scale recipe (recipes/maze.yaml) starts RL from."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, fields
from pathlib import Path

from fgrpo_verl.tasks.maze.build import build_with_splits
from fgrpo_verl.tasks.maze.model import PRESETS
from fgrpo_verl.tasks.maze.sft import SFTConfig


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m fgrpo_verl.tasks.maze", description=__doc__)
    p.add_argument("out_dir", help="directory to write data/, init_model/ (and sft_model/) and build.json into")
    p.add_argument("--size", type=int, default=17, help="grid side including walls, odd >= 5 (paper: 17)")
    p.add_argument("--n-train", type=int, default=10000, help="number of distinct training mazes")
    p.add_argument("--n-val", type=int, default=256, help="number of held-out mazes (paper: 256)")
    p.add_argument("--model-preset", choices=sorted(PRESETS), default="paper", help="model size preset")
    p.add_argument("--seed", type=int, default=0, help="seed of maze streams and model init")
    p.add_argument("--sft", action="store_true", help="also run the SFT warm start and save OUT_DIR/sft_model")
    p.add_argument("--device", default="cpu", help="torch device for the SFT (cuda on a GPU node)")
    # every SFTConfig field once, with its help text and the paper's default
    for f in fields(SFTConfig):
        p.add_argument(f"--sft-{f.name.replace('_', '-')}", type=type(f.default), default=f.default,
                       help=f"SFT: {f.metadata.get('help', '')}")
    a = p.parse_args(argv)
    result, splits = build_with_splits(
        a.out_dir, size=a.size, n_train=a.n_train, n_val=a.n_val, model_preset=a.model_preset, seed=a.seed
    )
    print(json.dumps(asdict(result), indent=2))
    if a.sft:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from fgrpo_verl.tasks.maze.model import save_model_dir
        from fgrpo_verl.tasks.maze.sft import sft

        config = SFTConfig(**{f.name: getattr(a, f"sft_{f.name}") for f in fields(SFTConfig)})
        torch.manual_seed(a.seed)
        tokenizer = AutoTokenizer.from_pretrained(result.model_dir)
        model = AutoModelForCausalLM.from_pretrained(result.model_dir).to(a.device)
        losses = sft(model, tokenizer, splits.train, config)
        out = save_model_dir(model.to("cpu"), tokenizer, Path(a.out_dir) / "sft_model")
        print(f"SFT: {config.steps} steps, loss {losses[0]:.3f} -> {losses[-1]:.3f}; saved {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
