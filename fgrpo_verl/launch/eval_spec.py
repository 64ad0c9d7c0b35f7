"""A recipe's ``evaluation:`` block, parsed and checked (the jobs it becomes: eval_jobs.py; the format, with every
key, in docs/recipes.md "Format"). :class:`EvalSpec` declares the keys and their types (strict, errors in one line
naming the key: evaluation/shapes.py); its validator checks what one key means for another and fills the defaults
that depend on other keys. ``${VAR}`` and ``${VAR:-default}`` in benchmark files and scorers expand from the
environment, and a variable that is not set is recorded (a dry run shows it, a submit refuses) rather than guessed.
"""

from __future__ import annotations

import os
import re
from typing import ClassVar, Literal

from pydantic import Field, PrivateAttr, ValidationInfo, model_validator

from fgrpo_verl.evaluation.cost import CostAssumptions
from fgrpo_verl.evaluation.options import EngineOptions
from fgrpo_verl.evaluation.shapes import Shape
from fgrpo_verl.launch.recipe import Resources

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
PROTOCOL_HELP = ("select: a small-n selection pass on every checkpoint + the final pass on the selected one; full: "
                 "the final pass on every one")


def expand(text: str, where: str) -> tuple[str, list[str]]:
    """``${VAR}`` / ``${VAR:-default}`` from the environment; returns the text and the unset variables (left as they
    are, for the dry run to show)."""
    missing: list[str] = []

    def sub(match: re.Match) -> str:
        name, default = match.groups()
        if not os.environ.get(name) and default is None:
            missing.append(name)
        return os.environ.get(name) or (match.group(0) if default is None else default)

    if not text.strip():
        raise ValueError(f"{where} must be a non-empty string, got {text!r}")
    return _VAR.sub(sub, text), missing


# A default of None below stands for "left out": filled in from other keys by EvalSpec's validator. The types have
# no null, so a null written in a recipe is refused (for a count or a list of benchmarks it is a mistake).
class BenchmarkEntry(Shape):
    short_form: ClassVar[str] = "a file path"   # NAME: path is short for NAME: {file: path}
    file: str
    scorer: str = None   # default: the paper's scorer of that benchmark name, else math
    group: str = None    # prompt group; default: from the benchmark name (prompts.py)
    _unset: list[str] = PrivateAttr(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _short_form(cls, data):
        return {"file": data} if isinstance(data, str) else data

    @property
    def unset(self) -> list[str]:
        """Environment variables the file or scorer needs that are not set here."""
        return self._unset


class PassEntry(Shape):
    n: int = Field(None, ge=1)
    benchmarks: list[str] = None


class EvalSpec(Shape):
    benchmarks: dict[str, BenchmarkEntry]
    averages: dict[str, list[str]] | None = None
    select_by: str = None                # default: "Math Avg" when that average exists
    selection: PassEntry | None = None   # default: n = 32 on select_by's benchmarks
    final: PassEntry | None = None       # default: n = 1024 on every benchmark
    protocol: Literal["select", "full"] = Field("select", description=PROTOCOL_HELP)
    backend: Literal["vllm", "transformers"] = "vllm"
    # sampling of the paper's evaluation (§5.3): T = 1.0, top-p 1.0, no top-k; a completion is correct at score >= 1
    seed: int = Field(0, ge=0)
    temperature: float = 1.0
    top_p: float = 1.0
    threshold: float = 1.0
    prompt_preset: str | None = None
    max_new_tokens: int | Literal["train"] | None = None   # model_presets.eval_setting checks it
    engine: EngineOptions | None = None
    gpus_per_node: int = Field(None, ge=1)   # GPUs of an evaluation job; default 8 with vllm, else 1
    workers: int = Field(1, ge=1)            # worker processes on the CPU back-end
    resources: Resources = Field(default_factory=Resources)   # sbatch settings, as a recipe's
    cost: CostAssumptions = Field(default_factory=CostAssumptions)
    tables: list[Literal["table1", "table2", "table3", "table6", "curves"]] = []

    def passes(self) -> dict[str, PassEntry]:
        """The passes jobs run: protocol full evaluates every checkpoint with the final settings (one pass)."""
        if self.protocol == "full":
            return {"selection": self.final}
        return {"selection": self.selection, "final": self.final}

    @model_validator(mode="after")
    def _between_keys(self, info: ValidationInfo) -> EvalSpec:
        from fgrpo_verl.evaluation.prepare import BENCHMARKS as PAPER_BENCHMARKS
        from fgrpo_verl.evaluation.prompts import GROUPS, benchmark_group

        where = info.context["where"]
        if not self.benchmarks:
            raise ValueError(f"{where}.benchmarks is required: a mapping NAME: file (or NAME: {{file, scorer, group}})")
        for name, b in self.benchmarks.items():
            at = f"{where}.benchmarks.{name}"
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
                raise ValueError(f"{at}: a benchmark name is letters, digits, '_', '.', '-' (it names a table column)")
            paper = PAPER_BENCHMARKS.get(name)
            b.file, unset = expand(b.file, f"{at}.file")
            b.scorer, unset_scorer = expand(b.scorer or (paper.scorer if paper else "math"), f"{at}.scorer")
            b.group = b.group or benchmark_group(name)[0]
            if b.group not in GROUPS:
                raise ValueError(f"{at}.group={b.group!r}: the prompt group must be one of {GROUPS}")
            b._unset = unset + unset_scorer
        self.averages = {k: self._names(v, f"{where}.averages.{k}") for k, v in (self.averages or {}).items()}
        clash = sorted(set(self.averages) & set(self.benchmarks))
        if clash:
            raise ValueError(f"{where}.averages: {clash} are also benchmark names")
        if self.select_by is None and "Math Avg" in self.averages:
            self.select_by = "Math Avg"
        if self.select_by not in self.averages and self.select_by not in self.benchmarks:
            raise ValueError(f"{where}.select_by={self.select_by!r}: expected an average ({list(self.averages)}) or a "
                             f"benchmark ({list(self.benchmarks)}); the paper selects by the average in-domain math "
                             "pass@1")
        members = self.averages.get(self.select_by, [self.select_by])
        self.selection = self._filled(self.selection, 32, members, f"{where}.selection")
        missing = [b for b in members if b not in self.selection.benchmarks]
        if missing:
            raise ValueError(f"{where}.selection.benchmarks lacks {missing}, which select_by={self.select_by!r} needs")
        self.final = self._filled(self.final, 1024, list(self.benchmarks), f"{where}.final")
        if self.protocol == "full" and any(b not in self.final.benchmarks for b in members):
            raise ValueError(f"{where}: protocol full selects on the final pass, whose benchmarks lack {members}")
        self.engine = self.engine or EngineOptions()
        if self.gpus_per_node is None:
            self.gpus_per_node = 8 if self.backend == "vllm" else 1
        tp = self.engine.tensor_parallel_size
        if self.backend == "vllm" and self.gpus_per_node % tp:
            raise ValueError(f"{where}: gpus_per_node={self.gpus_per_node} is not a multiple of "
                             f"engine.tensor_parallel_size={tp}")
        return self

    def _names(self, value: list[str], where: str) -> list[str]:
        if not value:
            raise ValueError(f"{where} must be a non-empty list of benchmark names, got {value!r}")
        unknown = [v for v in value if v not in self.benchmarks]
        if unknown:
            raise ValueError(f"{where}: unknown benchmark(s) {unknown}; the recipe's evaluation.benchmarks: "
                             f"{list(self.benchmarks)}")
        if len(set(value)) != len(value):
            raise ValueError(f"{where} lists a benchmark twice: {value}")
        return value

    def _filled(self, entry: PassEntry | None, n: int, benchmarks: list[str], where: str) -> PassEntry:
        entry = entry or PassEntry()
        entry.n = n if entry.n is None else entry.n
        entry.benchmarks = benchmarks if entry.benchmarks is None else self._names(entry.benchmarks,
                                                                                   f"{where}.benchmarks")
        return entry

