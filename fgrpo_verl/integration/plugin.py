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

Each step fails on its own with a WARNING naming it. ``fgrpo-verl train`` and ``doctor`` call
:func:`register_all`, which runs every step now and raises on the first failure.
"""

from __future__ import annotations

import functools
import logging
import sys

from fgrpo_verl import import_hooks
from fgrpo_verl.integration import registration

logger = logging.getLogger("fgrpo_verl")

CORE_ALGOS = "verl.trainer.ppo.core_algos"
V1 = "verl.trainer.ppo.v1"
VERL_CONFIG = "verl.utils.config"


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
    for what, fn, module, needs_supported in STEPS:
        if needs_supported and not supported:
            continue
        run = functools.partial(registration.step, what, fn, False)
        if module is None:
            run()
        else:
            callback = lambda _module, run=run: run()  # noqa: E731
            _SCHEDULED.setdefault(module, []).append(callback)
            import_hooks.when_imported(module, callback)


def register_all(strict: bool = True) -> None:
    """Import and register everything now (``fgrpo-verl train``, ``doctor``): with ``strict``, an unsupported verl
    or any failing step raises instead of logging a WARNING."""
    if strict:
        registration.require_supported_verl()
    # Running every step now: drop the scheduled ones, or importing verl's v1 stack below would fire the trainer
    # step again from inside the import of fgrpo_verl.integration.trainer.
    for module, callbacks in list(_SCHEDULED.items()):
        import_hooks.discard(module, callbacks)
        del _SCHEDULED[module]
    for what, fn, _, _ in STEPS:
        registration.step(what, fn, strict)


install()
