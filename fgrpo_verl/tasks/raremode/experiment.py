"""The rare-mode experiment through verl: configurations x seeds of ``fgrpo-verl train backend=cpu``.

A configuration is (gamma, lr, overrides): GRPO (gamma = 0), F-GRPO (gamma > 0), the paper's scale-matched control
(GRPO with lr x m_gamma, ``fgrpo_verl.theory.mean_shrink``; paper App. N / Table 3) and, opt-in, its DS-GRPO control
(``control=ds_grpo``, ``fgrpo_verl/integration/ds_grpo.py``; Table 3) at GRPO's lr. Each (configuration, seed)
is one verl run from the same warm-start model on the same data, with ``data.seed`` = the seed (so the same seed
gives every configuration the same prompt order and the comparison is paired). verl saves an HF checkpoint every
step; ``measure.step_metrics`` turns them into the exact per-step curves afterwards.

The verl overrides are the maze task's (``fgrpo_verl.tasks.maze.rl.maze_overrides``: data, on-policy actor,
rollouts, F-GRPO estimator, no KL), then the rare-mode reward, per-step HF checkpoints, and no verl validation
(pass@k is sampled from the final checkpoint instead, ``measure.sampled_pass_at_k``).
"""

from __future__ import annotations

from pathlib import Path

from fgrpo_verl.tasks.maze.rl import RLSettings, RunResult, train_maze
from fgrpo_verl.tasks.raremode.build import RareBuild
from fgrpo_verl.theory.shrink import RunConfig, configurations

REWARD_PATH = "pkg://fgrpo_verl.tasks.raremode.reward"
# DS-GRPO on this task. maze_overrides names the fgrpo estimator on the command line, which beats a config group's
# value, so the estimator is named again. gamma_p = gamma_n = 0.1: a response is one symbol and the termination token,
# |log pi(y|x)| ~ 1-4 nats at the warm start, so the term is 0.1-0.4 of a normalised advantage (ours: neither paper
# gives a value; hydra_configs/control/ds_grpo.yaml).
DS_GRPO = ("control=ds_grpo", "algorithm.adv_estimator=ds_grpo",
           "actor_rollout_ref.actor.policy_loss.gamma_p=0.1", "actor_rollout_ref.actor.policy_loss.gamma_n=0.1")


def configs(gammas: list[float], lr: float, control_gamma: float | None, ds_grpo: bool = False) -> list[RunConfig]:
    """GRPO / F-GRPO for each gamma, plus GRPO at lr x m_{control_gamma} when ``control_gamma`` is given, plus
    DS-GRPO at ``lr`` when ``ds_grpo``."""
    out = configurations(gammas, lr, () if control_gamma is None else (control_gamma,))
    if ds_grpo:
        out.append(RunConfig("ds_grpo", 0.0, lr, overrides=DS_GRPO))
    names = [c.name for c in out]
    if len(set(names)) != len(names):
        raise ValueError(f"configurations must be distinct, got {names}")
    return out


def run_overrides(config: RunConfig, seed: int) -> list[str]:
    return [
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


def run_one(build: RareBuild, sft_dir: str, config: RunConfig, seed: int, settings: RLSettings, run_dir: Path,
            extra_overrides: list[str] = (), backend: str = "cpu", session=None) -> RunResult:
    name = f"{config.name}_s{seed}"
    return train_maze(build, sft_dir, config.gamma, settings, run_dir, name,
                      extra_overrides=[*run_overrides(config, seed), *extra_overrides], session=session, backend=backend)
