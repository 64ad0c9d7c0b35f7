"""The run lifecycle of `fgrpo-verl launch` on a real Slurm cluster (scripts/slurm_cluster.sh, loopback only):

(e) a job with a 1-minute time limit and `--signal=B:USR1@50`: on the signal the trainer (a stand-in for verl's,
    tests/slurm_jobs/standin_trainer.py) checkpoints at the step boundary and stops, the job requeues itself and
    finishes; steps 1..T are trained exactly once (job log, checkpoints) and the W&B offline files of all starts
    hold one run whose history is exactly steps 1..T;
(f) the same config launched twice: the second launch skips it (queued), `--force` submits one that singleton
    holds; a different override is a different run; `--status` reports queued / running / done / failed /
    not started; a finished run is never resubmitted;
(g) newline / space / quotes / `$()` / `#` in every value that reaches the job script (launch dir, log dir,
    recipe file name, overrides, recipe env, resources.extra): asserted on the script Slurm stored
    (`scontrol write batch_script`), validated by `sbatch --test-only`, and nothing in it executes.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from slurm_testing import REPO, module_cluster, steps_per_start
from test_wandb_offline_on_cpu import read_history

from fgrpo_verl.job import tracking

pytestmark = [pytest.mark.slurm]

REWARD_FILE = REPO / "tests" / "cpu_backend_parity_reward.py"
NASTY = "a b 'c' \"d\" $(touch PWNED) `touch PWNED2` #e \\f"


@pytest.fixture(scope="module")
def slurm(slurm_cluster):
    yield from module_cluster(slurm_cluster)


def _launch(slurm, cwd: Path, *args: str, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """``fgrpo-verl launch ARGS`` run in this process (verl and Hydra are imported once for the whole module, not
    once per launch) with the job environment, in ``cwd``."""
    from fgrpo_verl.cli import main as cli_main

    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    stdout, stderr = io.StringIO(), io.StringIO()
    try:
        os.environ.clear()
        os.environ.update(env or slurm.env)
        os.chdir(cwd)
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            rc = cli_main(["launch", *args])
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    out = subprocess.CompletedProcess(["fgrpo-verl", "launch", *args], rc, stdout.getvalue(), stderr.getvalue())
    if check:
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out


def _submitted(out: subprocess.CompletedProcess) -> dict[str, tuple[str, str]]:
    """{run name: (job id, job name)} from the launcher's output."""
    return {m[0]: (m[1], m[2]) for m in re.findall(r"^submitted (\S+): job (\d+) (\S+)", out.stdout, re.M)}


def _status(slurm, cwd: Path, recipe: Path, *overrides: str) -> dict[str, str]:
    out = _launch(slurm, cwd, str(recipe), "--status", *overrides)
    return {line.split()[0]: line for line in out.stdout.splitlines() if line.strip()}


def _tiny_parquet(path: Path, rows: int = 8) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    prompts = [[{"role": "user", "content": f"q{i}"}] for i in range(rows)]
    table = pa.table({"prompt": prompts, "data_source": ["t"] * rows,
                      "reward_model": [{"ground_truth": "x", "style": "rule"}] * rows})
    pq.write_table(table, path)
    return path


def _held_env(slurm) -> dict[str, str]:
    # sbatch's own SBATCH_PARTITION: every job goes to the test cluster's DOWN partition (scripts/slurm_cluster.sh)
    # and waits there, so nothing runs and the queue state is stable
    return dict(slurm.env, SBATCH_PARTITION="parked")


def _release(slurm, job: str) -> None:
    subprocess.run(["scontrol", "update", f"JobId={job}", "Partition=debug"], env=slurm.env, check=True)


# ---------------------------------------------------------------------------------------------------- (g)


def _nasty_recipe(root: Path, train: Path, extra_value: str, env_value: str) -> dict:
    # the jobs stay held and never load it, but a submit requires the model's files (the launcher's preflight)
    model = train.parent / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"")
    return {
        "name": "nasty",
        "project": "slurm_g",
        "resources": {"request_gpus": False, "cpus_per_task": 1, "time": "0:20:00",
                      "extra": [f"--comment={extra_value}"]},
        "env": {"FGRPO_NOTE": env_value},
        "common": ["backend=cpu", "algo=grpo", "cluster=1x1", f"data.train_files={train}", f"data.val_files={train}",
                   "data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
                   f"actor_rollout_ref.model.path={model}"],
        "runs": [{"name": "r", "overrides": []}],
    }


@pytest.mark.timeout(300)
def test_g_hostile_values_reach_slurm_quoted_and_never_execute(slurm, tmp_path):
    launch_dir = tmp_path / f"launch {NASTY}"
    launch_dir.mkdir()
    # the data path goes through Hydra's override grammar, which has its own quoting: kept plain
    train = _tiny_parquet(tmp_path / "data" / "train.parquet")
    recipe = launch_dir / f"recipe {NASTY}.yaml"
    recipe.write_text(yaml.safe_dump(_nasty_recipe(launch_dir, train, NASTY, NASTY)))
    log_dir = f"logs {NASTY}"
    override = f"+fgrpo_note='{NASTY.replace(chr(39), '')}'"
    out = _launch(slurm, launch_dir, str(recipe), "--log-dir", log_dir, override, env=_held_env(slurm))
    (job_id, job_name), = _submitted(out).values()
    try:
        written = next((launch_dir / "slurm_jobs" / "nasty").glob("*.sbatch"))
        # the script Slurm stored is the file we wrote, byte for byte
        stored = subprocess.run(["scontrol", "write", "batch_script", job_id, "-"], env=slurm.env,
                                capture_output=True, text=True, check=True).stdout
        assert stored == written.read_text()
        # sbatch parsed every directive to the exact value, #, quotes, backslash and $() included
        show = subprocess.run(["scontrol", "show", "job", job_id], env=slurm.env, capture_output=True, text=True).stdout
        assert f"WorkDir={launch_dir}\n" in show
        assert f"StdOut={launch_dir / log_dir}/{job_name}-{job_id}.out\n" in show
        assert f"Comment={NASTY}" in show
        for field in ("Requeue=1", "TimeLimit=00:20:00"):
            assert field in show, show
        # (singleton shows in scontrol only while another job of the run exists: test (f))
        assert '#SBATCH --dependency="singleton"\n' in stored and '#SBATCH --signal="B:USR1@900"\n' in stored
        check = subprocess.run(["sbatch", "--test-only", str(written)], env=slurm.env, capture_output=True, text=True)
        assert check.returncode == 0 and "to start at" in check.stderr, check.stderr
        # the exports and the training command, run by bash: every value arrives as one word, nothing executes
        exports = stored.split("set -euo pipefail\n", 1)[1].split("# USR1", 1)[0]
        command = stored.split("fgrpo_train ", 1)[1].replace('"$FGRPO_PYTHON" -m fgrpo_verl train', "printf '%s\\n'")
        probe = subprocess.run(["bash", "-c", f'{exports}\nprintf "%s\\n" "$FGRPO_NOTE" "$FGRPO_LOG_DIR"\n{command}'],
                               cwd=launch_dir, capture_output=True, text=True, env=dict(slurm.env, SLURM_NNODES="1"))
        words = probe.stdout.splitlines()
        assert words[:2] == [NASTY, str(launch_dir / log_dir)], probe.stderr
        assert override in words
        assert not list(launch_dir.rglob("PWNED*")) and not list(tmp_path.glob("PWNED*"))
    finally:
        subprocess.run(["scancel", job_id], env=slurm.env)

    # a newline anywhere is refused before anything is written or submitted
    for bad_env, bad_extra, args in (
        ("x\ny", "x", ()),
        ("x", "x\n#SBATCH --wrap=touch PWNED", ()),
        ("x", "x", ("--log-dir", "logs\nx")),
        ("x", "x", ("+fgrpo_note='a\nb'",)),
    ):
        recipe.write_text(yaml.safe_dump(_nasty_recipe(launch_dir, train, bad_extra, bad_env)))
        out = _launch(slurm, launch_dir, str(recipe), *args, env=_held_env(slurm), check=False)
        assert out.returncode == 2 and "control character" in out.stderr, out.stderr[-2000:]
        assert "submitted" not in out.stdout


# ---------------------------------------------------------------------------------------------------- (e), (f)


STEPS = 2  # the runs of test (f)
# (e): Slurm checks limits periodically (every 30 s here): with a 1-minute limit and a 50 s lead, USR1 comes 10-40 s
# into a start. Step E_HOLD_STEP lasts until the stop request exists (tests/slurm_jobs/standin_trainer.py), so
# the first start is always interrupted, wherever in that window the signal lands, and the job needs at least one
# self-requeue to finish; the steps around it are short, so the start after it usually finishes before the next
# check (when it does not, it is stopped and requeued too, which the assertions allow).
E_LIMIT_MIN, E_LEAD_S, E_STEPS, E_STEP_S, E_HOLD_STEP = 1, 50, 6, 0.5, 3
STANDIN = REPO / "tests" / "slurm_jobs" / "standin_trainer.py"


@pytest.fixture(scope="module")
def maze_dir(slurm, tmp_path_factory):
    """Launch dir with a tiny maze task and model, and a recipe of three runs on the CPU backend."""
    from fgrpo_verl.tasks.maze import build

    root = Path(tmp_path_factory.mktemp("lifecycle"))
    maze = build(root / "maze", size=7, n_train=64, n_val=4, model_preset="tiny", seed=0)
    common = [
        "backend=cpu", "algo=grpo", "cluster=1x1",
        f"data.train_files={maze.train_file}", f"data.val_files={maze.val_file}",
        "data.train_batch_size=4", f"data.max_prompt_length={maze.prompt_length}",
        f"data.max_response_length={maze.max_response_length}", "data.seed=0",
        f"actor_rollout_ref.model.path={maze.model_dir}", "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16",
        "actor_rollout_ref.actor.optim.lr=1e-3", "actor_rollout_ref.actor.optim.lr_warmup_steps=0",
        f"reward.custom_reward_function.path={REWARD_FILE}", "reward.custom_reward_function.name=compute_score",
        "trainer.logger=[console,wandb]", "trainer.test_freq=-1", "trainer.val_before_train=False",
        # no periodic checkpoint: every checkpoint after step 0 comes from the stop request (or the last step)
        "trainer.save_freq=100", f"trainer.total_training_steps={STEPS}",
    ]
    recipe = {
        "name": "life",
        "project": "slurm_life",
        "resources": {"request_gpus": False, "ray_num_cpus": 32, "cpus_per_task": 2, "ray_join_timeout": 180},
        "env": {"WANDB_MODE": "offline", "WANDB_DIR": str(root), "RAY_DEDUP_LOGS": "0", "FGRPO_PROJECT": "slurm_life"},
        "common": common,
        "runs": [
            {"name": "timed", "overrides": ["algorithm.fgrpo.gamma=0.5"]},
            {"name": "twice", "overrides": ["algorithm.fgrpo.gamma=1.0"]},
            {"name": "broken", "overrides": ["algorithm.fgrpo.gamma=2.0"]},
            {"name": "idle", "overrides": ["algorithm.fgrpo.gamma=0.0"]},
        ],
    }
    (root / "life.yaml").write_text(yaml.safe_dump(recipe, sort_keys=False))
    return root


def _standin_job(maze_dir: Path, overrides: list[str]):
    """The launcher's job for run `timed`, with its training command replaced by the stand-in trainer loop
    (tests/slurm_jobs/standin_trainer.py says why) and without the Ray cluster the stand-in does not use. Every
    other line (directives, --signal, lifecycle.sh, identity check, exports) is what `fgrpo-verl launch` renders."""
    import dataclasses

    from fgrpo_verl.launch import plan_jobs

    _, (job,) = plan_jobs(str(maze_dir / "life.yaml"), ["timed"], overrides, maze_dir / "slurm_logs", maze_dir)
    head, command = job.text.split("fgrpo_train ", 1)
    assert command.startswith('"$FGRPO_PYTHON" -m fgrpo_verl train')
    assert "\nfgrpo_ray_up\n" in head
    text = head.replace("\nfgrpo_ray_up\n", "\n") + (
        f'fgrpo_train "$FGRPO_PYTHON" {STANDIN} "$FGRPO_CHECKPOINT_DIR" {E_STEPS} 1000 {E_STEP_S} {E_HOLD_STEP}\n'
    )
    return dataclasses.replace(job, text=text)


@pytest.mark.timeout(600)
def test_e_time_limit_signal_checkpoints_requeues_and_finishes_every_step_once(slurm, maze_dir, monkeypatch):
    from fgrpo_verl.launch import submit_jobs

    recipe = maze_dir / "life.yaml"
    # the time limit and lead are not part of the run's identity; the step count is
    same_run = [f"trainer.total_training_steps={E_STEPS}"]
    job_script = _standin_job(maze_dir, [*same_run, f"slurm.time={E_LIMIT_MIN}", f"slurm.signal_lead_s={E_LEAD_S}"])
    assert f'#SBATCH --time="{E_LIMIT_MIN}"\n' in job_script.text and f'--signal="B:USR1@{E_LEAD_S}"' in job_script.text
    start = time.monotonic()
    for key, value in slurm.env.items():
        monkeypatch.setenv(key, value)
    ((_, job),) = submit_jobs([job_script], maze_dir / "slurm_jobs" / "life", maze_dir / "slurm_logs",
                              out=lambda _: None).training
    name = job_script.job_name
    ckpt = job_script.checkpoint_dir
    log_path = maze_dir / "slurm_logs" / f"{name}-{job}.out"
    saw_running = False
    deadline = time.monotonic() + 480
    while (state := slurm.job_field(job, "JobState")) not in {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"}:
        assert time.monotonic() < deadline, log_path.read_text(errors="replace")[-5000:]
        if state == "RUNNING" and not saw_running:
            # (f) --status while it runs (it may be requeued between scontrol's answer and squeue's: then queued)
            line = _status(slurm, maze_dir, recipe, *same_run)["timed"]
            assert re.search(rf": (running|queued) job {job}, \d+/{E_STEPS} steps", line), line
            saw_running = " running " in line
        time.sleep(1)
    wall = time.monotonic() - start
    log = log_path.read_text(errors="replace")
    assert state == "COMPLETED", log[-6000:]
    assert saw_running, "--status never saw the job running"
    # all of its node's memory (--mem=0), not the share of a job that asks for none
    slurm.assert_memory_asked(job)
    restarts = int(slurm.job_field(job, "Restarts"))
    starts = steps_per_start(log)
    # the time limit came at least once: USR1, a checkpoint at the step boundary, a self-requeue; never TIMEOUT
    assert restarts >= 1 and len(starts) == restarts + 1, (restarts, starts, log[-3000:])
    # (the last start may get USR1 too: during its last step it changes nothing)
    assert restarts <= log.count("got USR1") <= restarts + 1, log[-3000:]
    assert len(re.findall(r"stopped on request after step \d+ \(checkpoint \d+\): requeueing job", log)) == restarts
    assert "did not stop within" not in log
    # every step exactly once, in order, across all starts; each start resumed where the previous one stopped
    assert [s for steps in starts for s in steps] == list(range(1, E_STEPS + 1)), starts
    for previous in starts[:-1]:
        assert f"Resuming from {ckpt}/global_step_{previous[-1]}\n" in log
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == str(E_STEPS)

    # W&B offline: one run id, one folder per start; together their history is steps 1..T once each, with the
    # values the trainer logged
    run_id = tracking.run_id("slurm_life", name, os.path.abspath(ckpt))
    folders = sorted((maze_dir / "wandb").glob(f"offline-run-*-{run_id}"))
    assert len(folders) == len(starts), folders
    history = [row for folder in folders for row in read_history(folder / f"run-{run_id}.wandb")]
    logged = [(row["_step"], row["critic/score/mean"]) for row in history if "critic/score/mean" in row]
    assert logged == [(s, round(1.0 / s, 6)) for s in range(1, E_STEPS + 1)], logged

    # (f) done: --status says so, and a relaunch never trains it further
    status = _status(slurm, maze_dir, recipe, *same_run)["timed"]
    assert f"done, {E_STEPS}/{E_STEPS} steps" in status, status
    again = _launch(slurm, maze_dir, str(recipe), "--only", "timed", *same_run)
    assert "skipped timed:" in again.stdout and _submitted(again) == {}
    print(f"(e) {len(starts)} start(s) {starts}, job {job}: {wall:.1f} s wall")


@pytest.mark.timeout(600)
def test_f_one_job_per_run_and_status_reports_each_state(slurm, maze_dir):
    recipe = maze_dir / "life.yaml"
    held = _held_env(slurm)
    first = _submitted(_launch(slurm, maze_dir, str(recipe), "--only", "twice", "--only", "broken", env=held))
    # --only A --only B: both
    assert set(first) == {"twice", "broken"}
    twice_job, twice_name = first["twice"]
    jobs = [j for j, _ in first.values()]
    try:
        # the same config again: skipped, naming the queued job; nothing new in the queue
        again = _launch(slurm, maze_dir, str(recipe), "--only", "twice", env=held)
        assert f"skipped twice: {twice_name}: queued job {twice_job}" in again.stdout and _submitted(again) == {}
        # --force: submitted, and Slurm's singleton dependency keeps it from running next to the first
        forced = _submitted(_launch(slurm, maze_dir, str(recipe), "--only", "twice", "--force", env=held))
        forced_job, forced_name = forced["twice"]
        jobs.append(forced_job)
        assert forced_name == twice_name and slurm.job_field(forced_job, "Dependency") == "singleton(unfulfilled)"
        # a different override is a different run: another name, checkpoint dir and W&B id, submitted
        other = _submitted(_launch(slurm, maze_dir, str(recipe), "--only", "twice", "actor_rollout_ref.actor.optim.lr=2e-3",
                                   env=held))
        other_job, other_name = other["twice"]
        jobs.append(other_job)
        assert other_name != twice_name and other_name.rsplit("-", 1)[0] == twice_name.rsplit("-", 1)[0]
        # a launcher-owned override is refused
        owned = _launch(slurm, maze_dir, str(recipe), "--only", "twice", "trainer.experiment_name=mine", env=held, check=False)
        assert owned.returncode == 2 and "set by the launcher" in owned.stderr

        # failed: the broken run's directory is taken over by another config while it waits; its job refuses
        broken_job, broken_name = first["broken"]
        record = maze_dir / "checkpoints" / "slurm_life" / broken_name / "fgrpo_run.json"
        record.write_text(record.read_text().replace('"fingerprint": "', '"fingerprint": "0'))
        _release(slurm, broken_job)
        assert slurm.wait_done(broken_job, 120) == "FAILED"
        log = (maze_dir / "slurm_logs" / f"{broken_name}-{broken_job}.out").read_text()
        assert "holds a run of a different config" in log
        record.write_text(record.read_text().replace('"fingerprint": "0', '"fingerprint": "'))

        status = _status(slurm, maze_dir, recipe)
        assert f"queued job {twice_job}, 0/{STEPS} steps" in status["twice"]
        assert f"failed job {broken_job}, 0/{STEPS} steps (last job ended FAILED" in status["broken"]
        assert f"not started, 0/{STEPS} steps" in status["idle"]
        assert set(status) == {"timed", "twice", "broken", "idle"}
    finally:
        subprocess.run(["scancel", *jobs], env=slurm.env)
