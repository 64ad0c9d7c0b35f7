"""Benchmark-file loading, prompt building and model-path resolution of `fgrpo-verl eval`."""

import json

import pandas as pd
import pytest

from fgrpo_verl.evaluation.formats import load_benchmark
from fgrpo_verl.evaluation.generate import PAPER_SYSTEM_PROMPT, build_prompt, resolve_model_path
from fgrpo_verl.evaluation.scorers import last_boxed


def test_jsonl_json_and_parquet_load_the_same(tmp_path):
    rows = [{"id": 3, "problem": "p", "answer": "1"}, {"problem": "q", "answer": "2", "data_source": "src", "level": 5}]
    (tmp_path / "b.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    (tmp_path / "b.json").write_text(json.dumps(rows))
    pd.DataFrame([{"id": "3", "problem": "p", "answer": "1", "data_source": None, "level": None},
                  {"id": "1", "problem": "q", "answer": "2", "data_source": "src", "level": 5}]).to_parquet(tmp_path / "b.parquet")
    for suffix in ("jsonl", "json", "parquet"):
        recs = load_benchmark(tmp_path / f"b.{suffix}", "B")
        assert [r["id"] for r in recs] == ["3", "1"]
        assert [r["data_source"] for r in recs] == ["B", "src"]
        assert recs[1]["answer"] == "2"


@pytest.mark.parametrize(
    "rows,match",
    [
        ([{"problem": "p"}], "missing required key 'answer'"),
        ([{"answer": "1"}], "needs a non-empty string 'problem'"),
        ([{"prompt": [{"role": "user"}], "answer": "1"}], "'prompt' must be a string or a non-empty list"),
        ([{"id": 1, "problem": "p", "answer": "1"}, {"id": "1", "problem": "q", "answer": "2"}], "duplicate id '1'"),
        ([], "has no records"),
    ],
)
def test_bad_benchmark_files_are_rejected(tmp_path, rows, match):
    path = tmp_path / "b.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(ValueError, match=match):
        load_benchmark(path, "B")


def test_bad_suffix_and_missing_file(tmp_path):
    with pytest.raises(ValueError, match="suffix '.csv'"):
        load_benchmark(tmp_path / "b.csv", "B")
    with pytest.raises(ValueError, match="does not exist"):
        load_benchmark(tmp_path / "none.jsonl", "B")


class FakeTokenizer:
    chat_template = "set"

    def apply_chat_template(self, messages, tokenize, add_generation_prompt, **kwargs):
        assert tokenize is False and add_generation_prompt is True
        return json.dumps({"messages": messages, **kwargs})


def test_build_prompt_variants():
    tok = FakeTokenizer()
    rec = {"id": "1", "problem": "What is 2+2?"}
    chat = json.loads(build_prompt(rec, tok, PAPER_SYSTEM_PROMPT, "chat", {"enable_thinking": True}))
    assert chat == {"messages": [{"role": "system", "content": PAPER_SYSTEM_PROMPT},
                                 {"role": "user", "content": "What is 2+2?"}], "enable_thinking": True}
    assert json.loads(build_prompt(rec, tok, "", "chat"))["messages"] == [{"role": "user", "content": "What is 2+2?"}]
    assert build_prompt(rec, tok, "Sys", "raw") == "Sys\n\nWhat is 2+2?"
    assert build_prompt(rec, tok, "", "raw") == "What is 2+2?"
    assert build_prompt({**rec, "prompt": "verbatim"}, tok, "Sys", "chat") == "verbatim"
    msgs = [{"role": "user", "content": "own"}]
    assert json.loads(build_prompt({**rec, "prompt": msgs}, tok, "Sys", "chat"))["messages"] == msgs
    tok.chat_template = None
    with pytest.raises(ValueError, match="--prompt-style raw"):
        build_prompt(rec, tok, "Sys", "chat")
    with pytest.raises(ValueError, match="prompt style"):
        build_prompt(rec, tok, "Sys", "fancy")


def test_resolve_model_path(tmp_path):
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text("{}")
    (hf / "model.safetensors").write_bytes(b"")
    assert resolve_model_path(hf) == hf
    ckpt = tmp_path / "global_step_10"
    (ckpt / "actor" / "huggingface").mkdir(parents=True)
    (ckpt / "actor" / "huggingface" / "config.json").write_text("{}")
    with pytest.raises(ValueError, match="verl.model_merger merge --backend fsdp"):
        resolve_model_path(ckpt)
    (ckpt / "actor" / "huggingface" / "model.safetensors").write_bytes(b"")
    assert resolve_model_path(ckpt) == ckpt / "actor" / "huggingface"
    with pytest.raises(ValueError, match="not a directory"):
        resolve_model_path(tmp_path / "missing")


def test_last_boxed_handles_nested_braces():
    assert last_boxed("a \\boxed{1} then \\boxed{\\frac{1}{2}} end") == "\\frac{1}{2}"
    assert last_boxed("no box") is None
    assert last_boxed("\\boxed{unclosed") is None
