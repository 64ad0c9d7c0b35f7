"""The first hour of a new user, end to end (issue 18): a 2-step CPU run through `fgrpo-verl train` on a terminal
is a handful of lines (verl's and Ray's output in the log file), ends without W&B's atexit traceback, and survives a
local Ray that starts too slowly (Ray's own 30-s timeout, as on a machine at load ~7: tests/slow_ray_start.py).

Numbers (docs/cpu_backend.md, "Output"): the same 2-step run printed 1,156 lines on 2f836bb.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from user_env import user_environment

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent

TRAIN = r"""
import sys
sys.path.insert(0, {tests!r})
import slow_ray_start
slow_ray_start.arm()
from fgrpo_verl.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.e2e
@pytest.mark.ray
def test_two_step_run_is_quiet_survives_a_slow_ray_start_and_ends_without_a_wandb_traceback(tmp_path):
    from fgrpo_verl.tasks.maze import build

    maze = build(tmp_path / "maze", size=7, n_train=64, n_val=4, model_preset="tiny", seed=0)
    ckpt = tmp_path / "ckpt"
    overrides = [
        "algo=grpo", "backend=cpu", f"data.train_files={maze.train_file}", f"data.val_files={maze.val_file}",
        "data.train_batch_size=4", f"data.max_prompt_length={maze.prompt_length}",
        f"data.max_response_length={maze.max_response_length}", f"actor_rollout_ref.model.path={maze.model_dir}",
        "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16",
        "reward.custom_reward_function.path=pkg://fgrpo_verl.tasks.maze.reward",
        "trainer.total_training_steps=2", "trainer.val_before_train=False", "trainer.test_freq=-1",
        "trainer.save_freq=-1", "trainer.logger=[console,wandb]", f"trainer.default_local_dir={ckpt}",
    ]
    env = user_environment("RAY_ADDRESS")
    env.update(WANDB_MODE="offline", WANDB_DIR=str(tmp_path), PYTHONPATH=str(REPO))
    code = TRAIN.format(tests=str(TESTS))
    proc = subprocess.Popen([sys.executable, "-c", code, "train", "--quiet", *overrides], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    workers = _watch_ray_workers(proc.pid)
    try:
        stdout, stderr = proc.communicate(timeout=900)
    finally:
        workers.stop.set()
        workers.join()
    done = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    log = ckpt / "train.log"
    full = log.read_text(errors="replace") if log.exists() else ""
    assert done.returncode == 0, done.stdout + done.stderr + full[-5000:]
    terminal = (done.stdout + done.stderr).splitlines()
    # the terminal: where the log is, one line per step, the slow start retried, the end (was 1,156 lines)
    assert len(terminal) <= 8, "\n".join(terminal)
    assert terminal[0] == f"fgrpo-verl train: verl's and Ray's output -> {log} (--verbose shows it here)"
    steps = [line for line in terminal if line.startswith("step ")]
    assert [s.split()[1] for s in steps] == ["1/2", "2/2"] and all(" score " in s for s in steps), terminal
    retried = [line for line in terminal if "Ray's local node did not start within Ray's 30 s" in line]
    assert len(retried) == 1 and "retrying (2/3)" in retried[0], terminal
    ended = int(retried[0].split("ended the ")[1].split()[0])
    assert ended >= 2, f"the failed attempt's GCS and raylet were not ended: {retried[0]}"
    last = done.stdout.splitlines()[-1]  # (stdout: ours and the steps; stderr: warnings, W&B's sync hint)
    assert last.startswith("fgrpo-verl train: done in ") and last.endswith(f"full log: {log}"), terminal
    assert "Traceback" not in done.stdout + done.stderr
    # the log has verl's output, and no W&B atexit traceback (tracking.close_wandb), no TransferQueue thread
    # warning (backend=cpu's TQ_NUM_THREADS=1), no step missing
    assert "'adv_estimator': 'fgrpo'" in full and "step:2 - " in full
    assert "Exception ignored in atexit callback" not in full and "Connection lost" not in full, full[-5000:]
    assert "target_num_threads" not in full
    assert list(tmp_path.glob("wandb/offline-run-*/run-*.wandb")), "no offline W&B run written"
    # verl's actors ran at this test's priority, not Ray's nice 15 (backend=cpu's RAY_worker_niceness)
    assert "ray::WorkerDict" in workers.niceness and "ray::TaskRunnerV1" in workers.niceness, workers.niceness
    assert set(workers.niceness.values()) == {os.getpriority(os.PRIO_PROCESS, 0)}, workers.niceness


def _watch_ray_workers(pid: int):
    """A thread that records the niceness of every ``ray::<actor>`` process below ``pid`` until ``.stop`` is set
    (``.niceness``: actor name -> niceness)."""
    import threading

    import psutil

    class Watcher(threading.Thread):
        def __init__(self):
            super().__init__(daemon=True)
            self.stop, self.niceness = threading.Event(), {}

        def run(self):
            while not self.stop.wait(0.5):
                try:
                    children = psutil.Process(pid).children(recursive=True)
                except psutil.Error:
                    continue
                for child in children:
                    try:
                        name = (child.cmdline() or [""])[0].split()[0] if child.cmdline() else ""
                        if name.startswith("ray::") and name != "ray::IDLE":
                            self.niceness[name.split(".")[0]] = child.nice()
                    except (psutil.Error, IndexError):
                        pass

    watcher = Watcher()
    watcher.start()
    return watcher


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
