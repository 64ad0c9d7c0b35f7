"""Scoring completions and reducing generation files to per-problem (n, c) counts, streaming.

A scorer exception never aborts an evaluation: the sample counts as incorrect, its message is kept in the
problem's ``score_errors`` and the tables count such samples per (run, benchmark). ``count_correct`` reads
generation files line by line and keeps only (n, c, errors) per problem, plus at most one chunk of completions
waiting for their scorer, so its memory does not grow with the samples' texts.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass

import numpy as np

from fgrpo_verl.evaluation.formats import GenerationRecord, LineIndex, iter_generation_lines
from fgrpo_verl.evaluation.scorers import is_correct, resolve_scorer
from fgrpo_verl.pass_at_k import pass_at_k_curve

# Problems scored per batch when reading files (bounds the completions held in memory).
SCORE_CHUNK = 64
_MESSAGE_CHARS = 300


# one resolution per process (a worker's too); Scorer() clears it, a module:function may have been replaced since
_scorer = functools.lru_cache(maxsize=None)(resolve_scorer)


def _score_texts(job: tuple[str, float, dict, list[str]]) -> tuple[list[int], dict[int, str]]:
    """Score one problem's completions (module-level so worker processes can run it)."""
    spec, threshold, ref, texts = job
    fn = _scorer(spec)
    correct, errors = [], {}
    for i, text in enumerate(texts):
        try:
            ok = is_correct(fn, text, ref, threshold)
        except Exception as err:  # noqa: BLE001 - any scorer failure is recorded, never fatal (see module doc)
            errors[i] = f"{type(err).__name__}: {err}"[:_MESSAGE_CHARS]
            ok = False
        correct.append(int(ok))
    return correct, errors


class Scorer(contextlib.AbstractContextManager):
    """Scores ``GenerationRecord``s in place; ``workers > 1`` forks a process pool once and reuses it.

    ``scorer_spec_for(benchmark)`` names the scorer; ``references[benchmark][problem_id]`` is the benchmark record
    used when a line carries no ``answer``."""

    def __init__(self, scorer_spec_for, threshold: float, references: dict[str, dict[str, dict]], workers: int = 1):
        _scorer.cache_clear()
        self.spec_for, self.threshold, self.references, self.workers = scorer_spec_for, threshold, references, workers
        self._pool = None

    def _reference(self, rec: GenerationRecord) -> dict:
        if rec.answer is not None:
            return {"answer": rec.answer, "data_source": rec.data_source or rec.benchmark, **rec.extra}
        bench = self.references.get(rec.benchmark)
        if bench is None or rec.problem_id not in bench:
            raise ValueError(f"{rec.key}: the line has completions but no 'answer'; pass the benchmark file with "
                             f"--bench {rec.benchmark}=FILE holding id {rec.problem_id!r}")
        return bench[rec.problem_id]

    def score(self, records: list[GenerationRecord]) -> None:
        jobs = []
        for rec in records:  # each with its completions (the callers pick those)
            spec = self.spec_for(rec.benchmark)
            _scorer(spec)  # a bad spec fails here, before any worker starts
            jobs.append((spec, self.threshold, self._reference(rec), rec.completions))
        if self.workers == 1 or len(jobs) < 2:
            results = [_score_texts(job) for job in jobs]
        else:
            if self._pool is None:
                import multiprocessing as mp
                from concurrent.futures import ProcessPoolExecutor

                # fork: workers inherit already-imported scorer modules; they never touch CUDA
                self._pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=mp.get_context("fork"))
            results = list(self._pool.map(_score_texts, jobs, chunksize=max(1, len(jobs) // (4 * self.workers))))
        for rec, (correct, errors) in zip(records, results):
            rec.correct = np.array(correct, dtype=np.int8)
            rec.score_errors = errors or None

    def __exit__(self, *exc):
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None


@dataclass
class BenchmarkScores:
    """Per-problem sample and correct counts of one run on one benchmark (problems sorted by id)."""

    run: str
    benchmark: str
    problem_ids: list[str]
    n: np.ndarray
    c: np.ndarray
    errors: int = 0  # samples whose scorer raised (counted as incorrect)

    def curve(self, ks) -> np.ndarray:
        """Mean unbiased pass@k over problems for every k in ``ks`` in one table pass, NaN where k exceeds some
        problem's n."""
        return pass_at_k_curve(self.n, self.c, ks)


def count_correct(paths, scorer: Scorer, rescore: bool = False) -> dict[tuple[str, str], BenchmarkScores]:
    """``{(run, benchmark): BenchmarkScores}`` from generation files, streaming.

    A problem's correctness comes from its ``correct`` line; a problem with completions but no ``correct`` anywhere
    (or every problem, with ``rescore``) is scored here, ``SCORE_CHUNK`` problems at a time."""
    index = LineIndex.of(paths)
    if rescore:
        missing = sorted(set(index.scored) - set(index.texts))
        if missing:
            raise ValueError(f"--rescore needs 'completions' but {len(missing)} problems only have 'correct', e.g. {missing[0]}")
    counts: dict[tuple[str, str], dict[str, tuple[int, int, int]]] = {}  # problem id -> (n, c, scorer errors)

    def add(rec: GenerationRecord) -> None:
        counts.setdefault((rec.run, rec.benchmark), {})[rec.problem_id] = (
            rec.correct.size, int(rec.correct.sum()), len(rec.score_errors or {}))

    pending: list[GenerationRecord] = []

    def flush() -> None:
        scorer.score(pending)
        for rec in pending:
            add(rec)
        pending.clear()

    for path in paths:
        for _, rec in iter_generation_lines(path):
            if rec.completions is not None and (rescore or rec.key not in index.scored):
                rec.correct = None
                pending.append(rec)
                if len(pending) >= SCORE_CHUNK:
                    flush()
            elif rec.correct is not None and not rescore:
                add(rec)
    flush()
    out = {}
    for (run, bench), by_id in counts.items():
        ids = sorted(by_id)
        n, c, errors = np.array([by_id[i] for i in ids], dtype=np.int64).T
        out[(run, bench)] = BenchmarkScores(run, bench, ids, n, c, int(errors.sum()))
    return out
