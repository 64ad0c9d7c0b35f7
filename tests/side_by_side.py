"""Independent subprocesses of one test module, run side by side instead of one after another.

Each command is still its own fresh process with its own environment: only the waiting is shared. A module
starts them all at once (``start``), then each test takes the result of its own (``Started.result``), so the
processes overlap each other and the module's in-process tests. At most ``workers`` run at once (each may import
verl, ~1 GiB).
"""

from __future__ import annotations

import os
import subprocess
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

WORKERS = max(2, min(4, os.cpu_count() or 2))


class Started:
    """The futures of ``start``: ``result(name)`` waits for that command and returns its ``CompletedProcess``
    (or re-raises what running it raised, e.g. ``TimeoutExpired``)."""

    def __init__(self, pool: ThreadPoolExecutor, futures: dict[str, Future]):
        self._pool = pool
        self._futures = futures

    def __contains__(self, name: str) -> bool:
        return name in self._futures

    def result(self, name: str) -> subprocess.CompletedProcess:
        return self._futures[name].result()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def selected(request, commands: dict[str, tuple[str | tuple[str, ...], dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Of ``commands`` (name -> (the name of the test that reads it, or a tuple of the names of those that do; its
    ``subprocess.run`` arguments)), those that a test this session runs reads: a module fixture started for a
    ``-k`` selection does not start the others."""
    tests = selected_tests(request)
    return {name: kwargs for name, (readers, kwargs) in commands.items()
            if tests.intersection((readers,) if isinstance(readers, str) else readers)}


def selected_tests(request) -> set[str]:
    """The names (without parameters) of the tests of the requesting module that this session runs."""
    return {item.originalname for item in request.session.items if getattr(item, "module", None) is request.module}


def start(commands: dict[str, dict[str, Any]], workers: int = WORKERS) -> Started:
    """``commands``: name -> keyword arguments of ``subprocess.run`` (``args`` included); output is captured as
    text unless the arguments say otherwise."""
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="side_by_side")
    futures = {name: pool.submit(subprocess.run, **{"capture_output": True, "text": True, **kwargs})
               for name, kwargs in commands.items()}
    return Started(pool, futures)


# Ray's line once its local node is up. A node start waits a fixed 30 s for its raylet (fgrpo_verl.job.ray_start),
# so a second verl run starts its node after the first one's is up rather than racing it on a busy machine.
RAY_STARTED = "Started a local Ray instance"


def wait_for_ray(log: Path, run: Future, deadline_s: float = 300) -> None:
    """Wait until the verl run writing ``log`` has its Ray node up (or has ended, or ``deadline_s`` passed): then
    a second run can start beside it. On CPU most of a run's start-up is one process at a time importing
    torch/verl, so the second run fills the idle core."""
    deadline = time.monotonic() + deadline_s
    while not run.done() and time.monotonic() < deadline:
        if log.is_file() and RAY_STARTED in log.read_text(errors="replace"):
            return
        time.sleep(0.5)
