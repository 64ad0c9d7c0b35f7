"""`fgrpo-verl launch` on a real Slurm cluster running verl's trainer on the CPU backend (maze task, tiny model).

One job of a 4-step recipe (save_freq 3, validation at step 4) carries every check, each fault at the point
where it is hardest to survive; a verl start costs 50-100 s here, so three starts of one job instead of five
starts of three jobs:

(a) the one-node launch completes (state COMPLETED) and its advantages are F-GRPO's (recomputed from verl's rollout
    dump of step 1);
(h) start 1: a preemption notice or the time limit's USR1 (`scancel --signal=USR1 --batch`, what
    `#SBATCH --signal=B:USR1` sends) arrives during step 2, a step verl does not save itself (save_freq 3): verl's
    real trainer checkpoints at the step boundary, the job requeues itself;
(c) start 2 resumes from 2, logs step 3 (a checkpoint verl saves), saves step 4 and is killed by `scontrol requeue`
    at the worst moment, in step 4's validation after its checkpoint and before its log: start 3 resumes from the
    last *logged* checkpoint (3), trains step 4 again and finishes;
and the console and W&B (offline, one run id, one folder a start) hold steps 1..4 exactly once.

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
from slurm_testing import REPO, module_cluster, steps_per_start, wait_no_processes
# the CPU backend's e2e test recomputes F-GRPO advantages from verl's rollout dump: the same check here
from test_cpu_backend_e2e_on_cpu import _expected_advantage_range, _rollouts

from fgrpo_verl.job import tracking

pytestmark = [pytest.mark.slurm, pytest.mark.e2e, pytest.mark.ray]

REWARD_FILE = REPO / "tests" / "cpu_backend_parity_reward.py"
PROJECT = "slurm_e2e"
GAMMA = 1.0
GROUP_N = 4
RUN = "faults"
STEPS, SAVE_FREQ = 4, 3
JOB_TIMEOUT_S = 600


@pytest.fixture(scope="module")
def slurm(slurm_cluster):
    yield from module_cluster(slurm_cluster)


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
        # verl saves step 3 (and the last, 4) itself: the USR1 stop lands on step 2, which only the stop path saves,
        # and the requeue hits step 4 with checkpoint 3 logged by the start it kills
        f"trainer.save_freq={SAVE_FREQ}",
        f"trainer.total_training_steps={STEPS}",
        # validation only at the last step: the requeue is aimed inside it
        f"trainer.test_freq={STEPS}",
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
                # the test holds the run at each fault's point with it (tests/cpu_backend_parity_reward.py)
                "FGRPO_TEST_HOLD_FILE": str(root / "hold")},
        "common": common,
        "runs": [{"name": RUN, "group": "smoke", "overrides": [f"algorithm.fgrpo.gamma={GAMMA}"]}],
    }
    (root / "cpu_tiny.yaml").write_text(yaml.safe_dump(recipe, sort_keys=False))
    return root


def _experiment(workdir: Path, gamma: float) -> str:
    """The readable part of the run name fgrpo_verl.job.tracking gives a run of the recipe (F-GRPO, group size
    GROUP_N, data.seed=0); the launcher appends -<config hash> (fgrpo_verl/job/identity.py)."""
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


def _logged_metric(log: str, step: int, key: str) -> float:
    line = next(line for line in log.splitlines() if re.search(rf"\bstep:{step} - ", line))
    return float(re.search(rf"{re.escape(key)}:(\S+)", line).group(1))


def _set_hold(hold: Path, gates: list[Path]) -> None:
    """Make ``gates`` the hold file's gates: written aside and renamed, a scorer may read it at any moment."""
    scratch = hold.with_name(hold.name + ".tmp")
    scratch.write_text("".join(f"{gate}\n" for gate in gates))
    scratch.replace(hold)


def _wait_releasing_requeued(slurm, job: str, done, what: str, log) -> None:
    """Until ``done()``, releasing the job each time it waits to start again after a requeue; fails when the
    deadline passes or the job stays ended for 20 s (a requeued start may show as ended for a moment)."""
    deadline, ended_since = time.monotonic() + JOB_TIMEOUT_S, None
    while not done():
        state = slurm.job_field(job, "JobState")
        assert time.monotonic() < deadline, f"{what}: not before the deadline (job {state}):\n{log()[-6000:]}"
        if state in _ENDED:
            ended_since = ended_since or time.monotonic()
            assert time.monotonic() - ended_since < 20, f"{what}: job {job} ended {state}:\n{log()[-6000:]}"
        else:
            ended_since = None
        if state == "PENDING" and slurm.job_field(job, "Restarts") not in (None, "0") and \
                slurm.job_field(job, "Reason") == "BeginTime":
            _release_requeued(slurm, job)
        time.sleep(0.5)


def _starts(log: str) -> list[str]:
    """The job log cut at each start of the job script (what each start printed)."""
    return re.split(r"^.*\[fgrpo\] job \d+ run \S+ start \d+.*$", log, flags=re.M)[1:]


@pytest.mark.timeout(1800)
def test_one_launch_completes_through_usr1_and_a_requeue_with_the_focal_estimator(slurm, workdir):
    """(a), (h) and (c), in the order the job meets them"""
    from test_wandb_offline_on_cpu import read_history

    start = time.monotonic()
    experiment = next(iter(_plan_names(workdir, RUN)))
    ckpt = workdir / "checkpoints" / PROJECT / experiment
    marker = ckpt / "latest_checkpointed_iteration.txt"
    hold = workdir / "hold"
    # (h) steps take about a second here, less than a signal takes from scancel to the trainer: step 2's scoring
    # waits (once step 1 is over: verl dumps its rollouts right before logging it) until the stop request is on disk
    _set_hold(hold, [workdir / "rollouts" / "1.jsonl"])
    try:
        job = _launch(slurm, workdir, RUN)
        assert _JOB_NAMES[job] == experiment and experiment.startswith(_experiment(workdir, GAMMA) + "-")
        log = lambda: _log(workdir, RUN, job)  # noqa: E731
        _wait_for_step(slurm, workdir, job, RUN, 1)
        # what `#SBATCH --signal=B:USR1@<lead>` sends before the time limit: USR1 to the batch shell only
        subprocess.run(["scancel", "--signal=USR1", "--batch", job], env=slurm.env, check=True)
        # the batch shell's answer to USR1 (slurm/lifecycle.sh), which the trainer reads at the step boundary
        _wait_releasing_requeued(slurm, job, (ckpt / ".fgrpo-stop").exists, "the stop request", log)

        # (c) the worst moment for a kill: verl saves step 4, then validates and logs it. The reward holds scoring
        # once global_step_4 exists (that is, in step 4's validation) until the hold file is gone. verl alone
        # would resume after 4 and never log step 4.
        _set_hold(hold, [ckpt / f"global_step_{STEPS}"])
        _wait_releasing_requeued(slurm, job, (ckpt / f"global_step_{STEPS}").is_dir, f"checkpoint {STEPS}", log)
        # step 3's W&B row was closed when step 4 began, and W&B writes every second in our jobs: 3 s is ample
        time.sleep(3)
        assert slurm.job_field(job, "Restarts") == "1", log()[-6000:]
        assert steps_per_start(log()) == [[1, 2], [3]], log()[-6000:]
        # saved but not logged: the resume point is still step 3 (fgrpo_verl/job/resume_point.py)
        assert marker.read_text().strip() == "3"
        checkpoint_at_requeue = 3
        subprocess.run(["scontrol", "requeue", job], env=slurm.env, check=True)
        slurm.wait_state(job, {"PENDING"}, 120)
    finally:
        hold.unlink(missing_ok=True)
    # a requeued job waits before it may start again; let it start now. It was seen pending after its last
    # requeue: the next ended state is its last start's
    _release_requeued(slurm, job)
    state = slurm.wait_done(job, JOB_TIMEOUT_S)
    wall = time.monotonic() - start
    log = _log(workdir, RUN, job)

    # (a) the launch completed, and the focal estimator produced the advantages: recomputed from the dumped
    # rewards of step 1 with gamma = 1, and different from what plain GRPO (gamma = 0) would give for the same batch
    assert state == "COMPLETED", f"job {job} ended {state}:\n{log[-6000:]}"
    assert slurm.job_field(job, "Restarts") == "2", log[-6000:]
    # the training job asked for all of its node's memory (--mem=0), not the share of a job that asks for none
    slurm.assert_memory_asked(job)
    rollouts = _rollouts(workdir / "rollouts", 1)
    assert len(rollouts) == 4 * GROUP_N
    hi, lo = _expected_advantage_range(rollouts, GAMMA)
    hi0, lo0 = _expected_advantage_range(rollouts, 0.0)
    assert hi > 0, "no group with mixed outcomes in this batch: the check would be vacuous"
    assert _logged_metric(log, 1, "critic/advantages/max") == pytest.approx(hi, abs=1e-4)
    assert _logged_metric(log, 1, "critic/advantages/min") == pytest.approx(lo, abs=1e-4)
    assert abs(hi - hi0) > 1e-2 or abs(lo - lo0) > 1e-2
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == str(STEPS)

    starts, printed = steps_per_start(log), _starts(log)
    assert len(starts) == len(printed) == 3, log[-6000:]
    # (h) the trainer (a Ray actor) saw the stop file and saved the step it stopped at although save_freq skips it;
    # the job requeued itself, and its next start continued right after that step
    stops = re.findall(r"stopped on request after step (\d+) \(checkpoint (\d+)\): requeueing job", log)
    assert len(stops) == 1, log[-6000:]
    stopped = int(stops[0][0])
    assert stopped == 2 and stopped % SAVE_FREQ != 0 and int(stops[0][1]) == stopped, log[-6000:]
    assert "[fgrpo] stop requested" in printed[0] and "did not stop within" not in log
    assert starts[0] == list(range(1, stopped + 1)), starts
    assert "Resuming from" not in printed[0]
    assert f"Resuming from {ckpt}/global_step_{stopped}" in printed[1]
    # (c) the killed start resumed after the stop and logged only steps up to the checkpoint the last start resumed
    # from: nothing repeated; the last start continued right after that checkpoint: nothing lost
    resumed = int(re.search(rf"Resuming from \S*{experiment}/global_step_(\d+)", printed[2]).group(1))
    assert resumed == checkpoint_at_requeue
    assert starts[1] == list(range(stopped + 1, resumed + 1)), (starts, resumed)
    assert starts[2] == list(range(resumed + 1, STEPS + 1)), (starts, resumed)
    # each resumed start's rollout server sampled its first step with the actor's weights, those of the loaded
    # checkpoint: the rollout's token probabilities equal the actor's (~2e-8 when synced; a rollout left with older
    # weights at this learning rate was off by ~0.04 in the vLLM run's negative control, docs/cpu_backend.md)
    for step in (starts[1][0], starts[2][0]):
        assert _logged_metric(log, step, "training/rollout_probs_diff_max") < 1e-3, (step, log[-6000:])

    # W&B (offline): every start wrote to the same, deterministic run id, one folder each, and nothing else did
    run_id = tracking.run_id(PROJECT, experiment, str(ckpt))
    runs = sorted(p.name for p in (workdir / "wandb").glob("offline-run-*"))
    ids = defaultdict(int)
    for name in runs:
        ids[name.rsplit("-", 1)[1]] += 1
    assert dict(ids) == {run_id: 3}, runs
    # W&B's history is steps 1..4 once each, with the console's values. The stopped start closed W&B cleanly; the
    # killed start's row of step 3 reached its offline file (the trainer closes each step's row when the next
    # begins, and the job flushes every second; verl alone kept it open and W&B's 15-s buffer lost it), and nothing
    # it logged past checkpoint 3 survives the last start's trim (fgrpo_verl/job/wandb_offline.py)
    folders = sorted((workdir / "wandb").glob(f"offline-run-*-{run_id}"))
    per_start = [[row for row in read_history(folder / f"run-{run_id}.wandb") if "critic/score/mean" in row]
                 for folder in folders]
    assert [[row["_step"] for row in rows] for rows in per_start] == starts, per_start
    history = [row for rows in per_start for row in rows]
    assert [row["_step"] for row in history] == [1, 2, 3, 4], history
    for row in history:
        assert _logged_metric(log, row["_step"], "critic/score/mean") == pytest.approx(row["critic/score/mean"])
    assert wait_no_processes(f"fgrpo-ray-{job}") == []
    print(f"(a, h, c) USR1 stop at {stopped}, requeue at checkpoint {checkpoint_at_requeue}, job {job}: {wall:.1f} s wall")
