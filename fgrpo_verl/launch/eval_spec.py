"""A recipe's ``evaluation:`` block, parsed and checked (the jobs it becomes: eval_jobs.py; the format, with every
key, in docs/recipes.md "Format"). Errors name the key and what would be valid; ``${VAR}`` and ``${VAR:-default}``
in benchmark files and scorers expand from the environment, and a variable that is not set is recorded (a dry run
shows it, a submit refuses) rather than guessed."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, fields, is_dataclass, make_dataclass
from enum import Enum
from typing import Any, Dict, List, Optional, Union, get_args, get_origin, get_type_hints

from fgrpo_verl.evaluation.cost import CostAssumptions
from fgrpo_verl.evaluation.plan import Pass
from fgrpo_verl.launch.recipe import Resources
from fgrpo_verl.launch.steps import positive_int

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


# The block's schema: OmegaConf refuses unknown keys and values of the wrong type (_parsed_block adds that nothing is
# converted: "32" is not a count). None: a default that depends on other keys, filled in by load_eval_spec.
Protocol = Enum("Protocol", {name: name for name in ("select", "full")})
PROTOCOL_HELP = (" (select: a small-n selection pass on every checkpoint + the final pass on the selected one; full: "
                 "the final pass on every one)")
Backend = Enum("Backend", {name: name for name in ("vllm", "transformers")})
Table = Enum("Table", {name: name for name in ("table1", "table2", "table3", "table6", "curves")})


@dataclass
class BenchmarkEntry:
    short_form = "a file path"     # NAME: path is short for NAME: {file: path} (not a field: no annotation)
    file: str
    scorer: Optional[str] = None   # default: the paper's scorer of that benchmark name, else math
    group: Optional[str] = None    # prompt group; default: from the benchmark name (prompts.py)


@dataclass
class PassEntry:
    n: Optional[int] = None
    benchmarks: Optional[List[str]] = None


# fgrpo-verl eval options an `engine:` block may set; options.py checks their values when the job runs
EngineEntry = make_dataclass("EngineEntry", [("tensor_parallel_size", Optional[int], field(default=None))] + [
    (key, Any, field(default=None)) for key in ("gpu_memory_utilization", "max_model_len", "vllm_engine_args",
                                                "device", "dtype", "batch_size", "problems_per_call",
                                                "samples_per_request", "score_workers")])


@dataclass
class EvaluationBlock:
    benchmarks: Dict[str, BenchmarkEntry] = field(default_factory=dict)
    averages: Optional[Dict[str, List[str]]] = None
    select_by: Optional[str] = None     # default: "Math Avg" when that average exists
    selection: Optional[PassEntry] = None
    final: Optional[PassEntry] = None
    protocol: Protocol = Protocol.select
    backend: Backend = Backend.vllm
    # sampling of the paper's evaluation (§5.3): T = 1.0, top-p 1.0, no top-k; a completion is correct at score >= 1
    seed: int = 0
    temperature: float = 1.0
    top_p: float = 1.0
    threshold: float = 1.0
    prompt_preset: Optional[str] = None
    max_new_tokens: Any = None          # an integer or "train" (model_presets.eval_setting checks it)
    engine: Optional[EngineEntry] = None
    gpus_per_node: Optional[int] = None
    workers: int = 1
    resources: Optional[Dict[str, Any]] = None   # checked by Resources
    cost: Optional[Dict[str, Any]] = None        # checked by CostAssumptions
    tables: List[Table] = field(default_factory=list)


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
class EvalSpec:
    benchmarks: dict[str, Benchmark]
    averages: dict[str, tuple[str, ...]]
    select_by: str
    selection: Pass
    final: Pass
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

    def passes(self) -> dict[str, Pass]:
        """The passes jobs run: protocol full evaluates every checkpoint with the final settings (one pass)."""
        if self.protocol == "full":
            return {"selection": self.final}
        return {"selection": self.selection, "final": self.final}


def _unwrapped(tp):
    """``X`` of ``Optional[X]``; other types as they are."""
    return next(a for a in get_args(tp) if a is not type(None)) if get_origin(tp) is Union else tp


def _expected(tp) -> str:
    """What a schema type accepts, in the recipe's words."""
    if _unwrapped(tp) is not tp:   # null is how the schema marks "left out": a recipe omits the key instead
        return _expected(_unwrapped(tp))
    if get_origin(tp) is list:
        return f"a list, each {_expected(get_args(tp)[0])}"
    if get_origin(tp) is dict:
        return f"a mapping NAME: {_expected(get_args(tp)[1])}"
    if is_dataclass(tp):
        short = getattr(tp, "short_form", None)
        return (f"{short} or " if short else "") + f"a mapping with keys {[f.name for f in fields(tp)]}"
    if isinstance(tp, type) and issubclass(tp, Enum):
        return f"one of {[m.value for m in tp]}"
    return {int: "an integer", float: "a number", str: "a string"}.get(tp, "a value")


def _schema_error(exc, where: str, top: str, raw: dict) -> ValueError:
    """One line naming the key and what it takes, for OmegaConf's error ``exc`` on the block's key ``top``."""
    from omegaconf.errors import ConfigKeyError, KeyValidationError, MissingMandatoryValue

    key, owner = exc.full_key or top, exc.object_type
    if isinstance(exc, ConfigKeyError) and is_dataclass(owner):
        return ValueError(f"{where}.{key}: unknown key; valid keys: {[f.name for f in fields(owner)]}")
    if isinstance(exc, KeyValidationError):
        return ValueError(f"{where}.{key}: a name here is a string (quote it), got {exc.key!r}")
    if is_dataclass(owner) and exc.key in get_type_hints(owner):
        tp = get_type_hints(owner)[exc.key]
    elif owner in (dict, list) and get_args(_unwrapped(exc.ref_type)):   # an entry: the type of the entries
        tp = get_args(_unwrapped(exc.ref_type))[-1]
    else:
        tp = get_type_hints(EvaluationBlock)[top]
    if isinstance(exc, MissingMandatoryValue):
        return ValueError(f"{where}.{key} is required: {_expected(tp)}")
    value = raw[top] if key == top else exc.value
    what = PROTOCOL_HELP if tp is Protocol else ""
    return ValueError(f"{where}.{key}: expected {_expected(tp)}{what}, got {value!r}")


def _escaped(node):
    """The block with ``${`` escaped: OmegaConf would read ``${VAR}`` as its own interpolation (expand() reads it)."""
    if isinstance(node, str):
        return re.sub(r"(\\*)\$\{", lambda m: m.group(1) * 2 + "\\${", node)
    if isinstance(node, dict):
        return {k: _escaped(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_escaped(v) for v in node]
    return node


def _unconverted(raw, parsed, key: str, where: str) -> None:
    """Refuse a value OmegaConf converted to the schema's type ("32" to 32, 5 to "5"); an integer for a number is
    kept."""
    if isinstance(raw, dict) and isinstance(parsed, dict):
        for k, v in raw.items():
            _unconverted(v, parsed[k], f"{key}.{k}", where)
    elif isinstance(raw, list) and isinstance(parsed, list):
        for i, (r, p) in enumerate(zip(raw, parsed)):
            # the block's own lists hold names; OmegaConf does not look inside a nested list or mapping
            if isinstance(r, (list, dict)) and not key.startswith(("engine", "resources", "cost")):
                raise ValueError(f"{where}.{key}[{i}]: expected a name, got {r!r}")
            _unconverted(r, p, f"{key}[{i}]", where)
    elif type(raw) is not type(parsed) and not (type(raw) is int and type(parsed) is float):
        raise ValueError(f"{where}.{key}: expected {_expected(type(parsed))}, got {raw!r}")


def _parsed_block(raw: dict, where: str) -> dict:
    """``raw`` checked against :class:`EvaluationBlock` and filled with its defaults, as plain values; errors are
    one line naming the key."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    if not isinstance(raw, dict):
        raise ValueError(f"{where} must be a mapping, got {raw!r}")
    raw = dict(raw)
    if raw.get("benchmarks", {}) is None:
        raise ValueError(f"{where}.benchmarks is required: a mapping NAME: file (or NAME: {{file, scorer, group}})")
    # null in the schema means "left out, use the default"; written for a count or a list of benchmarks it is a
    # mistake, not a choice (a null block, engine: or resources: is the same as leaving it out)
    nulls = ["gpus_per_node"] * (raw.get("gpus_per_node", 0) is None) + [
        f"{key}.{k}" for key in ("selection", "final") if isinstance(raw.get(key), dict)
        for k, v in raw[key].items() if v is None]
    if nulls:
        raise ValueError(f"{where}.{nulls[0]} is null: give a value or leave the key out for its default")
    if isinstance(raw.get("benchmarks"), dict):
        raw["benchmarks"] = {k: {"file": v} if isinstance(v, str) else v for k, v in raw["benchmarks"].items()}
    block = OmegaConf.structured(EvaluationBlock)
    for top, value in raw.items():   # one key at a time: an error on a whole key's value names no key otherwise
        try:
            block = OmegaConf.merge(block, {top: _escaped(value)})
            parsed = OmegaConf.to_container(block, resolve=True, enum_to_str=True, throw_on_missing=True)
        except OmegaConfBaseException as exc:
            raise _schema_error(exc, where, top, raw) from None
        _unconverted(value, parsed[top], top, where)
    if not raw.get("benchmarks"):
        raise ValueError(f"{where}.benchmarks is required: a mapping NAME: file (or NAME: {{file, scorer, group}})")
    return parsed


def _names(value, where: str, known) -> tuple[str, ...]:
    if not value:
        raise ValueError(f"{where} must be a non-empty list of benchmark names, got {value!r}")
    unknown = [v for v in value if v not in known]
    if unknown:
        raise ValueError(f"{where}: unknown benchmark(s) {unknown}; the recipe's evaluation.benchmarks: {list(known)}")
    if len(set(value)) != len(value):
        raise ValueError(f"{where} lists a benchmark twice: {value}")
    return tuple(value)


def load_eval_spec(raw: dict, where: str) -> EvalSpec:
    """Parse and check a recipe's ``evaluation:`` block (module docstring): the schema (:class:`EvaluationBlock`)
    takes the keys and their types, this the checks between keys; errors name the key."""
    from fgrpo_verl.evaluation.prepare import BENCHMARKS as PAPER_BENCHMARKS
    from fgrpo_verl.evaluation.prompts import GROUPS, benchmark_group

    where = f"{where}: evaluation"
    block = _parsed_block(raw, where)
    benchmarks = {}
    for name, entry in block["benchmarks"].items():
        at = f"{where}.benchmarks.{name}"
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
            raise ValueError(f"{at}: a benchmark name is letters, digits, '_', '.', '-' (it names a table column)")
        paper = PAPER_BENCHMARKS.get(name)
        file, unset = expand(entry["file"], f"{at}.file")
        scorer, unset_scorer = expand(entry["scorer"] or (paper.scorer if paper else "math"), f"{at}.scorer")
        group = entry["group"] or benchmark_group(name)[0]
        if group not in GROUPS:
            raise ValueError(f"{at}.group={group!r}: the prompt group must be one of {GROUPS}")
        benchmarks[name] = Benchmark(name, file, scorer, group, tuple(unset + unset_scorer))
    averages = {k: _names(v, f"{where}.averages.{k}", benchmarks) for k, v in (block["averages"] or {}).items()}
    clash = sorted(set(averages) & set(benchmarks))
    if clash:
        raise ValueError(f"{where}.averages: {clash} are also benchmark names")
    select_by = block["select_by"] if "select_by" in raw else ("Math Avg" if "Math Avg" in averages else None)
    if select_by not in averages and select_by not in benchmarks:
        raise ValueError(f"{where}.select_by={select_by!r}: expected an average ({list(averages)}) or a benchmark "
                         f"({list(benchmarks)}); the paper selects by the average in-domain math pass@1")
    select_members = averages.get(select_by, (select_by,))

    def pass_spec(key: str, default_benches, default_n) -> Pass:
        data = block[key] or {}
        n = positive_int(default_n if data.get("n") is None else data["n"], f"{where}.{key}.n")
        benches = tuple(default_benches) if data.get("benchmarks") is None \
            else _names(data["benchmarks"], f"{where}.{key}.benchmarks", benchmarks)
        return Pass(n, benches)

    selection = pass_spec("selection", select_members, 32)
    missing = [b for b in select_members if b not in selection.benchmarks]
    if missing:
        raise ValueError(f"{where}.selection.benchmarks lacks {missing}, which select_by={select_by!r} needs")
    final = pass_spec("final", list(benchmarks), 1024)
    protocol, backend = block["protocol"], block["backend"]
    if protocol == "full" and any(b not in final.benchmarks for b in select_members):
        raise ValueError(f"{where}: protocol full selects on the final pass, whose benchmarks lack {select_members}")
    if block["seed"] < 0:
        raise ValueError(f"{where}.seed must be a non-negative integer, got {block['seed']!r}")
    engine = {k: block["engine"][k] for k in raw.get("engine") or {}}   # the keys the recipe sets
    tp = positive_int(engine.get("tensor_parallel_size", 1), f"{where}.engine.tensor_parallel_size")
    gpus = block["gpus_per_node"]
    gpus = positive_int((8 if backend == "vllm" else 1) if gpus is None else gpus, f"{where}.gpus_per_node")
    if backend == "vllm" and gpus % tp:
        raise ValueError(f"{where}: gpus_per_node={gpus} is not a multiple of engine.tensor_parallel_size={tp}")
    return EvalSpec(
        benchmarks=benchmarks, averages=averages, select_by=select_by, selection=selection, final=final,
        protocol=protocol, backend=backend,
        sampling={k: block[k] for k in ("temperature", "top_p", "seed", "threshold")},
        prompt_preset=block["prompt_preset"], max_new_tokens=block["max_new_tokens"], engine=engine,
        gpus_per_node=gpus, workers=positive_int(block["workers"], f"{where}.workers"),
        resources=Resources().merged(block["resources"], f"{where}.resources"),
        cost=CostAssumptions.from_dict(block["cost"], f"{where}.cost"), tables=tuple(block["tables"]))
