"""``fgrpo-verl demo`` (default task): GRPO vs F-GRPO vs the scale-matched control on the rare-mode task, through
verl's trainer on the CPU backend, with exact rare-mass metrics per step.

1. build the task and a tiny Qwen2 (``build.py``), SFT warm start on the skewed answer distribution (``generator.sft``);
2. exact metrics of the warm start on held-out prompts; the rare set E_x is fixed here (``measure.py``);
3. one verl run per (configuration, seed) (``experiment.py``), seed-major so that an interrupted demo still has
   complete pairs; every step's checkpoint is scored exactly afterwards (``measure.py``);
4. table: final Q_pos, M_ret, ΔNLL_rare, sampled pass@1 / pass@k (mean ± 95% seed CI), paired differences against
   GRPO; then M_ret, ΔNLL_rare and the step at equal Q_pos (``report.py``); plots of the per-step
   curves; ``results.json`` with every per-seed, per-step number (the equal-Q_pos table under "equal_q_pos").

``--report-equal-q FILE`` prints the equal-Q_pos table of an existing ``raremode_results.json`` without training.
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import asdict
from pathlib import Path

from fgrpo_verl.tasks.raremode.report import (
    equal_q_report, paired_difference, plot_curves, report_from_results, t_interval,
)

# The quick default and --full (<= 60 min): what an option left out on the command line (None) becomes.
QUICK = dict(n_train=2000, n_val=128, model_preset="tiny", sft_steps=300, sft_batch=64, sft_lr=3e-3, batch_size=16,
             lr=1e-3, seeds=3, gammas=[0.0, 1.0], control_gamma=None, rl_steps=16)
FULL = dict(seeds=5, gammas=[0.0, 0.5, 1.0], control_gamma=1.0, rl_steps=40)


def report_equal_q(path: str, levels: list[float] | None) -> int:
    try:
        results = json.loads(Path(path).read_text())
        lines, _ = report_from_results(results, levels)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise ValueError(f"--report-equal-q {path!r}: not a readable raremode_results.json ({type(err).__name__}: {err})") from err
    print("\n".join(lines), flush=True)
    return 0


def run(args, memory) -> int:
    """The demo with ``args`` (``fgrpo_verl.cli.demo``, task defaults filled in); every argument is checked before
    anything is imported or built."""
    from fgrpo_verl.evaluation.frontier import check_levels

    levels = None if args.q_levels is None else check_levels("--q-levels", args.q_levels)
    if args.report_equal_q is not None:
        return report_equal_q(args.report_equal_q, levels)
    if args.seeds < 1:
        raise ValueError(f"--seeds must be >= 1, got {args.seeds}")
    if 0.0 not in args.gammas:
        raise ValueError(f"--gammas must include 0 (GRPO, the reference of the paired comparison), got {args.gammas}")
    if len(args.warm) != 3:
        raise ValueError(f"--warm must be three comma-separated numbers (anchor,rare,distractor), got {args.warm}")

    import torch
    from transformers.utils import logging as transformers_logging

    # a progress bar per model load or save: dozens (every scored checkpoint), none of them news
    transformers_logging.disable_progress_bar()

    from fgrpo_verl.backends.cpu.session import FAST_OVERRIDES, RaySession
    from fgrpo_verl.evaluation.generate import load_model
    from fgrpo_verl.job.checkpoints import checkpoint_dir
    from fgrpo_verl.pass_at_k import ks_up_to
    from fgrpo_verl.tasks.maze.model import save_model_dir
    from fgrpo_verl.tasks.maze.rl import RLSettings, read_metrics
    from fgrpo_verl.tasks.maze.sft import SFTConfig
    from fgrpo_verl.tasks.raremode.build import build
    from fgrpo_verl.tasks.raremode.experiment import configs, run_one
    from fgrpo_verl.tasks.raremode.generator import WarmStart, sft
    from fgrpo_verl.tasks.raremode.measure import (
        candidate_probs, exact_metrics, rare_mask, sampled_pass_at_k, step_metrics,
    )

    warm = WarmStart(*args.warm)
    cfgs = configs(args.gammas, args.lr, args.control_gamma, ds_grpo=args.ds_grpo)
    settings = RLSettings(steps=args.rl_steps, batch_size=args.batch_size, n=args.n, lr=args.lr, val_n=1, seed=0,
                          micro_batch=args.batch_size * args.n)
    ks = ks_up_to(args.pass_n)
    out = Path(args.out_dir).resolve()
    torch.set_num_threads(args.threads)
    t0 = time.time()

    print(f"[demo] 1/4 rare-mode task: k={args.k} symbols per prompt, {args.n_train} train / {args.n_val} held-out "
          f"prompts, '{args.model_preset}' Qwen2, in {out}", flush=True)
    b, splits = build(out / "raremode", k=args.k, n_train=args.n_train, n_val=args.n_val,
                      model_preset=args.model_preset, seed=args.seed)
    torch.manual_seed(args.seed)
    model, tok = load_model(b.model_dir)
    sft_cfg = SFTConfig(steps=args.sft_steps, batch_size=args.sft_batch, lr=args.sft_lr, seed=args.seed, log_every=0)
    losses = sft(model, tok, splits.train, warm, sft_cfg)
    sft_dir = str(save_model_dir(model, tok, out / "raremode" / "sft_model"))
    base = candidate_probs(model, tok, splits.val)
    rare = rare_mask(base)
    base_metrics = exact_metrics(base, base, rare)
    passes = sampled_pass_at_k(model, tok, splits.val, args.pass_n, ks, seed=args.seed)
    start = {**base_metrics.as_dict(), **{f"pass@{k}": v for k, v in passes.items()}}
    del model
    print(f"[demo] 2/4 SFT warm start ({sft_cfg.steps} steps, loss {losses[0]:.2f} -> {sum(losses[-20:]) / 20:.2f}): "
          f"held-out Q_pos {base_metrics.q_pos:.3f}, anchor {base_metrics.anchor_mass:.3f}, rare set "
          f"{rare.sum() / len(rare):.2f} answers/prompt holding {base_metrics.rare_mass:.3f} "
          f"(rho = {base_metrics.rare_fraction:.3f} of the correct mass)", flush=True)
    t_sft = time.time() - t0

    print(f"[demo] 3/4 verl ({args.backend} backend): {[c.name for c in cfgs]} x {args.seeds} seeds, {args.rl_steps} "
          f"steps x {settings.batch_size} prompts x N={settings.n}, lr {args.lr:g}", flush=True)
    results: dict[str, dict[int, dict]] = {c.name: {} for c in cfgs}
    failed = []
    # On the cpu backend one Ray cluster serves all runs, with the backend's speed overrides (same computation,
    # fgrpo_verl.backends.cpu.session). The runs go one at a time: verl's TransferQueue names its controller actor in
    # a fixed Ray namespace (``transfer_queue``), so two runs in one cluster at once share it and corrupt each
    # other's batches (docs/raremode.md).
    with RaySession() if args.backend == "cpu" else contextlib.nullcontext() as session:
        session_overrides = [] if session is None else list(FAST_OVERRIDES)
        for seed in range(args.seeds):  # seed-major: an interrupted demo still has complete pairs
            for cfg in cfgs:
                t_run = time.time()
                run_dir = out / "runs" / f"{cfg.name}_s{seed}"
                r = run_one(b, sft_dir, cfg, seed, settings, run_dir, [*session_overrides, *args.overrides],
                            backend=args.backend, session=session)
                if r.returncode != 0:
                    failed.append(r.name)
                    print(f"[demo] run {r.name} failed (exit {r.returncode}); log: {run_dir}/train.log", flush=True)
                    continue
                curve = step_metrics(run_dir / "checkpoints", tok, splits.val, base, rare)
                last = max(curve)
                final_dir = checkpoint_dir(run_dir / "checkpoints", last) / "actor" / "huggingface"
                passes = sampled_pass_at_k(load_model(final_dir)[0], tok, splits.val, args.pass_n, ks, seed=seed)
                results[cfg.name][seed] = {
                    "curve": {t: m.as_dict() for t, m in curve.items()},
                    "final": {**curve[last].as_dict(), **{f"pass@{k}": v for k, v in passes.items()}},
                    "train_reward": {t: m.get("critic/score/mean") for t, m in read_metrics(r.metrics_file).items()},
                    "seconds": time.time() - t_run,
                }
                f = curve[last]
                print(f"[demo]   {r.name}: Q_pos {f.q_pos:.3f}  M_ret {f.m_ret:.3f}  dNLL_rare "
                      f"{f.delta_nll_rare:+.3f}  pass@1 {passes[1]:.3f}  pass@{ks[-1]} {passes[ks[-1]]:.3f}  "
                      f"({time.time() - t_run:.0f} s)", flush=True)
    times = dict(start=t0, sft=t_sft, rl=time.time() - t0 - t_sft)
    return _report(args, out, results, failed, start, ks, settings, cfgs, warm, sft_cfg, times, memory, levels)


def _report(args, out, results, failed, start, ks, settings, cfgs, warm, sft_cfg, times, memory, levels) -> int:
    """Step 4: the table, the plot and raremode_results.json; ``start`` = the SFT start's metrics and pass@k."""
    print("[demo] 4/4 results", flush=True)
    done = {n: v for n, v in results.items() if v}
    plot = plot_curves({n: {s: {int(t): m for t, m in r["curve"].items()} for s, r in v.items()} for n, v in done.items()},
                       out / "raremode_curves.png", f"rare-mode task through verl (CPU): N={settings.n}, "
                       f"{settings.batch_size} prompts/step, lr {args.lr:g}")
    columns = ["q_pos", "m_ret", "delta_nll_rare", "pass@1", f"pass@{ks[-1]}"]
    header = f"{'configuration':<20}{'seeds':>6}" + "".join(f"{c:>18}" for c in columns)
    lines = ["", header, "-" * len(header)]
    lines.append(f"{'SFT start':<20}{'':>6}" + "".join(f"{start[c]:>18.3f}" for c in columns))
    summary, final = {}, {name: {s: r["final"] for s, r in by_seed.items()} for name, by_seed in done.items()}
    for name, by_seed in final.items():
        stats = {c: t_interval([by_seed[s][c] for s in sorted(by_seed)]) for c in columns}
        summary[name] = {c: asdict(v) for c, v in stats.items()}
        lines.append(f"{name:<20}{len(by_seed):>6}" + "".join(f"{str(stats[c]):>18}" for c in columns))
    if "grpo" in done:
        lines += ["", "paired difference to GRPO (same seeds), mean ± 95% CI; * = CI excludes 0"]
        for name, by_seed in final.items():
            common = sorted(set(by_seed) & set(final["grpo"]))
            if name == "grpo" or not common:
                continue
            diffs = {c: paired_difference([by_seed[s][c] for s in common], [final["grpo"][s][c] for s in common])
                     for c in columns}
            summary[name].update({f"diff_vs_grpo_{c}": asdict(d) for c, d in diffs.items()})
            lines.append(f"{name + ' - grpo':<20}{len(common):>6}" + "".join(f"{d.marked():>18}" for d in diffs.values()))
    equal_q_lines, equal_q = equal_q_report(done, start["q_pos"], levels)
    wall = time.time() - times["start"]
    lines += [*equal_q_lines, "",
              f"held-out: {args.n_val} prompts; Q_pos, M_ret (eq. 26 on the rare set), ΔNLL_rare exact "
              f"(teacher-forced); pass@k sampled, {args.pass_n} samples/prompt at T=1, unbiased estimator",
              f"wall time {wall / 60:.1f} min (build+SFT {times['sft']:.0f} s, verl runs + scoring {times['rl']:.0f} "
              f"s); peak RAM (PSS over all processes) {memory.peak / 2**30:.2f} GiB"]
    if failed:
        lines.append(f"FAILED runs: {failed}")
    lines.append(f"plot: {plot}")
    lines.append(f"all numbers: {out / 'raremode_results.json'}; verl logs: {out / 'runs'}/<run>/train.log")
    print("\n".join(lines), flush=True)
    (out / "raremode_results.json").write_text(json.dumps({
        "settings": {"k": args.k, "warm": asdict(warm), "seeds": args.seeds, "configs": [asdict(c) for c in cfgs],
                     "rl": asdict(settings), "sft": asdict(sft_cfg), "n_train": args.n_train, "n_val": args.n_val,
                     "pass_n": args.pass_n},
        "sft_start": start, "summary": summary, "equal_q_pos": equal_q, "runs": results, "failed": failed,
        "wall_seconds": wall, "peak_pss_bytes": memory.peak,
    }, indent=1))
    return 1 if failed else 0
