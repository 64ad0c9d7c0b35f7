"""The first hour of a new user: every mistake answered in one line, quiet commands, fast launcher
answers, and the conveniences a new user looks for. No Ray here (the end-to-end parts are in
``test_first_hour_e2e_on_cpu.py``).

Bad input, every class, every sub-command: one ``error:`` line (or argparse's usage + error) on stderr naming the
key or flag, the value and what is valid, "did you mean" for a misspelt name, exit status 2, no traceback unless
``--debug`` / ``HYDRA_FULL_ERROR=1``; a missing service (Slurm) one line and status 1.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from user_env import user_environment

from fgrpo_verl.cli import main

REPO = Path(__file__).resolve().parent.parent


def _cli(*args, env=None, cwd=None, timeout=300) -> subprocess.CompletedProcess:
    """``python -m fgrpo_verl ARGS`` as a user runs it: what reaches the terminal, and the exit status."""
    full = user_environment("HYDRA_FULL_ERROR")
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "fgrpo_verl", *map(str, args)], capture_output=True, text=True,
                          env=full, cwd=cwd, timeout=timeout)


def _one_error_line(done, command: str) -> str:
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith(f"fgrpo-verl {command}: error: "), done.stderr[-3000:]
    return lines[0]


# One fresh interpreter answering several command lines in turn, each through ``fgrpo_verl.cli.main`` as
# ``python -m fgrpo_verl`` calls it, with file descriptors 1 and 2 of the process pointed at files of its own, so
# that what it prints (verl's import notices and logging handlers included) is its output alone. One process
# because each new one pays verl's import again. What a fresh process would start from is given back to each
# command line: the environment the batch started with plus the case's own (a value of None unsets a variable;
# train exports its backend's variables into the driver), and verl's platform not yet resolved (train resolves it
# in the driver, once per process, with the environment it exported; verl's detection logs its warnings then).
# What is not given back: verl's import notices reach only the first command line that imports verl, and the
# logging config of an in-process Hydra run (--cfg job, --info) stays for the later ones. The real entry point
# itself is exercised by test_misspelt_key_through_the_real_entry_point_and_debug_shows_the_traceback.
BATCH = r"""
import json, os, sys, tempfile
from fgrpo_verl.cli import main

results = []
environment = dict(os.environ)
for argv, env in json.loads(open(sys.argv[1]).read()):
    os.environ.clear()
    os.environ.update(environment)
    for key, value in env.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    platform_manager = sys.modules.get("verl.plugin.platform.platform_manager")
    if platform_manager is not None:
        assert hasattr(platform_manager, "_current_platform"), "verl keeps its resolved platform elsewhere now"
        platform_manager._current_platform = None
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        sys.stdout.flush(), sys.stderr.flush()
        keep = os.dup(1), os.dup(2)
        os.dup2(out.fileno(), 1), os.dup2(err.fileno(), 2)
        try:
            rc = main(argv)
        finally:
            sys.stdout.flush(), sys.stderr.flush()
            os.dup2(keep[0], 1), os.dup2(keep[1], 2)
            os.close(keep[0]), os.close(keep[1])
        out.seek(0), err.seek(0)
        ray = sys.modules.get("ray")
        results.append({"returncode": rc, "stdout": out.read().decode(), "stderr": err.read().decode(),
                        "ray_started": bool(ray is not None and ray.is_initialized()),
                        "main_ppo_imported": "verl.trainer.main_ppo" in sys.modules})
open(sys.argv[2], "w").write(json.dumps(results))
"""


class Answer:
    """What one command line of a batch printed and returned."""

    def __init__(self, result: dict):
        self.__dict__.update(result)


def _batch(cases: list[tuple[list[str], dict[str, str | None]]], work: Path, env: dict[str, str] | None = None,
           cwd: Path | None = None) -> dict:
    """The ``subprocess.run`` arguments of one new process (BATCH) started with ``env`` that calls ``main(argv)``
    with the case's environment (set, or unset where None) for each case in turn; ``_answers`` reads what it
    wrote."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "cases.json").write_text(json.dumps([[list(map(str, argv)), case_env] for argv, case_env in cases]))
    return {"args": [sys.executable, "-c", BATCH, str(work / "cases.json"), str(work / "answers.json")],
            "env": env, "cwd": cwd, "timeout": 900}


def _answers(done: subprocess.CompletedProcess, work: Path) -> list[Answer]:
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [Answer(result) for result in json.loads((work / "answers.json").read_text())]


def _wandb_env(*args) -> dict[str, str]:
    """What `eval "$(fgrpo-verl wandb-env ARGS)"` exports (the command itself runs in tests/test_readme_on_cpu.py)."""
    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert main(["wandb-env", *args]) == 0
    return dict(re.match(r"export (\w+)=(.*)", line).groups() for line in out.getvalue().splitlines())


WANDB_ENV_ARGS = ("--project", "fgrpo", "--algo", "fgrpo", "--gamma", "0.5", "--n", "8", "--model", "Qwen/Qwen2.5-7B",
                  "--seed", "1", "--group", "gamma-sweep")
BAD_GAMMAS = [
    ("-1", r"algorithm\.fgrpo\.gamma=-1\.0 is invalid: the focal strength must be a finite number >= 0"),
    ("inf", r"algorithm\.fgrpo\.gamma=inf is invalid"),
    ("null", r"algorithm\.fgrpo\.gamma=None is invalid"),
    ("nan", r"expected a number, got NaN"),
]
TRAIN_CPU = ["train", "algo=grpo", "backend=cpu"]


# (overrides, the one line): config errors of `train` with the default backend on this machine, which has no GPU.
# The first is found last (the config passed validation), so as the batch's first command line it runs through
# everything the second does before its error, verl's import and platform detection included.
NO_GPU_ERRORS = [
    (["data.train_files=/nonexistent/train.parquet"],  # found after validation, before Ray starts
     "data.train_files=/nonexistent/train.parquet: no such file"),
    (["algorithm.fgrpo.gamma=-1"],  # found while the config is validated
     "algorithm.fgrpo.gamma=-1.0 is invalid: the focal strength must be a finite number >= 0"),
]


def _train_cases(work: Path, env: dict[str, str]) -> dict[str, tuple[list[str], dict[str, str | None]]]:
    """The `fgrpo-verl train ...` command lines of this file (and one argparse error), in the order BATCH answers
    them. First those without a backend= on a machine without GPUs: the first imports verl, as a user's first
    command does, and is the first whose stderr could show verl's import notices; both come before any in-process
    Hydra run, whose logging config may disable verl's platform logger. Then the W&B one: those before it fail
    before Ray too, so that nothing of verl's trainer was imported when it failed covers it."""
    wandb_env = _wandb_env(*WANDB_ENV_ARGS)
    no_wandb = {"HOME": str(work), "WANDB_CONFIG_DIR": str(work / "wandb-config"), "NETRC": str(work / "none")}
    no_accelerator = {key: None for key in env if key.startswith(("VERL_", "CUDA_"))}
    data = work / "train.parquet"
    data.touch()
    return {
        **{f"no GPU: {' '.join(overrides)}": (["train", "algo=grpo", *overrides], no_accelerator)
           for overrides, _ in NO_GPU_ERRORS},
        # data files that exist: train checks them before W&B
        "wandb without setup": ([*TRAIN_CPU, "trainer.logger=[console,wandb]", f"data.train_files={data}",
                                 f"data.val_files={data}", "--verbose"], no_wandb),
        **{f"gamma={value}{' '.join(['', *extra])}": ([*TRAIN_CPU, f"algorithm.fgrpo.gamma={value}", *extra], {})
           for value, _ in BAD_GAMMAS for extra in ([], ["--cfg", "job"])},
        "gae discount": ([*TRAIN_CPU, "algorithm.gamma=0.99", "--cfg", "job"], {}),
        "--info config": ([*TRAIN_CPU, "--info", "config"], {}),
        "--info": ([*TRAIN_CPU, "--info"], {}),
        "env name": ([*TRAIN_CPU, "algorithm.fgrpo.gamma=0.5", "--cfg", "job"], wandb_env),
        "env name, command line wins": ([*TRAIN_CPU, "trainer.experiment_name=mine", "--cfg", "job"], wandb_env),
        "env name, stale": ([*TRAIN_CPU, "algorithm.fgrpo.gamma=1", "--cfg", "job"], wandb_env),
        "tail-miss --mu abc": (["tail-miss", "--mu", "abc", "--rho", "0.1", "--n", "8"], {}),
    }


# (recipe paper_main) 4 runs, each checked with verl's validate_config and the preflight
PREFLIGHT_RUNS = ["qwen25_7b-grpo-g0p0", "qwen25_7b-grpo-g0p5", "qwen25_7b-grpo-g1p0", "qwen25_7b-grpo-g2p0"]
TP_KEY = "actor_rollout_ref.rollout.tensor_model_parallel_size"


def _launch_cases() -> dict[str, tuple[list[str], dict[str, str | None]]]:
    dry_run = ["launch", "paper_main", "--dry-run", "--only", *PREFLIGHT_RUNS]
    return {"refused": ([*dry_run, f"{TP_KEY}=3"], {}), "planned": ([*dry_run, "--script-dir", "-"], {})}


def _read_by_a_selected_test(request, fixture: str) -> bool:
    return any(fixture in getattr(item, "fixturenames", ()) for item in request.session.items
               if getattr(item, "module", None) is request.module)


@pytest.fixture(scope="module", autouse=True)
def fresh(request, tmp_path_factory):
    """This module's two fresh processes (BATCH: `train` command lines; `launch` dry runs), started with the
    module's first test so that they run beside each other and its in-process tests; a fixture that reads one waits
    for it. Only those that a selected test reads are started."""
    import side_by_side

    batches, commands = {}, {}
    if _read_by_a_selected_test(request, "train_answers"):
        work = tmp_path_factory.mktemp("train_answers")
        env = user_environment("HYDRA_FULL_ERROR")
        cases = _train_cases(work, env)
        batches["train"] = (list(cases), work)
        commands["train"] = _batch(list(cases.values()), work, env=env, cwd=work)
    if _read_by_a_selected_test(request, "launch_answers"):
        work = tmp_path_factory.mktemp("launch_answers")
        cases = _launch_cases()
        batches["launch"] = (list(cases), work / "batch")
        commands["launch"] = _batch(list(cases.values()), work / "batch", cwd=work)
    started = side_by_side.start(commands)
    yield started, batches
    started.close()


def _fresh_answers(fresh, name: str) -> dict[str, Answer]:
    started, batches = fresh
    names, work = batches[name]
    return dict(zip(names, _answers(started.result(name), work)))


@pytest.fixture(scope="module")
def train_answers(fresh) -> dict[str, Answer]:
    return _fresh_answers(fresh, "train")


@pytest.fixture(scope="module")
def launch_answers(fresh) -> dict[str, Answer]:
    return _fresh_answers(fresh, "launch")


# --- one line, exit 2, "did you mean" ---------------------------------------------------------------------------

# (arguments, what the line must say): `train`, composed and validated before any Ray process
TRAIN_MISTAKES = [
    (["algo=grpo", "algorithm.fgrpo.gama=1"], r"algorithm\.fgrpo\.gama=1: no key 'gama' under 'algorithm\.fgrpo'; "
                                              r"did you mean 'gamma'\?.*keys there: base, gamma"),
    (["algo=grpoo"], r"algo=grpoo: no option 'grpoo' in config group algo; did you mean 'grpo'\? \(options: cispo"),
    (["algoo=grpo"], r"no key 'algoo' at the top level; did you mean 'algo'\?"),
    (["algorthm.fgrpo.gamma=1"], r"did you mean 'algorithm'"),
    (["backend=cpuu"], r"did you mean 'cpu'\?"),
    (["+algorithm.fgrpo.gamma=1"], r"already exists, so '\+' .* set it with algorithm\.fgrpo\.gamma=1"),
    (["~algorithm.fgrpo.gamm"], r"cannot delete: no key 'gamm'.*did you mean 'gamma'"),
    (["algorithm.fgrpo.gamma=[1"], r"cannot parse override 'algorithm\.fgrpo\.gamma=\[1'"),
    (["algorithm.fgrpo.gamma=abc"], r"algorithm\.fgrpo\.gamma=abc: expected a number \(the default is 0\.5\), got 'abc'"),
    (["algorithm.fgrpo.gamma=true"], r"expected a number .* got True"),
    (["algorithm.fgrpo.gamma=nan"], r"algorithm\.fgrpo\.gamma=nan: expected a number, got NaN"),
    (["trainer.total_epochs=abc"], r"trainer\.total_epochs=abc: expected a number \(the default is 30\)"),
    (["actor_rollout_ref.actor.optim.lr=1e-3x"], r"actor_rollout_ref\.actor\.optim\.lr=1e-3x: expected a number"),
    (["trainer.val_before_train=maybe"], r"trainer\.val_before_train=maybe: expected true or false"),
    (["-m", "algorithm.fgrpo.gamma=0.5,1"], r"use `fgrpo-verl launch"),
]


@pytest.mark.parametrize("args, message", TRAIN_MISTAKES, ids=[" ".join(a) for a, _ in TRAIN_MISTAKES])
def test_train_mistakes_are_one_line_exit_2(args, message, capsys):
    assert main(["train", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fgrpo-verl train: error: "), err
    assert re.search(message, err[0]), err[0]
    assert "To append to your config use" not in err[0]  # Hydra's advice adds the typo as a new key


@pytest.mark.parametrize("value, message", BAD_GAMMAS)
def test_bad_gamma_values_under_train_and_cfg_job_are_one_line(value, message, train_answers):
    """A misspelt key and bad γ values were 30-63-line tracebacks; `--cfg job` printed `gamma: -1` and exit 0."""
    for extra in ([], ["--cfg", "job"]):
        done = train_answers[f"gamma={value}{' '.join(['', *extra])}"]
        assert done.returncode == 2, done.stderr[-3000:]
        assert re.search(message, _one_error_line(done, "train"))
        assert done.stdout == "", "nothing may be printed (no config) for an invalid config"


@pytest.mark.parametrize("overrides, error", NO_GPU_ERRORS)
def test_a_config_error_on_a_machine_without_gpus_is_one_line(overrides, error, train_answers):
    """verl's platform detection warns where there is no accelerator; train holds those lines until the config
    passed its checks (the holding itself: tests/test_train_platform_warnings_on_cpu.py), so the error is the only
    line, not even a blank one."""
    done = train_answers[f"no GPU: {' '.join(overrides)}"]
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [f"fgrpo-verl train: error: {error}"], done.stderr
    assert done.stdout == "", done.stdout


def test_misspelt_key_through_the_real_entry_point_and_debug_shows_the_traceback():
    done = _cli("train", "algo=grpo", "algorithm.fgrpo.gama=1")
    assert done.returncode == 2
    assert "did you mean 'gamma'" in _one_error_line(done, "train")
    for how in ({"args": ["--debug"]}, {"env": {"HYDRA_FULL_ERROR": "1"}}):
        done = _cli("train", "algo=grpo", "algorithm.fgrpo.gama=1", *how.get("args", []), env=how.get("env"))
        assert done.returncode != 0 and "Traceback (most recent call last)" in done.stderr
        assert "did you mean 'gamma'" in done.stderr


def test_gae_discount_set_instead_of_the_focal_gamma_is_caught_by_doctor_and_train(capsys, train_answers,
                                                                                    monkeypatch):
    """`algorithm.gamma` is verl's GAE discount; with adv_estimator=fgrpo nothing reads it."""
    monkeypatch.setenv("WANDB_MODE", "offline")  # no W&B host here (doctor asks it when online)
    assert main(["doctor", "--no-ray", "algo=grpo", "algorithm.gamma=2"]) == 2
    out = capsys.readouterr().out
    fail = [line for line in out.splitlines() if "[FAIL]" in line]
    assert len(fail) == 1 and "algorithm.gamma=2 is verl's GAE discount" in fail[0]
    assert "set algorithm.fgrpo.gamma=2" in fail[0] and "all checks passed" not in out
    # (in a process of its own: doctor resolved verl's platform in this one, and backend=cpu needs its own)
    done = train_answers["gae discount"]
    assert done.returncode == 2 and "algorithm.gamma=0.99 is verl's GAE discount" in _one_error_line(done, "train")
    # verl's default (1.0), written or not, is fine; other estimators keep the discount
    assert main(["doctor", "--no-ray", "algo=grpo", "algorithm.gamma=1.0"]) == 0
    capsys.readouterr()
    from omegaconf import OmegaConf

    from fgrpo_verl.integration.validation import check_fgrpo

    check_fgrpo(OmegaConf.create({"algorithm": {"adv_estimator": "gae", "gamma": 0.99}}))


# (command line, what the line says, exit status): each sub-command and each class of bad input
MISTAKES = [
    (["launch", "paper_mian", "--dry-run"], r"did you mean 'paper_main'\?", 2),  # typo
    (["launch", "paper_main", "--dry-run", "--only", "qwen25_7b-grpo-g0p7"], r"did you mean 'qwen25_7b-grpo-g0p\d'", 2),
    (["launch", "paper_main", "--dry-run", "--only", "qwen25_7b-grpo-g0p5", "algorithm.fgrpo.gama=1"],
     r"invalid config: algorithm\.fgrpo\.gama=1: no key 'gama'.*did you mean 'gamma'", 2),
    (["launch", "paper_main", "--dry-run", "--only", "qwen25_7b-grpo-g0p5", "trainer.nnodes=two"],
     r"trainer\.nnodes=two: expected a number", 2),  # wrong type
    (["launch", "missing_dir/recipe.yaml", "--dry-run"], r"neither a file nor a shipped recipe", 2),  # missing file
    (["recipes", "paper_mian"], r"did you mean 'paper_main'", 2),
    (["demo", "--report-equal-q", "missing.json"], r"--report-equal-q 'missing\.json': .*No such file", 2),
    (["demo", "--task", "maze", "--q-levels", "0.5"], r"--q-levels is a \[raremode\] option", 2),
    (["demo", "--threads", "0"], r"--threads must be >= 1", 2),  # out of range
    (["eval", "--from-generations", "missing.jsonl", "--out", "o"], r"--from-generations missing\.jsonl: no such file", 2),
    (["eval", "--from-generations", ".", "--out", "o"], r"--from-generations \.: is a directory", 2),
    (["eval", "--model", "A=a", "--bench", "B=missing.jsonl", "--out", "o"], r"--bench B=missing\.jsonl: no such", 2),
    (["eval", "--model", "A=a", "--out", "o", "--n", "0"], r"--n must be >= 1", 2),
    (["eval", "--model", "A=a", "--out", "o", "--n", "64", "--significance", "A:A"],
     r"--significance-m 256 must be smaller than --n 64", 2),
    (["rare-nll", "--rare-set", "missing.jsonl", "--out", "o"], r"--rare-set missing\.jsonl: no such file", 2),
    (["prepare-deepscaler", "--input", "missing.json", "--tokenizer", "t", "--out-dir", "o"],
     r"--input missing\.json: no such file", 2),
    (["wandb-env", "--project", "p", "--algo", "fgrpo", "--gamma", "-1", "--n", "8", "--model", "m", "--seed", "1"],
     r"--gamma -1\.0 is invalid", 2),
    (["wandb-env", "--project", "p", "--algo", "fgrpo", "--gamma", "1", "--n", "0", "--model", "m", "--seed", "1"],
     r"--n 0 is invalid: expected an integer >= 1", 2),
    (["tail-miss", "--mu", "1.5", "--rho", "0.1", "--n", "8"], r"--mu 1\.5 is invalid", 2),
    (["m-gamma", "--gamma", "-0.5"], r"--gamma: gamma=-0\.5 is invalid: must be in \[0, inf\)", 2),
    (["m-gamma", "--lr", "0"], r"--lr 0\.0 is invalid", 2),
    (["simulate", "--zone-threshold", "2", "--out", "o"], r"--zone-threshold 2\.0 is invalid", 2),
    (["simulate", "--correct", "20000", "--out", "o"], r"--correct 20000 is invalid for --actions 12800", 2),
]


@pytest.mark.parametrize("args, message, status", MISTAKES, ids=[" ".join(a[:3]) for a, _, _ in MISTAKES])
def test_every_command_answers_bad_input_in_one_line(args, message, status, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(args) == status
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"fgrpo-verl {args[0]}: error: "), captured.err
    assert re.search(message, err[0]), err[0]


def test_eval_significance_m_larger_than_the_saved_n_names_the_flag(tmp_path, capsys):
    """n = 16 samples per problem, the default m = 256: the flag is named, not an anonymous 'm must be < n'."""
    gen = tmp_path / "g.jsonl"
    gen.write_text("".join(json.dumps({"run": run, "benchmark": "B", "problem_id": i, "correct": [i % 2] * 16}) + "\n"
                           for run in ("A", "C") for i in range(4)))
    assert main(["eval", "--from-generations", str(gen), "--out", str(tmp_path / "o"), "--no-plots",
                 "--significance", "A:C"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--significance-m 256 (A:C on B)" in err[0] and "lower --significance-m" in err[0]


def test_argparse_type_errors_are_one_line(train_answers):
    done = train_answers["tail-miss --mu abc"]
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        "fgrpo-verl tail-miss: error: argument --mu: invalid float value: 'abc' (see fgrpo-verl tail-miss --help)"]


# --- quiet commands ---------------------------------------------------------------------------------------------

# `fgrpo-verl doctor --no-ray` printing its checks and none of verl's import notices, and `fgrpo-verl train algo=grpo
# backend=cpu --cfg job` printing each line once, are checked on the README's own runs of those commands
# (tests/test_readme_on_cpu.py, CASES), fresh processes as a user runs them.

def test_info_and_cfg_print_each_line_once_and_info_takes_overrides_after_it(train_answers):
    for flags in ("--info config", "--info"):
        done = train_answers[flags]
        assert done.returncode == 0, done.stderr[-3000:]
        assert "INFO:" not in done.stderr and "DEBUG" not in done.stderr, done.stderr[:2000]
        assert len(done.stderr.strip().splitlines()) <= 1, done.stderr  # at most verl's platform line
        assert "fgrpo:" in done.stdout or "Config search path" in done.stdout


# --- launch: fast answers ---------------------------------------------------------------------------------------

def _fake_slurm(bin_dir: Path, squeue_exit: int) -> dict[str, str]:
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "squeue"
    script.write_text(f"#!/bin/sh\necho 'squeue: fatal: Could not establish a configuration source' >&2\n"
                      f"exit {squeue_exit}\n" if squeue_exit else "#!/bin/sh\nexit 0\n")
    script.chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def test_status_without_slurm_answers_before_composing_anything(tmp_path, monkeypatch, capsys):
    """The answer comes before any of the work that takes a launch its seconds: no recipe planned, no config
    composed, nothing checked with verl."""
    import fgrpo_verl.config.compose as compose
    import fgrpo_verl.launch as launch
    import fgrpo_verl.preflight as preflight

    def refuse(*a, **k):
        raise AssertionError("a config was composed before Slurm was asked")

    for module, name in ((compose, "_compose_raw"), (compose, "SharedComposer"), (preflight, "check_run"),
                         (launch, "plan_jobs")):
        monkeypatch.setattr(module, name, refuse)
    monkeypatch.setenv("PATH", _fake_slurm(tmp_path / "bin", squeue_exit=1)["PATH"])
    monkeypatch.chdir(tmp_path)
    assert main(["launch", "paper_main", "--status"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["fgrpo-verl launch: error: cannot ask Slurm which runs are queued (squeue: fatal: Could not "
                   "establish a configuration source); is this a Slurm login node?"]


# paper_main's --status / --dry-run, 36 runs, as a user runs them (a fresh `fgrpo-verl` process): the README's block
# runs both (tests/test_readme_on_cpu.py: 36 job scripts, 36 runs "not started"). That --status checks nothing
# with verl is test_status_names_the_runs_a_submit_names_without_checking_them_with_verl; that a dry run's
# refusal names the run, test_a_preflight_refusal_names_the_run_in_one_line_and_each_summary_reaches_its_script.
# Their CPU seconds are benchmarks/bench_launch.py's (--check holds them to its targets).


DRY_RUN_ONLY = ["--only", "qwen25_7b-grpo-g0p5", "qwen25_7b-dapo-g1p0"]


@pytest.fixture(scope="module")
def dry_run_without_data(tmp_path_factory):
    """`fgrpo-verl launch paper_main --dry-run --only A B` in a directory without the training data: (the directory,
    stdout, stderr). Two tests read it: the scripts it cannot render exactly, and the run names --status gives."""
    where = tmp_path_factory.mktemp("dry_run_without_data")
    here = os.getcwd()
    os.chdir(where)
    try:
        with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(io.StringIO()) as err:
            assert main(["launch", "paper_main", "--dry-run", "--script-dir", "-", *DRY_RUN_ONLY]) == 3
    finally:
        os.chdir(here)
    return where, out.getvalue(), err.getvalue()


def test_status_names_the_runs_a_submit_names_without_checking_them_with_verl(dry_run_without_data, monkeypatch,
                                                                              capsys):
    """--status submits nothing, so it skips validate_config and the preflight (no verl import): the run names, and
    so the checkpoint dirs and job names it reports on, are still the ones a dry run (and a submit) gives them."""
    where, dry_out, _ = dry_run_without_data
    monkeypatch.chdir(where)
    monkeypatch.setenv("PATH", _fake_slurm(where / "bin", squeue_exit=0)["PATH"])
    only = DRY_RUN_ONLY
    planned = re.findall(r"^### job (\S+) \(run ", dry_out, flags=re.M)
    import fgrpo_verl.preflight as preflight

    def refuse(*a, **k):
        raise AssertionError("--status checked a run with verl")

    monkeypatch.setattr(preflight, "check_run", refuse)
    assert main(["launch", "paper_main", "--status", *only]) == 0
    out = capsys.readouterr().out
    assert len(planned) == 2 and all(f"  {name}: not started" in out for name in planned), (planned, out)


def test_a_preflight_refusal_names_the_run_in_one_line_and_each_summary_reaches_its_script(launch_answers):
    """validate_config and the preflight check each run as it is planned (a fresh interpreter, as a user's
    `fgrpo-verl launch` is): a refusal is one line naming the run, exit 2; without it each run's preflight summary
    reaches its script. Both dry runs below are answered by one launcher process (BATCH)."""
    runs, key = PREFLIGHT_RUNS, TP_KEY
    refused, planned = launch_answers["refused"], launch_answers["planned"]
    done = refused
    assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("fgrpo-verl launch: error:")]
    assert errors == [f"fgrpo-verl launch: error: recipe paper_main, run {runs[0]}: {key}=3: a rollout replica "
                      "spans TP x DP x PP = 3 x 1 x 1 = 3 GPUs, which does not divide the 16 GPU(s) of trainer.nnodes "
                      "x trainer.n_gpus_per_node (verl's ActorRolloutRefWorker.init_model asserts world_size % "
                      f"(TP*DP*PP) == 0); set TP x DP x PP to a divisor of 16, e.g. {key}=2"], done.stderr[-3000:]
    # and without the override, each run's preflight summary reaches its script
    done = planned
    assert done.returncode == 3, done.stderr[-3000:]
    summaries = [line for line in done.stdout.splitlines() if line.startswith("### preflight: ")]
    assert len(summaries) == 4 and all("rollout replica(s) of TP" in line for line in summaries), summaries


def test_dry_run_without_data_says_which_scripts_are_not_final(dry_run_without_data, tmp_path, monkeypatch, capsys):
    """paper_main saves once per epoch: save_freq = steps per epoch, counted from the prepared data. Without the
    data a dry run cannot render it, and says so instead of printing the script without it."""
    _, out, err = dry_run_without_data
    assert out.count("### NOT the script a submit renders: training data data/deepscaler/train.parquet "
                     "not found here, so trainer.save_freq=<steps per epoch>") == 2
    assert "trainer.save_freq=" not in out.replace("trainer.save_freq=<", "")
    assert ("2 of 2 script(s) cannot be rendered exactly yet" in err
            and "qwen25_7b-grpo-g0p5, qwen25_7b-dapo-g1p0" in err)
    monkeypatch.chdir(tmp_path)
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "data" / "deepscaler").mkdir(parents=True)
    pq.write_table(pa.table({"x": list(range(2560))}), tmp_path / "data" / "deepscaler" / "train.parquet")
    assert main(["launch", "paper_main", "--dry-run", "--script-dir", "-", "--only", "qwen25_7b-grpo-g0p5"]) == 3
    captured = capsys.readouterr()
    assert "### NOT" not in captured.out and "cannot be rendered" not in captured.err
    assert "    trainer.save_freq=10 \\\n" in captured.out


def test_shared_composition_equals_hydra_for_every_selection_of_every_recipe():
    """launch composes each distinct selection of config groups once and applies the value overrides with Hydra's
    override parser and OmegaConf.update: the same config as a full Hydra compose (fgrpo_verl.config.compose.
    SharedComposer), once both have algorithm.fgrpo typed by its schema."""
    from omegaconf import OmegaConf

    from fgrpo_verl.config.compose import SharedComposer, _compose_raw, is_value_override
    from fgrpo_verl.config.paths import CONFIG_NAME
    from fgrpo_verl.config.schema import typed_fgrpo
    from fgrpo_verl.launch.recipe import load_recipe

    lists, seen = [], set()
    for name in ("paper_main", "group_size", "controls", "maze"):
        recipe = load_recipe(name)
        for run in recipe.runs:
            overrides = recipe.run_overrides(run, [])
            selection = tuple(o for o in overrides if not is_value_override(o))
            if selection not in seen or run is recipe.runs[-1]:
                seen.add(selection)
                lists.append(overrides)
    lists += [
        ["backend=cpu", "algo=dapo", "+ray_kwargs.ray_init.runtime_env.env_vars.X=1", "~trainer.v1.fgrpo_sync",
         "trainer.logger=[console,file]", "++algorithm.fgrpo.gamma=2", "data.train_files=${oc.env:HOME}/x",
         "+note=top-level", "~custom_reward_function", "data=legacy_data"],
        ["algorithm.fgrpo.gamma=0", "algo=cispo", "actor_rollout_ref.rollout.n=4"],  # values before selections
    ]
    composer = SharedComposer()
    shared_configs = [composer.compose(overrides) for overrides in lists]
    for overrides, shared in zip(lists, shared_configs):
        full = _compose_raw(overrides, CONFIG_NAME)  # a plain Hydra compose, nothing shared
        typed_fgrpo(full)
        assert OmegaConf.to_container(shared) == OmegaConf.to_container(full), overrides
        assert OmegaConf.is_struct(shared) and OmegaConf.is_struct(full)
    # a value override changes its copy only: the next run of the same selection starts from the recipe's values
    a = composer.compose(["algo=grpo", "algorithm.fgrpo.gamma=2"])
    b = composer.compose(["algo=grpo"])
    assert a.algorithm.fgrpo.gamma == 2 and b.algorithm.fgrpo.gamma == 0.5


def test_doctor_says_in_one_line_when_wandb_online_does_not_answer(capsys, monkeypatch):
    """What a job checks on its node before loading its model (fgrpo_verl/job/wandb_online.py), doctor checks
    here: a W&B host that answers passes, one that does not fails naming WANDB_MODE=offline and `wandb sync`;
    offline, or a run that does not log to W&B, nothing is asked. Loopback only: a local server, a closed port."""
    import http.server
    import socket
    import threading

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    for proxy in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.delenv(proxy, raising=False)
    monkeypatch.setenv("WANDB_MODE", "online")

    def doctor(*overrides):
        rc = main(["doctor", "--no-ray", "algo=grpo", *overrides])
        (line,) = [x for x in capsys.readouterr().out.splitlines() if "W&B host" in x]
        return rc, line

    try:
        monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{server.server_port}")
        assert doctor() == (0, f"  [ok]   W&B host: online, http://127.0.0.1:{server.server_port} answers")
    finally:
        server.shutdown()
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{closed}")
    rc, line = doctor()
    assert rc == 1 and line.startswith(f"  [FAIL] W&B host: RuntimeError: W&B at http://127.0.0.1:{closed} does not "
                                       "answer from ") and "WANDB_MODE=offline" in line and "`wandb sync`" in line
    assert doctor("trainer.logger=[console]") == (0, "  [ok]   W&B host: not used (trainer.logger has no wandb)")
    # online only by W&B's default (WANDB_MODE unset): a job may set its own mode, so a warning, not a failure
    monkeypatch.delenv("WANDB_MODE")
    rc, line = doctor()
    assert rc == 0 and line.startswith(f"  [warn] W&B host: W&B at http://127.0.0.1:{closed} does not answer from ")
    assert line.endswith("(WANDB_MODE is unset here: online by default)")
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert doctor() == (0, "  [ok]   W&B host: WANDB_MODE=offline: not checked")


# --- conveniences -----------------------------------------------------------------------------------------------

def test_version_recipes_and_m_gamma(capsys):
    assert main(["--version"]) == 0
    assert re.fullmatch(r"fgrpo-verl \S+ \(verl 0\.9\.1, python 3\.\d+\.\d+\)\n", capsys.readouterr().out)
    assert main(["recipes"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^paper_main +36 runs +F-GRPO Tables 1 and 6", out, re.MULTILINE)
    assert re.search(r"^maze +18 runs", out, re.MULTILINE)
    assert main(["recipes", "controls"]) == 0
    out = capsys.readouterr().out
    assert "  grpo-low_lr   algo=grpo algorithm.fgrpo.gamma=0.0 actor_rollout_ref.actor.optim.lr=6.8e-7" in out
    assert main(["m-gamma", "--gamma", "0", "0.5", "1", "2", "--lr", "1e-6", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [round(r["m_gamma"], 4) for r in rows] == [1.0, 0.6791, 0.5, 0.3125]  # App. N
    assert rows[1]["control_lr"] == pytest.approx(6.791e-7, rel=1e-3)  # the paper's 6.8e-7 control


def test_help_texts_name_what_each_option_means_for_each_task(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")  # argparse's width in a process without a terminal

    def _help(*command) -> str:
        assert main([*command, "--help"]) == 0
        return capsys.readouterr().out

    demo = re.sub(r"\s+", " ", _help("demo"))
    assert "rollouts per prompt (raremode) or per maze (maze)" in demo
    train = _help("train")
    for group in ("algo=cispo|dapo|grpo", "backend=cpu|cpu_vllm|gpu|gpu_fsdp2|gpu_hf", "base_model=",
                  "dataset=deepscaler|maze", "cluster=1x1|1x8|2x8|4x8", "validation=aime25|off"):
        assert group in train, train
    assert "--verbose" in train and "train.log" in train
    top = _help()
    assert "--version" in top and "--debug" in top and "m-gamma" in top and "recipes" in top


# --- W&B names from `wandb-env` ---------------------------------------------------------------------------------

def test_train_takes_the_run_name_that_wandb_env_exports_and_refuses_a_stale_one(train_answers):
    env = _wandb_env(*WANDB_ENV_ARGS)  # (the train commands below ran with these exported)
    assert env["FGRPO_EXPERIMENT_NAME"] == "fgrpo-g0.5-n8-Qwen2.5-7B-s1" and env["FGRPO_PROJECT_NAME"] == "fgrpo"
    done = train_answers["env name"]
    assert done.returncode == 0, done.stderr[-3000:]
    assert "  project_name: fgrpo\n" in done.stdout and "  experiment_name: fgrpo-g0.5-n8-Qwen2.5-7B-s1\n" in done.stdout
    assert "W&B run fgrpo/fgrpo-g0.5-n8-Qwen2.5-7B-s1 (from FGRPO_EXPERIMENT_NAME)" in done.stderr
    # the command line wins
    done = train_answers["env name, command line wins"]
    assert done.returncode == 0 and "  experiment_name: mine\n" in done.stdout
    # left over from another run in the same shell: gamma 1 is not the exported name's 0.5
    done = train_answers["env name, stale"]
    assert done.returncode == 2
    line = _one_error_line(done, "train")
    assert "FGRPO_EXPERIMENT_NAME=fgrpo-g0.5-n8-Qwen2.5-7B-s1" in line and "algorithm.fgrpo.gamma=1" in line


def test_train_with_wandb_logging_and_no_wandb_setup_fails_before_ray(train_answers):
    done = train_answers["wandb without setup"]  # HOME, W&B's config dir and ~/.netrc: empty
    assert done.returncode == 1
    line = _one_error_line(done, "train")
    assert "W&B is not set up on this machine" in line and "WANDB_MODE=offline" in line
    assert "Ray" not in done.stdout + done.stderr  # nothing was started: no Ray, not even verl's trainer imported
    assert not done.ray_started and not done.main_ppo_imported


# --- quiet output, unit level -----------------------------------------------------------------------------------

STEP_LINE = ("\x1b[36m(TaskRunnerV1 pid=123)\x1b[0m step:3 - global_seqlen/min:10 - critic/score/mean:0.4375 - "
             "response_length/mean:2.0 - actor/pg_loss:-0.012345 - fgrpo/g_mean:0.61 - timing_s/step:3.512\n")


def test_step_lines_and_what_else_reaches_the_terminal():
    from fgrpo_verl.cli.quiet import worth_echoing
    from fgrpo_verl.monitoring.console import step_summary

    assert step_summary(STEP_LINE, total=16) == (
        "step 3/16  score 0.4375  resp_len 2  pg_loss -0.01235  g_mean 0.61  step_s 3.512")
    assert step_summary("(pid=1) Training Progress: 50%|     | 1/2 [00:08<00:08]\n") is None
    assert worth_echoing("(TaskRunnerV1 pid=1) WARNING:2026:fgrpo-verl: actor_rollout_ref.rollout.n=1: ...")
    assert worth_echoing("(TaskRunnerV1 pid=1) INFO:x:Resuming from /c/global_step_1, setting global step to 1") == \
        "Resuming from /c/global_step_1, setting global step to 1"
    for noise in ("(SimpleStorageUnit pid=9) WARNING - target_num_threads 8 should not exceed total physical CPU",
                  "(pid=9) UserWarning: megatron engine is not available", "ray init kwargs: {'num_cpus': 32}"):
        assert worth_echoing(noise) is None


QUIET_CHILD = r"""
import subprocess, sys
from pathlib import Path
from fgrpo_verl.cli.quiet import quiet_terminal
with quiet_terminal(Path(sys.argv[1]), total_steps=2):
    print("verl config pprint " * 3)
    subprocess.run([sys.executable, "-c", "import sys; print('child noise'); print(sys.argv[1], file=sys.stderr)",
                    {step!r}])
    print("fgrpo-verl: WARNING: something to act on", file=sys.stderr)
print("after")
"""


def test_quiet_terminal_sends_every_process_output_to_the_log_and_echoes_ours(tmp_path):
    log = tmp_path / "run" / "train.log"
    code = QUIET_CHILD.replace("{step!r}", repr(STEP_LINE.strip()))
    done = subprocess.run([sys.executable, "-c", code, str(log)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["step 3/2  score 0.4375  resp_len 2  pg_loss -0.01235  g_mean 0.61  "
                                        "step_s 3.512", "after"]
    assert done.stderr.splitlines() == ["fgrpo-verl: WARNING: something to act on"]
    text = log.read_text()
    for line in ("verl config pprint", "child noise", "step:3 - global_seqlen", "something to act on"):
        assert line in text


def test_train_is_quiet_on_a_terminal_and_passes_everything_through_otherwise(monkeypatch):
    from fgrpo_verl.cli import train

    assert train.split_args(["a=1", "--quiet"]) == ([], ["a=1"], True)
    assert train.split_args(["--verbose", "a=1", "--cfg", "job"]) == (["--cfg", "job"], ["a=1"], False)
    assert train.split_args(["a=1"]) == ([], ["a=1"], None)
    with pytest.raises(ValueError, match="contradict"):
        train.split_args(["--quiet", "--verbose"])


def test_eval_without_vllm_says_what_to_install_or_use(tmp_path, monkeypatch, capsys):
    """A missing service: vLLM (GPU) on a machine that has none. One line, exit 1, the two ways out."""
    import builtins
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        real_import = builtins.__import__

        def no_vllm(name, *args, **kwargs):
            if name == "vllm" or name.startswith("vllm."):
                raise ModuleNotFoundError("No module named 'vllm'", name="vllm")
            return real_import(name, *args, **kwargs)

        monkeypatch.setattr(builtins, "__import__", no_vllm)
    bench = tmp_path / "b.jsonl"
    bench.write_text(json.dumps({"id": 0, "problem": "1 + 1 ?", "answer": "2"}) + "\n")
    (tmp_path / "model").mkdir()
    for name in ("config.json", "model.safetensors"):  # looks like an HF model dir: the sampler is what fails
        (tmp_path / "model" / name).write_text("{}")
    assert main(["eval", "--model", f"A={tmp_path / 'model'}", "--bench", f"B={bench}", "--n", "2", "--k-max", "2",
                 "--out", str(tmp_path / "o"), "--no-plots"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs vLLM" in err[0] and "--backend transformers" in err[0], err
