"""Everything that registers in or hooks into verl: the ``verl.plugins`` entry point (``plugin.py``), what it
registers (the ``fgrpo`` advantage estimator ``estimator.py``, the ``fgrpo`` policy loss ``loss.py``, the config
checks ``validation.py``, the trainer modes ``trainer.py``, multi-output agent sessions ``sessions.py``) and how
(``plugin.py``: each step when verl imports the module holding its registry; one duplicate policy). What differs
between verl releases is ``fgrpo_verl/verl_compat.py``.

Importing this package imports nothing (verl imports ``plugin`` through the entry point).
"""
