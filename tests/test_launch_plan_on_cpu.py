"""How ``fgrpo-verl launch`` plans: verl's checks in a process pool beside the composing (launch/validator.py) and
``--status`` from what a submit recorded (launch/manifest.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import fgrpo_verl.launch as launch
from fgrpo_verl.cli import main as cli_main
from fgrpo_verl.config.compose import compose
from fgrpo_verl.launch import manifest, plan_jobs
from fgrpo_verl.preflight import check_run
from fgrpo_verl.launch.recipe import load_recipe
from fgrpo_verl.launch.validator import Validator

TIMEOUT = "FGRPO_VLLM_WEIGHT_SYNC_TIMEOUT_S"


def _maze(*extra: str) -> list[str]:
    recipe = load_recipe("maze")
    (selected,) = recipe.select(["n4-g0p0"])
    return recipe.run_overrides(selected, list(extra))


def test_a_recipes_env_gives_the_same_verdict_in_process_and_in_the_pool(tmp_path, monkeypatch):
    """The recipe's ``env:`` travels with each check: the pool's process does not have it in its environment."""
    monkeypatch.delenv(TIMEOUT, raising=False)
    config = compose(_maze("backend=cpu_vllm", "data.max_prompt_length=100", "data.max_response_length=100"))
    args = [(config, str(tmp_path), False, {TIMEOUT: "ten"}), (config, str(tmp_path), False, {})]
    here = [check_run(*a) for a in args]
    pool = Validator(check_run, len(args), background=True)
    assert pool.background
    for a in args:
        assert pool.submit(*a) is None  # answered with results(), in order
    assert pool.results() == here
    assert here[0][0] == "refused" and f"{TIMEOUT} must be a positive number of seconds, got 'ten'" in here[0][1]
    assert here[1][0] == "ok"


def _boom(*args):
    os._exit(3)


def test_a_pool_that_dies_is_one_line(tmp_path):
    pool = Validator(_boom, 1, background=True)
    pool.submit(1)
    with pytest.raises(RuntimeError, match="^the process validating the configs with verl ended early: "):
        pool.results()


def test_status_reads_the_runs_a_submit_recorded_and_composes_for_another_plan(tmp_path, monkeypatch, capsys):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("squeue", "sacct"):  # an empty queue
        (bin_dir / tool).write_text("#!/bin/sh\nexit 0\n")
        (bin_dir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.chdir(tmp_path)
    assert cli_main(["launch", "maze", "--status"]) == 0
    composed = capsys.readouterr().out
    assert "n4-g0p0" in composed

    # what a submit records (cli/launch.py, before sbatch)
    recipe, jobs = plan_jobs("maze", None, [], tmp_path / "slurm_logs", tmp_path, check=False)
    key = manifest.plan_key(recipe.path, None, [], True)
    manifest.write_manifest(manifest.manifest_path(tmp_path, recipe.name), key, jobs)
    assert [r.job_name for r in manifest.read_manifest(manifest.manifest_path(tmp_path, "maze"), key)] == [
        j.job_name for j in jobs]

    planned = []
    real_plan = launch.plan_jobs
    monkeypatch.setattr(launch, "plan_jobs", lambda *a, **k: planned.append(a) or real_plan(*a, **k))
    assert cli_main(["launch", "maze", "--status"]) == 0
    assert capsys.readouterr().out == composed and planned == []  # read, not composed

    # another plan (an override, --only) is composed, as without the record
    assert cli_main(["launch", "maze", "--status", "--only", "n4-g0p0"]) == 0
    only = capsys.readouterr().out
    assert len(planned) == 1 and only.splitlines()[0] == composed.splitlines()[0]


def _sleep(*args):
    import time

    time.sleep(600)


@pytest.mark.timeout(120)  # a close that waited for the check would hang here
def test_closing_a_pool_stops_a_busy_check_instead_of_waiting_for_it():
    pool = Validator(_sleep, 1, background=True)
    pool.submit(1)
    processes = list(pool._pool._processes.values())
    pool.close()
    assert processes and not any(p.is_alive() for p in processes)


def test_an_edited_config_file_or_another_command_line_is_another_plan(tmp_path, monkeypatch):
    import shutil

    from fgrpo_verl.config import paths

    copy = tmp_path / "hydra_configs"
    shutil.copytree(paths.config_dir(), copy)
    monkeypatch.setattr(paths, "config_dir", lambda: copy)
    recipe = paths.recipes_dir() / "maze.yaml"
    before = manifest.plan_key(recipe, None, [], True)
    assert manifest.plan_key(recipe, None, [], True) == before
    assert manifest.plan_key(recipe, None, ["trainer.total_epochs=2"], True) != before
    assert manifest.plan_key(recipe, None, [], False) != before
    edited = copy / "fgrpo_trainer.yaml"
    edited.write_text(edited.read_text() + "\n# edited\n")
    assert manifest.plan_key(recipe, None, [], True) != before
