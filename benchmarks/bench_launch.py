"""How long ``fgrpo-verl launch paper_main --status`` / ``--dry-run`` take (36 runs), against verl's own cost of
checking one config.

The unit, verl's own code in one fresh process: ``import verl``, Hydra's compose of verl's ``ppo_trainer`` and
``validate_config`` of it (what ``python -m verl.trainer.main_ppo`` does before it starts Ray). Then, each in a
fresh process from an empty directory (no prepared data, Slurm answered by a stand-in ``squeue`` that lists
nothing): ``--status`` and ``--dry-run`` with an empty composition cache (a first launch) and with the cache
those left (every later one). Reported per command: wall seconds (median of the repeats, measured by this
process around the child), CPU seconds of the launcher and of its children (the process that checks with
verl), and the wall ratio to the unit. The machine's load average is printed beside: on a shared machine the
wall time follows the load, the CPU seconds do not.

Usage: python benchmarks/bench_launch.py [--repeats 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

UNIT = """
import resource, sys, time
from hydra import compose, initialize_config_dir
from importlib.util import find_spec
from pathlib import Path
import verl
from verl.trainer.ppo.utils import need_critic, need_reference_policy
from verl.utils.config import validate_config
config_dir = Path(find_spec("verl").origin).parent / "trainer" / "config"
with initialize_config_dir(config_dir=str(config_dir), version_base=None):
    config = compose(config_name="ppo_trainer", overrides=[
        "actor_rollout_ref.model.path=/x", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4", "algorithm.adv_estimator=grpo"])
validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
"""

LAUNCH = r"""
import contextlib, io, resource, sys
from fgrpo_verl.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    rc = main(sys.argv[1:])
me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
print(rc, me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime)
"""


def _timed(code: str, args: list[str], env: dict, cwd: Path) -> tuple[float, float, float]:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, cwd=cwd)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"{args or 'unit'} failed (exit {done.returncode}): {done.stderr[-2000:]}")
    if not args:
        return wall, float("nan"), float("nan")
    rc, me, kids = done.stdout.split()[-3:]
    if rc != "0":
        sys.exit(f"{args} exited {rc}: {done.stderr[-2000:]}")
    return wall, float(me), float(kids)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", default=None, help="also write the numbers here")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench_launch_"))
    try:
        _bench(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _bench(args, work: Path) -> None:
    (work / "bin").mkdir()
    squeue = work / "bin" / "squeue"
    squeue.write_text("#!/bin/sh\nexit 0\n")
    squeue.chmod(0o755)
    env = dict(os.environ, PATH=f"{work / 'bin'}{os.pathsep}{os.environ['PATH']}",
               FGRPO_VERL_CACHE_DIR=str(work / "cache"))
    results: dict[str, list[tuple[float, float, float]]] = {}
    loads = []
    for _ in range(args.repeats):
        loads.append(os.getloadavg()[0])
        results.setdefault("unit: verl compose + validate_config, 1 config", []).append(_timed(UNIT, [], env, work))
        for command in ("--status", "--dry-run"):
            shutil.rmtree(work / "cache", ignore_errors=True)
            results.setdefault(f"{command}, empty cache", []).append(
                _timed(LAUNCH, ["launch", "paper_main", command], env, work))
            results.setdefault(f"{command}, cache warm", []).append(
                _timed(LAUNCH, ["launch", "paper_main", command], env, work))
    unit = statistics.median(w for w, _, _ in results["unit: verl compose + validate_config, 1 config"])
    print(f"load average (1 min) during the runs: {min(loads):.1f}-{max(loads):.1f}; {args.repeats} repeat(s)")
    print(f"{'':50} {'wall s':>8} {'x unit':>7} {'launcher CPU-s':>15} {'checking CPU-s':>15}")
    table = {}
    for name, rows in results.items():
        wall = statistics.median(w for w, _, _ in rows)
        me = statistics.median(m for _, m, _ in rows)
        kids = statistics.median(k for _, _, k in rows)
        table[name] = {"wall_s": wall, "ratio": wall / unit, "launcher_cpu_s": me, "children_cpu_s": kids}
        print(f"{name:50} {wall:8.2f} {wall / unit:7.2f} {me:15.2f} {kids:15.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"load": loads, "results": table}, indent=1))


if __name__ == "__main__":
    main()
