"""Benchmark-file loading, prompt building and model-path resolution of `fgrpo-verl eval`."""

import json

import pandas as pd
import pytest

from fgrpo_verl.evaluation.formats import load_benchmark
from fgrpo_verl.evaluation.generate import resolve_model_path
from fgrpo_verl.evaluation.prompts import PAPER_SYSTEM_PROMPT, PromptSetting, encode_prompt
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
    with pytest.raises(ValueError, match="unsupported file type '.csv'; use .parquet, .jsonl or .json"):
        load_benchmark(tmp_path / "b.csv", "B")
    with pytest.raises(ValueError, match="no such file"):
        load_benchmark(tmp_path / "none.jsonl", "B")


class FakeTokenizer:
    """Renders messages as JSON and 'tokenizes' to code points, recording whether special tokens were asked for."""

    chat_template = "set"
    bos_token_id = None

    def __init__(self):
        self.add_special = []

    def apply_chat_template(self, messages, tokenize, add_generation_prompt, **kwargs):
        assert tokenize is False and add_generation_prompt is True
        return json.dumps({"messages": messages, **kwargs})

    def __call__(self, text, add_special_tokens):
        self.add_special.append(add_special_tokens)
        return {"input_ids": [ord(ch) for ch in text]}


def test_encode_prompt_variants():
    tok = FakeTokenizer()
    rec = {"id": "1", "problem": "What is 2+2?"}

    def text(record, system, style="chat", kwargs=None):
        ids, rendered = encode_prompt(record, tok, PromptSetting(system, kwargs or {}), style)
        assert ids == [ord(ch) for ch in rendered]  # the ids are the tokenization of exactly that text
        return rendered

    chat = json.loads(text(rec, PAPER_SYSTEM_PROMPT, kwargs={"enable_thinking": True}))
    assert chat == {"messages": [{"role": "system", "content": PAPER_SYSTEM_PROMPT},
                                 {"role": "user", "content": "What is 2+2?"}], "enable_thinking": True}
    assert json.loads(text(rec, None))["messages"] == [{"role": "user", "content": "What is 2+2?"}]
    assert tok.add_special == [False, False]  # the template writes its own special tokens
    assert text(rec, "Sys", "raw") == "Sys\n\nWhat is 2+2?"
    assert text(rec, None, "raw") == "What is 2+2?"
    assert tok.add_special[-2:] == [True, True]  # plain text gets the tokenizer's BOS (if it has one), once
    assert text({**rec, "prompt": "verbatim"}, "Sys") == "verbatim"
    assert tok.add_special[-1] is False
    msgs = [{"role": "user", "content": "own"}]
    assert json.loads(text({**rec, "prompt": msgs}, "Sys"))["messages"] == msgs
    tok.chat_template = None
    with pytest.raises(ValueError, match="--prompt-style raw"):
        encode_prompt(rec, tok, PromptSetting("Sys"), "chat")


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


def test_jsonl_strings_may_hold_unicode_line_separators(tmp_path):
    """JSON allows U+2028/U+2029/U+0085 unescaped inside strings (json.dumps(ensure_ascii=False) writes them raw);
    only "\\n" ends a JSONL record, so such a problem must load as one record, not break its line in two."""
    rows = [{"id": "a\u2028b", "problem": "x\u2028y\u2029z\x85w", "answer": "1"}, {"id": 2, "problem": "q", "answer": "2"}]
    path = tmp_path / "b.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    recs = load_benchmark(path, "B")
    assert [(r["id"], r["problem"]) for r in recs] == [("a\u2028b", "x\u2028y\u2029z\x85w"), ("2", "q")]
