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
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass

DEBUG_FLAG = "--debug"
USER_ERRORS = (ValueError, FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)
ENVIRONMENT_ERRORS = (RuntimeError, ImportError, ConnectionError, TimeoutError, OSError)


def strip_debug_flag(argv: list[str]) -> tuple[list[str], bool]:
    """``argv`` without ``--debug``, and whether tracebacks were asked for (``--debug`` or HYDRA_FULL_ERROR=1)."""
    debug = DEBUG_FLAG in argv or os.environ.get("HYDRA_FULL_ERROR") == "1"
    return [a for a in argv if a != DEBUG_FLAG], debug


def with_flag_names(message: str, flags: dict[str, str]) -> str:
    """``message`` of a library function (which names its arguments: ``num_actions=0 is invalid``) with each name
    replaced by the command-line flag that sets it (``--actions 0 is invalid``)."""
    import re

    for name, flag in flags.items():
        message = re.sub(rf"(?<![\w-]){name}=", f"{flag} ", message)
        message = re.sub(rf"(?<![\w-]){name}\b", flag, message)
    return message


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


@dataclass
class Outcome:
    code: int = 0


@contextlib.contextmanager
def report_errors(command: str | None, debug: bool) -> Iterator[Outcome]:
    """Run a command's body; turn what it raises into the line and the exit status of the module docstring."""
    outcome = Outcome()
    prog = "fgrpo-verl" + (f" {command}" if command else "")
    try:
        yield outcome
    except KeyboardInterrupt:
        if debug:
            raise
        print(f"\n{prog}: interrupted", file=sys.stderr)
        outcome.code = 130
    except SystemExit as exc:
        # argparse and `sys.exit("message")`: argparse has printed its usage line already
        if isinstance(exc.code, str):
            print(f"{prog}: error: {exc.code}", file=sys.stderr)
            outcome.code = 2
        else:
            outcome.code = 0 if exc.code is None else int(exc.code)
    except USER_ERRORS as exc:
        if debug:
            raise
        for line in message_lines(exc):
            print(f"{prog}: error: {line}", file=sys.stderr)
        outcome.code = 2
    except ENVIRONMENT_ERRORS as exc:
        if debug:
            raise
        print(f"{prog}: error: {one_line(exc)}", file=sys.stderr)
        outcome.code = 1
    except Exception as exc:
        if debug:
            raise
        print(f"{prog}: internal error: {type(exc).__name__}: {one_line(exc)} (rerun with {DEBUG_FLAG} for the "
              "traceback, and please report it)", file=sys.stderr)
        outcome.code = 1
