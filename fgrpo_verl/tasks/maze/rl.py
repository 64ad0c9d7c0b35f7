"""RL on the maze task through verl: the Hydra overrides of one run, and the function that runs it.

``train_maze`` launches ``python -m fgrpo_verl train <overrides>`` (verl's ``main_ppo`` on fgrpo-verl's config)
in a child process, so that each run gets a fresh Ray cluster and Hydra state and its memory is returned to
the OS when it ends. The run logs to the console, to W&B (offline unless the user configured W&B) and to a
JSONL file (verl's ``file`` logger), which is where :func:`read_metrics` gets the train reward curve. Held-out
pass@k comes from verl's validation with ``n`` samples per maze, dumped by ``trainer.validation_data_dir``.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from fgrpo_verl.data.records import read_records
from fgrpo_verl.monitoring.console import step_summary
from fgrpo_verl.tasks.maze.build import MazeBuild
from fgrpo_verl.theory._checks import real_array, whole

REWARD_PATH = "pkg://fgrpo_verl.tasks.maze.reward"
TRAIN_REWARD_KEY = "critic/score/mean"  # verl's per-step mean sequence score (our 0/1 reward)


@dataclass
class RLSettings:
    steps: int = field(default=30, metadata={"help": "RL steps; one on-policy update per step (paper: 20K)"})
    batch_size: int = field(default=16, metadata={"help": "mazes per step (paper: 256)"})
    n: int = field(default=8, metadata={"help": "rollouts per maze, the group size N (paper: 4..128)"})
    lr: float = field(default=1e-4, metadata={"help": "actor AdamW learning rate (paper: 1e-4)"})
    temperature: float = field(default=1.0, metadata={"help": "rollout sampling temperature (paper: 1.0)"})
    val_n: int = field(default=16, metadata={"help": "samples per held-out maze at the final validation"})
    micro_batch: int = field(default=64, metadata={"help": "actor / log-prob micro-batch per process (memory knob)"})
    seed: int = field(default=0, metadata={"help": "data shuffling seed"})

    def __post_init__(self):
        for name in ("steps", "batch_size", "n", "val_n", "micro_batch"):
            whole(f"RLSettings.{name}", getattr(self, name))
        if (self.batch_size * self.n) % self.micro_batch:
            raise ValueError(
                f"RLSettings.micro_batch={self.micro_batch} must divide batch_size * n = {self.batch_size * self.n} "
                "(verl splits each step's rollouts into micro-batches of that size)"
            )
        for name in ("lr", "temperature"):
            real_array(f"RLSettings.{name}", getattr(self, name), low=0.0, high=math.inf, low_open=True, high_open=True)


def maze_overrides(build: MazeBuild, model_dir: str, gamma: float, settings: RLSettings, run_dir: str, name: str,
                   project: str = "fgrpo-verl-maze", backend: str = "cpu") -> list[str]:
    """Hydra overrides for one GRPO (gamma = 0) or F-GRPO (gamma > 0) run on the maze data in ``build``."""
    s = settings
    return [
        f"backend={backend}",
        # data: every prompt of one size has the same length; the response budget admits any path + <|endoftext|>
        f"data.train_files={build.train_file}",
        f"data.val_files={build.val_file}",
        f"data.max_prompt_length={build.prompt_length}",
        f"data.max_response_length={build.max_response_length}",
        f"data.train_batch_size={s.batch_size}",
        f"data.val_batch_size={build.n_val}",
        f"data.seed={s.seed}",
        # policy: the SFT warm start; fully on-policy, one update per step (paper §5.2), no KL, no entropy bonus
        f"actor_rollout_ref.model.path={model_dir}",
        f"actor_rollout_ref.actor.optim.lr={s.lr}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={s.batch_size}",
        "actor_rollout_ref.actor.ppo_epochs=1",
        "actor_rollout_ref.actor.use_kl_loss=False",
        "actor_rollout_ref.actor.entropy_coeff=0",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={s.micro_batch}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={s.micro_batch}",
        f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={s.micro_batch}",
        f"actor_rollout_ref.rollout.n={s.n}",
        f"actor_rollout_ref.rollout.temperature={s.temperature}",
        # held-out validation: val_n samples per maze at the same temperature, for the unbiased pass@k
        f"actor_rollout_ref.rollout.val_kwargs.n={s.val_n}",
        "actor_rollout_ref.rollout.val_kwargs.do_sample=True",
        f"actor_rollout_ref.rollout.val_kwargs.temperature={s.temperature}",
        # algorithm: F-GRPO's focal weight on GRPO advantages; gamma = 0 is GRPO exactly
        "algorithm.adv_estimator=fgrpo",
        f"algorithm.fgrpo.gamma={gamma}",
        "algorithm.use_kl_in_reward=False",
        # reward: exact match of the unique target action sequence
        f"reward.custom_reward_function.path={REWARD_PATH}",
        "reward.custom_reward_function.name=compute_score",
        # trainer
        f"trainer.total_training_steps={s.steps}",
        "trainer.total_epochs=1000",
        "trainer.val_before_train=False",
        f"trainer.test_freq={s.steps}",
        "trainer.save_freq=-1",
        f"trainer.validation_data_dir={run_dir}/validation",
        f"trainer.default_local_dir={run_dir}/checkpoints",
        f"trainer.project_name={project}",
        f"trainer.experiment_name={name}",
        "trainer.logger=[console,wandb,file]",
    ]


@dataclass(frozen=True)
class RunResult:
    name: str
    gamma: float
    run_dir: str
    metrics_file: str
    returncode: int


def train_maze(build: MazeBuild, model_dir: str, gamma: float, settings: RLSettings, run_dir: str | Path, name: str,
               extra_overrides: list[str] = (), session=None, backend: str = "cpu") -> RunResult:
    """Run one RL job through verl in a child process; console output goes to ``run_dir/train.log`` and stdout.
    ``session``: a started ``fgrpo_verl.backends.cpu.session.RaySession`` for the run to join."""
    run_dir = Path(run_dir).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    metrics_file = run_dir / "metrics.jsonl"
    run_env = {"VERL_FILE_LOGGER_PATH": str(metrics_file), "WANDB_DIR": os.environ.get("WANDB_DIR", str(run_dir))}
    # in a shared Ray cluster the run's TaskRunner is a worker of that cluster, which does not see the child's
    # environment: the run's variables also go into its runtime_env
    session_overrides = [] if session is None else session.run_overrides(run_env)
    overrides = maze_overrides(build, model_dir, gamma, settings, str(run_dir), name, backend=backend)
    cmd = [sys.executable, "-m", "fgrpo_verl", "train", *overrides, *session_overrides, *extra_overrides]
    (run_dir / "command.txt").write_text(" ".join(cmd) + "\n")
    with open(run_dir / "train.log", "w") as log:
        child_env = {**os.environ, **run_env, **({} if session is None else session.env)}
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=child_env, text=True)
        for line in proc.stdout:
            log.write(line)
            summary = step_summary(line)  # verl's one line per step, shortened (fgrpo_verl/monitoring/console.py)
            if summary is not None:
                sys.stdout.write(f"[{name}] {summary}\n")
                sys.stdout.flush()
        proc.wait()
    return RunResult(name=name, gamma=gamma, run_dir=str(run_dir), metrics_file=str(metrics_file), returncode=proc.returncode)


def read_metrics(metrics_file: str | Path) -> dict[int, dict]:
    """verl ``file`` logger JSONL -> {step: metrics}."""
    steps: dict[int, dict] = {}
    for record in read_records(metrics_file):
        steps.setdefault(int(record["step"]), {}).update(record["data"])
    return steps


def correct_counts_from_dump(jsonl_file: str | Path) -> tuple[int, list[int]]:
    """verl's validation dump -> (samples per maze, correct samples per maze); every maze must have the same n."""
    per_prompt: dict[str, list[float]] = defaultdict(list)
    for record in read_records(jsonl_file):
        per_prompt[record["input"]].append(float(record["score"]))
    ns = {len(v) for v in per_prompt.values()}
    if len(ns) != 1:
        raise ValueError(f"validation dump {jsonl_file} has unequal samples per maze: {sorted(ns)}")
    return ns.pop(), [sum(s == 1.0 for s in v) for v in per_prompt.values()]
