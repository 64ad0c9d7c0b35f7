"""Shared test helpers: synthetic rollout batches with uneven and singleton groups."""

from __future__ import annotations

import os
import sys
import uuid

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf


def make_batch(group_sizes, *, response_length=7, reward_kind="binary", seed=0, shuffle=True):
    """Rollout batch: (token_level_rewards, response_mask, uid index) for the given group sizes.

    The outcome reward sits on the last valid response token, as verl's reward managers put it.
    """
    rng = np.random.default_rng(seed)
    uids = [str(uuid.UUID(int=int(rng.integers(0, 2**63)))) for _ in group_sizes]
    index = np.array([u for u, n in zip(uids, group_sizes) for _ in range(n)], dtype=object)
    b = len(index)
    if reward_kind == "binary":
        outcome = rng.integers(0, 2, size=b).astype(np.float32)
    elif reward_kind == "pm1":
        outcome = rng.choice([-1.0, 1.0], size=b).astype(np.float32)
    else:
        outcome = rng.normal(size=b).astype(np.float32)
    lengths = rng.integers(1, response_length + 1, size=b)
    mask = (np.arange(response_length)[None, :] < lengths[:, None]).astype(np.float32)
    rewards = np.zeros((b, response_length), dtype=np.float32)
    rewards[np.arange(b), lengths - 1] = outcome
    if shuffle:
        perm = rng.permutation(b)
        rewards, mask, index = rewards[perm], mask[perm], index[perm]
    return torch.from_numpy(rewards), torch.from_numpy(mask), index


def algo_config(gamma=0.5, threshold=0.0, alpha=0.0, base="grpo", norm=True):
    return OmegaConf.create(
        {
            "norm_adv_by_std_in_grpo": norm,
            "fgrpo": {"gamma": gamma, "success_threshold": threshold, "smoothing_alpha": alpha, "base": base},
        }
    )


@pytest.fixture
def batch():
    return make_batch([4, 1, 3, 8, 2, 1, 5])


@pytest.fixture(autouse=True)
def _no_wandb_service_left_behind():
    """A test that runs W&B in pytest's own process starts a W&B service and exports its address (WANDB_SERVICE);
    every later subprocess would then join that service, run ids and all ("run ID ... is in use"), instead of
    starting its own as a job does. Each test leaves the service and the variable as it found them."""
    before = os.environ.get("WANDB_SERVICE")
    yield
    if os.environ.get("WANDB_SERVICE") != before:
        if "wandb" in sys.modules:
            sys.modules["wandb"].teardown()
        if before is None:
            os.environ.pop("WANDB_SERVICE", None)
        else:
            os.environ["WANDB_SERVICE"] = before


@pytest.fixture(scope="session")
def maze_fgrpo_run(tmp_path_factory):
    """The F-GRPO maze run of verl's real trainer that several e2e modules assert on (tests/verl_runs.py,
    ``shared_maze_run``: a new user's ``train --quiet`` with a slow first Ray start): started once, when the first
    test that needs it runs. Read by test_first_hour_e2e (terminal, quiet log, W&B, worker niceness),
    test_metrics_e2e (metric families) and test_cpu_backend_e2e (advantages, checkpoints)."""
    from verl_runs import shared_maze_run

    return shared_maze_run(tmp_path_factory.mktemp("maze_fgrpo_run"))


@pytest.fixture(scope="session")
def slurm_cluster():
    """One real two-node Slurm cluster (tests/slurm_testing.py) for every Slurm test module of the session; each
    module's ``slurm`` fixture takes it through ``slurm_testing.module_cluster``, which cancels what it left."""
    from slurm_testing import cluster_or_skip

    yield from cluster_or_skip()
