"""The first hour of a new user, end to end: a 2-step CPU run through `fgrpo-verl train` on a terminal is a
handful of lines (verl's and Ray's output in the log file), ends without W&B's atexit traceback, and survives a
local Ray that starts too slowly (Ray's own 30-s timeout, as on a machine at load ~7: tests/slow_ray_start.py).

That run is the suite's shared maze run (conftest ``maze_fgrpo_run``, tests/verl_runs.py ``shared_maze_run``):
started once for every module that reads it, as ``python -c`` with tests/slow_ray_start.py armed, then
``train --quiet`` from a new user's shell (tests/user_env.py's variables left out), W&B offline, its terminal's
stdout and stderr kept apart, the niceness of its ``ray::`` workers recorded while it ran. This module reads the
terminal, the quiet log, the offline W&B run and the niceness; the other tests here start Ray in process.

Numbers (docs/cpu_backend.md, "Output"): the same 2-step run printed 1,156 lines on 2f836bb.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


@pytest.mark.e2e
@pytest.mark.ray
def test_two_step_run_is_quiet_survives_a_slow_ray_start_and_ends_without_a_wandb_traceback(maze_fgrpo_run):
    run = maze_fgrpo_run
    log, full = run["quiet_log"], run["log"]
    assert run["rc"] == 0, run["stdout"] + run["stderr"] + full[-5000:]
    out, err = run["stdout"].splitlines(), run["stderr"].splitlines()
    terminal = out + err
    # the terminal, 7 lines (verl's own output is over a thousand): on stdout where the log is, one line per step (step 0: the
    # validation before training, which has no training metrics to show), the end; on stderr the slow start
    # retried and W&B's sync hint. Validation and checkpoints add nothing else.
    assert len(terminal) == 7, "\n".join(terminal)
    assert terminal[0] == f"fgrpo-verl train: verl's and Ray's output -> {log} (--verbose shows it here)"
    steps = [line for line in terminal if line.startswith("step ")]
    assert [s.split()[1] for s in steps] == ["0/2", "1/2", "2/2"] and steps[0] == "step 0/2", terminal
    assert all(" score " in s for s in steps[1:]), terminal
    retried = [line for line in terminal if "Ray's local node did not start within Ray's 30 s" in line]
    assert len(retried) == 1 and "retrying (2/3)" in retried[0], terminal
    ended = int(retried[0].split("ended the ")[1].split()[0])
    assert ended >= 2, f"the failed attempt's GCS and raylet were not ended: {retried[0]}"
    last = out[-1]
    assert last.startswith("fgrpo-verl train: done in ") and last.endswith(f"full log: {log}"), terminal
    assert out[1:-1] == steps and err[0] == retried[0], terminal
    assert err[1].startswith(f"wandb: wandb sync {run['root'] / 'wandb' / 'offline-run-'}"), terminal
    assert "Traceback" not in run["stdout"] + run["stderr"]
    # the log has verl's output, and no W&B atexit traceback (tracking.close_wandb), no TransferQueue thread
    # warning (backend=cpu's TQ_NUM_THREADS=1), no step missing
    assert "'adv_estimator': 'fgrpo'" in full and "step:2 - " in full
    assert "Exception ignored in atexit callback" not in full and "Connection lost" not in full, full[-5000:]
    assert "target_num_threads" not in full
    # train asked the TaskRunner to register strictly (a trainer mode another plugin took fails the start there):
    # the variable is in the runtime_env verl handed to ray.init, as the string Ray's env_vars need
    init = next(line for line in full.splitlines() if line.startswith("ray init kwargs: "))
    assert "'FGRPO_VERL_STRICT_REGISTRATION': '1'" in init, init
    assert list(run["root"].glob("wandb/offline-run-*/run-*.wandb")), "no offline W&B run written"
    # verl's actors ran at this test's priority, not Ray's nice 15 (backend=cpu's RAY_worker_niceness)
    niceness = run["niceness"]
    assert "ray::WorkerDict" in niceness and "ray::TaskRunnerV1" in niceness, niceness
    assert set(niceness.values()) == {os.getpriority(os.PRIO_PROCESS, 0)}, niceness


@pytest.mark.ray
def test_ray_session_starts_again_after_ray_timed_out_and_ends_that_attempts_processes(monkeypatch, capfd):
    """The demo's shared Ray cluster (fgrpo_verl.backends.cpu.session) on a machine too busy for Ray's 30 s."""
    import psutil
    import ray

    sys.path.insert(0, str(TESTS))
    import slow_ray_start

    from fgrpo_verl.job import ray_start
    from fgrpo_verl.backends.cpu.session import RaySession

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    ended = []
    real_end = ray_start._end_new_children
    monkeypatch.setattr(ray_start, "_end_new_children", lambda before: ended.extend(real_end(before)) or ended)
    monkeypatch.setattr(slow_ray_start, "STATE", {"timeouts": 0})
    slow_ray_start.arm()
    monkeypatch.delenv("RAY_worker_niceness", raising=False)
    niceness = ray.remote(lambda: os.getpriority(os.PRIO_PROCESS, 0))
    with RaySession(num_cpus=2, num_gpus=1) as session:
        assert ray.is_initialized() and session.address
        assert ray.get(ray.remote(lambda: 41 + 1).remote(), timeout=120) == 42
        # the CPU backend's workers run at the priority of the program that started them (backend/cpu.yaml)
        assert ray.get(niceness.remote(), timeout=120) == os.getpriority(os.PRIO_PROCESS, 0)
    assert "RAY_worker_niceness" not in os.environ  # set for Ray's start only
    assert slow_ray_start.STATE["timeouts"] == 1
    assert len(ended) >= 2 and not [pid for pid in ended if psutil.pid_exists(pid)
                                    and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    err = capfd.readouterr().err
    assert err.count("Ray's local node did not start within Ray's 30 s") == 1
    # the demo's terminal: Ray's start-up lines (its token-auth default, "Started a local Ray instance") stay out
    assert "Token authentication" not in err and "Started a local Ray instance" not in err, err[-2000:]


@pytest.mark.ray
def test_rays_own_default_niceness_is_what_the_cpu_backend_changes(monkeypatch):
    """The A/B of the check above: a plain local Ray (no backend=cpu settings) starts its workers at nice 15, below
    every normal program (a busy loop beside a run then takes the CPU from verl's actors); train exports the
    backend's setting before verl starts Ray."""
    import ray

    from fgrpo_verl.config.compose import compose
    from fgrpo_verl.job import ray_start

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("RAY_worker_niceness", raising=False)
    ray_start.init(num_cpus=1, num_gpus=0, include_dashboard=False, log_to_driver=False)
    try:
        worker = ray.get(ray.remote(lambda: os.getpriority(os.PRIO_PROCESS, 0)).remote(), timeout=120)
    finally:
        ray.shutdown()
    assert worker == min(19, os.getpriority(os.PRIO_PROCESS, 0) + 15)
    # what train exports into its own environment before verl's ray.init (export_ray_env_vars: every env_var)
    env_vars = compose(["backend=cpu"]).ray_kwargs.ray_init.runtime_env.env_vars
    assert env_vars.RAY_worker_niceness == "0"


def test_a_start_that_fails_otherwise_is_not_retried():
    from fgrpo_verl.job import ray_start

    calls = []

    def broken(**kwargs):
        calls.append(kwargs)
        raise ValueError("When connecting to an existing cluster, num_cpus and num_gpus must not be provided.")

    with pytest.raises(ValueError, match="num_cpus and num_gpus"):
        ray_start.init(num_cpus=1, _ray_init=broken)
    assert len(calls) == 1

    def always_slow(**kwargs):
        calls.append(kwargs)
        raise Exception("The current node timed out during startup. This could happen because ...")

    calls.clear()
    with pytest.raises(RuntimeError, match="did not start in 3 attempts of 30 s each"):
        ray_start.init(num_cpus=1, _ray_init=always_slow)
    assert len(calls) == 3


def test_a_failed_attempt_ends_only_the_new_processes_of_its_own_session():
    """What a retry ends: new descendants in this process's session (where Ray starts its node), not a child that
    runs in a session of its own (a test's verl run started with start_new_session, a user's detached job) nor an older one."""
    import psutil

    from fgrpo_verl.job import ray_start

    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    older = subprocess.Popen(sleep)
    try:
        before = ray_start._children()
        detached = subprocess.Popen(sleep, start_new_session=True)
        attempts = subprocess.Popen(sleep)
        try:
            assert ray_start._end_new_children(before) == [attempts.pid]
            assert attempts.wait(timeout=30) is not None
            assert detached.poll() is None and older.poll() is None
            assert psutil.Process(detached.pid).is_running()
        finally:
            detached.kill()
            detached.wait()
    finally:
        older.kill()
        older.wait()
