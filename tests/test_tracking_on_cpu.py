"""W&B conventions: run names, deterministic resume-safe run ids, env/overrides, offline runs, no secrets."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fgrpo_verl.job import tracking

REPO = Path(__file__).resolve().parents[1]


def test_run_name_and_tags():
    assert tracking.run_name("fgrpo", 0.5, 8, "Qwen/Qwen2.5-7B", 1) == "fgrpo-g0.5-n8-Qwen2.5-7B-s1"
    assert tracking.run_name("fcispo", 1.0, 16, "/ckpt/Qwen3-4B-Base/", 0) == "fcispo-g1-n16-Qwen3-4B-Base-s0"
    assert tracking.run_name("grpo", 0, 8, "models/my model@v2", 3) == "grpo-g0-n8-my-model-v2-s3"
    assert tracking.run_tags("fdapo", 2.0, 4) == ["algo:fdapo", "gamma:2", "n:4"]


@pytest.mark.parametrize(
    "kwargs,key",
    [
        (dict(algo="", gamma=0.5, n=8, model="m", seed=0), "algo"),
        (dict(algo="a b", gamma=0.5, n=8, model="m", seed=0), "algo"),
        (dict(algo="a", gamma=-1, n=8, model="m", seed=0), "gamma"),
        (dict(algo="a", gamma=float("inf"), n=8, model="m", seed=0), "gamma"),
        (dict(algo="a", gamma=0.5, n=0, model="m", seed=0), "n="),
        (dict(algo="a", gamma=0.5, n=8.0, model="m", seed=0), "n="),
        (dict(algo="a", gamma=0.5, n=8, model="/", seed=0), "model"),
        (dict(algo="a", gamma=0.5, n=8, model="m", seed=-1), "seed"),
    ],
)
def test_bad_run_name_inputs(kwargs, key):
    with pytest.raises(ValueError, match=key):
        tracking.run_name(**kwargs)


@pytest.mark.parametrize(
    "base,low,high,gamma,label",
    [
        ("vanilla", 0.2, 0.2, 0.0, "grpo"),
        ("vanilla", 0.2, 0.2, 0.5, "fgrpo"),
        ("vanilla", 0.2, 0.28, 0.0, "dapo"),
        ("vanilla", 0.2, 0.28, 2.0, "fdapo"),
        ("cispo", 1.0, 5.0, 0.0, "cispo"),
        ("cispo", 1.0, 5.0, 1.0, "fcispo"),
        ("gspo", 0.2, 0.2, 1.0, "fgspo"),
    ],
)
def test_algo_label_from_base_loss_clipping_and_gamma(base, low, high, gamma, label):
    assert tracking.algo_label(base, low, high, gamma) == label


def test_algo_label_rejects_bad_input():
    with pytest.raises(ValueError, match="base_loss_mode"):
        tracking.algo_label("", 0.2, 0.2, 0.5)
    with pytest.raises(ValueError, match="gamma"):
        tracking.algo_label("vanilla", 0.2, 0.2, -0.5)


def test_config_run_name_reads_the_composed_config():
    from fgrpo_verl.config.compose import compose

    cfg = compose(["algo=dapo", "base_model=qwen3_4b_base", "algorithm.fgrpo.gamma=0", "actor_rollout_ref.rollout.n=16"])
    seed = cfg.actor_rollout_ref.actor.data_loader_seed  # data.seed is unset: verl's data-loader seed
    assert tracking.config_run_name(cfg) == f"dapo-g0-n16-Qwen3-4B-Base-s{seed}"
    assert tracking.config_run_name(cfg, "low_lr") == f"dapo-g0-n16-Qwen3-4B-Base-s{seed}-low_lr"
    assert tracking.config_run_tags(cfg) == ["algo:dapo", "gamma:0", "n:16"]
    cfg = compose(["algo=cispo", "base_model=qwen25_7b", "algorithm.fgrpo.gamma=0.5", "data.seed=7"])
    assert tracking.config_run_name(cfg) == "fcispo-g0.5-n8-Qwen2.5-7B-s7"
    # without fgrpo's loss mode the label comes from verl's own loss_mode
    cfg = compose(["algo=grpo", "base_model=qwen25_7b", "actor_rollout_ref.actor.policy_loss.loss_mode=vanilla"])
    assert tracking.config_algo(cfg) == "fgrpo"


def test_run_id_is_a_deterministic_function_of_the_experiment():
    rid = tracking.run_id("proj", "fgrpo-g0.5-n8-M-s1")
    assert rid == tracking.run_id("proj", "fgrpo-g0.5-n8-M-s1")
    assert len(rid) == 32 and all(ch in "0123456789abcdef" for ch in rid)
    assert rid != tracking.run_id("proj", "fgrpo-g0.5-n8-M-s2")
    assert rid != tracking.run_id("proj2", "fgrpo-g0.5-n8-M-s1")
    # and across processes (a requeued job is a new process): the CLI computes the same id
    out = _cli(["--project", "proj", "--algo", "fgrpo", "--gamma", "0.5", "--n", "8", "--model", "x/M", "--seed", "1"])
    assert f"export WANDB_RUN_ID={rid}" in out.splitlines()


def test_run_id_separates_runs_of_one_config_in_two_checkpoint_dirs():
    """Two users (or two launch directories) with the same config: same experiment name, two checkpoint dirs,
    two W&B runs. The same dir spelled with a trailing slash or a `..` is the same run."""
    alice = tracking.run_id("proj", "fgrpo-g1-n8-M-s0-1a2b3c4d", "/home/alice/exp/checkpoints/proj/x")
    bob = tracking.run_id("proj", "fgrpo-g1-n8-M-s0-1a2b3c4d", "/home/bob/exp/checkpoints/proj/x")
    assert alice != bob and alice != tracking.run_id("proj", "fgrpo-g1-n8-M-s0-1a2b3c4d")
    assert alice == tracking.run_id("proj", "fgrpo-g1-n8-M-s0-1a2b3c4d", "/home/alice/exp/../exp/checkpoints/proj/x/")
    for bad in ("checkpoints/proj/x", "", 3):
        with pytest.raises(ValueError, match="checkpoint_dir=.*absolute path"):
            tracking.run_id("proj", "e", bad)


def test_env_and_overrides():
    env = tracking.wandb_env("p", "e", group="sweep-1", tags=["algo:fgrpo", "gamma:1"], mode="offline")
    assert env == {
        "WANDB_RUN_ID": tracking.run_id("p", "e"),
        "WANDB_RESUME": "allow",
        "WANDB_RUN_GROUP": "sweep-1",
        "WANDB_TAGS": "algo:fgrpo,gamma:1",
        "WANDB_MODE": "offline",
    }
    overrides = tracking.ray_env_overrides(env)
    assert "++ray_kwargs.ray_init.runtime_env.env_vars.WANDB_TAGS='algo:fgrpo,gamma:1'" in overrides
    from fgrpo_verl.config.compose import compose

    cfg = compose(overrides + tracking.experiment_overrides("p", "e"))
    assert dict(cfg.ray_kwargs.ray_init.runtime_env.env_vars) == env
    assert cfg.trainer.experiment_name == "e" and cfg.trainer.project_name == "p"
    with pytest.raises(ValueError, match="mode"):
        tracking.wandb_env("p", "e", mode="cloud")
    with pytest.raises(ValueError, match="tag"):
        tracking.wandb_env("p", "e", tags=["a,b"])
    with pytest.raises(ValueError, match="WANDB_API_KEY"):
        tracking.ray_env_overrides({"WANDB_API_KEY": "x"})


def _cli(args, extra_env=None):
    env = {**os.environ, "PYTHONPATH": str(REPO), **(extra_env or {})}
    done = subprocess.run([sys.executable, "-m", "fgrpo_verl", "wandb-env", *args], env=env, capture_output=True,
                          text=True, check=True, timeout=60)
    return done.stdout + done.stderr


def test_cli_never_echoes_the_api_key():
    secret = "0123456789abcdef-not-a-real-key"
    for fmt in ("shell", "hydra"):
        out = _cli(["--project", "p", "--algo", "a", "--gamma", "1", "--n", "2", "--model", "m", "--seed", "0",
                    "--format", fmt], {"WANDB_API_KEY": secret})
        assert secret not in out and "API_KEY" not in out


def test_offline_run_resumes_under_the_same_id(tmp_path):
    """Two processes with the same experiment (a requeue) open W&B runs with one id, group and tags, offline."""
    env_vars = tracking.wandb_env("proj", "fgrpo-g1-n2-m-s0", group="sweep", tags=tracking.run_tags("fgrpo", 1, 2),
                                  mode="offline")
    script = (
        "import json, wandb\n"
        "run = wandb.init(project='proj', name='fgrpo-g1-n2-m-s0')\n"  # how verl's Tracking calls it
        "run.log({'fgrpo/g_mean': 0.5}, step=1)\n"
        "print(json.dumps({'id': run.id, 'group': run.group, 'tags': list(run.tags), 'dir': run.dir}))\n"
        "run.finish()\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(env_vars, WANDB_DIR=str(tmp_path), WANDB_SILENT="true")
    runs = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    assert runs[0]["id"] == runs[1]["id"] == env_vars["WANDB_RUN_ID"]
    assert runs[0]["group"] == "sweep" and sorted(runs[0]["tags"]) == ["algo:fgrpo", "gamma:1", "n:2"]
    offline = sorted((tmp_path / "wandb").glob(f"offline-run-*-{env_vars['WANDB_RUN_ID']}"))
    assert len(offline) >= 1


def test_commit_wandb_row_only_acts_on_a_live_wandb_run():
    """Console-only loggers, a step verl has not logged (None) and a finished W&B run are left alone; a live run
    gets exactly log({}, step=k, commit=True)."""
    import types

    calls = []
    live = types.SimpleNamespace(run=types.SimpleNamespace(log=lambda *a, **k: calls.append((a, k))))
    finished = types.SimpleNamespace(run=None)
    assert not tracking.commit_wandb_row(None, 3)
    assert not tracking.commit_wandb_row(types.SimpleNamespace(logger={"console": object()}), 3)
    assert not tracking.commit_wandb_row(types.SimpleNamespace(logger={"wandb": live}), None)
    assert not tracking.commit_wandb_row(types.SimpleNamespace(logger={"wandb": finished}), 3)
    assert calls == []
    assert tracking.commit_wandb_row(types.SimpleNamespace(logger={"wandb": live}), 3)
    assert calls == [(({},), {"step": 3, "commit": True})]


@pytest.mark.parametrize("bad", ["my/run", "a:b", "a;b", "a,b", "a#b", "a?b", "it's", " lead", "trail ", "", "   ",
                                 "tab\there", "nul\x00"])
def test_an_explicit_run_id_wandb_would_refuse_is_refused_at_launch(bad):
    """wandb.init refuses these ids (its settings validator) inside the job, after the queue wait and the Ray
    cluster start, and again on every requeue; the launcher and the plain sbatch path refuse them up front."""
    with pytest.raises(ValueError, match=r"WANDB_RUN_ID=.* is invalid: W&B run ids"):
        tracking.check_run_id(bad)


def test_explicit_run_ids_wandb_accepts_pass():
    for good in ("my-run-1", "abc_DEF.9", "x[1]*", "ünï"):
        assert tracking.check_run_id(good) == good
        # the same verdict as W&B's own validator
        from wandb.sdk.wandb_settings import Settings

        assert Settings(run_id=good).run_id == good
