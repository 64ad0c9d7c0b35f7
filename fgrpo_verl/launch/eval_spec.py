"""A recipe's ``evaluation:`` block, parsed and checked (the jobs it becomes: eval_jobs.py; the format, with every
key, in docs/recipes.md "Format"). Errors name the key and what would be valid; ``${VAR}`` and ``${VAR:-default}``
in benchmark files and scorers expand from the environment, and a variable that is not set is recorded (a dry run
shows it, a submit refuses) rather than guessed."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from fgrpo_verl.evaluation.cost import CostAssumptions
from fgrpo_verl.launch.recipe import Resources
from fgrpo_verl.launch.steps import positive_int

PROTOCOLS = ("select", "full")
TABLES = ("table1", "table2", "table3", "table6", "curves")
BACKENDS = ("vllm", "transformers")
# fgrpo-verl eval options an `engine:` block may set (their meaning: fgrpo_verl/evaluation/options.py)
ENGINE_KEYS = ("tensor_parallel_size", "gpu_memory_utilization", "max_model_len", "vllm_engine_args", "device",
               "dtype", "batch_size", "problems_per_call", "samples_per_request", "score_workers")
# Sampling of the paper's evaluation (§5.3): T = 1.0, top-p 1.0, no top-k; a completion is correct at score >= 1
DEFAULT_SAMPLING = {"temperature": 1.0, "top_p": 1.0, "seed": 0, "threshold": 1.0}
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def expand(text: str, where: str) -> tuple[str, list[str]]:
    """``${VAR}`` / ``${VAR:-default}`` from the environment; returns the text and the unset variables (left as they
    are, for the dry run to show)."""
    missing: list[str] = []

    def sub(match: re.Match) -> str:
        name, default = match.group(1), match.group(2)
        value = os.environ.get(name)
        if value:
            return value
        if default is not None:
            return default
        missing.append(name)
        return match.group(0)

    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{where} must be a non-empty string, got {text!r}")
    return _VAR.sub(sub, text), missing


@dataclass(frozen=True)
class Benchmark:
    name: str
    file: str
    scorer: str
    group: str
    unset: tuple[str, ...] = ()  # environment variables the file or scorer needs that are not set here


@dataclass(frozen=True)
class PassSpec:
    n: int
    benchmarks: tuple[str, ...]


@dataclass(frozen=True)
class EvalSpec:
    benchmarks: dict[str, Benchmark]
    averages: dict[str, tuple[str, ...]]
    select_by: str
    selection: PassSpec
    final: PassSpec
    protocol: str
    backend: str
    sampling: dict
    prompt_preset: str | None
    max_new_tokens: int | str | None
    engine: dict
    gpus_per_node: int
    workers: int
    resources: Resources
    cost: CostAssumptions
    tables: tuple[str, ...]

    def passes(self) -> dict[str, PassSpec]:
        """The passes jobs run: protocol full evaluates every checkpoint with the final settings (one pass)."""
        if self.protocol == "full":
            return {"selection": self.final}
        return {"selection": self.selection, "final": self.final}


def _names(value, where: str, known) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{where} must be a non-empty list of benchmark names, got {value!r}")
    unknown = [v for v in value if v not in known]
    if unknown:
        raise ValueError(f"{where}: unknown benchmark(s) {unknown}; the recipe's evaluation.benchmarks: {list(known)}")
    if len(set(value)) != len(value):
        raise ValueError(f"{where} lists a benchmark twice: {value}")
    return tuple(value)


def load_eval_spec(raw: dict, where: str) -> EvalSpec:
    """Parse and check a recipe's ``evaluation:`` block (module docstring); errors name the key."""
    from fgrpo_verl.evaluation.prepare import BENCHMARKS as PAPER_BENCHMARKS
    from fgrpo_verl.evaluation.prompts import GROUPS, benchmark_group

    where = f"{where}: evaluation"
    if not isinstance(raw, dict):
        raise ValueError(f"{where} must be a mapping, got {raw!r}")
    allowed = {"benchmarks", "averages", "select_by", "selection", "final", "protocol", "backend", "seed",
               "temperature", "top_p", "threshold", "prompt_preset", "max_new_tokens", "engine", "gpus_per_node",
               "workers", "resources", "cost", "tables"}
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}; valid keys: {sorted(allowed)}")
    raw_benches = raw.get("benchmarks")
    if not isinstance(raw_benches, dict) or not raw_benches:
        raise ValueError(f"{where}.benchmarks must be a mapping NAME: file (or NAME: {{file, scorer, group}})")
    benchmarks = {}
    for name, value in raw_benches.items():
        at = f"{where}.benchmarks.{name}"
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
            raise ValueError(f"{at}: a benchmark name is letters, digits, '_', '.', '-' (it names a table column)")
        entry = {"file": value} if isinstance(value, str) else value
        if not isinstance(entry, dict) or set(entry) - {"file", "scorer", "group"} or "file" not in entry:
            raise ValueError(f"{at} must be a file path or a mapping with file (and optional scorer, group), got {value!r}")
        paper = PAPER_BENCHMARKS.get(name)
        file, unset = expand(entry["file"], f"{at}.file")
        scorer, unset_scorer = expand(entry.get("scorer") or (paper.scorer if paper else "math"), f"{at}.scorer")
        group = entry.get("group") or benchmark_group(name)[0]
        if group not in GROUPS:
            raise ValueError(f"{at}.group={group!r}: the prompt group must be one of {GROUPS}")
        benchmarks[name] = Benchmark(name, file, scorer, group, tuple(unset + unset_scorer))
    raw_avgs = raw.get("averages") or {}
    if not isinstance(raw_avgs, dict):
        raise ValueError(f"{where}.averages must be a mapping NAME: [benchmarks]")
    averages = {str(k): _names(v, f"{where}.averages.{k}", benchmarks) for k, v in raw_avgs.items()}
    clash = sorted(set(averages) & set(benchmarks))
    if clash:
        raise ValueError(f"{where}.averages: {clash} are also benchmark names")
    select_by = raw.get("select_by", "Math Avg" if "Math Avg" in averages else None)
    if select_by not in averages and select_by not in benchmarks:
        raise ValueError(f"{where}.select_by={select_by!r}: expected an average ({list(averages)}) or a benchmark "
                         f"({list(benchmarks)}); the paper selects by the average in-domain math pass@1")
    select_members = averages.get(select_by, (select_by,))

    def pass_spec(key: str, default_benches, default_n) -> PassSpec:
        data = raw.get(key) or {}
        if not isinstance(data, dict) or set(data) - {"n", "benchmarks"}:
            raise ValueError(f"{where}.{key} must be a mapping with n and optional benchmarks, got {data!r}")
        n = positive_int(data.get("n", default_n), f"{where}.{key}.n")
        benches = _names(data["benchmarks"], f"{where}.{key}.benchmarks", benchmarks) if "benchmarks" in data \
            else tuple(default_benches)
        return PassSpec(n, benches)

    selection = pass_spec("selection", select_members, 32)
    missing = [b for b in select_members if b not in selection.benchmarks]
    if missing:
        raise ValueError(f"{where}.selection.benchmarks lacks {missing}, which select_by={select_by!r} needs")
    final = pass_spec("final", list(benchmarks), 1024)
    protocol = raw.get("protocol", "select")
    if protocol not in PROTOCOLS:
        raise ValueError(f"{where}.protocol={protocol!r}: expected one of {PROTOCOLS} (select: small-n selection pass "
                         "on every checkpoint + the final pass on the selected one; full: the final pass on every one)")
    if protocol == "full" and any(b not in final.benchmarks for b in select_members):
        raise ValueError(f"{where}: protocol full selects on the final pass, whose benchmarks lack {select_members}")
    backend = raw.get("backend", "vllm")
    if backend not in BACKENDS:
        raise ValueError(f"{where}.backend={backend!r}: expected one of {BACKENDS}")
    sampling = dict(DEFAULT_SAMPLING)
    for key in ("temperature", "top_p", "threshold"):
        if key in raw:
            value = raw[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"{where}.{key} must be a number, got {value!r}")
            sampling[key] = float(value)
    if "seed" in raw:
        if isinstance(raw["seed"], bool) or not isinstance(raw["seed"], int) or raw["seed"] < 0:
            raise ValueError(f"{where}.seed must be a non-negative integer, got {raw['seed']!r}")
        sampling["seed"] = raw["seed"]
    engine = raw.get("engine") or {}
    if not isinstance(engine, dict) or set(engine) - set(ENGINE_KEYS):
        raise ValueError(f"{where}.engine: unknown key(s) {sorted(set(engine) - set(ENGINE_KEYS))}; valid: "
                         f"{list(ENGINE_KEYS)} (fgrpo-verl eval options)")
    tp = positive_int(engine.get("tensor_parallel_size", 1), f"{where}.engine.tensor_parallel_size")
    gpus = positive_int(raw.get("gpus_per_node", 8 if backend == "vllm" else 1), f"{where}.gpus_per_node")
    if backend == "vllm" and gpus % tp:
        raise ValueError(f"{where}: gpus_per_node={gpus} is not a multiple of engine.tensor_parallel_size={tp}")
    resources = Resources().merged(raw.get("resources"), f"{where}.resources")
    tables = raw.get("tables", [])
    if not isinstance(tables, list) or any(t not in TABLES for t in tables):
        raise ValueError(f"{where}.tables={tables!r}: expected a list of {TABLES}")
    max_new_tokens = raw.get("max_new_tokens")
    return EvalSpec(
        benchmarks=benchmarks, averages=averages, select_by=select_by, selection=selection, final=final,
        protocol=protocol, backend=backend, sampling=sampling, prompt_preset=raw.get("prompt_preset"),
        max_new_tokens=max_new_tokens, engine=dict(engine), gpus_per_node=gpus,
        workers=positive_int(raw.get("workers", 1), f"{where}.workers"), resources=resources,
        cost=CostAssumptions.from_dict(raw.get("cost"), f"{where}.cost"), tables=tuple(tables))
