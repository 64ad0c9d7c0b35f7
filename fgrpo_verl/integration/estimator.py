"""The ``fgrpo`` advantage estimator, registered in verl's ``ADV_ESTIMATOR_REGISTRY``.

verl's ``ray_trainer.compute_advantage`` calls every non-built-in estimator as
``fn(token_level_rewards=(B,T), response_mask=(B,T), config=<algorithm DictConfig>, index=<uids>)``
(plus ``reward_baselines`` when present, ignored here) and expects ``(advantages, returns)``.
The math lives in :mod:`fgrpo_verl.focal`.
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
import weakref

import torch

from fgrpo_verl.integration import registration
from fgrpo_verl.focal import FocalSettings, compute_focal_advantage

ESTIMATOR_NAME = "fgrpo"
REGISTRY_MODULE = "verl.trainer.ppo.core_algos"


def compute_fgrpo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index=None,
    config=None,
    epsilon: float = 1e-6,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """F-GRPO: A_i = (1 - μ̂)^γ · A_i^base with μ̂ = X/N per prompt group (paper eqs. 11-13).

    Args:
        token_level_rewards: (B, T) rewards; a rollout's outcome is their sum.
        response_mask: (B, T) 1 for response tokens.
        index: (B,) group labels (verl's ``uid``); rollouts of one prompt share one.
        config: verl's ``algorithm`` config; reads ``fgrpo.{gamma, success_threshold, smoothing_alpha, base}``
            and ``norm_adv_by_std_in_grpo`` (verl's own key, default True as in verl), once per config object and again when changed in place.
        epsilon: added to the group std, 1e-6 as in verl's GRPO.

    Returns:
        (advantages, returns), both (B, T) and equal, as for every outcome-only estimator in verl.
    """
    settings, norm = settings_of(config)
    result = compute_focal_advantage(
        token_level_rewards, response_mask, index, settings, norm_adv_by_std_in_grpo=norm, epsilon=epsilon
    )
    sink = _RESULT_SINK.get()
    if sink is not None:
        sink.append((settings, result))
    return result.advantages, result.advantages


registration.mark(compute_fgrpo_outcome_advantage, f"adv_estimator:{ESTIMATOR_NAME}")

# id(config) -> (weak reference to it, raw values, settings, norm). verl passes the same `algorithm` node every
# step, and reading it through OmegaConf's API costs ~0.1 ms, several percent of the estimator at 4096 x 1024: parse
# once, and on later calls only compare the raw leaf values (a few microseconds), so a config changed in place (a
# gamma schedule writing config.fgrpo.gamma) is parsed again instead of being served stale.
_PARSED: dict[int, tuple] = {}
_UNKNOWN = object()


def _raw_values(config):
    """The raw values of the keys :func:`settings_of` reads, read from OmegaConf's node table without resolving:
    equal tuples mean an unchanged config. ``_UNKNOWN`` when ``config`` is not a DictConfig of that layout or a value
    is an interpolation."""
    try:
        content = config._content
        block = content.get("fgrpo")
        leaves = None if block is None else tuple((k, v._value()) for k, v in block._content.items())
        norm = content.get("norm_adv_by_std_in_grpo")
        raw = leaves, None if norm is None else norm._value()
    except (AttributeError, TypeError):
        return _UNKNOWN
    # An interpolation's raw value is its "${...}" text, which stays equal when what it points to changes.
    if any(isinstance(v, str) and "${" in v for v in (*(v for _, v in raw[0] or ()), raw[1])):
        return _UNKNOWN
    return raw


def settings_of(config) -> tuple[FocalSettings, bool]:
    """``(FocalSettings, norm_adv_by_std_in_grpo)`` of verl's ``algorithm`` config, validated whenever it changed."""
    if config is None:
        raise ValueError("fgrpo needs the `algorithm` config (with its `fgrpo` block); got config=None")
    raw = _raw_values(config)
    entry = _PARSED.get(id(config))
    if entry is not None and entry[0]() is config and raw is not _UNKNOWN and entry[1] == raw:
        return entry[2], entry[3]
    block = config.get("fgrpo") if hasattr(config, "get") else getattr(config, "fgrpo", None)
    settings = FocalSettings.from_config(block)
    norm = config.get("norm_adv_by_std_in_grpo", True) if hasattr(config, "get") else True
    if not isinstance(norm, bool):
        raise ValueError(f"algorithm.norm_adv_by_std_in_grpo={norm!r} is invalid: expected true or false")
    if raw is _UNKNOWN:  # no cheap way to see a change (a plain dict, a dataclass): parse every call
        return settings, norm
    key = id(config)
    ref = weakref.ref(config, lambda _, key=key: _PARSED.pop(key, None))
    _PARSED[key] = (ref, raw, settings, norm)
    return settings, norm


# verl drops everything but (advantages, returns), so a caller that wants the per-group numbers (the focal
# metrics in fgrpo_verl/integration/trainer.py) opens a capture around verl's advantage call and reads them afterwards.
_RESULT_SINK: contextvars.ContextVar[list | None] = contextvars.ContextVar("fgrpo_result_sink", default=None)


def _registered_sink() -> contextvars.ContextVar:
    # With two copies of this module loaded, verl calls the registered one (registration keeps the first): the
    # capture must open that copy's sink, whichever copy the trainer imported.
    core_algos = sys.modules.get(REGISTRY_MODULE)
    fn = core_algos.ADV_ESTIMATOR_REGISTRY.get(ESTIMATOR_NAME) if core_algos is not None else None
    if fn is not None and registration.ident_of(fn) == registration.ident_of(compute_fgrpo_outcome_advantage):
        return fn.__globals__["_RESULT_SINK"]
    return _RESULT_SINK


@contextlib.contextmanager
def capture_results():
    """Collect ``(FocalSettings, FocalResult)`` of every ``fgrpo`` estimator call made inside the block."""
    sink: list = []
    var = _registered_sink()
    token = var.set(sink)
    try:
        yield sink
    finally:
        var.reset(token)


def register() -> None:
    """Put ``fgrpo`` in verl's registry (``fgrpo_verl.integration.registration``'s duplicate policy)."""
    from verl.trainer.ppo import core_algos

    registration.register(
        core_algos.ADV_ESTIMATOR_REGISTRY,
        ESTIMATOR_NAME,
        compute_fgrpo_outcome_advantage,
        "advantage estimator",
        add=lambda name, fn: core_algos.register_adv_est(name)(fn),
    )
