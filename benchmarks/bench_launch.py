"""How long ``fgrpo-verl launch paper_main --status`` / ``--dry-run`` take (36 runs), against verl's own cost of
checking one config.

The unit, verl's own code in one fresh process: ``import verl``, Hydra's compose of verl's ``ppo_trainer`` and
``validate_config`` of it (what ``python -m verl.trainer.main_ppo`` does before it starts Ray). Then, each in a
fresh process from an empty directory (no prepared data, Slurm answered by a stand-in ``squeue`` that lists
nothing): ``--status`` composing the runs (nothing submitted yet), ``--dry-run``, and ``--status`` reading the
runs a submit recorded (fgrpo_verl/launch/manifest.py; written here as a submit writes it). Reported per
command: wall seconds (median of the repeats, measured by this process around the child), CPU seconds of the
launcher and of its children (a stand-in ``squeue`` at most), and the wall ratio to the unit. The machine's
load average is printed beside: on a shared machine the wall time follows the load, the CPU seconds do not.
Then ``--status`` where Slurm cannot be asked (a stand-in ``squeue`` that fails): it must answer before composing
anything.

Each row is held to its target (TARGETS: CPU seconds per process, which a loaded machine inflates less than wall
seconds; the unreachable-Slurm answer in wall seconds); ``--check`` exits 1 if one is missed.

Usage: python benchmarks/bench_launch.py [--repeats 3] [--json out.json] [--check]
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


# (launcher CPU-s, children's CPU-s) at most, per row; measured 2026-12-06 at load 1.2-5.5 (docs/slurm.md):
# --status 7.6-7.8 CPU-s composing; --dry-run 13.3-14.1 (composing, then `import verl` and each run's checks).
# Room is left for a loaded machine.
COLD_CPU_BOUND = 12
DRY_RUN_CPU_BOUND = 18
RECORDED_CPU_BOUND = 3
TARGETS = {
    "--status, composing": (COLD_CPU_BOUND, 0.5),  # children: a stand-in squeue at most
    "--dry-run": (DRY_RUN_CPU_BOUND, 0.5),
    "--status, from the submit's record": (RECORDED_CPU_BOUND, 0.5),
}
# what a submit records for --status (fgrpo_verl/cli/launch.py), without sbatch
RECORD = """
from pathlib import Path
from fgrpo_verl.launch import manifest, plan_jobs
work = Path.cwd()
recipe, jobs = plan_jobs("paper_main", None, [], work / "slurm_logs", work, check=False)
manifest.write_manifest(manifest.manifest_path(work, recipe.name), manifest.plan_key(recipe.path, None, [], True), jobs)
"""
UNREACHABLE_WALL_BOUND = 2.0  # wall seconds of `--status` when squeue fails: before any config is composed


def _timed(code: str, args: list[str], env: dict, cwd: Path, expect_rc: str = "0") -> tuple[float, float, float]:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, cwd=cwd)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"{args or 'unit'} failed (exit {done.returncode}): {done.stderr[-2000:]}")
    if not args:
        return wall, float("nan"), float("nan")
    rc, me, kids = done.stdout.split()[-3:]
    if rc != expect_rc:
        sys.exit(f"{args} exited {rc}: {done.stderr[-2000:]}")
    return wall, float(me), float(kids)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", default=None, help="also write the numbers here")
    parser.add_argument("--check", action="store_true", help="exit 1 if a row misses its target (TARGETS)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench_launch_"))
    try:
        missed = _bench(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if missed and args.check:
        sys.exit(f"missed: {'; '.join(missed)}")


def _bench(args, work: Path) -> list[str]:
    (work / "bin").mkdir()
    squeue = work / "bin" / "squeue"
    squeue.write_text("#!/bin/sh\nexit 0\n")
    squeue.chmod(0o755)
    env = dict(os.environ, PATH=f"{work / 'bin'}{os.pathsep}{os.environ['PATH']}")
    results: dict[str, list[tuple[float, float, float]]] = {}
    loads = []
    for _ in range(args.repeats):
        loads.append(os.getloadavg()[0])
        results.setdefault("unit: verl compose + validate_config, 1 config", []).append(_timed(UNIT, [], env, work))
        shutil.rmtree(work / "slurm_jobs", ignore_errors=True)
        results.setdefault("--status, composing", []).append(
            _timed(LAUNCH, ["launch", "paper_main", "--status"], env, work))
        # no data, models or benchmarks in the work folder: the dry run's "not ready" exit status
        results.setdefault("--dry-run", []).append(_timed(LAUNCH, ["launch", "paper_main", "--dry-run"], env, work,
                                                          expect_rc="3"))
        subprocess.run([sys.executable, "-c", RECORD], cwd=work, env=env, check=True, capture_output=True)
        results.setdefault("--status, from the submit's record", []).append(
            _timed(LAUNCH, ["launch", "paper_main", "--status"], env, work))
    (work / "bin-unreachable").mkdir()
    failing = work / "bin-unreachable" / "squeue"
    failing.write_text("#!/bin/sh\necho 'squeue: fatal: Could not establish a configuration source' >&2\nexit 1\n")
    failing.chmod(0o755)
    unreachable = dict(env, PATH=f"{work / 'bin-unreachable'}{os.pathsep}{os.environ['PATH']}")
    for _ in range(args.repeats):
        results.setdefault("--status, Slurm unreachable", []).append(
            _timed(LAUNCH, ["launch", "paper_main", "--status"], unreachable, work, expect_rc="1"))
    unit = statistics.median(w for w, _, _ in results["unit: verl compose + validate_config, 1 config"])
    print(f"load average (1 min) during the runs: {min(loads):.1f}-{max(loads):.1f}; {args.repeats} repeat(s)")
    print(f"{'':50} {'wall s':>8} {'x unit':>7} {'launcher CPU-s':>15} {'children CPU-s':>15}")
    table, missed = {}, []
    for name, rows in results.items():
        wall = statistics.median(w for w, _, _ in rows)
        me = statistics.median(m for _, m, _ in rows)
        kids = statistics.median(k for _, _, k in rows)
        table[name] = {"wall_s": wall, "ratio": wall / unit, "launcher_cpu_s": me, "children_cpu_s": kids}
        verdict = ""
        if name in TARGETS:
            me_bound, kids_bound = TARGETS[name]
            verdict = f"  target < {me_bound} / < {kids_bound} CPU-s"
            if not (me < me_bound and kids < kids_bound):
                missed.append(f"{name}: {me:.1f} / {kids:.1f} CPU-s")
                verdict += " MISSED"
        elif name == "--status, Slurm unreachable":
            verdict = f"  target < {UNREACHABLE_WALL_BOUND} s wall"
            if wall >= UNREACHABLE_WALL_BOUND:
                missed.append(f"{name}: {wall:.2f} s")
                verdict += " MISSED"
        print(f"{name:50} {wall:8.2f} {wall / unit:7.2f} {me:15.2f} {kids:15.2f}{verdict}")
    if args.json:
        Path(args.json).write_text(json.dumps({"load": loads, "results": table, "missed": missed}, indent=1))
    return missed


if __name__ == "__main__":
    main()
