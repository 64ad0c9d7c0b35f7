"""The environment of a new user's shell, for the tests that run the CLI as one (README blocks, first-hour checks)."""

from __future__ import annotations

import os

from fgrpo_verl.config.compose import CACHE_ENV


def user_environment(*also: str) -> dict[str, str]:
    """``os.environ`` without fgrpo-verl's ``FGRPO_*`` and W&B's ``WANDB_*`` settings (and the prefixes in
    ``also``), except the suite's private composition cache (conftest): the suite never writes the user's ~/.cache."""
    strip = ("FGRPO_", "WANDB_", *also)
    return {k: v for k, v in os.environ.items() if not k.startswith(strip) or k == CACHE_ENV}
