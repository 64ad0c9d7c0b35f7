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
composed config plus ``-<config hash>`` (launch/identity.py), which is also the Slurm job name. The run's
``name`` selects it (``--only``). Nodes and GPUs per node are
not resources: they are read from the composed ``trainer.nnodes`` / ``trainer.n_gpus_per_node`` (config group
``cluster``), so ``trainer.nnodes=4`` on the command line resizes both the Slurm allocation and verl.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from fgrpo_verl.config.paths import recipes_dir
from fgrpo_verl.config.suggest import did_you_mean
from fgrpo_verl.launch.steps import positive_int

# Slurm job names and experiment names end up in paths, W&B and shell scripts: keep them plain.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


# sbatch's memory amounts, of which a job takes one (not --mem-bind, a placement)
MEMORY_OPTIONS = ("--mem", "--mem-per-cpu", "--mem-per-gpu")


@dataclass(frozen=True)
class Resources:
    """sbatch settings of one job. Every field is optional except what Slurm itself requires."""

    # wall-clock limit, Slurm syntax ("7-00:00:00", "30:00")
    time: str | None = None
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    # CPUs per node for Ray and the trainer (one task per node)
    cpus_per_task: int | None = None
    # memory per node, Slurm syntax ("0" = all of it, "200G")
    mem: str | None = None
    exclusive: bool = False
    # False: ask Slurm for no GPUs and give Ray trainer.n_gpus_per_node logical ones (backend=cpu)
    request_gpus: bool = True
    # logical CPUs each node offers Ray (default: the CPUs Slurm allocated); backend=cpu needs more than cores
    ray_num_cpus: int | None = None
    # seconds the job waits for every node to join the Ray cluster
    ray_join_timeout: int | None = None
    # further sbatch options, verbatim ("--constraint=h100", "--reservation=x")
    extra: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, data: dict | None, where: str) -> Resources:
        data = dict(data or {})
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"{where}: unknown resources key(s) {unknown}; valid keys: {sorted(known)}")
        if "extra" in data:
            extra = data["extra"]
            if not isinstance(extra, list) or not all(isinstance(x, str) and x.startswith("--") for x in extra):
                raise ValueError(f"{where}: resources.extra must be a list of '--option[=value]' strings, got {extra!r}")
            data["extra"] = tuple(extra)
        for key in ("cpus_per_task", "ray_num_cpus", "ray_join_timeout"):
            if data.get(key) is not None:
                positive_int(data[key], f"{where}: resources.{key}")
        for key in ("exclusive", "request_gpus"):
            if key in data and not isinstance(data[key], bool):
                raise ValueError(f"{where}: resources.{key} must be true or false, got {data[key]!r}")
        for key in ("time", "partition", "account", "qos", "mem"):
            value = data.get(key)
            if value is not None and not isinstance(value, str):
                raise ValueError(f"{where}: resources.{key} must be a string, got {value!r}")
        amounts = [o for o in data.get("extra", ()) if o.partition("=")[0] in MEMORY_OPTIONS]
        if data.get("mem") is not None:
            amounts.insert(0, f"mem={data['mem']}")
        if len(amounts) > 1:
            raise ValueError(f"{where}: resources {' and '.join(amounts)}: sbatch takes one memory option; keep one")
        return cls(**data)

    def merged(self, data: dict | None, where: str) -> Resources:
        """These resources with the keys of ``data`` replaced."""
        base = {k: getattr(self, k) for k in self.__dataclass_fields__}
        base["extra"] = list(base["extra"])
        base.update(data or {})
        return Resources.from_dict(base, where)


@dataclass(frozen=True)
class Run:
    name: str
    group: str
    overrides: tuple[str, ...]
    resources: Resources
    variant: str | None = None


def _plain_key(override: str) -> str | None:
    """The key of a plain ``key=value`` override; None for ``+``/``++``/``~`` forms, whose order carries meaning (an
    added key, then a plain override of it) and which are kept as written."""
    if override.startswith(("+", "~")) or "=" not in override:
        return None
    return override.split("=", 1)[0].strip()


# an unknown --only name lists the recipe's runs up to this many, else says how to list them
LISTED_RUNS = 8


@dataclass(frozen=True)
class Recipe:
    name: str
    project: str
    path: Path
    reproduces: str
    common: tuple[str, ...]
    env: dict[str, str]
    runs: tuple[Run, ...] = field(default=())
    save_per_epoch: bool = False
    # the raw `evaluation:` block (parsed and checked by fgrpo_verl.launch.eval_jobs.load_eval_spec); None: none
    evaluation: dict | None = None

    def job_name(self, run: Run) -> str:
        """``<recipe>-<run name>``: the job name of a script rendered without a run identity (render_job's default)."""
        return f"{self.name}-{run.name}"

    def run_overrides(self, run: Run, extra: tuple[str, ...] | list[str] = ()) -> list[str]:
        """The run's Hydra overrides: common, run, command line, then its project (the experiment name is derived
        from the composed config, see launch/__init__.py). A plain ``key=value`` appears once, at its last place:
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


def resolve_recipe_path(recipe: str) -> Path:
    """A recipe file path, or the name of a shipped recipe (``paper_main`` = recipes/paper_main.yaml)."""
    path = Path(recipe)
    if path.is_file():
        return path.resolve()
    shipped = recipes_dir() / f"{recipe}.yaml"
    if path.suffix == "" and shipped.is_file():
        return shipped
    names = sorted(p.stem for p in recipes_dir().glob("*.yaml"))
    raise ValueError(
        f"recipe {recipe!r} is neither a file nor a shipped recipe{did_you_mean(recipe, names)} (shipped recipes: "
        f"{names}; `fgrpo-verl recipes` lists them)"
    )


def _string_list(value, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ValueError(f"{where} must be a list of Hydra override strings, got {value!r}")
    return tuple(value)


def _checked_name(value, where: str) -> str:
    if not isinstance(value, str) or not _NAME.match(value):
        raise ValueError(f"{where} must match {_NAME.pattern} (letters, digits, '_', '.', '-'), got {value!r}")
    return value


def load_recipe(recipe: str) -> Recipe:
    """Parse and check a recipe file (see the module docstring for the format)."""
    import yaml

    from fgrpo_verl.launch.identity import is_secret_key

    path = resolve_recipe_path(recipe)
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a recipe is a mapping with keys name, project, runs, ...; got {type(data).__name__}")
    allowed = {"name", "project", "reproduces", "resources", "env", "common", "runs", "save_per_epoch", "evaluation"}
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ValueError(f"{path}: unknown recipe key(s) {unknown}; valid keys: {sorted(allowed)}")
    name = _checked_name(data.get("name"), f"{path}: name")
    project = _checked_name(data.get("project"), f"{path}: project")
    env = data.get("env") or {}
    if not isinstance(env, dict):
        raise ValueError(f"{path}: env must be a mapping NAME: value, got {env!r}")
    for key in env:
        # secrets belong in the user's environment or ~/.netrc, never in a recipe or a rendered job script
        if is_secret_key(str(key)):
            raise ValueError(
                f"{path}: env.{key} looks like a secret; export it in your shell (or use ~/.netrc for W&B) "
                "instead of writing it into a recipe and its job scripts"
            )
    resources = Resources.from_dict(data.get("resources"), f"{path}: resources")
    save_per_epoch = data.get("save_per_epoch", False)
    if not isinstance(save_per_epoch, bool):
        raise ValueError(f"{path}: save_per_epoch must be true or false, got {save_per_epoch!r}")
    raw_runs = data.get("runs")
    if not isinstance(raw_runs, list) or not raw_runs:
        raise ValueError(f"{path}: runs must be a non-empty list of {{name, group, overrides}} entries")
    runs, seen = [], set()
    for i, raw in enumerate(raw_runs):
        where = f"{path}: runs[{i}]"
        if not isinstance(raw, dict):
            raise ValueError(f"{where} must be a mapping with name, group, overrides; got {raw!r}")
        extra_keys = sorted(set(raw) - {"name", "group", "overrides", "resources", "variant"})
        if extra_keys:
            raise ValueError(
                f"{where}: unknown key(s) {extra_keys}; valid keys: group, name, overrides, resources, variant"
            )
        run_name = _checked_name(raw.get("name"), f"{where}.name")
        if run_name in seen:
            raise ValueError(f"{where}: duplicate run name {run_name!r}")
        seen.add(run_name)
        runs.append(
            Run(
                name=run_name,
                group=_checked_name(raw.get("group", name), f"{where}.group"),
                overrides=_string_list(raw.get("overrides"), f"{where}.overrides"),
                resources=resources.merged(raw.get("resources"), f"{where}.resources"),
                variant=None if raw.get("variant") is None else _checked_name(raw["variant"], f"{where}.variant"),
            )
        )
    return Recipe(
        name=name,
        project=project,
        path=path,
        reproduces=str(data.get("reproduces", "")),
        common=_string_list(data.get("common"), f"{path}: common"),
        env={str(k): str(v) for k, v in env.items()},
        runs=tuple(runs),
        save_per_epoch=save_per_epoch,
        evaluation=data.get("evaluation"),
    )
