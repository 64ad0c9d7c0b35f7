"""fgrpo_verl/cli/quiet.py's shutdown: the follower echoing the log to the terminal finishes before its files
close, however slow the terminal, and stops at what was written when the command ended."""

from __future__ import annotations

import os
import threading
import time

import fgrpo_verl.cli.quiet as quiet

STEP = "step:{} - critic/score/mean:0.5 - timing_s/step:1.0\n"


def _thread_errors(monkeypatch) -> list:
    errors = []
    monkeypatch.setattr(threading, "excepthook", lambda args: errors.append(args.exc_value))
    return errors


def test_a_terminal_slower_than_any_timeout_gets_every_line_and_no_write_after_close(tmp_path, monkeypatch, capfd):
    errors = _thread_errors(monkeypatch)
    echo = quiet._echo

    def slow_echo(*args):  # a terminal that takes its time (a slow ssh link, a paused pager)
        time.sleep(0.1)
        echo(*args)

    monkeypatch.setattr(quiet, "_echo", slow_echo)
    real_join = threading.Thread.join
    # a shutdown that waits a bounded time gives up here, while the follower is still writing
    monkeypatch.setattr(threading.Thread, "join",
                        lambda self, timeout=None: real_join(self, None if timeout is None else min(timeout, 0.05)))
    with quiet.quiet_terminal(tmp_path / "train.log", total_steps=6):
        for step in range(1, 7):
            os.write(1, STEP.format(step).encode())
    time.sleep(0.3)  # a follower left running would write now
    out = capfd.readouterr().out.splitlines()
    assert [line.split("  ")[0] for line in out] == [f"step {i}/6" for i in range(1, 7)]
    assert errors == []


def test_output_written_after_the_command_ended_does_not_keep_the_follower_alive(tmp_path, monkeypatch, capfd):
    """A child process that outlives the command (a Ray worker) may still append to the log: the follower ends at
    what the command's own output reached, so leaving ``quiet_terminal`` returns while that child still writes."""
    errors = _thread_errors(monkeypatch)
    log = tmp_path / "train.log"
    stop = threading.Event()
    written = threading.Event()
    left = threading.Event()

    def child():  # at most one line a millisecond: the part echoed (up to the end) stays small
        with open(log, "a") as f:
            for n in range(100_000):
                if stop.is_set():
                    return
                f.write(STEP.format(99))
                f.flush()
                if n == 50:
                    written.set()
                time.sleep(0.001)

    def command():
        with quiet.quiet_terminal(log, total_steps=2):
            os.write(1, STEP.format(1).encode())
            writer.start()
            written.wait(10)
        left.set()

    writer = threading.Thread(target=child, daemon=True)
    body = threading.Thread(target=command, daemon=True)
    body.start()
    try:
        body.join(10)  # the child goes on writing all along
        assert left.is_set() and not body.is_alive(), "leaving quiet_terminal waited for the child's later output"
        assert writer.is_alive(), "the child stopped writing before the command ended: nothing was tested"
    finally:
        stop.set()
        writer.join(10)
    out = capfd.readouterr().out.splitlines()
    assert out[0].startswith("step 1/2")
    assert errors == []
