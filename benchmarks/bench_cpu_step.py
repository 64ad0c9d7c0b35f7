"""Time one verl step on the CPU backend against a bare-torch step of the same work, side by side in one run.

Shape (the demo's): ``--batch-size`` prompts x ``--n`` rollouts on 7x7 mazes, the ``small`` Qwen2 (~1M params).

* **bare torch** (this process, ``--threads`` torch threads, like each verl process's ``OMP_NUM_THREADS``):
  sample the rollouts with the CPU backend's own sampler (KV cache, the same ``sample_batch`` the rollout server
  runs) with their log-probs, score them, GRPO advantages, one PPO update (clipped ratio against the sampled
  log-probs, token-mean, one AdamW step). Median of ``--bare-repeats``.
* **verl** (``python -m fgrpo_verl train backend=cpu``, the demo's overrides without validation, plus
  ``fgrpo_verl.backends.cpu.tuning.fast_overrides``, the same work as the bare step): the median of
  ``timing_s/step`` over steps 2.. (step 1 pays for lazy initialisation), the per-phase ``timing_s/*`` medians, the
  start-up (launch of the process to the start of step 1) and the teardown (last step line to exit).
* **baseline** (``--baseline-dir DIR``, optional): the same verl run with another checkout's code and venv
  (``DIR/.venv/bin/python -m fgrpo_verl train``), e.g. ``/work/main`` to compare against main.

Targets it checks and prints (``--check`` makes a miss exit 1): verl step <= 2x bare, baseline step / verl step
>= 3, start-up <= 20 s, timing_s/adv < 1% of the step.

Usage: python benchmarks/bench_cpu_step.py [--baseline-dir /work/main] [--steps 6] [--json out.json]
       python benchmarks/bench_cpu_step.py --tiny      (CI smoke shape: tiny model, 2 prompts x 2, 2 steps)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PHASES = ("gen", "reward", "old_log_prob", "adv", "update_actor", "update_weights")
TARGETS = {"step_vs_bare_max": 2.0, "baseline_speedup_min": 3.0, "startup_max_s": 20.0, "adv_share_max": 0.01}


# ---------------------------------------------------------------------------------------------------- bare torch
def _padded_batch(prompts, responses, pad_id):
    """Left-padded prompts + right-padded responses -> (input_ids, attention_mask, position_ids, response_mask)."""
    import torch

    p_width = max(len(p) for p in prompts)
    r_width = max(len(r) for r in responses)
    rows = len(prompts)
    ids = torch.full((rows, p_width + r_width), pad_id, dtype=torch.long)
    attn = torch.zeros_like(ids)
    resp_mask = torch.zeros((rows, r_width))
    for i, (p, r) in enumerate(zip(prompts, responses, strict=True)):
        ids[i, p_width - len(p) : p_width] = torch.tensor(p)
        ids[i, p_width : p_width + len(r)] = torch.tensor(r, dtype=torch.long)
        attn[i, p_width - len(p) : p_width + len(r)] = 1
        resp_mask[i, : len(r)] = 1
    positions = (attn.cumsum(-1) - 1).clamp(min=0)
    return ids, attn, positions, resp_mask, p_width


def _response_log_probs(model, ids, attn, positions, p_width, temperature):
    import torch

    logits = model(input_ids=ids, attention_mask=attn, position_ids=positions, use_cache=False).logits
    logits = logits[:, p_width - 1 : -1].float() / temperature
    return torch.log_softmax(logits, -1).gather(-1, ids[:, p_width:, None]).squeeze(-1)


def bare_step(model, optimizer, tokenizer, prompts, truths, n, max_tokens, generator, clip=0.2):
    """One on-policy GRPO/PPO step in plain torch; returns the mean reward (so the work cannot be skipped)."""
    import torch

    from fgrpo_verl.backends.hf_rollout.sampling import SamplingParams, sample_batch
    from fgrpo_verl.tasks.maze.reward import compute_score

    eos = frozenset([tokenizer.eos_token_id])
    params = SamplingParams(temperature=1.0, top_p=1.0, top_k=-1, max_tokens=max_tokens, stop_token_ids=eos)
    rows = [p for p in prompts for _ in range(n)]
    model.eval()
    samples = sample_batch(model, rows, [params] * len(rows), tokenizer.pad_token_id, generator)
    responses = [s.token_ids for s in samples]
    texts = tokenizer.batch_decode(responses, skip_special_tokens=True)
    scores = torch.tensor([compute_score("maze", t, truths[i // n]) for i, t in enumerate(texts)])
    grouped = scores.view(-1, n)
    adv = ((grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, keepdim=True) + 1e-6)).view(-1)
    ids, attn, positions, resp_mask, p_width = _padded_batch(rows, responses, tokenizer.pad_token_id)
    # old log-probs = the sampler's, as verl's bypass mode (fast_overrides) does: same policy, same step
    old = torch.zeros_like(resp_mask)
    for i, sample in enumerate(samples):
        old[i, : len(sample.log_probs)] = torch.tensor(sample.log_probs)
    model.train()
    new = _response_log_probs(model, ids, attn, positions, p_width, 1.0)
    ratio = torch.exp(new - old)
    a = adv[:, None]
    loss_tok = -torch.minimum(ratio * a, ratio.clamp(1 - clip, 1 + clip) * a)
    loss = (loss_tok * resp_mask).sum() / resp_mask.sum()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return float(scores.mean())


def time_bare(build, args) -> dict:
    import pandas as pd
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(args.threads)
    tokenizer = AutoTokenizer.from_pretrained(build.model_dir)
    model = AutoModelForCausalLM.from_pretrained(build.model_dir, attn_implementation="eager")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    frame = pd.read_parquet(build.train_file)
    generator = torch.Generator().manual_seed(0)
    times = []
    for rep in range(args.bare_repeats + 1):  # +1: the first call warms torch's allocator and thread pool
        chunk = frame.iloc[(rep * args.batch_size) % len(frame) :][: args.batch_size]
        prompts = [tokenizer.apply_chat_template(list(m), add_generation_prompt=True, tokenize=True)
                   for m in chunk["prompt"]]
        prompts = [list(p["input_ids"]) if isinstance(p, dict) or hasattr(p, "keys") else list(p) for p in prompts]
        truths = [r["ground_truth"] for r in chunk["reward_model"]]
        t0 = time.perf_counter()
        bare_step(model, optimizer, tokenizer, prompts, truths, args.n, build.max_response_length, generator)
        if rep:
            times.append(time.perf_counter() - t0)
    return {"step_s": statistics.median(times), "steps_s": times}


# ---------------------------------------------------------------------------------------------------- verl runs
def verl_overrides(build, args, run_dir: Path, tuned: bool) -> list[str]:
    """The demo's overrides (``fgrpo_verl.tasks.maze.rl.maze_overrides``) minus validation, plus file logging.

    ``tuned``: this checkout's ``fast_overrides`` and ``--override``s; otherwise the micro-batch main's demo
    picks (the largest <= 64 dividing a step's rollouts).
    """
    import math

    from fgrpo_verl.tasks.maze.rl import RLSettings, maze_overrides

    rollouts = args.batch_size * args.n
    settings = RLSettings(steps=args.steps, batch_size=args.batch_size, n=args.n, val_n=1, seed=0,
                          micro_batch=math.gcd(64, rollouts))
    overrides = maze_overrides(build, build.model_dir, 0.5, settings, str(run_dir), run_dir.name)
    drop = ("trainer.test_freq=", "trainer.logger=", "trainer.val_before_train=")
    overrides = [o for o in overrides if not o.startswith(drop)] + [
        "trainer.test_freq=-1", "trainer.val_before_train=False", "trainer.logger=[console,file]"]
    if tuned:
        from fgrpo_verl.backends.cpu.tuning import fast_overrides

        overrides += [*fast_overrides(rollouts), *args.override]
    return overrides


def run_verl(python: str, cwd: Path, overrides: list[str], run_dir: Path, timeout: float, env_extra=None) -> dict:
    """Run ``fgrpo-verl train`` with ``python`` in ``cwd``; time start-up/teardown from the console lines."""
    run_dir.mkdir(parents=True, exist_ok=True)
    metrics_file = run_dir / "metrics.jsonl"
    env = {**os.environ, "VERL_FILE_LOGGER_PATH": str(metrics_file), "WANDB_MODE": "disabled", **(env_extra or {})}
    env.pop("PYTHONPATH", None)
    log = open(run_dir / "train.log", "w")
    t0 = time.monotonic()
    step_lines: list[float] = []
    proc = subprocess.Popen([python, "-m", "fgrpo_verl", "train", *overrides], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        for line in proc.stdout:
            log.write(line)
            if "step:" in line and " - " in line and "timing_s/step" in line:
                step_lines.append(time.monotonic() - t0)
            if time.monotonic() - t0 > timeout:
                raise TimeoutError(f"verl run in {run_dir} exceeded {timeout} s")
        proc.wait()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
        log.close()
    wall = time.monotonic() - t0
    if proc.returncode != 0 or not step_lines:
        tail = (run_dir / "train.log").read_text()[-4000:]
        raise RuntimeError(f"verl run in {run_dir} failed (exit {proc.returncode}); end of its log:\n{tail}")
    steps: dict[int, dict] = {}
    for line in metrics_file.read_text().splitlines():
        record = json.loads(line)
        steps.setdefault(int(record["step"]), {}).update(record["data"])
    ordered = [steps[s] for s in sorted(steps)]
    timed = ordered[1:] or ordered  # step 1 initialises lazily; a 1-step run has nothing else
    phases = {p: statistics.median(m.get(f"timing_s/{p}", 0.0) for m in timed) for p in PHASES}
    step = statistics.median(m["timing_s/step"] for m in timed)
    return {
        "wall_s": wall,
        "step_s": step,
        "steps_s": [m["timing_s/step"] for m in ordered],
        "phases_s": phases,
        "startup_s": step_lines[0] - ordered[0]["timing_s/step"],
        "teardown_s": wall - step_lines[-1],
        "adv_share": phases["adv"] / step,
        "response_length": statistics.median(m.get("response_length/mean", 0.0) for m in timed),
    }


# ---------------------------------------------------------------------------------------------------- report
def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def report(result: dict) -> list[str]:
    """Print the side-by-side table; return the missed targets."""
    bare, ours, base = result["bare"], result["verl"], result.get("baseline")
    cols = [("verl", ours)] + ([("baseline", base)] if base else [])
    print(f"\nshape: {result['shape']}; load average before/after: {result['load_before']} / {result['load_after']}")
    print(f"bare-torch step (median of {len(bare['steps_s'])}): {bare['step_s']:.3f} s")
    if "session_start_s" in result:
        print(f"shared Ray session: started once in {result['session_start_s']:.1f} s (not in verl's start-up below)")
    print(f"{'':<26}" + "".join(f"{name:>12}" for name, _ in cols))
    rows = [("step (median, s)", "step_s"), ("start-up (s)", "startup_s"), ("teardown (s)", "teardown_s"),
            ("wall (s)", "wall_s"), ("response length", "response_length")]
    for label, key in rows:
        print(f"{label:<26}" + "".join(f"{c[key]:>12.2f}" for _, c in cols))
    for p in PHASES:
        print(f"{'  timing_s/' + p:<26}" + "".join(f"{c['phases_s'][p]:>12.3f}" for _, c in cols))
    missed = []
    checks = [("verl step / bare step", ours["step_s"] / bare["step_s"], "<=", TARGETS["step_vs_bare_max"]),
              ("start-up s", ours["startup_s"], "<=", TARGETS["startup_max_s"]),
              ("timing_s/adv share", ours["adv_share"], "<", TARGETS["adv_share_max"])]
    if base:
        checks.append(("baseline step / verl step", base["step_s"] / ours["step_s"], ">=",
                       TARGETS["baseline_speedup_min"]))
    for name, value, op, target in checks:
        ok = value <= target if op == "<=" else value < target if op == "<" else value >= target
        print(f"{name:<28}{value:>10.3f}  target {op} {target:<6} {'ok' if ok else 'MISSED'}")
        if not ok:
            missed.append(name)
    return missed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-size", type=int, default=16, help="prompts per step")
    parser.add_argument("--n", type=int, default=8, help="rollouts per prompt")
    parser.add_argument("--model-preset", default="small", help="maze model preset (small ~1M params, tiny)")
    parser.add_argument("--steps", type=int, default=6, help="verl steps per run (step 1 is not in the median)")
    parser.add_argument("--bare-repeats", type=int, default=5, help="timed bare-torch steps")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the bare step")
    parser.add_argument("--baseline-dir", help="another checkout with its own .venv to time the same run with")
    parser.add_argument("--override", action="append", default=[], help="extra Hydra override for OUR run")
    parser.add_argument("--work-dir", help="where data and runs go (default: a temporary directory)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per verl run")
    parser.add_argument("--session", action=argparse.BooleanOptionalAction, default=True,
                        help="run this checkout's verl inside a RaySession, as the demo's runs share one (default)")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument("--tiny", action="store_true", help="CI smoke shape: tiny model, 2x2, 2 steps, 1 repeat")
    args = parser.parse_args(argv)
    if args.tiny:
        args.batch_size, args.n, args.model_preset, args.steps, args.bare_repeats = 2, 2, "tiny", 2, 1
    for name in ("batch_size", "n", "steps", "bare_repeats", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    baseline_python = None
    if args.baseline_dir:
        baseline_python = Path(args.baseline_dir, ".venv", "bin", "python")
        if not baseline_python.is_file():
            parser.error(f"--baseline-dir {args.baseline_dir}: no {baseline_python} (run `make venv` there)")

    from fgrpo_verl.tasks.maze.build import build

    work = Path(args.work_dir or tempfile.mkdtemp(prefix="bench_cpu_step_"))
    load_before = _load()
    maze = build(work / "maze", size=7, n_train=max(64, args.batch_size * (args.steps + 1)), n_val=2,
                 model_preset=args.model_preset, seed=0)
    result = {"shape": f"{args.batch_size} prompts x {args.n} rollouts, maze 7x7, model {args.model_preset}",
              "load_before": load_before}
    print(f"[bench] bare torch ({args.bare_repeats} steps)", flush=True)
    result["bare"] = time_bare(maze, args)
    print(f"[bench] verl, this checkout ({args.steps} steps{', in a shared Ray session' if args.session else ''})",
          flush=True)
    overrides = verl_overrides(maze, args, work / "verl", tuned=True)
    if args.session:
        from fgrpo_verl.backends.cpu.session import RaySession

        t0 = time.monotonic()
        with RaySession() as session:
            result["session_start_s"] = time.monotonic() - t0
            result["verl"] = run_verl(sys.executable, REPO, overrides + session.overrides, work / "verl",
                                      args.timeout, env_extra=session.env)
    else:
        result["verl"] = run_verl(sys.executable, REPO, overrides, work / "verl", args.timeout)
    if baseline_python:
        print(f"[bench] verl, baseline {args.baseline_dir} ({args.steps} steps)", flush=True)
        result["baseline"] = run_verl(str(baseline_python), Path(args.baseline_dir),
                                      verl_overrides(maze, args, work / "baseline", tuned=False), work / "baseline",
                                      args.timeout)
    result["load_after"] = _load()
    missed = report(result)
    result["missed"] = missed
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 1 if (missed and args.check) else 0


if __name__ == "__main__":
    sys.exit(main())
