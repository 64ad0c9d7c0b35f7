"""The plan of a run's evaluation jobs: made by ``fgrpo-verl launch`` (fgrpo_verl/launch/eval_jobs.py) when it
plans the run, written as JSON into each evaluation job's script, and read back by the job (eval_job.py).

A job may run long after it was planned, under another version of this package: :meth:`Plan.read` takes only a
plan with exactly this version's keys and value types, and otherwise refuses in one line naming the key (a script
from another version is planned again, not half-read).
"""

from __future__ import annotations

from pydantic import ConfigDict, create_model

from fgrpo_verl.evaluation.options import EngineOptions, EvalOptions
from fgrpo_verl.evaluation.shapes import Shape


class Frozen(Shape):
    model_config = ConfigDict(frozen=True)


class Steps(Frozen):
    """A training run's checkpoint schedule, as its config says (the run directory may know the total better)."""

    save_freq: int
    total: int | None              # None: it needs the training data
    train_batch_size: int
    group_size: int
    epochs_only: int | None        # a checkpoint each epoch: the checkpoint count without the data (cost estimate)


class Wandb(Frozen):
    run_id: str
    log: bool                      # the run logs to W&B (its trainer.logger)


class BenchmarkFile(Frozen):
    file: str                      # absolute (the job's working directory is not the launch's)
    scorer: str
    group: str                     # prompt group


class Pass(Frozen):
    """An evaluation pass's samples per problem and benchmarks (a recipe's evaluation.selection / final)."""

    n: int
    benchmarks: list[str]


class Passes(Frozen):
    selection: Pass                # protocol full: the final pass's settings, on every checkpoint
    final: Pass

    def __getitem__(self, phase: str) -> Pass:
        return {"selection": self.selection, "final": self.final}[phase]


# Everything but n and the benchmarks that decides a pass's samples and scores (its label hashes it): the evaluation
# options of these names, typed as the options declare them (choices included), each required.
Sampling = create_model("Sampling", __base__=Frozen, **{
    name: (EvalOptions.model_fields[name].annotation, ...)
    for name in ("backend", "temperature", "top_p", "seed", "threshold", "prompt_preset", "max_new_tokens")})


class Baseline(Frozen):
    """The γ = 0 run a focal run's checkpoint is selected against."""

    run: str
    experiment: str
    run_dir: str
    steps: Steps


class Plan(Frozen):
    refusal_hint = "; a job planned by another version of fgrpo-verl? launch the recipe again to plan it"

    recipe: str
    run: str
    experiment: str                # the run's Slurm job name
    project: str
    run_dir: str
    gamma: float
    wandb: Wandb
    steps: Steps
    benchmarks: dict[str, BenchmarkFile]
    averages: dict[str, list[str]]
    select_by: str
    passes: Passes
    protocol: str
    sampling: Sampling
    setting_source: str            # where the prompt preset and length come from (model_presets.eval_setting)
    engine: EngineOptions          # the recipe's evaluation.engine
    gpus: int
    workers: int
    baseline: Baseline | None

    @classmethod
    def read(cls, data) -> Plan:
        """A plan from its JSON text (a job script's) or its parsed JSON (the launch's record)."""
        return cls.parse(data, "plan")

    def to_json(self) -> str:
        """One line of JSON: data in the job script's here-document (JSON escapes every line break, so nothing in
        it can end the here-document)."""
        return self.model_dump_json()
