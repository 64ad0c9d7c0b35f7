"""Rehearsal: every shipped recipe shape that fits this machine starts through verl's real trainer on CPU with the
config its cluster job would run (tests/rehearsal.py: what is kept, what is scaled), through worker start-up, one
training step and validation, so that what verl's start-up refuses is found here and not in a GPU allocation.

One verl run per distinct shape, not per gamma or N, one after another (side by side, the two maze runs took as
long as one after the other: vLLM's engine start keeps both cores busy):

- maze (1 GPU, TP 1, validation n = 2048): its largest N (128), the fullest TransferQueue and the most
  micro-batches; the other N differ only in batch size, which the preflight checks per run with verl's own
  micro-batch split (tests/test_preflight_on_cpu.py);
- the 3B/4B LLM runs (16 GPUs, TP 1: 16 replicas) as 1 node x 2 GPUs (2 replicas), F-DAPO on Qwen3-4B-Base's
  settings (thinking template on).

Not rehearsed here: the Qwen2.5-7B runs (TP 2) and the KL control (TP 2, reference model) need a rollout that
serves TP 2, which the ``hf`` rollout of ``backend=cpu`` does not; the preflight checks their layout and the
in-process test pins its TP rule to verl's ``init_model``.

The TransferQueue bound is pinned by the maze rehearsal itself (it runs at the preflight's bound, the tightest
capacity it accepts) and by the maze run one storage slot per unit below its bound, which must fail in verl with
TransferQueue's "Storage capacity exceeded" (and is refused by the preflight). That run keeps the recipe's storage
units and validation and takes a group of 16 (as many samples as validation): the same refusal by the preflight and
the same failure in verl as at n=128, with an eighth of its rollouts and micro-batches (the n=128 step is the run at
the bound).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from fgrpo_verl.environment import environment_with
from rehearsal import BACKEND, VAL_SAMPLES, rehearsal, standin_llm, standin_maze
from verl_runs import metrics as _metrics
from verl_runs import run_train

pytestmark = pytest.mark.e2e

MAZE_RUN = ("maze", "n128-g0p5")
LLM_RUN = ("paper_main", "qwen3_4b_base-dapo-g0p5")
# the below-bound run's group size: the smallest training batch (one prompt) the preflight refuses on
# total_storage_size as it refuses the n=128 run (a validation larger than the training batch is refused on
# data.val_batch_size instead): as many samples as the one validation batch holds
BELOW_BOUND_N = VAL_SAMPLES
PROBLEMS = [(f"What is {a} + {b} ?", str(a + b)) for a in range(1, 5) for b in range(1, 5)]


def _train(reh, run_dir: Path, *extra: str) -> dict:
    """The rehearsal's verl run (wall time and peak memory printed with ``pytest -s``)."""
    return run_train([*reh.overrides, *extra, f"trainer.experiment_name={run_dir.name}"], run_dir, env=reh.env,
                     label=f"rehearsal {reh.recipe} {reh.run} ({reh.overrides[0]})")


def _assert_ok(result: dict) -> None:
    assert result["rc"] == 0, "rehearsal failed; end of its log:\n" + result["log"][-6000:]


def _check_preflight(reh, workdir: Path) -> str:
    """The rehearsal's own config passes the preflight (what the launcher would say about it)."""
    from fgrpo_verl.config.compose import compose
    from fgrpo_verl import preflight

    with environment_with(reh.env):
        return preflight.run(compose(reh.overrides), workdir, require_model=True).summary()


STORAGE = "transfer_queue.backend.SimpleStorage"


def _below(reh):
    """``reh`` with each storage unit one sample smaller than the preflight's bound needs: (the run, units, live
    samples, total)."""
    units = reh.kept[f"{STORAGE}.num_data_storage_units"]
    live = reh.scaled[f"{STORAGE}.total_storage_size"][1]
    # per-unit capacity ceil(total / units) one below ceil(live / units)
    total = units * (-(-live // units) - 1)
    below = type(reh)(reh.recipe, reh.run, [*reh.overrides, f"{STORAGE}.total_storage_size={total}"], reh.env,
                      reh.cluster)
    return below, units, live, total


@pytest.fixture(scope="module")
def maze_inputs(tmp_path_factory):
    """The stand-in maze data and model of both maze runs: (root, job environment)."""
    root = tmp_path_factory.mktemp("rehearsal_maze")
    return root, standin_maze(root / "maze", n_train=4, n_val=2)


@pytest.fixture(scope="module")
def at_bound(maze_inputs):
    """The maze recipe at the preflight's TransferQueue bound, with its rollouts and validation dumped."""
    root, env = maze_inputs
    reh = rehearsal(*MAZE_RUN, root, None, env)
    summary = _check_preflight(reh, root)
    return SimpleNamespace(root=root, reh=reh, summary=summary, run=_train(
        reh, root / "run", f"trainer.rollout_data_dir={root / 'rollouts'}",
        f"trainer.validation_data_dir={root / 'validation'}"))


@pytest.fixture(scope="module")
def below_bound(maze_inputs):
    """The maze recipe with each storage unit one sample smaller than the bound needs. TransferQueue does not
    depend on the rollout engine: the hf rollout's faster start does. Nor on the group size beyond the samples it
    stores: the recipe's storage units and validation with a group of BELOW_BOUND_N fail the same way after an
    eighth of the n=128 step's rollouts and micro-batches (the n=128 step runs at its bound in ``at_bound``)."""
    root, env = maze_inputs
    reh = rehearsal(*MAZE_RUN, root / "below_bound", None, env, backend="cpu",
                    scaled_also={"actor_rollout_ref.rollout.n": BELOW_BOUND_N})
    below, units, live, total = _below(reh)
    return SimpleNamespace(root=root, reh=below, units=units, live=live, total=total,
                           run=_train(below, root / "below"))


@pytest.fixture(scope="module")
def llm(tmp_path_factory):
    """The 3B/4B LLM recipe shape on 2 logical GPUs (2 replicas), on a stand-in model."""
    root = tmp_path_factory.mktemp("rehearsal_llm")
    model, env = standin_llm(root / "llm", PROBLEMS)
    reh = rehearsal(*LLM_RUN, root, model, env)
    summary = _check_preflight(reh, root)
    return SimpleNamespace(root=root, reh=reh, summary=summary, run=_train(reh, root / "run"))


def test_maze_recipe_starts_trains_and_validates_at_the_storage_bound(at_bound):
    root, reh = at_bound.root, at_bound.reh
    print(f"\n[rehearsal] backend={BACKEND} maze kept {reh.kept}\n[rehearsal] scaled {reh.scaled}")
    print(f"[rehearsal] {at_bound.summary}")
    _assert_ok(at_bound.run)
    metrics = _metrics(root / "run")
    step = metrics[1]
    assert step["training/global_step"] == 1
    # the run kept the recipe's group size (128 samples of the step's one prompt) and validated both held-out
    # mazes, one per batch, 16 samples each
    assert reh.kept["actor_rollout_ref.rollout.n"] == 128
    rollouts = [json.loads(line) for line in (root / "rollouts" / "1.jsonl").read_text().splitlines()]
    assert len(rollouts) == 128
    assert any(k.startswith("val-core/maze/") and k.endswith("pass@16") for k in step), sorted(step)
    validated = [json.loads(line) for line in (root / "validation" / "1.jsonl").read_text().splitlines()]
    assert len(validated) == 2 * 16
    assert (root / "checkpoints" / "global_step_1").is_dir()


def test_one_slot_per_storage_unit_below_the_bound_fails_in_verl_and_in_the_preflight(below_bound):
    """The other side of the TransferQueue bound: the maze run with each storage unit one sample smaller than the
    preflight's bound needs. verl's TransferQueue refuses it mid-validation; the preflight refuses it up front."""
    from fgrpo_verl.config.compose import compose
    from fgrpo_verl import preflight

    below = below_bound
    # the step's training batch and the validation batch each fit one slot per unit below the bound; the
    # validation put, while the training batch is still held, does not. More than one unit: the per-unit capacity
    # (ceil(total / units)), not only the total, is what both sides pin
    assert below.units > 1 and below.live == BELOW_BOUND_N + VAL_SAMPLES, (below.units, below.live)
    with environment_with(below.reh.env), pytest.raises(preflight.PreflightError) as err:
        preflight.run(compose(below.reh.overrides), below.root)
    assert str(err.value) == (f"{STORAGE}.total_storage_size={below.total}: a step holds {below.live} samples in "
                              f"TransferQueue ({below.units} unit(s) of {below.total // below.units}), more than it "
                              f"stores ('Storage capacity exceeded'); raise it to {below.live} or more")
    result = below.run
    assert result["rc"] != 0, "verl accepted a TransferQueue below the preflight's bound"
    assert "Storage capacity exceeded" in result["log"], result["log"][-4000:]
    # in the step's validation, while the step's training batch is still held: the training batch alone fit
    assert "in _validate" in result["log"], result["log"][-4000:]


def test_llm_recipe_shape_starts_on_two_gpus_with_two_replicas_and_validates(llm):
    print(f"\n[rehearsal] backend={BACKEND} llm kept {llm.reh.kept}\n[rehearsal] scaled {llm.reh.scaled}\n"
          f"[rehearsal] {llm.summary}")
    assert "2 rollout replica(s) of TP 1" in llm.summary
    _assert_ok(llm.run)
    step = _metrics(llm.root / "run")[1]
    assert step["training/global_step"] == 1
    assert step["critic/score/mean"] >= 0
    # validation=aime25 (this run's App. P curves): pass@k up to the scaled val_kwargs.n on the AIME25 file
    assert any(k.startswith("val-core/AIME25/") and k.endswith("pass@16") for k in step), sorted(step)
