"""Run a function right after a module is imported, without importing it.

The backends change verl modules (a registry entry, a wrapped function) that are expensive to import and that
many processes never use; importing them eagerly in every process that loads a backend would cost seconds of
start-up per process and could resolve verl's platform too early.
"""

from __future__ import annotations

import importlib.abc
import sys


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Runs ``patch(module)`` right after ``name`` is executed, before any other module can bind its names."""

    def __init__(self, name: str, patch):
        self.name, self.patch = name, patch

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                execute, patch = spec.loader.exec_module, self.patch

                def exec_module(module):
                    execute(module)
                    patch(module)

                spec.loader.exec_module = exec_module  # this loader object belongs to this one module
                return spec
        return None


def when_imported(name: str, patch) -> None:
    """``patch(module)`` now if ``name`` is imported already, else right after it is.

    Registering the same ``(name, patch)`` twice installs one hook; give module-level functions (a new lambda
    per call is a new patch).
    """
    if name in sys.modules:
        patch(sys.modules[name])
    elif not any(isinstance(f, _PatchOnImport) and (f.name, f.patch) == (name, patch) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport(name, patch))
