"""Scorers: turn one completion into correct / incorrect.

A scorer follows verl's custom-reward convention, so the function a user trains with can score evaluation too:

    fn(data_source: str, solution_str: str, ground_truth, extra_info: dict | None) -> float | bool | dict

(a dict must hold ``"score"``). A completion counts as correct iff its score >= ``threshold`` (default 1.0, i.e.
the paper's 1.0-correct / 0.0-incorrect reward).

Built-in names (``--scorer`` / ``--bench-scorer NAME=SCORER``):
    math   math-verify (the paper's verifier): parse the reference and the completion, ``verify`` them.
    boxed  string equality of the last ``\\boxed{...}`` with the reference (whitespace and ``$`` stripped); for
           multiple choice (GPQA letters).
    maze   the maze task's checker, ``fgrpo_verl.tasks.maze.reward:compute_score``.
    ifeval IFEval prompt-level strict accuracy through lm-eval's checkers (``pip install lm-eval``); the record's
           ``answer`` is ``{"instruction_id_list": [...], "kwargs": [...]}`` and ``problem`` the prompt, as
           written by fgrpo-verl prepare-benchmarks. (The paper does not say strict or loose.)
Anything else is ``module:function`` (imported on use).
"""

from __future__ import annotations

import importlib
import math
from typing import Callable

ScoreFn = Callable[..., object]

MAZE_SCORER = "fgrpo_verl.tasks.maze.reward:compute_score"


def math_verify_score(data_source, solution_str, ground_truth, extra_info=None) -> float:
    """1.0 if math-verify judges ``solution_str`` equivalent to ``ground_truth``, else 0.0."""
    try:
        from math_verify import parse, verify
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise RuntimeError(
            "the 'math' scorer needs math-verify (a dependency of fgrpo-verl): pip install 'math-verify==0.9.0'"
        ) from err
    if not isinstance(ground_truth, (str, int)) or isinstance(ground_truth, bool):
        raise ValueError(f"the 'math' scorer needs a string (or int) answer, got {ground_truth!r:.80}")
    gold_text = str(ground_truth)
    # A bare reference such as "\frac{1}{2}" is LaTeX without delimiters; wrap it so LaTeX extraction sees it.
    if "$" not in gold_text and "\\boxed" not in gold_text:
        gold_text = f"${gold_text}$"
    gold = parse(gold_text)
    if not gold:
        raise ValueError(f"math-verify could not parse the reference answer {ground_truth!r:.80}")
    pred = parse(solution_str)
    return 1.0 if pred and verify(gold, pred) else 0.0


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (balanced braces), or None."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    i, depth = start + len("\\boxed{"), 1
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j]
    return None


def _normalise(s: str) -> str:
    return "".join(s.replace("$", "").split())


def boxed_exact_score(data_source, solution_str, ground_truth, extra_info=None) -> float:
    """1.0 if the last ``\\boxed{}`` equals the reference after removing whitespace and ``$``."""
    got = last_boxed(solution_str)
    return 1.0 if got is not None and _normalise(got) == _normalise(str(ground_truth)) else 0.0


def ifeval_strict_score(data_source, solution_str, ground_truth, extra_info=None) -> float:
    """1.0 if the response follows every instruction of the IFEval prompt (lm-eval's strict check)."""
    try:
        from lm_eval.tasks.ifeval.utils import process_results
    except ImportError as err:
        raise RuntimeError("the 'ifeval' scorer needs lm-eval's IFEval checkers: pip install lm-eval langdetect immutabledict nltk") from err
    if not isinstance(ground_truth, dict) or {"instruction_id_list", "kwargs"} - set(ground_truth):
        raise ValueError(f"the 'ifeval' scorer needs answer = {{'instruction_id_list': [...], 'kwargs': [...]}}, got {ground_truth!r:.80}")
    extra_info = extra_info or {}
    doc = {"key": extra_info.get("id"), "prompt": extra_info.get("problem", ""),
           "instruction_id_list": ground_truth["instruction_id_list"], "kwargs": ground_truth["kwargs"]}
    return 1.0 if process_results(doc, [solution_str])["prompt_level_strict_acc"] else 0.0


BUILTIN = {"math": math_verify_score, "boxed": boxed_exact_score, "maze": MAZE_SCORER, "ifeval": ifeval_strict_score}


def resolve_scorer(spec: str) -> ScoreFn:
    """A built-in name or ``module:function`` -> the callable."""
    target = BUILTIN.get(spec, spec)
    if callable(target):
        return target
    if ":" not in target:
        raise ValueError(f"scorer {spec!r} is neither a built-in ({', '.join(BUILTIN)}) nor 'module:function'")
    module_name, func_name = target.split(":", 1)
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ValueError(f"scorer {spec!r}: cannot import module {module_name!r}: {err}") from err
    fn = getattr(module, func_name, None)
    if not callable(fn):
        raise ValueError(f"scorer {spec!r}: {module_name!r} has no callable {func_name!r}")
    return fn


def is_correct(fn: ScoreFn, completion: str, record: dict, threshold: float = 1.0) -> bool:
    """Score one completion against a benchmark record (``answer``, ``data_source``, extra keys)."""
    extra = {k: v for k, v in record.items() if k not in ("answer", "data_source", "extra_info")}
    if isinstance(record.get("extra_info"), dict):
        extra.update(record["extra_info"])  # verl rows keep reward inputs (e.g. the maze grid) in extra_info
    result = fn(data_source=record.get("data_source"), solution_str=completion, ground_truth=record["answer"], extra_info=extra)
    if isinstance(result, dict):
        if "score" not in result:
            raise ValueError(f"scorer returned a dict without 'score': keys {sorted(result)}")
        result = result["score"]
    if isinstance(result, bool):
        return result
    if not isinstance(result, (int, float)) or math.isnan(float(result)):
        raise ValueError(f"scorer returned {result!r}; expected a number, bool or dict with 'score'")
    return float(result) >= threshold
