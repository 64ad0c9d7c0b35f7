"""Reward for the CPU-backend end-to-end tests (loaded by verl from this file path, not collected by pytest).

An untrained model almost never solves a maze, so every group would score 0 and DAPO filtering would evict
them all. This rule scores about half the responses of a random policy 1: a response of even length
(in characters) is "correct". Groups then mix successes and failures, so the F-GRPO focal weight
g = (1 - μ̂)^γ takes values strictly between 0 and 1 and γ visibly changes the advantages.

``compute_score_even_prompts_solved`` also scores every response to a prompt of even dataset index 1: about half
the groups are uniform whatever the policy samples, so DAPO's group filtering has groups to evict in every run
(with the parity rule alone a group of 4 is uniform with probability 1/8, and a short run often has none).

A Slurm test holds a run at a known point with it: while the file named by ``$FGRPO_TEST_HOLD_FILE`` exists and
a path it lists exists too, scoring waits (at most 10 minutes a call). Each line is a gate: ``PATH`` holds every scorer,
``JOBID PATH`` only the scorers of Slurm job JOBID (``$SLURM_JOB_ID``), so two jobs can each be held at their own
point whatever order they get there in. tests/test_slurm_launch_e2e_on_cpu.py names step 1's rollout dump (step 2
waits until the USR1 stop request is on disk), then step 4's checkpoint folder: the run stops in step 4's validation,
after the checkpoint, before the log.
"""

import os
import time
from pathlib import Path

HOLD_LIMIT_S = 600


def _gates(hold: str) -> list[Path]:
    """The gates of the hold file that apply to this process (FileNotFoundError once the file is gone)."""
    job = os.environ.get("SLURM_JOB_ID")
    gates = []
    for line in Path(hold).read_text().splitlines():
        scope, sep, rest = line.strip().partition(" ")
        if sep and scope.isdigit():
            if scope == job:
                gates.append(Path(rest))
        elif line.strip():
            gates.append(Path(line.strip()))
    return gates


def _hold() -> None:
    hold = os.environ.get("FGRPO_TEST_HOLD_FILE")
    deadline = time.monotonic() + HOLD_LIMIT_S
    while hold and time.monotonic() < deadline:
        try:
            if not any(gate.exists() for gate in _gates(hold)):
                return
        except FileNotFoundError:
            return
        time.sleep(0.2)


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    _hold()
    return 1.0 if len(solution_str) % 2 == 0 else 0.0


def compute_score_even_prompts_solved(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    parity = compute_score(data_source, solution_str, ground_truth, extra_info, **kwargs)  # holds like it
    return 1.0 if extra_info["index"] % 2 == 0 else parity
