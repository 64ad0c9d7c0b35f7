"""verl's verdicts on a recipe's configs (``fgrpo_verl.preflight.check_run``), given while the launcher composes them.

Validating needs verl, and ``import verl`` (torch, tensordict, transformers) costs ~4.5 CPU-s: about as much as
composing a recipe's 36 runs. So for a recipe (several configs, verl not imported here yet) a second process
started with ``spawn`` imports verl while this one composes, and checks each config it is sent; on 2 cores the two
halves take about the same time (measured in docs/slurm.md). Its output (verl's import notices) goes to a temporary
file, shown only if it dies. Everything a check reads comes in its arguments (the config, the recipe's ``env:``), so
a verdict is the same in either process.
"""

from __future__ import annotations

import os
import pickle
import queue
import sys
import tempfile
from collections.abc import Callable

# fewer configs than this are checked here: the second process pays verl's import as this one would, and the
# composing it would overlap is short
BACKGROUND_MIN_CONFIGS = 4
_PENDING = object()


def _serve(tasks, verdicts, check: Callable, log_path: str) -> None:
    """The second process: its output to ``log_path``, verl imported (while the first configs arrive), then
    ``check(*args)`` for each task until ``None``; each outcome is ``(True, verdict)`` or ``(False, exception)``."""
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    import verl  # noqa: F401

    for args in iter(tasks.get, None):
        try:
            verdicts.put((True, check(*args)))
        except Exception as exc:  # noqa: BLE001 (raised again in the launcher, as it is when it pickles)
            try:
                pickle.loads(pickle.dumps(exc))
            except Exception:  # noqa: BLE001
                exc = RuntimeError(f"{type(exc).__name__}: {exc}")
            verdicts.put((False, exc))


class Validator:
    """``check(*args)`` for each :meth:`submit`: in the second process (:meth:`submit` returns None, the verdicts
    come with :meth:`results`, in the order submitted), or here at once (:meth:`submit` returns the verdict, so the
    caller stops at the first bad config) where verl is imported already (a test session) or there are few configs.
    ``check`` is a module-level function (it is pickled by reference); ``background`` overrides the choice."""

    def __init__(self, check: Callable, configs: int, background: bool | None = None):
        import multiprocessing

        self._check = check
        self._verdicts: list = []
        self._process = self._log = None
        if background is None:
            background = "verl" not in sys.modules and configs >= BACKGROUND_MIN_CONFIGS
        if background:
            fd, self._log = tempfile.mkstemp(prefix="fgrpo-validate-", suffix=".log")
            os.close(fd)
            context = multiprocessing.get_context("spawn")
            self._tasks, self._done = context.Queue(), context.Queue()
            self._process = context.Process(target=_serve, args=(self._tasks, self._done, check, self._log),
                                            daemon=True)
            self._process.start()

    @property
    def background(self) -> bool:
        return self._process is not None

    def submit(self, *args):
        if self._process is None:
            verdict = self._check(*args)
            self._verdicts.append(verdict)
            return verdict
        self._tasks.put(args)
        self._verdicts.append(_PENDING)
        return None

    def results(self) -> list:
        """The verdicts of everything submitted, in order; then the second process ends."""
        try:
            return [self._next() if v is _PENDING else v for v in self._verdicts]
        finally:
            self.close()

    def _next(self):
        while True:
            try:
                ok, value = self._done.get(timeout=0.5)
                break
            except queue.Empty:
                if not self._process.is_alive():  # it died: say so, with its last words
                    with open(self._log, encoding="utf-8", errors="replace") as f:
                        tail = f.read().strip().splitlines()[-1:]
                    raise RuntimeError("the process validating the configs with verl ended early: "
                                       f"{tail[0] if tail else 'no output'}") from None
        if not ok:
            raise value
        return value

    def close(self) -> None:
        """End the second process without waiting for checks nobody will read (a launch that stops at a bad config
        reports it at once, not after the process's ``import verl``) and remove its log."""
        if self._process is not None:
            self._process.terminate()
            self._process.join()
            # configs still queued for it are dropped, not flushed into a pipe nobody reads
            self._tasks.cancel_join_thread()
            self._process = None
        if self._log is not None:
            os.unlink(self._log)
            self._log = None
