"""Start a local Ray cluster that survives a busy machine.

``ray.init()`` starting a local node waits a fixed 30 s (``raylet_start_wait_time_s`` in ``ray/_private/node.py``,
not configurable) for the raylet to register with the GCS, then raises "The current node timed out during
startup". On a loaded machine (load ~7 on 2 cores: a test suite, a laptop compiling) start-up takes longer than
that, and the demo or ``fgrpo-verl train`` failed before training began. A slow start is not a broken install:
:func:`init` tries again (3 attempts in all), after ending the processes the failed attempt left behind (its GCS
and raylet: descendants of this process, in its session, that did not exist before the attempt; nothing else is
touched: a child this process started in a session of its own, with its own Ray, is not the attempt's).

:func:`retrying_init` applies the same to every ``ray.init`` in a block: verl's ``main_ppo`` calls
``ray.init(**ray_kwargs.ray_init)`` itself, so ``fgrpo-verl train`` runs it inside one.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Iterator

ATTEMPTS = 3
# Ray's message for a local node that did not come up in time (raylet not registered with the GCS)
SLOW_START = "timed out during startup"


def _children() -> dict:
    """(pid, start time) -> process, of this process's descendants in its own session (Ray starts its node's
    processes there); the start time tells a reused pid from an old process."""
    import psutil

    found = {}
    with contextlib.suppress(psutil.Error):
        for child in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error, OSError):
                if os.getsid(child.pid) == os.getsid(0):
                    found[child.pid, child.create_time()] = child
    return found


def _end_new_children(before: dict) -> list[int]:
    """Terminate (then kill) this process's descendants that were not in ``before`` (:func:`_children`); returns
    their pids."""
    import psutil

    new = [p for key, p in _children().items() if key not in before]
    for p in new:
        with contextlib.suppress(psutil.Error):
            p.terminate()
    _, alive = psutil.wait_procs(new, timeout=10)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    return [p.pid for p in new]


def init(*args, _ray_init=None, attempts: int = ATTEMPTS, **kwargs):
    """``ray.init(*args, **kwargs)``, tried up to ``attempts`` times when the local node starts too slowly."""
    import ray

    ray_init = _ray_init or ray.init
    for attempt in range(1, attempts + 1):
        before = _children()
        try:
            return ray_init(*args, **kwargs)
        except Exception as exc:
            if SLOW_START not in str(exc):
                raise
            if attempt == attempts:
                raise RuntimeError(
                    f"Ray's local node did not start in {attempts} attempts of 30 s each (Ray: {exc}); the "
                    "machine is too busy: retry when it is quieter"
                ) from exc
            with contextlib.suppress(Exception):
                ray.shutdown()
            ended = _end_new_children(before)
            print(f"fgrpo-verl: WARNING: Ray's local node did not start within Ray's 30 s (machine busy?); ended "
                  f"the {len(ended)} process(es) of that attempt, retrying ({attempt + 1}/{attempts})",
                  file=sys.stderr, flush=True)


@contextlib.contextmanager
def retrying_init() -> Iterator[None]:
    """Within: ``ray.init`` (as called by anyone, verl included) is :func:`init`."""
    import ray

    original = ray.init
    ray.init = functools.partial(init, _ray_init=original)
    try:
        yield
    finally:
        ray.init = original
