"""verl's platform detection warns in a process without an accelerator; ``fgrpo-verl train`` holds those lines until
the config passed its checks, so a config error is the only line a user sees."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest


def test_held_platform_lines_pass_on_success_and_are_dropped_on_error(monkeypatch):
    from fgrpo_verl.cli.train import PLATFORM_LOGGER, platform_warnings_after_success

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
            with platform_warnings_after_success():
                platform_logger.warning("no accelerator (dropped)")
                raise ValueError("bad")
        assert seen == []
        with platform_warnings_after_success():
            platform_logger.warning("no accelerator (kept)")
            assert seen == []  # held while the checks run
        assert seen == ["no accelerator (kept)"]
    finally:
        parent.removeHandler(handler)
    assert platform_logger.propagate and not [h for h in platform_logger.handlers if type(h).__name__ == "Hold"]


@pytest.mark.parametrize("overrides, error", [
    (["algorithm.fgrpo.gamma=-1"],  # found while the config is validated
     "algorithm.fgrpo.gamma=-1.0 is invalid: the focal strength must be a finite number >= 0"),
    (["data.train_files=/nonexistent/train.parquet"],  # found after it, before Ray starts
     "data.train_files=/nonexistent/train.parquet: no such file"),
])
def test_a_config_error_on_a_machine_without_gpus_is_one_line(overrides, error):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VERL_", "CUDA_"))}
    done = subprocess.run([sys.executable, "-m", "fgrpo_verl", "train", "algo=grpo", *overrides],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [f"fgrpo-verl train: error: {error}"], done.stderr
