"""fgrpo-verl's checks inside verl's own ``validate_config``, which every verl entry point runs before ``ray.init``;
and :func:`validate`, everything ``fgrpo-verl train`` and ``launch`` check of a composed config with verl.

``python -m verl.trainer.main_ppo algorithm.adv_estimator=fgrpo ...`` composes verl's config, not ours, so a
missing or bad ``algorithm.fgrpo`` block would otherwise surface only inside the TaskRunner, after Ray started.
:func:`install` (run by the plugin) wraps ``verl.utils.config.validate_config`` so that it first runs
:func:`check_fgrpo`; for any other estimator the wrapper only calls verl's function.
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import math
import sys
import warnings

from fgrpo_verl.integration import registration

logger = logging.getLogger("fgrpo_verl")

WRAPPER_ID = "verl.utils.config.validate_config"


def check_fgrpo(config) -> None:
    """Validate what verl does not know about: the ``algorithm.fgrpo`` block when ``adv_estimator`` is fgrpo."""
    algorithm = config.get("algorithm") if hasattr(config, "get") else None
    if algorithm is None or algorithm.get("adv_estimator") != "fgrpo":
        return
    from fgrpo_verl.integration.estimator import settings_of

    settings, _ = settings_of(algorithm)
    check_gae_gamma_unused(algorithm, settings.gamma)
    rollout = config.get("actor_rollout_ref", {}).get("rollout", {})
    n = rollout.get("n", None) if hasattr(rollout, "get") else None
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise ValueError(f"actor_rollout_ref.rollout.n={n!r} is invalid: the group size must be an integer >= 1 "
                         "(the paper: 8)")
    if n == 1:
        logger.warning(
            "fgrpo-verl: actor_rollout_ref.rollout.n=1: every prompt group holds one rollout, so every fgrpo (and "
            "GRPO) advantage is 0 and nothing is learned; set rollout.n to the group size (the paper: 8, algo=grpo)"
        )


# verl's default for algorithm.gamma (its GAE discount, ppo_trainer.yaml)
VERL_GAE_GAMMA = 1.0


def check_gae_gamma_unused(algorithm, focal_gamma: float) -> None:
    """``algorithm.gamma`` is verl's GAE discount, not the focal strength: with ``adv_estimator=fgrpo`` it is read by
    nothing, so a value other than verl's default is almost surely γ put under the wrong key (the run would train
    with ``algorithm.fgrpo.gamma`` instead). Refused, saying where γ goes."""
    value = algorithm.get("gamma", VERL_GAE_GAMMA)
    try:
        same = float(value) == VERL_GAE_GAMMA
    except (TypeError, ValueError):
        same = False
    if not same:
        raise ValueError(
            f"algorithm.gamma={value!r} is verl's GAE discount, which adv_estimator=fgrpo does not use (this run "
            f"would train with the focal strength algorithm.fgrpo.gamma={focal_gamma:g}): for F-GRPO's gamma set "
            f"algorithm.fgrpo.gamma={value} and leave algorithm.gamma at {VERL_GAE_GAMMA:g}"
        )


def install() -> None:
    """Wrap ``verl.utils.config.validate_config`` with :func:`check_fgrpo`; idempotent."""
    from verl.utils import config as verl_config

    original = verl_config.validate_config
    if registration.ident_of(original) == WRAPPER_ID:
        return

    @functools.wraps(original)
    def validate_config(config, *args, **kwargs):
        check_fgrpo(config)
        return original(config, *args, **kwargs)

    registration.mark(validate_config, WRAPPER_ID)
    verl_config.validate_config = validate_config


ACTOR = "actor_rollout_ref.actor"
MEGATRON_KEYS = tuple(f"{ACTOR}.megatron.{k}" for k in
                      ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size"))
# GPUs per node offered as valid go up to this (or the value given, when larger): a node's usual count
_GPUS_PER_NODE_OFFERED = 8


def _int(config, key: str) -> int | None:
    """``key``'s value when it is an integer (not a bool); None otherwise (absent, null, unresolvable, text)."""
    from omegaconf import OmegaConf

    try:
        value = OmegaConf.select(config, key, default=None, throw_on_resolution_failure=False)
    except Exception:  # noqa: BLE001  (a path through a non-mapping: nothing to check here)
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _batch_rule(gpus: int, rollouts: int, megatron: tuple[int, int | None] | None) -> str | None:
    """verl 0.9.1's rule (``verl/utils/config.py`` ``validate_config``, without dynamic batch size): the GPUs split
    into model-parallel groups (Megatron: TP x PP x CP; FSDP: 1 GPU), and a step's rollouts into equal shares of
    the minimal batch (FSDP: one per GPU; Megatron: the data-parallel size x the micro-batch per GPU). None when
    ``gpus`` and ``rollouts`` satisfy it, else which part fails: "gpus" or "batch"."""
    if megatron is None:
        return None if rollouts % gpus == 0 else "batch"
    size, micro = megatron
    if gpus % size:
        return "gpus"
    if micro is None:  # verl would fail on the missing micro-batch size itself
        return None
    return None if rollouts % (gpus // size * micro) == 0 else "batch"


def check_gpu_batch_sizes(config) -> None:
    """The GPU count against the batch sizes, by verl's rule (:func:`_batch_rule`), before verl's own assertion,
    which names no key ("real_train_batch_size (2048) must be divisible by minimal possible batch size (6)"): a
    ``ValueError`` naming every key involved, their values, and values of ``trainer.n_gpus_per_node`` and
    ``data.train_batch_size`` that pass. verl's rule reads neither the rollout's tensor parallelism nor Ulysses
    sequence parallelism (the preflight checks those, fgrpo_verl/preflight/). Values that are not integers
    are left to verl; a GPU count below 1 is refused (verl divides by it)."""
    from omegaconf import OmegaConf

    if OmegaConf.select(config, f"{ACTOR}.use_dynamic_bsz", default=False, throw_on_resolution_failure=False):
        return  # verl checks no batch divisibility with dynamic batch sizes
    per_node, nodes = _int(config, "trainer.n_gpus_per_node"), _int(config, "trainer.nnodes")
    for key, value in (("trainer.n_gpus_per_node", per_node), ("trainer.nnodes", nodes)):
        if value is not None and value < 1:
            raise ValueError(f"{key}={value} is invalid: GPUs per node and nodes are counts of at least 1")
    batch, n = _int(config, "data.train_batch_size"), _int(config, "actor_rollout_ref.rollout.n")
    if None in (per_node, nodes, batch, n):
        return
    megatron = None
    if OmegaConf.select(config, f"{ACTOR}.strategy", default=None, throw_on_resolution_failure=False) == "megatron":
        parallel = [_int(config, key) for key in MEGATRON_KEYS]
        if None in parallel or min(parallel) < 1:
            return
        megatron = (parallel[0] * parallel[1] * parallel[2], _int(config, f"{ACTOR}.ppo_micro_batch_size_per_gpu"))
    gpus, rollouts = per_node * nodes, batch * n
    failed = _batch_rule(gpus, rollouts, megatron)
    if failed is None:
        return

    gpu_count = f"trainer.n_gpus_per_node={per_node} x trainer.nnodes={nodes}"
    if megatron is not None:
        tp, pp, cp = (f"{key}={_int(config, key)}" for key in MEGATRON_KEYS)
        groups = f"({tp} x {pp} x {cp} = {megatron[0]})"
    if failed == "gpus":
        problem = f"{gpu_count} = {gpus} GPUs must be divisible by the model-parallel size {groups}"
    else:
        if megatron is None:
            minimal, why = gpus, f"{gpu_count} (each GPU takes an equal share)"
        else:
            dp = gpus // megatron[0]
            minimal = dp * megatron[1]
            why = (f"the data-parallel size {dp} ({gpu_count} = {gpus} GPUs / {groups}) x "
                   f"{ACTOR}.ppo_micro_batch_size_per_gpu={megatron[1]}")
        problem = (f"data.train_batch_size={batch} x actor_rollout_ref.rollout.n={n} = {rollouts} rollouts per step "
                   f"must be divisible by minimal possible batch size {minimal} = {why}")
    valid = []
    per_node_ok = [g for g in range(1, max(_GPUS_PER_NODE_OFFERED, per_node) + 1)
                   if _batch_rule(g * nodes, rollouts, megatron) is None]
    if per_node_ok:
        valid.append(f"trainer.n_gpus_per_node in {{{', '.join(map(str, per_node_ok))}}}")
    if failed == "batch":
        step = minimal // math.gcd(minimal, n)  # batch sizes whose batch x n is a multiple of the minimal batch
        below = batch // step * step
        valid.append("data.train_batch_size=" + (f"{below} or " if below > 0 else "") + str(below + step))
    raise ValueError(problem + ("; valid: " + ", or ".join(valid) if valid else ""))


_VERL_OK = "All configuration checks passed successfully"


def validate(config) -> None:
    """Everything ``fgrpo-verl train`` checks of a composed config before Ray starts: the verl version, the
    ``algorithm.fgrpo`` block, the GPU count against the batch sizes (:func:`check_gpu_batch_sizes`) and verl's own
    ``validate_config`` (the check ``main_ppo`` runs). verl's own checks are ``assert``s; a failing
    one is raised as a ``ValueError`` (bad input, not a bug) with verl's message."""
    from hydra.errors import InstantiationException
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    registration.require_supported_verl()
    if registration.ident_of(validate_config) != WRAPPER_ID:  # the plugin's wrapper checks it already (its warnings once)
        check_fgrpo(config)
    check_gpu_batch_sizes(config)  # before verl's assertion of the same rule, which names no key
    printed = io.StringIO()
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(printed):
            # verl warns that the critic is off for any estimator but GAE: always true of fgrpo, nothing to do
            warnings.filterwarnings("ignore", message="Disabled critic", category=UserWarning)
            validate_config(config=config, use_reference_policy=need_reference_policy(config),
                            use_critic=need_critic(config))
    except AssertionError as exc:
        raise ValueError(f"verl's validate_config: {str(exc).strip() or 'a check failed'}") from exc
    except InstantiationException as exc:
        # a config class's own check (our policy-loss _target_ classes), which Hydra wraps: the user's error is the cause
        if isinstance(exc.__cause__, ValueError):
            raise ValueError(str(exc.__cause__)) from exc
        raise
    finally:
        # verl prints a success line on stdout; anything else it printed is passed on (to stderr: stdout may
        # carry a command's output, e.g. `launch --dry-run`'s scripts)
        other = [line for line in printed.getvalue().splitlines() if line.strip() and _VERL_OK not in line]
        if other:
            print("\n".join(other), file=sys.stderr)


def verdict(config) -> str | None:
    """None when ``config`` validates, else the reason (a bug, not a bad config, with the exception's type)."""
    try:
        validate(config)
    except (ValueError, AssertionError) as exc:
        return str(exc)
    except Exception as exc:  # noqa: BLE001 (reported with the run's name by the caller)
        return f"{type(exc).__name__}: {exc}"
    return None
