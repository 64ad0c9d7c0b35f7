"""`fgrpo-verl prepare-benchmarks`: the paper's benchmarks to local files, as a subcommand of the installed package
(a pip-installed user has no scripts/ directory). `datasets` is a stand-in serving tiny hub-shaped rows: the hub is
not reachable here; the conversions themselves are tests/test_prepare_benchmarks_on_cpu.py's."""

from __future__ import annotations

import json
import sys
import types

import pytest

from fgrpo_verl.cli import main as cli_main
from fgrpo_verl.evaluation.formats import load_benchmark
from fgrpo_verl.evaluation.prepare import BENCHMARKS

ROWS = {
    "MATH500": [{"problem": "Compute $1/2+0$.", "answer": "\\frac{1}{2}", "unique_id": "test/a/1.json"}],
    "GPQA": [{"Question": "Which particle?", "Correct Answer": "muon", "Incorrect Answer 1": "pion",
              "Incorrect Answer 2": "kaon", "Incorrect Answer 3": "tau", "Record ID": "rec1"}],
    "SynLogic": [{"data_source": "arrow_maze", "prompt": [{"role": "user", "content": "Solve the puzzle."}],
                  "reward_model": {"ground_truth": "[[1,2]]"}}],
    "AIME24": [{"id": 60, "problem": "Find x.", "answer": "204"}],
}


@pytest.fixture
def hub(monkeypatch):
    """A `datasets` whose load_dataset answers from ROWS, keyed by each benchmark's (or an overridden) repo."""
    calls = []

    def load_dataset(repo, config=None, split=None, data_files=None):
        calls.append((repo, config, split, data_files))
        name = next((n for n, s in BENCHMARKS.items() if s.source.repo == repo), None) or repo.split("/")[-1]
        return ROWS[name]

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    return calls


def test_subcommand_writes_loadable_files_and_prints_the_eval_flags(hub, tmp_path, capsys):
    out = tmp_path / "benchmarks"
    assert cli_main(["prepare-benchmarks", "--out", str(out), "--only", "MATH500", "GPQA", "SynLogic"]) == 0
    assert hub == [("HuggingFaceH4/MATH-500", None, "test", None), ("Idavidrein/gpqa", "gpqa_diamond", "train", None),
                   ("MiniMaxAI/SynLogic", None, "validation", {"validation": "synlogic_easy/validation.parquet"})]
    for name in ("MATH500", "GPQA", "SynLogic"):
        assert len(load_benchmark(out / f"{name}.jsonl", name)) == 1
    captured = capsys.readouterr()
    assert f"--bench MATH500={out / 'MATH500.jsonl'}" in captured.out
    assert f"--bench GPQA={out / 'GPQA.jsonl'} --bench-scorer GPQA=boxed" in captured.out
    assert "SynLogic: no verifier ships with fgrpo-verl" in captured.err
    # both places a verifier goes: eval's flag, and the variable the recipes read for launch
    assert "export FGRPO_SYNLOGIC_SCORER=MODULE:FUNCTION" in captured.err
    assert json.loads((out / "MATH500.jsonl").read_text())["answer"] == "\\frac{1}{2}"


def test_source_override_and_verl_parquet(hub, tmp_path):
    import pandas as pd

    assert cli_main(["prepare-benchmarks", "--out", str(tmp_path), "--only", "AIME24",
                     "--source", "AIME24=someone/AIME24:train", "--verl-parquet"]) == 0
    assert hub == [("someone/AIME24", None, "train", None)]
    rows = pd.read_parquet(tmp_path / "AIME24.parquet")
    assert list(rows["data_source"]) == ["AIME24"] and rows["reward_model"][0]["ground_truth"] == "204"


@pytest.mark.parametrize("args, message", [
    (["--source", "AIME24"], "--source expects NAME=REPO[:CONFIG]:SPLIT"),
    (["--source", "GSM8K=a/b:test"], "--source expects NAME=REPO[:CONFIG]:SPLIT with NAME in"),
    (["--source", "AIME24=a/b"], "source must be REPO:SPLIT or REPO:CONFIG:SPLIT, got 'a/b'"),
])
def test_a_bad_source_is_one_line_and_exit_2_before_any_download(hub, tmp_path, capsys, args, message):
    assert cli_main(["prepare-benchmarks", "--out", str(tmp_path), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [err] and err.startswith("fgrpo-verl prepare-benchmarks: error: ") and message in err
    assert hub == []


def test_help_lists_the_options(capsys):
    assert cli_main(["prepare-benchmarks", "--help"]) == 0
    text = capsys.readouterr().out
    for flag in ("--out", "--only", "--source", "--verl-parquet"):
        assert flag in text
