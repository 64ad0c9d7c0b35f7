"""Benchmark preparation: hub-row conversion on tiny local fixtures, and the script with a stand-in `datasets`."""

import json
import runpy
import sys
import types
from pathlib import Path

import pytest

from fgrpo_verl.evaluation.formats import load_benchmark
from fgrpo_verl.evaluation.prepare import BENCHMARKS, convert_rows, normalise_answer, parse_source, prepare_benchmarks
from fgrpo_verl.evaluation.scorers import is_correct, resolve_scorer

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "prepare_benchmarks.py"

FIXTURES = {
    "MATH500": [{"problem": "Compute $1/2+0$.", "solution": "...", "answer": "\\frac{1}{2}", "unique_id": "test/a/1.json"}],
    "AIME24": [{"id": 60, "problem": "Find x.", "answer": "204"}],
    "AMC23": [{"question": "How many?", "answer": 27.0}, {"question": "Ratio?", "answer": 0.5}],
    "Minerva": [{"question": "Speed?", "answer": "$3 \\times 10^8$"}],
    "Olympiad": [{"id": 1606, "question": "Find all n.", "final_answer": ["$n=2$"]},
                 {"id": 1607, "question": "Pair?", "final_answer": ["1", "2"]}],
    "GPQA": [{"Question": "Which particle?", "Correct Answer": "muon", "Incorrect Answer 1": "pion",
              "Incorrect Answer 2": "kaon", "Incorrect Answer 3": "tau", "Record ID": "rec1"}],
    "IFEval": [{"key": 1000, "prompt": "Write two lines.", "instruction_id_list": ["length_constraints:number_paragraphs"],
                "kwargs": [{"num_paragraphs": 2}]}],
    "SynLogic": [{"data_source": "arrow_maze", "prompt": [{"role": "user", "content": "Solve the puzzle."}],
                  "reward_model": {"ground_truth": "[[1,2]]"}, "extra_info": {"game_data_str": "{}"}}],
}


def test_every_paper_benchmark_has_a_spec():
    assert set(BENCHMARKS) == {"MATH500", "AIME24", "AIME25", "AMC23", "Minerva", "Olympiad", "GPQA", "IFEval", "SynLogic"}
    assert [b for b, s in BENCHMARKS.items() if s.group == "ood"] == ["GPQA", "IFEval", "SynLogic"]


def test_math_conversions():
    assert convert_rows("MATH500", FIXTURES["MATH500"]) == [
        {"id": "test/a/1.json", "problem": "Compute $1/2+0$.", "answer": "\\frac{1}{2}"}]
    assert [r["answer"] for r in convert_rows("AMC23", FIXTURES["AMC23"])] == ["27", "0.5"]
    assert [r["id"] for r in convert_rows("AMC23", FIXTURES["AMC23"])] == ["0", "1"]
    assert convert_rows("Minerva", FIXTURES["Minerva"])[0]["answer"] == "3 \\times 10^8"
    assert [r["answer"] for r in convert_rows("Olympiad", FIXTURES["Olympiad"])] == ["n=2", "1, 2"]
    assert convert_rows("AIME24", FIXTURES["AIME24"])[0]["id"] == "60"


def test_gpqa_shuffles_options_and_keeps_the_letter_of_the_correct_one():
    rec = convert_rows("GPQA", FIXTURES["GPQA"])[0]
    lines = rec["problem"].splitlines()
    options = {line[0]: line[3:] for line in lines if line[:2] in ("A)", "B)", "C)", "D)")}
    assert sorted(options.values()) == ["kaon", "muon", "pion", "tau"]
    assert options[rec["answer"]] == "muon"
    assert convert_rows("GPQA", FIXTURES["GPQA"]) == [rec]  # deterministic
    boxed = resolve_scorer("boxed")
    assert is_correct(boxed, f"so \\boxed{{{rec['answer']}}}", rec)
    wrong = next(letter for letter in "ABCD" if letter != rec["answer"])
    assert not is_correct(boxed, f"\\boxed{{{wrong}}}", rec)


def test_ifeval_and_synlogic_conversions():
    rec = convert_rows("IFEval", FIXTURES["IFEval"])[0]
    assert rec == {"id": "1000", "problem": "Write two lines.",
                   "answer": {"instruction_id_list": ["length_constraints:number_paragraphs"], "kwargs": [{"num_paragraphs": 2}]}}
    syn = convert_rows("SynLogic", FIXTURES["SynLogic"])[0]
    assert syn["problem"] == "Solve the puzzle." and syn["answer"] == "[[1,2]]" and syn["data_source"] == "arrow_maze"


def test_ifeval_scorer_calls_lm_eval_with_the_record(monkeypatch):
    seen = {}

    def process_results(doc, results):
        seen["doc"], seen["results"] = doc, results
        return {"prompt_level_strict_acc": results[0].count("\n\n") == 1}

    for name in ("lm_eval", "lm_eval.tasks", "lm_eval.tasks.ifeval"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "lm_eval.tasks.ifeval.utils", types.SimpleNamespace(process_results=process_results))
    rec = {**convert_rows("IFEval", FIXTURES["IFEval"])[0], "data_source": "IFEval"}
    assert is_correct(resolve_scorer("ifeval"), "one\n\ntwo", rec)
    assert seen["doc"] == {"key": "1000", "prompt": "Write two lines.",
                           "instruction_id_list": ["length_constraints:number_paragraphs"], "kwargs": [{"num_paragraphs": 2}]}
    assert not is_correct(resolve_scorer("ifeval"), "one line", rec)


@pytest.mark.parametrize("value", [True, [], {"a": 1}])
def test_bad_answers_are_rejected(value):
    with pytest.raises(ValueError, match="answer"):
        normalise_answer(value)


def test_missing_columns_and_unknown_names_are_reported(tmp_path):
    with pytest.raises(ValueError, match=r"row 0: no answer column"):
        convert_rows("MATH500", [{"problem": "x"}])
    with pytest.raises(ValueError, match=r"unknown benchmark\(s\) \['GSM8K'\]; known: MATH500, "):
        prepare_benchmarks(tmp_path / "out", ["GSM8K"])  # before anything is downloaded or written
    assert not (tmp_path / "out").exists()
    with pytest.raises(ValueError, match="duplicate id"):
        convert_rows("AIME24", FIXTURES["AIME24"] * 2)
    assert parse_source("a/b:cfg:test").config == "cfg"
    with pytest.raises(ValueError, match="REPO:SPLIT"):
        parse_source("a/b")


def test_script_writes_loadable_benchmark_files(tmp_path, monkeypatch, capsys):
    calls = []

    def load_dataset(repo, config=None, split=None, data_files=None):
        calls.append((repo, config, split, data_files))
        name = next(n for n, s in BENCHMARKS.items() if s.source.repo == repo)
        return FIXTURES[name]

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    monkeypatch.setattr(sys, "argv", ["prepare_benchmarks.py", "--out", str(tmp_path), "--only", "MATH500", "GPQA", "SynLogic"])
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_path(str(SCRIPT), run_name="__main__")
    assert exit_info.value.code == 0
    assert calls[0] == ("HuggingFaceH4/MATH-500", None, "test", None)
    assert calls[1] == ("Idavidrein/gpqa", "gpqa_diamond", "train", None)
    assert calls[2] == ("MiniMaxAI/SynLogic", None, "validation", {"validation": "synlogic_easy/validation.parquet"})
    for name in ("MATH500", "GPQA", "SynLogic"):
        records = load_benchmark(tmp_path / f"{name}.jsonl", name)
        assert len(records) == len(FIXTURES[name])
    out = capsys.readouterr().out
    assert f"--bench GPQA={tmp_path / 'GPQA.jsonl'} --bench-scorer GPQA=boxed" in out
    assert json.loads((tmp_path / "MATH500.jsonl").read_text())["answer"] == "\\frac{1}{2}"


def test_every_prepared_benchmark_has_a_table9_prompt_group():
    """The names prepare_benchmarks.py writes select the paper's prompt group without --bench-group."""
    from fgrpo_verl.evaluation.prepare import BENCHMARKS
    from fgrpo_verl.evaluation.prompts import benchmark_group

    groups = {name: benchmark_group(name) for name in BENCHMARKS}
    assert all(known for _, known in groups.values()), groups
    assert groups["IFEval"][0] == "ifeval" and groups["SynLogic"][0] == "synlogic" and groups["GPQA"][0] == "gpqa"
    assert {groups[n][0] for n in ("MATH500", "AIME24", "AIME25", "AMC23", "Minerva", "Olympiad")} == {"math"}
