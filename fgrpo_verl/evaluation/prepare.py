"""Conversion of the paper's benchmarks (§5.3) from their hub layouts to the local benchmark format.

Pure functions (hub row dicts in, local records out) so they are testable without network access;
:func:`prepare_benchmarks` (``fgrpo-verl prepare-benchmarks``) downloads with ``datasets`` and calls them. Hub ids
and column names below are the commonly used public copies; they could not be checked from the build machine (no
hub access), so every source can be overridden (``--source NAME=REPO[:CONFIG]:SPLIT``) and the converters accept the
usual column-name variants. Scorers: math -> ``math`` (math-verify), GPQA -> ``boxed`` (letter in \\boxed{}),
IFEval -> ``ifeval``, SynLogic -> its task verifiers (``--bench-scorer SynLogic=module:function``).
"""

from __future__ import annotations

import functools
import json
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from fgrpo_verl.data.deepscaler import verl_row
from fgrpo_verl.data.records import write_rows


@dataclass(frozen=True)
class HubSource:
    repo: str
    split: str
    config: str | None = None
    data_files: str | None = None  # a file inside the repo, for datasets without named configs


def _first(row: dict, keys: tuple[str, ...], what: str, index: int):
    for key in keys:
        if key in row and row[key] is not None:
            return row[key]
    raise ValueError(f"row {index}: no {what} column among {list(keys)}; columns are {sorted(row)}")


def normalise_answer(value) -> str:
    """Reference answers as strings: 27.0 -> "27", ["$\\frac12$"] -> "\\frac12", ["1", "2"] -> "1, 2"."""
    if isinstance(value, bool):
        raise ValueError(f"answer must be text or a number, got {value!r}")
    if isinstance(value, (list, tuple)):
        if not value:
            raise ValueError("answer list is empty")
        return ", ".join(normalise_answer(v) for v in value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    if not isinstance(value, str):
        raise ValueError(f"answer must be text or a number, got {type(value).__name__} {value!r:.60}")
    text = value.strip()
    if len(text) >= 2 and text.startswith("$") and text.endswith("$"):
        text = text.strip("$").strip()
    return text


PROBLEM_KEYS = ("problem", "question", "Problem", "Question")
ANSWER_KEYS = ("answer", "Answer", "final_answer", "expected_answer")
ID_KEYS = ("unique_id", "id", "ID", "idx", "key")


def math_record(row: dict, index: int) -> dict:
    pid = next((row[k] for k in ID_KEYS if k in row and row[k] is not None), index)
    return {"id": str(pid), "problem": str(_first(row, PROBLEM_KEYS, "problem", index)).strip(),
            "answer": normalise_answer(_first(row, ANSWER_KEYS, "answer", index))}


LETTERS = "ABCD"


def gpqa_record(row: dict, index: int, seed: int = 0) -> dict:
    """Multiple choice with the four options shuffled by a per-row seeded permutation; answer is the letter."""
    correct = str(_first(row, ("Correct Answer",), "correct answer", index)).strip()
    wrong = [str(_first(row, (f"Incorrect Answer {i}",), f"incorrect answer {i}", index)).strip() for i in (1, 2, 3)]
    options = [correct] + wrong
    order = list(range(4))
    random.Random(seed * 1_000_003 + index).shuffle(order)
    shuffled = [options[i] for i in order]
    question = str(_first(row, ("Question",), "question", index)).strip()
    body = "\n".join(f"{LETTERS[i]}) {text}" for i, text in enumerate(shuffled))
    pid = row.get("Record ID", index)
    return {"id": str(pid), "problem": f"{question}\n\n{body}", "answer": LETTERS[order.index(0)]}


def ifeval_record(row: dict, index: int) -> dict:
    return {"id": str(row.get("key", index)), "problem": str(_first(row, ("prompt",), "prompt", index)),
            "answer": {"instruction_id_list": list(_first(row, ("instruction_id_list",), "instruction_id_list", index)),
                       "kwargs": [dict(k) for k in _first(row, ("kwargs",), "kwargs", index)]}}


def synlogic_record(row: dict, index: int) -> dict:
    """verl-style rows (prompt messages, reward_model.ground_truth, data_source, extra_info) -> problem + answer;
    the user turn becomes ``problem`` so the evaluation applies the paper's per-model system prompt (Table 9)."""
    prompt = row.get("prompt")
    if isinstance(prompt, (list, tuple)):
        users = [m["content"] for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        if not users:
            raise ValueError(f"row {index}: 'prompt' has no user message")
        problem = users[-1]
    else:
        problem = _first(row, ("prompt",) + PROBLEM_KEYS, "prompt", index)
    reward = row.get("reward_model")
    answer = reward.get("ground_truth") if isinstance(reward, dict) else _first(row, ANSWER_KEYS, "answer", index)
    if answer is None:
        raise ValueError(f"row {index}: no ground truth (reward_model.ground_truth or answer)")
    source = row.get("data_source")
    out = {"id": str(row.get("id", index)), "problem": str(problem), "answer": answer,
           "data_source": None if source is None else str(source), "extra_info": row.get("extra_info")}
    return {key: value for key, value in out.items() if value is not None}


@dataclass(frozen=True)
class BenchmarkSpec:
    name: str
    source: HubSource
    convert: Callable[[dict, int], dict]
    scorer: str  # suggested --bench-scorer; "MODULE:FUNCTION" = bring your own (fails loudly until replaced)
    group: str  # "math" (in-domain) or "ood"


BENCHMARKS: dict[str, BenchmarkSpec] = {spec.name: spec for spec in [
    BenchmarkSpec("MATH500", HubSource("HuggingFaceH4/MATH-500", "test"), math_record, "math", "math"),
    BenchmarkSpec("AIME24", HubSource("HuggingFaceH4/aime_2024", "train"), math_record, "math", "math"),
    BenchmarkSpec("AIME25", HubSource("yentinglin/aime_2025", "train"), math_record, "math", "math"),
    BenchmarkSpec("AMC23", HubSource("zwhe99/amc23", "test"), math_record, "math", "math"),
    BenchmarkSpec("Minerva", HubSource("math-ai/minervamath", "test"), math_record, "math", "math"),
    BenchmarkSpec("Olympiad", HubSource("Hothan/OlympiadBench", "train", config="OE_TO_maths_en_COMP"), math_record,
                  "math", "math"),
    BenchmarkSpec("GPQA", HubSource("Idavidrein/gpqa", "train", config="gpqa_diamond"), gpqa_record, "boxed", "ood"),
    BenchmarkSpec("IFEval", HubSource("google/IFEval", "train"), ifeval_record, "ifeval", "ood"),
    BenchmarkSpec("SynLogic", HubSource("MiniMaxAI/SynLogic", "validation", data_files="synlogic_easy/validation.parquet"),
                  synlogic_record, "MODULE:FUNCTION", "ood"),  # placeholder: SynLogic's own task verifiers
]}


def convert_rows(name: str, rows: Iterable[dict]) -> list[dict]:
    """Convert hub rows of benchmark ``name`` (one of :data:`BENCHMARKS`, as prepare_benchmarks checks) to local
    records; ids made unique, every record validated."""
    convert = BENCHMARKS[name].convert
    out, seen = [], set()
    for index, row in enumerate(rows):
        rec = convert(dict(row), index)
        if rec["id"] in seen:
            raise ValueError(f"{name}: duplicate id {rec['id']!r} at row {index}")
        seen.add(rec["id"])
        if not rec["problem"].strip():
            raise ValueError(f"{name}: row {index} has an empty problem")
        out.append(rec)
    if not out:
        raise ValueError(f"{name}: no rows")
    return out


def parse_source(text: str) -> HubSource:
    """``REPO:SPLIT`` or ``REPO:CONFIG:SPLIT`` -> HubSource."""
    parts = text.split(":")
    if len(parts) not in (2, 3):
        raise ValueError(f"source must be REPO:SPLIT or REPO:CONFIG:SPLIT, got {text!r}")
    return HubSource(parts[0], parts[-1], config=(parts[1] or None) if len(parts) == 3 else None)


def verl_rows(name: str, records: list[dict]) -> list[dict]:
    """A math benchmark's local records as verl RL-dataset rows for training-time validation
    (``validation=aime25``): the training prompt (the boxed-answer system prompt + the problem, as
    ``prepare-deepscaler`` writes it; the run's ``data.apply_chat_template_kwargs`` add Qwen3's thinking switch),
    ``data_source`` = the benchmark name (verl logs ``val-core/<name>/...``), the answer as ground truth."""
    spec = BENCHMARKS.get(name)
    if spec is not None and spec.scorer != "math":
        raise ValueError(f"{name}: only math benchmarks (scored by math-verify, the training reward) can validate "
                         f"during training; {name} is scored by {spec.scorer}")
    return [verl_row(rec["problem"], str(rec["answer"]), "val", i, data_source=name, id=rec["id"])
            for i, rec in enumerate(records)]


SOURCE_FORMAT = "NAME=REPO[:CONFIG]:SPLIT"


def parse_source_overrides(items: Iterable[str]) -> dict[str, HubSource]:
    """``["AIME24=repo:train", ...]`` (``--source``) -> {name: HubSource}; a ``ValueError`` naming the bad item."""
    overrides = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or name not in BENCHMARKS:
            raise ValueError(f"--source expects {SOURCE_FORMAT} with NAME in {list(BENCHMARKS)}, got {item!r}")
        overrides[name] = parse_source(value)
    return overrides


def prepare_benchmarks(out: str | Path, names: Iterable[str] | None = None,
                       sources: dict[str, HubSource] | None = None, verl_parquet: bool = False, log=None) -> list[str]:
    """Download each benchmark (all nine unless ``names``) with ``datasets``, write ``OUT/<NAME>.jsonl`` (and, with
    ``verl_parquet``, ``OUT/<NAME>.parquet`` of each math benchmark in verl's RL format); returns each benchmark's
    ``fgrpo-verl eval`` flags. ``sources`` replace the hub copies named above. Progress goes to ``log``
    (stderr by default), so that a caller's stdout carries only the flags."""
    say = log or functools.partial(print, file=sys.stderr)
    names = list(names or BENCHMARKS)
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        raise ValueError(f"unknown benchmark(s) {unknown}; known: {', '.join(BENCHMARKS)}")
    sources = dict(sources or {})
    from datasets import load_dataset  # the hub's client; imported only when something is downloaded

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    flags = []
    for name in names:
        spec = BENCHMARKS[name]
        src = sources.get(name, spec.source)
        files = {src.split: src.data_files} if src.data_files else None  # a --source override names none
        rows = load_dataset(src.repo, src.config, data_files=files, split=src.split)
        records = convert_rows(name, rows)
        path = out / f"{name}.jsonl"
        path.write_text("".join(json.dumps(rec, ensure_ascii=False) + "\n" for rec in records), encoding="utf-8")
        say(f"{name}: {len(records)} problems -> {path}")
        if verl_parquet and spec.scorer == "math":
            write_rows(verl_rows(name, records), out / f"{name}.parquet")
            say(f"{name}: verl validation rows -> {out / f'{name}.parquet'}")
        if spec.scorer == "MODULE:FUNCTION":
            say(f"{name}: no verifier ships with fgrpo-verl; yours takes (data_source, solution_str, ground_truth, "
                "extra_info): MODULE:FUNCTION in the flags below for `fgrpo-verl eval`, and for `fgrpo-verl launch` "
                "the recipes read it from FGRPO_SYNLOGIC_SCORER (export FGRPO_SYNLOGIC_SCORER=MODULE:FUNCTION)")
        scorer = "" if spec.scorer == "math" else f" --bench-scorer {name}={spec.scorer}"
        flags.append(f"--bench {name}={path}{scorer}")  # the `fgrpo-verl eval` flags: its file, its scorer
    return flags
