"""verl plugin: ``[verl.plugins] fgrpo = fgrpo_verl.integration.plugin`` (verl 0.9.0 on), or
``VERL_USE_EXTERNAL_MODULES=fgrpo_verl.integration.plugin`` (verl 0.8.0, which loads no entry points).

verl imports this module at the end of every ``import verl``, in every process (driver, TaskRunner, workers), and
swallows what an entry point raises (logged at DEBUG only). So importing it registers nothing heavy and changes no
environment variable: each step of :data:`STEPS` waits (``wrapt``'s post-import hooks) until verl imports the module
holding its registry, and a process that never imports that module never runs the step nor imports our code for it
(importing ``verl.trainer.ppo.core_algos`` up front would add ~240 modules and 0.6 s to every ``import verl``).
Steps that need the full release (``fgrpo_verl.verl_compat``) are skipped on the others.

A step fails on its own, with a WARNING naming it. With ``FGRPO_VERL_STRICT_REGISTRATION=1`` (what ``fgrpo-verl
train`` puts in its run's Ray environment) a failing step fails the import of verl's module instead, and with it
the run's start: a trainer mode another plugin took would otherwise run that plugin's trainer. ``doctor`` and
``train``'s driver call :func:`register_all`, which runs the steps now and raises.

One duplicate policy (:func:`register`) for every registry: verl's ``register_policy_loss`` silently replaces a
taken name and ``register_adv_est`` raises when our module is loaded twice (a reload, a checkout beside the wheel).
Each object we register carries a mark; a name held by an object with the same mark is left as it is (the first copy
stays what verl calls), a name held by anything else is refused naming the holder.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib
import logging
import os
import sys
from collections.abc import Callable

import wrapt

from fgrpo_verl import verl_compat

logger = logging.getLogger("fgrpo_verl")

CORE_ALGOS = "verl.trainer.ppo.core_algos"
V1 = "verl.trainer.ppo.v1"
VERL_CONFIG = "verl.utils.config"
STRICT_ENV = "FGRPO_VERL_STRICT_REGISTRATION"
MARK = "__fgrpo_verl_id__"

# (what, "module:function" that registers it or a module whose import does, the verl module whose import runs it,
# the verl_compat feature it needs (None: every release))
STEPS = (
    ("advantage estimator `fgrpo`", "fgrpo_verl.integration.estimator:register", CORE_ALGOS, None),
    ("policy loss `fgrpo`", "fgrpo_verl.integration.loss:register", CORE_ALGOS, None),
    ("DS-GRPO control: estimator and policy loss `ds_grpo`", "fgrpo_verl.integration.ds_grpo:register", CORE_ALGOS,
     verl_compat.DS_GRPO),
    ("fgrpo checks in verl's validate_config", "fgrpo_verl.integration.validation:register", VERL_CONFIG, None),
    # the module registers its trainers at its end: also when a script imports it before verl's v1 stack, which
    # makes this hook fire while the module is half-built (the import here then returns it as it is)
    ("trainer modes fgrpo_sync / fgrpo_colocate_async / fgrpo_separate_async", "fgrpo_verl.integration.trainer", V1,
     verl_compat.TRAINER_MODES),
    ("final-output handling of multi-output agent sessions for fgrpo", "fgrpo_verl.integration.sessions:register", V1,
     verl_compat.TRAINER_MODES),
)


def mark(obj, ident: str):
    """Tag ``obj`` as fgrpo-verl's ``ident``; returns ``obj``."""
    setattr(obj, MARK, ident)
    return obj


def ident_of(obj) -> str | None:
    # vars(), not getattr: a user's subclass of one of our trainers is not our trainer
    try:
        return vars(obj).get(MARK)
    except TypeError:
        return None


def register(registry: dict, name: str, obj, kind: str, decorator: Callable) -> None:
    """Put ``obj`` under ``name`` in ``registry`` by the duplicate policy above, through verl's own registering
    ``decorator(name)`` (so its checks run). ``kind`` names the registry in messages; ``obj`` is marked
    ``<kind>:<name>``, the mark a copy of the same module gives its own object."""
    ident = ident_of(mark(obj, f"{kind}:{name}"))
    current = registry.get(name)
    if current is obj or (current is not None and ident_of(current) == ident):
        return
    if current is not None:
        raise ValueError(
            f"{kind} name {name!r} is already registered to {getattr(current, '__module__', '?')}."
            f"{getattr(current, '__qualname__', repr(current))}, not fgrpo-verl's; refusing to replace it "
            "(uninstall or disable the other plugin: VERL_USE_EXTERNAL_PLUGINS=<names to load>)"
        )
    decorator(name)(obj)


def register_in_core_algos(kind: str, name: str, obj) -> None:
    """:func:`register` in verl's advantage-estimator registry (``kind`` "advantage estimator") or policy-loss
    registry ("policy loss"), through verl's decorator for it."""
    from verl.trainer.ppo import core_algos

    registry, add = ((core_algos.ADV_ESTIMATOR_REGISTRY, core_algos.register_adv_est) if kind == "advantage estimator"
                     else (core_algos.POLICY_LOSS_REGISTRY, core_algos.register_policy_loss))
    register(registry, name, obj, kind, add)


# What verl drops (it keeps an estimator's advantages and returns only) reaches the trainer's metrics through named
# sinks: a capture (:func:`collecting`) opens a list under a name, and code run inside it appends (:func:`report`).
# They live here, in the module verl's plugin loader imports once, so that every copy of a reporting module (a
# reload, a second copy of the estimator whose first copy verl keeps calling) reports into the capture a caller opened.
_SINKS: dict[str, contextvars.ContextVar] = {}


@contextlib.contextmanager
def collecting(name: str):
    """Within the block, what :func:`report` is given under ``name`` goes to a new list, yielded."""
    var = _SINKS.setdefault(name, contextvars.ContextVar(name, default=None))
    sink: list = []
    token = var.set(sink)
    try:
        yield sink
    finally:
        var.reset(token)


def report(name: str, item) -> None:
    """Append ``item`` to the list of the innermost :func:`collecting` of ``name`` open here; none open: nothing."""
    sink = _SINKS[name].get() if name in _SINKS else None
    if sink is not None:
        sink.append(item)


def run_step(what: str, target: str, strict: bool, _module=None) -> None:
    """Run one step of :data:`STEPS`; on failure raise (``strict``) or log a WARNING naming ``what``."""
    module, _, function = target.partition(":")
    try:
        loaded = importlib.import_module(module)
        if function:
            getattr(loaded, function)()
    except Exception as exc:
        if strict:
            raise
        logger.warning("fgrpo-verl: %s not registered: %s: %s", what, type(exc).__name__, exc)


def install() -> None:
    """What ``import verl`` runs (the module docstring)."""
    if not verl_compat.supports(verl_compat.TRAINER_MODES):
        logger.warning("fgrpo-verl on %s", verl_compat.summary())
    strict = os.environ.get(STRICT_ENV) == "1"
    for what, target, trigger, feature in STEPS:
        if verl_compat.supports(feature):
            # a step whose module is imported already runs now, inside verl's plugin loader, which swallows errors
            hook = functools.partial(run_step, what, target, strict and trigger not in sys.modules)
            wrapt.register_post_import_hook(hook, trigger)


def register_all(strict: bool = True, leave_scheduled: tuple[str, ...] = ()) -> None:
    """Run every step the installed verl offers now (``doctor``); with ``strict`` a failing one raises.
    ``leave_scheduled``: verl modules whose steps stay with the process that imports them (``train``'s driver leaves
    :data:`V1` to the TaskRunner); one already imported runs now, so a name another plugin took is refused here."""
    for what, target, trigger, feature in STEPS:
        if verl_compat.supports(feature) and not (trigger in leave_scheduled and trigger not in sys.modules):
            run_step(what, target, strict)


install()
