"""DeepScaleR preparation (paper §5.3) on a local fixture with a tokenizer built here (nothing downloaded)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from fgrpo_verl.cli import main as cli_main
from fgrpo_verl.data.deepscaler import SYSTEM_PROMPT, prepare, prompt_token_count
from fgrpo_verl.data.records import read_records

TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    """A word-level tokenizer with a chat template: one token per whitespace-separated word."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["<unk>", "<|system|>", "<|user|>", "<|assistant|>", *SYSTEM_PROMPT.split(), "x"]
    words += "What is 1 + 2 ? Solve for y : y = 3 conflict problem long Another one".split()
    vocab = {w: i for i, w in enumerate(dict.fromkeys(words))}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>")
    tok.chat_template = TEMPLATE
    out = tmp_path_factory.mktemp("tok")
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def tokenizer(tokenizer_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tokenizer_dir)


def _padded_problem(tokenizer, tokens: int) -> str:
    """A problem whose full prompt (template included) is exactly ``tokens`` tokens long."""
    overhead = prompt_token_count(tokenizer, "")
    return " ".join(["x"] * (tokens - overhead))


def _records(tokenizer):
    return [
        {"problem": "What is 1 + 1 ?", "answer": "2"},
        {"problem": "conflict problem", "answer": "3"},
        {"problem": " What is 1 + 1 ?\n", "answer": "2"},  # same problem, same answer: kept once
        {"problem": "conflict problem", "answer": "4"},  # same problem, other answer: both dropped
        {"problem": _padded_problem(tokenizer, 1025), "answer": "7"},  # one token over the bound
        {"problem": _padded_problem(tokenizer, 1024), "answer": "8"},  # exactly at the bound: kept
        {"problem": "Solve for y : y = 3", "answer": 3},
    ]


def test_prepare_drops_conflicts_and_long_prompts_and_adds_the_system_prompt(tokenizer):
    assert prompt_token_count(tokenizer, _padded_problem(tokenizer, 1024)) == 1024
    rows, stats = prepare(_records(tokenizer), tokenizer)
    assert (stats.read, stats.duplicate_copies_merged, stats.conflicting_problems_dropped) == (7, 1, 1)
    assert (stats.conflicting_records_dropped, stats.too_long_dropped, stats.written) == (2, 1, 3)
    assert [r["reward_model"]["ground_truth"] for r in rows] == ["2", "8", "3"]
    first = rows[0]
    assert first["prompt"] == [
        {"role": "system", "content": "Please reason step by step, and put your final answer within \\boxed{}."},
        {"role": "user", "content": "What is 1 + 1 ?"},
    ]
    assert first["data_source"] == "deepscaler" and first["reward_model"]["style"] == "rule"
    assert [r["extra_info"]["index"] for r in rows] == [0, 1, 2]


def test_max_prompt_tokens_is_the_bound(tokenizer):
    _, stats = prepare(_records(tokenizer), tokenizer, max_prompt_tokens=1025)
    assert stats.too_long_dropped == 0 and stats.written == 4
    with pytest.raises(ValueError, match="--max-prompt-tokens must be a positive integer, got 0"):
        prepare(_records(tokenizer), tokenizer, max_prompt_tokens=0)


@pytest.mark.parametrize("fmt", ["json", "jsonl", "parquet"])
def test_cli_reads_each_format_and_writes_verl_parquet(tmp_path, tokenizer_dir, tokenizer, fmt, capsys):
    records = _records(tokenizer)
    src = tmp_path / f"deepscaler.{fmt}"
    if fmt == "json":
        src.write_text(json.dumps(records))
    elif fmt == "jsonl":
        src.write_text("\n".join(json.dumps(r) for r in records))
    else:
        pd.DataFrame([{**r, "answer": str(r["answer"])} for r in records]).to_parquet(src)
    out = tmp_path / "out"
    rc = cli_main(["prepare-deepscaler", "--input", str(src), "--tokenizer", str(tokenizer_dir), "--out-dir", str(out)])
    assert rc == 0
    assert json.loads(capsys.readouterr().out)["train"]["written"] == 3
    frame = pd.read_parquet(out / "train.parquet")
    assert list(frame.columns) == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    assert len(frame) == 3 and frame["prompt"][2][1]["content"] == "Solve for y : y = 3"
    assert json.loads((out / "prepare.json").read_text())["stats"]["train"]["conflicting_problems_dropped"] == 1
    # no --val-input: verl still gets validation data, a labelled sample of the training prompts
    val = pd.read_parquet(out / "val.parquet")
    assert [list(p) for p in val["prompt"]] == [list(p) for p in frame["prompt"]]
    assert [e["split"] for e in val["extra_info"]] == ["val"] * 3
    assert json.loads((out / "prepare.json").read_text())["val_source"] == "train_sample"


def test_bad_input_is_rejected_naming_what_is_wrong(tmp_path, tokenizer):
    with pytest.raises(ValueError, match=r"record 0: record has no \['answer'\]"):
        prepare([{"problem": "p", "solution": "s"}], tokenizer)
    with pytest.raises(ValueError, match="'answer' is missing"):
        prepare([{"problem": "p", "answer": None}], tokenizer)
    bad = tmp_path / "d.csv"
    bad.write_text("problem,answer\n")
    with pytest.raises(ValueError, match="unsupported file type '.csv'"):
        read_records(bad)
    with pytest.raises(ValueError, match="no such file"):
        read_records(tmp_path / "missing.json")


def test_cli_bad_input_is_one_line_and_exit_2(tmp_path, tokenizer_dir, capsys):
    """prepare-deepscaler raises and leaves the line and the exit status to fgrpo_verl/cli/errors.py."""
    bad = tmp_path / "d.csv"
    bad.write_text("problem,answer\n")
    argv = ["prepare-deepscaler", "--input", str(bad), "--tokenizer", str(tokenizer_dir), "--out-dir", str(tmp_path)]
    assert cli_main(argv) == 2
    assert capsys.readouterr().err == (f"fgrpo-verl prepare-deepscaler: error: --input {bad}: unsupported file type "
                                       "'.csv'; use .parquet, .jsonl or .json\n")
    with pytest.raises(ValueError, match="unsupported file type"):
        cli_main(["--debug", *argv])


def test_jsonl_problems_may_hold_unicode_line_separators(tmp_path):
    # json.dumps(ensure_ascii=False) writes U+2028/U+2029/U+0085 raw; a record must not be cut there
    rows = [{"problem": "a\u2028b\u2029c\x85d", "answer": "1"}, {"problem": "e", "answer": "2"}]
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    assert read_records(path) == rows
