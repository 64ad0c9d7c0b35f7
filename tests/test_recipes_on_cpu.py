"""Recipes: every run of every shipped recipe composes and passes verl's validate_config, with the F-GRPO paper's
settings (expected values below are the paper's, arXiv 2602.06717 §5.2-5.3 and Table 5, not read from our
configs), and `fgrpo-verl launch --dry-run` prints one complete sbatch script per run."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from fgrpo_verl.cli import main as cli_main
from fgrpo_verl.launch import plan_jobs
from fgrpo_verl.job import tracking
from fgrpo_verl.launch.recipe import load_recipe
from fgrpo_verl.config.paths import recipes_dir

# paper §5.3: clipping (eps_low, eps_high) and base policy loss per base algorithm; our configs run every one of
# them through the `fgrpo` loss mode (fgrpo_verl/integration/loss.py), which delegates to that base loss
PAPER_CLIP = {"grpo": (0.2, 0.2, "vanilla"), "dapo": (0.2, 0.28, "vanilla"), "cispo": (1.0, 5.0, "cispo")}


def _assert_policy_loss(cfg, algo: str) -> None:
    low, high, base = PAPER_CLIP[algo]
    actor = cfg.actor_rollout_ref.actor
    assert (actor.clip_ratio_low, actor.clip_ratio_high) == (low, high)
    assert (actor.policy_loss.loss_mode, actor.policy_loss.base_loss_mode) == ("fgrpo", base)
    assert actor.policy_loss._target_ == "fgrpo_verl.integration.loss.FocalPolicyLossConfig"


def _readable(experiment: str) -> str:
    """The run name without the launcher's ``-<8 hex digits of the config hash>`` (fgrpo_verl/job/identity.py)."""
    match = re.fullmatch(r"(.+)-([0-9a-f]{8})", experiment)
    assert match, f"{experiment!r} does not end in -<config hash>"
    return match.group(1)


def _expected_name(algo: str, gamma: float, n: int, model: str, cfg) -> str:
    # the W&B name: {algo}-g{gamma}-n{N}-{model}-s{seed}; F-prefixed algo when gamma > 0; seed = verl's data-loader seed
    label = ("f" if gamma > 0 else "") + algo
    return tracking.run_name(label, gamma, n, model, cfg.actor_rollout_ref.actor.data_loader_seed)
# paper §5.3: model id and max response length
PAPER_MODELS = {
    "qwen25_7b": ("Qwen/Qwen2.5-7B", 8192),
    "qwen3_4b_base": ("Qwen/Qwen3-4B-Base", 4096),
    "llama32_3b_instruct": ("meta-llama/Llama-3.2-3B-Instruct", 8192),
}
PAPER_GAMMAS = {0.0, 0.5, 1.0, 2.0}


def _plan(recipe: str, tmp_path: Path, only=None, overrides=()):
    return plan_jobs(recipe, only, list(overrides), tmp_path / "logs", tmp_path)


def _assert_llm_paper_settings(cfg) -> None:
    actor, rollout = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout
    optim = actor.optim
    assert cfg.algorithm.adv_estimator == "fgrpo"
    assert (optim.optimizer, optim.lr_scheduler_type, optim.lr_warmup_steps) == ("AdamW", "constant", 15)
    assert list(optim.betas) == [0.9, 0.999] and optim.weight_decay == 0.01 and optim.clip_grad == 1.0
    assert cfg.data.train_batch_size == 256 and actor.ppo_mini_batch_size == 64 and actor.ppo_epochs == 1
    assert (rollout.temperature, rollout.top_p, rollout.top_k) == (1.0, 1.0, -1)
    assert actor.loss_agg_mode == "token-mean"
    assert cfg.algorithm.norm_adv_by_std_in_grpo is True
    # math-verify 1/0 reward: a success is reward > 0.5
    assert cfg.reward.custom_reward_function.name == "math_verify_score"
    assert cfg.algorithm.fgrpo.success_threshold == 0.5
    assert cfg.data.max_prompt_length == 1024
    # the paper's 16 H100 as 2 x 8, and the sbatch allocation follows
    assert (cfg.trainer.nnodes, cfg.trainer.n_gpus_per_node) == (2, 8)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """The launch directory of the recipes planned once for this module (the tests below only read their jobs):
    one directory, as runs that two recipes share are one run when launched from the same place."""
    return tmp_path_factory.mktemp("recipes")


@pytest.fixture(scope="module")
def paper_main(workdir):
    return _plan("paper_main", workdir)


@pytest.fixture(scope="module")
def group_size(workdir):
    return _plan("group_size", workdir)


@pytest.fixture(scope="module")
def controls(workdir):
    return _plan("controls", workdir)


def test_paper_main_has_36_valid_runs_with_the_papers_settings(paper_main):
    recipe, jobs = paper_main
    assert len(jobs) == 36
    seen = set()
    for job in jobs:
        cfg = job.config
        model, algo, gamma = re.fullmatch(r"(\w+)-(grpo|dapo|cispo)-g(\dp\d)", job.run.name).groups()
        gamma = float(gamma.replace("p", "."))
        seen.add((model, algo, gamma))
        _assert_llm_paper_settings(cfg)
        _assert_policy_loss(cfg, algo)
        actor = cfg.actor_rollout_ref.actor
        assert actor.use_kl_loss is False and cfg.algorithm.use_kl_in_reward is False and actor.entropy_coeff == 0
        assert actor.optim.lr == 1e-6 and cfg.actor_rollout_ref.rollout.n == 8
        assert (cfg.actor_rollout_ref.model.path, cfg.data.max_response_length) == PAPER_MODELS[model]
        assert cfg.data.get("apply_chat_template_kwargs", {}).get("enable_thinking", False) == (model == "qwen3_4b_base")
        assert cfg.algorithm.fgrpo.gamma == gamma
        experiment = _expected_name(algo, gamma, 8, PAPER_MODELS[model][0], cfg)
        # the Slurm job name is the run identity, so --dependency=singleton holds a second job of the same run
        assert _readable(cfg.trainer.experiment_name) == experiment and job.job_name == cfg.trainer.experiment_name
        assert cfg.trainer.default_local_dir == f"checkpoints/fgrpo-paper/{job.job_name}"
        assert job.run.group == f"{model}-{algo}"
    assert seen == {(m, a, g) for m in PAPER_MODELS for a in PAPER_CLIP for g in PAPER_GAMMAS}


def test_paper_main_job_scripts_are_complete_and_requeue_safe(paper_main):
    _, jobs = paper_main
    ids = set()
    for job in jobs:
        text = job.text
        assert text.startswith("#!/bin/bash\n")
        for directive in (
            f'--job-name="{job.job_name}"',
            '--nodes="2"',
            '--ntasks-per-node="1"',
            '--gpus-per-node="8"',
            '--time="1-00:00:00"',
            '--signal="B:USR1@900"',
            '--dependency="singleton"',
            "--requeue",
            '--open-mode="append"',
        ):
            assert f"#SBATCH {directive}\n" in text
        assert '"$FGRPO_PYTHON" -m fgrpo_verl train \\\n    trainer.resume_mode=auto' in text
        for override in job.overrides:
            assert f"    {override} \\\n" in text
        assert '"trainer.nnodes=${SLURM_NNODES}"' in text and '"trainer.n_gpus_per_node=${FGRPO_GPUS_PER_NODE}"' in text
        experiment = job.config.trainer.experiment_name
        assert f"    trainer.experiment_name={experiment} \\\n" in text
        run_id = tracking.run_id("fgrpo-paper", experiment, os.path.abspath(job.checkpoint_dir))
        assert f"export WANDB_RUN_ID={run_id}\n" in text and "export WANDB_RESUME=allow\n" in text
        # W&B group = the sweep; the recipe's finer group is a tag next to algo/gamma/N
        assert "export WANDB_RUN_GROUP=paper_main\n" in text
        tags = tracking.config_run_tags(job.config) + [f"group:{job.run.group}"]
        assert f"export WANDB_TAGS={','.join(tags)}\n" in text and tags[0].startswith("algo:")
        assert "API_KEY" not in text and "RAY_AUTH_TOKEN=" not in text
        ids.add(run_id)
    assert len(ids) == 36


def test_group_size_recipe_is_grpo_n_sweep_plus_fgrpo_at_n8(group_size):
    _, jobs = group_size
    got = set()
    for job in jobs:
        cfg = job.config
        _assert_llm_paper_settings(cfg)
        assert cfg.actor_rollout_ref.model.path == "Qwen/Qwen2.5-7B"
        _assert_policy_loss(cfg, "grpo")
        n, gamma = cfg.actor_rollout_ref.rollout.n, cfg.algorithm.fgrpo.gamma
        assert _readable(cfg.trainer.experiment_name) == _expected_name("grpo", gamma, n, "Qwen/Qwen2.5-7B", cfg)
        got.add((n, gamma))
    assert len(jobs) == 6 and got == {(2, 0.0), (4, 0.0), (8, 0.0), (16, 0.0), (32, 0.0), (8, 0.5)}


def test_controls_recipe_is_low_lr_entropy_kl_and_ds_grpo(controls, paper_main):
    _, jobs = controls
    by_name = {job.run.name: job.config for job in jobs}
    assert set(by_name) == {"grpo-low_lr", "grpo-entropy", "grpo-kl", "ds-grpo", "grpo", "fgrpo-g0p5"}
    # Table 3's DS-GRPO row: GRPO's settings and PPO-clip loss, the ds_grpo estimator and loss over it
    ds = by_name.pop("ds-grpo")
    loss = ds.actor_rollout_ref.actor.policy_loss
    assert (ds.algorithm.adv_estimator, loss.loss_mode, loss.base_loss_mode) == ("ds_grpo", "ds_grpo", "vanilla")
    assert ds.algorithm.fgrpo.gamma == 0.0 and (loss.gamma_p, loss.gamma_n) == (1e-3, 1e-3)
    assert ds.actor_rollout_ref.actor.optim.lr == 1e-6 and ds.actor_rollout_ref.actor.entropy_coeff == 0
    assert _readable(ds.trainer.experiment_name) == tracking.run_name("ds_grpo", 0.0, 8, "Qwen/Qwen2.5-7B",
                                                                      ds.actor_rollout_ref.actor.data_loader_seed) + "-ds_grpo"
    # Table 3's F-GRPO row and its GRPO baseline are paper_main's runs: the same names, so trained once
    _, main = paper_main
    main_names = {job.run.name: job.job_name for job in main}
    controls_names = {job.run.name: job.job_name for job in jobs}
    assert controls_names["grpo"] == main_names["qwen25_7b-grpo-g0p0"]
    assert controls_names["fgrpo-g0p5"] == main_names["qwen25_7b-grpo-g0p5"]
    for name in ("grpo", "fgrpo-g0p5"):
        del by_name[name]
    for name, cfg in by_name.items():
        _assert_llm_paper_settings(cfg)
        _assert_policy_loss(cfg, "grpo")
        assert cfg.algorithm.fgrpo.gamma == 0.0 and cfg.actor_rollout_ref.rollout.n == 8
        # same algo/gamma/N/model/seed: the recipe's variant keeps checkpoint dirs and W&B runs apart
        base = _expected_name("grpo", 0.0, 8, "Qwen/Qwen2.5-7B", cfg)
        assert _readable(cfg.trainer.experiment_name) == f"{base}-{name.removeprefix('grpo-')}"
    assert by_name["grpo-low_lr"].actor_rollout_ref.actor.optim.lr == 6.8e-7
    assert by_name["grpo-entropy"].actor_rollout_ref.actor.entropy_coeff == 1e-3
    kl = by_name["grpo-kl"].actor_rollout_ref.actor
    assert kl.use_kl_loss is True and kl.kl_loss_coef == 1e-3
    for name in ("grpo-low_lr", "grpo-entropy"):
        assert by_name[name].actor_rollout_ref.actor.use_kl_loss is False


def test_maze_recipe_is_on_policy_n_by_gamma_sweep(tmp_path):
    _, jobs = _plan("maze", tmp_path)
    got = set()
    for job in jobs:
        cfg = job.config
        actor, rollout = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout
        # fully on-policy: one update per step (mini-batch = batch = 256 prompts), lr 1e-4, 20K steps
        assert cfg.data.train_batch_size == 256 and actor.ppo_mini_batch_size == 256 and actor.ppo_epochs == 1
        assert actor.optim.lr == 1e-4 and cfg.trainer.total_training_steps == 20000
        assert rollout.val_kwargs.n == 2048 and rollout.val_kwargs.temperature == 1.0 and rollout.val_kwargs.do_sample
        assert cfg.reward.custom_reward_function.path == "pkg://fgrpo_verl.tasks.maze.reward"
        assert actor.use_kl_loss is False and cfg.algorithm.use_kl_in_reward is False
        _assert_policy_loss(cfg, "grpo")
        assert _readable(cfg.trainer.experiment_name) == _expected_name(
            "grpo", cfg.algorithm.fgrpo.gamma, rollout.n, cfg.actor_rollout_ref.model.path, cfg
        )
        got.add((rollout.n, cfg.algorithm.fgrpo.gamma))
    assert len(jobs) == 18
    assert got == {(n, g) for n in (4, 8, 16, 32, 64, 128) for g in (0.0, 0.5, 1.0)}


def test_every_shipped_recipe_is_covered_above():
    assert sorted(p.stem for p in recipes_dir().glob("*.yaml")) == sorted(
        ["paper_main", "group_size", "controls", "maze", *EXTRA_RECIPES]
    )


# recipes tested elsewhere (the Slurm end-to-end tests)
EXTRA_RECIPES: list[str] = []


def test_launch_dry_run_prints_scripts_with_overrides_and_submits_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    # sbatch must not be called on a dry run
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))
    rc = cli_main(
        [
            "launch",
            "paper_main",
            "--dry-run", "--script-dir", "-",
            "--only",
            "qwen3_4b_base-cispo-g1p0",
            "llama32_3b_instruct-dapo-g0p0",
            "algorithm.fgrpo.gamma=0.7",
            "trainer.nnodes=4",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 3  # no data, models or benchmarks here: not ready
    # each run's training job and its evaluation jobs carry the run's name
    names = list(dict.fromkeys(re.findall(r'^#SBATCH --job-name="(.*)"$', out, re.M)))
    # command-line overrides reach every run, after the run's own (so they win), and size the allocation
    assert out.count("    algorithm.fgrpo.gamma=0.7 \\\n") == 2 and out.count('#SBATCH --nodes="4"\n') == 2
    # the run names follow the composed config, command-line gamma included; the job name is the run name
    assert re.findall(r"^    trainer.experiment_name=(.*) \\$", out, re.M) == names
    assert [_readable(n) for n in names] == ["fcispo-g0.7-n8-Qwen3-4B-Base-s42", "fdapo-g0.7-n8-Llama-3.2-3B-Instruct-s42"]
    assert "dry run, nothing submitted" in out
    assert not (tmp_path / "slurm_jobs").exists()


def test_launch_rejects_unknown_run_and_bad_override(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli_main(["launch", "controls", "--dry-run", "--only", "grpo-typo"]) == 2
    err = capsys.readouterr().err
    assert "no run named ['grpo-typo']" in err and "grpo-low_lr" in err
    assert cli_main(["launch", "controls", "--dry-run", "--only", "grpo-kl", "algorithm.fgrpo.gama=1"]) == 2
    assert "run grpo-kl: invalid config" in capsys.readouterr().err


@pytest.mark.parametrize(
    "body, message",
    [
        ("name: x\nproject: p\nruns: []\n", "r.yaml: runs must not be empty: a list, each a mapping"),
        ("name: x\nproject: p\nrunz: []\n", "r.yaml: runz: unknown key; valid keys: ['name', 'project'"),
        ("name: x\nproject: p\nruns:\n  - {name: a}\n  - {name: a}\n", "r.yaml: runs[1]: duplicate run name 'a'"),
        ("name: x\nproject: p\nenv: {WANDB_API_KEY: k}\nruns:\n  - {name: a}\n",
         "r.yaml: env.WANDB_API_KEY looks like a secret"),
        ("name: x y\nproject: p\nruns:\n  - {name: a}\n",
         "r.yaml: name must match ^[A-Za-z0-9][A-Za-z0-9_.-]*$ (letters, digits, '_', '.', '-'), got 'x y'"),
        ("name: x\nproject: p\nresources: {gpus: 8}\nruns:\n  - {name: a}\n",
         "r.yaml: resources.gpus: unknown key; valid keys: ['time'"),
        ("name: x\nproject: p\nresources: {cpus_per_task: 0}\nruns:\n  - {name: a}\n",
         "r.yaml: resources.cpus_per_task must be >= 1, got 0"),
        ("name: x\nproject: p\nruns:\n  - {name: a, overrides: algo=grpo}\n",
         "r.yaml: runs[0].overrides: expected a list, each a string, got 'algo=grpo'"),
        ("name: x\nproject: p\ncommon: [' ']\nruns:\n  - {name: a}\n",
         "r.yaml: common[0] must match \\S (a Hydra override such as key=value), got ' '"),
    ],
)
def test_bad_recipe_is_rejected_naming_the_key(tmp_path, body, message):
    path = tmp_path / "r.yaml"
    path.write_text(body)
    with pytest.raises(ValueError) as err:
        load_recipe(str(path))
    assert message in str(err.value)


def test_runs_with_the_same_config_are_rejected_and_a_variant_names_a_different_one(tmp_path):
    body = "name: x\nproject: p\ncommon: [algo=grpo, base_model=qwen25_7b]\nruns:\n  - {name: a}\n  - {name: b%s}\n"
    (tmp_path / "clash.yaml").write_text(body % "")
    with pytest.raises(ValueError, match=r"runs 'a' and 'b' have the same config \(run 'fgrpo-g0.5-n8-Qwen2.5-7B-s42-"):
        _plan(str(tmp_path / "clash.yaml"), tmp_path)
    # a variant label alone does not make another experiment: the config is the identity
    (tmp_path / "label.yaml").write_text(body % ", variant: v2")
    with pytest.raises(ValueError, match="have the same config"):
        _plan(str(tmp_path / "label.yaml"), tmp_path)
    (tmp_path / "variant.yaml").write_text(body % ", variant: v2, overrides: [actor_rollout_ref.actor.optim.lr=2e-6]")
    _, jobs = _plan(str(tmp_path / "variant.yaml"), tmp_path)
    assert [_readable(j.config.trainer.experiment_name) for j in jobs] == [
        "fgrpo-g0.5-n8-Qwen2.5-7B-s42",
        "fgrpo-g0.5-n8-Qwen2.5-7B-s42-v2",
    ]
    (tmp_path / "bad.yaml").write_text(body % ", variant: 'a b'")
    with pytest.raises(ValueError, match="variant must match"):
        load_recipe(str(tmp_path / "bad.yaml"))


def test_job_env_prints_exports_that_a_shell_can_eval(capsys):
    """The plain `sbatch slurm/train.sbatch` path evals this output inside the job."""
    import subprocess

    from fgrpo_verl.cli import main

    def shown(argv):
        assert main(["job-env", *argv]) == 0
        exports = capsys.readouterr().out
        return subprocess.run(
            ["bash", "-c", exports + '\nprintf "%s|%s|%s|%s|%s|%s" "$WANDB_RUN_ID" "$WANDB_RESUME" "$WANDB_RUN_GROUP" '
             '"$WANDB_TAGS" "$FGRPO_EXPERIMENT" "$FGRPO_CHECKPOINT_DIR"'],
            capture_output=True,
            text=True,
            check=True,
        ).stdout

    # an explicit experiment name is kept
    got = shown(["--wandb-group", "sweep-1", "algo=grpo", "trainer.project_name=p", "trainer.experiment_name=e"])
    assert got == f"{tracking.run_id('p', 'e', os.path.abspath('checkpoints/p/e'))}|allow|sweep-1|algo:fgrpo,gamma:0.5,n:8|e|checkpoints/p/e"
    # without one, the job gets the W&B naming convention plus the config hash (train.sbatch passes
    # $FGRPO_EXPERIMENT back to verl)
    got = shown(["algo=cispo", "base_model=qwen25_7b", "algorithm.fgrpo.gamma=1", "actor_rollout_ref.rollout.n=4",
                 "data.seed=3", "trainer.project_name=p"])
    run_id, _, _, tags, name, ckpt = got.split("|")
    assert _readable(name) == "fcispo-g1-n4-Qwen2.5-7B-s3" and run_id == tracking.run_id("p", name, os.path.abspath(ckpt))
    assert (tags, ckpt) == ("algo:fcispo,gamma:1,n:4", f"checkpoints/p/{name}")


def test_launch_takes_options_and_overrides_in_any_order(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli_main(["launch", "controls", "trainer.nnodes=4", "--dry-run", "--script-dir", "-", "--only", "grpo-kl"]) == 3
    out = capsys.readouterr().out
    # the training job and its two evaluation jobs (the same job name: singleton keeps them apart in time)
    assert [_readable(n) for n in re.findall(r'^#SBATCH --job-name="(.*)"$', out, re.M)] == [
        "grpo-g0-n8-Qwen2.5-7B-s42-kl"
    ] * 3
    assert '#SBATCH --nodes="4"\n' in out and "    trainer.nnodes=4 \\\n" in out


def _rows_parquet(path: Path, rows: int) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"i": pa.array(range(rows), pa.int32())}), path)
    return path


def test_save_freq_per_epoch_comes_from_the_prepared_row_count(tmp_path):
    """paper_main saves once per epoch: 39,202 prepared prompts // 256 = 153 steps, read from train.parquet at
    launch (no hard-coded 153); a different preparation gives a different save_freq."""
    _rows_parquet(tmp_path / "data" / "deepscaler" / "train.parquet", 39_202)
    _, (job,) = _plan("paper_main", tmp_path, only=["qwen25_7b-grpo-g0p5"])
    assert job.config.trainer.save_freq == 153 and job.total_steps == 1530
    assert "    trainer.save_freq=153 \\\n" in job.text
    _rows_parquet(tmp_path / "data" / "deepscaler" / "train.parquet", 25_600)
    _, (job,) = _plan("paper_main", tmp_path, only=["qwen25_7b-grpo-g0p5"])
    assert job.config.trainer.save_freq == 100 and job.total_steps == 1000


def test_maze_recipe_reaches_20k_steps_with_1m_mazes_and_refuses_10k(tmp_path):
    train = tmp_path / "data" / "maze" / "data" / "train.parquet"
    _rows_parquet(train, 1_000_000)
    _, (job,) = _plan("maze", tmp_path, only=["n8-g0p5"])
    assert job.total_steps == 20_000 and job.config.trainer.total_epochs == 6
    _rows_parquet(train, 10_000)
    with pytest.raises(ValueError, match=r"total_training_steps=20000 is not reachable.*total_epochs=513"):
        _plan("maze", tmp_path, only=["n8-g0p5"])


def test_dry_run_states_checkpoint_disk_and_submit_refuses_missing_data(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _rows_parquet(tmp_path / "data" / "deepscaler" / "train.parquet", 39_202)
    assert cli_main(["launch", "paper_main", "--dry-run", "--script-dir", "-", "--only", "qwen25_7b-grpo-g0p5"]) == 3
    # 12 B x 7.62B params per checkpoint, one per epoch over 10 epochs; 2 x 12 B + 8 x 4 B (weights) when older
    # checkpoints lose their optimizer states (fgrpo_verl/job/resume_point.py)
    assert ("checkpoint disk: 91.4 GB per checkpoint (7.62B params x 12 B), 10 kept, optimizer states only in the "
            "resume point and a newer one (4 B per param in the others) = 426.7 GB") in capsys.readouterr().out
    monkeypatch.setenv("FGRPO_KEEP_OPTIMIZER_STATES", "1")
    assert cli_main(["launch", "paper_main", "--dry-run", "--script-dir", "-", "--only", "qwen25_7b-grpo-g0p5"]) == 3
    assert "checkpoint disk: 91.4 GB per checkpoint (7.62B params x 12 B), 10 kept = 914.4 GB" in capsys.readouterr().out
    monkeypatch.delenv("FGRPO_KEEP_OPTIMIZER_STATES")
    (tmp_path / "data" / "deepscaler" / "train.parquet").unlink()
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))
    assert cli_main(["launch", "paper_main", "--only", "qwen25_7b-grpo-g0p5"]) == 2
    assert "not found under" in capsys.readouterr().err


def test_identity_follows_every_override_fresh_and_explicit_wandb_id(tmp_path):
    def one(*overrides, **kw):
        _, (job,) = plan_jobs("controls", ["grpo-kl"], list(overrides), tmp_path / "logs", tmp_path, **kw)
        return job

    base = one()
    assert one().job_name == base.job_name  # a relaunch of the same config is the same run
    lr = one("actor_rollout_ref.actor.optim.lr=3e-4")
    assert lr.job_name != base.job_name and _readable(lr.job_name) == _readable(base.job_name)
    assert lr.checkpoint_dir != base.checkpoint_dir
    lr_id = tracking.run_id("fgrpo-paper", lr.job_name, os.path.abspath(lr.checkpoint_dir))
    assert f"export WANDB_RUN_ID={lr_id}\n" in lr.text
    # scheduling is not identity
    assert one("slurm.time=4:00:00").job_name == base.job_name
    fresh = one(fresh="20260101T000000")
    assert fresh.job_name != base.job_name and fresh.job_name == one(fresh="20260101T000000").job_name
    explicit = one(wandb_run_id="my-own-id")
    assert "export WANDB_RUN_ID=my-own-id\n" in explicit.text
    with pytest.raises(ValueError, match="WANDB_RUN_ID=my-own-id is set but 6 runs are selected"):
        plan_jobs("controls", None, [], tmp_path / "logs", tmp_path, wandb_run_id="my-own-id")
    # a checkpoint dir that holds another config is refused at launch
    from fgrpo_verl.job.run_record import write_record

    write_record(base.checkpoint_dir, "0" * 64, base.job_name, ["x=1"])
    with pytest.raises(ValueError, match="holds a run of a different config"):
        one()


def test_shared_runs_of_two_recipes_are_one_run(paper_main, group_size):
    """group_size's fgrpo-n8-g0p5 is paper_main's qwen25_7b-grpo-g0p5 (Table 2's N = 8 row is Table 1's run): one
    identity, so singleton and the queue check keep them to one job."""
    (a,) = [job for job in paper_main[1] if job.run.name == "qwen25_7b-grpo-g0p5"]
    (b,) = [job for job in group_size[1] if job.run.name == "fgrpo-n8-g0p5"]
    assert a.job_name == b.job_name and a.checkpoint_dir == b.checkpoint_dir


def test_cli_refuses_owned_and_secret_overrides_and_takes_repeated_only(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli_main(["launch", "controls", "--dry-run", "trainer.experiment_name=mine"]) == 2
    assert "trainer.experiment_name is set by the launcher" in capsys.readouterr().err
    assert cli_main(["launch", "controls", "--dry-run", "+ray_kwargs.ray_init.runtime_env.env_vars.WANDB_API_KEY=k"]) == 2
    assert "looks like a secret" in capsys.readouterr().err
    assert cli_main(["launch", "controls", "--dry-run", "--script-dir", "-", "--only", "grpo-kl", "--only", "grpo-entropy"]) == 3
    names = re.findall(r"^### job \S+ \(run (\S+)\)", capsys.readouterr().out, re.M)
    assert names == ["grpo-entropy", "grpo-kl"]


@pytest.mark.parametrize("mode", ["--dry-run", "--status"])
def test_an_unknown_run_in_a_sweep_says_how_to_list_its_runs_in_one_short_line(tmp_path, monkeypatch, capsys, mode):
    """The same line for a dry run and for --status, which names the typo before asking Slurm (none here)."""
    monkeypatch.chdir(tmp_path)
    assert cli_main(["launch", "paper_main", mode, "--only", "qwen25_7b-grpo-g0p55"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and len(err) < 300, err
    assert "no run named ['qwen25_7b-grpo-g0p55']" in err and "did you mean" in err.lower()
    assert "36 runs: `fgrpo-verl recipes paper_main` lists them" in err
