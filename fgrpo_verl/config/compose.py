"""Compose fgrpo-verl's Hydra config exactly as ``fgrpo-verl train`` would (verl's checks of it:
``fgrpo_verl.integration.validation.validate``).

A composition that fails because of what the user typed raises ``fgrpo_verl.config.errors.ConfigError`` (a
``ValueError``): one line naming the override, what is wrong and what is valid, with a "did you mean"; the CLI
prints it and exits 2.

:class:`SharedComposer` composes many runs (a recipe's) at a fraction of the cost of one :func:`compose` each:
see its docstring for what is shared and why the result is the same.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

from fgrpo_verl.config.errors import ConfigError, check_value_types, explain
from fgrpo_verl.config.paths import CONFIG_NAME, config_dir


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
    Within the session, parse trees are cached by string (a parse tree depends on the string alone), the YAML files
    Hydra reads are parsed once (:func:`_cached_yaml_parsing`), and the cyclic garbage collector is paused
    (configs are trees with parent links: each collection walks them all)."""
    with _cached_interpolation_parsing(), _cached_yaml_parsing(), _gc_paused():
        yield


@contextlib.contextmanager
def _cached_yaml_parsing() -> Iterator[None]:
    """Hydra parses every YAML file of the defaults tree again for each composition (PyYAML's pure-Python loader:
    ~60 % of a composition). Within: ``yaml.load`` of a named file returns a copy of its first parse, keyed by
    path, size and modification time. Only the plain data is cached: Hydra builds (and edits) its own config
    objects from it each time."""
    import os

    import yaml

    original = yaml.load
    parsed: dict = {}

    def load(stream, Loader):  # noqa: N803 (yaml's own argument name)
        name = getattr(stream, "name", None)
        if not isinstance(name, str) or not os.path.isfile(name):
            return original(stream, Loader=Loader)
        info = os.stat(name)
        # OmegaConf builds an equal loader class on every call: its qualified name identifies it
        key = (os.path.abspath(name), info.st_size, info.st_mtime_ns, f"{Loader.__module__}.{Loader.__qualname__}")
        if key not in parsed:
            parsed[key] = original(stream, Loader=Loader)
        return copy.deepcopy(parsed[key])

    yaml.load = load
    try:
        yield
    finally:
        yaml.load = original


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
       ``algo=grpo``, top-level keys), composed by Hydra once per distinct selection list and kept (Hydra's own
       cache of parsed YAML files lives for one composition: it edits what it parsed while it builds the defaults
       list, so sharing its cache across compositions leaks one run's selections into the next; a deep copy of it
       per composition costs more than parsing again, measured);
    2. the run's value overrides (``a.b=1``, ``+a.b=1``, ``~a.b``) applied to a copy of it with Hydra's own
       override parser and applier, which is what Hydra itself does after merging the defaults list.

    ``tests/test_first_hour_on_cpu.py`` checks that every run of every shipped recipe composes to the same config
    both ways. Measured on ``paper_main`` (36 runs, 9 distinct selection lists): docs/slurm.md.
    """

    def __init__(self, config_name: str = CONFIG_NAME):
        self.config_name = config_name
        self._selected: dict[tuple[str, ...], object] = {}

    def compose(self, overrides: Sequence[str]):
        overrides = list(overrides)
        selections = tuple(o for o in overrides if not is_value_override(o))
        values = [o for o in overrides if is_value_override(o)]
        try:
            base = self._selected.get(selections)
            if base is None:
                base = self._selected[selections] = _compose_raw(selections, self.config_name)
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
            error = explain(exc, overrides, lambda o: _compose_raw(o, self.config_name))
            if error is None:
                raise
            raise error from exc
