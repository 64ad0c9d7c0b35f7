"""verl plugin entry point (``[verl.plugins] fgrpo = fgrpo_verl.plugin``).

verl imports this module at the end of every ``import verl``, in every process (driver, TaskRunner,
workers), and swallows any exception it raises (logged at DEBUG only). ``fgrpo-verl doctor`` and
``fgrpo-verl train`` therefore call :func:`register_all` directly, so that a broken install fails loudly.
"""

from __future__ import annotations


def register_all() -> None:
    from fgrpo_verl import backends, estimator

    estimator.register()
    # Only when $FGRPO_VERL_BACKEND names one (e.g. `backend=cpu`): GPU runs never import backend code.
    backends.register_selected()


register_all()
