"""verl's verdicts on a recipe's configs (``fgrpo_verl.preflight.check_run``), given while the launcher composes them.

Validating needs verl, and ``import verl`` (torch, tensordict, transformers) costs ~4.5 CPU-s: about as much as
composing a recipe's 36 runs. So for a recipe (several configs, verl not imported here yet) a one-process pool
started with ``spawn`` imports verl while this process composes, and checks each config it is sent; on 2 cores
the two halves take about the same time, so a recipe is planned in about half the wall time. Its output (verl's
import notices) goes to a temporary file, shown only if it dies. Everything a check reads comes in its arguments
(the config, the recipe's ``env:``), so a verdict is the same in either process.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

# fewer configs than this are checked here: the pool pays verl's import as this process would, and the composing
# it would overlap is short
BACKGROUND_MIN_CONFIGS = 4


def _import_verl(log_path: str) -> None:
    """The pool's initializer: its output to ``log_path``, then verl imported (while the first configs arrive)."""
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    import verl  # noqa: F401


class Validator:
    """``check(*args)`` for each :meth:`submit`: in the pool (:meth:`submit` returns None, the verdicts come with
    :meth:`results`, in the order submitted), or here at once (:meth:`submit` returns the verdict, so the caller
    stops at the first bad config) where verl is imported already (a test session) or there are few configs.
    ``check`` is a module-level function (it is pickled by reference); ``background`` overrides the choice."""

    def __init__(self, check: Callable, configs: int, background: bool | None = None):
        import multiprocessing

        self._check = check
        self._verdicts: list = []
        self._pool = self._log = None
        if background is None:
            background = "verl" not in sys.modules and configs >= BACKGROUND_MIN_CONFIGS
        if background:
            fd, self._log = tempfile.mkstemp(prefix="fgrpo-validate-", suffix=".log")
            os.close(fd)
            self._pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                                             initializer=_import_verl, initargs=(self._log,))

    @property
    def background(self) -> bool:
        return self._pool is not None

    def submit(self, *args):
        if self._pool is None:
            verdict = self._check(*args)
            self._verdicts.append(verdict)
            return verdict
        self._verdicts.append(self._pool.submit(self._check, *args))
        return None

    def results(self) -> list:
        """The verdicts of everything submitted, in order; then the pool ends."""
        try:
            return [v.result() if isinstance(v, Future) else v for v in self._verdicts]
        except BrokenProcessPool:  # it died: say so, with its last words
            with open(self._log, encoding="utf-8", errors="replace") as f:
                tail = f.read().strip().splitlines()[-1:]
            raise RuntimeError("the process validating the configs with verl ended early: "
                               f"{tail[0] if tail else 'no output'}") from None
        finally:
            self.close()

    def close(self) -> None:
        """End the pool without waiting for checks nobody will read (a launch that stops at a bad config reports it
        at once, not after the pool's ``import verl``) and remove its log."""
        if self._pool is not None:
            # Python 3.11's executor has no public way to stop a busy worker: terminate its processes
            processes = list((getattr(self._pool, "_processes", None) or {}).values())
            self._pool.shutdown(wait=False, cancel_futures=True)
            for process in processes:
                process.terminate()
            for process in processes:
                process.join()
            self._pool = None
        if self._log is not None:
            os.unlink(self._log)
            self._log = None
