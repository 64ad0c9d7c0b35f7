"""Running ``fgrpo-verl train`` (verl's ``main_ppo``) as a user would, for the end-to-end tests.

Shared by the e2e tests (not collected: the name does not start with ``test_``). A run is a subprocess in its
own session, with verl's file logger on; its wall time and peak memory (PSS summed over the whole process tree:
driver, Ray, workers, engines) are measured and printed (``pytest -s``), and a run past its time limit is killed
with everything it started and reported as such.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RUN_TIMEOUT_S = 600


def tree_memory(proc) -> int:
    """Proportional set size (shared pages split between sharers) summed over the process tree, in bytes."""
    import psutil

    total = 0
    try:
        procs = [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    for p in procs:
        try:
            total += p.memory_full_info().pss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return total


def run_train(overrides: list[str], run_dir: Path, timeout_s: float = RUN_TIMEOUT_S, env: dict | None = None,
              label: str = "e2e") -> dict:
    """``python -m fgrpo_verl train <overrides>`` in its own session; returns rc, wall time, peak PSS, log and
    whether it was killed at ``timeout_s``."""
    import psutil

    run_dir.mkdir(parents=True, exist_ok=True)
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = os.pathsep.join([str(REPO), full_env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    full_env["VERL_FILE_LOGGER_PATH"] = str(run_dir / "metrics.jsonl")
    full_env["RAY_DEDUP_LOGS"] = "0"
    full_env.update(env or {})
    log_path = run_dir / "train.log"
    start = time.monotonic()
    peak, timed_out = 0, False
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "fgrpo_verl", "train", *overrides],
            stdout=log, stderr=subprocess.STDOUT, env=full_env, cwd=run_dir, start_new_session=True,
        )
        ps = psutil.Process(proc.pid)
        try:
            while proc.poll() is None:
                peak = max(peak, tree_memory(ps))
                if time.monotonic() - start > timeout_s:
                    timed_out = True
                    break
                time.sleep(1.0)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, 9)  # the session we started: driver, its Ray cluster and workers
                proc.wait()
    wall = time.monotonic() - start
    print(f"[{label}] {run_dir.name}: rc={proc.returncode} wall={wall:.1f}s peak_pss={peak / 2**30:.2f} GiB"
          + (" (killed at the time limit)" if timed_out else ""))
    return {"rc": proc.returncode, "wall_s": wall, "peak_pss": peak, "log": log_path.read_text(),
            "timed_out": timed_out}


def metrics(run_dir: Path) -> dict[int, dict]:
    """step -> metrics dict, from verl's file logger."""
    out: dict[int, dict] = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        out.setdefault(int(record["step"]), {}).update(record["data"])
    return out
