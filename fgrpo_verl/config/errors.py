"""Composition errors explained in one line: what the user typed, what is wrong, what is valid.

    a misspelt key       algorithm.fgrpo.gama=1: no key 'gama' under 'algorithm.fgrpo'; did you mean 'gamma'? (keys
                         there: base, gamma, smoothing_alpha, success_threshold)
    a misspelt option    algo=grpoo: no option 'grpoo' in config group algo; did you mean 'grpo'? (options: ...)
    a wrong type         trainer.total_epochs=abc: expected a number (the default is 30), got 'abc'
    '+' on a key that exists, '~' on one that does not, a syntax error: the same, one line each

"Did you mean" is ``difflib`` over the keys at that level of the config or the options of that group
(``fgrpo_verl.config.suggest``). Hydra's own message would be 60 lines of traceback ending in "To append to your
config use +algorithm.fgrpo.gama=1": a new key nothing reads. Its exception stays chained for ``--debug``.
"""

from __future__ import annotations

import math

from fgrpo_verl.config.paths import config_groups
from fgrpo_verl.config.suggest import did_you_mean


class ConfigError(ValueError):
    """A Hydra override that cannot be applied, explained in one line (``str(error)``)."""


def _listing(candidates, limit: int = 12) -> str:
    names = sorted(set(map(str, candidates)))
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names)} in all)" if len(names) > limit else "")


def missing_key(override: str, key: str, tree, what: str = "") -> ConfigError:
    """``override`` sets ``key``, which ``tree`` (the config it applies to) does not have: where the path leaves the
    config, and the closest keys there; ``what`` comes before "no key"."""
    from omegaconf import DictConfig

    node, parts = tree, key.split(".")
    for i, part in enumerate(parts):
        if isinstance(node, DictConfig) and part in node:
            node = node[part]
            continue
        where = "at the top level" if i == 0 else f"under {'.'.join(parts[:i])!r}"
        keys = list(node.keys()) if isinstance(node, DictConfig) else []
        if i == 0:
            keys += list(config_groups())
        hint = did_you_mean(part, keys)
        valid = f" (keys there: {_listing(keys)})" if keys else f" ({'.'.join(parts[:i])} is not a mapping)"
        new_key = ("" if hint or not isinstance(node, DictConfig)
                   else "; a key that verl reads but its config does not declare needs a leading '+'")
        return ConfigError(f"{override}: {what}no key {part!r} {where}{hint}{valid}{new_key}")
    return ConfigError(f"{override}: {key} cannot be set this way")


def explain(exc: BaseException) -> ConfigError | None:
    """A one-line :class:`ConfigError` for a failure of Hydra's parser or of its defaults list (the config group
    selections); None when ``exc`` is not one (a bug, a broken install): the caller re-raises it unchanged."""
    from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException

    if isinstance(exc, OverrideParseException):
        return ConfigError(f"cannot parse override {exc.override!r}: {exc.message.strip().splitlines()[0]}")
    if isinstance(exc, MissingConfigException) and exc.options:
        group, _, option = (exc.missing_cfg_file or "").rpartition("/")
        return ConfigError(f"{group}={option}: no option {option!r} in config group {group}"
                           f"{did_you_mean(option, exc.options)} (options: {_listing(exc.options)})")
    if isinstance(exc, (ConfigCompositionException, MissingConfigException)):
        # Hydra's message and its "Did you mean ..." line, without its "To append ..." advice or its search path
        lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
        return ConfigError(" ".join(line for line in lines[:2] if not line.startswith(("To append", "Config search"))))
    return None


def omegaconf_reason(exc) -> str:
    """OmegaConf's message without its multi-line ``full_key``/``object_type`` trailer."""
    lines = [line for line in str(exc).splitlines() if line.strip()]
    head = lines[0] if lines else type(exc).__name__
    key = getattr(exc, "full_key", None)
    return f"{head} (key {key})" if key and key not in head else head


def _kind(value) -> str | None:
    """What a config value is, for the type check: ``true or false``, ``a number`` (int or float), or None (no
    check: strings, lists, mappings, null, interpolations). Integers and floats are one kind: verl's YAML writes
    float settings with integer defaults (``entropy_coeff: 0``, ``rollout.top_p: 1``,
    ``val_kwargs.temperature: 0``)."""
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, (int, float)):
        return "a number"
    return None


def check_kind(override: str, old, new) -> None:
    """A value override must keep the kind of value its key had before it (``old``: in the config of the same
    selections without value overrides): a boolean stays a boolean, a number a number (not NaN). verl's YAML keys
    are untyped, so ``trainer.total_epochs=abc`` or ``actor_rollout_ref.actor.optim.lr=abc`` would otherwise
    compose, pass verl's ``validate_config`` and fail in a Ray worker, or be used as given. Keys that were null,
    strings or containers are not checked, nor interpolations (``${...}``: checked where they are read)."""
    want, got = _kind(old), _kind(new)
    if want is None or new is None or (isinstance(new, str) and "${" in new):
        return
    if want == got:
        if want == "a number" and math.isnan(float(new)):
            raise ConfigError(f"{override}: expected a number, got NaN (the default is {old!r})")
        return
    raise ConfigError(f"{override}: expected {want} (the default is {old!r}), got {new!r}")


def require_files(flag: str, paths) -> None:
    """Each of ``paths`` (given with ``flag``; ``NAME=FILE`` values count by their FILE) is a readable file, or a
    ``ValueError`` naming the flag and the path, before any work starts."""
    from pathlib import Path

    for value in paths or []:
        path = Path(str(value).partition("=")[2] if "=" in str(value) else str(value))
        if not path.is_file():
            why = "is a directory" if path.is_dir() else "no such file"
            raise ValueError(f"{flag} {value}: {why}")
