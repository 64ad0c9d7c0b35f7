"""The GPU count against the batch sizes, named by their keys (fgrpo_verl/integration/validation.py).

verl 0.9.1's ``validate_config`` asserts that a step's rollouts divide into the GPUs ("real_train_batch_size (2048)
must be divisible by minimal possible batch size (6)"), naming no key. Our check runs before it and must draw the
same line: verl's own function is the oracle here, on a grid of configs on both sides of its rule (FSDP and
Megatron, dynamic batch size on and off), and every value our message offers as valid passes verl's rule."""

from __future__ import annotations

import functools
import itertools
import re

import pytest
from omegaconf import OmegaConf

import verl  # noqa: F401  (loads the plugin, which wraps validate_config)
from verl.utils.config import validate_config

from fgrpo_verl.integration.validation import check_gpu_batch_sizes, validate

VERL_VALIDATE = getattr(validate_config, "__wrapped__", validate_config)  # verl's own, without the plugin's wrapper
# the two assertions of verl's rule (verl/utils/config.py validate_config)
VERL_RULE = ("must be divisible by minimal possible batch size", "must be divisible by model_parallel_size")


def verl_rejects(config) -> bool:
    """Whether verl's validate_config refuses ``config`` by its GPU/batch rule. The rule is the function's first
    check; what fails after it (these configs hold only the keys the rule reads) is not this rule's refusal."""
    try:
        VERL_VALIDATE(config, use_reference_policy=False, use_critic=False)
    except AssertionError as exc:
        return any(text in str(exc) for text in VERL_RULE)
    except Exception:  # noqa: BLE001
        return False
    return False


def ours_rejects(config) -> str | None:
    try:
        check_gpu_batch_sizes(config)
    except ValueError as exc:
        return str(exc)
    return None


def config(gpus=8, nodes=1, batch=256, n=8, dynamic=False, strategy="fsdp", tp=1, pp=1, cp=1, micro=4):
    actor = {"use_dynamic_bsz": dynamic, "strategy": strategy, "ppo_micro_batch_size_per_gpu": micro}
    if strategy == "megatron":
        actor["megatron"] = {"tensor_model_parallel_size": tp, "pipeline_model_parallel_size": pp,
                             "context_parallel_size": cp}
    return OmegaConf.create({"trainer": {"n_gpus_per_node": gpus, "nnodes": nodes},
                             "data": {"train_batch_size": batch},
                             "actor_rollout_ref": {"actor": actor, "rollout": {"n": n}}})


FSDP = [dict(gpus=g, nodes=k, batch=b, n=n, dynamic=d) for g, k, b, n, d in
        itertools.product(range(1, 9), (1, 2, 3), (1, 6, 100, 256), (1, 3, 8), (False, True))]
MEGATRON = [dict(strategy="megatron", gpus=g, nodes=k, batch=b, n=8, tp=tp, pp=pp, cp=cp, micro=m) for
            g, k, b, tp, pp, cp, m in
            itertools.product((1, 2, 3, 4, 6, 8), (1, 2), (64, 100), (1, 2), (1, 2), (1, 2), (1, 3))]


@functools.lru_cache(maxsize=None)
def verdicts(grid: str) -> list[tuple[dict, bool, str | None]]:
    """(config() arguments, verl refuses by its rule, our refusal or None) for each config of ``grid``."""
    out = []
    for values in {"fsdp": FSDP, "megatron": MEGATRON}[grid]:
        cfg = config(**values)
        out.append((values, verl_rejects(cfg), ours_rejects(cfg)))
    return out


@pytest.mark.parametrize("grid", ["fsdp", "megatron"])
def test_ours_refuses_exactly_what_verl_refuses(grid):
    rows = verdicts(grid)
    assert any(verl for _, verl, _ in rows) and not all(verl for _, verl, _ in rows)  # both sides of the rule
    disagree = [(values, verl, ours) for values, verl, ours in rows if verl != (ours is not None)]
    assert not disagree, disagree[:5]


def _offered(message: str) -> list[dict]:
    """The values a refusal offers as valid (after its "valid: "), as config() arguments."""
    offers, valid = [], message.partition("; valid: ")[2]
    for found in re.findall(r"trainer\.n_gpus_per_node in \{([\d, ]+)\}", valid):
        offers += [{"gpus": int(v)} for v in found.split(", ")]
    for found in re.findall(r"data\.train_batch_size=(\d+)(?: or (\d+))?", valid):
        offers += [{"batch": int(v)} for v in found if v]
    return offers


@pytest.mark.parametrize("grid", ["fsdp", "megatron"])
def test_a_refusal_names_the_keys_and_offers_values_verl_accepts(grid):
    keys = ["data.train_batch_size", "actor_rollout_ref.rollout.n", "trainer.n_gpus_per_node", "trainer.nnodes"]
    if grid == "megatron":
        keys += ["actor_rollout_ref.actor.megatron.tensor_model_parallel_size",
                 "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size",
                 "actor_rollout_ref.actor.megatron.context_parallel_size"]
    refused = [(values, ours) for values, verl, ours in verdicts(grid) if verl]
    for values, message in refused[::3]:
        named = [key for key in keys if key in message]
        assert len(named) >= 4 and "\n" not in message, message
        offers = _offered(message)
        # FSDP: a batch size always passes; Megatron: none may exist at this GPU count (a micro-batch of 3 in 64)
        assert offers or grid == "megatron", message
        for offer in offers:
            assert not verl_rejects(config(**{**values, **offer})), (offer, message)


def test_the_2x8_recipe_on_3_gpus_per_node_is_refused_by_our_check_naming_its_keys():
    from fgrpo_verl.config.compose import compose

    bad = compose(["algo=grpo", "cluster=2x8", "trainer.n_gpus_per_node=3"])
    with pytest.raises(ValueError) as exc:
        validate(bad)
    text = str(exc.value)
    assert "verl's validate_config" not in text  # ours, before verl's
    assert text.startswith("data.train_batch_size=256 x actor_rollout_ref.rollout.n=8 = 2048 rollouts per step "
                           "must be divisible by minimal possible batch size 6 = trainer.n_gpus_per_node=3 x "
                           "trainer.nnodes=2"), text
    assert "trainer.n_gpus_per_node in {1, 2, 4, 8}" in text and "data.train_batch_size=255 or 258" in text
    validate(compose(["algo=grpo", "cluster=2x8"]))


def test_non_positive_gpu_counts_are_refused_and_other_values_left_to_verl():
    assert "trainer.n_gpus_per_node=0" in ours_rejects(config(gpus=0))
    assert "trainer.nnodes=-1" in ours_rejects(config(nodes=-1))
    for values in ({"batch": None}, {"n": "${oops}"}, {"micro": None, "strategy": "megatron"}):
        try:
            cfg = config(**values)
        except Exception:  # noqa: BLE001  (an interpolation OmegaConf cannot resolve is not ours to judge)
            continue
        assert ours_rejects(cfg) is None
