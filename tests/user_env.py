"""The environment of a new user's shell, for the tests that run the CLI as one (README blocks, first-hour checks)."""

from __future__ import annotations

import os


def user_environment(*also: str) -> dict[str, str]:
    """``os.environ`` without fgrpo-verl's ``FGRPO_*`` and W&B's ``WANDB_*`` settings (and the prefixes in
    ``also``)."""
    strip = ("FGRPO_", "WANDB_", *also)
    return {k: v for k, v in os.environ.items() if not k.startswith(strip)}
