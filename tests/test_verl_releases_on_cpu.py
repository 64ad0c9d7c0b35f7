"""The core on every verl release fgrpo-verl supports, through that release's own code (tests/verl_release_probe.py):
the ``fgrpo`` estimator through its ``compute_advantage`` (γ = 0 bit for bit its ``grpo_vectorized``, γ = 0.5 the
paper's eqs. 11-13 on its base advantage), the ``fgrpo`` loss through its ``get_policy_loss_fn`` (the base loss and
gradient bit for bit, plus ``actor/fgrpo/*``), the config check in its ``validate_config``; registration as a user
gets it there (0.8.0: ``VERL_USE_EXTERNAL_MODULES``; 0.9.x: the entry point); on the releases without the rest,
``train``, ``launch``, ``doctor`` and the CPU backend refuse in one line. The releases other than the venv's are
``make verl-releases`` (``.verl-releases/<version>``, verl's files only)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fgrpo_verl import verl_compat

REPO = Path(__file__).resolve().parent.parent
PROBE = Path(__file__).resolve().parent / "verl_release_probe.py"


def _env(version: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VERL_", "FGRPO_VERL"))}
    if version != verl_compat.FULL:
        env["PYTHONPATH"] = os.pathsep.join([str(REPO / ".verl-releases" / version), env.get("PYTHONPATH", "")])
    registration = verl_compat.FEATURES["registration"][verl_compat.RELEASES.index(version)]
    if registration.startswith("VERL_USE_EXTERNAL_MODULES"):  # a release that loads no entry points
        env["VERL_USE_EXTERNAL_MODULES"] = verl_compat.PLUGIN_MODULE
    return env


@pytest.fixture(scope="module")
def probes():
    """One probe process per release, side by side; release -> (returncode, its JSON or its stderr)."""
    started = {}
    for version in verl_compat.RELEASES:
        if version != verl_compat.FULL and not (REPO / ".verl-releases" / version / "verl").is_dir():
            pytest.fail(f"verl {version} is not in .verl-releases/: run `make verl-releases` (make test does)")
        started[version] = subprocess.Popen([sys.executable, str(PROBE)], env=_env(version), stdout=subprocess.PIPE,
                                            stderr=subprocess.PIPE, text=True, cwd=REPO)
    out = {}
    for version, proc in started.items():
        stdout, stderr = proc.communicate(timeout=600)
        lines = [line for line in stdout.splitlines() if line.startswith("PROBE ")]
        out[version] = (proc.returncode, json.loads(lines[-1][6:]) if lines else stderr[-3000:])
    return out


@pytest.fixture(params=verl_compat.RELEASES)
def probe(request, probes):
    code, result = probes[request.param]
    assert code == 0, result
    assert result["version"] == request.param
    return result


def test_the_estimator_and_the_loss_register_and_match_the_release(probe):
    assert probe["registered"] == [True, True]
    adv = probe["advantages"]
    assert adv["base"] == "grpo_vectorized" and adv["gamma0_bitwise"] is True
    assert adv["gamma_half_acts"] and adv["gamma_half_max_diff"] < 1e-6
    assert probe["loss"]["bitwise"] is True
    assert "actor/fgrpo/adv_pos_share" in probe["loss"]["metrics"]


def test_the_config_check_runs_in_the_releases_validate_config(probe):
    assert probe["config"]["missing gamma"].startswith("ValueError: algorithm.fgrpo is missing: add +algorithm.fgrpo.gamma")
    assert probe["config"]["misspelt key"].startswith("ValueError: algorithm.fgrpo has unknown key(s) gama; valid keys: gamma")


def test_doctor_says_what_the_release_gets(probe):
    assert probe["summary"] == verl_compat.summary(probe["version"])
    if "refusals" not in probe:
        return
    refusals = probe["refusals"]
    needs = f"this command needs verl=={verl_compat.FULL}; this environment has verl {probe['version']}"
    for command in ("train", "launch", "doctor", "report"):
        done = refusals[command]
        (line,) = done["stderr"].splitlines()
        assert done["code"] == 1 and line.startswith(f"fgrpo-verl {command}: error: {needs}"), line
    assert refusals["doctor"]["stdout"].splitlines()[1].strip() == verl_compat.summary(probe["version"])
    assert refusals["cpu backend"].startswith(f"RuntimeError: backend=cpu (fgrpo_verl.backends.cpu) needs verl=={verl_compat.FULL}")


def test_installing_fgrpo_verl_keeps_the_verl_a_user_has(tmp_path):
    """pip's own resolver, offline, in an environment that holds verl 0.9.0 (and everything else of this venv): an
    editable install of this checkout adds fgrpo-verl and replaces no verl. (0.8.0 wants numpy < 2, which this
    venv's verl 0.9.1 stack does not have, so pip cannot be asked about it offline here.)"""
    version = "0.9.0"
    release = REPO / ".verl-releases" / version
    if not (release / "verl").is_dir():
        pytest.fail(f"verl {version} is not in .verl-releases/: run `make verl-releases` (make test does)")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    purelib = next((venv / "lib").glob("python*/site-packages"))
    # the user's verl first, then the packages this venv has (pip itself included)
    packages = [p for p in sys.path if p.endswith("site-packages")]
    (purelib / "user_env.pth").write_text("\n".join([str(release), *packages]) + "\n")
    done = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--dry-run", "--no-index",
                           "--no-build-isolation", "--quiet", "--report", "-", "-e", str(REPO)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert [item["metadata"]["name"] for item in report["install"]] == ["fgrpo-verl"], report["install"]
