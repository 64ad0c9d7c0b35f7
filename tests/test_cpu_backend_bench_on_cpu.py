"""benchmarks/bench_cpu_step.py at a tiny shape (runs, not timed), and the pieces it uses: the shared Ray
session and its speed overrides."""

from __future__ import annotations

import json
import os
import signal
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
    # bypass mode (FAST_OVERRIDES): no second actor forward for the old log-probs. verl logs the entropy and the
    # rollout-vs-actor log-prob diff only from that forward (the shared maze run, without bypass, logs both)
    logged = [json.loads(line)["data"] for line in (tmp_path / "w" / "verl" / "metrics.jsonl").read_text().splitlines()]
    assert logged and not [k for m in logged for k in m if k == "actor/entropy" or k.startswith("training/rollout_probs_diff")]
    assert result["session_start_s"] > 0
    # CPU per step by process: the training worker and the rollout server did work in step 2
    cpu = verl["cpu_per_step_s"]
    assert cpu["ray::WorkerDict"] > 0 and cpu["ray::HFRolloutServer"] > 0, cpu
    assert "CPU seconds per step by process" in proc.stdout
    assert "verl step / bare step" in proc.stdout and "start-up s" in proc.stdout


def test_bench_rejects_a_missing_baseline_checkout(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "bench_cpu_step.py"), "--baseline-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )
    assert proc.returncode == 2 and "--baseline-dir" in proc.stderr and "make venv" in proc.stderr


def test_fast_overrides_compose_and_pass_verl_validation():
    from fgrpo_verl.backends.cpu.session import FAST_OVERRIDES
    from fgrpo_verl.config.compose import compose
    from fgrpo_verl.integration.validation import validate

    cfg = compose(["backend=cpu", "data.train_batch_size=16", "actor_rollout_ref.actor.ppo_mini_batch_size=16",
                   "actor_rollout_ref.rollout.n=8", *FAST_OVERRIDES])
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
    session = RaySession()
    assert session.run_overrides() == ["ray_kwargs.ray_init.num_cpus=null", "ray_kwargs.ray_init.num_gpus=null"]
    with pytest.raises(ValueError, match="env var name 'A B' is invalid"):
        session.run_overrides({"A B": "1"})


def test_ray_session_env_overrides_survive_hydra_parsing_with_awkward_values():
    """A child's env vars travel as Hydra overrides: quotes, spaces, commas, '=' and brackets must come back
    exactly (a path with a space is an ordinary thing to have)."""
    from fgrpo_verl.backends.cpu.session import RaySession
    from fgrpo_verl.config.compose import compose

    values = {"VERL_FILE_LOGGER_PATH": "/tmp/my runs/a,b=c [1]/metrics.jsonl", "WANDB_NOTES": "it's \\ fine", "X": "a\\'b\\"}
    cfg = compose(["backend=cpu", *RaySession().run_overrides(values)])
    env = cfg.ray_kwargs.ray_init.runtime_env.env_vars
    assert {k: env[k] for k in values} == values
    assert env.VERL_PLATFORM == "cpu"  # the backend's own variables stay
    assert cfg.ray_kwargs.ray_init.num_cpus is None and cfg.ray_kwargs.ray_init.num_gpus is None


def _bench_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_cpu_step", REPO / "benchmarks" / "bench_cpu_step.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cpu_accounting_sees_a_grandchild_and_only_the_runs_processes(tmp_path):
    """The per-process CPU table counts the run's whole process tree (Ray workers are grandchildren of the driver)
    and nothing outside it: a busy grandchild shows up under its title, a busy process outside the tree does not."""
    bench = _bench_module()
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.4: pass\ntime.sleep(30)\n"
    outsider = subprocess.Popen([sys.executable, "-c", burn])
    # parent -> bash -> busy grandchild under a ray-like title (as driver -> raylet -> worker)
    parent_code = (
        "import subprocess, sys, time\n"
        f"subprocess.Popen(['/bin/bash', '-c', '(exec -a ray::Burner.work {sys.executable} -c \"$0\") & wait', {burn!r}])\n"
        "time.sleep(30)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", parent_code], start_new_session=True)
    try:
        before = bench._descendants_cpu(parent.pid)
        import time

        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            after = bench._descendants_cpu(parent.pid)
            if any(title.startswith("ray::Burner") and cpu >= 0.35 for title, cpu, _ in after.values()):
                break
            time.sleep(0.1)
        per_step = bench.cpu_per_step(before, after, steps=2)
        assert per_step["ray::Burner"] >= 0.35 / 2 * 0.9, per_step
        assert outsider.pid not in after
        assert parent.pid in after  # the root itself is counted (the verl driver)
        assert list(per_step.values()) == sorted(per_step.values(), reverse=True)
    finally:
        outsider.kill()
        os.killpg(parent.pid, signal.SIGKILL)  # the parent's own session: its bash and grandchild, nobody else's
        outsider.wait()
        parent.wait()


def test_cpu_accounting_labels_group_a_worker_across_its_methods():
    bench = _bench_module()
    before = {1: ("ray::WorkerDict.actor_rollout_update_actor", 10.0, 100), 2: ("ray::IDLE", 1.0, 100),
              4: ("ray::HFRolloutServer.generate", 3.0, 100), 5: ("ray::IDLE", 2.0, 100),
              6: ("ray::RewardLoopWorker", 50.0, 100)}
    after = {1: ("ray::WorkerDict.actor_rollout_compute_log_prob", 14.0, 100), 2: ("ray::IDLE", 1.5, 100),
             3: ("/x/.venv/bin/python -m fgrpo_verl train", 0.5, 200),
             4: ("ray::IDLE", 4.0, 100),  # between two tasks: still the rollout server
             5: ("ray::AgentLoopWorkerTQ", 3.0, 100),  # an idle worker that became an actor
             6: ("ray::TransferQueueController", 0.2, 300)}  # pid 6 reused by a new process: counts from 0
    assert bench.cpu_per_step(before, after, steps=2) == pytest.approx(
        {"ray::WorkerDict": 2.0, "ray::HFRolloutServer": 0.5, "ray::AgentLoopWorkerTQ": 0.5, "ray::IDLE": 0.25,
         "bin/python": 0.25, "ray::TransferQueueController": 0.1})
