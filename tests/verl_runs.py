"""Running ``fgrpo-verl train`` (verl's ``main_ppo``) as a user would, for the end-to-end tests.

Shared by the e2e tests (not collected: the name does not start with ``test_``). A run is a subprocess in its
own session, with verl's file logger on; its wall time and peak memory (PSS summed over the whole process tree:
driver, Ray, workers, engines) are measured and printed (``pytest -s``), and a run past its time limit is killed
with everything it started and reported as such.

:func:`shared_maze_run` is the one F-GRPO maze run that several e2e modules assert on (conftest's session fixture
``maze_fgrpo_run``): each verl start costs a Ray cluster and eight actors, so one run carries the union of what
they check. It is also a new user's first run: ``train --quiet`` from a shell without test settings, a local Ray
whose first start times out (tests/slow_ray_start.py), W&B offline, the niceness of Ray's workers recorded.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
RUN_TIMEOUT_S = 600
TRAIN = (sys.executable, "-m", "fgrpo_verl", "train")


def tree_memory(proc) -> int:
    """Proportional set size (shared pages split between sharers) summed over the process tree, in bytes."""
    import psutil

    total = 0
    try:
        procs = [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    for p in procs:
        try:
            total += p.memory_full_info().pss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return total


def run_train(overrides: list[str], run_dir: Path, timeout_s: float = RUN_TIMEOUT_S, env: dict | None = None,
              label: str = "e2e", drop_env: tuple[str, ...] = (), program: tuple[str, ...] = TRAIN,
              quiet_log: Path | None = None, watch=None, stop=None) -> dict:
    """``<program> <overrides>`` (``python -m fgrpo_verl train``) in its own session; returns rc, wall time, peak
    PSS, log and whether it was killed at ``timeout_s``. ``drop_env``: prefixes of this process's variables the
    run must not inherit (``env`` is applied after). ``log`` is verl's output: the process's stdout and stderr
    together (``run_dir/train.log``), or, for a program that writes it to a file itself (``train --quiet``:
    ``quiet_log``), that file's text, with the process's own stdout and stderr in ``stdout`` / ``stderr``.
    ``watch``: called with the run's ``psutil.Process`` every 0.5 s while it runs. ``stop``: a
    ``threading.Event`` that ends the run (its whole session) within 0.5 s once set, for a run in a thread whose
    test failed or was interrupted (:func:`stopping_on_error`)."""
    import psutil

    run_dir.mkdir(parents=True, exist_ok=True)
    full_env = {k: v for k, v in os.environ.items() if not (drop_env and k.startswith(drop_env))}
    full_env["PYTHONPATH"] = os.pathsep.join([str(REPO), full_env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    full_env["VERL_FILE_LOGGER_PATH"] = str(run_dir / "metrics.jsonl")
    full_env["RAY_DEDUP_LOGS"] = "0"
    full_env.update(env or {})
    # verl's output in one file; with quiet_log, the terminal's two streams
    outputs = [run_dir / "train.log"] if quiet_log is None else [run_dir / "stdout.txt", run_dir / "stderr.txt"]
    start = time.monotonic()
    peak, timed_out = 0, False
    with contextlib.ExitStack() as files:
        out, *err = [files.enter_context(open(path, "w")) for path in outputs]
        proc = subprocess.Popen(
            [*program, *overrides], stdout=out, stderr=err[0] if err else subprocess.STDOUT, env=full_env,
            cwd=run_dir, start_new_session=True,
        )
        ps = psutil.Process(proc.pid)
        try:
            while proc.poll() is None:
                # PSS of a Ray tree costs ~0.1 CPU-s to read: sampled every 5 s, the end seen within 0.5 s
                peak = max(peak, tree_memory(ps))
                if time.monotonic() - start > timeout_s:
                    timed_out = True
                    break
                if stop is not None and stop.is_set():
                    break
                for _ in range(10):
                    if stop is not None and stop.is_set():
                        break
                    if watch is not None:
                        watch(ps)
                    try:
                        proc.wait(timeout=0.5)
                        break
                    except subprocess.TimeoutExpired:
                        pass
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, 9)  # the session we started: driver, its Ray cluster and workers
                proc.wait()
    wall = time.monotonic() - start
    print(f"[{label}] {run_dir.name}: rc={proc.returncode} wall={wall:.1f}s peak_pss={peak / 2**30:.2f} GiB"
          + (" (killed at the time limit)" if timed_out else ""))
    result = {"rc": proc.returncode, "wall_s": wall, "peak_pss": peak, "timed_out": timed_out}
    if quiet_log is None:
        return {**result, "log": outputs[0].read_text()}
    return {**result, "log": quiet_log.read_text(errors="replace") if quiet_log.exists() else "",
            "stdout": outputs[0].read_text(), "stderr": outputs[1].read_text()}


@contextlib.contextmanager
def stopping_on_error():
    """A ``stop`` event for :func:`run_train` calls in threads: set when the body raises (a failed assertion, an
    error, Ctrl-C), so those runs end at once instead of the thread pool waiting minutes for them."""
    stop = threading.Event()
    try:
        yield stop
    except BaseException:
        stop.set()
        raise


class RayWorkerNiceness:
    """A :func:`run_train` ``watch``: the niceness of every ``ray::<actor>`` process of the run (``.niceness``:
    actor name -> niceness)."""

    def __init__(self):
        self.niceness: dict[str, int] = {}

    def __call__(self, proc) -> None:
        import psutil

        try:
            children = proc.children(recursive=True)
        except psutil.Error:
            return
        for child in children:
            try:
                cmdline = child.cmdline()
                name = cmdline[0].split()[0] if cmdline else ""
                if name.startswith("ray::") and name != "ray::IDLE":
                    self.niceness[name.split(".")[0]] = child.nice()
            except (psutil.Error, IndexError):
                pass


def metrics(run_dir: Path) -> dict[int, dict]:
    """step -> metrics dict, from verl's file logger."""
    out: dict[int, dict] = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        out.setdefault(int(record["step"]), {}).update(record["data"])
    return out


# ---------------------------------------------------------------------------------------------- the shared run
REWARD_FILE = Path(__file__).resolve().parent / "cpu_backend_parity_reward.py"
# F-GRPO's focal strength and group size of the shared run
SHARED_GAMMA, SHARED_GROUP_N, SHARED_VAL_N, SHARED_STEPS = 0.5, 4, 4, 2
SHARED_WANDB_PROJECT = "fgrpo-metrics-e2e"


def maze_common_overrides(maze, gamma: float = SHARED_GAMMA, group_n: int = SHARED_GROUP_N) -> list[str]:
    """F-GRPO on the maze task (7x7, tiny Qwen2) and the parity reward (about half of a random policy's responses
    score 1, so most groups are mixed and some are uniform), on the CPU backend. No DAPO group filtering, so the
    ``fgrpo/*`` metrics see uniform groups too."""
    return [
        "backend=cpu",
        f"data.train_files={maze.train_file}", f"data.val_files={maze.val_file}",
        # no data.val_batch_size: the 4 held-out mazes are one batch anyway, and verl prints a deprecation warning
        # for the key before train's quiet mode starts (a line on the shared run's terminal)
        "data.train_batch_size=4", f"data.max_prompt_length={maze.prompt_length}",
        f"data.max_response_length={maze.max_response_length}", "data.seed=0",
        f"actor_rollout_ref.model.path={maze.model_dir}",
        f"actor_rollout_ref.rollout.n={group_n}",
        # 16 rollouts per mini-batch in micro-batches of 8: the update accumulates gradients
        "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16",
        "actor_rollout_ref.actor.optim.lr=1e-3", "actor_rollout_ref.actor.use_kl_loss=False",
        "actor_rollout_ref.rollout.val_kwargs.do_sample=True", "actor_rollout_ref.rollout.val_kwargs.temperature=1.0",
        "algorithm.adv_estimator=fgrpo", f"algorithm.fgrpo.gamma={gamma}", "algorithm.use_kl_in_reward=False",
        f"reward.custom_reward_function.path={REWARD_FILE}", "reward.custom_reward_function.name=compute_score",
    ]


# ``train`` as a user runs it, in a child whose first local Ray start times out (tests/slow_ray_start.py)
SLOW_RAY_START_TRAIN = r"""
import sys
sys.path.insert(0, {tests!r})
import slow_ray_start
slow_ray_start.arm()
from fgrpo_verl.cli import main
sys.exit(main(sys.argv[1:]))
"""


def shared_maze_run(root: Path) -> dict:
    """One 2-step run that logs everything the e2e modules check: validation before training and at step 2
    (``SHARED_VAL_N`` samples per held-out maze), a checkpoint at every step, the rollouts of every step, and
    the console, JSONL ``file`` and offline W&B loggers (W&B named and identified by ``fgrpo_verl.job.tracking``,
    handed to verl's TaskRunner through Ray's runtime_env overrides, nothing inherited from this process).

    Started as a new user starts it: ``fgrpo-verl train --quiet`` (verl's and Ray's output in
    ``<checkpoints>/train.log``, a few lines on the terminal) from a shell without this process's ``FGRPO_*``,
    ``WANDB_*`` and ``RAY_ADDRESS``, on a machine where the first local Ray start times out (tests/slow_ray_start.py,
    armed in the ``python -c`` child), while the niceness of every ``ray::`` worker is recorded.

    Returns the :func:`run_train` result (``log``: verl's output, the quiet log; ``stdout`` / ``stderr``: the
    terminal's) plus ``root``, ``maze``, ``ckpt``, ``rollouts``, ``quiet_log`` (the log's path), ``wandb`` (the W&B
    variables), ``niceness`` (``ray::<actor>`` -> niceness) and ``steps`` (:func:`metrics`, empty when the run
    failed)."""
    from user_env import user_environment

    from fgrpo_verl.job import tracking
    from fgrpo_verl.tasks.maze import build

    maze = build(root / "maze", size=7, n_train=64, n_val=4, model_preset="tiny", seed=0)
    # a new user's shell: no fgrpo-verl or W&B settings of this process, no Ray cluster to join (RAY_ADDRESS)
    shell = user_environment("RAY_ADDRESS")
    not_in_shell = tuple(k for k in os.environ if k not in shell)
    name = tracking.run_name("fgrpo", SHARED_GAMMA, SHARED_GROUP_N, maze.model_dir, 0)
    wandb_vars = tracking.wandb_env(SHARED_WANDB_PROJECT, name, group="e2e",
                                    tags=tracking.run_tags("fgrpo", SHARED_GAMMA, SHARED_GROUP_N), mode="offline")
    ckpt = root / "checkpoints"
    overrides = [
        *maze_common_overrides(maze),
        f"actor_rollout_ref.rollout.val_kwargs.n={SHARED_VAL_N}",
        "trainer.logger=[console,file,wandb]",
        f"trainer.total_training_steps={SHARED_STEPS}", f"trainer.test_freq={SHARED_STEPS}",
        "trainer.val_before_train=True", "trainer.save_freq=1",
        f"trainer.default_local_dir={ckpt}", f"trainer.rollout_data_dir={root / 'rollouts'}",
        *tracking.experiment_overrides(SHARED_WANDB_PROJECT, name),
        *tracking.ray_env_overrides(wandb_vars),
    ]
    workers = RayWorkerNiceness()
    program = (sys.executable, "-c", SLOW_RAY_START_TRAIN.format(tests=str(TESTS)), "train", "--quiet")
    run = run_train(overrides, root / "run", env={"WANDB_DIR": str(root)}, label="shared maze run",
                    drop_env=not_in_shell, program=program, quiet_log=ckpt / "train.log", watch=workers)
    return {**run, "root": root, "maze": maze, "ckpt": ckpt, "rollouts": root / "rollouts",
            "quiet_log": ckpt / "train.log", "wandb": wandb_vars, "niceness": workers.niceness,
            "steps": metrics(root / "run") if run["rc"] == 0 else {}}
