"""verl plugin entry point (``[verl.plugins] fgrpo = fgrpo_verl.integration.plugin``).

verl imports this module at the end of every ``import verl``, in every process (driver, TaskRunner, workers),
and swallows any exception it raises (logged at DEBUG only). Importing it therefore registers nothing heavy and
changes no environment variable. What it does, in order:

1. If the installed verl is not the supported release, log a WARNING naming it; the steps marked "0.9.1 only"
   below are then skipped (they extend verl internals), the others still run.
2. Schedule each registration step for the moment verl imports the module that holds its registry
   (``fgrpo_verl.import_hooks``): a process that never imports that module never runs the step and never imports
   our code for it. Steps whose module is already imported run at once.

   ==========================================  ==============================  ============
   step                                        runs when verl imports          verl
   ==========================================  ==============================  ============
   advantage estimator ``fgrpo``               ``verl.trainer.ppo.core_algos``  any
   policy loss ``fgrpo``                       ``verl.trainer.ppo.core_algos``  any
   fgrpo checks in ``validate_config``         ``verl.utils.config`` (already)  any
   trainer modes ``fgrpo_*``                   ``verl.trainer.ppo.v1``          0.9.1 only
   multi-output sessions for ``fgrpo``         ``verl.trainer.ppo.v1``          0.9.1 only
   backends selected by ``backend=``           at once (nothing when unset)     0.9.1 only
   ==========================================  ==============================  ============

Each step fails on its own with a WARNING naming it. ``doctor`` calls :func:`register_all`, which runs every step
now and raises on the first failure. ``fgrpo-verl train`` runs the steps its driver needs now (the estimator, the
loss and the config checks: what validation reads) and leaves the trainer steps to the process that imports verl's
v1 trainer stack (the TaskRunner: the driver never imports it, ~2.8 s with the vLLM import it pulls in); it sets
``FGRPO_VERL_STRICT_REGISTRATION=1`` in the run's Ray environment, so there a failing step fails the import of
that stack, and with it the run's start, instead of leaving a WARNING (a trainer mode another plugin took would
otherwise run that plugin's trainer).
"""

from __future__ import annotations

import functools
import logging
import os
import sys

from fgrpo_verl import import_hooks
from fgrpo_verl.integration import registration

logger = logging.getLogger("fgrpo_verl")

CORE_ALGOS = "verl.trainer.ppo.core_algos"
V1 = "verl.trainer.ppo.v1"
VERL_CONFIG = "verl.utils.config"
# "1": a step scheduled on a module's import raises into that import instead of logging a WARNING
STRICT_ENV = "FGRPO_VERL_STRICT_REGISTRATION"


def _estimator() -> None:
    from fgrpo_verl.integration import estimator

    estimator.register()


def _loss() -> None:
    from fgrpo_verl.integration import loss

    loss.register()


def _validation() -> None:
    from fgrpo_verl.integration import validation

    validation.install()


def _trainers() -> None:
    half_built = sys.modules.get("fgrpo_verl.integration.trainer")
    if half_built is not None and not hasattr(half_built, "register"):
        # fgrpo_verl.integration.trainer was imported first and is importing verl's v1 stack itself (this hook fired from
        # inside it): it registers when it is complete
        half_built.REGISTER_WHEN_LOADED = True
        return
    from fgrpo_verl.integration import trainer

    trainer.register()


def _sessions() -> None:
    from verl.trainer.ppo.v1 import trainer_base

    from fgrpo_verl.integration import sessions

    sessions.install(trainer_base)


def _backend() -> None:
    from fgrpo_verl import backends

    backends.register_selected()


# (what, step, module whose import triggers it (None: at once), needs the supported verl)
STEPS = (
    ("advantage estimator `fgrpo`", _estimator, CORE_ALGOS, False),
    ("policy loss `fgrpo`", _loss, CORE_ALGOS, False),
    ("fgrpo checks in verl's validate_config", _validation, VERL_CONFIG, False),
    ("trainer modes fgrpo_sync / fgrpo_colocate_async / fgrpo_separate_async", _trainers, V1, True),
    ("final-output handling of multi-output agent sessions for fgrpo", _sessions, V1, True),
    ("execution backends listed in $VERL_USE_EXTERNAL_MODULES", _backend, None, True),
)


# module name -> the registration callbacks install() left waiting for it (register_all drops these, and only these:
# the backends' patches wait on the same hook)
_SCHEDULED: dict[str, list] = {}


def install() -> None:
    """What ``import verl`` runs through the entry point (see the module docstring)."""
    supported = registration.verl_supported()
    if not supported:
        skipped = "; ".join(what for what, _, _, needs in STEPS if needs)
        logger.warning(
            "fgrpo-verl supports verl==%s, found verl %s: registering only the `fgrpo` advantage estimator, the "
            "`fgrpo` policy loss and its config checks; not registered: %s",
            registration.SUPPORTED_VERL, registration.verl_version(), skipped,
        )
    strict = os.environ.get(STRICT_ENV) == "1"
    for what, fn, module, needs_supported in STEPS:
        if needs_supported and not supported:
            continue
        # a step that runs now runs inside verl's plugin loader, which swallows exceptions: it logs
        raises = strict and module is not None and module not in sys.modules
        run = functools.partial(registration.step, what, fn, raises)
        if module is None:
            run()
        else:
            callback = lambda _module, run=run: run()  # noqa: E731
            _SCHEDULED.setdefault(module, []).append(callback)
            if raises:
                import_hooks.when_imported(module, callback, errors="raise")
            else:
                import_hooks.when_imported(module, callback)


def register_all(strict: bool = True, leave_scheduled: tuple[str, ...] = ()) -> None:
    """Import and register everything now (``doctor``): with ``strict``, an unsupported verl or any failing step
    raises instead of logging a WARNING. ``leave_scheduled``: modules whose steps stay where :func:`install` put
    them, to run when (and where) verl imports that module (``train``'s driver leaves :data:`V1`); one already
    imported (another plugin imported it) runs now, so that a name another plugin took is refused here."""
    if strict:
        registration.require_supported_verl()
    later = {module for module in leave_scheduled if module not in sys.modules}
    # Running the steps now: drop their scheduled callbacks, or importing verl's v1 stack below would fire the
    # trainer step again from inside the import of fgrpo_verl.integration.trainer.
    for module, callbacks in list(_SCHEDULED.items()):
        if module not in later:
            import_hooks.discard(module, callbacks)
            del _SCHEDULED[module]
    for what, fn, module, _ in STEPS:
        if module not in later:
            registration.step(what, fn, strict)


install()
