"""Run a callback right after a named module has been imported, without importing it ourselves.

Two users, one mechanism. The plugin must not import verl's heavy modules (``verl.trainer.ppo.core_algos``, the v1
trainer stack) just to put names in their registries: any process that imports them imports the registries with
them, so registering at that moment is as good as registering up front, and a process that never imports them
pays nothing. The backends change verl modules (a registry entry, a wrapped function) the same way, for the same
reason, and because importing them early could resolve verl's platform before the backend selected it.

:func:`when_imported` runs ``callback(module)`` at once when the module is already in ``sys.modules``, and
otherwise puts one small finder at the front of ``sys.meta_path``. That finder answers only for the watched
names: it asks the remaining finders for the real spec and wraps the spec's loader so that ``exec_module``
runs the module, restores the original loader on it (``module.__loader__``, ``__spec__.loader``), then runs the
callbacks before any other module can bind the module's names (a legacy loader with only ``load_module`` is
wrapped the same way; every other loader attribute is the real loader's). A callback registered with
``errors="log"`` that raises is logged at WARNING and never breaks the import of verl's module (the plugin's
registrations: what is missing is said); with ``errors="raise"`` its exception is the import's (a backend's patch:
running on an unpatched verl would fail later and less clearly). A namespace package has no loader to wrap: its
callbacks cannot run, which is logged at WARNING. The lookup is guarded per thread, so another finder that
delegates the same way cannot make the two recurse, and many callbacks on one module share one hook.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import logging
import sys
import threading
from collections.abc import Callable

logger = logging.getLogger("fgrpo_verl")

ERRORS = ("log", "raise")

_lock = threading.RLock()
# module name -> [(callback, errors)] waiting for it
_pending: dict[str, list[tuple[Callable, str]]] = {}


def _run(callbacks: list[tuple[Callable, str]], module) -> None:
    for callback, errors in callbacks:
        try:
            callback(module)
        except Exception as exc:
            if errors == "raise":
                raise
            # the import of verl's module must go on; say what is missing
            logger.warning("fgrpo-verl: %s after importing %s failed: %s: %s",
                           getattr(callback, "__qualname__", callback), module.__name__, type(exc).__name__, exc)


class _RunAfterExec(importlib.abc.Loader):
    def __init__(self, loader, name: str):
        self._loader, self._name = loader, name

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def __getattr__(self, name):
        # While the module runs, this wrapper is its __loader__ and __spec__.loader: code that asks the loader for
        # anything else (importlib.resources' reader, is_package, get_source) gets the real loader's answer.
        return getattr(self._loader, name)

    def exec_module(self, module):
        self._loader.exec_module(module)
        _finish(module, self._loader, self._name)


class _RunAfterLoad:
    """The same for a legacy loader that only has ``load_module`` (Python then calls that instead of exec_module)."""

    def __init__(self, loader, name: str):
        self._loader, self._name = loader, name

    def load_module(self, fullname):
        module = self._loader.load_module(fullname)
        _finish(module, self._loader, self._name)
        return module

    def __getattr__(self, name):
        return getattr(self._loader, name)


def _finish(module, loader, name: str) -> None:
    """Give the module its real loader back, then run the callbacks waiting for it."""
    module.__loader__ = loader
    if getattr(module, "__spec__", None) is not None:
        module.__spec__.loader = loader
    with _lock:
        callbacks = _pending.pop(name, [])
    try:
        _run(callbacks, module)
    except BaseException:
        # a raising callback failed the import (Python drops the half-made module): the next import of the name
        # executes the module anew and must run every callback again, not find none
        with _lock:
            _pending[name] = callbacks + _pending.get(name, [])
            if _finder not in sys.meta_path:
                sys.meta_path.insert(0, _finder)
        raise


# Names this thread is resolving: another finder that, like ours, asks every finder for the real spec would ask
# us again from inside our own lookup, and the two would recurse forever.
_resolving = threading.local()


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        busy = _resolving.__dict__.setdefault("names", set())
        if fullname not in _pending or fullname in busy:
            return None
        busy.add(fullname)
        try:
            spec = self._real_spec(fullname, path, target)
        finally:
            busy.discard(fullname)
        if spec is None:
            return None
        if spec.loader is None:  # a namespace package: nothing to wrap: say so, never wait silently
            logger.warning("fgrpo-verl: %s has no loader to hook; %d registration step(s) waiting for it will not run",
                           fullname, len(_pending.get(fullname, ())))
            return spec
        wrap = _RunAfterExec if hasattr(spec.loader, "exec_module") else _RunAfterLoad
        spec.loader = wrap(spec.loader, fullname)
        return spec

    def _real_spec(self, fullname, path, target):
        # From the other finders (PathFinder for an installed verl).
        for finder in sys.meta_path:
            if finder is self or isinstance(finder, _Finder):
                continue
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find else None
            if spec is not None:
                return spec
        return None


_finder = _Finder()


def when_imported(name: str, callback: Callable, errors: str = "log") -> None:
    """Call ``callback(module)`` once module ``name`` has been executed: now if it already has been.

    ``errors``: ``"log"`` (a WARNING, the import goes on) or ``"raise"`` (the callback's exception is the import's).
    Registering the same ``(name, callback)`` again while it waits adds nothing: give module-level functions where
    a second registration must be a no-op (a new lambda per call is a new callback)."""
    if errors not in ERRORS:
        raise ValueError(f"errors must be one of {ERRORS}, got {errors!r}")
    module = sys.modules.get(name)
    if module is not None:
        _run([(callback, errors)], module)
        return
    with _lock:
        waiting = _pending.setdefault(name, [])
        if all(cb is not callback for cb, _ in waiting):
            waiting.append((callback, errors))
        if _finder not in sys.meta_path:
            sys.meta_path.insert(0, _finder)


def pending() -> dict[str, int]:
    """Watched module names that have not been imported yet -> number of callbacks waiting (for tests, doctor)."""
    with _lock:
        return {name: len(cbs) for name, cbs in _pending.items()}


def discard(name: str, callbacks=None) -> None:
    """Forget ``callbacks`` (all, when None) waiting for ``name``: their work is being done now by the caller."""
    with _lock:
        if callbacks is None:
            _pending.pop(name, None)
            return
        kept = [(cb, errors) for cb, errors in _pending.get(name, []) if all(cb is not c for c in callbacks)]
        if kept:
            _pending[name] = kept
        else:
            _pending.pop(name, None)
