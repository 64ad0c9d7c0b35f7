"""One registration helper, one duplicate policy; version-gated, independently failing steps; import hooks."""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import logging
import sys

import pytest
import torch
from conftest import algo_config, make_batch

import verl  # noqa: F401  (loads the plugin)
from verl.trainer.ppo import core_algos

from fgrpo_verl import import_hooks
from fgrpo_verl.integration import estimator, plugin, registration


def _load_copy(module, name):
    spec = importlib.util.spec_from_file_location(name, module.__file__)
    copy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(copy)
    return copy


def test_a_second_copy_of_the_estimator_module_keeps_the_first_and_the_metrics():
    plugin.register_all()
    first = core_algos.ADV_ESTIMATOR_REGISTRY["fgrpo"]
    copy = _load_copy(estimator, "fgrpo_estimator_second_copy")
    copy.register()  # no "already registered" error, and nothing replaced
    assert core_algos.ADV_ESTIMATOR_REGISTRY["fgrpo"] is first
    rewards, mask, index = make_batch([4, 4])
    fn = core_algos.get_adv_estimator_fn("fgrpo")
    # The trainer may have imported either copy: both captures see the call verl makes.
    for capture in (estimator.capture_results, copy.capture_results):
        with capture() as captured:
            fn(token_level_rewards=rewards, response_mask=mask, index=index, config=algo_config())
        assert len(captured) == 1 and captured[0][1].mu_hat.numel() == 2


def test_reloading_the_estimator_module_keeps_the_metrics():
    plugin.register_all()
    reloaded = importlib.reload(estimator)
    rewards, mask, index = make_batch([3, 5])
    with reloaded.capture_results() as captured:
        core_algos.get_adv_estimator_fn("fgrpo")(token_level_rewards=rewards, response_mask=mask, index=index,
                                                  config=algo_config())
    assert len(captured) == 1


def test_a_foreign_object_under_our_name_is_refused_naming_it():
    registry = {"fgrpo": len}
    with pytest.raises(ValueError, match=r"advantage estimator name 'fgrpo' is already registered to builtins.len"):
        registration.register(registry, "fgrpo", estimator.compute_fgrpo_outcome_advantage, "advantage estimator")
    assert registry["fgrpo"] is len
    with pytest.raises(TypeError, match="carries no fgrpo-verl mark"):
        registration.register({}, "x", lambda: None, "thing")


def test_each_step_fails_on_its_own_with_a_warning(monkeypatch, caplog):
    calls = []

    def broken():
        raise RuntimeError("registry moved")

    monkeypatch.setattr(plugin, "STEPS", (
        ("advantage estimator `fgrpo`", broken, None, False),
        ("policy loss `fgrpo`", lambda: calls.append("loss"), None, False),
    ))
    with caplog.at_level(logging.WARNING, logger="fgrpo_verl"):
        plugin.register_all(strict=False)
    assert calls == ["loss"]
    assert "fgrpo-verl: advantage estimator `fgrpo` not registered: RuntimeError: registry moved" in caplog.text
    with pytest.raises(RuntimeError, match="registry moved"):
        plugin.register_all(strict=True)


def test_unsupported_verl_warns_naming_the_supported_one_and_registers_partially(monkeypatch, caplog):
    # What `import verl` runs, on a verl that claims another release: which steps are scheduled or run.
    monkeypatch.setattr(verl, "__version__", "0.10.0")
    scheduled = []
    monkeypatch.setattr(import_hooks, "when_imported", lambda module, callback: scheduled.append(module))
    ran = []
    monkeypatch.setattr(plugin, "STEPS", tuple(
        (what, (lambda what=what: ran.append(what)), module, needs) for what, _, module, needs in plugin.STEPS
    ))
    with caplog.at_level(logging.WARNING, logger="fgrpo_verl"):
        plugin.install()
    assert "fgrpo-verl supports verl==0.9.1, found verl 0.10.0" in caplog.text
    assert "not registered: trainer modes fgrpo_sync" in caplog.text
    # estimator, loss (core_algos) and the validate_config check are scheduled; trainers, sessions, backend are not
    assert scheduled == [plugin.CORE_ALGOS, plugin.CORE_ALGOS, plugin.VERL_CONFIG]
    assert ran == []
    monkeypatch.setattr(verl, "__version__", "0.9.1")
    scheduled.clear()
    plugin.install()
    assert scheduled == [plugin.CORE_ALGOS, plugin.CORE_ALGOS, plugin.VERL_CONFIG, plugin.V1, plugin.V1]
    assert ran == ["execution backends listed in $VERL_USE_EXTERNAL_MODULES"]


def test_strict_registration_refuses_an_unsupported_verl(monkeypatch):
    monkeypatch.setattr(verl, "__version__", "0.10.0")
    with pytest.raises(RuntimeError, match=r"verl 0.10.0 is installed; fgrpo-verl supports exactly verl==0.9.1"):
        plugin.register_all(strict=True)


def test_import_hook_runs_after_the_module_and_leaves_its_loader(tmp_path, monkeypatch, caplog):
    (tmp_path / "fgrpo_hook_target.py").write_text("VALUE = 41\nVALUE += 1\n")
    (tmp_path / "fgrpo_hook_broken_cb.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    import_hooks.when_imported("fgrpo_hook_target", lambda m: seen.append(m.VALUE))
    assert "fgrpo_hook_target" in import_hooks.pending()

    def broken(_module):
        raise KeyError("boom")

    import_hooks.when_imported("fgrpo_hook_broken_cb", broken)
    module = importlib.import_module("fgrpo_hook_target")
    assert seen == [42]  # after the whole module ran
    assert type(module.__loader__).__name__ == "SourceFileLoader" and module.__spec__.loader is module.__loader__
    with caplog.at_level(logging.WARNING, logger="fgrpo_verl"):
        broken_mod = importlib.import_module("fgrpo_hook_broken_cb")  # a failing callback never breaks the import
    assert broken_mod.X == 1 and "KeyError: 'boom'" in caplog.text
    import_hooks.when_imported("fgrpo_hook_target", lambda m: seen.append("now"))  # already imported: runs at once
    assert seen == [42, "now"] and "fgrpo_hook_target" not in import_hooks.pending()
    for name in ("fgrpo_hook_target", "fgrpo_hook_broken_cb"):
        sys.modules.pop(name, None)


def test_settings_are_parsed_once_per_config_object(monkeypatch):
    from fgrpo_verl import focal

    parses = []
    original = focal.FocalSettings.from_config.__func__
    monkeypatch.setattr(focal.FocalSettings, "from_config",
                        classmethod(lambda cls, block, **kw: parses.append(1) or original(cls, block, **kw)))
    rewards, mask, index = make_batch([4, 4])
    cfg = algo_config(gamma=1.0)
    for _ in range(3):
        estimator.compute_fgrpo_outcome_advantage(rewards, mask, index=index, config=cfg)
    assert len(parses) == 1
    a, _ = estimator.compute_fgrpo_outcome_advantage(rewards, mask, index=index, config=algo_config(gamma=0.0))
    assert len(parses) == 2  # a new config object is read again
    b, _ = core_algos.get_adv_estimator_fn("grpo_vectorized")(token_level_rewards=rewards, response_mask=mask,
                                                              index=index)
    assert torch.equal(a, b)


def test_a_watched_package_reading_its_own_resources_at_import_still_imports(tmp_path, monkeypatch):
    # While the module runs, its __loader__ / __spec__.loader is the hook's wrapper: everything a loader offers
    # besides exec_module (resource reader, is_package, get_source) must still answer as the real loader's would.
    pkg = tmp_path / "fgrpo_hook_resource_pkg"
    pkg.mkdir()
    (pkg / "data.txt").write_text("hello")
    (pkg / "__init__.py").write_text(
        "import importlib.resources\n"
        "DATA = importlib.resources.files(__name__).joinpath('data.txt').read_text()\n"
        "IS_PACKAGE = __loader__.is_package(__name__)\n"
        "SOURCE = __loader__.get_source(__name__)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    import_hooks.when_imported(pkg.name, lambda m: seen.append(m.DATA))
    try:
        module = importlib.import_module(pkg.name)
        assert (module.DATA, module.IS_PACKAGE, "DATA =" in module.SOURCE) == ("hello", True, True)
        assert seen == ["hello"]
    finally:
        import_hooks.discard(pkg.name)
        sys.modules.pop(pkg.name, None)


def test_a_config_changed_in_place_is_read_again():
    # A gamma schedule that writes config.algorithm.fgrpo.gamma between steps: the next call must use the new
    # value (and a bad one must be refused), not the settings cached for the same config object.
    from fgrpo_verl.focal import FocalSettings, compute_focal_advantage

    rewards, mask, index = make_batch([4, 4, 3], seed=7)
    cfg = algo_config(gamma=0.5)
    estimator.compute_fgrpo_outcome_advantage(rewards, mask, index=index, config=cfg)
    cfg.fgrpo.gamma = 2.0
    cfg.norm_adv_by_std_in_grpo = False
    got, _ = estimator.compute_fgrpo_outcome_advantage(rewards, mask, index=index, config=cfg)
    want = compute_focal_advantage(rewards, mask, index, FocalSettings(2.0, 0.0, 0.0, "grpo"),
                                   norm_adv_by_std_in_grpo=False).advantages
    assert torch.equal(got, want)
    cfg.fgrpo.gamma = -1.0
    with pytest.raises(ValueError, match=r"algorithm.fgrpo.gamma=-1.0 is invalid"):
        estimator.compute_fgrpo_outcome_advantage(rewards, mask, index=index, config=cfg)


def test_a_module_loaded_by_a_legacy_loader_still_runs_its_callbacks(monkeypatch):
    # A finder after ours whose loader has only load_module (no exec_module): the callbacks must still run once
    # the module is loaded, not wait forever (a registration step that silently never happens).
    name = "fgrpo_hook_legacy_target"

    class LegacyLoader:
        def load_module(self, fullname):
            module = type(sys)(fullname)
            module.VALUE = 7
            sys.modules[fullname] = module
            return module

    class LegacyFinder:
        def find_spec(self, fullname, path, target=None):
            return importlib.machinery.ModuleSpec(fullname, LegacyLoader()) if fullname == name else None

    monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, LegacyFinder()])
    seen = []
    import_hooks.when_imported(name, lambda m: seen.append(m.VALUE))
    try:
        with pytest.warns(ImportWarning):  # Python's own deprecation of load_module-only loaders
            module = importlib.import_module(name)
        assert module.VALUE == 7 and seen == [7] and name not in import_hooks.pending()
        assert type(module.__loader__) is LegacyLoader
    finally:
        import_hooks.discard(name)
        sys.modules.pop(name, None)


def test_two_patches_on_one_module_both_run_once_and_a_raising_patch_fails_the_import(tmp_path, monkeypatch):
    """The backends' patches share the plugin's hook: two on one module run in order, once each (a second finder per
    patch used to make the finders ask each other forever: RecursionError); a repeated registration adds nothing; a
    patch registered with errors="raise" that fails is the import's error, not a WARNING."""
    name, bad = "fgrpo_hook_two_patches", "fgrpo_hook_raising_patch"
    (tmp_path / f"{name}.py").write_text("VALUE = 5\n")
    (tmp_path / f"{bad}.py").write_text("VALUE = 6\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []

    def first(module):
        seen.append(("first", module.VALUE))

    def second(module):
        seen.append(("second", module.VALUE))

    def failing(_module):
        raise RuntimeError("patch target changed")

    try:
        for patch in (first, second, first):
            import_hooks.when_imported(name, patch, errors="raise")
        assert import_hooks.pending()[name] == 2
        assert importlib.import_module(name).VALUE == 5
        assert seen == [("first", 5), ("second", 5)]
        import_hooks.when_imported(bad, failing, errors="raise")
        import_hooks.when_imported(bad, second, errors="raise")
        for _ in range(2):  # the failed import left nothing half-patched: a retry runs the patches again
            with pytest.raises(RuntimeError, match="patch target changed"):
                importlib.import_module(bad)
            assert bad not in sys.modules and import_hooks.pending()[bad] == 2
        import_hooks.discard(bad, [failing])  # only that callback: the other one still waits
        assert importlib.import_module(bad).VALUE == 6 and seen[-1] == ("second", 6)
        with pytest.raises(ValueError, match=r"errors must be one of \('log', 'raise'\), got 'ignore'"):
            import_hooks.when_imported(name, first, errors="ignore")
    finally:
        for module in (name, bad):
            import_hooks.discard(module)
            sys.modules.pop(module, None)


def test_a_namespace_package_is_not_hooked_and_says_so(tmp_path, monkeypatch, caplog):
    # Python gives a namespace package's spec no loader to wrap (verl's watched modules all have files): the steps
    # waiting for one cannot run, which must be a WARNING naming it, not a silent wait.
    (tmp_path / "fgrpo_hook_namespace_pkg").mkdir()  # no __init__.py
    monkeypatch.syspath_prepend(str(tmp_path))
    import_hooks.when_imported("fgrpo_hook_namespace_pkg", lambda m: None)
    try:
        with caplog.at_level(logging.WARNING, logger="fgrpo_verl"):
            importlib.import_module("fgrpo_hook_namespace_pkg")
        assert "fgrpo_hook_namespace_pkg has no loader to hook; 1 registration step(s)" in caplog.text
    finally:
        import_hooks.discard("fgrpo_hook_namespace_pkg")
        sys.modules.pop("fgrpo_hook_namespace_pkg", None)


def test_another_plugins_delegating_finder_ahead_of_ours_does_not_recurse(tmp_path, monkeypatch):
    # Another plugin built the same way (a finder that asks every other finder for the real spec and wraps it),
    # inserted ahead of ours: each asks the other, which must not recurse forever; both post-import steps run.
    name = "fgrpo_hook_two_finders"
    (tmp_path / f"{name}.py").write_text("VALUE = 3\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []

    class OtherPluginFinder:
        def find_spec(self, fullname, path, target=None):
            if fullname != name:
                return None
            for finder in sys.meta_path:
                spec = None if finder is self else finder.find_spec(fullname, path, target)
                if spec is not None:
                    seen.append("other")
                    return spec
            return None

    import_hooks.when_imported(name, lambda m: seen.append(m.VALUE))
    monkeypatch.setattr(sys, "meta_path", [OtherPluginFinder(), *sys.meta_path])
    try:
        assert importlib.import_module(name).VALUE == 3
        assert "other" in seen and seen.count(3) == 1  # its finder answered, our step ran once
    finally:
        import_hooks.discard(name)
        sys.modules.pop(name, None)


def test_importing_the_trainer_module_first_still_registers_the_trainer_modes():
    """A script that imports fgrpo_verl.integration.trainer before anything else imports verl's v1 stack from inside it; the
    plugin's hook then fires while fgrpo_verl.integration.trainer is half-built. It used to log "not registered: partially
    initialized module" and leave `fgrpo_sync` unknown to verl; the module now registers when complete."""
    import subprocess
    import sys

    script = (
        "import fgrpo_verl.integration.trainer\n"
        "from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY\n"
        "print(sorted(name for name in TRAINER_REGISTRY if name.startswith('fgrpo_')))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "['fgrpo_colocate_async', 'fgrpo_separate_async', 'fgrpo_sync']"
    assert "not registered" not in out.stderr, out.stderr[-3000:]


def test_trains_driver_leaves_the_trainer_stack_to_the_taskrunner_which_registers_strictly():
    """``train``'s driver registers what validation reads and never imports verl's v1 trainer stack (and the vLLM
    import it pulls in). Where that stack is imported with ``FGRPO_VERL_STRICT_REGISTRATION=1`` (what ``train``
    puts in the run's Ray environment), a trainer mode another plugin registered first fails the import, naming
    both, instead of leaving the other plugin's trainer to run behind a WARNING."""
    import subprocess
    import sys

    script = (
        "import os, sys\n"
        "os.environ['FGRPO_VERL_STRICT_REGISTRATION'] = '1'\n"
        "from fgrpo_verl import import_hooks\n"
        "class Foreign: pass\n"
        "def other_plugin(_module):\n"
        "    from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY\n"
        "    TRAINER_REGISTRY['fgrpo_sync'] = Foreign\n"
        "import_hooks.when_imported('verl.trainer.ppo.v1', other_plugin)\n"
        "from fgrpo_verl.cli.train import prepare\n"
        "prepare(['algo=grpo', 'backend=cpu'])\n"
        "from verl.trainer.ppo.core_algos import get_adv_estimator_fn\n"
        "print('driver', get_adv_estimator_fn('fgrpo').__name__, 'verl.trainer.ppo.v1' in sys.modules,"
        " 'vllm' in sys.modules)\n"
        "try:\n"
        "    import verl.trainer.ppo.v1\n"
        "except ValueError as exc:\n"
        "    print('refused', exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    assert lines[-2] == "driver compute_fgrpo_outcome_advantage False False", out.stdout
    assert lines[-1].startswith("refused trainer mode name 'fgrpo_sync' is already registered to __main__.Foreign"), \
        out.stdout
