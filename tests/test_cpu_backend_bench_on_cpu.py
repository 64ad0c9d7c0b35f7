"""benchmarks/bench_cpu_step.py at a tiny shape (runs, not timed), and the pieces it uses: the shared Ray
session and the tuning overrides."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.e2e
def test_bench_cpu_step_runs_at_a_tiny_shape(tmp_path):
    """Bare-torch steps, then one verl run in a shared Ray session (the demo's way): every reported number is a
    real measurement (positive, and the steps the run logged are the steps asked for)."""
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "bench_cpu_step.py"), "--tiny", "--work-dir", str(tmp_path / "w"),
         "--json", str(out)],
        capture_output=True, text=True, timeout=900, cwd=REPO,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    result = json.loads(out.read_text())
    assert result["bare"]["step_s"] > 0 and len(result["bare"]["steps_s"]) == 1
    verl = result["verl"]
    assert len(verl["steps_s"]) == 2 and all(s > 0 for s in verl["steps_s"])
    assert verl["startup_s"] > 0 and verl["teardown_s"] >= 0 and verl["wall_s"] > verl["startup_s"]
    assert set(verl["phases_s"]) >= {"gen", "adv", "update_actor"} and verl["phases_s"]["gen"] > 0
    # bypass mode (fast_overrides): no second actor forward for the old log-probs
    assert verl["phases_s"]["old_log_prob"] < verl["phases_s"]["update_actor"]
    assert result["session_start_s"] > 0
    assert "verl step / bare step" in proc.stdout and "start-up s" in proc.stdout


def test_bench_rejects_a_missing_baseline_checkout(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "bench_cpu_step.py"), "--baseline-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )
    assert proc.returncode == 2 and "--baseline-dir" in proc.stderr and "make venv" in proc.stderr


def test_fast_overrides_cover_a_step_in_one_micro_batch():
    from fgrpo_verl.backends.cpu.tuning import fast_overrides

    overrides = fast_overrides(128)
    assert "algorithm.rollout_correction.bypass_mode=true" in overrides
    assert "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=128" in overrides
    for bad in (0, -1, 1.5, True, "128"):
        with pytest.raises(ValueError, match="rollouts_per_step must be an int >= 1"):
            fast_overrides(bad)


def test_fast_overrides_compose_and_pass_verl_validation():
    from fgrpo_verl.backends.cpu.tuning import fast_overrides
    from fgrpo_verl.compose import compose, validate

    cfg = compose(["backend=cpu", "data.train_batch_size=16", "actor_rollout_ref.actor.ppo_mini_batch_size=16",
                   "actor_rollout_ref.rollout.n=8", *fast_overrides(128)])
    validate(cfg)
    assert cfg.algorithm.rollout_correction.bypass_mode is True


def test_ray_session_rejects_bad_resources_and_use_before_start(monkeypatch):
    from fgrpo_verl.backends.cpu.session import RaySession

    for bad in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match="expected an int >= 1 or None"):
            RaySession(num_cpus=bad)
    with pytest.raises(RuntimeError, match="not started"):
        RaySession().env
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")
    with pytest.raises(RuntimeError, match="RAY_ADDRESS='127.0.0.1:1' is set"):
        RaySession().__enter__()
    assert RaySession().overrides == ["ray_kwargs.ray_init.num_cpus=null", "ray_kwargs.ray_init.num_gpus=null"]
