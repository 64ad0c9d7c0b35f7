"""The first hour of a new user (issue 18): every mistake answered in one line, quiet commands, fast launcher
answers, and the conveniences a new user looks for. No Ray here (the end-to-end parts are in
``test_first_hour_e2e_on_cpu.py``).

Bad input, every class, every sub-command: one ``error:`` line (or argparse's usage + error) on stderr naming the
key or flag, the value and what is valid, "did you mean" for a misspelt name, exit status 2, no traceback unless
``--debug`` / ``HYDRA_FULL_ERROR=1``; a missing service (Slurm) one line and status 1.
"""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import sys
import time
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


def _one_error_line(done: subprocess.CompletedProcess, command: str) -> str:
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith(f"fgrpo-verl {command}: error: "), done.stderr[-3000:]
    return lines[0]


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
    (["algo=grpo", "--cfgg", "job"], r"flag '--cfgg' is not supported here; did you mean '--cfg'\?"),
    (["-m", "algorithm.fgrpo.gamma=0.5,1"], r"use `fgrpo-verl launch"),
]


@pytest.mark.parametrize("args, message", TRAIN_MISTAKES, ids=[" ".join(a) for a, _ in TRAIN_MISTAKES])
def test_train_mistakes_are_one_line_exit_2(args, message, capsys):
    assert main(["train", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fgrpo-verl train: error: "), err
    assert re.search(message, err[0]), err[0]
    assert "To append to your config use" not in err[0]  # Hydra's advice adds the typo as a new key


@pytest.mark.parametrize("value, message", [
    ("-1", r"algorithm\.fgrpo\.gamma=-1\.0 is invalid: the focal strength must be a finite number >= 0"),
    ("inf", r"algorithm\.fgrpo\.gamma=inf is invalid"),
    ("null", r"algorithm\.fgrpo\.gamma=None is invalid"),
    ("nan", r"expected a number, got NaN"),
])
def test_bad_gamma_values_under_train_and_cfg_job_are_one_line(value, message):
    """A misspelt key and bad γ values were 30-63-line tracebacks; `--cfg job` printed `gamma: -1` and exit 0."""
    for extra in ([], ["--cfg", "job"]):
        done = _cli("train", "algo=grpo", "backend=cpu", f"algorithm.fgrpo.gamma={value}", *extra)
        assert done.returncode == 2, done.stderr[-3000:]
        assert re.search(message, _one_error_line(done, "train"))
        assert done.stdout == "", "nothing may be printed (no config) for an invalid config"


def test_misspelt_key_through_the_real_entry_point_and_debug_shows_the_traceback():
    done = _cli("train", "algo=grpo", "algorithm.fgrpo.gama=1")
    assert done.returncode == 2
    assert "did you mean 'gamma'" in _one_error_line(done, "train")
    for how in ({"args": ["--debug"]}, {"env": {"HYDRA_FULL_ERROR": "1"}}):
        done = _cli("train", "algo=grpo", "algorithm.fgrpo.gama=1", *how.get("args", []), env=how.get("env"))
        assert done.returncode != 0 and "Traceback (most recent call last)" in done.stderr
        assert "did you mean 'gamma'" in done.stderr


def test_gae_discount_set_instead_of_the_focal_gamma_is_caught_by_doctor_and_train(capsys):
    """`algorithm.gamma` is verl's GAE discount; with adv_estimator=fgrpo nothing reads it."""
    assert main(["doctor", "--no-ray", "algo=grpo", "algorithm.gamma=2"]) == 2
    out = capsys.readouterr().out
    fail = [line for line in out.splitlines() if "[FAIL]" in line]
    assert len(fail) == 1 and "algorithm.gamma=2 is verl's GAE discount" in fail[0]
    assert "set algorithm.fgrpo.gamma=2" in fail[0] and "all checks passed" not in out
    # (a process of its own: doctor resolved verl's platform in this one, and backend=cpu needs its own)
    done = _cli("train", "algo=grpo", "backend=cpu", "algorithm.gamma=0.99", "--cfg", "job")
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


def test_argparse_type_errors_stay_a_short_block():
    done = _cli("tail-miss", "--mu", "abc", "--rho", "0.1", "--n", "8")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()  # argparse's usage (wrapped to the width) and its error line
    assert len(lines) <= 5 and lines[-1] == "fgrpo-verl tail-miss: error: argument --mu: invalid float value: 'abc'"


# --- quiet commands ---------------------------------------------------------------------------------------------

def test_doctor_prints_its_checks_and_nothing_of_verls_import_notices():
    done = _cli("doctor", "--no-ray", "algo=grpo")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr == "", done.stderr  # were: 5 "engine is not available" warnings, 2 accelerator warnings
    assert "[ok]   platform: " in done.stdout and "all checks passed" in done.stdout


def test_info_and_cfg_print_each_line_once_and_info_takes_overrides_after_it():
    for flags in (["--info", "config"], ["--cfg", "job"], ["--info"]):
        done = _cli("train", "algo=grpo", "backend=cpu", *flags)
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
    import fgrpo_verl.config.compose as compose

    def refuse(*a, **k):
        raise AssertionError("a config was composed before Slurm was asked")

    monkeypatch.setattr(compose, "_compose_raw", refuse)
    monkeypatch.setenv("PATH", _fake_slurm(tmp_path / "bin", squeue_exit=1)["PATH"])
    monkeypatch.chdir(tmp_path)
    started = time.monotonic()
    assert main(["launch", "paper_main", "--status"]) == 1
    assert time.monotonic() - started < 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["fgrpo-verl launch: error: cannot ask Slurm which runs are queued (squeue: fatal: Could not "
                   "establish a configuration source); is this a Slurm login node?"]


CPU_SPLIT = r"""
import contextlib, io, resource, sys
from fgrpo_verl.cli import main
with contextlib.redirect_stdout(io.StringIO()) as out:
    rc = main(sys.argv[1:])
me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
jobs = sum(line.startswith("### job ") for line in out.getvalue().splitlines())
print(rc, me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime, jobs,
      out.getvalue().count("not started"))
"""


def _cpu_seconds(*args, env=None, cwd=None) -> tuple[int, float, float, int, int]:
    """(exit status, CPU-s of the launch process, CPU-s of its children: the validating process, training job
    scripts printed (evaluation jobs print their own), runs "not started")."""
    full = dict(os.environ, **(env or {}))
    done = subprocess.run([sys.executable, "-c", CPU_SPLIT, *args], capture_output=True, text=True, env=full,
                          cwd=cwd, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rc, me, kids, scripts, not_started = done.stdout.split()
    return int(rc), float(me), float(kids), int(scripts), int(not_started)


# CPU-seconds per process for paper_main's --status / --dry-run (issue 18: 10 s of wall time on 2 idle cores).
# Measured with benchmarks/bench_launch.py at load 1.3-1.4 (docs/slurm.md): --status 8.2 CPU-s with an empty
# composition cache, 4.5 warm, no second process; --dry-run 8.8 (empty) / 4.3 (warm) in the launcher beside 7.6-8.2
# in the checking process. The bounds leave room for a loaded machine (CPU time grows with cache misses there too).
COLD_CPU_BOUND = 12
WARM_CPU_BOUND = 7


def test_paper_main_status_and_dry_run_stay_under_the_cpu_bound_per_process(tmp_path):
    """36 runs composed, named (and for --dry-run validated, preflighted and rendered): with an empty composition
    cache (a first launch), then warm (every later launch: no Hydra), each process under its bound. --status checks
    nothing with verl, so it starts no second process. CPU seconds, not wall: other work on a shared machine slows
    the wall clock, not the work (on 2f836bb: ~31 CPU-s in one process; docs/slurm.md has the wall times)."""
    env = {**_fake_slurm(tmp_path / "bin", squeue_exit=0), "FGRPO_VERL_CACHE_DIR": str(tmp_path / "cache")}
    rc, me, kids, _, not_started = _cpu_seconds("launch", "paper_main", "--status", env=env, cwd=tmp_path)
    assert rc == 0 and not_started == 36
    assert me < COLD_CPU_BOUND and kids < 0.5, f"--status, empty cache: {me:.1f} CPU-s here, {kids:.1f} in children"
    rc, me, kids, _, not_started = _cpu_seconds("launch", "paper_main", "--status", env=env, cwd=tmp_path)
    assert rc == 0 and not_started == 36
    assert me < WARM_CPU_BOUND and kids < 0.5, f"--status, warm: {me:.1f} CPU-s here, {kids:.1f} in children"
    rc, me, kids, scripts, _ = _cpu_seconds("launch", "paper_main", "--dry-run", env=env, cwd=tmp_path)
    assert rc == 0 and scripts == 36
    assert me < WARM_CPU_BOUND and kids < COLD_CPU_BOUND, \
        f"--dry-run, warm: {me:.1f} CPU-s here, {kids:.1f} CPU-s validating"
    assert kids > 2, "verl's validation did not run in a second process"


def test_status_names_the_runs_a_submit_names_without_checking_them_with_verl(tmp_path, monkeypatch, capsys):
    """--status submits nothing, so it skips validate_config and the preflight (no verl import): the run names, and
    so the checkpoint dirs and job names it reports on, are still the ones a dry run (and a submit) gives them."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", _fake_slurm(tmp_path / "bin", squeue_exit=0)["PATH"])
    only = ["--only", "qwen3_4b_base-grpo-g0p0", "qwen3_4b_base-grpo-g0p5"]
    assert main(["launch", "paper_main", "--dry-run", *only]) == 0
    planned = re.findall(r"^### job (\S+) \(run ", capsys.readouterr().out, flags=re.M)
    import fgrpo_verl.launch.preflight as preflight

    def refuse(*a, **k):
        raise AssertionError("--status checked a run with verl")

    monkeypatch.setattr(preflight, "check_run", refuse)
    assert main(["launch", "paper_main", "--status", *only]) == 0
    out = capsys.readouterr().out
    assert len(planned) == 2 and all(f"  {name}: not started" in out for name in planned), (planned, out)


def test_a_preflight_refusal_found_in_the_second_process_names_each_run_and_verl_stays_out_of_the_launcher(tmp_path):
    """With 4+ runs the launcher hands validate_config and the preflight to a second process (a fresh interpreter,
    as a user's `fgrpo-verl launch` is): a refusal found there is the same one line per run, exit 2, and the
    launcher itself never imports verl (that import is what the second process is for)."""
    code = ("import sys; from fgrpo_verl.cli import main; rc = main(sys.argv[1:]); "
            "print('verl imported' if 'verl' in sys.modules else 'no verl', file=sys.stderr); sys.exit(rc)")
    runs = ["qwen25_7b-grpo-g0p0", "qwen25_7b-grpo-g0p5", "qwen25_7b-grpo-g1p0", "qwen25_7b-grpo-g2p0"]
    key = "actor_rollout_ref.rollout.tensor_model_parallel_size"
    done = subprocess.run([sys.executable, "-c", code, "launch", "paper_main", "--dry-run", "--only", *runs,
                           f"{key}=3"], capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("fgrpo-verl launch: error:")]
    assert errors == [f"fgrpo-verl launch: error: recipe paper_main, run {runs[0]}: {key}=3: a rollout replica "
                      "spans TP x DP x PP = 3 x 1 x 1 = 3 GPUs, which does not divide the 16 GPU(s) of trainer.nnodes "
                      "x trainer.n_gpus_per_node (verl's ActorRolloutRefWorker.init_model asserts world_size % "
                      f"(TP*DP*PP) == 0); set TP x DP x PP to a divisor of 16, e.g. {key}=2"], done.stderr[-3000:]
    assert done.stderr.splitlines()[-1] == "no verl"
    # and without the override, each run's preflight summary reaches its script
    done = subprocess.run([sys.executable, "-c", code, "launch", "paper_main", "--dry-run", "--only", *runs],
                          capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert done.returncode == 0 and done.stderr.splitlines()[-1] == "no verl", done.stderr[-3000:]
    summaries = [line for line in done.stdout.splitlines() if line.startswith("### preflight: ")]
    assert len(summaries) == 4 and all("rollout replica(s) of TP" in line for line in summaries), summaries


def test_dry_run_without_data_says_which_scripts_are_not_final(tmp_path, monkeypatch, capsys):
    """paper_main saves once per epoch: save_freq = steps per epoch, counted from the prepared data. Without the
    data a dry run cannot render it; it used to print the script without it and say nothing."""
    monkeypatch.chdir(tmp_path)
    assert main(["launch", "paper_main", "--dry-run", "--only", "qwen25_7b-grpo-g0p5", "qwen25_7b-dapo-g1p0"]) == 0
    captured = capsys.readouterr()
    assert captured.out.count("### NOT the script a submit renders: training data data/deepscaler/train.parquet "
                              "not found here, so trainer.save_freq=<steps per epoch>") == 2
    assert "trainer.save_freq=" not in captured.out.replace("trainer.save_freq=<", "")
    assert ("2 of 2 script(s) cannot be rendered exactly yet" in captured.err
            and "qwen25_7b-grpo-g0p5, qwen25_7b-dapo-g1p0" in captured.err)
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "data" / "deepscaler").mkdir(parents=True)
    pq.write_table(pa.table({"x": list(range(2560))}), tmp_path / "data" / "deepscaler" / "train.parquet")
    assert main(["launch", "paper_main", "--dry-run", "--only", "qwen25_7b-grpo-g0p5"]) == 0
    captured = capsys.readouterr()
    assert "### NOT" not in captured.out and "cannot be rendered" not in captured.err
    assert "    trainer.save_freq=10 \\\n" in captured.out


def test_shared_composition_equals_hydra_for_every_selection_of_every_recipe():
    """launch composes each distinct selection of config groups once and applies the value overrides with Hydra's
    own applier: the same config as a full Hydra compose (fgrpo_verl.config.compose.SharedComposer)."""
    from omegaconf import OmegaConf

    from fgrpo_verl.config.compose import SharedComposer, _compose_raw, is_value_override
    from fgrpo_verl.launch.recipe import load_recipe
    from fgrpo_verl.config.paths import CONFIG_NAME

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
         "trainer.logger=[console,file]", "++algorithm.fgrpo.gamma=2", "data.train_files=${oc.env:HOME}/x"],
        ["algorithm.fgrpo.gamma=0", "algo=cispo", "actor_rollout_ref.rollout.n=4"],  # values before selections
    ]
    composer = SharedComposer()
    for overrides in lists:
        shared = composer.compose(overrides)
        full = _compose_raw(overrides, CONFIG_NAME)
        assert OmegaConf.to_container(shared) == OmegaConf.to_container(full), overrides
        assert OmegaConf.is_struct(shared) and OmegaConf.is_struct(full)
    # a value override changes its copy only: the next run of the same selection starts from the recipe's values
    a = composer.compose(["algo=grpo", "algorithm.fgrpo.gamma=2"])
    b = composer.compose(["algo=grpo"])
    assert a.algorithm.fgrpo.gamma == 2 and b.algorithm.fgrpo.gamma == 0.5


def _copies_of_the_configs(tmp_path, monkeypatch) -> tuple[Path, Path]:
    """fgrpo-verl's hydra_configs/ and verl's trainer/config/ copied to tmp_path, composition reading the copies
    (so that a test can edit, add or relink a YAML file)."""
    import shutil

    import fgrpo_verl.config.compose as compose
    from fgrpo_verl.config.paths import config_dir

    ours, verls = tmp_path / "hydra_configs", tmp_path / "verl_config"
    shutil.copytree(config_dir(), ours)
    shutil.copytree(compose.verl_config_dir(), verls)
    monkeypatch.setattr(compose, "config_dir", lambda: ours)
    monkeypatch.setattr(compose, "verl_config_dir", lambda: verls)
    return ours, verls


def _refuse_hydra(monkeypatch):
    import fgrpo_verl.config.compose as compose

    def refuse(*a, **k):
        raise AssertionError("Hydra composed a selection that is in the cache")

    monkeypatch.setattr(compose, "_compose_raw", refuse)


def test_composition_cache_answers_without_hydra_and_follows_every_yaml_file(tmp_path, monkeypatch):
    """A selection composed once is read back from disk by the next command (no Hydra), equal to Hydra's own
    composition; an edited, added or relinked YAML file, fgrpo-verl's or verl's, is another key, never a stale
    config."""
    from omegaconf import OmegaConf

    import fgrpo_verl.config.compose as compose
    from fgrpo_verl.config.paths import CONFIG_NAME

    monkeypatch.setenv(compose.CACHE_ENV, str(tmp_path / "cache"))
    import shutil

    ours, verls = _copies_of_the_configs(tmp_path, monkeypatch)
    selection = ["algo=dapo", "backend=cpu"]
    hydra = OmegaConf.to_container(compose._compose_raw(selection, CONFIG_NAME))
    assert OmegaConf.to_container(compose.SharedComposer().compose(selection)) == hydra  # stored
    real = compose._compose_raw
    with monkeypatch.context() as m:
        _refuse_hydra(m)
        warm = compose.SharedComposer().compose([*selection, "algorithm.fgrpo.gamma=2"])  # a new command's
    assert OmegaConf.is_struct(warm) and warm.algorithm.fgrpo.gamma == 2
    with pytest.raises(Exception, match="fgrpo_gama"):  # struct mode came back: a misspelt key is refused
        warm.algorithm.fgrpo_gama = 1
    warm.algorithm.fgrpo.gamma = hydra["algorithm"]["fgrpo"]["gamma"]
    assert OmegaConf.to_container(warm) == hydra
    assert compose._compose_raw is real

    def value_after(edit) -> float:
        edit()
        return compose.SharedComposer().compose(selection).actor_rollout_ref.actor.clip_ratio_high

    dapo = ours / "algo" / "dapo.yaml"
    text = dapo.read_text()
    assert "clip_ratio_high: 0.28" in text, "the edits below need DAPO's clip_ratio_high"
    assert value_after(lambda: dapo.write_text(text.replace("clip_ratio_high: 0.28", "clip_ratio_high: 0.31"))) == 0.31
    # verl's files are part of the key too
    trainer = verls / "ppo_trainer.yaml"
    trainer.write_text(trainer.read_text() + "\nfgrpo_cache_probe: 7\n")
    assert compose.SharedComposer().compose(selection).fgrpo_cache_probe == 7
    # the group's directory replaced by a symlink to another copy (Hydra follows links), then that copy edited
    other = tmp_path / "algo_elsewhere"
    (ours / "algo").rename(other)
    (ours / "algo").symlink_to(other, target_is_directory=True)
    assert value_after(lambda: None) == 0.31
    linked = other / "dapo.yaml"
    assert value_after(lambda: linked.write_text(linked.read_text().replace("0.31", "0.33"))) == 0.33
    # the link pointed at a third copy whose files are also reachable by another path of the tree (Hydra reads
    # them through the link)
    third = ours / "zz_copy_of_algo"
    shutil.copytree(other, third)
    (third / "dapo.yaml").write_text((third / "dapo.yaml").read_text().replace("0.33", "0.35"))
    (ours / "algo").unlink()
    (ours / "algo").symlink_to(third, target_is_directory=True)
    assert value_after(lambda: None) == 0.35
    # a new option file: a new key (its directory listing is part of the key), the others still composed right
    (third / "mine.yaml").write_text("# @package _global_\n")
    with monkeypatch.context() as m:
        _refuse_hydra(m)
        with pytest.raises(AssertionError, match="Hydra composed"):
            compose.SharedComposer().compose(selection)


def test_composition_cache_that_is_broken_foreign_or_unwritable_is_a_miss(tmp_path, monkeypatch):
    """A truncated entry, an entry of other selections, an entry from a config that JSON cannot hold, a cache
    directory someone else could write (group-writable or a symlink), one that cannot be created, no home
    directory at all: the config is composed by Hydra, correctly, nothing is raised, and nothing is left."""
    import os

    from omegaconf import OmegaConf

    import fgrpo_verl.config.compose as compose
    from fgrpo_verl.config.paths import CONFIG_NAME

    monkeypatch.setenv(compose.CACHE_ENV, str(tmp_path / "cache"))
    selection = ("algo=cispo",)
    hydra = OmegaConf.to_container(compose._compose_raw(selection, CONFIG_NAME))
    composed = lambda: OmegaConf.to_container(compose.SharedComposer().compose(list(selection)))  # noqa: E731
    assert composed() == hydra
    cache = compose.ComposeCache()
    entry = cache._dir() / cache._name(selection)
    assert entry.is_file() and cache.load(selection) is not None
    entry.write_text(entry.read_text()[:100])  # truncated
    assert cache.load(selection) is None and composed() == hydra and cache.load(selection) is not None  # rewritten
    cache.store(("algo=grpo",), compose._compose_raw(("algo=grpo",), CONFIG_NAME))
    entry.write_text((cache._dir() / cache._name(("algo=grpo",))).read_text())  # another selection's entry
    assert cache.load(selection) is None and composed() == hydra
    # a value JSON cannot hold as it is (an integer key): not stored, composed each time
    odd = OmegaConf.create({1: "one"})
    cache.store(("odd=1",), odd)
    assert not (cache._dir() / cache._name(("odd=1",))).exists()
    # the cache directory open to others (group-writable): not used, neither read nor written
    compose_dir = tmp_path / "cache" / "compose"
    os.chmod(compose_dir, 0o770)
    with monkeypatch.context() as m:
        _refuse_hydra(m)
        with pytest.raises(AssertionError, match="Hydra composed"):
            compose.SharedComposer().compose(list(selection))
    os.chmod(compose_dir, 0o700)
    # this user's own directory left open by fgrpo-verl 41860da (0755): made private, then used
    os.chmod(compose_dir, 0o755)
    with monkeypatch.context() as m:
        _refuse_hydra(m)
        assert OmegaConf.to_container(compose.SharedComposer().compose(list(selection))) == hydra
    assert compose_dir.stat().st_mode & 0o777 == 0o700
    # a symlink where the cache's directory should be: not followed
    monkeypatch.setenv(compose.CACHE_ENV, str(tmp_path / "cache2"))
    (tmp_path / "cache2").mkdir()
    (tmp_path / "cache2" / "compose").symlink_to(compose_dir, target_is_directory=True)
    with monkeypatch.context() as m:
        _refuse_hydra(m)
        with pytest.raises(AssertionError, match="Hydra composed"):
            compose.SharedComposer().compose(list(selection))
    # a file where the cache directory should be; no home directory to put one in
    (tmp_path / "a-file").write_text("not a directory")
    monkeypatch.setenv(compose.CACHE_ENV, str(tmp_path / "a-file"))
    assert composed() == hydra and (tmp_path / "a-file").read_text() == "not a directory"
    monkeypatch.delenv(compose.CACHE_ENV)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setattr(Path, "home", classmethod(lambda cls: (_ for _ in ()).throw(RuntimeError("no home"))))
    assert compose.cache_root() is None and composed() == hydra
    assert not list((tmp_path / "cache").rglob("*.tmp"))


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


def _help(*command) -> str:
    done = _cli(*command, "--help")
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_help_texts_name_what_each_option_means_for_each_task():
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

def _wandb_env(*args) -> dict[str, str]:
    done = _cli("wandb-env", *args)
    assert done.returncode == 0, done.stderr
    return dict(re.match(r"export (\w+)=(.*)", line).groups() for line in done.stdout.splitlines())


def test_train_takes_the_run_name_that_wandb_env_exports_and_refuses_a_stale_one():
    env = _wandb_env("--project", "fgrpo", "--algo", "fgrpo", "--gamma", "0.5", "--n", "8", "--model",
                     "Qwen/Qwen2.5-7B", "--seed", "1", "--group", "gamma-sweep")
    assert env["FGRPO_EXPERIMENT_NAME"] == "fgrpo-g0.5-n8-Qwen2.5-7B-s1" and env["FGRPO_PROJECT_NAME"] == "fgrpo"
    done = _cli("train", "algo=grpo", "backend=cpu", "algorithm.fgrpo.gamma=0.5", "--cfg", "job", env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "  project_name: fgrpo\n" in done.stdout and "  experiment_name: fgrpo-g0.5-n8-Qwen2.5-7B-s1\n" in done.stdout
    assert "W&B run fgrpo/fgrpo-g0.5-n8-Qwen2.5-7B-s1 (from FGRPO_EXPERIMENT_NAME)" in done.stderr
    # the command line wins
    done = _cli("train", "algo=grpo", "backend=cpu", "trainer.experiment_name=mine", "--cfg", "job", env=env)
    assert done.returncode == 0 and "  experiment_name: mine\n" in done.stdout
    # left over from another run in the same shell: gamma 1 is not the exported name's 0.5
    done = _cli("train", "algo=grpo", "backend=cpu", "algorithm.fgrpo.gamma=1", "--cfg", "job", env=env)
    assert done.returncode == 2
    line = _one_error_line(done, "train")
    assert "FGRPO_EXPERIMENT_NAME=fgrpo-g0.5-n8-Qwen2.5-7B-s1" in line and "algorithm.fgrpo.gamma=1" in line


def test_train_with_wandb_logging_and_no_wandb_setup_fails_before_ray(tmp_path):
    env = {"HOME": str(tmp_path), "WANDB_CONFIG_DIR": str(tmp_path / "wandb-config"), "NETRC": str(tmp_path / "none")}
    started = time.monotonic()
    done = _cli("train", "algo=grpo", "backend=cpu", "trainer.logger=[console,wandb]", "--verbose", env=env,
                cwd=tmp_path)
    assert done.returncode == 1
    line = _one_error_line(done, "train")
    assert "W&B is not set up on this machine" in line and "WANDB_MODE=offline" in line
    assert "Ray" not in done.stdout + done.stderr and time.monotonic() - started < 120  # nothing was started


# --- quiet output, unit level -----------------------------------------------------------------------------------

STEP_LINE = ("\x1b[36m(TaskRunnerV1 pid=123)\x1b[0m step:3 - global_seqlen/min:10 - critic/score/mean:0.4375 - "
             "response_length/mean:2.0 - actor/pg_loss:-0.012345 - fgrpo/g_mean:0.61 - timing_s/step:3.512\n")


def test_step_lines_and_what_else_reaches_the_terminal():
    from fgrpo_verl.job.quiet import step_summary, worth_echoing

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
from fgrpo_verl.job.quiet import quiet_terminal
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

    assert train.split_output_flags(["a=1", "--quiet"]) == (["a=1"], True)
    assert train.split_output_flags(["--verbose", "a=1"]) == (["a=1"], False)
    assert train.split_output_flags(["a=1"]) == (["a=1"], None)
    with pytest.raises(ValueError, match="contradict"):
        train.split_output_flags(["--quiet", "--verbose"])


# --- the demo's per-step scoring ---------------------------------------------------------------------------------

def test_per_step_scoring_reads_weights_into_one_model_exactly_as_from_pretrained(tmp_path):
    """The exact per-step metrics read each step's checkpoint; reading only its weights into the previous step's
    model gives the same policy as building a new one with from_pretrained (tied embeddings included)."""
    import torch

    from fgrpo_verl.tasks.maze.model import build_model, save_model_dir
    from fgrpo_verl.tasks.maze.tokenizer import build_tokenizer
    from fgrpo_verl.tasks.raremode.evaluate import load_policy, load_weights

    tok = build_tokenizer()
    dirs = []
    for seed in (0, 1):
        model = build_model("tiny", tok, seed=seed)
        dirs.append(save_model_dir(model, tok, tmp_path / f"step{seed}"))
    ids = torch.tensor([[1, 2, 3, 4]])
    model = load_weights(None, dirs[0])
    first = model(ids).logits
    model = load_weights(model, dirs[1])
    assert torch.equal(model(ids).logits, load_policy(dirs[1])(ids).logits)
    assert not torch.equal(first, model(ids).logits)
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    other = build_model("small", tok, seed=0)
    with pytest.raises(ValueError, match="do not fit the model of the previous step"):
        load_weights(other, dirs[1])


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
