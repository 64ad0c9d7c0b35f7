"""Time the fgrpo estimator against verl's own `grpo` (loop) and `grpo_vectorized`, in one process.

Batches look like verl's: uid strings (uuid4), groups of N = 8, 0/1 outcome on the last response token.
Reports the median of repeats and the ratios targeted:
    time(fgrpo) / time(grpo_vectorized) <= 1.0        time(grpo) / time(fgrpo) >= 3
and the machine's load average before and after, since other processes on the machine skew both.
Usage: python benchmarks/bench_estimator.py [--repeats 15] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import uuid

import numpy as np
import torch
from omegaconf import OmegaConf

import verl  # noqa: F401  (loads the plugin)
from verl.trainer.ppo.core_algos import get_adv_estimator_fn


def make_batch(responses: int, tokens: int, group: int = 8, seed: int = 0):
    rng = np.random.default_rng(seed)
    uids = [str(uuid.UUID(int=int(rng.integers(0, 2**63)), version=4)) for _ in range(responses // group)]
    index = np.array([u for u in uids for _ in range(group)], dtype=object)
    lengths = torch.from_numpy(rng.integers(tokens // 4, tokens + 1, size=responses))
    mask = (torch.arange(tokens)[None, :] < lengths[:, None]).float()
    rewards = torch.zeros(responses, tokens)
    rewards[torch.arange(responses), lengths - 1] = torch.from_numpy(rng.integers(0, 2, size=responses)).float()
    return rewards, mask, index


def interleaved_medians(fns: dict, repeats: int, slow: set) -> dict:
    """Median seconds per function; each repeat runs every function once, in turn, so that load from other
    processes on the machine hits them alike. Functions in ``slow`` run only every third repeat."""
    # Warm-up: the first calls pay for torch's thread pool and for glibc growing its mmap threshold (the
    # (B, T) outputs are large allocations); without it the function timed first looks several times slower.
    for _ in range(5):
        for fn in fns.values():
            fn()
    times = {name: [] for name in fns}
    for rep in range(repeats):
        for name, fn in fns.items():
            if name in slow and rep % 3:
                continue
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(ts) for name, ts in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=30, help="timed repeats per estimator (median reported)")
    parser.add_argument("--shapes", default="4096x1024,16384x1024", help="comma-separated RESPONSESxTOKENS")
    parser.add_argument("--json", help="also write the results to this JSON file")
    args = parser.parse_args()

    torch.set_num_threads(torch.get_num_threads())
    cfg = OmegaConf.create({"norm_adv_by_std_in_grpo": True,
                            "fgrpo": {"gamma": 0.5, "success_threshold": 0.0, "smoothing_alpha": 0.0, "base": "grpo"}})
    fgrpo = get_adv_estimator_fn("fgrpo")
    grpo_vec = get_adv_estimator_fn("grpo_vectorized")
    grpo_loop = get_adv_estimator_fn("grpo")
    results = []
    load_before = os.getloadavg()[0]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, median of {args.repeats} repeats, "
          f"load average {load_before:.2f}")
    print(f"{'shape':>12} {'grpo (ms)':>10} {'grpo_vec (ms)':>14} {'fgrpo (ms)':>11} {'fgrpo/grpo_vec':>15} {'grpo/fgrpo':>11}")
    for shape in args.shapes.split(","):
        b, t = (int(x) for x in shape.lower().split("x"))
        rewards, mask, index = make_batch(b, t)
        med = interleaved_medians(
            {
                "fgrpo": lambda: fgrpo(token_level_rewards=rewards, response_mask=mask, index=index, config=cfg),
                "grpo_vectorized": lambda: grpo_vec(token_level_rewards=rewards, response_mask=mask, index=index),
                # verl's loop writes into the summed scores only, but clone anyway: inputs stay identical
                "grpo": lambda: grpo_loop(token_level_rewards=rewards.clone(), response_mask=mask, index=index),
            },
            args.repeats,
            slow={"grpo"},
        )
        t_fg, t_vec, t_loop = med["fgrpo"], med["grpo_vectorized"], med["grpo"]
        row = {"responses": b, "tokens": t, "grpo_s": t_loop, "grpo_vectorized_s": t_vec, "fgrpo_s": t_fg,
               "fgrpo_over_grpo_vectorized": t_fg / t_vec, "grpo_over_fgrpo": t_loop / t_fg}
        results.append(row)
        print(f"{shape:>12} {t_loop * 1e3:10.2f} {t_vec * 1e3:14.2f} {t_fg * 1e3:11.2f} "
              f"{row['fgrpo_over_grpo_vectorized']:15.3f} {row['grpo_over_fgrpo']:11.2f}")
    load_after = os.getloadavg()[0]
    print(f"load average {load_before:.2f} -> {load_after:.2f}")
    for row in results:
        row["load_avg_1m_before_after"] = [load_before, load_after]
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=2)


if __name__ == "__main__":
    main()
