"""Recipes: a sweep as data. A recipe YAML names its runs; each run is a list of Hydra overrides.

    name: paper_main                # recipe name: W&B group of every run
    project: fgrpo-paper            # W&B project (trainer.project_name)
    reproduces: F-GRPO Tables 1, 6  # free text, shown by --dry-run
    resources:                      # sbatch settings shared by all runs (a run may override them)
      time: "7-00:00:00"
      cpus_per_task: 64
    env: {}                         # extra environment exported by every job (never secrets)
    save_per_epoch: true            # a checkpoint each epoch: the trainer sets trainer.save_freq to verl's steps per epoch
    evaluation: {...}               # evaluation jobs launched with the runs (fgrpo_verl/launch/eval_jobs.py)
    common: [dataset=deepscaler, cluster=2x8]    # overrides every run gets first
    runs:
      - name: qwen25_7b-grpo-g0p5
        group: qwen25_7b-grpo       # finer grouping, a W&B tag group:<group> (the W&B group is the recipe)
        variant: low_lr             # optional: appended to the run name when the name alone would not differ
        overrides: [algo=grpo, base_model=qwen25_7b, algorithm.fgrpo.gamma=0.5]
        resources: {}               # optional, merged over the recipe's

A run's full override list is ``common + run.overrides + command-line overrides + trainer.project_name``, then
``trainer.experiment_name`` = fgrpo_verl.job.tracking's ``{algo}-g{γ}-n{N}-{model}-s{seed}[-<variant>]`` read from the
composed config plus ``-<config hash>`` (job/identity.py), which is also the Slurm job name. The run's
``name`` selects it (``--only``). Nodes and GPUs per node are
not resources: they are read from the composed ``trainer.nnodes`` / ``trainer.n_gpus_per_node`` (config group
``cluster``), so ``trainer.nnodes=4`` on the command line resizes both the Slurm allocation and verl.

Each part of the format is declared once below (:class:`Resources`, :class:`Run`, :class:`Recipe`: the strict shapes
of evaluation/shapes.py), so a mistake is one line naming its key path and what is valid there.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

from pydantic import Field, PrivateAttr, ValidationInfo, field_validator, model_validator

from fgrpo_verl.config.paths import recipes_dir
from fgrpo_verl.config.suggest import did_you_mean
from fgrpo_verl.evaluation.shapes import Shape
from fgrpo_verl.job.identity import is_secret_key

# Slurm job names and experiment names end up in paths, W&B and shell scripts: keep them plain.
Name = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", description="letters, digits, '_', '.', '-'")]
# an entry of `common:` or a run's `overrides:` (Hydra says what is wrong with one that is not blank)
Override = Annotated[str, Field(pattern=r"\S", description="a Hydra override such as key=value")]
# sbatch's memory amounts, of which a job takes one (not --mem-bind, a placement)
MEMORY_OPTIONS = ("--mem", "--mem-per-cpu", "--mem-per-gpu")


class Resources(Shape):
    """sbatch settings of one job. Every field is optional except what Slurm itself requires."""

    # wall-clock limit, Slurm syntax ("7-00:00:00", "30:00")
    time: str | None = None
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    # CPUs per node for Ray and the trainer (one task per node)
    cpus_per_task: int | None = Field(None, ge=1)
    # memory per node, Slurm syntax ("0" = all of it, "200G")
    mem: str | None = None
    exclusive: bool = False
    # False: ask Slurm for no GPUs and give Ray trainer.n_gpus_per_node logical ones (backend=cpu)
    request_gpus: bool = True
    # logical CPUs each node offers Ray (default: the CPUs Slurm allocated); backend=cpu needs more than cores
    ray_num_cpus: int | None = Field(None, ge=1)
    # seconds the job waits for every node to join the Ray cluster
    ray_join_timeout: int | None = Field(None, ge=1)
    # further sbatch options, verbatim ("--constraint=h100", "--reservation=x")
    extra: list[str] = []

    @model_validator(mode="after")
    def _sbatch_takes_them(self, info: ValidationInfo) -> Resources:
        bad = [o for o in self.extra if not re.fullmatch(r"--[a-z][a-z0-9-]*(=.*)?", o, re.DOTALL)]
        if bad:
            raise ValueError(f"{info.context['where']}: resources.extra {bad}: expected '--option' or '--option=value'")
        amounts = [o for o in self.extra if o.partition("=")[0] in MEMORY_OPTIONS]
        if self.mem is not None:
            amounts.insert(0, f"mem={self.mem}")
        if len(amounts) > 1:
            raise ValueError(f"{info.context['where']}: resources {' and '.join(amounts)}: sbatch takes one memory "
                             "option; keep one")
        return self


class Run(Shape):
    name: Name
    group: Name = None   # default: the recipe's name
    overrides: list[Override] = []
    # its own keys, merged over the recipe's by Recipe's validator
    resources: Resources = Field(default_factory=Resources)
    variant: Name = None


def _plain_key(override: str) -> str | None:
    """The key of a plain ``key=value`` override; None for ``+``/``++``/``~`` forms, whose order carries meaning (an
    added key, then a plain override of it) and which are kept as written."""
    if override.startswith(("+", "~")) or "=" not in override:
        return None
    return override.split("=", 1)[0].strip()


# an unknown --only name lists the recipe's runs up to this many, else says how to list them
LISTED_RUNS = 8


class Recipe(Shape):
    name: Name
    project: Name
    reproduces: str = ""
    resources: Resources = Field(default_factory=Resources)
    env: dict[str, str | int | float | bool] = {}
    save_per_epoch: bool = False
    # the raw `evaluation:` block (parsed and checked by fgrpo_verl.launch.eval_spec.EvalSpec); None: none
    evaluation: object = None
    common: list[Override] = []
    runs: list[Run] = Field(min_length=1)
    _path: Path = PrivateAttr(None)

    @classmethod
    def key(cls, where: str, loc: list) -> str:
        """``recipe.yaml: runs[0].name``."""
        path = super().key("", loc).lstrip(".")
        return f"{where}: {path}" if path else where

    @field_validator("env")
    @classmethod
    def _no_secret(cls, env: dict, info: ValidationInfo) -> dict[str, str]:
        for key in env:
            # secrets belong in the user's environment or ~/.netrc, never in a recipe or a rendered job script
            if is_secret_key(key):
                raise ValueError(
                    f"{info.context['where']}: env.{key} looks like a secret; export it in your shell (or use "
                    "~/.netrc for W&B) instead of writing it into a recipe and its job scripts"
                )
        return {key: str(value) for key, value in env.items()}

    @model_validator(mode="after")
    def _runs(self, info: ValidationInfo) -> Recipe:
        seen = set()
        for i, run in enumerate(self.runs):
            where = f"{info.context['where']}: runs[{i}]"
            if run.name in seen:
                raise ValueError(f"{where}: duplicate run name {run.name!r}")
            seen.add(run.name)
            run.group = run.group or self.name
            run.resources = Resources.parse({**self.resources.model_dump(exclude_unset=True),
                                             **run.resources.model_dump(exclude_unset=True)}, where)
        return self

    @property
    def path(self) -> Path:
        return self._path

    def run_overrides(self, run: Run, extra: tuple[str, ...] | list[str] = ()) -> list[str]:
        """The run's Hydra overrides: common, run, command line, then its project (the experiment name is derived
        from the composed config, see launch/plan.py). A plain ``key=value`` appears once, at its last place:
        Hydra applies the later one anyway, and the job script then holds only the value that runs
        (``--only R algorithm.fgrpo.gamma=0.7`` drops R's own ``gamma=0.5`` line)."""
        listed = [*self.common, *run.overrides, *extra, f"trainer.project_name={self.project}"]
        keys = [_plain_key(o) for o in listed]
        last = {key: i for i, key in enumerate(keys)}
        # a dict value merges into the node (Hydra: `a={x:1}` then `a={y:2}` keeps x): such a key stays as written
        merged = {key for key, o in zip(keys, listed) if key is not None and o.split("=", 1)[1].lstrip()[:1] == "{"}
        return [o for i, (key, o) in enumerate(zip(keys, listed)) if key is None or key in merged or last[key] == i]

    def label(self, run: Run, extra: tuple[str, ...] | list[str] = ()) -> str:
        """What the dry run, ``--status`` and a submit call ``run`` under the command-line overrides ``extra``: its
        name, plus each of its own ``key=value`` lines that ``extra`` replaces, as it runs. A name spells its own
        settings (``qwen25_7b-grpo-g0p5``: γ = 0.5), so ``algorithm.fgrpo.gamma=0.7`` on the command line shows as
        ``qwen25_7b-grpo-g0p5 [algorithm.fgrpo.gamma=0.7]``."""
        own = {_plain_key(o): o for o in run.overrides if _plain_key(o) is not None}
        changed = {}
        for override in extra:
            # `++key=v` sets the key whether or not it exists: for a key the run sets, the same as `key=v`
            plain = override[2:] if override.startswith("++") else override
            key = _plain_key(plain)
            if key in own:
                changed.pop(key, None)  # the last one is what runs
                if plain != own[key]:
                    changed[key] = plain
        return f"{run.name} [{' '.join(changed.values())}]" if changed else run.name

    def select(self, names: list[str] | None) -> list[Run]:
        """The runs named in ``names`` (all runs for None), in recipe order."""
        if not names:
            return list(self.runs)
        known = [r.name for r in self.runs]
        unknown = [n for n in names if n not in known]
        if unknown:
            hint = "".join(did_you_mean(n, known) for n in unknown)
            # a short recipe's names fit on the line; a sweep's (paper_main: 36) are one command away
            runs = (f"runs: {known}" if len(known) <= LISTED_RUNS else
                    f"{len(known)} runs: `fgrpo-verl recipes {self.name}` lists them")
            raise ValueError(f"--only: no run named {unknown} in recipe {self.name!r}{hint} ({runs})")
        return [r for r in self.runs if r.name in names]


def load_recipe(recipe: str) -> Recipe:
    """Parse and check a recipe (see the module docstring for the format): a file path, or the name of a shipped
    recipe (``paper_main`` = recipes/paper_main.yaml)."""
    import yaml

    path, shipped = Path(recipe), recipes_dir() / f"{recipe}.yaml"
    if path.is_file() or (path.suffix == "" and shipped.is_file()):
        path = path.resolve() if path.is_file() else shipped
    else:
        names = sorted(p.stem for p in recipes_dir().glob("*.yaml"))
        raise ValueError(f"recipe {recipe!r} is neither a file nor a shipped recipe{did_you_mean(recipe, names)} "
                         f"(shipped recipes: {names}; `fgrpo-verl recipes` lists them)")
    loaded = Recipe.parse(yaml.safe_load(path.read_text(encoding="utf-8")), str(path))
    loaded._path = path
    return loaded
