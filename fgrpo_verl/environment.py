"""``os.environ`` with some variables set for the duration of a block, for what reads them from this process's
environment: the launcher composing and checking a recipe under its ``env:``, the CPU backend's Ray session
starting its raylet with the backend's ``RAY_*`` settings."""

from __future__ import annotations

import contextlib
import os


@contextlib.contextmanager
def environment_with(env: dict[str, str]):
    """``os.environ`` plus ``env`` for the duration; each variable restored (or removed) after."""
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
