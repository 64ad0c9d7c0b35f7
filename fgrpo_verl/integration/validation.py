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


_VERL_OK = "All configuration checks passed successfully"


def validate(config) -> None:
    """Everything ``fgrpo-verl train`` checks before Ray starts: the verl version, the ``algorithm.fgrpo`` block
    and verl's own ``validate_config`` (the check ``main_ppo`` runs). verl's own checks are ``assert``s; a failing
    one is raised as a ``ValueError`` (bad input, not a bug) with verl's message."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    registration.require_supported_verl()
    if registration.ident_of(validate_config) != WRAPPER_ID:  # the plugin's wrapper checks it already (its warnings once)
        check_fgrpo(config)
    printed = io.StringIO()
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(printed):
            # verl warns that the critic is off for any estimator but GAE: always true of fgrpo, nothing to do
            warnings.filterwarnings("ignore", message="Disabled critic", category=UserWarning)
            validate_config(config=config, use_reference_policy=need_reference_policy(config),
                            use_critic=need_critic(config))
    except AssertionError as exc:
        raise ValueError(f"verl's validate_config: {str(exc).strip() or 'a check failed'}") from exc
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
