"""The package layout: the installed entry point, Hydra ``_target_`` strings and ``pkg://`` paths name modules
that exist, and the trainer side never loads the launcher.

* The ``verl.plugins`` entry point, the loss config's ``_target_`` and the ``pkg://`` paths resolve to the package's
  modules; a module name that does not exist raises ``ModuleNotFoundError`` (there are no aliases of old names).
* Nothing the trainer side (``integration/``, ``job/``, ``monitoring/``: code inside Ray workers on GPU nodes)
  imports pulls in ``fgrpo_verl.launch`` (the login-node launcher): checked in a fresh process after importing and
  registering everything, and statically over every import statement they can reach (lazy ones included).
"""

from __future__ import annotations

import ast
import json
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


def _module_file(name: str) -> Path | None:
    parts = name.split(".")[1:]
    for candidate in (PACKAGE.joinpath(*parts).with_suffix(".py"), PACKAGE.joinpath(*parts, "__init__.py")):
        if parts and candidate.is_file():
            return candidate
    return PACKAGE / "__init__.py" if not parts else None


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


def _imports(path: Path) -> set[str]:
    """Every fgrpo_verl module an import statement in ``path`` can load (function-level ones included), with the
    packages whose ``__init__`` it runs."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    out = set()
    for name in names:
        if not name.startswith("fgrpo_verl"):
            continue
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            prefix = ".".join(parts[:i])
            if _module_file(prefix) is not None:
                out.add(prefix)
    return out


def test_trainer_side_has_no_import_statement_reaching_the_launcher_on_cpu():
    start = {f"fgrpo_verl.{pkg}.{p.stem}" if p.stem != "__init__" else f"fgrpo_verl.{pkg}"
             for pkg in TRAINER_SIDE for p in (PACKAGE / pkg).glob("*.py")}
    seen, todo, via = set(), list(start), {}
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for dep in _imports(_module_file(name)):
            via.setdefault(dep, name)
            todo.append(dep)
    assert len(seen) > len(start)  # the walk follows imports (focal, evaluation, ...)
    launcher = sorted(m for m in seen if m == "fgrpo_verl.launch" or m.startswith("fgrpo_verl.launch."))
    assert launcher == [], {m: via[m] for m in launcher}
