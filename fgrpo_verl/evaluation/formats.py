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
    score_errors {"<sample index>": "<error>"} for samples whose scorer raised; they count as incorrect in
                 ``correct`` and are counted in the tables.

A problem may take two lines instead of one (what ``eval`` writes, so no sample waits in memory for its scorer):
first its ``completions`` (without ``correct``), later a line with only its ``correct`` (and ``score_errors``).
Readers merge the pair; any other repetition of a (run, benchmark, problem_id) is an error, so a file read twice
cannot silently double the samples.
"""

from __future__ import annotations

import json
import mmap
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fgrpo_verl.data.records import read_records


def _check_prompt(where: str, prompt) -> None:
    messages = isinstance(prompt, list) and prompt and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in prompt)
    if not (prompt is None or isinstance(prompt, str) or messages):
        raise ValueError(f"{where}: 'prompt' must be a string or a non-empty list of {{role, content}} messages, got {prompt!r:.120}")


def load_benchmark(path: str | Path, name: str) -> list[dict]:
    """Read and validate a benchmark file; returns records with ``id`` (str), ``answer`` and ``data_source`` set."""
    path = Path(path)
    records = read_records(path, f"benchmark {name!r} ({path})")
    if not records:
        raise ValueError(f"benchmark {name!r} ({path}) has no records")
    seen: set[str] = set()
    out = []
    for row, rec in enumerate(records):
        where = f"benchmark {name!r} ({path}) record {row}"
        reward_model = rec.get("reward_model")
        if rec.get("answer") is None and isinstance(reward_model, dict) and reward_model.get("ground_truth") is not None:
            rec = {**rec, "answer": reward_model["ground_truth"]}  # a verl RL-dataset row
        if rec.get("answer") is None:
            raise ValueError(f"{where}: missing required key 'answer' (or verl's reward_model.ground_truth)")
        if rec.get("prompt") is not None:
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
        source = rec.get("data_source")
        out.append({**rec, "id": pid, "data_source": name if source is None else source})
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
    score_errors: dict[int, str] | None = None  # sample index -> scorer exception (scored as incorrect)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.run, self.benchmark, self.problem_id)

    def to_json(self, with_completions: bool = True) -> dict:
        """The line (format in the module docstring), without the keys it has no value for."""
        out = {"run": self.run, "benchmark": self.benchmark, "problem_id": self.problem_id,
               "correct": None if self.correct is None else [int(x) for x in self.correct],
               "completions": self.completions if with_completions else None, "answer": self.answer,
               "data_source": self.data_source, "prompt": self.prompt,
               "score_errors": {str(i): e for i, e in sorted(self.score_errors.items())} if self.score_errors else None}
        return {key: value for key, value in out.items() if value is not None}

    def score_line(self) -> dict:
        """The second line of a two-line problem: its correctness only."""
        line = self.to_json(with_completions=False)
        return {k: v for k, v in line.items() if k not in ("answer", "data_source", "prompt")}


def _parse_correct(where: str, value) -> np.ndarray:
    if not isinstance(value, list) or not value:
        raise ValueError(f"{where}: 'correct' must be a non-empty list of 0/1 or booleans, got {value!r:.80}")
    bad = [v for v in value if not (isinstance(v, bool) or (isinstance(v, int) and v in (0, 1)))]
    if bad:
        raise ValueError(f"{where}: 'correct' entries must be 0/1 or true/false, got {bad[0]!r}")
    return np.asarray([int(v) for v in value], dtype=np.int8)


def _parse_score_errors(where: str, value, size: int | None) -> dict[int, str] | None:
    if value is None:
        return None
    if not isinstance(value, dict) or not all(isinstance(k, str) and k.isdigit() and isinstance(v, str)
                                              for k, v in value.items()):
        raise ValueError(f"{where}: 'score_errors' must map sample indices (strings of digits) to messages, got {value!r:.80}")
    errors = {int(k): v for k, v in value.items()}
    if size is not None and errors and max(errors) >= size:
        raise ValueError(f"{where}: 'score_errors' names sample {max(errors)} of {size}")
    return errors


KNOWN_KEYS = {"run", "benchmark", "problem_id", "correct", "completions", "answer", "data_source", "prompt", "score_errors"}


def parse_generation_line(line: str, where: str) -> GenerationRecord:
    """One validated line of a generation file (format in the module docstring)."""
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
    _check_prompt(where, obj.get("prompt"))
    return GenerationRecord(
        run=obj["run"], benchmark=obj["benchmark"], problem_id=str(pid), correct=correct,
        completions=completions, answer=obj.get("answer"), data_source=obj.get("data_source"),
        prompt=obj.get("prompt"), extra={k: v for k, v in obj.items() if k not in KNOWN_KEYS},
        score_errors=_parse_score_errors(where, obj.get("score_errors"), None if correct is None else correct.size),
    )


def iter_generation_lines(path: str | Path):
    """(where, record) per non-empty line, streaming (one line in memory at a time); every caller has checked that
    ``path`` exists (the options' ``require_files``, a result's recorded files)."""
    path = Path(path)
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if line.strip():
                yield f"{path}:{lineno}", parse_generation_line(line, f"{path}:{lineno}")


class LineIndex:
    """Which (run, benchmark, problem_id) have a completions line and which a correctness line, across files.

    Enforces the pairing rule: at most one line of each kind per key (one line may be both)."""

    def __init__(self):
        self.texts: dict[tuple, str] = {}
        self.scored: dict[tuple, str] = {}
        self.sizes: dict[tuple, int] = {}

    def add(self, where: str, rec: GenerationRecord) -> None:
        size = rec.correct.size if rec.correct is not None else len(rec.completions)
        if self.sizes.setdefault(rec.key, size) != size:
            raise ValueError(f"{where}: {rec.key} has {size} samples but an earlier line has {self.sizes[rec.key]}")
        for seen, present in ((self.texts, rec.completions is not None), (self.scored, rec.correct is not None)):
            if present and rec.key in seen:
                raise ValueError(f"{where}: duplicate (run, benchmark, problem_id) = {rec.key} (first at "
                                 f"{seen[rec.key]}); put all samples of a problem on one line")
            if present:
                seen[rec.key] = where

    @classmethod
    def of(cls, paths) -> "LineIndex":
        index = cls()
        for path in paths:
            for where, rec in iter_generation_lines(path):
                index.add(where, rec)
        if not index.sizes:
            raise ValueError(f"generation files {[str(p) for p in paths]} have no records")
        return index


def read_generations(path: str | Path) -> list[GenerationRecord]:
    """Read a generation file into one record per problem (a completions line and its correctness line merged)."""
    index = LineIndex()
    merged: dict[tuple, GenerationRecord] = {}
    for where, rec in iter_generation_lines(path):
        index.add(where, rec)
        first = merged.get(rec.key)
        if first is None:
            merged[rec.key] = rec
        elif rec.correct is not None and first.correct is None:
            first.correct, first.score_errors = rec.correct, rec.score_errors
        else:
            first.completions = rec.completions
    if not merged:
        raise ValueError(f"generation file {str(path)!r} has no records")
    return list(merged.values())


def drop_torn_tail(path: Path) -> int:
    """Cut a last line without its newline (a write killed half-way) off ``path``; returns the bytes dropped.

    Every line is written whole and then flushed, so only the final one can be torn. The file is mapped, not read:
    the search for the last newline runs from the end and touches only the pages it passes."""
    if not path.is_file() or path.stat().st_size == 0:
        return 0
    with path.open("rb+") as fh:
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as view:
            size, keep = len(view), view.rfind(b"\n") + 1
        fh.truncate(keep)
    return size - keep


def append_lines(fh, lines: list[dict]) -> None:
    """Append ``lines`` to the open generation file ``fh``, each written whole and flushed, then the batch synced to
    disk: a kill loses at most the line in flight (which ``drop_torn_tail`` cuts off on ``--resume``)."""
    for obj in lines:
        fh.write(json.dumps(obj, ensure_ascii=False) + "\n")
        fh.flush()
    os.fsync(fh.fileno())
