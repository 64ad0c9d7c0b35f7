"""Start-up of one ``fgrpo-verl train backend=cpu`` run, per phase and per actor; optionally A/B against a variant.

Each run is the e2e tests' maze run (7x7 mazes, tiny Qwen2, F-GRPO with DAPO group filtering, parity reward,
tests/verl_runs.py's overrides) for ``--steps`` steps, no validation, no checkpoints, console + file loggers.
``a`` runs use this environment; ``b`` runs add ``--b-env NAME=VALUE`` (a switch the code under test reads).
The runs go in ``--order`` (default ``a,b,a,b``: interleaved, so both see the same machine state as far as a
shared machine allows); the load average is printed with each.

Per run: the time from launch to main_ppo's ``ray init kwargs`` line (the driver's own work: import verl,
compose, validate), to the start of step 1 (step 1's console line minus its ``timing_s/step``), to exit; the
peak PSS of the run's process tree (tests/verl_runs.py's ``tree_memory``, every 2 s); and when each of verl's
actors first appeared (the process title Ray gives an actor's worker, polled every 0.25 s).
Numbers measured with it: docs/cpu_backend.md, "Start-up of one run".

Usage: python benchmarks/bench_cpu_startup.py [--order a,b,a,b --b-env NAME=VALUE] [--steps 2] [--json out.json]
Run it through the machine's heavy-job slot when the machine is shared (each run is a full verl start).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))


def _titles(root) -> dict[int, str]:
    import psutil

    out = {}
    try:
        procs = root.children(recursive=True)
    except psutil.Error:
        return out
    for p in procs:
        try:
            out[p.pid] = " ".join(p.cmdline())[:80]
        except psutil.Error:
            pass
    return out


def run_once(label: str, overrides: list[str], run_dir: Path, env: dict[str, str], timeout: float) -> dict:
    import psutil
    from verl_runs import tree_memory

    run_dir.mkdir(parents=True, exist_ok=True)
    full_env = {**os.environ, "PYTHONPATH": str(REPO), "VERL_FILE_LOGGER_PATH": str(run_dir / "metrics.jsonl"),
                "WANDB_MODE": "disabled", **env}
    load_before = os.getloadavg()[0]
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "fgrpo_verl", "train", *overrides], cwd=run_dir, env=full_env,
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    root = psutil.Process(proc.pid)
    peak, first_seen, stop = [0], {}, threading.Event()

    def sample():
        last_pss = 0.0
        while not stop.is_set():
            now = time.monotonic() - t0
            for title in _titles(root).values():
                if title.startswith("ray::") and title.split()[0] not in first_seen:
                    first_seen[title.split()[0]] = round(now, 1)
            if now - last_pss >= 2.0:
                peak[0] = max(peak[0], tree_memory(root))
                last_pss = now
            stop.wait(0.25)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    ray_init, step_lines = None, []
    try:
        with open(run_dir / "train.log", "w") as log:
            for line in proc.stdout:
                now = time.monotonic() - t0
                log.write(f"{now:8.2f} {line}")
                if ray_init is None and line.startswith("ray init kwargs"):
                    ray_init = now
                if "step:" in line and " - " in line and "timing_s/step" in line:
                    step_lines.append(now)
                if now > timeout:
                    raise TimeoutError(f"{label} run exceeded {timeout} s")
        proc.wait()
    finally:
        stop.set()
        sampler.join()
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
    wall = time.monotonic() - t0
    if proc.returncode != 0 or not step_lines:
        raise RuntimeError(f"{label} run failed (exit {proc.returncode}); log: {run_dir / 'train.log'}")
    first = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[0])
    step1 = float(first["data"]["timing_s/step"])
    return {"label": label, "to_ray_init_s": ray_init, "to_first_step_s": step_lines[0] - step1,
            "step1_s": step1, "wall_s": wall, "peak_pss_gib": peak[0] / 2**30, "load_before": load_before,
            "load_after": os.getloadavg()[0], "actors_first_seen_s": first_seen}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--order", default=None, help="the runs, in order: a and b (default a,b,a,b with --b-env, "
                        "else a,a)")
    parser.add_argument("--b-env", action="append", default=[], metavar="NAME=VALUE", help="environment of b runs")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--json", help="write the runs here")
    parser.add_argument("--keep", help="work directory to keep (default: a temporary one)")
    args = parser.parse_args(argv)

    from fgrpo_verl.tasks.maze import build
    from verl_runs import maze_common_overrides

    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench_cpu_startup_"))
    maze = build(work / "maze", size=7, n_train=64, n_val=4, model_preset="tiny", seed=0)
    runs = []
    b_env = dict(item.split("=", 1) for item in args.b_env)
    order = (args.order or ("a,b,a,b" if b_env else "a,a")).split(",")
    for i, label in enumerate(order):
        if label not in ("a", "b"):
            raise SystemExit(f"--order: 'a' or 'b', not {label!r}")
        env = b_env if label == "b" else {}
        run_dir = work / f"{label}{i}"
        overrides = [*maze_common_overrides(maze), "trainer.logger=[console,file]",
                     f"trainer.total_training_steps={args.steps}", "trainer.val_before_train=False",
                     "trainer.test_freq=-1", "trainer.save_freq=-1", f"trainer.default_local_dir={run_dir / 'ckpt'}"]
        try:
            result = run_once(label, overrides, run_dir, env, args.timeout)
        except (RuntimeError, TimeoutError) as exc:  # reported, and the other runs still measured
            print(f"{label}: {exc}", flush=True)
            continue
        runs.append(result)
        print(f"{label}: ray init {result['to_ray_init_s']:.1f} s, first step {result['to_first_step_s']:.1f} s, "
              f"exit {result['wall_s']:.1f} s, peak PSS {result['peak_pss_gib']:.2f} GiB, load "
              f"{result['load_before']:.1f}->{result['load_after']:.1f}; actors: {result['actors_first_seen_s']}",
              flush=True)
    for label in ("a", "b"):
        mine = [r for r in runs if r["label"] == label]
        if not mine:
            continue
        print(f"{label} median: first step {statistics.median(r['to_first_step_s'] for r in mine):.1f} s, exit "
              f"{statistics.median(r['wall_s'] for r in mine):.1f} s, peak PSS "
              f"{max(r['peak_pss_gib'] for r in mine):.2f} GiB (max)")
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
