"""The two local file formats of ``fgrpo-verl eval``: benchmark files and generation files.

Benchmark file (``--bench NAME=FILE``): JSONL (one JSON object per line), ``.json`` (a list of objects) or
``.parquet``; one record per problem:

    id           optional  str/int; unique within the file; default: the 0-based row number. Compared as strings.
    problem      required unless ``prompt`` is given; the question text.
    answer       required; the reference the scorer compares against (a string for math; any JSON value for
                 custom scorers, e.g. IFEval's instruction list).
    prompt       optional; a string used verbatim as the model input, or a chat message list
                 ``[{"role": ..., "content": ...}, ...]`` rendered with the tokenizer's chat template. When absent
                 the prompt is built from ``problem`` and ``--system-prompt`` (see ``generate.build_prompt``).
    data_source  optional; passed to the scorer; default: the benchmark NAME.
    (other keys) kept and passed to the scorer as ``extra_info``.

Generation file (``--from-generations FILE``, and what ``eval`` writes as ``generations.jsonl``): JSONL, one line
per (run, benchmark, problem):

    run          required str; the model / checkpoint label (e.g. ``GRPO``, ``F-GRPO``).
    benchmark    required str; the benchmark label (a column of the table).
    problem_id   required str/int; compared as a string; unique per (run, benchmark).
    correct      per-sample correctness, a list of 0/1 (or true/false), one per completion; or
    completions  the sampled texts (list of str); scored on load when ``correct`` is absent (or ``--rescore``),
                 which needs ``answer`` on the line or the benchmark file (``--bench``) to look it up by id.
    answer, data_source, prompt   optional; as in the benchmark file (``prompt`` is the exact model input).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

BENCHMARK_SUFFIXES = (".jsonl", ".json", ".parquet")


def _read_records(path: Path) -> list[dict]:
    suffix = path.suffix.lower()
    if suffix not in BENCHMARK_SUFFIXES:
        raise ValueError(f"file {str(path)!r} has suffix {suffix!r}; valid: {', '.join(BENCHMARK_SUFFIXES)}")
    if not path.is_file():
        raise ValueError(f"file {str(path)!r} does not exist")
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        # pyarrow keeps nulls as None and nested columns as lists/dicts (pandas would turn nulls into NaN)
        return pq.read_table(path).to_pylist()
    text = path.read_text(encoding="utf-8")
    if suffix == ".json":
        data = json.loads(text)
        if not isinstance(data, list):
            raise ValueError(f"{path}: a .json benchmark must hold a list of objects, got {type(data).__name__}")
        records = data
    else:
        records = []
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{lineno}: not valid JSON ({err.msg})") from err
    for i, rec in enumerate(records):
        if not isinstance(rec, dict):
            raise ValueError(f"{path}: record {i} must be a JSON object, got {type(rec).__name__}")
    return records


def _to_plain(value):
    """numpy values from parquet -> plain Python (lists, str, numbers) so records serialise to JSON."""
    if isinstance(value, np.ndarray):
        return [_to_plain(v) for v in value.tolist()]
    if isinstance(value, (list, tuple)):
        return [_to_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _to_plain(v) for k, v in value.items()}
    if isinstance(value, np.generic):
        return value.item()
    return value


def _check_prompt(where: str, prompt) -> None:
    if isinstance(prompt, str):
        return
    ok = isinstance(prompt, list) and prompt and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in prompt
    )
    if not ok:
        raise ValueError(f"{where}: 'prompt' must be a string or a non-empty list of {{role, content}} messages, got {prompt!r:.120}")


def load_benchmark(path: str | Path, name: str) -> list[dict]:
    """Read and validate a benchmark file; returns records with ``id`` (str), ``answer`` and ``data_source`` set."""
    path = Path(path)
    records = [_to_plain(r) for r in _read_records(path)]
    if not records:
        raise ValueError(f"benchmark {name!r} ({path}) has no records")
    seen: set[str] = set()
    out = []
    for row, rec in enumerate(records):
        where = f"benchmark {name!r} ({path}) record {row}"
        reward_model = rec.get("reward_model")
        if rec.get("answer") is None and isinstance(reward_model, dict) and reward_model.get("ground_truth") is not None:
            rec = {**rec, "answer": reward_model["ground_truth"]}  # a verl RL-dataset row
        if "answer" not in rec or rec["answer"] is None:
            raise ValueError(f"{where}: missing required key 'answer' (or verl's reward_model.ground_truth)")
        if "prompt" in rec and rec["prompt"] is not None:
            _check_prompt(where, rec["prompt"])
        elif not isinstance(rec.get("problem"), str) or not rec["problem"].strip():
            raise ValueError(f"{where}: needs a non-empty string 'problem' (or a 'prompt'), got {rec.get('problem')!r:.80}")
        pid = rec.get("id", row)
        if not isinstance(pid, (str, int)) or isinstance(pid, bool):
            raise ValueError(f"{where}: 'id' must be a string or int, got {pid!r}")
        pid = str(pid)
        if pid in seen:
            raise ValueError(f"{where}: duplicate id {pid!r}")
        seen.add(pid)
        rec = dict(rec)
        rec["id"] = pid
        rec.setdefault("data_source", name)
        if rec["data_source"] is None:
            rec["data_source"] = name
        out.append(rec)
    return out


@dataclass
class GenerationRecord:
    """One (run, benchmark, problem) line of a generation file."""

    run: str
    benchmark: str
    problem_id: str
    correct: np.ndarray | None = None  # int8 0/1 per sample, None until scored
    completions: list[str] | None = None
    answer: object = None
    data_source: str | None = None
    prompt: object = None
    extra: dict = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.run, self.benchmark, self.problem_id)

    def to_json(self, with_completions: bool = True) -> dict:
        out = {"run": self.run, "benchmark": self.benchmark, "problem_id": self.problem_id}
        if self.correct is not None:
            out["correct"] = [int(x) for x in self.correct]
        if with_completions and self.completions is not None:
            out["completions"] = list(self.completions)
        for key in ("answer", "data_source", "prompt"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        return out


def _parse_correct(where: str, value) -> np.ndarray:
    if not isinstance(value, list) or not value:
        raise ValueError(f"{where}: 'correct' must be a non-empty list of 0/1 or booleans, got {value!r:.80}")
    bad = [v for v in value if not (isinstance(v, bool) or (isinstance(v, int) and v in (0, 1)))]
    if bad:
        raise ValueError(f"{where}: 'correct' entries must be 0/1 or true/false, got {bad[0]!r}")
    return np.asarray([int(v) for v in value], dtype=np.int8)


def read_generations(path: str | Path) -> list[GenerationRecord]:
    """Read and validate a generation JSONL file (format in the module docstring)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"generation file {str(path)!r} does not exist")
    records: list[GenerationRecord] = []
    seen: set[tuple[str, str, str]] = set()
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{where}: not valid JSON ({err.msg})") from err
            if not isinstance(obj, dict):
                raise ValueError(f"{where}: each line must be a JSON object")
            for key in ("run", "benchmark"):
                if not isinstance(obj.get(key), str) or not obj[key]:
                    raise ValueError(f"{where}: required key {key!r} must be a non-empty string, got {obj.get(key)!r}")
            pid = obj.get("problem_id")
            if not isinstance(pid, (str, int)) or isinstance(pid, bool):
                raise ValueError(f"{where}: required key 'problem_id' must be a string or int, got {pid!r}")
            correct = _parse_correct(where, obj["correct"]) if "correct" in obj else None
            completions = obj.get("completions")
            if completions is not None and (
                not isinstance(completions, list) or not completions or not all(isinstance(t, str) for t in completions)
            ):
                raise ValueError(f"{where}: 'completions' must be a non-empty list of strings")
            if correct is None and completions is None:
                raise ValueError(f"{where}: needs 'correct' (per-sample 0/1) or 'completions' (texts to score)")
            if correct is not None and completions is not None and len(correct) != len(completions):
                raise ValueError(f"{where}: 'correct' has {len(correct)} entries but 'completions' has {len(completions)}")
            if "prompt" in obj and obj["prompt"] is not None:
                _check_prompt(where, obj["prompt"])
            known = {"run", "benchmark", "problem_id", "correct", "completions", "answer", "data_source", "prompt"}
            rec = GenerationRecord(
                run=obj["run"], benchmark=obj["benchmark"], problem_id=str(pid), correct=correct,
                completions=completions, answer=obj.get("answer"), data_source=obj.get("data_source"),
                prompt=obj.get("prompt"), extra={k: v for k, v in obj.items() if k not in known},
            )
            if rec.key in seen:
                raise ValueError(f"{where}: duplicate (run, benchmark, problem_id) = {rec.key}; put all samples of a problem on one line")
            seen.add(rec.key)
            records.append(rec)
    if not records:
        raise ValueError(f"generation file {str(path)!r} has no records")
    return records


def write_generations(path: str | Path, records, with_completions: bool = True, append: bool = False) -> None:
    with Path(path).open("a" if append else "w", encoding="utf-8") as fh:
        for rec in records:
            fh.write(json.dumps(rec.to_json(with_completions), ensure_ascii=False) + "\n")
