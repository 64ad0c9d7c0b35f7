"""What an evaluation job runs: a pass over a run's checkpoints (each: checkpoint_eval.py), the results beside each
checkpoint, logged to the training run's W&B run (wandb_rows.py).

    python -m fgrpo_verl.evaluation.eval_job selection --plan PLAN.json   (or --plan - : from stdin)
    python -m fgrpo_verl.evaluation.eval_job final --plan PLAN.json

The plan (evaluation/plan.py; written by ``fgrpo-verl launch`` into the job script) names the run directory, the
benchmarks, the two passes (``selection``: small n on every epoch checkpoint; ``final``: n = 1024 on the
checkpoint the protocol selects), the sampling settings (the Table 9 preset and length of the run's base model),
the engine and the W&B run. Phases:

- ``selection``: every epoch checkpoint the run has saved (steps that are multiples of its save_freq, and the last;
  a stop checkpoint in between is not a candidate and is skipped, saying so). Works on an unfinished run too (the
  checkpoints so far); W&B logging waits until the run is finished (an unfinished run resumes and logs training
  steps after these rows, which W&B would drop as out of order).
- ``final``: refuses until this run and its γ = 0 baseline are finished and fully scored; then chooses the
  checkpoint (protocol.py), records the choice in ``fgrpo_eval/selected.json`` and evaluates it.

An unchanged checkpoint with a current result is skipped; a killed evaluation continues where it stopped; results
of a changed checkpoint or an edited benchmark file are removed and redone. With several GPUs and
``tensor_parallel_size`` t, the job runs GPUs / t worker processes, each on its own GPUs and its own shard of every
checkpoint, so a single checkpoint (the final pass) uses every GPU. The job merges every checkpoint it evaluates
before the workers start, so no two mergers ever run at once and none runs beside the workers' engines.
"""

from __future__ import annotations

import argparse
import itertools
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from fgrpo_verl.evaluation import checkpoint_eval as ce
from fgrpo_verl.evaluation.checkpoint_eval import log, pass_label
from fgrpo_verl.evaluation.plan import Plan
from fgrpo_verl.evaluation.protocol import choose, run_scores
from fgrpo_verl.job import checkpoints as ck

PHASES = ("selection", "final")
SELECTED = "selected.json"


def _gpu_slices(plan: Plan) -> list[str | None]:
    """One entry per worker: its CUDA_VISIBLE_DEVICES (None: no GPU assignment, the CPU back-end)."""
    if plan.sampling.backend != "vllm":
        return [None] * max(1, plan.workers)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    gpus = [g for g in visible.split(",") if g] if visible else [str(i) for i in range(plan.gpus)]
    tp = plan.engine.tensor_parallel_size
    if len(gpus) < tp:
        raise ValueError(f"tensor_parallel_size={tp} needs {tp} GPUs, this job sees {len(gpus)} ({gpus})")
    return [",".join(gpus[i * tp:(i + 1) * tp]) for i in range(len(gpus) // tp)]


def _failed(results: dict, step: int, exc: Exception) -> None:
    # one bad checkpoint must not stop the others; reported at the end
    results[step] = f"{type(exc).__name__}: {exc}"
    log(f"step {step}: failed: {results[step]}")


def evaluate_steps(plan: Plan, phase: str, steps: list[int]) -> dict[int, dict | str]:
    """``{step: result or why not}``. Each checkpoint to evaluate is merged here, then split into one shard per
    worker (problems round-robin); shards write their own ``eval --out`` and resume on their own."""
    slices = _gpu_slices(plan)
    shards = len(slices)
    results: dict[int, dict | str] = {}
    todo = []
    for step in steps:
        try:
            results[step] = ce.prepare_checkpoint(plan, phase, step, shards)
            if results[step] is None:
                todo.append(step)
        except Exception as exc:
            _failed(results, step, exc)
    if shards > 1 and todo:
        procs = []
        for shard, devices in enumerate(slices):
            env = dict(os.environ, **({} if devices is None else {"CUDA_VISIBLE_DEVICES": devices}))
            cmd = [sys.executable, "-m", "fgrpo_verl.evaluation.eval_job", phase, "--plan", "-",
                   "--steps", ",".join(map(str, todo)), "--shard", f"{shard}/{shards}"]
            log(f"worker {shard} (GPUs {devices}): shard {shard + 1}/{shards} of steps {todo}")
            procs.append(subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, text=True))
            procs[-1].stdin.write(plan.to_json())
            procs[-1].stdin.close()
        for proc in procs:
            proc.wait()
    for step in todo:
        try:
            if shards == 1:
                ce.run_shard(plan, phase, step, 0, 1)
            results[step] = ce.combine(plan, phase, step, shards)
        except Exception as exc:
            _failed(results, step, exc)
    return results


def run_phase(plan: Plan, phase: str) -> int:
    run_dir = Path(plan.run_dir)
    save_freq, total = ck.step_plan(run_dir, plan.steps.save_freq, plan.steps.total)
    done = ck.training_done(run_dir, plan.steps.total)
    saved = ck.saved_steps(run_dir)
    if phase == "selection":
        expected = set(ck.epoch_steps(save_freq, total))
        steps = [s for s in saved if s in expected]
        others = [s for s in saved if s not in expected]
        if others:
            log(f"checkpoints {others} are not epoch checkpoints (save_freq {save_freq}, last step {total}): "
                "not candidates, not evaluated")
        if not done:
            log(f"training not finished (step {ck.tracker_step(run_dir)} of {total}): evaluating the {len(steps)} "
                "epoch checkpoint(s) saved so far; W&B logging waits for the finished run")
    else:
        # the final pass's checkpoint for this run (protocol.py), with how it was chosen or why there is none
        label, base = pass_label(plan, "selection"), plan.baseline
        chosen = choose(run_scores(plan.run, run_dir, plan.steps, label, plan.select_by), plan.gamma,
                        None if base is None else run_scores(base.run, base.run_dir, base.steps, label, plan.select_by))
        how = chosen.constraint
        if chosen.checkpoint is None:
            log(f"no checkpoint can be selected yet: {how}; relaunch the recipe once that is done")
            return 1
        step = chosen.checkpoint.step
        log(f"selected checkpoint {step}: {how}")
        ck.write_json(run_dir / ck.EVAL_DIR / SELECTED, {
            "step": step, "how": how, "gamma": plan.gamma, "selection_label": pass_label(plan, "selection"),
            "final_label": pass_label(plan, "final"), "baseline": plan.baseline and plan.baseline.run})
        steps = [step]
    if not steps:
        log("no checkpoint to evaluate")
        return 0
    results = evaluate_steps(plan, phase, steps)
    failed = {s: r for s, r in results.items() if isinstance(r, str)}
    # W&B history is in order: nothing after a gap
    ordered = list(itertools.takewhile(lambda item: item[0] not in failed, sorted(results.items())))
    if plan.wandb.log and done:
        from fgrpo_verl.evaluation.wandb_rows import log_to_wandb

        logged = log_to_wandb(plan, phase, ordered)
        log(f"W&B run {plan.wandb.run_id}: logged checkpoints {logged}" if logged else
            f"W&B run {plan.wandb.run_id}: nothing new to log")
    for step, why in failed.items():
        log(f"step {step}: not evaluated: {why}")
    log(f"{phase} pass: {len(results) - len(failed)} of {len(results)} checkpoint(s) evaluated")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    # the job script sends SIGTERM before a requeue: as SystemExit it unwinds the `finally` blocks, which release
    # each shard's --out lock (on a file system without flock, a marker file that only a process on the same node
    # could take over once this one is gone: the requeued job may start on another node)
    if threading.current_thread() is not threading.main_thread():
        return _main(argv)
    previous = signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    try:
        return _main(argv)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _main(argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fgrpo_verl.evaluation.eval_job",
                                     description="evaluate a run's checkpoints (launched by fgrpo-verl launch)")
    parser.add_argument("phase", choices=PHASES)
    parser.add_argument("--plan", required=True, help="the job's plan (JSON file, or - for stdin)")
    parser.add_argument("--steps", default=None, help="(worker) checkpoint steps to evaluate a shard of")
    parser.add_argument("--shard", default=None, help="(worker) I/S: evaluate shard I of S of each step")
    args = parser.parse_args(argv)
    try:
        plan = Plan.read(sys.stdin.read() if args.plan == "-" else Path(args.plan).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        print(f"fgrpo eval: error: cannot read the plan {args.plan}: {exc}", file=sys.stderr)
        return 2
    if args.steps is not None:  # a worker of a multi-GPU job
        shard, shards = (int(x) for x in args.shard.split("/"))
        bad = 0
        for step in (int(s) for s in args.steps.split(",") if s):
            try:
                ce.run_shard(plan, args.phase, step, shard, shards)
            except Exception as exc:
                log(f"step {step} shard {shard + 1}/{shards}: failed: {type(exc).__name__}: {exc}")
                bad += 1
        return 1 if bad else 0
    try:
        return run_phase(plan, args.phase)
    except ValueError as exc:
        print(f"fgrpo eval: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
