"""How every ``fgrpo-verl`` command reports failure: its message, the right exit status, a traceback only on request.
Commands raise and leave the mapping below to :func:`report_errors` (``fgrpo_verl.cli.main`` wraps every command).

    exit 2   the input is wrong: ``ValueError`` (a bad value or flag, a misspelt config key or group option, with a
             "did you mean"; fgrpo_verl.config.compose.ConfigError), or an input file that does not exist or cannot be
             read (``FileNotFoundError``, ``IsADirectoryError``, ``PermissionError``); a message of several lines (a
             preflight refusing several runs, one line each) is printed whole, each line after the prefix
    exit 1   the environment is: a missing tool or service (``RuntimeError``, ``ImportError``, ``ConnectionError``,
             ``TimeoutError``), or anything unexpected (a bug: the line says how to get the traceback); one line
    exit 3   ``launch --dry-run`` only: the plan is fine and printed, but a submit from here would be refused (its
             NOT READY list: data, models, benchmarks, scorer variables)
    exit 130 interrupted (Ctrl-C)

``--debug`` anywhere on the command line, or ``HYDRA_FULL_ERROR=1`` (Hydra's own switch, which verl users know),
re-raises instead, so Python prints the full traceback.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator

DEBUG_FLAG = "--debug"
USER_ERRORS = (ValueError, FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)
ENVIRONMENT_ERRORS = (RuntimeError, ImportError, ConnectionError, TimeoutError, OSError)


@contextlib.contextmanager
def flag_names(flags: dict[str, str]) -> Iterator[None]:
    """Within: a ``ValueError`` of a library function (which names its arguments: ``num_actions=0 is invalid``) is
    raised again with each name replaced by the command-line flag that sets it (``--actions 0 is invalid``)."""
    import re

    try:
        yield
    except ValueError as err:
        message = str(err)
        for name, flag in flags.items():
            message = re.sub(rf"(?<![\w-]){name}=", f"{flag} ", message)
            message = re.sub(rf"(?<![\w-]){name}\b", flag, message)
        raise ValueError(message) from err


def message_lines(exc: BaseException) -> list[str]:
    """Every non-blank line of the message of ``exc`` (a user error is printed whole: each line is a thing to fix)."""
    if isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
        return [f"{exc.filename}: {exc.strerror}"]
    lines = [line.rstrip() for line in str(exc).strip().splitlines() if line.strip()]
    return lines or [type(exc).__name__]


def one_line(exc: BaseException) -> str:
    """The message of an environment error or a bug on one line (a multi-line message, such as a tool's output,
    keeps its first line and says how many follow)."""
    lines = message_lines(exc)
    return lines[0] if len(lines) == 1 else f"{lines[0]} (+{len(lines) - 1} more lines with --debug)"


def report_errors(command: str | None, debug: bool, body: Callable[[], int]) -> int:
    """``body()``'s exit status, or what it raises turned into the line and the exit status of the module docstring."""
    prog = "fgrpo-verl" + (f" {command}" if command else "")
    try:
        return body()
    except SystemExit as exc:
        if not isinstance(exc.code, str):  # argparse, which has printed its line already
            return 0 if exc.code is None else int(exc.code)
        lines, code = [f"error: {exc.code}"], 2  # `sys.exit("message")`
    except (KeyboardInterrupt, Exception) as exc:
        if debug:
            raise
        if isinstance(exc, KeyboardInterrupt):
            print(file=sys.stderr)  # off the terminal's ^C line
            lines, code = ["interrupted"], 130
        elif isinstance(exc, USER_ERRORS):
            lines, code = [f"error: {line}" for line in message_lines(exc)], 2
        elif isinstance(exc, ENVIRONMENT_ERRORS):
            lines, code = [f"error: {one_line(exc)}"], 1
        else:
            lines, code = [f"internal error: {type(exc).__name__}: {one_line(exc)} (rerun with {DEBUG_FLAG} for the "
                           "traceback, and please report it)"], 1
    for line in lines:
        print(f"{prog}: {line}", file=sys.stderr)
    return code
