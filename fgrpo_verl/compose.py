"""Compose fgrpo-verl's Hydra config exactly as ``fgrpo-verl train`` would, and validate it with verl.

A composition that fails because of what the user typed raises :class:`ConfigError` (a ``ValueError``) with one
line naming the override, what is wrong and what is valid, with a "did you mean" drawn (``difflib``) from the keys
that exist at that level of the config or the options of that config group (:func:`explain`); the CLI prints it
and exits 2. Hydra's own exception is chained for ``--debug``.

:class:`SharedComposer` composes many runs (a recipe's) at a fraction of the cost of one :func:`compose` each:
see its docstring for what is shared and why the result is the same.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import io
import math
import re
import sys
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path

from fgrpo_verl.paths import CONFIG_NAME, config_dir
from fgrpo_verl.suggest import did_you_mean


class ConfigError(ValueError):
    """A Hydra override that cannot be applied, explained in one line (``str(error)``)."""


def verl_config_dir() -> Path:
    """verl's own config directory, found without importing verl (``find_spec`` of a top-level package does not
    execute it)."""
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.origin:
        raise ModuleNotFoundError("verl is not installed: pip install 'verl[verl-core]==0.9.1'")
    return Path(spec.origin).parent / "trainer" / "config"


def _searchpath() -> str:
    return f"hydra.searchpath=[file://{verl_config_dir()}]"


@contextlib.contextmanager
def _hydra(config_name: str) -> Iterator[None]:
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(config_dir()), version_base=None):
        yield


def _compose_raw(overrides: Sequence[str], config_name: str):
    from hydra import compose as hydra_compose

    with _hydra(config_name):
        return hydra_compose(config_name=config_name, overrides=[_searchpath(), *overrides])


def compose(overrides: Sequence[str] = (), config_name: str = CONFIG_NAME):
    """Return the composed ``DictConfig`` for ``overrides`` (Hydra command-line syntax).

    Composing does not import verl: ``fgrpo_trainer.yaml`` searches ``pkg://verl.trainer.config``, which would
    import verl (and load every verl plugin) before ``fgrpo-verl train`` has exported the run's environment
    (``VERL_PLATFORM``, ...); the same directory is given to Hydra as a file path instead.

    Raises :class:`ConfigError` for an override that cannot be applied (a misspelt key or group option, a value
    of the wrong type for its key, a syntax error), naming it and what is valid. Same result as Hydra's compose
    of all overrides at once (:class:`SharedComposer`).
    """
    return SharedComposer(config_name).compose(overrides)


# --- explaining composition errors -----------------------------------------------------------------------------

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


def config_groups() -> dict[str, list[str]]:
    """fgrpo-verl's own config groups and their options (``hydra_configs/<group>/<option>.yaml``)."""
    root = config_dir()
    return {
        d.name: sorted(p.stem for p in d.glob("*.yaml"))
        for d in sorted(root.iterdir())
        if d.is_dir() and not d.name.startswith(("_", "."))
    }


def _missing_key_message(override: str, key: str, overrides: list[str], config_name: str) -> str:
    """``override`` sets ``key``, which the config does not have: where the path leaves the config, and the
    closest keys there (read from the config composed without that override)."""
    rest = [o for o in overrides if o != override]
    try:
        tree = _compose_raw(rest, config_name)
    except Exception:  # another override is broken too; say what we know
        return f"{override}: the config has no key {key!r}"
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
        new_key = "" if hint or not isinstance(node, DictConfig) else "; a key that verl reads but its config does not declare needs a leading '+'"
        return f"{override}: no key {part!r} {where}{hint}{valid}{new_key}"
    return f"{override}: {key} cannot be set this way"


def explain(exc: BaseException, overrides: list[str], config_name: str = CONFIG_NAME) -> ConfigError | None:
    """A one-line :class:`ConfigError` for a composition failure caused by the overrides; None when ``exc`` is
    not one (a bug, a broken install): the caller re-raises it unchanged."""
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
            return ConfigError(_missing_key_message(_override_for(key, overrides), key, overrides, config_name))
        match = _CANNOT_DELETE.search(text)
        if match:
            key = match.group(1)
            return ConfigError(_missing_key_message(_override_for(key, overrides), key, overrides, config_name)
                               .replace(": no key", ": cannot delete: no key", 1))
        match = _CANNOT_APPEND.search(text)
        if match:
            key = match.group(1)
            typed = _override_for(key, overrides)
            return ConfigError(
                f"{typed}: {key} already exists, so '+' (add a new key) does not apply; set it with "
                f"{typed.lstrip('+')}"
            )
        match = _MERGING.search(text)
        cause = exc.__cause__ if isinstance(exc.__cause__, OmegaConfBaseException) else None
        if match and cause is not None:
            return ConfigError(f"{match.group(1).strip()}: {_omegaconf_reason(cause)}")
        return ConfigError(text.strip().splitlines()[0])
    if isinstance(exc, OmegaConfBaseException):
        return ConfigError(_omegaconf_reason(exc))
    return None


def _omegaconf_reason(exc) -> str:
    """OmegaConf's message without its multi-line ``full_key``/``object_type`` trailer."""
    lines = [line for line in str(exc).splitlines() if line.strip()]
    head = lines[0] if lines else type(exc).__name__
    key = getattr(exc, "full_key", None)
    return f"{head} (key {key})" if key and key not in head else head


# --- many runs at once -----------------------------------------------------------------------------------------

# An override that only sets a value (Hydra applies these after the defaults list is merged): a dotted key, no
# config group path ('/') or package ('@'), not Hydra's own settings. Everything else selects configs.
_VALUE_KEY = re.compile(r"^[+~]{0,2}(?!hydra\.)[A-Za-z_][\w-]*(\.[\w-]+)+$")


def is_value_override(override: str) -> bool:
    """True for ``a.b=1`` / ``+a.b=1`` / ``++a.b=1`` / ``~a.b`` (a config value); False for a config group
    selection (``algo=grpo``), a top-level key, or a ``hydra.*`` setting."""
    return bool(_VALUE_KEY.match(override.split("=", 1)[0].strip()))


@contextlib.contextmanager
def batch_session() -> Iterator[None]:
    """For a batch of configs (a recipe's runs; also a decorator): OmegaConf re-parses every ``${...}`` string
    with its ANTLR grammar each time it resolves one, and planning a run resolves the whole config several times
    (fingerprint, ``validate``, freezing ``${oc.env:...}``), the same few dozen strings thousands of times.
    Within the session, parse trees are cached by string (a parse tree depends on the string alone) and the
    cyclic garbage collector is paused (configs are trees with parent links: each collection walks them all)."""
    with _cached_interpolation_parsing(), _gc_paused():
        yield


@contextlib.contextmanager
def _cached_interpolation_parsing() -> Iterator[None]:
    import functools

    import omegaconf.base

    original = omegaconf.base.parse

    @functools.lru_cache(maxsize=4096)
    def parse(value: str, parser_rule: str = "configValue", lexer_mode: str = "DEFAULT_MODE"):
        return original(value, parser_rule, lexer_mode)

    omegaconf.base.parse = parse
    try:
        yield
    finally:
        omegaconf.base.parse = original


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    import gc

    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class SharedComposer:
    """Compose many override lists (a recipe's runs) sharing what they have in common.

    ``compose(overrides)`` here returns what :func:`compose` returns, in two steps:

    1. the config of the run's *selections* (every override that is not a plain value: config groups such as
       ``algo=grpo``, top-level keys), composed by Hydra once per distinct selection list and cached. Hydra
       re-reads and re-parses every YAML file of the defaults tree on each compose (its cache lives for one
       composition); here one cache is kept for the composer's lifetime, since the files do not change;
    2. the run's value overrides (``a.b=1``, ``+a.b=1``, ``~a.b``) applied to a copy of it with Hydra's own
       override parser and applier, which is what Hydra itself does after merging the defaults list.

    ``tests/test_first_hour_on_cpu.py`` checks that every run of every shipped recipe composes to the same config
    both ways. Measured on ``paper_main`` (36 runs, 9 distinct selection lists): docs/slurm.md.
    """

    def __init__(self, config_name: str = CONFIG_NAME):
        self.config_name = config_name
        self._selected: dict[tuple[str, ...], object] = {}
        self._yaml_cache: dict = {}

    @contextlib.contextmanager
    def _shared_yaml_cache(self) -> Iterator[None]:
        from hydra._internal import config_loader_impl

        original = config_loader_impl.CachingConfigRepository
        cache = self._yaml_cache

        class _Shared(original):
            def __init__(self, delegate):
                super().__init__(delegate)
                self.cache = cache

        config_loader_impl.CachingConfigRepository = _Shared
        try:
            yield
        finally:
            config_loader_impl.CachingConfigRepository = original

    def compose(self, overrides: Sequence[str]):
        overrides = list(overrides)
        selections = tuple(o for o in overrides if not is_value_override(o))
        values = [o for o in overrides if is_value_override(o)]
        try:
            base = self._selected.get(selections)
            if base is None:
                with self._shared_yaml_cache():
                    base = _compose_raw(selections, self.config_name)
                self._selected[selections] = base
            config = copy.deepcopy(base)
            if values:
                from hydra._internal.config_loader_impl import ConfigLoaderImpl
                from hydra.core.override_parser.overrides_parser import OverridesParser

                ConfigLoaderImpl._apply_overrides_to_config(OverridesParser.create().parse_overrides(values), config)
            check_value_types(base, config, values)
            return config
        except ConfigError:
            raise
        except Exception as exc:
            error = explain(exc, overrides, self.config_name)
            if error is None:
                raise
            raise error from exc


_VERL_OK = "All configuration checks passed successfully"


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
    selections without value overrides): a boolean stays a boolean, a number a number (not NaN). verl's YAML keys are untyped, so ``trainer.total_epochs=abc`` or
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


def validate(config) -> None:
    """Everything ``fgrpo-verl train`` checks before Ray starts: the verl version, the ``algorithm.fgrpo`` block
    and verl's own ``validate_config`` (the check ``main_ppo`` runs). verl's own checks are ``assert``s; a failing
    one is raised as a ``ValueError`` (bad input, not a bug) with verl's message."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    from fgrpo_verl.registration import require_supported_verl
    from fgrpo_verl.validation import check_fgrpo

    require_supported_verl()
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
