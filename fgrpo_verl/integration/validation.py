"""fgrpo-verl's checks inside verl's own ``validate_config``, which every verl entry point runs before ``ray.init``.

``python -m verl.trainer.main_ppo algorithm.adv_estimator=fgrpo ...`` composes verl's config, not ours, so a
missing or bad ``algorithm.fgrpo`` block would otherwise surface only inside the TaskRunner, after Ray started.
:func:`install` (run by the plugin) wraps ``verl.utils.config.validate_config`` so that it first runs
:func:`check_fgrpo`; for any other estimator the wrapper only calls verl's function.
"""

from __future__ import annotations

import functools
import logging

from fgrpo_verl.integration import registration

logger = logging.getLogger("fgrpo_verl")

WRAPPER_ID = "verl.utils.config.validate_config"


def check_fgrpo(config) -> None:
    """Validate what verl does not know about: the ``algorithm.fgrpo`` block when ``adv_estimator`` is fgrpo."""
    algorithm = config.get("algorithm") if hasattr(config, "get") else None
    if algorithm is None or algorithm.get("adv_estimator") != "fgrpo":
        return
    from fgrpo_verl.integration.estimator import settings_of

    settings_of(algorithm)
    rollout = config.get("actor_rollout_ref", {}).get("rollout", {})
    n = rollout.get("n", None) if hasattr(rollout, "get") else None
    if n == 1:
        logger.warning(
            "fgrpo-verl: actor_rollout_ref.rollout.n=1: every prompt group holds one rollout, so every fgrpo (and "
            "GRPO) advantage is 0 and nothing is learned; set rollout.n to the group size (the paper: 8, algo=grpo)"
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
