"""fgrpo-verl's checks of a run's config, in one place for both ways in: ``fgrpo-verl train`` (:func:`validate`, then
:func:`check_before_ray`) and verl's own ``python -m verl.trainer.main_ppo`` with adv_estimator fgrpo or ds_grpo,
whose ``validate_config`` the plugin wraps (:func:`register`) so that it runs the same checks first, before Ray.

``main_ppo`` composes verl's config, not ours, so a missing ``algorithm.fgrpo`` block, a loss that cannot run or a
machine that cannot train would otherwise surface inside the TaskRunner, after Ray started (or hang there). For any
other estimator the wrapper only calls verl's function (and says when an ``algorithm.fgrpo`` block goes unused).
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import math
import os
import re
import sys
import warnings

from fgrpo_verl import verl_compat
from fgrpo_verl.backends import EXTERNAL_MODULES_ENV, selected_backends
from fgrpo_verl.integration import plugin
from fgrpo_verl.job.tracking import select, wandb_configured

logger = logging.getLogger("fgrpo_verl")

WRAPPER_ID = "verl.utils.config.validate_config"
RAY_ENV_KEY = "ray_kwargs.ray_init.runtime_env.env_vars"
LOSS_KEY = "actor_rollout_ref.actor.policy_loss"
LOSS_TARGET = "fgrpo_verl.integration.loss.FocalPolicyLossConfig"
# verl's default for algorithm.gamma (its GAE discount, ppo_trainer.yaml)
VERL_GAE_GAMMA = 1.0
# what makes rewards graded, which ds_grpo refuses (fgrpo_verl/integration/ds_grpo.py: correctness in a sign bit)
GRADED_REWARD_KEYS = ("algorithm.use_kl_in_reward", "reward.reward_kwargs.overlong_buffer_cfg.enable",
                      "reward_model.reward_kwargs.overlong_buffer_cfg.enable")


@functools.cache  # once per process: train validates, then verl's main_ppo (wrapped) validates the same config again
def _warn_once(message: str) -> None:
    logger.warning("fgrpo-verl: %s", message)


def check_fgrpo(config) -> bool:
    """What verl does not know about: the ``algorithm.fgrpo`` block, and what the run needs around it. Whether the
    run trains an estimator that reads the block (a run of ours: :func:`check_before_ray` applies)."""
    algorithm = config.get("algorithm") if hasattr(config, "get") else None
    if algorithm is None:
        return False
    from fgrpo_verl.integration.ds_grpo import FGRPO_ESTIMATORS, NAME
    from fgrpo_verl.integration.estimator import settings_of

    estimator = algorithm.get("adv_estimator")
    if estimator not in FGRPO_ESTIMATORS:
        if algorithm.get("fgrpo") is not None:
            _warn_once(f"algorithm.fgrpo is set but algorithm.adv_estimator={estimator}: this run trains {estimator} "
                       "and ignores it; for F-GRPO set algorithm.adv_estimator=fgrpo")
        return False
    graded = [key for key in GRADED_REWARD_KEYS if estimator == NAME and select(config, key, False)]
    if graded:
        raise ValueError(f"{graded[0]}=true with algorithm.adv_estimator={NAME}: it makes the rewards graded, and "
                         f"{NAME} reads correctness from binary ones; set {graded[0]}=false or another estimator "
                         "(fgrpo); a KL term fits in the loss (actor_rollout_ref.actor.use_kl_loss=true)")
    settings, _ = settings_of(algorithm)
    check_gae_gamma_unused(algorithm, settings.gamma)
    n = select(config, "actor_rollout_ref.rollout.n")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise ValueError(f"actor_rollout_ref.rollout.n={n!r} is invalid: the group size must be an integer >= 1 "
                         "(the paper: 8)")
    if n == 1:
        _warn_once(single_rollout_effect(settings))
    check_loss_and_metrics(config)
    return True


def single_rollout_effect(settings) -> str:
    """What ``rollout.n=1`` does to this run: each group is one rollout, whose baseline is 0 (verl's GRPO gives a
    singleton group mean 0 and std 1) and whose μ̂ is 1 when it is correct, 0 when not."""
    if settings.base == "rloo":
        effect = "the rloo baseline of a group of one is the rollout itself, so every advantage is 0 and nothing is learned"
    elif settings.gamma == 0:
        effect = ("there is no group baseline: each advantage is the rollout's own score (GRPO without a baseline; "
                  "with 1/0 rewards only correct rollouts are pushed up)")
    else:
        effect = (f"a correct rollout (score > {settings.success_threshold:g}) gets focal weight 0 and a wrong one keeps "
                  "its score as advantage: with 1/0 rewards nothing is learned, with +/-1 rewards only wrong answers "
                  "are pushed down")
    return f"actor_rollout_ref.rollout.n=1: {effect}; set rollout.n to the group size (the paper: 8, algo=grpo)"


def check_loss_and_metrics(config) -> None:
    """The ``fgrpo`` loss needs its config class (verl's would fail at the first actor update, after Ray started); the
    ``fgrpo/*`` and ``actor/fgrpo/*`` metrics need the trainer mode and the loss: say what to add, once."""
    base = select(config, f"{LOSS_KEY}.base_loss_mode")
    if select(config, f"{LOSS_KEY}.loss_mode") == "fgrpo" and base is None:
        raise ValueError(f"{LOSS_KEY}.loss_mode=fgrpo needs {LOSS_KEY}._target_={LOSS_TARGET} and "
                         f"+{LOSS_KEY}.base_loss_mode=vanilla (or cispo, ...: the loss it returns unchanged)")
    missing = []
    mode = str(select(config, "trainer.v1.trainer_mode", ""))
    if not verl_compat.supports(verl_compat.TRAINER_MODES):
        missing.append(f"the fgrpo/* step metrics (they need verl {verl_compat.FULL})")
    elif select(config, "trainer.use_v1", True) and not mode.startswith("fgrpo_"):
        missing.append(f"the fgrpo/* step metrics (add trainer.v1.trainer_mode=fgrpo_{mode or 'sync'})")
    if base is None:
        missing.append(f"the actor/fgrpo/* loss metrics (add {LOSS_KEY}.loss_mode=fgrpo "
                       f"{LOSS_KEY}._target_={LOSS_TARGET} +{LOSS_KEY}.base_loss_mode=vanilla)")
    if missing:
        _warn_once(f"this run logs none of {' and '.join(missing)}")


def check_gae_gamma_unused(algorithm, focal_gamma: float) -> None:
    """``algorithm.gamma`` is verl's GAE discount, not the focal strength: with ``adv_estimator=fgrpo`` or ``ds_grpo``
    it is read by nothing, so a value other than verl's default is almost surely γ put under the wrong key (the run
    would train with ``algorithm.fgrpo.gamma`` instead). Refused, saying where γ goes."""
    value = algorithm.get("gamma", VERL_GAE_GAMMA)
    try:
        same = float(value) == VERL_GAE_GAMMA
    except (TypeError, ValueError):
        same = False
    if not same:
        raise ValueError(
            f"algorithm.gamma={value!r} is verl's GAE discount, which adv_estimator={algorithm.get('adv_estimator')} "
            f"does not use (this run would train with the focal strength algorithm.fgrpo.gamma={focal_gamma:g}): for "
            f"F-GRPO's gamma set algorithm.fgrpo.gamma={value} and leave algorithm.gamma at {VERL_GAE_GAMMA:g}"
        )


def check_before_ray(config) -> None:
    """What a run that starts here needs before verl starts Ray: a release with the selected backend, an accelerator
    or the CPU backend, its data files, W&B set up when it logs there."""
    # the config's Ray environment, else this process's
    backends = selected_backends(select(config, f"{RAY_ENV_KEY}.{EXTERNAL_MODULES_ENV}") or None)
    if backends:
        verl_compat.require(verl_compat.CPU_BACKEND, f"backend={', '.join(backends)}")
    check_data_files(config)
    check_wandb_usable(config)
    import ray
    from verl.utils.device import is_cuda_available, is_npu_available

    # a run that joins a running cluster gets that cluster's accelerators, not this machine's
    local = not (ray.is_initialized() or os.environ.get("RAY_ADDRESS") or select(config, "ray_kwargs.ray_init.address"))
    on_cpu = any(name.startswith("cpu") for name in backends)
    if local and not on_cpu and not (is_cuda_available or is_npu_available):
        raise RuntimeError(
            "no GPU on this machine and no CPU backend selected: verl would start Ray and wait for a GPU that never "
            "comes; select the CPU backend with `fgrpo-verl train backend=cpu ...` or, with verl's main_ppo, "
            "--config-path <the path `fgrpo-verl train --help` prints> --config-name fgrpo_trainer backend=cpu")


# verl opens these in its TaskRunner (RLHFDataset), after Ray and every worker started
DATA_FILE_KEYS = ("data.train_files", "data.val_files")
# hdfs://, s3://, gs://, ...: verl copies them to local files itself; whether they exist is not known from here
_REMOTE_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def check_data_files(config) -> None:
    """Each local path under :data:`DATA_FILE_KEYS` (a path or a list of paths, ``~`` expanded, a ``*`` pattern
    matching at least one file, as verl's loader reads them) exists, or a ``ValueError`` naming the key (and the
    list index) and the path."""
    import glob

    from omegaconf import ListConfig

    for key in DATA_FILE_KEYS:
        value = select(config, key)
        if value is None:
            continue
        many = isinstance(value, (list, tuple, ListConfig))
        for index, path in enumerate(value if many else [value]):
            text = str(path)
            if _REMOTE_URI.match(text):
                continue
            local = os.path.expanduser(text)
            if os.path.exists(local) or (glob.has_magic(local) and glob.glob(local)):
                continue
            if local != text:
                where = f" ({local})"
            elif not os.path.isabs(text):
                where = f" (relative to {os.getcwd()})"
            else:
                where = ""
            raise ValueError(f"{key}{f'[{index}]' if many else ''}={text}: no such file{where}")


def check_wandb_usable(config) -> None:
    """``trainer.logger`` with wandb needs W&B set up here, or ``wandb.init`` fails in the TaskRunner after Ray and
    the workers started (without a terminal it cannot ask for a key)."""
    from fgrpo_verl.job.wandb_online import logs_to_wandb

    if logs_to_wandb(select(config, "trainer.logger")) and not wandb_configured():
        raise RuntimeError(
            "trainer.logger includes wandb, but W&B is not set up on this machine (no WANDB_API_KEY, `wandb login` "
            "or WANDB_MODE): run `wandb login`, or set WANDB_MODE=offline (runs are written under ./wandb; "
            "`wandb sync` them later), or drop it: trainer.logger=[console]"
        )


def register() -> None:
    """Wrap ``verl.utils.config.validate_config`` so that an fgrpo run is checked first (the module docstring);
    idempotent."""
    from verl.utils import config as verl_config

    original = verl_config.validate_config
    if plugin.ident_of(original) == WRAPPER_ID:
        return

    @functools.wraps(original)
    def validate_config(config, *args, **kwargs):
        if check_fgrpo(config):
            check_before_ray(config)
        return original(config, *args, **kwargs)

    verl_config.validate_config = plugin.mark(validate_config, WRAPPER_ID)


ACTOR = "actor_rollout_ref.actor"
MEGATRON_KEYS = tuple(f"{ACTOR}.megatron.{k}" for k in
                      ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size"))
# GPUs per node offered as valid go up to this (or the value given, when larger): a node's usual count
_GPUS_PER_NODE_OFFERED = 8


def _int(config, key: str) -> int | None:
    """``key``'s value when it is an integer (not a bool); None otherwise (absent, null, unresolvable, text)."""
    value = select(config, key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _minimal_batch(gpus: int, megatron: tuple[int, int | None] | None) -> int:
    """verl 0.9.1's rule (``verl/utils/config.py`` ``validate_config``, without dynamic batch size): the GPUs split
    into model-parallel groups (Megatron: TP x PP x CP; FSDP: 1 GPU), and a step's rollouts into equal shares of
    this minimal batch (FSDP: one per GPU; Megatron: the data-parallel size x the micro-batch per GPU). 0 when the
    GPUs do not split into the groups; 1 without a Megatron micro-batch size (verl fails on its absence itself)."""
    if megatron is None:
        return gpus
    size, micro = megatron
    return 0 if gpus % size else 1 if not micro else gpus // size * micro


def check_gpu_batch_sizes(config) -> None:
    """The GPU count against the batch sizes, by verl's rule (:func:`_minimal_batch`), before verl's own assertion,
    which names no key ("real_train_batch_size (2048) must be divisible by minimal possible batch size (6)"): a
    ``ValueError`` naming every key involved, their values, and values of ``trainer.n_gpus_per_node`` and
    ``data.train_batch_size`` that pass. verl's rule reads neither the rollout's tensor parallelism nor Ulysses
    sequence parallelism (the preflight checks those, fgrpo_verl/preflight/). Values that are not integers
    are left to verl; a GPU count below 1 is refused (verl divides by it)."""
    if select(config, f"{ACTOR}.use_dynamic_bsz", False):
        return  # verl checks no batch divisibility with dynamic batch sizes
    per_node, nodes = _int(config, "trainer.n_gpus_per_node"), _int(config, "trainer.nnodes")
    for key, value in (("trainer.n_gpus_per_node", per_node), ("trainer.nnodes", nodes)):
        if value is not None and value < 1:
            raise ValueError(f"{key}={value} is invalid: GPUs per node and nodes are counts of at least 1")
    batch, n = _int(config, "data.train_batch_size"), _int(config, "actor_rollout_ref.rollout.n")
    if None in (per_node, nodes, batch, n):
        return
    megatron = None
    if select(config, f"{ACTOR}.strategy") == "megatron":
        parallel = [_int(config, key) for key in MEGATRON_KEYS]
        if None in parallel or min(parallel) < 1:
            return
        megatron = (parallel[0] * parallel[1] * parallel[2], _int(config, f"{ACTOR}.ppo_micro_batch_size_per_gpu"))
    gpus, rollouts = per_node * nodes, batch * n
    minimal = _minimal_batch(gpus, megatron)
    if minimal and rollouts % minimal == 0:
        return

    gpu_count = f"trainer.n_gpus_per_node={per_node} x trainer.nnodes={nodes}"
    if megatron is not None:
        tp, pp, cp = (f"{key}={_int(config, key)}" for key in MEGATRON_KEYS)
        groups = f"({tp} x {pp} x {cp} = {megatron[0]})"
    if not minimal:
        problem = f"{gpu_count} = {gpus} GPUs must be divisible by the model-parallel size {groups}"
    else:
        why = f"{gpu_count} (each GPU takes an equal share)" if megatron is None else (
            f"the data-parallel size {gpus // megatron[0]} ({gpu_count} = {gpus} GPUs / {groups}) x "
            f"{ACTOR}.ppo_micro_batch_size_per_gpu={megatron[1]}")
        problem = (f"data.train_batch_size={batch} x actor_rollout_ref.rollout.n={n} = {rollouts} rollouts per step "
                   f"must be divisible by minimal possible batch size {minimal} = {why}")
    valid = []
    per_node_ok = [g for g in range(1, max(_GPUS_PER_NODE_OFFERED, per_node) + 1)
                   if (m := _minimal_batch(g * nodes, megatron)) and rollouts % m == 0]
    if per_node_ok:
        valid.append(f"trainer.n_gpus_per_node in {{{', '.join(map(str, per_node_ok))}}}")
    if minimal:
        step = minimal // math.gcd(minimal, n)  # batch sizes whose batch x n is a multiple of the minimal batch
        below = batch // step * step
        valid.append("data.train_batch_size=" + (f"{below} or " if below > 0 else "") + str(below + step))
    raise ValueError(problem + ("; valid: " + ", or ".join(valid) if valid else ""))


_VERL_OK = "All configuration checks passed successfully"


def validate(config) -> None:
    """Everything ``fgrpo-verl train`` and ``launch`` check of a composed config with verl, wherever the run will
    start: the release, :func:`check_fgrpo`, the GPU count against the batch sizes (:func:`check_gpu_batch_sizes`)
    and verl's own ``validate_config`` (the check ``main_ppo`` runs). verl's own checks are ``assert``s; a failing
    one is raised as a ``ValueError`` (bad input, not a bug) with verl's message."""
    from hydra.errors import InstantiationException
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    verl_compat.require(verl_compat.TRAIN, "fgrpo-verl's config (train, launch)")
    check_fgrpo(config)
    check_gpu_batch_sizes(config)  # before verl's assertion of the same rule, which names no key
    printed = io.StringIO()
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(printed):
            # verl warns that the critic is off for any estimator but GAE: always true of fgrpo, nothing to do
            warnings.filterwarnings("ignore", message="Disabled critic", category=UserWarning)
            # verl's own function: the wrapper's checks before Ray are for a run starting here (train calls them)
            getattr(validate_config, "__wrapped__", validate_config)(
                config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
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
