"""The rare-mode experiment through verl: configurations x seeds of ``fgrpo-verl train backend=cpu``.

A configuration is (gamma, lr, overrides): GRPO (gamma = 0), F-GRPO (gamma > 0), the paper's scale-matched control
(GRPO with lr x m_gamma, ``fgrpo_verl.theory.mean_shrink``; paper App. N / Table 3) and, opt-in, its DS-GRPO control
(``control=ds_grpo``, ``fgrpo_verl/integration/ds_grpo.py``; Table 3) at GRPO's lr. Each (configuration, seed)
is one verl run from the same warm-start model on the same data, with ``data.seed`` = the seed (so the same seed
gives every configuration the same prompt order and the comparison is paired). verl saves an HF checkpoint every
step; ``evaluate.step_metrics`` turns them into the exact per-step curves afterwards.

The verl overrides are the maze task's (``fgrpo_verl.tasks.maze.rl.maze_overrides``: data, on-policy actor,
rollouts, F-GRPO estimator, no KL), then the rare-mode reward, per-step HF checkpoints, and no verl validation
(pass@k is sampled from the final checkpoint instead, ``evaluate.sampled_pass_at_k``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fgrpo_verl.tasks.maze.rl import RLSettings, RunResult, train_maze
from fgrpo_verl.tasks.raremode.build import RareBuild

REWARD_PATH = "pkg://fgrpo_verl.tasks.raremode.reward"
# DS-GRPO on this task. maze_overrides names the fgrpo estimator on the command line, which beats a config group's
# value, so the estimator is named again. gamma_p = gamma_n = 0.1: a response is one symbol and the termination token,
# |log pi(y|x)| ~ 1-4 nats at the warm start, so the term is 0.1-0.4 of a normalised advantage (ours: neither paper
# gives a value; hydra_configs/control/ds_grpo.yaml).
DS_GRPO = ("control=ds_grpo", "algorithm.adv_estimator=ds_grpo",
           "actor_rollout_ref.actor.policy_loss.gamma_p=0.1", "actor_rollout_ref.actor.policy_loss.gamma_n=0.1")


@dataclass(frozen=True)
class Config:
    name: str
    gamma: float
    lr: float
    overrides: tuple[str, ...] = ()


def configs(gammas: list[float], lr: float, control_gamma: float | None, ds_grpo: bool = False) -> list[Config]:
    """GRPO / F-GRPO for each gamma, plus GRPO at lr x m_{control_gamma} when ``control_gamma`` is given, plus
    DS-GRPO at ``lr`` when ``ds_grpo``."""
    from fgrpo_verl.theory.shrink import mean_shrink, run_label

    out = [Config(run_label(g), float(g), lr) for g in gammas]
    if control_gamma is not None:
        m = float(mean_shrink(control_gamma))
        out.append(Config(run_label(0.0, control_of=control_gamma), 0.0, lr * m))
    if ds_grpo:
        out.append(Config("ds_grpo", 0.0, lr, DS_GRPO))
    names = [c.name for c in out]
    if len(set(names)) != len(names):
        raise ValueError(f"configurations must be distinct, got {names}")
    return out


def run_overrides(config: Config, seed: int, run_dir: Path | None = None) -> list[str]:
    # train_maze puts the file logger's path and WANDB_DIR into the child's environment; a run that joins a shared
    # Ray cluster (RaySession) runs its TaskRunner in workers of that cluster, which do not see it, so they also go
    # into the job's runtime_env
    env = [] if run_dir is None else [
        f"+ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH={Path(run_dir).resolve() / 'metrics.jsonl'}",
        f"+ray_kwargs.ray_init.runtime_env.env_vars.WANDB_DIR={Path(run_dir).resolve()}",
    ]
    return [
        *env,
        f"reward.custom_reward_function.path={REWARD_PATH}",
        "trainer.project_name=fgrpo-verl-raremode",
        f"actor_rollout_ref.actor.optim.lr={config.lr}",
        f"algorithm.fgrpo.gamma={config.gamma}",
        f"data.seed={seed}",
        f"actor_rollout_ref.rollout.seed={seed}",  # the rollout server's sampling generator
        # one HF model dir per step: the exact per-step metrics are computed from these after the run
        "trainer.save_freq=1",
        "actor_rollout_ref.actor.checkpoint.save_contents=[hf_model]",
        "trainer.test_freq=-1",
        *config.overrides,
    ]


def run_one(build: RareBuild, sft_dir: str, config: Config, seed: int, settings: RLSettings, run_dir: Path,
            extra_overrides: list[str] = (), backend: str = "cpu", env: dict | None = None) -> RunResult:
    name = f"{config.name}_s{seed}"
    return train_maze(
        build, sft_dir, config.gamma, settings, run_dir, name,
        extra_overrides=[*run_overrides(config, seed, run_dir), *extra_overrides], backend=backend, env=env,
    )
