"""``fgrpo-verl rare-nll``: ΔNLL_rare (paper App. M.2) of checkpoints on the base model's rare correct rollouts.

Logic in ``fgrpo_verl.evaluation.rare_nll``; the workflow is in docs/evaluation.md.
"""

from __future__ import annotations

import argparse

HELP = "ΔNLL_rare (paper App. M.2): NLL increase of each checkpoint on the base model's rarest correct rollouts."


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rollouts", action="append", metavar="FILE",
                   help="base-model rollouts on training prompts: generations.jsonl from `fgrpo-verl eval --model "
                        "base=PATH --bench train=FILE` (needs prompt, completions, correct); repeat to combine")
    p.add_argument("--base", metavar="PATH", help="the base model (HF dir) the rollouts came from; builds the rare set")
    p.add_argument("--rare-set", metavar="FILE",
                   help="reuse a rare set written earlier (out/rare_set.jsonl) instead of --rollouts/--base")
    p.add_argument("--top-fraction", type=float, default=0.01,
                   help="share of correct rollouts with the highest base NLL forming the rare set (paper: 0.01)")
    p.add_argument("--model", action="append", metavar="NAME=PATH", default=[],
                   help="a checkpoint to score on the rare set (HF dir or verl checkpoint with merged weights); repeat")
    p.add_argument("--out", required=True, help="output directory: rare_set.jsonl, rare_nll.csv, rare_nll.md")
    p.add_argument("--device", default="cpu", help="torch device (e.g. cuda)")
    p.add_argument("--dtype", default="float32", help="torch dtype name for the models (bfloat16 on GPU)")
    p.add_argument("--max-tokens-per-batch", type=int, default=16384,
                   help="padded tokens per forward pass (lower it if memory runs out)")


def run(args) -> int:
    from pathlib import Path

    from fgrpo_verl.config.errors import require_files
    from fgrpo_verl.evaluation.formats import read_generations
    from fgrpo_verl.evaluation.generate import load_model
    from fgrpo_verl.evaluation.pipeline import parse_pairs
    from fgrpo_verl.evaluation.rare_nll import build_rare_set, delta_nll, read_rare_set, write_rare_set
    from fgrpo_verl.evaluation.report import write_csv

    require_files("--rare-set", [args.rare_set] if args.rare_set else [])
    require_files("--rollouts", args.rollouts)
    if args.max_tokens_per_batch < 1:
        raise ValueError(f"--max-tokens-per-batch must be >= 1, got {args.max_tokens_per_batch}")
    models = parse_pairs("--model", args.model)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.rare_set:
        if args.rollouts or args.base:
            raise ValueError("give either --rare-set (reuse) or --rollouts with --base (build), not both")
        rare, stats = read_rare_set(Path(args.rare_set))
    else:
        if not args.rollouts or not args.base:
            raise ValueError("building the rare set needs --rollouts FILE and --base PATH (or pass --rare-set FILE)")
        records = [rec for path in args.rollouts for rec in read_generations(path)]
        base_model, base_tok = load_model(args.base, args.device, args.dtype)
        rare, stats = build_rare_set(records, base_model, base_tok, args.top_fraction, args.device,
                                     args.max_tokens_per_batch)
        del base_model
        write_rare_set(out / "rare_set.jsonl", rare, stats)
        print(f"[rare-nll] rare set: {stats['rare_trajectories']} of {stats['correct_trajectories']} correct rollouts "
              f"(base NLL >= {stats['base_nll_threshold']:.4f}) -> {out / 'rare_set.jsonl'}")
    if not models:
        return 0

    rows = []
    for name, path in models.items():
        model, tok = load_model(path, args.device, args.dtype)
        rows.append(dict(model=name, **delta_nll(rare, model, tok, args.device, args.max_tokens_per_batch)))
        del model
    write_csv(out / "rare_nll.csv", rows)
    lines = [f"ΔNLL_rare on {stats['rare_trajectories']} rare correct rollouts (top {100 * stats['fraction']:g}% by base NLL)",
             "", "| model | ΔNLL_rare | median Δ | share increased | NLL | base NLL |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['model']} | {r['delta_nll']:.4f} | {r['median_delta_nll']:.4f} | {r['share_increased']:.3f} | "
              f"{r['nll']:.4f} | {r['base_nll']:.4f} |" for r in rows]
    text = "\n".join(lines) + "\n"
    (out / "rare_nll.md").write_text(text, encoding="utf-8")
    print(text)
    return 0
