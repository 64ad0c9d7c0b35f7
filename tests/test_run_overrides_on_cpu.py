"""A run's override list (Recipe.run_overrides): each plain key once, at the value Hydra would apply anyway."""

from __future__ import annotations

import os

import pytest

from fgrpo_verl.config.compose import compose
from fgrpo_verl.launch.recipe import load_recipe


def _raw(recipe, run, extra):
    return [*recipe.common, *run.overrides, *extra, f"trainer.project_name={recipe.project}"]


def test_a_command_line_value_replaces_the_runs_own_line_and_the_config_is_unchanged():
    recipe = load_recipe("paper_main")
    # a run of the App. P curves: the recipe's common `validation=off`, then its own `validation=aime25`
    run = next(r for r in recipe.runs if "validation=aime25" in r.overrides)
    extra = ["algorithm.fgrpo.gamma=0.7", "+trainer.save_per_epoch=true", "trainer.total_epochs=3"]
    listed = recipe.run_overrides(run, extra)
    keys = [o.split("=", 1)[0] for o in listed]
    assert len(keys) == len(set(keys)), listed
    assert "algorithm.fgrpo.gamma=0.7" in listed and not [o for o in listed if o.startswith("algorithm.fgrpo.gamma=0")
                                                           and o != "algorithm.fgrpo.gamma=0.7"]
    assert "validation=aime25" in listed and "validation=off" not in listed
    assert "trainer.total_epochs=3" in listed and "trainer.total_epochs=10" not in listed
    # Hydra composes the full list (every line, later wins) to the same config
    assert compose(listed) == compose(_raw(recipe, run, extra))


def test_dict_values_merge_so_they_are_kept_as_written():
    recipe = load_recipe("paper_main")
    run = next(r for r in recipe.runs if r.name == "qwen25_7b-grpo-g0p0")
    extra = ["algorithm.fgrpo={gamma:1.0}", "algorithm.fgrpo={success_threshold:0.25}"]
    listed = recipe.run_overrides(run, extra)
    assert listed[-3:-1] == extra
    config = compose(listed)
    assert config == compose(_raw(recipe, run, extra))
    assert config.algorithm.fgrpo.gamma == 1.0 and config.algorithm.fgrpo.success_threshold == 0.25


def test_added_and_deleted_keys_keep_their_order():
    recipe = load_recipe("paper_main")
    run = recipe.runs[0]
    extra = ["+a.b=1", "++a.b=2", "~x"]
    listed = recipe.run_overrides(run, extra)
    assert listed[-4:-1] == extra and listed[-1] == f"trainer.project_name={recipe.project}"
    assert recipe.run_overrides(run) == _raw(recipe, run, [])  # nothing repeated: nothing dropped


def test_the_label_shows_what_the_command_line_changed_in_the_run():
    recipe = load_recipe("paper_main")
    run = next(r for r in recipe.runs if r.name == "qwen25_7b-grpo-g0p5")
    assert recipe.label(run) == run.name
    assert recipe.label(run, ["algorithm.fgrpo.gamma=0.5"]) == run.name  # the same value: nothing changed
    assert recipe.label(run, ["algorithm.fgrpo.gamma=0.7"]) == "qwen25_7b-grpo-g0p5 [algorithm.fgrpo.gamma=0.7]"
    # the last of two is what runs; a key the run does not set itself (common's, a new one) is not its label's
    assert recipe.label(run, ["algorithm.fgrpo.gamma=0.7", "algorithm.fgrpo.gamma=1.0", "trainer.total_epochs=3",
                              "+x.y=1"]) == "qwen25_7b-grpo-g0p5 [algorithm.fgrpo.gamma=1.0]"
    assert recipe.label(run, ["algorithm.fgrpo.gamma=0.7", "algorithm.fgrpo.gamma=0.5"]) == run.name
    assert recipe.label(run, ["++algorithm.fgrpo.gamma=0.7"]) == "qwen25_7b-grpo-g0p5 [algorithm.fgrpo.gamma=0.7]"
    assert recipe.label(run, ["++algorithm.fgrpo.gamma=0.5"]) == run.name


def test_dry_run_and_status_name_the_run_as_it_runs_and_say_why_its_baseline_is_gone(tmp_path, monkeypatch, capsys):
    from fgrpo_verl.cli import main

    monkeypatch.chdir(tmp_path)
    args = ["launch", "paper_main", "--only", "qwen25_7b-grpo-g0p5", "algorithm.fgrpo.gamma=0.7"]
    assert main([*args, "--dry-run"]) == 3
    out = capsys.readouterr().out
    label = "qwen25_7b-grpo-g0p5 [algorithm.fgrpo.gamma=0.7]"
    # the summary: the run's row and, in one line, why its evaluation has no baseline
    assert any(line.startswith(label + " ") for line in out.splitlines()), out
    assert (f"no γ = 0 baseline for {label} (algorithm.fgrpo.gamma on the command line sets every run's γ, the γ = 0 "
            "run's too)") in out
    # each job's details and scripts, on request
    assert main([*args, "--dry-run", "--script-dir", "-"]) == 3
    out = capsys.readouterr().out
    assert f"(run {label})" in out
    assert (f"### no γ = 0 baseline for {label} in the recipe (algorithm.fgrpo.gamma on the command line sets every "
            "run's γ, the γ = 0 run's too)") in out
    # the script holds the γ that runs, once
    assert "algorithm.fgrpo.gamma=0.7" in out and "algorithm.fgrpo.gamma=0.5" not in out
    # a Slurm that has nothing queued
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "squeue").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "squeue").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    assert main([*args, "--status"]) == 0
    assert capsys.readouterr().out.startswith(label + "  ")


@pytest.mark.parametrize("pasted", [
    ["qwen25_7b-grpo-g0p5 [algorithm.fgrpo.gamma=0.7]"],           # quoted, as one argument
    ["qwen25_7b-grpo-g0p5", "[algorithm.fgrpo.gamma=0.7]"],         # unquoted
])
def test_a_label_pasted_into_only_is_the_run_it_names(pasted):
    from fgrpo_verl.cli.launch import split_only

    assert split_only(pasted, []) == (["qwen25_7b-grpo-g0p5"], ["algorithm.fgrpo.gamma=0.7"])


def test_labels_with_several_overrides_and_list_values_split_back():
    from fgrpo_verl.cli.launch import split_only

    assert split_only(["a", "[x.y=1", "trainer.logger=[console,wandb]]"], ["z=2"]) == (
        ["a"], ["x.y=1", "trainer.logger=[console,wandb]", "z=2"])
    assert split_only(["a [trainer.logger=[console,wandb]]", "b"], []) == (["a", "b"], ["trainer.logger=[console,wandb]"])
    # an override whose value is a list is not a label's part
    assert split_only(["a", "trainer.logger=[console,wandb]"], []) == (["a"], ["trainer.logger=[console,wandb]"])
