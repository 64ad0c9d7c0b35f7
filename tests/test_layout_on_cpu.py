"""The package layout: the installed entry point, Hydra ``_target_`` strings and ``pkg://`` paths name modules
that exist, and the trainer side never loads the launcher.

* The ``verl.plugins`` entry point, the loss config's ``_target_`` and the ``pkg://`` paths resolve to the package's
  modules; a module name that does not exist raises ``ModuleNotFoundError`` (there are no aliases of old names).
* Nothing the trainer side (``integration/``, ``job/``, ``monitoring/``: code inside Ray workers on GPU nodes)
  imports pulls in ``fgrpo_verl.launch`` (the login-node launcher): checked in a fresh process after importing and
  registering everything, and statically by the layers contract of ``.importlinter`` (import-linter).
"""

from __future__ import annotations

import configparser
import json
import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import fgrpo_verl

PACKAGE = Path(fgrpo_verl.__file__).resolve().parent
TRAINER_SIDE = ("integration", "job", "monitoring")


def _run(code: str) -> dict:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def fresh_process() -> dict:
    """One fresh process (importing verl's trainer stack costs ~20 s): first everything the trainer side imports
    and registers, with the fgrpo_verl modules that loaded; then the entry point, the Hydra ``_target_`` and the
    ``pkg://`` paths."""
    return _run(f"""
        import importlib, json, pkgutil, sys
        import fgrpo_verl
        for pkg in {TRAINER_SIDE!r}:
            package = importlib.import_module("fgrpo_verl." + pkg)
            for info in pkgutil.iter_modules(package.__path__):
                importlib.import_module(f"fgrpo_verl.{{pkg}}.{{info.name}}")
        import verl  # the entry point runs the plugin
        from fgrpo_verl.integration.plugin import register_all
        register_all(strict=False)
        loaded = sorted(m for m in sys.modules if m.startswith("fgrpo_verl"))

        from importlib.metadata import EntryPoint, entry_points
        from hydra.utils import get_class
        from verl.utils.import_utils import load_module  # how verl resolves pkg:// (custom_reward_function.path)
        import fgrpo_verl.integration.plugin as plugin, fgrpo_verl.job.preempt as preempt, fgrpo_verl.rewards as rewards
        from fgrpo_verl.integration.loss import FocalPolicyLossConfig
        print(json.dumps({{
            "loaded": loaded,
            "entry_point": EntryPoint(name="fgrpo", value="fgrpo_verl.integration.plugin",
                                      group="verl.plugins").load() is plugin,
            "target": get_class("fgrpo_verl.integration.loss.FocalPolicyLossConfig") is FocalPolicyLossConfig,
            "pkg": [load_module("pkg://fgrpo_verl/job/preempt") is preempt,
                    load_module("pkg://fgrpo_verl.integration.plugin") is plugin,
                    load_module("pkg://fgrpo_verl.rewards") is rewards and callable(rewards.math_verify_score)],
            "installed": [ep.value for ep in entry_points(group="verl.plugins") if ep.name == "fgrpo"],
        }}))
    """)


def test_entry_point_hydra_target_and_pkg_paths_load_the_package_objects_on_cpu(fresh_process):
    assert fresh_process["entry_point"] and fresh_process["target"] and fresh_process["pkg"] == [True, True, True]
    assert fresh_process["installed"] == ["fgrpo_verl.integration.plugin"]


@pytest.mark.parametrize("name", [
    "fgrpo_verl.no_such_module", "fgrpo_verl.launch.no_such_module", "fgrpo_verl.integration.plugins",
    "fgrpo_verl.job.recipe",
    # names of an unreleased layout: no aliases (an old editable install is fixed by reinstalling)
    "fgrpo_verl.plugin", "fgrpo_verl.estimator", "fgrpo_verl.launch.preempt", "fgrpo_verl.compose",
    "fgrpo_verl.launch.identity",
])
def test_unknown_names_raise_module_not_found_on_cpu(name):
    import importlib

    with pytest.raises(ModuleNotFoundError) as err:
        importlib.import_module(name)
    assert err.value.name == name


def test_trainer_side_imports_no_launcher_at_run_time_on_cpu(fresh_process):
    loaded = fresh_process["loaded"]
    assert "fgrpo_verl.integration.trainer" in loaded and "fgrpo_verl.job.preempt" in loaded
    assert [m for m in loaded if m == "fgrpo_verl.launch" or m.startswith("fgrpo_verl.launch.")] == []


def test_imports_obey_the_layers_written_in_importlinter_on_cpu():
    """The layers and the no-cycles rule of ``.importlinter`` (every import statement, function-level ones
    included), checked by import-linter: a lower layer never imports a higher one, so the trainer side
    (integration, backends, monitoring, job) never reaches the launcher."""
    from importlinter.cli import lint_imports

    config = PACKAGE.parent / ".importlinter"
    contracts = configparser.ConfigParser()
    contracts.read(config, encoding="utf-8")
    layers = [line.strip() for line in contracts["importlinter:contract:layers"]["layers"].strip().splitlines()]
    position = {name: i for i, line in enumerate(layers) for name in line.split(" | ")}
    # the contracts themselves say what this test promises: the trainer side below the launcher, cli on top, and
    # what train.sbatch runs on a node (cli/job_env.py) kept from the launcher
    assert layers[1] == "fgrpo_verl.cli" and contracts["importlinter:contract:acyclic"]["type"] == "acyclic_siblings"
    job_env = contracts["importlinter:contract:job-env"]
    assert (job_env["source_modules"].split(), job_env["forbidden_modules"].split()) == (
        ["fgrpo_verl.cli.job_env"], ["fgrpo_verl.launch"])
    assert all(position[f"fgrpo_verl.{pkg}"] > position["fgrpo_verl.launch"] for pkg in TRAINER_SIDE)
    # import-linter configures logging with dictConfig, which disables every logger that exists (ours included):
    # the loggers' state is put back so later tests in this process still see our warnings
    loggers = [logger for logger in logging.root.manager.loggerDict.values() if isinstance(logger, logging.Logger)]
    disabled = [logger.disabled for logger in loggers]
    try:
        assert lint_imports(config_filename=str(config), no_cache=True, no_logo=True) == 0
    finally:
        for logger, was in zip(loggers, disabled):
            logger.disabled = was
