"""From a recipe to the table on a real Slurm cluster: `fgrpo-verl launch` of a tiny maze recipe on the
CPU backend with an `evaluation:` block, two runs (GRPO γ = 0 and F-GRPO γ = 1), two epochs each.

What one launch does, checked from what a user sees (job logs, run directories, W&B offline files, `report`):

1. training: verl's real trainer, a checkpoint each epoch of what verl kept: the train parquet holds 12 prompts of
   which verl drops 4 as over-long, so an epoch is 2 steps (not the parquet's 3) and the checkpoints are 2 and 4;
2. per run a selection pass (afterany: its training) merges each checkpoint with verl's model merger and evaluates
   it (transformers back-end, n = 4); per run a final pass (afterany: its selection and the baseline's) evaluates
   the checkpoint the protocol selects with n = 8;
3. the baseline's selection job is killed (`scontrol requeue`) in the middle of checkpoint 4's evaluation (held by
   the scorer after that problem's completions are on disk): the restarted job skips checkpoint 2 (unchanged, not
   merged again), scores the completions on disk, generates the rest, and gets exactly what an uninterrupted
   evaluation gets; the focal run's selection job, held at the same time, gets USR1 (what Slurm sends ahead of
   the time limit): it stops, requeues itself and finishes;
4. the training runs' W&B offline files hold every checkpoint's evaluation (read back with the repo's reader);
5. `fgrpo-verl report` prints the table and lists nothing missing; a relaunch submits nothing.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from slurm_testing import REPO, module_cluster, steps_per_start, wait_no_processes
from test_slurm_launch_e2e_on_cpu import _release_requeued

from fgrpo_verl.job import tracking

pytestmark = [pytest.mark.slurm, pytest.mark.e2e, pytest.mark.ray]

PROJECT = "slurm_eval"
GROUP_N = 4
SCORER = "cpu_backend_parity_reward:compute_score"
JOB_TIMEOUT_S = 900


@pytest.fixture(scope="module")
def slurm(slurm_cluster):
    yield from module_cluster(slurm_cluster)


def _overlong(train_file: Path, out: Path, keep: int, extra: int) -> None:
    """``keep`` prompts of the maze train parquet plus ``extra`` whose prompt is twice as long (verl drops those:
    filter_overlong_prompts with max_prompt_length = one maze prompt)."""
    import pandas as pd

    rows = pd.read_parquet(train_file)
    kept = rows.iloc[:keep].copy()
    long = rows.iloc[keep:keep + extra].copy()
    long["prompt"] = [[{**m, "content": m["content"] * 2} for m in list(p)] for p in long["prompt"]]
    pd.concat([kept, long]).reset_index(drop=True).to_parquet(out)


@pytest.fixture(scope="module")
def workdir(slurm, tmp_path_factory):
    from fgrpo_verl.tasks.maze import build

    root = Path(tmp_path_factory.mktemp("slurm_eval")).resolve()
    maze = build(root / "maze", size=7, n_train=16, n_val=4, model_preset="tiny", seed=0)
    train = root / "train.parquet"
    _overlong(Path(maze.train_file), train, keep=8, extra=4)
    common = [
        "backend=cpu", "algo=grpo", "cluster=1x1",
        f"data.train_files={train}", f"data.val_files={maze.val_file}",
        "data.train_batch_size=4", f"data.max_prompt_length={maze.prompt_length}", "data.filter_overlong_prompts=true",
        f"data.max_response_length={maze.max_response_length}", "data.seed=0",
        f"actor_rollout_ref.model.path={maze.model_dir}", f"actor_rollout_ref.rollout.n={GROUP_N}",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16",
        "actor_rollout_ref.actor.optim.lr=1e-3", "actor_rollout_ref.actor.optim.lr_warmup_steps=0",
        f"reward.custom_reward_function.path={REPO / 'tests' / 'cpu_backend_parity_reward.py'}",
        "reward.custom_reward_function.name=compute_score",
        "trainer.logger=[console,wandb]", "trainer.total_epochs=2", "trainer.test_freq=-1",
        "trainer.val_before_train=False",
    ]
    recipe = {
        "name": "cpu_eval", "project": PROJECT, "reproduces": "nothing: the launch-to-table path on CPU",
        "save_per_epoch": True,
        "resources": {"request_gpus": False, "ray_num_cpus": 32, "cpus_per_task": 2, "ray_join_timeout": 180},
        "env": {"WANDB_MODE": "offline", "WANDB_DIR": str(root), "RAY_DEDUP_LOGS": "0",
                "FGRPO_TEST_HOLD_FILE": str(root / "hold"),
                # the evaluation's scorer is a module of tests/ (the training reward is loaded from its path)
                "PYTHONPATH": f"{REPO}:{REPO / 'tests'}"},
        "common": common,
        "runs": [{"name": "grpo", "group": "maze", "overrides": ["algorithm.fgrpo.gamma=0.0"]},
                 {"name": "fgrpo-g1", "group": "maze", "overrides": ["algorithm.fgrpo.gamma=1.0"]}],
        "evaluation": {
            "benchmarks": {"maze": {"file": maze.val_file, "scorer": SCORER}},
            "select_by": "maze", "selection": {"n": 4}, "final": {"n": 8}, "backend": "transformers",
            # not one of the paper's models: the preset and the length are stated
            "prompt_preset": "none", "max_new_tokens": "train", "workers": 1,
            "engine": {"device": "cpu", "problems_per_call": 1, "batch_size": 8},
            "resources": {"request_gpus": False, "cpus_per_task": 1}, "tables": ["table1", "curves"],
        },
    }
    (root / "cpu_eval.yaml").write_text(yaml.safe_dump(recipe, sort_keys=False))
    return root


def _env(slurm, workdir: Path) -> dict:
    """The cluster's client environment, with tests/ importable (the launch checks the scorer resolves), on nodes
    without the Hub: no HF_HUB_OFFLINE from here (the jobs set what they need) and an empty Hugging Face cache."""
    env = slurm.env
    env["PYTHONPATH"] = f"{REPO}:{REPO / 'tests'}"
    env.pop("HF_HUB_OFFLINE", None)
    env["HF_HOME"] = str(workdir / "empty_hf_home")
    (workdir / "empty_hf_home").mkdir(exist_ok=True)
    return env


def _cli(slurm, workdir: Path, *argv: str) -> subprocess.CompletedProcess:
    """``fgrpo-verl ARGV`` run in this process (the module already imports the launcher and verl to plan the jobs;
    the real entry point's subprocess is tests/test_slurm_launch_e2e_on_cpu.py's) with the cluster's client
    environment, in ``workdir``; fails unless it returns 0."""
    from fgrpo_verl.cli import main as cli_main

    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    stdout, stderr = io.StringIO(), io.StringIO()
    try:
        os.environ.clear()
        os.environ.update(_env(slurm, workdir))
        os.chdir(workdir)
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            rc = cli_main(list(argv))
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    out = subprocess.CompletedProcess(["fgrpo-verl", *argv], rc, stdout.getvalue(), stderr.getvalue())
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-4000:]
    return out


def _launch(slurm, workdir: Path, *extra: str) -> subprocess.CompletedProcess:
    return _cli(slurm, workdir, "launch", str(workdir / "cpu_eval.yaml"), *extra)


def _log(workdir: Path, name: str, job: str) -> str:
    path = workdir / "slurm_logs" / f"{name}-{job}.out"
    return path.read_text(errors="replace") if path.exists() else ""


def _state(slurm, job: str) -> str | None:
    return slurm.job_field(job, "JobState")


def _wait_all(slurm, jobs: dict[str, str], deadline: float) -> None:
    """Until every job ended; a requeued job pending again is released at once (Slurm's begin-time delay)."""
    while True:
        states = {job: _state(slurm, job) for job in jobs}
        if all(s in {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"} for s in states.values()):
            return
        for job, state in states.items():
            if state == "PENDING" and slurm.job_field(job, "Restarts") not in (None, "0") and \
                    slurm.job_field(job, "Reason") == "BeginTime":
                _release_requeued(slurm, job)
        assert time.monotonic() < deadline, f"jobs not done before the deadline: {states}"
        time.sleep(1)


@pytest.mark.timeout(2400)
def test_launch_evaluates_every_checkpoint_resumes_a_killed_evaluation_and_reports_the_table(slurm, workdir):
    from test_wandb_offline_on_cpu import read_history

    from fgrpo_verl.job import checkpoints as ck
    from fgrpo_verl.launch import plan_jobs

    start = time.monotonic()
    _, planned = plan_jobs(str(workdir / "cpu_eval.yaml"), None, [], workdir / "slurm_logs", workdir)
    base, focal = planned
    assert focal.baseline_job is not None and focal.baseline_job.job_name == base.job_name
    from fgrpo_verl.evaluation.checkpoint_eval import pass_label

    label = {phase: pass_label(base.evaluation.jobs[0].plan, phase) for phase in ("selection", "final")}

    def gate(job) -> Path:
        """Where a run's selection pass holds its scoring: checkpoint 4's completions file. The evaluation creates it
        empty before it loads the model; the first problem's completions are in it (written and synced) just before
        they are scored, which is where the scorer holds (:func:`reached`)."""
        return (job.checkpoint_dir / "global_step_4" / ck.EVAL_DIR / pass_label(job.evaluation.jobs[0].plan, "selection")
                / "shard-0-of-1" / "generations.jsonl")

    def reached(path: Path) -> bool:
        return path.is_file() and path.stat().st_size > 0

    hold = workdir / "hold"
    # every input is here: the dry run says so, exit status 0 (_cli), and names what each job asks Slurm for
    dry = _launch(slurm, workdir, "--dry-run")
    assert "ready: a submit from here has every input it checks" in dry.stdout, dry.stdout[-3000:]
    asks = next(x for x in dry.stdout.splitlines() if x.startswith("  training, 2 jobs: "))
    assert "--nodes=1" in asks and "--cpus-per-task=2" in asks and "--mem=0" in asks and "--gpus" not in asks, asks
    out = _launch(slurm, workdir)
    train = dict(re.findall(r"submitted (grpo|fgrpo-g1): job (\d+) ", out.stdout))
    evals = {(run, phase): job for phase, run, job in
             re.findall(r"submitted (selection|final) evaluation of (\S+): job (\d+) ", out.stdout)}
    assert set(train) == {"grpo", "fgrpo-g1"} and len(evals) == 4, out.stdout
    # the dependencies as Slurm holds them
    assert f"afterany:{train['grpo']}" in slurm.job_field(evals[("grpo", "selection")], "Dependency")
    final_dep = slurm.job_field(evals[("fgrpo-g1", "final")], "Dependency")
    assert f"afterany:{evals[('fgrpo-g1', 'selection')]}" in final_dep
    assert f"afterany:{evals[('grpo', 'selection')]}" in final_dep

    deadline = time.monotonic() + JOB_TIMEOUT_S
    killed, stopped = evals[("grpo", "selection")], evals[("fgrpo-g1", "selection")]
    # each selection job is held at its own gate, whichever gets there first (a gate for every job would also
    # hold the other run's training and selection, and under load the order of the runs is anybody's)
    held = {killed: (base, gate(base)), stopped: (focal, gate(focal))}
    scratch = workdir / "hold.tmp"
    scratch.write_text("".join(f"{job} {path}\n" for job, (_, path) in held.items()))
    scratch.replace(hold)  # written aside and renamed: a scorer may read it at any moment
    try:
        # wait for both holds: checkpoint 2 evaluated, checkpoint 4's first problem sampled and being scored
        while not all(reached(path) for _, path in held.values()):
            for job, (run, _) in held.items():
                assert _state(slurm, job) in {"PENDING", "RUNNING"}, _log(workdir, run.job_name, job)[-6000:]
            assert time.monotonic() < deadline, "a selection pass never reached checkpoint 4"
            time.sleep(0.5)
        time.sleep(3)
        assert ck.current_result(base.checkpoint_dir, 2, label["selection"]) is not None
        assert ck.read_json(base.checkpoint_dir / "global_step_4" / ck.EVAL_DIR / label["selection"] / ck.RESULT) is None
        merge_marker = base.checkpoint_dir / "global_step_2" / ck.EVAL_DIR / "merged_hf" / "fgrpo_merge.json"
        merged_at = merge_marker.stat().st_mtime_ns
        subprocess.run(["scontrol", "requeue", killed], env=slurm.env, check=True)
        slurm.wait_state(killed, {"PENDING"}, 120)
        # the focal run's selection job, held at its own gate: what `#SBATCH --signal=B:USR1@120` sends before
        # its time limit stops it, and it requeues itself
        assert _state(slurm, stopped) == "RUNNING", _log(workdir, focal.job_name, stopped)[-6000:]
        subprocess.run(["scancel", "--signal=USR1", "--batch", stopped], env=slurm.env, check=True)
        slurm.wait_state(stopped, {"PENDING"}, 120)
    finally:
        hold.unlink(missing_ok=True)
    _wait_all(slurm, {**{v: k for k, v in train.items()}, **{v: str(k) for k, v in evals.items()}}, deadline)
    wall = time.monotonic() - start

    for run, job in train.items():
        name = base.job_name if run == "grpo" else focal.job_name
        log = _log(workdir, name, job)
        assert _state(slurm, job) == "COMPLETED", log[-6000:]
        # verl kept 8 of 12 prompts: 2 steps an epoch, so the checkpoints are epochs 1 and 2 (not steps 3 and 4)
        assert steps_per_start(log) == [[1, 2, 3, 4]], log[-4000:]
        assert "verl kept 8 training prompts, 2 steps per epoch; trainer.save_freq 3 -> 2" in log
        # a job that ends cleanly on its first start leaves no Ray process of its own behind
        assert wait_no_processes(f"fgrpo-ray-{job}") == []
        # all of its node's memory (--mem=0), not the share of a job that asks for none
        slurm.assert_memory_asked(job)
    for (run, phase), job in evals.items():
        log = _log(workdir, base.job_name if run == "grpo" else focal.job_name, job)
        assert _state(slurm, job) == "COMPLETED", log[-6000:]
        # the host memory the plan asks for (verl's merger beside the engines) is what Slurm holds for the job
        planned = (base if run == "grpo" else focal).evaluation.memory_line
        mem = re.search(r"--mem=(\d+)G\b", planned)
        assert mem, planned
        slurm.assert_memory_asked(job, int(mem.group(1)) * 1024)
    for job in (base, focal):
        assert ck.saved_steps(job.checkpoint_dir) == [2, 4]
        assert ck.read_steps(job.checkpoint_dir)["steps_per_epoch"] == 2

    # the one stopped by USR1 requeued itself once and finished
    log = _log(workdir, focal.job_name, stopped)
    assert slurm.job_field(stopped, "Restarts") == "1" and "got USR1" in log and "eval selection start 1" in log
    # the killed evaluation: restarted once, checkpoint 2 skipped (not merged again), checkpoint 4 resumed
    log = _log(workdir, base.job_name, killed)
    assert slurm.job_field(killed, "Restarts") == "1"
    second = log[log.index("eval selection start 1"):]
    assert f"step 2: selection pass {label['selection']} was evaluated on this unchanged checkpoint: skipped" in second
    assert "global_step_2: merging" not in second
    assert merge_marker.stat().st_mtime_ns == merged_at
    assert "step 4: selection pass shard 1/1 (resuming)" in second
    assert "--resume: scoring 1 problems whose completions are on disk" in second
    # ... and it got what an uninterrupted evaluation gets (seeded per request: bit-identical on CPU)
    resumed = ck.read_json(ck.result_path(base.checkpoint_dir, 4, label["selection"]))
    reference = workdir / "reference"
    from fgrpo_verl.evaluation.checkpoint_eval import _run_eval, pass_options

    plan = base.evaluation.jobs[0].plan
    _run_eval(pass_options(plan, "selection", "step4", base.checkpoint_dir / "global_step_4" / ck.EVAL_DIR / "merged_hf",
                        reference, resume=False))
    ref_lines = [json.loads(x) for x in (reference / "generations.jsonl").read_text().splitlines()]
    got_lines = [json.loads(x) for x in Path(resumed["generations"][0]).read_text().splitlines()]
    correct = lambda lines: {x["problem_id"]: x["correct"] for x in lines if "correct" in x}  # noqa: E731
    assert correct(got_lines) == correct(ref_lines) and len(correct(ref_lines)) == 4
    # one completions line per problem: nothing sampled twice
    assert sorted(x["problem_id"] for x in got_lines if "completions" in x) == sorted(correct(ref_lines))

    # the protocol's choice, and the final pass on it; W&B holds every checkpoint's evaluation
    for job in (base, focal):
        selected = ck.read_json(job.checkpoint_dir / ck.EVAL_DIR / "selected.json")
        final = ck.current_result(job.checkpoint_dir, selected["step"], label["final"])
        assert final is not None and final["settings"]["n"] == 8
        run_id = tracking.run_id(PROJECT, job.job_name, str(job.checkpoint_dir))
        rows = [row for folder in sorted((workdir / "wandb").glob(f"offline-run-*-{run_id}"))
                for row in read_history(folder / f"run-{run_id}.wandb", finished=True)
                if "eval/checkpoint_step" in row]
        assert [(r["eval/checkpoint_step"], "eval/selection/maze/pass@1" in r) for r in rows] == \
            [(2, True), (4, True), (selected["step"], False)], rows
        for row in rows[:2]:
            result = ck.current_result(job.checkpoint_dir, row["eval/checkpoint_step"], label["selection"])
            assert row["eval/selection/maze/pass@1"] == pytest.approx(result["pass_at_k"]["maze"]["1"])
        assert rows[2]["eval/final/maze/pass@8"] == pytest.approx(final["pass_at_k"]["maze"]["8"])
        # after the training's last step (4): W&B keeps a history in order
        assert all(r["_step"] > 4 for r in rows)
    focal_sel = ck.read_json(focal.checkpoint_dir / ck.EVAL_DIR / "selected.json")
    base_sel = ck.read_json(base.checkpoint_dir / ck.EVAL_DIR / "selected.json")
    assert focal_sel["step"] <= base_sel["step"], (focal_sel, base_sel)  # equal or less compute

    # the table, from files alone; nothing missing
    report = _cli(slurm, workdir, "report", str(workdir / "cpu_eval.yaml"), "--significance-iterations", "300")
    print(report.stdout)
    assert "### Table 1" in report.stdout and "nothing: every run is finished and evaluated" in report.stdout
    table = (workdir / "reports" / "cpu_eval" / "table1.csv").read_text()
    assert f"{final['pass_at_k']['maze']['1'] * 100:.4f}" in table
    # a relaunch has nothing left to do
    again = _launch(slurm, workdir)
    assert "submitted" not in again.stdout.replace("nothing submitted", ""), again.stdout
    print(f"launch to table: {wall:.0f} s wall (2 trainings, 4 evaluation jobs, one killed and resumed)")
