"""The plan of a run's evaluation jobs: made by ``fgrpo-verl launch`` (fgrpo_verl/launch/eval_jobs.py) when it
plans the run, written as JSON into each evaluation job's script, and read back by the job (checkpoint_eval.py).

A job may run long after it was planned, under another version of this package: :meth:`Plan.from_json` reads only
a plan with exactly this version's keys and value types, and otherwise refuses in one line naming the key (a script
from another version is planned again, not half-read)."""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass, fields, is_dataclass
from typing import Any


@dataclass(frozen=True)
class Steps:
    """A training run's checkpoint schedule, as its config says (the run directory may know the total better)."""

    save_freq: int
    total: int | None              # None: it needs the training data
    train_batch_size: int
    group_size: int
    epochs_only: int | None        # a checkpoint each epoch: the checkpoint count without the data (cost estimate)


@dataclass(frozen=True)
class Wandb:
    run_id: str
    log: bool                      # the run logs to W&B (its trainer.logger)


@dataclass(frozen=True)
class BenchmarkFile:
    file: str                      # absolute (the job's working directory is not the launch's)
    scorer: str
    group: str                     # prompt group


@dataclass(frozen=True)
class Pass:
    """An evaluation pass's samples per problem and benchmarks (a recipe's evaluation.selection / final)."""

    n: int
    benchmarks: tuple[str, ...]


@dataclass(frozen=True)
class Passes:
    selection: Pass                # protocol full: the final pass's settings, on every checkpoint
    final: Pass

    def __getitem__(self, phase: str) -> Pass:
        return {"selection": self.selection, "final": self.final}[phase]


@dataclass(frozen=True)
class Sampling:
    """Everything but n and the benchmarks that decides a pass's samples and scores (its label hashes it)."""

    backend: str
    temperature: float
    top_p: float
    seed: int
    threshold: float
    prompt_preset: str
    max_new_tokens: int


@dataclass(frozen=True)
class Baseline:
    """The γ = 0 run a focal run's checkpoint is selected against."""

    run: str
    experiment: str
    run_dir: str
    steps: Steps


@dataclass(frozen=True)
class Plan:
    recipe: str
    run: str
    experiment: str                # the run's Slurm job name
    project: str
    run_dir: str
    gamma: float
    wandb: Wandb
    steps: Steps
    benchmarks: dict[str, BenchmarkFile]
    averages: dict[str, tuple[str, ...]]
    select_by: str
    passes: Passes
    protocol: str
    sampling: Sampling
    setting_source: str            # where the prompt preset and length come from (model_presets.eval_setting)
    engine: dict[str, Any]         # fgrpo-verl eval options (evaluation/options.py)
    gpus: int
    workers: int
    baseline: Baseline | None

    def to_dict(self) -> dict:
        return json.loads(json.dumps(dataclasses.asdict(self)))

    def to_json(self) -> str:
        """JSON with one top-level key per line (readable in the job script), ASCII (no character can end the
        script's here-document early)."""
        data = self.to_dict()
        return "{\n" + ",\n".join(f" {json.dumps(k)}: {json.dumps(data[k], sort_keys=True, ensure_ascii=True)}"
                                  for k in sorted(data)) + "\n}"

    @classmethod
    def from_dict(cls, data) -> Plan:
        return _read(cls, data, "plan")

    @classmethod
    def from_json(cls, text: str) -> Plan:
        return cls.from_dict(json.loads(text))


def _read(tp, value, where: str):
    """``value`` (parsed JSON) as type ``tp``; a ValueError naming the key where it is not one."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        tp = next(a for a in args if a is not type(None))
        origin, args = typing.get_origin(tp), typing.get_args(tp)
    if is_dataclass(tp):
        if not isinstance(value, dict):
            raise ValueError(f"{where}: expected a mapping, got {value!r}")
        names = [f.name for f in fields(tp)]
        unknown, missing = sorted(set(value) - set(names)), [n for n in names if n not in value]
        if unknown or missing:
            raise ValueError(f"{where}: " + ", ".join([f"unknown key(s) {unknown}"] * bool(unknown)
                                                      + [f"missing key(s) {missing}"] * bool(missing))
                             + f"; this version's keys: {names} (a job planned by another version of fgrpo-verl? "
                             "launch the recipe again to plan it)")
        hints = typing.get_type_hints(tp)
        return tp(**{n: _read(hints[n], value[n], f"{where}.{n}") for n in names})
    if origin is dict:
        if not isinstance(value, dict):
            raise ValueError(f"{where}: expected a mapping, got {value!r}")
        return {k: _read(args[1], v, f"{where}.{k}") for k, v in value.items()}
    if origin is tuple:
        if not isinstance(value, list):
            raise ValueError(f"{where}: expected a list, got {value!r}")
        return tuple(_read(args[0], v, f"{where}[{i}]") for i, v in enumerate(value))
    accepted = {Any: object, float: (int, float)}.get(tp, tp)
    if not isinstance(value, accepted) or (isinstance(value, bool) and tp in (int, float)):
        raise ValueError(f"{where}: expected {getattr(tp, '__name__', tp)}, got {value!r}")
    return value
