"""fgrpo-verl: F-GRPO (arXiv 2602.06717) focal advantage scaling as a verl plugin.

Importing this package is cheap and imports no verl; verl loads :mod:`fgrpo_verl.integration.plugin` itself.

Modules that moved keep their old dotted names (configs, ``custom_reward_function`` paths, ``_target_`` strings and
the ``verl.plugins`` entry point of an older install name them): importing an old name in :data:`MOVED` imports the
module under its new name and binds the *same module object* to the old name, so ``fgrpo_verl.estimator is
fgrpo_verl.integration.estimator``. Any other unknown name still raises ``ModuleNotFoundError``.
"""

import importlib
import importlib.machinery
import sys

__version__ = "0.1.0"

# old dotted name -> new dotted name (the package re-layout, issue 19)
MOVED = {
    **{f"fgrpo_verl.{name}": f"fgrpo_verl.integration.{name}" for name in (
        "plugin", "registration", "import_hooks", "estimator", "loss", "trainer", "sessions", "validation")},
    **{f"fgrpo_verl.launch.{name}": f"fgrpo_verl.job.{name}" for name in ("preempt", "resume_point", "save_per_epoch")},
    "fgrpo_verl.tracking": "fgrpo_verl.job.tracking",
    "fgrpo_verl.focal_metrics": "fgrpo_verl.monitoring.focal_metrics",
    "fgrpo_verl.val_pass_at_k": "fgrpo_verl.monitoring.val_pass_at_k",
    "fgrpo_verl.compose": "fgrpo_verl.config.compose",
    "fgrpo_verl.paths": "fgrpo_verl.config.paths",
}


class _MovedModules:
    """Meta-path finder and loader for the names in :data:`MOVED`.

    It sits at the end of ``sys.meta_path``, so it answers only for a name no other finder resolves. The loader's
    ``create_module`` returns the module imported under its new name; the import system then stores it under the
    old name too (and as an attribute of the old parent package). That step also overwrites ``module.__spec__``
    with the alias spec, which ``exec_module`` undoes: the module keeps its own name, file and spec (pickling and
    ``importlib.reload`` look there). Not covered: ``python -m`` with an old name (no moved module has a
    ``__main__``; run the new name) and ``importlib.util.module_from_spec`` on an old name's spec without
    executing it (it leaves the alias spec on the shared module).
    """

    def __init__(self):
        self._own_spec = {}

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec):
        module = importlib.import_module(MOVED[spec.name])
        self._own_spec[spec.name] = module.__spec__
        return module

    def exec_module(self, module):
        # the import lock of the old name is held from create_module to here
        module.__spec__ = self._own_spec.pop(module.__spec__.name)


if not any(type(finder).__name__ == "_MovedModules" for finder in sys.meta_path):  # once, even after a reload
    sys.meta_path.append(_MovedModules())
