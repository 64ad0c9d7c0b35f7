"""Everything that registers in or hooks into verl: the ``verl.plugins`` entry point (``plugin.py``), what it
registers (the ``fgrpo`` advantage estimator ``estimator.py``, the ``fgrpo`` policy loss ``loss.py``, the config
checks ``validation.py``, the trainer modes ``trainer.py``, multi-output agent sessions ``sessions.py``) and how
(``registration.py``: one step at a time, the verl version check; ``fgrpo_verl/import_hooks.py`` runs a step when
verl imports the module holding its registry).

Importing this package imports nothing (verl imports ``plugin`` through the entry point).
"""
