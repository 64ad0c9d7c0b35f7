"""The entry point is inert until selected: `import verl` with fgrpo-verl installed, compared with the same import
with the entry point switched off, in fresh processes; and a platform plugin loaded after ours still wins."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

PROBE = textwrap.dedent(
    """
    import json, os, sys
    before = dict(os.environ)
    sys.path.extend(sys.argv[1:])  # after site-packages: such distributions' entry points load after ours
    import verl
    from importlib.metadata import entry_points
    from verl.plugin.platform import platform_manager
    resolved_at_import = platform_manager._current_platform is not None
    out = {
        "modules": sorted(sys.modules),
        "env_changed": sorted(k for k in set(before) | set(os.environ) if before.get(k) != os.environ.get(k)),
        "resolved_at_import": resolved_at_import,
        "plugins": [ep.name for ep in entry_points(group="verl.plugins")],
    }
    out["platform"] = platform_manager.get_platform().device_name
    print("PROBE " + json.dumps(out))
    """
)


def _probe(plugins: str, *extra_path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VERL_", "FGRPO_VERL"))}
    env["VERL_USE_EXTERNAL_PLUGINS"] = plugins
    out = subprocess.run([sys.executable, "-c", PROBE, *map(str, extra_path)], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("PROBE ")][-1]
    return json.loads(line[len("PROBE "):])


@pytest.fixture(scope="module")
def toy_platform_dist(tmp_path_factory):
    """A real second distribution: a package plus a .dist-info with its own `verl.plugins` entry point."""
    root = tmp_path_factory.mktemp("toy_dist")
    (root / "toy_platform_plugin.py").write_text(textwrap.dedent(
        """
        from verl.plugin.platform.platform_cuda import PlatformCUDA
        from verl.plugin.platform.platform_manager import PlatformRegistry

        @PlatformRegistry.register(platform="toy")
        class PlatformToy(PlatformCUDA):
            device_name = "toy"
            vendor_name = "toy"

            def is_platform_available(self, use_smi_check=True):
                return True
        """
    ))
    info = root / "toy_platform_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-platform-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[verl.plugins]\ntoy = toy_platform_plugin\n")
    return root


def test_import_verl_is_inert_and_a_platform_plugin_loaded_after_ours_is_detected(toy_platform_dist):
    # Both processes have a toy accelerator-platform plugin installed as a second distribution; one loads only
    # it, the other every entry point (ours first, then the toy's: the order the issue found broken).
    ours, alone = _probe("auto", toy_platform_dist), _probe("toy", toy_platform_dist)
    plugins = ours["plugins"]
    assert plugins.index("fgrpo") < plugins.index("toy"), plugins
    # Only our small modules (the plugin, verl_compat, validation, its config reader, backends) and the post-import
    # hook library's own (wrapt, pure Python plus one C extension, no dependency) join verl's.
    extra = {m for m in set(ours["modules"]) - set(alone["modules"]) if m != "wrapt" and not m.startswith("wrapt.")}
    assert extra and all(m == "fgrpo_verl" or m.startswith("fgrpo_verl.") for m in extra), sorted(extra)
    assert len(extra) <= 8, sorted(extra)
    for heavy in ("verl.trainer.ppo.v1", "verl.trainer.ppo.core_algos", "fgrpo_verl.integration.trainer", "fgrpo_verl.integration.estimator"):
        assert heavy not in ours["modules"]
    dist_ours = {m for m in ours["modules"] if m.startswith("torch.distributed")}
    dist_alone = {m for m in alone["modules"] if m.startswith("torch.distributed")}
    assert dist_ours <= dist_alone, sorted(dist_ours - dist_alone)
    # No environment variable changed beyond what verl itself changes (TORCH_CUDA_ARCH_LIST in particular).
    assert ours["env_changed"] == alone["env_changed"]
    assert "TORCH_CUDA_ARCH_LIST" not in ours["env_changed"]
    # verl's platform is still unresolved after the import, and auto-detection finds the toy platform in both.
    assert ours["resolved_at_import"] is False and alone["resolved_at_import"] is False
    assert alone["platform"] == "toy" and ours["platform"] == "toy"
