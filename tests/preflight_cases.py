"""What the preflight's tests share: composing configs as the launcher does, the preflight's verdict on them, the
maze's stand-in files, and verl's own micro-batch split loaded as the preflight's tests call it."""

from __future__ import annotations

from pathlib import Path

import pytest

from fgrpo_verl import preflight
from fgrpo_verl.config.compose import SharedComposer
from fgrpo_verl.launch.recipe import load_recipe

GIB = 2**30
SEVEN_B = ["algo=grpo", "base_model=qwen25_7b", "dataset=deepscaler", "cluster=2x8"]
# the end of a line the memory estimate refuses with FGRPO_PREFLIGHT_MEMORY=refuse, and of its warning otherwise
STRICT = "(an estimate; refused because FGRPO_PREFLIGHT_MEMORY=refuse)"
WARNED = "(an estimate: FGRPO_PREFLIGHT_MEMORY=refuse refuses it)"
REFUSE = {"FGRPO_PREFLIGHT_MEMORY": "refuse"}

# One composer, as the launcher composes a recipe's runs: Hydra composes each distinct list of config-group
# selections once, and each config's value overrides are applied to a copy with Hydra's own applier
# (tests/test_first_hour_on_cpu.py checks that this is Hydra's compose of all the overrides at once)
_COMPOSER = SharedComposer()


def compose(overrides=()):
    return _COMPOSER.compose(overrides)


def run(overrides, workdir: Path, **kw) -> preflight.Report:
    return preflight.run(compose(overrides), workdir, **kw)


def refused(overrides, workdir: Path, **kw) -> list[str]:
    with pytest.raises(preflight.PreflightError) as err:
        run(overrides, workdir, **kw)
    return str(err.value).splitlines()


def warnings(report: preflight.Report) -> list[str]:
    """The memory estimate's warnings of a run that passed."""
    return [note for note in report.notes if note.startswith("warning: ") and note.endswith(WARNED)]


def phases(report: preflight.Report) -> dict[str, float]:
    """The estimate's GiB per phase, as the dry run shows them."""
    (note,) = [n for n in report.notes if n.startswith("memory per GPU (estimate): ")]
    shown = note.removeprefix("memory per GPU (estimate): ").split(" of ")[0]
    return {name: float(gib) for name, gib in (part.rsplit(" ", 1) for part in shown.split(", "))}


def maze(name: str = "n4-g0p0", *extra: str) -> list[str]:
    recipe = load_recipe("maze")
    (selected,) = recipe.select([name])
    return recipe.run_overrides(selected, list(extra))


def parquet_rows(path: Path, rows: int) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"i": pa.array(range(rows), pa.int32())}), path)
    return path


def maze_model(path: Path, preset: str = "paper") -> Path:
    from fgrpo_verl.tasks.maze.model import build_model, save_model_dir
    from fgrpo_verl.tasks.maze.tokenizer import build_tokenizer

    tokenizer = build_tokenizer()
    return save_model_dir(build_model(preset, tokenizer, 0), tokenizer, path)


def verl_module(relative: str):
    """A module of verl loaded from its file alone (``workers/engine/utils.py``: ``prepare_micro_batches``;
    ``workers/engine/base.py``: the engines' context switch): importing it by name runs the engine package's
    ``__init__``, which imports every training engine."""
    import importlib.util

    import verl

    path = Path(verl.__path__[0]) / relative
    spec = importlib.util.spec_from_file_location(f"verl_file_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def verl_micro_batches(rows: int | list[int], micro=None, budget=None, sp: int = 1) -> list[int]:
    """verl's own ``prepare_micro_batches`` on one GPU's batch: ``rows`` samples in micro-batches of ``micro``, or
    sequences of these real lengths (nested, as v1 hands them to its workers) packed to ``budget`` x ``sp`` tokens.
    The samples (fixed) or tokens (packed) of each micro-batch it makes."""
    import torch
    from verl.utils import tensordict_utils as tu

    prepare = verl_module("workers/engine/utils.py").prepare_micro_batches
    if isinstance(rows, int):
        batch = tu.get_tensordict({"x": torch.zeros(rows, 1)},
                                  non_tensor_dict={"use_dynamic_bsz": False, "micro_batch_size_per_gpu": micro})
        return [len(m) for m in prepare(batch)[0]]
    ids = torch.nested.nested_tensor([torch.zeros(n, dtype=torch.long) for n in rows], layout=torch.jagged)
    batch = tu.get_tensordict({"input_ids": ids}, non_tensor_dict={
        "use_dynamic_bsz": True, "max_token_len_per_gpu": budget, "sp_size": sp})
    return [int(m["input_ids"].offsets().diff().sum()) for m in prepare(batch)[0]]


def verl_source(relative: str) -> str:
    import verl

    return (Path(verl.__path__[0]) / relative).read_text()
