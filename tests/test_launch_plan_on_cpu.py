"""How ``fgrpo-verl launch`` plans: one run per normalised config (config/schema.py, job/identity.py) and
``--status`` from what a submit recorded (launch/manifest.py)."""

from __future__ import annotations

import os

import pytest
import yaml

import fgrpo_verl.launch as launch
from fgrpo_verl.cli import main as cli_main
from fgrpo_verl.launch import manifest, plan_jobs
from fgrpo_verl.config.paths import recipes_dir

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


RUN = "qwen25_7b-grpo-g0p0"


def _planned(tmp_path, name: str, spelled: str, command_line: list[str]):
    """The run RUN of a copy of paper_main in ``tmp_path`` whose own γ override is spelled ``spelled``, planned
    with ``command_line`` as ``launch paper_main --only RUN --dry-run`` plans it."""
    recipe = yaml.safe_load((recipes_dir() / "paper_main.yaml").read_text(encoding="utf-8"))
    (run,) = [r for r in recipe["runs"] if r["name"] == RUN]
    run["overrides"] = [f"algorithm.fgrpo.gamma={spelled}" if o.startswith("algorithm.fgrpo.gamma=") else o
                        for o in run["overrides"]]
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(recipe, sort_keys=False), encoding="utf-8")
    (job,) = plan_jobs(str(path), [RUN], command_line, tmp_path / "logs", tmp_path)[1]
    return job


@pytest.mark.parametrize("where", ["command line", "recipe"])
def test_gamma_written_as_an_integer_is_the_run_of_its_float(tmp_path, where):
    """``algorithm.fgrpo.gamma=0`` and ``=0.0`` are one config (the schema types γ as a float): one job name, one
    checkpoint directory, one W&B run, in the job script as planned."""
    import re

    if where == "command line":
        jobs = [_planned(tmp_path, "paper_main", "0.0", [f"algorithm.fgrpo.gamma={g}"]) for g in ("0", "0.0", "-0.0")]
    else:
        jobs = [_planned(tmp_path, f"paper_main_{i}", g, []) for i, g in enumerate(("0", "0.0", "-0.0"))]
    ints, floats, negative_zero = jobs
    assert (ints.job_name, ints.checkpoint_dir, ints.wandb_run_id) == (
        floats.job_name, floats.checkpoint_dir, floats.wandb_run_id) == (
        negative_zero.job_name, negative_zero.checkpoint_dir, negative_zero.wandb_run_id)
    assert re.search(r'^#SBATCH --job-name="grpo-g0-n8-Qwen2.5-7B-s42-[0-9a-f]{8}"$', ints.text, re.M)
    assert f"export WANDB_RUN_ID={ints.wandb_run_id}" in ints.text and ints.config.algorithm.fgrpo.gamma == 0.0
    # a γ that is another value is another run
    assert _planned(tmp_path, "paper_main", "0.0", ["algorithm.fgrpo.gamma=0.5"]).job_name != ints.job_name


@pytest.mark.parametrize("value, expected", [("abc", "expected a number"), ("true", "expected a number")])
def test_a_gamma_of_another_type_is_one_line_naming_the_key(tmp_path, value, expected):
    with pytest.raises(ValueError) as error:
        _planned(tmp_path, "paper_main", "0.0", [f"algorithm.fgrpo.gamma={value}"])
    (line,) = str(error.value).splitlines()
    assert line.startswith(f"recipe paper_main, run {RUN}: invalid config: algorithm.fgrpo.gamma={value}: {expected}")


@pytest.mark.parametrize("override, expected", [
    ("algorithm.fgrpo.gamma=-1", "algorithm.fgrpo.gamma=-1.0 is invalid: the focal strength must be a finite number >= 0"),
    ("~algorithm.fgrpo.gamma", "algorithm.fgrpo.gamma is missing: add +algorithm.fgrpo.gamma=0.5"),
    ("trainer.total_epochs=${nosuch.key}", "Interpolation key 'nosuch.key' not found (key trainer.total_epochs)"),
])
def test_a_bad_value_is_refused_in_one_line_in_the_words_of_its_check(tmp_path, override, expected):
    """The launcher names runs by γ before verl's checks; a value the estimator refuses gets the estimator's line
    (fgrpo_verl/focal.py), as ``fgrpo-verl train`` prints it, not a naming error; an interpolation that does not
    resolve, OmegaConf's first line with the key (not its multi-line trailer)."""
    with pytest.raises(ValueError) as error:
        _planned(tmp_path, "paper_main", "0.0", [override])
    (line,) = str(error.value).splitlines()
    assert line.startswith(f"recipe paper_main, run {RUN}: invalid config: {expected}")


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
