"""Compose fgrpo-verl's Hydra config exactly as ``fgrpo-verl train`` would (verl's checks of it:
``fgrpo_verl.integration.validation.validate``).

A composition that fails because of what the user typed raises ``fgrpo_verl.config.errors.ConfigError`` (a
``ValueError``): one line naming the override, what is wrong and what is valid, with a "did you mean"; the CLI
prints it and exits 2.

:class:`SharedComposer` composes many runs (a recipe's) at a fraction of the cost of one :func:`compose` each:
see its docstring for what is shared and why the result is the same.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
from collections.abc import Sequence
from pathlib import Path

from fgrpo_verl.config.errors import ConfigError, check_kind, explain, missing_key, omegaconf_reason
from fgrpo_verl.config.paths import CONFIG_NAME, config_dir
from fgrpo_verl.config.schema import typed_fgrpo


def verl_config_dir() -> Path:
    """verl's own config directory, found without importing verl (``find_spec`` of a top-level package does not
    execute it)."""
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.origin:
        raise ModuleNotFoundError("verl is not installed: pip install 'verl[verl-core]==0.9.1'")
    return Path(spec.origin).parent / "trainer" / "config"


def _compose_raw(overrides: Sequence[str], config_name: str):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(config_dir()), version_base=None):
        searchpath = f"hydra.searchpath=[file://{verl_config_dir()}]"
        return hydra_compose(config_name=config_name, overrides=[searchpath, *overrides])


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

@functools.cache
def _group_names() -> frozenset[str]:
    """The config groups at the top of the search path (fgrpo-verl's, verl's, Hydra's own)."""
    return frozenset({"hydra", *(d.name for root in (config_dir(), verl_config_dir()) for d in root.iterdir()
                                 if d.is_dir())})


def is_value_override(override: str) -> bool:
    """True for ``a.b=1`` / ``+a.b=1`` / ``++a.b=1`` / ``~a.b`` / ``+note=1`` (a config value, which Hydra applies
    after merging the defaults list); False for a config group selection (``algo=grpo``, ``+group/option=x``,
    ``group@package=x``) or a ``hydra.*`` setting."""
    key = override.split("=", 1)[0].strip().lstrip("+~")
    return not ("/" in key or "@" in key or key in _group_names() or key.startswith("hydra."))


def _apply_values(config, values: list[str], base) -> None:
    """Apply the value overrides ``values`` (``a.b=1``, ``+a.b=1``, ``++a.b=1``, ``~a.b``) to ``config`` as Hydra
    does after merging its defaults list: parsed by Hydra's override parser, set with ``OmegaConf.update`` (the
    config is in struct mode, so a key it lacks needs ``+``). Each one that cannot apply, or that changes the kind
    of its key's value in ``base`` (:func:`check_kind`), raises a one-line :class:`ConfigError` naming it."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf, open_dict
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

    for override in OverridesParser.create().parse_overrides(values):
        typed, key = override.input_line, override.key_or_group
        if override.is_sweep_override():
            raise ConfigError(f"{typed}: several values sweep, which `train` and `launch` do not do; give one value "
                              "(a list is written [a,b])")
        value, present = override.value(), OmegaConf.select(config, key, throw_on_missing=False) is not None
        try:
            if override.is_delete():
                if not present:
                    raise missing_key(typed, key, config, "cannot delete: ")
                if value is not None and value != OmegaConf.select(config, key):
                    raise ConfigError(f"{typed}: {key} is {OmegaConf.select(config, key)!r}, not {value!r}: not deleted")
                parent, _, last = key.rpartition(".")
                with open_dict(config):
                    del (OmegaConf.select(config, parent) if parent else config)[last]
                continue
            if override.is_add() and present and not isinstance(value, (dict, list)):
                raise ConfigError(f"{typed}: {key} already exists, so '+' (add a new key) does not apply; set it "
                                  f"with {typed.lstrip('+')}")
            try:
                OmegaConf.update(config, key, value, merge=True, force_add=override.is_add() or override.is_force_add())
            except (ConfigAttributeError, ConfigKeyError) as exc:
                raise missing_key(typed, key, config) from exc
        except OmegaConfBaseException as exc:
            raise ConfigError(f"{typed}: {omegaconf_reason(exc)}") from exc
        check_kind(typed, OmegaConf.select(base, key, throw_on_resolution_failure=False), value)


class SharedComposer:
    """Compose many override lists (a recipe's runs) sharing what they have in common.

    ``compose(overrides)`` here returns what :func:`compose` returns, in two steps:

    1. the config of the run's *selections* (every override that is not a plain value: config groups such as
       ``algo=grpo``), composed by Hydra once per distinct selection list and kept (Hydra's own
       cache of parsed YAML files lives for one composition: it edits what it parsed while it builds the defaults
       list, so sharing its cache across compositions leaks one run's selections into the next; a deep copy of it
       per composition costs more than parsing again, measured);
    2. the run's value overrides (``a.b=1``, ``+a.b=1``, ``~a.b``, ``+note=1``) applied to a copy of it with Hydra's
       override parser and ``OmegaConf.update`` (:func:`_apply_values`), which is what Hydra itself does after
       merging the defaults list.

    Then ``algorithm.fgrpo`` is typed by its schema (fgrpo_verl/config/schema.py): ``gamma=0`` and ``gamma=0.0``
    compose to one config.

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
            _apply_values(config, values, base)
        except ConfigError:
            raise
        except Exception as exc:
            raise (explain(exc) or exc) from exc
        typed_fgrpo(config, overrides)
        return config
