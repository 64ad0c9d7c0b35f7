"""`fgrpo-verl launch` on a real Slurm cluster running verl's trainer on the CPU backend (maze task, tiny model):

(a) a one-node launch of a tiny recipe completes (state COMPLETED) and its advantages are F-GRPO's;
(c) `scontrol requeue` at the worst moment, after step 2's checkpoint and before its log (during its
    validation): the job starts again, resumes from the last *logged* checkpoint (1), trains step 2 again, and
    the console and W&B (offline, same run id) hold steps 1..4 exactly once;
(h) a preemption notice or the time limit's USR1 (`scancel --signal=USR1 --batch`, what `#SBATCH --signal=B:USR1`
    sends) reaches verl's real trainer: it checkpoints at the next step boundary, the job requeues itself, and
    the console and W&B history hold steps 1..T exactly once.

Evidence comes from what a user sees: the job's Slurm log (appended across restarts; verl's console logger
prints one `step:N - key:value ...` line per step), the checkpoint directory, and W&B's offline run folders.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest
import yaml
from slurm_testing import REPO, cluster_or_skip, steps_per_start, wait_no_processes
# the CPU backend's e2e test recomputes F-GRPO advantages from verl's rollout dump: the same check here
from test_cpu_backend_e2e_on_cpu import _expected_advantage_range, _rollouts

from fgrpo_verl.job import tracking

pytestmark = [pytest.mark.slurm, pytest.mark.e2e, pytest.mark.ray]

REWARD_FILE = REPO / "tests" / "cpu_backend_parity_reward.py"
PROJECT = "slurm_e2e"
GAMMA = 1.0
GROUP_N = 4
JOB_TIMEOUT_S = 600


@pytest.fixture(scope="module")
def slurm():
    yield from cluster_or_skip()


@pytest.fixture(scope="module")
def workdir(slurm, tmp_path_factory):
    """A launch directory (under /tmp, readable by the job) with the maze data, the tiny model and a recipe."""
    from fgrpo_verl.tasks.maze import build

    root = Path(tmp_path_factory.mktemp("slurm_e2e"))
    maze = build(root / "maze", size=7, n_train=64, n_val=4, model_preset="tiny", seed=0)
    common = [
        "backend=cpu",
        "algo=grpo",
        "cluster=1x1",
        f"data.train_files={maze.train_file}",
        f"data.val_files={maze.val_file}",
        "data.train_batch_size=4",
        f"data.max_prompt_length={maze.prompt_length}",
        f"data.max_response_length={maze.max_response_length}",
        "data.seed=0",
        f"actor_rollout_ref.model.path={maze.model_dir}",
        f"actor_rollout_ref.rollout.n={GROUP_N}",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16",
        "actor_rollout_ref.actor.optim.lr=1e-3",
        "actor_rollout_ref.actor.optim.lr_warmup_steps=0",
        f"reward.custom_reward_function.path={REWARD_FILE}",
        "reward.custom_reward_function.name=compute_score",
        "trainer.logger=[console,wandb]",
        "trainer.save_freq=1",
        "trainer.test_freq=-1",
        "trainer.val_before_train=False",
        f"trainer.rollout_data_dir={root / 'rollouts'}",
    ]
    recipe = {
        "name": "cpu_tiny",
        "project": PROJECT,
        "reproduces": "nothing: a CPU smoke test of the Slurm path",
        # backend=cpu: no GPUs from Slurm, one logical GPU and 32 logical CPUs per Ray node
        "resources": {"request_gpus": False, "ray_num_cpus": 32, "cpus_per_task": 2, "ray_join_timeout": 180},
        "env": {"WANDB_MODE": "offline", "WANDB_DIR": str(root), "RAY_DEDUP_LOGS": "0",
                # test (c) holds its run in step 2 with it (tests/cpu_backend_parity_reward.py)
                "FGRPO_TEST_HOLD_FILE": str(root / "hold")},
        "common": common,
        "runs": [
            {"name": "fgrpo-g1", "group": "smoke", "overrides": [f"algorithm.fgrpo.gamma={GAMMA}", "trainer.total_training_steps=1"]},
            # validation at steps 2 and 4: test (c) is killed inside step 2's, after its checkpoint
            {"name": "requeue", "group": "smoke",
             "overrides": ["algorithm.fgrpo.gamma=0.5", "trainer.total_training_steps=4", "trainer.test_freq=2"]},
            # save_freq 3: the step the stop lands on is not one verl saves itself (the stop path saves it)
            {"name": "usr1", "group": "smoke",
             "overrides": ["algorithm.fgrpo.gamma=0.25", "trainer.total_training_steps=4", "trainer.save_freq=3"]},
        ],
    }
    (root / "cpu_tiny.yaml").write_text(yaml.safe_dump(recipe, sort_keys=False))
    return root


def _experiment(workdir: Path, gamma: float) -> str:
    """The readable part of the run name fgrpo_verl.job.tracking gives a run of the recipe (F-GRPO, group size
    GROUP_N, data.seed=0); the launcher appends -<config hash> (fgrpo_verl/launch/identity.py)."""
    common = yaml.safe_load((workdir / "cpu_tiny.yaml").read_text())["common"]
    model = next(o.split("=", 1)[1] for o in common if o.startswith("actor_rollout_ref.model.path="))
    return tracking.run_name("fgrpo", gamma, GROUP_N, model, 0)


_JOB_NAMES: dict[str, str] = {}


def _launch(slurm, workdir: Path, run: str, recipe: str = "cpu_tiny.yaml", *extra: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "fgrpo_verl", "launch", str(workdir / recipe), "--only", run, *extra],
        env=slurm.env,
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    job, name = re.search(rf"submitted {run}: job (\d+) (\S+)", out.stdout).groups()
    _JOB_NAMES[job] = name
    return job


def _plan_names(workdir: Path, run: str) -> list[str]:
    """The run names (= job names) `fgrpo-verl launch --only run` will give, from the same planner."""
    from fgrpo_verl.launch import plan_jobs

    _, jobs = plan_jobs(str(workdir / "cpu_tiny.yaml"), [run], [], workdir / "slurm_logs", workdir)
    return [job.job_name for job in jobs]


def _log(workdir: Path, run: str, job: str) -> str:
    path = workdir / "slurm_logs" / f"{_JOB_NAMES[job]}-{job}.out"
    return path.read_text(errors="replace") if path.exists() else ""


def _wait_for_step(slurm, workdir: Path, job: str, run: str, step: int) -> None:
    """Until the job's first start has logged ``step`` on the console (and so checkpointed it, when it saves)."""
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while not any(step in steps for steps in steps_per_start(_log(workdir, run, job))[:1]):
        assert slurm.job_field(job, "JobState") in {"PENDING", "RUNNING"}, _log(workdir, run, job)[-6000:]
        assert time.monotonic() < deadline, f"step {step} not logged before the deadline"
        time.sleep(0.2)


_ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}


def _release_requeued(slurm, job: str) -> None:
    """Let a requeued job start now instead of after Slurm's begin-time delay, but only once no node is still
    completing its previous start: started earlier, slurmctld kills it ("Killing non-startable batch JobId=N:
    Job credential revoked", seen here), which is what the delay is for."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        nodes = subprocess.run(["sinfo", "-h", "-N", "-o", "%t"], env=slurm.env, capture_output=True, text=True).stdout
        if "comp" not in nodes.split():
            break
        time.sleep(0.5)
    time.sleep(2)
    subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], env=slurm.env, check=False,
                   capture_output=True)


def _wait_done_starting_requeued(slurm, job: str, timeout: float) -> tuple[str, str]:
    """Wait for the job to end; returns (final state, what the wait saw). A requeued job is held before it may
    start again (Slurm's begin-time delay), so each time it is pending after a start it is released at once.
    An ended state must hold for 20 s: right after a job requeues itself, scontrol may still show how its
    cancelled start ended before the job is pending again (seen once in CI as FAILED). The states seen and
    slurmctld's lines about the job come back for the assertion message."""
    deadline, seen = time.monotonic() + timeout, []
    while True:
        state = slurm.job_field(job, "JobState")
        if not seen or seen[-1] != state:
            seen.append(state)
        assert time.monotonic() < deadline, f"job {job} still {state} (seen {seen})"
        if state in _ENDED:
            settled = time.monotonic() + 20
            while time.monotonic() < settled and slurm.job_field(job, "JobState") == state:
                time.sleep(0.5)
            if slurm.job_field(job, "JobState") == state:
                break
            continue
        if state == "PENDING" and slurm.job_field(job, "Restarts") not in (None, "0"):
            _release_requeued(slurm, job)
        time.sleep(0.5)
    ctld = slurm.state_dir / "slurmctld.log"
    lines = [line for line in ctld.read_text(errors="replace").splitlines() if f"JobId={job}" in line or
             f"job {job}" in line.lower()] if ctld.exists() else []
    return state, f"states seen: {seen}\nslurmctld:\n" + "\n".join(lines[-40:])


def _logged_metric(log: str, step: int, key: str) -> float:
    line = next(line for line in log.splitlines() if re.search(rf"\bstep:{step} - ", line))
    return float(re.search(rf"{re.escape(key)}:(\S+)", line).group(1))


@pytest.mark.timeout(900)
def test_one_node_launch_of_a_tiny_recipe_completes_with_the_focal_estimator(slurm, workdir):
    """(a)"""
    start = time.monotonic()
    job = _launch(slurm, workdir, "fgrpo-g1")
    state = slurm.wait_done(job, JOB_TIMEOUT_S)
    wall = time.monotonic() - start
    log = _log(workdir, "fgrpo-g1", job)
    assert state == "COMPLETED", f"job {job} ended {state}:\n{log[-6000:]}"
    assert steps_per_start(log) == [[1]]
    # the focal estimator produced the advantages: recomputed from the dumped rewards with gamma = 1,
    # and different from what plain GRPO (gamma = 0) would give for the same batch
    rollouts = _rollouts(workdir / "rollouts", 1)
    assert len(rollouts) == 4 * GROUP_N
    hi, lo = _expected_advantage_range(rollouts, GAMMA)
    hi0, lo0 = _expected_advantage_range(rollouts, 0.0)
    assert hi > 0, "no group with mixed outcomes in this batch: the check would be vacuous"
    assert _logged_metric(log, 1, "critic/advantages/max") == pytest.approx(hi, abs=1e-4)
    assert _logged_metric(log, 1, "critic/advantages/min") == pytest.approx(lo, abs=1e-4)
    assert abs(hi - hi0) > 1e-2 or abs(lo - lo0) > 1e-2
    ckpt = workdir / "checkpoints" / PROJECT / _JOB_NAMES[job]
    assert _JOB_NAMES[job].startswith(_experiment(workdir, GAMMA) + "-")
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "1"
    assert wait_no_processes(f"fgrpo-ray-{job}") == []
    print(f"(a) 1-node CPU launch, job {job}: {wall:.1f} s wall")


@pytest.mark.timeout(1200)
def test_requeue_mid_run_resumes_from_checkpoint_and_continues_the_wandb_run(slurm, workdir):
    """(c)"""
    start = time.monotonic()
    experiment = next(iter(_plan_names(workdir, "requeue")))
    ckpt = workdir / "checkpoints" / PROJECT / experiment
    marker = ckpt / "latest_checkpointed_iteration.txt"
    # The worst moment for a kill: verl saves step 2, then validates and logs it. The reward holds scoring once
    # global_step_2 exists (that is, in step 2's validation) until the hold file is gone; steps take about a
    # second here, too short to aim a kill at by timing. verl alone would resume after 2 and never log step 2.
    hold = workdir / "hold"
    hold.write_text(str(ckpt / "global_step_2"))
    try:
        job = _launch(slurm, workdir, "requeue")
        assert _JOB_NAMES[job] == experiment and experiment.startswith(_experiment(workdir, 0.5) + "-")
        _wait_for_step(slurm, workdir, job, "requeue", 1)
        deadline = time.monotonic() + JOB_TIMEOUT_S
        while not (ckpt / "global_step_2").is_dir():
            assert time.monotonic() < deadline, "no checkpoint of step 2 before the deadline"
            time.sleep(0.2)
        # step 1's W&B row was closed when step 2 began, and W&B writes every second in our jobs: 3 s is ample
        time.sleep(3)
        assert not any(2 in steps for steps in steps_per_start(_log(workdir, "requeue", job))), "step 2 was logged"
        # saved but not logged: the resume point is still step 1 (fgrpo_verl/job/resume_point.py)
        assert marker.read_text().strip() == "1"
        checkpoint_at_requeue = 1
        subprocess.run(["scontrol", "requeue", job], env=slurm.env, check=True)
        # a requeued job waits before it may start again; let it start now
        slurm.wait_state(job, {"PENDING"}, 120)
    finally:
        hold.unlink(missing_ok=True)
    _release_requeued(slurm, job)
    state = slurm.wait_done(job, JOB_TIMEOUT_S)
    wall = time.monotonic() - start
    log = _log(workdir, "requeue", job)
    assert state == "COMPLETED", f"job {job} ended {state}:\n{log[-6000:]}"
    assert slurm.job_field(job, "Restarts") == "1"

    starts = steps_per_start(log)
    assert len(starts) == 2, log[-6000:]
    first, second = starts
    resumed = int(re.search(rf"Resuming from \S*{experiment}/global_step_(\d+)", log).group(1))
    assert resumed == checkpoint_at_requeue
    # nothing repeated: the first start logged only steps the second did not redo; nothing lost: together
    # they cover every step, and the second start continues right after the checkpoint it resumed from
    assert first == list(range(1, resumed + 1)), (first, resumed)
    assert second == list(range(resumed + 1, 5)), (second, resumed)
    assert marker.read_text().strip() == "4"

    # W&B (offline): both starts wrote to the same, deterministic run id
    run_id = tracking.run_id(PROJECT, experiment, str(ckpt))
    runs = sorted(p.name for p in (workdir / "wandb").glob("offline-run-*"))
    ids = defaultdict(int)
    for name in runs:
        ids[name.rsplit("-", 1)[1]] += 1
    assert ids[run_id] == 2, runs
    # the only other run in this W&B directory is test (a)'s
    assert set(ids) <= {tracking.run_id(PROJECT, name, str(workdir / "checkpoints" / PROJECT / name))
                        for name in _JOB_NAMES.values()}, runs
    # W&B's history is steps 1..4 once each, with the console's values: step 1's row reached the killed start's
    # offline file (the trainer closes each step's row when the next begins, and the job flushes every second;
    # verl alone kept it open and W&B's 15-s buffer lost it), and nothing it logged past checkpoint 1 survives
    # the second start's trim (fgrpo_verl/launch/wandb_offline.py)
    from test_wandb_offline_on_cpu import read_history

    history = [row for path in sorted((workdir / "wandb").glob(f"offline-run-*-{run_id}")) for row in
               read_history(path / f"run-{run_id}.wandb") if "critic/score/mean" in row]
    assert [row["_step"] for row in history] == [1, 2, 3, 4], history
    for row in history:
        assert _logged_metric(log, row["_step"], "critic/score/mean") == pytest.approx(row["critic/score/mean"])
    assert wait_no_processes(f"fgrpo-ray-{job}") == []
    print(f"(c) requeue at checkpoint {checkpoint_at_requeue}, resumed from {resumed}, job {job}: {wall:.1f} s wall")


@pytest.mark.timeout(1200)
def test_usr1_stops_verls_trainer_at_a_step_boundary_and_the_job_requeues_itself(slurm, workdir):
    """(h)"""
    from test_wandb_offline_on_cpu import read_history

    start = time.monotonic()
    job = _launch(slurm, workdir, "usr1")
    experiment = _JOB_NAMES[job]
    ckpt = workdir / "checkpoints" / PROJECT / experiment
    _wait_for_step(slurm, workdir, job, "usr1", 1)
    # what `#SBATCH --signal=B:USR1@<lead>` sends before the time limit: USR1 to the batch shell only
    subprocess.run(["scancel", "--signal=USR1", "--batch", job], env=slurm.env, check=True)
    state, seen = _wait_done_starting_requeued(slurm, job, JOB_TIMEOUT_S)
    wall = time.monotonic() - start
    log = _log(workdir, "usr1", job)
    assert state == "COMPLETED", f"job {job} ended {state}:\n{log[-6000:]}\n{seen}"
    assert slurm.job_field(job, "Restarts") == "1", log[-6000:]
    stopped = int(re.search(r"stopped on request after step (\d+) \(checkpoint (\d+)\): requeueing job", log).group(1))
    # the trainer (a Ray actor) saw the stop file, saved the step it stopped at although save_freq=3 skips it
    assert 1 <= stopped < 4 and stopped != 3, log[-6000:]
    assert "[fgrpo] stop requested" in log and "did not stop within" not in log
    assert steps_per_start(log) == [list(range(1, stopped + 1)), list(range(stopped + 1, 5))], log[-6000:]
    assert f"Resuming from {ckpt}/global_step_{stopped}" in log
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "4"
    # W&B (offline) closed cleanly at the stop: the history of the run's two folders is steps 1..4 once each,
    # with the console's values
    run_id = tracking.run_id(PROJECT, experiment, str(ckpt))
    folders = sorted((workdir / "wandb").glob(f"offline-run-*-{run_id}"))
    assert len(folders) == 2, folders
    history = [row for folder in folders for row in read_history(folder / f"run-{run_id}.wandb")
               if "critic/score/mean" in row]
    assert [row["_step"] for row in history] == [1, 2, 3, 4], history
    for row in history:
        assert _logged_metric(log, row["_step"], "critic/score/mean") == pytest.approx(row["critic/score/mean"])
    assert wait_no_processes(f"fgrpo-ray-{job}") == []
    print(f"(h) USR1 after step 1, stopped at {stopped}, job {job}: {wall:.1f} s wall")
