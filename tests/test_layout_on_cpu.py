"""The package layout (issue 19): old module names still import, and the trainer side never loads the launcher.

* Every old dotted name in ``fgrpo_verl.MOVED`` imports to the *same module object* as its new name, which keeps
  its own ``__name__`` and ``__spec__`` (pickles and Ray refer to the new name); an older install's entry point
  (``fgrpo = fgrpo_verl.plugin``), an old Hydra ``_target_`` and old ``pkg://`` paths still load; a name that
  never existed still raises ``ModuleNotFoundError``.
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
    and registers, with the fgrpo_verl modules that loaded; then every old name, an old entry point, an old Hydra
    ``_target_`` and old ``pkg://`` paths."""
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

        moved = {{}}
        for old, new in fgrpo_verl.MOVED.items():
            module = importlib.import_module(old)
            parent, _, leaf = old.rpartition(".")
            moved[old] = {{
                "same": module is importlib.import_module(new) and sys.modules[old] is module,
                "attr": getattr(sys.modules[parent], leaf) is module,
                "name": module.__name__, "spec": module.__spec__.name, "loader": type(module.__loader__).__name__,
            }}

        from importlib.metadata import EntryPoint, entry_points
        from hydra.utils import get_class
        from verl.utils.import_utils import load_module  # how verl resolves pkg:// (custom_reward_function.path)
        import fgrpo_verl.integration.plugin as plugin, fgrpo_verl.job.preempt as preempt, fgrpo_verl.rewards as rewards
        from fgrpo_verl.integration.loss import FocalPolicyLossConfig
        print(json.dumps({{
            "loaded": loaded,
            "moved": moved,
            "entry_point": EntryPoint(name="fgrpo", value="fgrpo_verl.plugin", group="verl.plugins").load() is plugin,
            "target": get_class("fgrpo_verl.loss.FocalPolicyLossConfig") is FocalPolicyLossConfig,
            "pkg": [load_module("pkg://fgrpo_verl/launch/preempt") is preempt,
                    load_module("pkg://fgrpo_verl.plugin") is plugin,
                    load_module("pkg://fgrpo_verl.rewards") is rewards and callable(rewards.math_verify_score)],
            "installed": [ep.value for ep in entry_points(group="verl.plugins") if ep.name == "fgrpo"],
        }}))
    """)


def test_every_old_name_is_the_new_module_on_cpu(fresh_process):
    moved = fresh_process["moved"]
    assert set(moved) == set(fgrpo_verl.MOVED)
    for old, new in fgrpo_verl.MOVED.items():
        assert moved[old] == {"same": True, "attr": True, "name": new, "spec": new, "loader": "SourceFileLoader"}, old


def test_old_entry_point_hydra_target_and_pkg_paths_load_the_new_objects_on_cpu(fresh_process):
    assert fresh_process["entry_point"] and fresh_process["target"] and fresh_process["pkg"] == [True, True, True]
    # this checkout's install: the new entry point, or an install made before the move (the alias then loads it)
    assert fresh_process["installed"] in (["fgrpo_verl.integration.plugin"], ["fgrpo_verl.plugin"])


@pytest.mark.parametrize("name", [
    "fgrpo_verl.no_such_module", "fgrpo_verl.launch.no_such_module", "fgrpo_verl.integration.plugins",
    "fgrpo_verl.job.recipe",
])
def test_unknown_names_still_raise_module_not_found_on_cpu(name):
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
    packages whose ``__init__`` it runs; old names mapped to their new ones."""
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
            prefix = fgrpo_verl.MOVED.get(".".join(parts[:i]), ".".join(parts[:i]))
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
