"""Composition errors explained in one line: what the user typed, what is wrong, what is valid.

    a misspelt key       algorithm.fgrpo.gama=1: no key 'gama' under 'algorithm.fgrpo'; did you mean 'gamma'? (keys
                         there: base, gamma, smoothing_alpha, success_threshold)
    a misspelt option    algo=grpoo: no option 'grpoo' in config group algo; did you mean 'grpo'? (options: ...)
    a wrong type         trainer.total_epochs=abc: expected a number (the default is 30), got 'abc'
    '+' on a key that exists, '~' on one that does not, a syntax error: the same, one line each

"Did you mean" is ``difflib`` over the keys at that level of the config (composed without the bad override) or the
options of that group (``fgrpo_verl.config.suggest``). Hydra's own message would be 60 lines of traceback ending in "To
append to your config use +algorithm.fgrpo.gama=1": a new key nothing reads. Its exception stays chained for
``--debug``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence

from fgrpo_verl.config.paths import config_groups
from fgrpo_verl.config.suggest import did_you_mean


class ConfigError(ValueError):
    """A Hydra override that cannot be applied, explained in one line (``str(error)``)."""


_COULD_NOT_OVERRIDE = re.compile(r"Could not override '([^']+)'\.")
_NO_DEFAULTS_MATCH = re.compile(r"Could not override '([^']+)'\. No match in the defaults list")
_CANNOT_DELETE = re.compile(r"Could not delete from config\. '([^']+)' does not exist")
_CANNOT_APPEND = re.compile(r"Could not append to config\. An item is already at '([^']+)'")
_MERGING = re.compile(r"Error merging override (.+)$", re.MULTILINE)
_MISSING_GROUP_OPTION = re.compile(r"Could not find '([^']+)'")


def _override_for(key: str, overrides: list[str]) -> str:
    """The override (as typed) that sets ``key``."""
    for o in reversed(overrides):
        if re.sub(r"^[+~]+", "", o.split("=", 1)[0]).strip() == key:
            return o
    return key


def _listing(candidates, limit: int = 12) -> str:
    names = sorted(set(map(str, candidates)))
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names)} in all)" if len(names) > limit else "")


def missing_key(override: str, key: str, overrides: list[str], compose_raw: Callable, what: str = "") -> str:
    """``override`` sets ``key``, which the config does not have: where the path leaves the config, and the
    closest keys there (read from the config composed without that override); ``what`` comes before "no key"."""
    rest = [o for o in overrides if o != override]
    try:
        tree = compose_raw(rest)
    except Exception:  # another override is broken too; say what we know
        return f"{override}: {what}the config has no key {key!r}"
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
        return f"{override}: {what}no key {part!r} {where}{hint}{valid}{new_key}"
    return f"{override}: {key} cannot be set this way"


def already_exists(override: str, key: str) -> str:
    return f"{override}: {key} already exists, so '+' (add a new key) does not apply; set it with {override.lstrip('+')}"


def explain(exc: BaseException, overrides: list[str], compose_raw: Callable) -> ConfigError | None:
    """A one-line :class:`ConfigError` for a composition failure caused by the overrides; None when ``exc`` is
    not one (a bug, a broken install): the caller re-raises it unchanged. ``compose_raw(overrides)`` is Hydra's
    compose, used to read the keys that do exist where a misspelt one was given."""
    from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException
    from omegaconf.errors import OmegaConfBaseException

    text = str(exc)
    if isinstance(exc, OverrideParseException):
        return ConfigError(f"cannot parse override {exc.override!r}: {exc.message.strip().splitlines()[0]}")
    if isinstance(exc, MissingConfigException):
        match = _MISSING_GROUP_OPTION.search(text)
        missing = match.group(1) if match else (exc.missing_cfg_file or "")
        group, _, option = missing.rpartition("/")
        options = list(exc.options or [])
        if group and options:
            return ConfigError(
                f"{group}={option}: no option {option!r} in config group {group}{did_you_mean(option, options)} "
                f"(options: {_listing(options)})"
            )
        return ConfigError(text.strip().splitlines()[0])
    if isinstance(exc, ConfigCompositionException):
        match = _NO_DEFAULTS_MATCH.search(text)
        if match:
            key = match.group(1)
            groups = list(config_groups())
            return ConfigError(
                f"{_override_for(key, overrides)}: no config group or key {key!r}{did_you_mean(key, groups)} "
                f"(fgrpo-verl's config groups: {', '.join(groups)})"
            )
        match = _COULD_NOT_OVERRIDE.search(text)
        if match:
            key = match.group(1)
            return ConfigError(missing_key(_override_for(key, overrides), key, overrides, compose_raw))
        match = _CANNOT_DELETE.search(text)
        if match:
            key = match.group(1)
            return ConfigError(missing_key(_override_for(key, overrides), key, overrides, compose_raw, "cannot delete: "))
        match = _CANNOT_APPEND.search(text)
        if match:
            key = match.group(1)
            return ConfigError(already_exists(_override_for(key, overrides), key))
        match = _MERGING.search(text)
        cause = exc.__cause__ if isinstance(exc.__cause__, OmegaConfBaseException) else None
        if match and cause is not None:
            return ConfigError(f"{match.group(1).strip()}: {omegaconf_reason(cause)}")
        return ConfigError(text.strip().splitlines()[0])
    if isinstance(exc, OmegaConfBaseException):
        return ConfigError(omegaconf_reason(exc))
    return None


def omegaconf_reason(exc) -> str:
    """OmegaConf's message without its multi-line ``full_key``/``object_type`` trailer."""
    lines = [line for line in str(exc).splitlines() if line.strip()]
    head = lines[0] if lines else type(exc).__name__
    key = getattr(exc, "full_key", None)
    return f"{head} (key {key})" if key and key not in head else head


def _kind(value) -> str | None:
    """What a config value is, for the type check: ``bool``, ``number`` (int or float), or None (no check:
    strings, lists, mappings, null, interpolations). Integers and floats are one kind: verl's YAML writes
    float settings with integer defaults (``entropy_coeff: 0``, ``rollout.top_p: 1``,
    ``val_kwargs.temperature: 0``)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    return None


_EXPECTED = {"bool": "true or false", "number": "a number"}


def check_value_types(base, config, values: Sequence[str]) -> None:
    """Each value override must keep the kind of value its key had before it (``base``: the config of the same
    selections without value overrides): a boolean stays a boolean, a number a number (not NaN). verl's YAML keys
    are untyped, so ``trainer.total_epochs=abc`` or
    ``actor_rollout_ref.actor.optim.lr=abc`` would otherwise compose, pass verl's ``validate_config`` and fail
    in a Ray worker, or be used as given. Keys that were null, strings or containers are not checked."""
    from omegaconf import OmegaConf

    for override in values:
        if override.lstrip().startswith("~"):
            continue
        key = override.split("=", 1)[0].lstrip("+").strip()
        parent_key, _, last = key.rpartition(".")
        try:
            parent = OmegaConf.select(config, parent_key) if parent_key else config
            if parent is None or last not in parent or OmegaConf.is_interpolation(parent, last):
                continue  # ${...} values are checked where they are read
            old = OmegaConf.select(base, key, throw_on_resolution_failure=False)
            new = parent[last]
        except Exception:  # an interpolation on the way that cannot be read here: nothing to compare
            continue
        want, got = _kind(old), _kind(new)
        if want is None or new is None:
            continue
        if want == got:
            if want == "number" and math.isnan(float(new)):
                raise ConfigError(f"{override}: expected a number, got NaN (the default is {old!r})")
            continue
        raise ConfigError(f"{override}: expected {_EXPECTED[want]} (the default is {old!r}), got {new!r}")


def require_files(flag: str, paths) -> None:
    """Each of ``paths`` (given with ``flag``; ``NAME=FILE`` values count by their FILE) is a readable file, or a
    ``ValueError`` naming the flag and the path, before any work starts."""
    from pathlib import Path

    for value in paths or []:
        path = Path(str(value).partition("=")[2] if "=" in str(value) else str(value))
        if not path.is_file():
            why = "is a directory" if path.is_dir() else "no such file"
            raise ValueError(f"{flag} {value}: {why}")
