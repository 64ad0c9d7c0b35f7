"""verl's platform detection warns in a process without an accelerator; ``fgrpo-verl train`` holds those lines until
the config passed its checks, so a config error is the only line a user sees.

Here the holding itself. That a config error of ``fgrpo-verl train`` on this machine (no GPU, the default backend) is
that one line, for an error found while the config is validated and one found after it, is
``test_a_config_error_on_a_machine_without_gpus_is_one_line`` in tests/test_first_hour_on_cpu.py: its command lines
are answered by the fresh process that answers that module's other ``train`` mistakes, so verl is imported once.
"""

from __future__ import annotations

import logging
import logging.handlers

import pytest


def test_held_platform_lines_pass_on_success_and_are_dropped_on_error(monkeypatch):
    from fgrpo_verl.cli import PLATFORM_LOGGER, held_platform_notices

    platform_logger = logging.getLogger(PLATFORM_LOGGER)
    # an in-process Hydra run earlier in the session may have disabled every existing logger (its logging config)
    monkeypatch.setattr(platform_logger, "disabled", False)
    seen: list[str] = []

    class Seen(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    # where the records go on: the platform logger's parent, whatever its own ancestors do with them
    parent = logging.getLogger(PLATFORM_LOGGER.rsplit(".", 1)[0])
    handler = Seen(level=logging.WARNING)
    parent.addHandler(handler)
    try:
        with pytest.raises(ValueError, match="bad"):
            with held_platform_notices():
                platform_logger.warning("no accelerator (dropped)")
                raise ValueError("bad")
        assert seen == []
        with held_platform_notices():
            platform_logger.warning("no accelerator (kept)")
            assert seen == []  # held while the checks run
        assert seen == ["no accelerator (kept)"]
        with held_platform_notices(keep=logging.ERROR):  # doctor's: its platform check says what verl resolved
            platform_logger.warning("no accelerator (doctor drops it)")
            platform_logger.error("a broken platform (doctor shows it)")
        assert seen == ["no accelerator (kept)", "a broken platform (doctor shows it)"]
    finally:
        parent.removeHandler(handler)
    assert platform_logger.propagate and not [h for h in platform_logger.handlers
                                              if isinstance(h, logging.handlers.BufferingHandler)]
