"""DeepScaleR prepared as in the F-GRPO paper (§5.3), from a local copy, into verl's RL parquet format.

The paper: "samples longer than 1,024 tokens filtered out; duplicates with conflicting answers removed; 39,202
samples remain", and the system prompt "Please reason step by step, and put your final answer within
\\boxed{}." is prepended to every training input. Steps, in this order:

1. read every input file (``.parquet``, ``.jsonl``, ``.json``: records with ``problem`` and ``answer``);
2. group records by problem text (surrounding whitespace stripped). A problem whose copies carry different
   answers is dropped entirely (the data cannot say which is right); copies that agree are kept once;
3. drop prompts longer than ``max_prompt_tokens`` tokens, counted on exactly what the model sees: the system
   and user messages through the tokenizer's chat template with the generation prompt (what verl's
   ``filter_overlong_prompts`` measures), or system + newline + problem when the tokenizer has no template;
4. write verl rows: ``data_source``, ``prompt`` (system + user messages), ``ability``, ``reward_model``
   (``ground_truth`` = the answer, scored by math-verify: fgrpo_verl/rewards.py), ``extra_info``.

    fgrpo-verl prepare-deepscaler --input deepscaler.json --tokenizer Qwen/Qwen2.5-7B --out-dir data/deepscaler
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from fgrpo_verl.data.records import read_records, write_rows

SYSTEM_PROMPT = "Please reason step by step, and put your final answer within \\boxed{}."
DATA_SOURCE = "deepscaler"
ABILITY = "math"
# the paper's bound on prompt length, in tokens of the trained model's tokenizer
MAX_PROMPT_TOKENS = 1024


@dataclass(frozen=True)
class PrepareStats:
    read: int
    duplicate_copies_merged: int
    conflicting_problems_dropped: int
    conflicting_records_dropped: int
    too_long_dropped: int
    written: int


def _problem_and_answer(record: dict, where: str) -> tuple[str, str]:
    missing = [k for k in ("problem", "answer") if k not in record]
    if missing:
        raise ValueError(f"{where}: record has no {missing} (keys: {sorted(record)}); DeepScaleR rows have problem, answer")
    problem, answer = record["problem"], record["answer"]
    if not isinstance(problem, str) or not problem.strip():
        raise ValueError(f"{where}: 'problem' must be a non-empty string, got {problem!r}")
    if answer is None or (isinstance(answer, float) and answer != answer):
        raise ValueError(f"{where}: 'answer' is missing (None/NaN) for problem {problem[:80]!r}")
    return problem.strip(), str(answer).strip()


def drop_conflicting_duplicates(pairs: list[tuple[str, str]]) -> tuple[list[tuple[str, str]], dict[str, int]]:
    """Keep each problem once; drop every problem whose copies disagree on the answer. First-seen order."""
    answers: dict[str, list[str]] = {}
    for problem, answer in pairs:
        answers.setdefault(problem, []).append(answer)
    kept = {problem: found for problem, found in answers.items() if len(set(found)) == 1}
    conflicting = [found for problem, found in answers.items() if problem not in kept]
    return [(problem, found[0]) for problem, found in kept.items()], {
        "duplicate_copies_merged": sum(len(found) - 1 for found in kept.values()),
        "conflicting_problems_dropped": len(conflicting),
        "conflicting_records_dropped": sum(map(len, conflicting)),
    }


def prompt_messages(problem: str) -> list[dict]:
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": problem}]


def prompt_token_count(tokenizer, problem: str) -> int:
    """Tokens of the prompt as the policy sees it (chat template + generation prompt when there is one)."""
    messages = prompt_messages(problem)
    if getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "keys"):  # BatchEncoding in newer transformers
            ids = ids["input_ids"]
        return len(ids)
    return len(tokenizer(f"{SYSTEM_PROMPT}\n{problem}", add_special_tokens=True)["input_ids"])


def verl_row(problem: str, answer: str, split: str, index: int, data_source: str = DATA_SOURCE, **extra) -> dict:
    """A verl RL-dataset row with the training prompt; ``extra`` goes into its ``extra_info``."""
    return {"data_source": data_source, "prompt": prompt_messages(problem), "ability": ABILITY,
            "reward_model": {"style": "rule", "ground_truth": answer},
            "extra_info": {"split": split, "index": index, "problem": problem, "answer": answer, **extra}}


def prepare(records: list[dict], tokenizer, split: str = "train", max_prompt_tokens: int = MAX_PROMPT_TOKENS):
    """verl rows and the counts of each filtering step (see the module docstring for the steps)."""
    if not isinstance(max_prompt_tokens, int) or max_prompt_tokens < 1:
        raise ValueError(f"--max-prompt-tokens must be a positive integer, got {max_prompt_tokens!r}")
    pairs = [_problem_and_answer(r, f"record {i}") for i, r in enumerate(records)]
    unique, counts = drop_conflicting_duplicates(pairs)
    short = [(p, a) for p, a in unique if prompt_token_count(tokenizer, p) <= max_prompt_tokens]
    rows = [verl_row(p, a, split, i) for i, (p, a) in enumerate(short)]
    stats = PrepareStats(read=len(records), too_long_dropped=len(unique) - len(short), written=len(rows), **counts)
    return rows, stats


# rows of the default val.parquet (a sample of the training prompts) when no --val-input is given
DEFAULT_VAL_ROWS = 64


def prepare_files(
    inputs: list[str], tokenizer_path: str, out_dir: str, val_inputs: list[str] = (), max_prompt_tokens: int = MAX_PROMPT_TOKENS
) -> dict[str, PrepareStats]:
    """Read ``inputs`` (and ``val_inputs``), write ``out_dir/train.parquet``, ``val.parquet`` and ``prepare.json``.

    Without ``val_inputs`` (the paper evaluates checkpoints offline, docs/evaluation.md) ``val.parquet`` holds the
    first :data:`DEFAULT_VAL_ROWS` prepared training prompts, marked ``split=val`` and ``val_source=train_sample``
    in prepare.json: verl's trainer always builds a validation loader from ``data.val_files``, so
    ``dataset=deepscaler`` works out of the box. It is a smoke check of the reward, not a held-out set; pass
    ``--val-input`` for one."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
    out = Path(out_dir)
    results = {}
    for split, files in (("train", inputs), ("val", val_inputs)):
        if not files:
            continue
        records = [r for f in files for r in read_records(f, f"--input {f}")]
        rows, stats = prepare(records, tokenizer, split, max_prompt_tokens)
        write_rows(rows, out / f"{split}.parquet")
        results[split] = stats
        if split == "train" and not val_inputs:
            sample = [{**row, "extra_info": {**row["extra_info"], "split": "val"}} for row in rows[:DEFAULT_VAL_ROWS]]
            write_rows(sample, out / "val.parquet")
    summary = {
        "inputs": [str(Path(f).resolve()) for f in inputs],
        "val_inputs": [str(Path(f).resolve()) for f in val_inputs],
        "val_source": "val_inputs" if val_inputs else "train_sample",
        "tokenizer": tokenizer_path,
        "max_prompt_tokens": max_prompt_tokens,
        "system_prompt": SYSTEM_PROMPT,
        "stats": {k: asdict(v) for k, v in results.items()},
    }
    (out / "prepare.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    return results
