"""End to end: a short F-GRPO run of verl's real trainer on the CPU backend logs all three metric families.

The suite's shared maze run (conftest ``maze_fgrpo_run``, tests/verl_runs.py): maze data and tiny Qwen2
(``fgrpo_verl.tasks.maze``), the parity reward of the CPU backend tests (about half of a random policy's responses
score 1, so most groups are mixed; no group filtering, so uniform groups count too), γ = 0.5, N = 4, 2 steps, validation
before training and at step 2 with n = 4 samples per held-out maze. Loggers: console, verl's JSONL ``file``
logger, and W&B in offline mode, named and identified by ``fgrpo_verl.job.tracking`` and handed to verl's
TaskRunner through Ray's runtime_env overrides. Checked:

- console (``step:N - key:value`` lines, in the run's ``train --quiet`` log), JSONL and the offline W&B run
  (its ``.wandb`` transaction log) hold ``fgrpo/*``, ``actor/fgrpo/*`` and ``val-core/maze/pass@{1,2,4}``, and
  W&B holds the μ̂ histogram;
- the values agree with verl's own independent metrics where they overlap (mean μ̂ = mean score for 0/1
  rewards and equal groups; pass@1 = verl's mean@4) and are internally consistent (fractions sum to 1).
"""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import pytest
from verl_runs import SHARED_GAMMA, SHARED_GROUP_N, SHARED_STEPS, SHARED_VAL_N

from fgrpo_verl.theory import mean_shrink

pytestmark = pytest.mark.e2e

GAMMA, GROUP_N, VAL_N, STEPS = SHARED_GAMMA, SHARED_GROUP_N, SHARED_VAL_N, SHARED_STEPS


def read_wandb_history(path: Path) -> list[dict]:
    """History rows of a W&B transaction log (``run-<id>.wandb``): a 7-byte header (":W&B", magic 0xBEE1, version
    0), then LevelDB-log records (crc32 u32, length u16, type u8: 1 full, 2 first, 3 middle, 4 last) in 32 KiB
    blocks, each payload a ``wandb_internal_pb2.Record``. wandb 0.31 ships no Python reader for it."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert struct.unpack("<4sHB", data[:7]) == (b":W&B", 0xBEE1, 0), data[:7]
    block, pos, pending, rows = 32768, 7, b"", []
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # zero padding at the end of a block
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0:
            break
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(pending)
            if record.WhichOneof("record_type") == "history":
                rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item})
    return rows


@pytest.fixture(scope="module")
def run(maze_fgrpo_run):
    assert maze_fgrpo_run["rc"] == 0, "training run failed; end of its log:\n" + maze_fgrpo_run["log"][-6000:]
    return maze_fgrpo_run


def test_file_logger_has_all_three_families_with_consistent_values(run):
    steps = run["steps"]
    assert sorted(steps) == [0, 1, 2]  # step 0: validation before training
    for step in (1, 2):
        m = steps[step]
        assert m["fgrpo/num_groups"] == 4
        assert m["fgrpo/frac_all_correct"] + m["fgrpo/frac_all_wrong"] + m["fgrpo/frac_mixed"] == pytest.approx(1.0)
        # 0/1 rewards, equal group sizes: mean μ̂ over groups is verl's mean score over rollouts
        assert m["fgrpo/mu_hat_mean"] == pytest.approx(m["critic/score/mean"], abs=1e-6)
        assert m["fgrpo/m_gamma"] == pytest.approx(mean_shrink(GAMMA))
        assert 0.0 <= m["fgrpo/g_mean"] <= 1.0
        assert m["fgrpo/mu_hat_q10"] <= m["fgrpo/mu_hat_q50"] <= m["fgrpo/mu_hat_q90"]
        shares = [m[f"actor/fgrpo/adv_{s}_share"] for s in ("pos", "neg", "zero")]
        assert sum(shares) == pytest.approx(1.0, abs=1e-6)
        assert m["actor/fgrpo/adv_abs_mean"] >= 0
        if m["fgrpo/frac_mixed"] > 0:
            assert 0 < m["fgrpo/adv_scale"] <= 1.0
            assert m["actor/fgrpo/pos_logprob_mean"] < 0 and m["actor/fgrpo/pos_ratio_mean"] > 0
    assert any(steps[s]["fgrpo/frac_mixed"] > 0 for s in (1, 2)), "parity reward should give mixed groups"
    for step in (0, 2):
        m = steps[step]
        passk = [m[f"val-core/maze/pass@{k}"] for k in (1, 2, 4)]
        assert passk == sorted(passk) and 0.0 <= passk[0] and passk[-1] <= 1.0
        # verl's own mean@n of its core variable (acc when the reward reports it, else reward)
        (verl_mean,) = [v for k, v in m.items() if k in ("val-core/maze/acc/mean@4", "val-core/maze/reward/mean@4")]
        assert passk[0] == pytest.approx(verl_mean, abs=1e-9)


def test_console_shows_all_three_families(run):
    # verl's console logger prints "step:N - key:value - ..."; Ray prefixes the TaskRunner's lines with its name
    step_lines = {}
    for line in run["log"].splitlines():
        match = re.search(r"(?:^|\s)step:(\d+) - ", line)
        if match:
            step_lines[int(match.group(1))] = line
    assert "val-core/maze/pass@4:" in step_lines[0]
    for key in ("fgrpo/frac_mixed:", "fgrpo/g_mean:", "fgrpo/adv_abs_mean_focal:", "actor/fgrpo/adv_pos_share:",
                "actor/fgrpo/adv_abs_mean:", "val-core/maze/pass@1:", "val-core/maze/pass@2:"):
        assert key in step_lines[STEPS], key


def test_offline_wandb_run_holds_the_metrics_under_our_run_id(run):
    run_id = run["wandb"]["WANDB_RUN_ID"]
    offline = sorted((run["root"] / "wandb").glob(f"offline-run-*-{run_id}"))
    assert len(offline) == 1, sorted(p.name for p in (run["root"] / "wandb").iterdir())
    rows = read_wandb_history(offline[0] / f"run-{run_id}.wandb")
    by_step: dict[int, dict] = {}
    for row in rows:
        by_step.setdefault(int(row["_step"]), {}).update(row)
    for step in (1, 2):
        row = by_step[step]
        assert row["fgrpo/frac_mixed"] == pytest.approx(run["steps"][step]["fgrpo/frac_mixed"])
        assert row["actor/fgrpo/adv_pos_share"] == pytest.approx(run["steps"][step]["actor/fgrpo/adv_pos_share"])
        assert row["fgrpo/mu_hat_hist/_type"] == "histogram"
        assert sum(row["fgrpo/mu_hat_hist/values"]) == 4  # one entry per prompt group
        assert len(row["fgrpo/mu_hat_hist/bins"]) == GROUP_N + 2  # one bin per attainable μ̂ = j/N
    assert by_step[2]["val-core/maze/pass@4"] == pytest.approx(run["steps"][2]["val-core/maze/pass@4"])
