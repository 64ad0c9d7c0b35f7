"""The typed schema of ``algorithm.fgrpo``, applied to every composed config (fgrpo_verl/config/compose.py).

verl's YAML is untyped: ``algorithm.fgrpo.gamma=0`` composes to the integer 0 and ``gamma=0.0`` to the float, and
run identity hashes the resolved config (fgrpo_verl/job/identity.py), so the two would be two runs with two
checkpoint directories and two W&B runs. Typed here, both are 0.0: one config, one run. A value that is not of its
key's type (``gamma=abc``, ``gamma=true``) or a key the block does not have is refused at composition, in one line
naming the key. An interpolation (``${oc.env:GAMMA}``) is resolved there, and its value typed.

The values themselves come from ``hydra_configs/fgrpo_trainer.yaml``, which declares every key with the defaults
of fgrpo_verl/focal.py's ``DEFAULTS`` (a test holds them equal); this schema gives their types only, so that the
defaults are written in one place and composing never imports torch (fgrpo_verl.focal does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from omegaconf import MISSING

from fgrpo_verl.config.errors import ConfigError


@dataclass
class FocalBlock:
    """``algorithm.fgrpo``: the focal strength γ, the success threshold, the smoothing α and the base advantage.
    Optional: a null is refused by the estimator's own check (fgrpo_verl/focal.py), which says what is valid."""

    gamma: Optional[float] = MISSING  # noqa: UP045 (OmegaConf reads typing.Optional)
    success_threshold: Optional[float] = MISSING  # noqa: UP045
    smoothing_alpha: Optional[float] = MISSING  # noqa: UP045
    base: Optional[str] = MISSING  # noqa: UP045


_TYPES = "gamma, success_threshold, smoothing_alpha: numbers; base: a name"


def typed_fgrpo(config, overrides=()) -> None:
    """``config.algorithm.fgrpo`` (when there is one) replaced by its values typed by :class:`FocalBlock`, in place;
    a :class:`ConfigError` naming the key (as ``overrides`` typed it, when one sets it) otherwise."""
    from omegaconf import OmegaConf, open_dict
    from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

    if OmegaConf.select(config, "algorithm.fgrpo") is None:
        return
    try:
        # resolved first (an interpolation's value is typed too), in the composed config's context
        block = OmegaConf.to_container(config.algorithm.fgrpo, resolve=True)
        typed = OmegaConf.merge(OmegaConf.structured(FocalBlock), block)
    except OmegaConfBaseException as exc:
        last = str(getattr(exc, "full_key", None) or "").rpartition(".")[2]
        key = f"algorithm.fgrpo.{last}" if last else "algorithm.fgrpo"
        named = next((o for o in reversed(list(overrides)) if o.lstrip("+~").split("=", 1)[0].strip() == key), key)
        if isinstance(exc, ConfigKeyError):
            raise ConfigError(f"{named}: algorithm.fgrpo has no such key (its keys: {_TYPES})") from exc
        reason = str(exc).strip().splitlines()[0]
        raise ConfigError(f"{named}: {reason} (algorithm.fgrpo takes {_TYPES})") from exc
    # + 0.0: -0.0 is 0.0, one run
    values = {key: value + 0.0 if isinstance(value, float) else value
              for key, value in OmegaConf.to_container(typed, resolve=False).items() if not OmegaConf.is_missing(typed, key)}
    with open_dict(config):
        config.algorithm.fgrpo = values
