"""One way to put fgrpo-verl's objects into verl's registries, with one duplicate policy.

Every object we register carries a mark (``__fgrpo_verl_id__``, e.g. ``"adv_estimator:fgrpo"``). For a name:

- free: register it (through verl's own decorator when verl has one, so verl's checks run);
- taken by the same object, or by an object with the same mark (a second copy of our module: importlib.reload,
  a checkout on ``sys.path`` next to the installed wheel, a module loaded under a second name): keep the one that
  is registered. The first copy stays what verl calls, and readers that must talk to the registered copy (the
  metrics capture in ``fgrpo_verl/integration/estimator.py``) look it up in the registry;
- taken by anything else (another plugin, a verl built-in): refuse with a ``ValueError`` naming both.

:func:`step` runs one registration step: the plugin (``strict=False``) logs a failure at WARNING and goes on with
the next step; ``fgrpo-verl train`` and ``doctor`` (``strict=True``) raise it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

logger = logging.getLogger("fgrpo_verl")

# The verl release whose internals fgrpo-verl extends (trainer hooks, CPU backend); see README "Why verl is pinned".
SUPPORTED_VERL = "0.9.1"

MARK = "__fgrpo_verl_id__"


def mark(obj, ident: str):
    """Tag ``obj`` as fgrpo-verl's ``ident``; returns ``obj`` (usable as a decorator argument)."""
    setattr(obj, MARK, ident)
    return obj


def ident_of(obj) -> str | None:
    # vars(), not getattr: a user's subclass of one of our trainers is not our trainer.
    try:
        return vars(obj).get(MARK)
    except TypeError:
        return None


def register(registry: dict, name: str, obj, kind: str, add: Callable | None = None):
    """Register ``obj`` under ``name`` in ``registry`` by the policy above; returns the object now registered.

    Args:
        registry: verl's registry dict (read to apply the policy).
        add: verl's own registration call ``add(name, obj)``; None writes ``registry[name] = obj``.
        kind: words for messages, e.g. "advantage estimator".
    """
    ident = ident_of(obj)
    if ident is None:
        raise TypeError(f"{obj!r} carries no fgrpo-verl mark; call registration.mark() on it first")
    current = registry.get(name)
    if current is obj or (current is not None and ident_of(current) == ident):
        return current
    if current is not None:
        raise ValueError(
            f"{kind} name {name!r} is already registered to {getattr(current, '__module__', '?')}."
            f"{getattr(current, '__qualname__', repr(current))}, not fgrpo-verl's; refusing to replace it "
            "(uninstall or disable the other plugin: VERL_USE_EXTERNAL_PLUGINS=<names to load>)"
        )
    if add is None:
        registry[name] = obj
    else:
        add(name, obj)
    return obj


def step(what: str, fn: Callable, strict: bool) -> bool:
    """Run one registration step; on failure raise (``strict``) or log a WARNING naming ``what``."""
    try:
        fn()
        return True
    except Exception as exc:
        if strict:
            raise
        logger.warning("fgrpo-verl: %s not registered: %s: %s", what, type(exc).__name__, exc)
        return False


def verl_version() -> str:
    import verl

    return str(getattr(verl, "__version__", "unknown"))


def verl_supported() -> bool:
    return verl_version() == SUPPORTED_VERL


def require_supported_verl() -> None:
    """Raise when the installed verl is not the one fgrpo-verl supports (``fgrpo-verl train`` / ``doctor``)."""
    found = verl_version()
    if found != SUPPORTED_VERL:
        raise RuntimeError(
            f"verl {found} is installed; fgrpo-verl supports exactly verl=={SUPPORTED_VERL} "
            f"(pip install 'verl[verl-core]=={SUPPORTED_VERL}')"
        )
