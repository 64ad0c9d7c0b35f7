"""The plugin works from a built wheel, not only from this checkout: configs ship inside, entry points resolve."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# what a build neither needs nor should see: the venv, git, earlier build outputs, run outputs
IGNORED = (".venv", ".git", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".hypothesis", "outputs",
           "wandb", "runs")


@pytest.fixture(scope="module")
def wheel_install(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    # built from a copy of the source: a build in the checkout rewrites its build/ and fgrpo_verl.egg-info/ (whose
    # entry points every process started in the checkout reads) while other test files run beside this one
    src = out / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(*IGNORED))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out),
                    str(src)], check=True, timeout=600)
    wheel = next(out.glob("fgrpo_verl-*.whl"))
    target = out / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
                   check=True, timeout=600)
    return wheel, target


def test_wheel_ships_configs_and_entry_points(wheel_install):
    wheel, _ = wheel_install
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        entry_points = zf.read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    shipped = {n.split("fgrpo_verl/hydra_configs/", 1)[1] for n in names if n.startswith("fgrpo_verl/hydra_configs/")}
    in_repo = {str(p.relative_to(ROOT / "hydra_configs")) for p in (ROOT / "hydra_configs").rglob("*.yaml")}
    assert in_repo and shipped == in_repo
    assert "[verl.plugins]\nfgrpo = fgrpo_verl.integration.plugin" in entry_points
    assert "fgrpo-verl = fgrpo_verl.cli:main" in entry_points


def test_the_gpu_extra_installs_without_building_from_source(wheel_install):
    """`pip install "fgrpo-verl[gpu]"` must not need a source build under pip's build isolation: flash-attn's
    build imports torch, which the isolated build environment does not have. It is installed in a second step
    with --no-build-isolation (docs/slurm.md §1), so the extra does not list it."""
    wheel, _ = wheel_install
    with zipfile.ZipFile(wheel) as zf:
        metadata = zf.read(next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    gpu = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:") and 'extra == "gpu"' in line]
    assert any(line.startswith("Requires-Dist: vllm==0.24.0") for line in gpu), gpu
    assert not [line for line in gpu if "flash-attn" in line or "flash_attn" in line], gpu
    docs = (ROOT / "docs" / "slurm.md").read_text()
    assert "pip install flash-attn==2.8.3 --no-build-isolation" in docs


def test_installed_wheel_registers_and_composes(wheel_install, tmp_path):
    _, target = wheel_install
    code = (
        "import fgrpo_verl, fgrpo_verl.config.paths as p, verl\n"
        "from verl.trainer.ppo.core_algos import get_adv_estimator_fn\n"
        "from fgrpo_verl.config.compose import compose\n"
        "from fgrpo_verl.integration.validation import validate\n"
        "cfg = compose(['algorithm.fgrpo.gamma=1.0']); validate(cfg)\n"
        "print(fgrpo_verl.__file__); print(p.config_dir()); print(get_adv_estimator_fn('fgrpo').__module__)\n"
        "print(cfg.algorithm.fgrpo.gamma)\n"
        "from fgrpo_verl.evaluation import paper_numbers as pn; print(len(pn.cells()), len(pn.curves()))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("VERL_USE_EXTERNAL")}
    env["PYTHONPATH"] = str(target)
    # run from an empty directory so the checkout is not importable by accident
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    module_file, cfg_dir, est_module, gamma, paper = out.stdout.strip().splitlines()[-5:]
    assert Path(module_file).is_relative_to(target)
    assert Path(cfg_dir) == target / "fgrpo_verl" / "hydra_configs"
    assert est_module == "fgrpo_verl.integration.estimator"
    assert gamma == "1.0"
    assert paper == "391 162"  # the paper's tables ship as package data (evaluation/paper_tables.md)


def test_installed_entry_point_runs_prepare_benchmarks(wheel_install, tmp_path):
    """The README's `fgrpo-verl prepare-benchmarks` works from the installed console script alone (no checkout's
    scripts/): with a stand-in `datasets` (the hub is not reachable here) it writes the benchmark files."""
    _, target = wheel_install
    script = target / "bin" / "fgrpo-verl"
    assert script.is_file(), sorted(p.name for p in (target / "bin").iterdir()) if (target / "bin").is_dir() else target
    standin = tmp_path / "standin"
    standin.mkdir()
    (standin / "datasets.py").write_text(
        "def load_dataset(repo, config=None, split=None, data_files=None):\n"
        "    assert repo == 'HuggingFaceH4/MATH-500', repo\n"
        "    return [{'problem': 'What is 1 + 1?', 'answer': '2', 'unique_id': 'a'}]\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("VERL_USE_EXTERNAL")}
    env["PYTHONPATH"] = os.pathsep.join([str(standin), str(target)])
    work = tmp_path / "work"
    work.mkdir()
    helped = subprocess.run([sys.executable, str(script), "prepare-benchmarks", "--help"], cwd=work, env=env,
                            capture_output=True, text=True, timeout=300)
    assert helped.returncode == 0, helped.stderr[-3000:]
    assert all(flag in helped.stdout for flag in ("--out", "--only", "--source", "--verl-parquet")), helped.stdout
    done = subprocess.run([sys.executable, str(script), "prepare-benchmarks", "--out", "data/benchmarks", "--only",
                           "MATH500", "--verl-parquet"], cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "--bench MATH500=data/benchmarks/MATH500.jsonl"
    assert (work / "data" / "benchmarks" / "MATH500.jsonl").is_file()
    assert (work / "data" / "benchmarks" / "MATH500.parquet").is_file()
