"""Quiet terminal output for ``fgrpo-verl train``: verl's and Ray's output to a log file, our lines on the terminal.

A 2-step CPU run prints ~1,100 lines: verl's config (~900 lines of pprint), every Ray worker's start-up warnings,
TransferQueue's thread warning once per call, W&B's run summary. In quiet mode (``train`` on a terminal, or
``--quiet``) the process's stdout and stderr file descriptors (so Ray's forwarded worker output and every child
process too) go to the log file, and a follower thread echoes to the terminal only:

- one line per training step, from verl's console logger line (``step:N - key:value - ...``): the step, the
  reward, the response length, the policy loss and the step time (``fgrpo_verl.monitoring.console.step_summary``);
- fgrpo-verl's own warnings and errors, and verl's resume message (which checkpoint the run continues from);
- W&B's "View run at" link and "wandb sync" hint.

At the end ``train`` prints where the log is; on failure the last exception line of the log
(:func:`last_error`).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from fgrpo_verl.monitoring.console import clean, step_summary

_EXCEPTION = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Interrupt)|AssertionError)(?::\s*(.*))?$")


def worth_echoing(line: str) -> str | None:
    """The terminal text for a non-step log line, or None: fgrpo-verl's warnings and errors, verl's resume
    message, W&B's run link and sync hint."""
    text = clean(line).strip()
    if not text:
        return None
    if "fgrpo-verl" in text and re.search(r"\b(WARNING|ERROR)\b", text):
        return text
    if re.search(r"Resuming from \S+", text):
        return text[text.index("Resuming from"):]
    if text.startswith("wandb:") and ("View run at" in text or "wandb sync " in text):
        return text
    return None


def last_error(log_path: Path, tail_bytes: int = 200_000) -> str | None:
    """The last ``SomeError: message`` line of the log (the exception a failed run ended with)."""
    try:
        with open(log_path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - tail_bytes))
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return None
    texts = (clean(line).strip() for line in reversed(lines))
    return next((t for t in texts if _EXCEPTION.match(t) and not t.startswith("Set the environment variable")), None)


def _echo(line: str, total_steps: int | None, out, err) -> None:
    """A step's line to ``out`` as :func:`step_summary` shortens it, what :func:`worth_echoing` keeps to ``err``."""
    summary = step_summary(line, total_steps)
    text, stream = (summary, out) if summary is not None else (worth_echoing(line), err)
    if text is not None:
        stream.write(text + "\n")
        stream.flush()


def _follow(path: Path, offset: int, end: list, stop: threading.Event, echo) -> None:
    """Read the log file from ``offset`` as it grows and ``echo`` each line, until ``stop`` is set: then up to
    ``end[0]``, the log's size when the command's output ended. A child process that outlives the command (a Ray
    worker) may go on appending; that is the log's, not the terminal's, and must not keep the follower (and so the
    command's exit) waiting."""
    with open(path, "rb") as f:
        f.seek(offset)
        pending = b""
        while True:
            last = end[0] if stop.is_set() else None
            chunk = f.read(65536 if last is None else max(0, min(65536, last - f.tell())))
            if chunk:
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for raw in lines:
                    echo(raw.decode(errors="replace"))
                continue
            if last is not None:
                if pending:
                    echo(pending.decode(errors="replace"))
                return
            stop.wait(0.2)


@contextlib.contextmanager
def quiet_terminal(log_path: Path, total_steps: int | None = None) -> Iterator[None]:
    """Within: file descriptors 1 and 2 (this process and every child it starts) append to ``log_path``; the
    lines of the module docstring are echoed to the terminal's stdout / stderr as they are written."""
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    with open(log_path, "ab") as log:
        log.write(f"==== fgrpo-verl train, {time.strftime('%Y-%m-%d %H:%M:%S')}: {' '.join(sys.argv)}\n".encode())
        log.flush()
        saved_out, saved_err = os.dup(1), os.dup(2)
        out, err = (os.fdopen(os.dup(saved), "w", buffering=1) for saved in (saved_out, saved_err))
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        end, stop = [], threading.Event()
        follower = threading.Thread(target=_follow, daemon=True, args=(
            log_path, log.tell(), end, stop, lambda line: _echo(line, total_steps, out, err)))
        follower.start()
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved_out, 1)
            os.dup2(saved_err, 2)
            os.close(saved_out)
            os.close(saved_err)
            # nothing of this process writes to the log now: the follower echoes up to here, and its files close
            # only once it has returned. No timeout: one that expired would close them under a write in progress
            # and drop the tail (a slow terminal is slow for the command's own last lines too)
            end.append(os.fstat(log.fileno()).st_size)
            stop.set()
            follower.join()
            out.close()
            err.close()
