"""Recipes: every run of every shipped recipe composes and passes verl's validate_config, with the F-GRPO paper's
settings (expected values below are the paper's, arXiv 2602.06717 §5.2-5.3 and Table 5, not read from our
configs), and `fgrpo-verl launch --dry-run` prints one complete sbatch script per run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fgrpo_verl.cli import main as cli_main
from fgrpo_verl.launch import plan_jobs
from fgrpo_verl.launch.jobenv import wandb_run_id
from fgrpo_verl.launch.recipe import load_recipe
from fgrpo_verl.paths import recipes_dir

# paper §5.3: clipping (eps_low, eps_high) and policy loss per base algorithm
PAPER_CLIP = {"grpo": (0.2, 0.2, "vanilla"), "dapo": (0.2, 0.28, "vanilla"), "cispo": (1.0, 5.0, "cispo")}
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
def paper_main(tmp_path_factory):
    return _plan("paper_main", tmp_path_factory.mktemp("paper_main"))


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
        low, high, mode = PAPER_CLIP[algo]
        actor = cfg.actor_rollout_ref.actor
        assert (actor.clip_ratio_low, actor.clip_ratio_high, actor.policy_loss.loss_mode) == (low, high, mode)
        assert actor.use_kl_loss is False and cfg.algorithm.use_kl_in_reward is False and actor.entropy_coeff == 0
        assert actor.optim.lr == 1e-6 and cfg.actor_rollout_ref.rollout.n == 8
        assert (cfg.actor_rollout_ref.model.path, cfg.data.max_response_length) == PAPER_MODELS[model]
        assert cfg.data.get("apply_chat_template_kwargs", {}).get("enable_thinking", False) == (model == "qwen3_4b_base")
        assert cfg.algorithm.fgrpo.gamma == gamma
        assert cfg.trainer.experiment_name == f"paper_main-{job.run.name}" and job.job_name == cfg.trainer.experiment_name
        assert job.run.group == f"{model}-{algo}"
    assert seen == {(m, a, g) for m in PAPER_MODELS for a in PAPER_CLIP for g in PAPER_GAMMAS}


def test_paper_main_job_scripts_are_complete_and_requeue_safe(paper_main):
    _, jobs = paper_main
    ids = set()
    for job in jobs:
        text = job.text
        assert text.startswith("#!/bin/bash\n")
        for directive in (
            f"--job-name={job.job_name}",
            "--nodes=2",
            "--ntasks-per-node=1",
            "--gpus-per-node=8",
            "--requeue",
            "--open-mode=append",
        ):
            assert f"#SBATCH {directive}\n" in text
        assert "fgrpo-verl train \\\n    trainer.resume_mode=auto" in text
        for override in job.overrides:
            assert f"    {override} \\\n" in text
        assert '"trainer.nnodes=${SLURM_NNODES}"' in text and '"trainer.n_gpus_per_node=${FGRPO_GPUS_PER_NODE}"' in text
        run_id = wandb_run_id("fgrpo-paper", job.job_name)
        assert f"export WANDB_RUN_ID={run_id}\n" in text and "export WANDB_RESUME=allow\n" in text
        assert f"export WANDB_RUN_GROUP={job.run.group}\n" in text
        assert "API_KEY" not in text and "RAY_AUTH_TOKEN=" not in text
        ids.add(run_id)
    assert len(ids) == 36


def test_group_size_recipe_is_grpo_n_sweep_plus_fgrpo_at_n8(tmp_path):
    _, jobs = _plan("group_size", tmp_path)
    got = set()
    for job in jobs:
        cfg = job.config
        _assert_llm_paper_settings(cfg)
        assert cfg.actor_rollout_ref.model.path == "Qwen/Qwen2.5-7B"
        assert cfg.actor_rollout_ref.actor.clip_ratio_high == 0.2
        got.add((cfg.actor_rollout_ref.rollout.n, cfg.algorithm.fgrpo.gamma))
    assert len(jobs) == 6 and got == {(2, 0.0), (4, 0.0), (8, 0.0), (16, 0.0), (32, 0.0), (8, 0.5)}


def test_controls_recipe_is_low_lr_entropy_and_kl_grpo(tmp_path):
    _, jobs = _plan("controls", tmp_path)
    by_name = {job.run.name: job.config for job in jobs}
    assert set(by_name) == {"grpo-low_lr", "grpo-entropy", "grpo-kl"}
    for cfg in by_name.values():
        _assert_llm_paper_settings(cfg)
        assert cfg.algorithm.fgrpo.gamma == 0.0 and cfg.actor_rollout_ref.rollout.n == 8
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
            "--dry-run",
            "--only",
            "qwen3_4b_base-cispo-g1p0",
            "llama32_3b_instruct-dapo-g0p0",
            "algorithm.fgrpo.gamma=0.7",
            "trainer.nnodes=4",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0
    assert re.findall(r"^#SBATCH --job-name=(.*)$", out, re.M) == [
        "paper_main-qwen3_4b_base-cispo-g1p0",
        "paper_main-llama32_3b_instruct-dapo-g0p0",
    ]
    # command-line overrides reach every run, after the run's own (so they win), and size the allocation
    assert out.count("    algorithm.fgrpo.gamma=0.7 \\\n") == 2 and out.count("#SBATCH --nodes=4\n") == 2
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
        ("name: x\nproject: p\nruns: []\n", "runs must be a non-empty list"),
        ("name: x\nproject: p\nrunz: []\n", "unknown recipe key(s) ['runz']"),
        ("name: x\nproject: p\nruns:\n  - {name: a}\n  - {name: a}\n", "duplicate run name 'a'"),
        ("name: x\nproject: p\nenv: {WANDB_API_KEY: k}\nruns:\n  - {name: a}\n", "env.WANDB_API_KEY looks like a secret"),
        ("name: x y\nproject: p\nruns:\n  - {name: a}\n", "name must match"),
        ("name: x\nproject: p\nresources: {gpus: 8}\nruns:\n  - {name: a}\n", "unknown resources key(s) ['gpus']"),
        ("name: x\nproject: p\nresources: {cpus_per_task: 0}\nruns:\n  - {name: a}\n", "cpus_per_task must be a positive"),
        ("name: x\nproject: p\nruns:\n  - {name: a, overrides: algo=grpo}\n", "overrides must be a list"),
    ],
)
def test_bad_recipe_is_rejected_naming_the_key(tmp_path, body, message):
    path = tmp_path / "r.yaml"
    path.write_text(body)
    with pytest.raises(ValueError) as err:
        load_recipe(str(path))
    assert message in str(err.value)


def test_wandb_run_id_is_deterministic_and_distinct():
    assert wandb_run_id("p", "e") == wandb_run_id("p", "e")
    assert len({wandb_run_id("p", "e"), wandb_run_id("p", "e2"), wandb_run_id("p2", "e")}) == 3
    assert re.fullmatch(r"[0-9a-f]{16}", wandb_run_id("fgrpo-paper", "paper_main-qwen25_7b-grpo-g0p5"))
    with pytest.raises(ValueError, match="experiment must be a non-empty string"):
        wandb_run_id("p", "")


def test_jobenv_prints_exports_that_a_shell_can_eval(capsys):
    """The plain `sbatch slurm/train.sbatch` path evals this output inside the job."""
    import subprocess

    from fgrpo_verl.launch import jobenv

    assert jobenv.main(["--wandb-group", "g 1", "trainer.project_name=p", "trainer.experiment_name=e"]) == 0
    exports = capsys.readouterr().out
    shown = subprocess.run(
        ["bash", "-c", exports + '\nprintf "%s|%s|%s|%s" "$WANDB_RUN_ID" "$WANDB_RESUME" "$WANDB_RUN_GROUP" "$FGRPO_CHECKPOINT_DIR"'],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert shown == f"{wandb_run_id('p', 'e')}|allow|g 1|checkpoints/p/e"


def test_launch_takes_options_and_overrides_in_any_order(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli_main(["launch", "controls", "trainer.nnodes=4", "--dry-run", "--only", "grpo-kl"]) == 0
    out = capsys.readouterr().out
    assert re.findall(r"^#SBATCH --job-name=(.*)$", out, re.M) == ["controls-grpo-kl"]
    assert "#SBATCH --nodes=4\n" in out and "    trainer.nnodes=4 \\\n" in out
