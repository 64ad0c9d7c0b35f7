"""``fgrpo-verl demo``: the README's main job, end to end on CPU through verl's trainer.

``--task raremode`` (default): GRPO vs F-GRPO (with ``--full`` also the scale-matched control, with ``--ds-grpo``
DS-GRPO) on a task with several correct answers per prompt, one of which the warm start prefers; exact per-step
Q_pos / M_ret / ΔNLL_rare over seeds (``fgrpo_verl/tasks/raremode/demo.py``). It measures the symptom the paper
names, rare correct mass lost to the preferred answer; docs/raremode.md finds that here the loss is not the paper's
finite-N tail miss and that GRPO at lr × m_γ retains as much as F-GRPO at equal correct mass.

``--task maze``: the paper's single-solution maze test:

1. build train / held-out mazes, the tokenizer and a tiny Qwen2 (``fgrpo_verl.tasks.maze.build``);
2. SFT warm start on the target trajectories (``fgrpo_verl.tasks.maze.sft``), held-out pass@k of the result;
3. RL through verl (``fgrpo-verl train backend=cpu ...``): GRPO (gamma = 0) and F-GRPO (gamma = 0.5),
   same data, same seed, same steps (``fgrpo_verl.tasks.maze.rl.train_maze``);
4. a table: train reward at the start and end of each run, held-out pass@1 / pass@k (unbiased estimator over
   ``val_n`` samples per maze), plus where the W&B runs, logs and the plot are.

The maze defaults are sized so that the whole job takes <= 10 minutes on 2 cores and < 8 GB RAM (docs/maze.md has
the measured numbers); the rare-mode default took 9.8 minutes on 2 quiet cores (2026-12-06, docs/raremode.md "Time
and memory"). W&B logs offline unless W&B is configured (WANDB_API_KEY / ``wandb login`` / WANDB_MODE).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import threading
import time
import types
from pathlib import Path

HELP = ("F-GRPO vs GRPO through verl on CPU: the rare-mode task (default; exact rare-mass metrics over seeds) or "
        "small mazes (--task maze)")

# Per-task defaults of the options both tasks share (None on the command line = the task's default); the rare-mode
# task's quick and --full presets are in fgrpo_verl/tasks/raremode/demo.py.
MAZE_DEFAULTS = dict(n_train=2000, n_val=64, model_preset="small", sft_steps=600, sft_batch=32, sft_lr=2e-3,
                     gammas=[0.0, 0.5], rl_steps=30, batch_size=16, lr=1e-4)


def floats(text: str) -> list[float]:
    """An argparse type: comma-separated numbers (``--gammas 0,0.5``)."""
    try:
        return [float(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be comma-separated numbers, got {text!r}") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("task and model")
    g.add_argument("--task", choices=("raremode", "maze"), default="raremode",
                   help="raremode (default): the rare-mass experiment; maze: the single-solution maze demo")
    g.add_argument("--out-dir", default="fgrpo_demo", help="where data, models, runs, W&B files and the plot go")
    g.add_argument("--size", type=int, default=7, help="[maze] grid side incl. walls, odd >= 5 (paper: 17)")
    g.add_argument("--n-train", type=int, default=None, help="training prompts (maze 2000, raremode 2000)")
    g.add_argument("--n-val", type=int, default=None, help="held-out prompts (maze 64, raremode 128)")
    g.add_argument("--model-preset", default=None, help="model preset: small (~1M params, maze default), tiny (125k, raremode default) or paper (~3.9M)")
    g.add_argument("--seed", type=int, default=0, help="seed of mazes, model init, SFT batches and RL data order")
    g = parser.add_argument_group("SFT warm start (paper: 1500 steps, batch 32, lr 5e-4)")
    g.add_argument("--sft-steps", type=int, default=None, help="SFT optimizer steps (maze 600, raremode 300)")
    g.add_argument("--sft-batch", type=int, default=None, help="SFT batch size (maze 32, raremode 64)")
    g.add_argument("--sft-lr", type=float, default=None, help="SFT AdamW learning rate (maze 2e-3, raremode 3e-3)")
    g.add_argument("--sft-warmup", type=int, default=20, help="[maze] SFT linear warm-up steps")
    g.add_argument(
        "--threads", type=int, default=1,
        help="torch threads for SFT and evaluation in this process (1: small matrices gain little from a second "
        "thread, and OpenMP spin-waits waste a shared core)",
    )
    g = parser.add_argument_group("RL (verl)")
    g.add_argument("--gammas", type=floats, default=None,
                   help="comma-separated focal strengths; 0 = GRPO (maze 0,0.5; raremode 0,1)")
    g.add_argument("--rl-steps", type=int, default=None, help="RL steps per run (maze 30, raremode 16, --full 40)")
    g.add_argument("--batch-size", type=int, default=None, help="prompts per RL step (16)")
    g.add_argument("--n", type=int, default=8,
                   help="group size N: rollouts per prompt (raremode) or per maze (maze), 8 for both")
    g.add_argument("--lr", type=float, default=None, help="RL actor learning rate (maze 1e-4 as the paper; raremode 1e-3)")
    g.add_argument("--val-n", type=int, default=16, help="[maze] samples per held-out maze for pass@k (k up to this)")
    g.add_argument("--backend", default="cpu", help="execution backend config group (cpu or gpu)")
    g.add_argument("overrides", nargs="*", help="extra Hydra overrides passed to every RL run")
    g = parser.add_argument_group("rare-mode task")
    g.add_argument("--k", type=int, default=4, help="[raremode] symbols = correct answers per prompt")
    g.add_argument("--warm", type=floats, default="0.3,0.09,0.5",
                   help="[raremode] warm-start answer mass: anchor, rare (all rare together), distractor")
    g.add_argument("--seeds", type=int, default=None, help="[raremode] seeds per configuration (quick 3, --full 5)")
    g.add_argument("--control-gamma", type=float, default=None,
                   help="[raremode] add GRPO at lr x m_gamma for this gamma (quick: none, --full: 1)")
    g.add_argument("--ds-grpo", action="store_true",
                   help="[raremode] add DS-GRPO (Gai et al. 2025; the paper's Table 3 control) at GRPO's lr: one more "
                        "run per seed, opt-in (neither the default nor --full runs it)")
    g.add_argument("--pass-n", type=int, default=256, help="[raremode] samples per held-out prompt for pass@k")
    g.add_argument("--q-levels", type=floats, default=None,
                   help="[raremode] comma-separated Q_pos levels in (0, 1) for the equal-Q_pos table, reported in "
                        "increasing order (default: the highest level every run reaches and the midpoint from the SFT start)")
    g.add_argument("--report-equal-q", metavar="RESULTS_JSON", default=None,
                   help="[raremode] only print the equal-Q_pos table of an existing raremode_results.json (no training)")
    g.add_argument("--full", action="store_true",
                   help="[raremode] the long variant (<= 60 min): 5 seeds, gammas 0,0.5,1, the lr x m_1 control, 40 steps")


def fill_defaults(args: argparse.Namespace) -> argparse.Namespace:
    """Each option left out on the command line (None) gets the task's default."""
    from fgrpo_verl.tasks.raremode.demo import FULL, QUICK

    defaults = MAZE_DEFAULTS if args.task == "maze" else {**QUICK, **(FULL if args.full else {})}
    vars(args).update({key: value for key, value in defaults.items() if getattr(args, key) is None})
    return args


@contextlib.contextmanager
def peak_memory(interval: float = 5.0):
    """Samples the summed PSS (proportional set size: shared pages split between the processes sharing them) of
    this process and all its descendants (the verl driver, Ray and its workers) every ``interval`` seconds; yields
    an object whose ``peak`` is the largest sum so far.

    PSS is not cheap: the kernel walks each process's page tables (Ray workers map ~10 GB each). One pass over a
    run's ~20 processes took ~0.14 CPU-s (0.28 s for 42), so sampling every 0.5 s used a quarter of a core of
    the 2 the demo runs on (most of its "sys" time). At 2 s it was still the demo process's only busy thread while a
    run trained: 10 % of a core at load ~6 (py-spy: every sample in ``smaps_rollup``). Every 5 s costs ~4 %; the
    peak is a plateau of a minute or more (every worker of a run alive), which 5 s does not miss."""
    import psutil

    me, stop, memory = psutil.Process(), threading.Event(), types.SimpleNamespace(peak=0)

    def sample():
        while not stop.is_set():
            total = 0
            for p in [me, *me.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    total += p.memory_full_info().pss
            memory.peak = max(memory.peak, total)
            stop.wait(interval)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield memory
    finally:
        stop.set()
        thread.join()


def _mean(values):
    return sum(values) / len(values) if values else float("nan")


def run(args: argparse.Namespace) -> int:
    given = [flag for flag, value in (("--report-equal-q", args.report_equal_q), ("--q-levels", args.q_levels),
                                      ("--ds-grpo", args.ds_grpo or None)) if value is not None]
    if args.task != "raremode" and given:
        raise ValueError(f"{given[0]} is a [raremode] option: it has no meaning for --task {args.task}")
    if args.threads < 1:
        raise ValueError(f"--threads must be >= 1, got {args.threads}")
    from fgrpo_verl.job.tracking import wandb_configured

    if not wandb_configured():
        os.environ["WANDB_MODE"] = "offline"
    fill_defaults(args)
    if args.task == "raremode":
        from fgrpo_verl.tasks.raremode.demo import run as run_raremode

        with peak_memory() as memory:
            return run_raremode(args, memory)
    return _run_maze(args)


def _run_maze(args: argparse.Namespace) -> int:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # one bar per model load or save

    from fgrpo_verl.pass_at_k import ks_up_to, mean_pass_at_k
    from fgrpo_verl.tasks.maze.build import build_with_splits
    from fgrpo_verl.tasks.maze.evaluate import evaluate
    from fgrpo_verl.tasks.maze.model import save_model_dir
    from fgrpo_verl.tasks.maze.rl import TRAIN_REWARD_KEY, RLSettings, correct_counts_from_dump, read_metrics, train_maze
    from fgrpo_verl.tasks.maze.sft import SFTConfig, sft

    # the micro-batch: the largest <= 64 that divides a step's rollouts (a memory knob only)
    settings = RLSettings(
        steps=args.rl_steps, batch_size=args.batch_size, n=args.n, lr=args.lr, val_n=args.val_n, seed=args.seed,
        micro_batch=math.gcd(64, args.batch_size * args.n),
    )
    sft_config = SFTConfig(
        steps=args.sft_steps, batch_size=args.sft_batch, lr=args.sft_lr, warmup_steps=args.sft_warmup, seed=args.seed
    )
    torch.set_num_threads(args.threads)
    ks = ks_up_to(args.val_n)
    out = Path(args.out_dir).resolve()
    t0 = time.time()
    with peak_memory() as memory:
        print(f"[demo] 1/4 building {args.size}x{args.size} mazes ({args.n_train} train, {args.n_val} held-out) and a "
              f"'{args.model_preset}' Qwen2 in {out}", flush=True)
        b, splits = build_with_splits(
            out / "maze", size=args.size, n_train=args.n_train, n_val=args.n_val, model_preset=args.model_preset,
            seed=args.seed,
        )

        print(f"[demo] 2/4 SFT warm start: {sft_config.steps} steps, batch {sft_config.batch_size}, lr {sft_config.lr}", flush=True)
        torch.manual_seed(args.seed)
        tokenizer = AutoTokenizer.from_pretrained(b.model_dir)
        model = AutoModelForCausalLM.from_pretrained(b.model_dir)
        losses = sft(model, tokenizer, splits.train, sft_config)
        sft_dir = str(save_model_dir(model, tokenizer, out / "maze" / "sft_model"))
        sft_eval = evaluate(model, tokenizer, splits.val, n=args.val_n, ks=ks, seed=args.seed)
        del model
        print(f"[demo] SFT loss {_mean(losses[:10]):.3f} -> {_mean(losses[-10:]):.3f}; held-out "
              + ", ".join(f"pass@{k} {v:.3f}" for k, v in sft_eval.pass_at.items()), flush=True)
        t_sft = time.time() - t0

        print(f"[demo] 3/4 RL through verl ({args.backend} backend): {settings.steps} steps x {settings.batch_size} "
              f"mazes x {settings.n} rollouts, gammas {args.gammas}", flush=True)
        table, curves = [], {}  # a failed run's row has no train reward
        for gamma in args.gammas:
            name = "grpo" if gamma == 0 else f"fgrpo_gamma{gamma:g}"
            result = train_maze(b, sft_dir, gamma, settings, out / "runs" / name, name,
                                extra_overrides=list(args.overrides), backend=args.backend)
            if result.returncode != 0:
                print(f"[demo] run {name} failed (exit {result.returncode}); log: {result.run_dir}/train.log", flush=True)
                table.append((name, gamma, None, None, {}))
                continue
            metrics = read_metrics(result.metrics_file)
            steps = sorted(s for s, m in metrics.items() if TRAIN_REWARD_KEY in m)
            curves[name] = (steps, [metrics[s][TRAIN_REWARD_KEY] for s in steps])
            n, correct = correct_counts_from_dump(Path(result.run_dir) / "validation" / f"{settings.steps}.jsonl")
            passes = {k: mean_pass_at_k(n, correct, k) for k in ks}
            table.append((name, gamma, _mean(curves[name][1][:3]), _mean(curves[name][1][-3:]), passes))
        t_rl = time.time() - t0 - t_sft
        print("[demo] 4/4 results", flush=True)
        plot = _plot(curves, sft_eval.pass_at[1], out / "reward_curves.png")
    wall = time.time() - t0

    header = f"{'run':<18}{'gamma':>6}{'train reward (first 3 -> last 3 steps)':>40}" + "".join(f"{'pass@' + str(k):>10}" for k in ks)
    print("\n" + header)
    print("-" * len(header))
    print(f"{'SFT start':<18}{'':>6}{'':>40}" + "".join(f"{sft_eval.pass_at[k]:>10.3f}" for k in ks))
    for name, gamma, start, end, passes in table:
        if start is None:
            print(f"{name:<18}{gamma:>6g}{'FAILED':>40}")
            continue
        print(f"{name:<18}{gamma:>6g}{f'{start:.3f} -> {end:.3f}':>40}" + "".join(f"{passes[k]:>10.3f}" for k in ks))
    print(f"\nheld-out: {args.n_val} mazes x {args.val_n} samples at T=1.0, unbiased pass@k (Chen et al. 2021)")
    print(f"wall time {wall / 60:.1f} min (build+SFT+eval {t_sft:.0f} s, RL {t_rl:.0f} s); "
          f"peak RAM (PSS summed over all processes) {memory.peak / 2**30:.2f} GiB")
    wandb_dirs = sorted(str(p) for p in (out / "runs").glob("*/wandb/*run-*"))
    print(f"W&B ({os.environ.get('WANDB_MODE', 'online')}): " + (", ".join(wandb_dirs) or "no run directories found"))
    if os.environ.get("WANDB_MODE") == "offline" and wandb_dirs:
        print("  upload later with: wandb sync " + " ".join(wandb_dirs))
    print(f"verl logs and metrics: {out / 'runs'}/<run>/train.log, metrics.jsonl, validation/")
    if plot:
        print(f"plot: {plot}")
    return 1 if any(start is None for _, _, start, _, _ in table) else 0


def _plot(curves: dict, sft_pass1: float, path: Path) -> Path | None:
    if not curves:
        return None
    from fgrpo_verl.theory.plots import pyplot, save

    fig, ax = pyplot().subplots(figsize=(6, 4))
    for name, (steps, curve) in curves.items():
        ax.plot(steps, curve, label=name)
    ax.axhline(sft_pass1, color="gray", linestyle="--", label="SFT held-out pass@1")
    ax.set(xlabel="RL step", ylabel="train reward (batch mean)", title="maze: GRPO vs F-GRPO on the CPU backend")
    ax.legend()
    return save(fig, path, dpi=120)
