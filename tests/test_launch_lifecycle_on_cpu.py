"""Unit tests of the run lifecycle without Slurm: identity, hardened rendering, status, step checks,
the trainer's stop-at-step-boundary hook and the private Ray directory."""

from __future__ import annotations

import json
import os
import re
import subprocess
import types
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from fgrpo_verl.job import preempt, run_record
from fgrpo_verl.job.node_net import ensure_private_dir
from fgrpo_verl.job import identity
from fgrpo_verl.launch import queue, render, steps
from fgrpo_verl.launch.recipe import Resources

NASTY = ["new\nline", "car\rriage", "tab\there", "nul\x00", "esc\x1b[2J"]


# ---------------------------------------------------------------- identity


def _cfg(**over):
    base = {
        "trainer": {"experiment_name": "x", "default_local_dir": "checkpoints/p/${trainer.experiment_name}",
                    "resume_mode": "auto", "project_name": "p"},
        "actor_rollout_ref": {"actor": {"optim": {"lr": 1e-6}}},
        "slurm": {"time": "1-00:00:00"},
    }
    cfg = OmegaConf.create(base)
    for key, value in over.items():
        OmegaConf.update(cfg, key, value, force_add=True)
    return cfg


def _fingerprint(config, fresh=None):
    return identity.fingerprint(identity.unnamed_tree(config), fresh)


def test_fingerprint_follows_the_config_but_not_launcher_owned_keys():
    a = _fingerprint(_cfg())
    # same config, other experiment name / time limit / resume mode: the same run
    assert _fingerprint(_cfg(**{"trainer.experiment_name": "y", "slurm.time": "2:00",
                                "trainer.resume_mode": "disable"})) == a
    # any setting that changes what is computed: another run
    assert _fingerprint(_cfg(**{"actor_rollout_ref.actor.optim.lr": 3e-4})) != a
    assert _fingerprint(_cfg(**{"trainer.project_name": "q"})) != a
    # --fresh: a salt makes a new run of the same config; the same salt is the same run again
    assert _fingerprint(_cfg(), fresh="t1") not in (a, _fingerprint(_cfg(), fresh="t2"))
    assert _fingerprint(_cfg(), fresh="t1") == _fingerprint(_cfg(), fresh="t1")
    assert re.fullmatch(r"run-[0-9a-f]{8}", identity.experiment_name("run", a))


def test_the_named_config_holds_the_name_wherever_the_config_interpolated_it():
    tree = identity.unnamed_tree(_cfg(**{"trainer.rollout_data_dir": "dumps/${trainer.experiment_name}"}))
    named = identity.named_config(tree, "run-0123abcd")
    assert (named.trainer.default_local_dir, named.trainer.rollout_data_dir, named.trainer.experiment_name) == (
        "checkpoints/p/run-0123abcd", "dumps/run-0123abcd", "run-0123abcd")
    assert identity.checkpoint_dir(tree, "run-0123abcd") == "checkpoints/p/run-0123abcd"
    with pytest.raises(Exception, match="not_a_key"):  # struct mode, as Hydra composes it
        named.trainer.not_a_key = 1


@pytest.mark.parametrize(
    "override, message",
    [
        ("trainer.experiment_name=mine", "set by the launcher"),
        ("+trainer.project_name=p2", "set by the launcher"),
        ("trainer.default_local_dir=/x", "set by the launcher"),
        ("trainer.resume_mode=disable", "set by the launcher"),
        ("++ray_kwargs.ray_init.num_cpus=4", "set by the launcher"),
        ("+ray_kwargs.ray_init.runtime_env.env_vars.WANDB_API_KEY=abc", "looks like a secret"),
        ("+ray_kwargs.ray_init.runtime_env.env_vars.HF_TOKEN=abc", "looks like a secret"),
        ("+x.db_password=abc", "looks like a secret"),
        ("+x.CLIENT_SECRET=abc", "looks like a secret"),
        # the same secrets as keys of a dict value (how Ray's runtime_env is usually written on one line)
        ("+ray_kwargs.ray_init.runtime_env.env_vars={HF_TOKEN: abc}", "looks like a secret"),
        ("+ray_kwargs.ray_init.runtime_env={env_vars: {WANDB_API_KEY: abc, X: 1}}", "looks like a secret"),
        ("++ray_kwargs.ray_init.runtime_env.env_vars={'hf_token':abc}", "looks like a secret"),
    ],
)
def test_launcher_owned_and_secret_overrides_are_refused(override, message):
    with pytest.raises(ValueError, match=message) as err:
        identity.check_user_overrides([override])
    assert "abc" not in str(err.value)


def test_ordinary_keys_with_token_in_their_name_are_not_secrets():
    identity.check_user_overrides(
        ["actor_rollout_ref.actor.ppo_max_token_len_per_gpu=1", "data.tokenizer=x", "rollout.max_num_batched_tokens=2",
         "+x.env_vars={TOKENIZERS_PARALLELISM: 'false', A: 'b:TOKEN'}", "data.path=s3://bucket/TOKEN:1"]
    )


def test_run_record_refuses_a_directory_of_another_config(tmp_path):
    ckpt = tmp_path / "ckpt"
    assert run_record.check_record(ckpt, "a" * 64) is None
    run_record.write_record(ckpt, "a" * 64, "run-aaaaaaaa", ["x=1"], job_id="7")
    record = run_record.write_record(ckpt, "a" * 64, "run-aaaaaaaa", ["x=1"], job_id="9")
    assert record["jobs"] == ["7", "9"] and json.loads((ckpt / run_record.RECORD).read_text())["jobs"] == ["7", "9"]
    with pytest.raises(ValueError, match="holds a run of a different config"):
        run_record.check_record(ckpt, "b" * 64)
    # the job's own check (job.sbatch.template) exits non-zero with the reason
    assert run_record.main(["check", str(ckpt), "b" * 64]) == 1
    assert run_record.main(["check", str(ckpt), "a" * 64]) == 0
    # checkpoints without a record are not provably this run
    (tmp_path / "bare" / "global_step_3").mkdir(parents=True)
    with pytest.raises(ValueError, match="no fgrpo_run.json"):
        run_record.check_record(tmp_path / "bare", "a" * 64)


# ---------------------------------------------------------------- rendering


@pytest.mark.parametrize("value", NASTY)
def test_control_characters_are_refused_everywhere_they_could_reach_the_script(tmp_path, value):
    res = Resources()
    with pytest.raises(ValueError, match="control character"):
        render.sbatch_directives("j", 1, 1, res, tmp_path / value, tmp_path)
    with pytest.raises(ValueError, match="control character"):
        render.sbatch_directives("j", 1, 1, res, tmp_path, tmp_path / value)
    with pytest.raises(ValueError, match="control character"):
        render.sbatch_directives("j", 1, 1, Resources(time=value), tmp_path, tmp_path)
    with pytest.raises(ValueError, match="control character"):
        render.sbatch_directives("j", 1, 1, Resources(extra=[f"--comment={value}"]), tmp_path, tmp_path)
    with pytest.raises(ValueError, match="control character"):
        render.train_command([f"trainer.default_local_dir={value}"])
    with pytest.raises(ValueError, match="control character"):
        identity.shell_exports({"FGRPO_X": value})


def test_directive_values_are_quoted_for_sbatchs_parser_and_placeholders_expand_once(tmp_path):
    weird = tmp_path / "a b'c\"d$(id)#e\\f"
    lines = render.sbatch_directives("job", 1, 1, Resources(time="1:00"), tmp_path, weird)
    assert '#SBATCH --chdir="' + str(weird).replace("\\", "\\\\").replace('"', '\\"') + '"' in lines
    assert "#SBATCH --signal=\"B:USR1@900\"" in lines and "#SBATCH --dependency=\"singleton\"" in lines
    with pytest.raises(ValueError, match="'%'"):
        render.sbatch_directives("job", 1, 1, Resources(), tmp_path / "100%", tmp_path)
    # one pass: a value holding a placeholder is not expanded again
    assert render.render_template("{{A}}-{{B}}", {"A": "{{B}}", "B": "x"}) == "{{B}}-x"
    with pytest.raises(ValueError, match="no value for placeholder"):
        render.render_template("{{C}}", {})


def test_train_command_words_reach_the_program_unchanged(tmp_path):
    overrides = ["a.b=x y", "c='q'", 'd="$(touch pwned)"', "e=`id`;rm -rf /"]
    script = "printf '%s\\n' " + render.train_command(overrides).split(" -m fgrpo_verl train ", 1)[1]
    script = script.replace('"${SLURM_NNODES}"', "").replace("\\\n", " ")
    env = dict(os.environ, SLURM_NNODES="1", FGRPO_GPUS_PER_NODE="1", FGRPO_HEAD_IP="10.0.0.1")
    out = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, check=True).stdout
    words = out.splitlines()
    assert words[: 1 + len(overrides)] == ["trainer.resume_mode=auto", *overrides]
    assert not (tmp_path / "pwned").exists()


# ---------------------------------------------------------------- status


def test_run_status_from_queue_checkpoint_and_record(tmp_path, monkeypatch):
    ckpt = tmp_path / "c"
    assert queue.run_status(ckpt, 10, [], None).state == "not started"
    assert queue.run_status(ckpt, 10, [("5", "PENDING")], None).state == "queued"
    assert queue.run_status(ckpt, 10, [("5", "PENDING"), ("6", "RUNNING")], None).job == "6"
    ckpt.mkdir()
    (ckpt / "latest_checkpointed_iteration.txt").write_text("4")
    running = queue.run_status(ckpt, 10, [("6", "RUNNING")], None)
    assert (running.state, running.step, running.total) == ("running", 4, 10)
    monkeypatch.setattr(queue, "finished_job_state", lambda job: "TIMEOUT")
    failed = queue.run_status(ckpt, 10, [], {"jobs": ["3", "6"]})
    assert (failed.state, failed.job) == ("failed", "6") and "TIMEOUT" in failed.detail
    assert "failed job 6, 4/10 steps" in failed.line("r")
    (ckpt / "latest_checkpointed_iteration.txt").write_text("10")
    assert queue.run_status(ckpt, 10, [], {"jobs": ["6"]}).state == "done"


# ---------------------------------------------------------------- steps


def test_total_steps_must_be_reachable_within_total_epochs():
    cfg = OmegaConf.create({"data": {"train_batch_size": 256}, "trainer": {"total_epochs": 30, "total_training_steps": 20000}})
    # 10k mazes: 39 steps per epoch x 30 epochs = 1,170 steps, not 20,000 (the maze recipe's old failure)
    with pytest.raises(ValueError, match=r"not reachable.*= 1170 steps; set trainer.total_epochs=513"):
        steps.step_plan(cfg, 10_000)
    plan = steps.step_plan(cfg, 1_000_000)
    assert (plan.steps_per_epoch, plan.total_steps) == (3906, 20000)
    cfg.trainer.total_training_steps = None
    assert steps.step_plan(cfg, 39_202).total_steps == 153 * 30
    with pytest.raises(ValueError, match="larger than the 100 training rows"):
        steps.step_plan(cfg, 100)


@pytest.mark.parametrize("key,value", [("data.train_batch_size", 0), ("trainer.total_epochs", None),
                                       ("trainer.total_epochs", -1), ("trainer.total_training_steps", 0)])
def test_a_step_count_that_sizes_no_step_is_the_users_error_naming_its_key(key, value):
    # a ValueError (exit 2, "invalid config" with the run's name), not a ZeroDivisionError or TypeError (a bug's exit)
    cfg = OmegaConf.create({"data": {"train_batch_size": 256}, "trainer": {"total_epochs": 3}})
    OmegaConf.update(cfg, key, value, force_add=True)
    with pytest.raises(ValueError, match=rf"^{key}={value!r}: expected an integer >= 1$"):
        steps.step_plan(cfg, 10_000)


# ---------------------------------------------------------------- trainer hook


class _Base:
    def on_step_end(self):
        self.base_calls = getattr(self, "base_calls", 0) + 1


def _trainer(step, total, save_freq):
    from fgrpo_verl.integration.trainer import FocalMetricsMixin

    cls = type("T", (FocalMetricsMixin, _Base), {})
    t = object.__new__(cls)
    t.global_steps, t.total_training_steps = step, total
    t.config = types.SimpleNamespace(trainer=types.SimpleNamespace(save_freq=save_freq))
    t.saved = []
    t._save_checkpoint = lambda: t.saved.append(t.global_steps)
    return t


def test_stop_request_saves_the_step_and_ends_the_loop_there(tmp_path, monkeypatch):
    stop = tmp_path / "stop"
    monkeypatch.setenv(preempt.STOP_ENV, str(stop))
    t = _trainer(3, 10, 5)
    t.on_step_end()
    assert (t.base_calls, t.saved, t.total_training_steps) == (1, [], 10)  # no request: nothing happens
    stop.touch()
    t.on_step_end()
    assert (t.saved, t.total_training_steps, (tmp_path / "stop.ack").read_text()) == ([3], 3, "3\n")
    # verl saved this step already (save_freq): not saved twice
    t = _trainer(5, 10, 5)
    t.on_step_end()
    assert (t.saved, t.total_training_steps) == ([], 5)
    # the last step: the run finishes normally
    (tmp_path / "stop.ack").unlink()
    t = _trainer(10, 10, 5)
    t.on_step_end()
    assert (t.saved, t.total_training_steps, (tmp_path / "stop.ack").exists()) == ([], 10, False)


def test_the_fgrpo_trainers_carry_the_hook():
    from fgrpo_verl.integration.trainer import TRAINERS

    from fgrpo_verl.integration.trainer import FocalMetricsMixin

    for cls in TRAINERS:
        assert cls.on_step_end is FocalMetricsMixin.on_step_end
        # and each closes the previous step's W&B row when a step begins (tests/test_wandb_offline_on_cpu.py)
        assert cls.on_step_begin is FocalMetricsMixin.on_step_begin


def _loop_trainer(ckpt: Path, keep: int | dict | None = None, async_save: bool = False, use_critic: bool = False):
    """An fgrpo trainer over verl's loop order, reduced to what the resume tracker sees: each step k begins,
    saves, then validates and logs. The save has verl's layout and order: ``global_step_k/actor`` (and
    ``/critic``) through verl's own checkpoint-manager rotation (``keep`` = max_actor/critic_ckpt_to_keep, one
    for both or ``{role: keep}``; it deletes the old *role folders*, leaving ``global_step_j/data.pt``), then
    ``data.pt``, then the tracker.
    ``seen`` records, at the moment of each log, the tracker and whether the checkpoint verl would resume from
    there (``find_latest_ckpt_path``) still has every role folder ``_load_checkpoint`` loads; ``crash_at``
    raises there."""
    from verl.utils.checkpoint.checkpoint_manager import BaseCheckpointManager, find_latest_ckpt_path

    from fgrpo_verl.job.resume_point import TRACKER
    from fgrpo_verl.integration.trainer import FocalMetricsMixin

    roles = ["actor", "critic"] if use_critic else ["actor"]
    rotation = {}
    for role in roles:  # one manager per role, as verl's worker groups hold
        rotation[role] = BaseCheckpointManager.__new__(BaseCheckpointManager)
        rotation[role].previous_saved_paths = []

    class VerlLoop:
        def on_step_begin(self):
            pass

        def _save_checkpoint(self):
            step_dir = ckpt / f"global_step_{self.global_steps}"
            for role in roles:
                (step_dir / role).mkdir(parents=True, exist_ok=True)
                (step_dir / role / "model_world_size_1_rank_0.pt").write_text("weights")
                (step_dir / role / "optim_world_size_1_rank_0.pt").write_text("adam moments")
                rotation[role].register_checkpoint(str(step_dir / role), keep.get(role) if isinstance(keep, dict) else keep)
            (step_dir / "data.pt").write_text("dataloader")
            if not async_save:
                (ckpt / TRACKER).write_text(str(self.global_steps))
            if self.global_steps == self.callback_fails_at:  # trainer.checkpoint_callback_class's on_save raised
                raise OSError("checkpoint upload failed")

        def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
            pass

        def fit(self, agent_loop_manager):
            for k in range(1, self.total + 1):
                self.global_steps = k
                self.on_step_begin()
                if k % self.save_freq == 0 or k == self.total:
                    self._save_checkpoint()
                if k == self.crash_at:
                    raise RuntimeError("killed between the checkpoint and the log")
                tracker = (ckpt / TRACKER).read_text() if (ckpt / TRACKER).exists() else None
                folder = find_latest_ckpt_path(str(ckpt))
                loadable = folder is None or all((Path(folder) / role).is_dir() for role in roles)
                self.seen.append((k, tracker))
                self.loadable.append(loadable)
                self.optimizer.append(_with_optimizer(ckpt))
                self._compute_metrics(None, {}, {}, k, 0)  # verl logs step k right after this call

    class Trainer(FocalMetricsMixin, VerlLoop):
        pass

    t = Trainer.__new__(Trainer)
    t._fgrpo_open_row = t._fgrpo_unreleased = None
    t._fgrpo_mu_hat = []
    t.config = OmegaConf.create({"trainer": {"default_local_dir": str(ckpt)}})
    t.use_critic = use_critic
    t.seen, t.loadable, t.crash_at, t.callback_fails_at = [], [], None, None
    t.optimizer = []
    return t


def _with_optimizer(ckpt: Path) -> list[int]:
    """The steps whose checkpoint still holds an optimizer shard."""
    return sorted({int(p.parent.parent.name.removeprefix("global_step_"))
                   for p in ckpt.glob("global_step_*/*/optim_world_size_*_rank_*.pt")})


def test_only_checkpoints_a_resume_can_need_keep_their_optimizer_states(tmp_path, monkeypatch):
    """AdamW's moments are 8 of a checkpoint's 12 bytes per parameter, and only a resume reads them: once step k is
    the resume point, the checkpoints before it keep their weights (for checkpoint selection) and lose their
    optimizer shards. The resume point itself always keeps them, also while a newer checkpoint is held back."""
    monkeypatch.delenv("FGRPO_KEEP_OPTIMIZER_STATES", raising=False)
    t = _loop_trainer(tmp_path / "a")
    t.total, t.save_freq = 4, 1
    t.fit(None)
    # at step k (saved, not yet logged) the tracker names k - 1, whose optimizer states are still there
    assert t.seen == [(1, None), (2, "1"), (3, "2"), (4, "3")]
    assert t.optimizer == [[1], [1, 2], [2, 3], [3, 4]]
    assert _with_optimizer(tmp_path / "a") == [4]
    for k in (1, 2, 3):
        assert (tmp_path / "a" / f"global_step_{k}" / "actor" / "model_world_size_1_rank_0.pt").exists()
    # killed after step 3's checkpoint, before its log: the resume point (2) still holds its optimizer states
    t = _loop_trainer(tmp_path / "b")
    t.total, t.save_freq, t.crash_at = 4, 1, 3
    with pytest.raises(RuntimeError):
        t.fit(None)
    assert (tmp_path / "b" / "latest_checkpointed_iteration.txt").read_text() == "2"
    assert _with_optimizer(tmp_path / "b") == [2, 3]
    # kept on request, for a deliberate resume from an older step
    monkeypatch.setenv("FGRPO_KEEP_OPTIMIZER_STATES", "1")
    t = _loop_trainer(tmp_path / "c", use_critic=True)
    t.total, t.save_freq = 3, 1
    t.fit(None)
    assert _with_optimizer(tmp_path / "c") == [1, 2, 3]


def test_a_step_is_the_resume_point_only_once_it_is_logged(tmp_path):
    """verl writes the resume tracker (latest_checkpointed_iteration.txt) when it saves step k, before it
    validates and logs k: killed in between, a restart resumed after k and k's metrics were never logged. The
    fgrpo trainers name k only once it is logged; a kill before that trains k again."""
    t = _loop_trainer(tmp_path / "a")
    t.total, t.save_freq = 5, 2
    t.fit(None)
    # while step k is validated and logged, the tracker still names the previous checkpoint (none before 2)
    assert t.seen == [(1, None), (2, None), (3, "2"), (4, "2"), (5, "4")]
    assert (tmp_path / "a" / "latest_checkpointed_iteration.txt").read_text() == "5"  # released when fit returns
    # killed between step 4's checkpoint and its log: the next start resumes from 2 and trains 3, 4 again
    t = _loop_trainer(tmp_path / "b")
    t.total, t.save_freq, t.crash_at = 6, 2, 4
    with pytest.raises(RuntimeError):
        t.fit(None)
    assert (tmp_path / "b" / "latest_checkpointed_iteration.txt").read_text() == "2"
    assert (tmp_path / "b" / "global_step_4").is_dir()  # saved, not yet the resume point
    # the first checkpoint, killed before its log: no resume point, a restart starts over
    t = _loop_trainer(tmp_path / "c")
    t.total, t.save_freq, t.crash_at = 3, 1, 1
    with pytest.raises(RuntimeError):
        t.fit(None)
    assert not (tmp_path / "c" / "latest_checkpointed_iteration.txt").exists()


def test_the_resume_point_is_not_held_back_to_a_checkpoint_that_is_gone_or_a_tracker_verl_did_not_write(tmp_path):
    # max_actor_ckpt_to_keep=1: saving k makes verl's rotation delete global_step_{k-1}/actor (its data.pt stays),
    # so k-1 cannot be the resume point: k at once, as in verl
    t = _loop_trainer(tmp_path / "keep1", keep=1)
    t.total, t.save_freq = 3, 1
    t.fit(None)
    assert t.seen == [(1, None), (2, "2"), (3, "3")]
    assert t.loadable == [True, True, True]
    assert (tmp_path / "keep1" / "global_step_1" / "data.pt").exists()  # the folder verl leaves behind
    # max_critic_ckpt_to_keep=1 with the actor's unbounded: the critic folder of k-1 is gone, the same
    t = _loop_trainer(tmp_path / "critic", keep={"critic": 1}, use_critic=True)
    t.total, t.save_freq = 3, 1
    t.fit(None)
    assert t.seen == [(1, None), (2, "2"), (3, "3")]
    assert t.loadable == [True, True, True]
    # max_actor_ckpt_to_keep=2: k-1 stays, so it is held back as usual
    t = _loop_trainer(tmp_path / "keep2", keep=2)
    t.total, t.save_freq = 3, 1
    t.fit(None)
    assert t.seen == [(1, None), (2, "1"), (3, "2")]
    assert t.loadable == [True, True, True]
    # killed between step 2's checkpoint and its log with max_actor_ckpt_to_keep=1: a restart finds a checkpoint
    # it can load (not global_step_1, whose actor folder verl deleted)
    from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path

    t = _loop_trainer(tmp_path / "keep1crash", keep=1)
    t.total, t.save_freq, t.crash_at = 3, 1, 2
    with pytest.raises(RuntimeError):
        t.fit(None)
    assert (Path(find_latest_ckpt_path(str(tmp_path / "keep1crash"))) / "actor").is_dir()
    # async_save: verl writes the tracker later, elsewhere; nothing is held back or released
    t = _loop_trainer(tmp_path / "async", async_save=True)
    t.total, t.save_freq = 2, 1
    t.fit(None)
    assert not (tmp_path / "async" / "latest_checkpointed_iteration.txt").exists()


def test_each_steps_wandb_row_is_closed_before_the_tracker_names_it(tmp_path):
    """The resume point names step k only once k's W&B row is closed, the last step included: fit returns before
    verl's Tracking.finish (main_ppo's finally), and a job killed in between with the tracker at T would never
    log row T again (the run counts as done)."""
    ckpt = tmp_path / "ckpt"
    t = _loop_trainer(ckpt)
    commits = []
    tracker = ckpt / "latest_checkpointed_iteration.txt"
    run = types.SimpleNamespace(log=lambda data, step, commit: commits.append(
        (step, tracker.read_text() if tracker.exists() else None)))
    t.logger = types.SimpleNamespace(logger={"wandb": types.SimpleNamespace(run=run)})
    t.total, t.save_freq = 3, 1
    t.fit(None)
    # row k closed while the tracker still names k - 1; the last row closed before fit releases step 3
    assert commits == [(1, None), (2, "1"), (3, "2")]
    assert tracker.read_text() == "3"


def test_a_checkpoint_callback_that_raises_after_the_tracker_leaves_the_previous_resume_point(tmp_path):
    """verl calls checkpoint_callback.on_save after it writes the tracker, and an exception there aborts training
    (verl's documented contract). Step k is then saved but never logged: the restart must resume before it."""
    t = _loop_trainer(tmp_path / "ckpt")
    t.total, t.save_freq, t.callback_fails_at = 4, 2, 4
    with pytest.raises(OSError, match="upload failed"):
        t.fit(None)
    assert (tmp_path / "ckpt" / "latest_checkpointed_iteration.txt").read_text() == "2"


def test_a_tracker_ahead_of_the_run_is_not_put_back(tmp_path):
    """A tracker naming a later step than the one being saved was left by another trajectory
    (trainer.resume_mode=disable or resume_path over a used directory): putting it back would make a restart
    resume from that other run's checkpoint; verl's own value stands, as without fgrpo."""
    ckpt = tmp_path / "ckpt"
    (ckpt / "global_step_10" / "actor").mkdir(parents=True)
    (ckpt / "latest_checkpointed_iteration.txt").write_text("10")
    t = _loop_trainer(ckpt)
    t.total, t.save_freq = 3, 1
    t.fit(None)
    assert t.seen == [(1, "1"), (2, "1"), (3, "2")]
    # a tracker that is not a step number (damaged): verl's value stands too
    (ckpt / "latest_checkpointed_iteration.txt").write_text("x\n")
    t = _loop_trainer(ckpt)
    t.total, t.save_freq = 1, 1
    t.fit(None)
    assert t.seen == [(1, "1")]


# ---------------------------------------------------------------- Ray temp dir


def test_private_dir_is_0700_and_refuses_symlinks_and_open_modes(tmp_path):
    made = ensure_private_dir(tmp_path / "ray")
    assert (made.stat().st_mode & 0o777) == 0o700
    ensure_private_dir(tmp_path / "ray")  # ours already: fine (a requeued job reuses its id)
    (tmp_path / "target").mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(tmp_path / "target")
    with pytest.raises(ValueError, match="symlink"):
        ensure_private_dir(tmp_path / "link")
    (tmp_path / "open").mkdir()
    (tmp_path / "open").chmod(0o755)
    with pytest.raises(ValueError, match="mode 755"):
        ensure_private_dir(tmp_path / "open")
    with pytest.raises(ValueError, match="does not exist"):
        ensure_private_dir(tmp_path / "no" / "parent")


# ---------------------------------------------------------------- plain sbatch path


@pytest.mark.parametrize(
    "override, message",
    [("algo=no_such_algo", "no_such_algo"),
     ("+ray_kwargs.ray_init.runtime_env.env_vars.WANDB_API_KEY=k", "looks like a secret")],
)
def test_train_sbatch_stops_when_its_config_does_not_compose(tmp_path, override, message):
    """`eval "$(fgrpo-verl job-env ...)"` would eval nothing and go on to start Ray; the script must end there."""
    import sys

    repo = Path(__file__).resolve().parent.parent
    env = dict(os.environ, FGRPO_PYTHON=sys.executable, SLURM_JOB_ID="1", SLURM_JOB_NODELIST="n1")
    out = subprocess.run(["bash", str(repo / "slurm" / "train.sbatch"), override], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, out.stdout + out.stderr
    assert message in out.stderr and "the config does not compose" in out.stderr
    assert "fgrpo-ray" not in out.stdout + out.stderr


def test_wandb_continue_rewinds_online_runs_to_the_resumed_checkpoint_when_asked(tmp_path):
    """Online, with FGRPO_WANDB_REWIND=1: a restart at checkpoint 5 exports WANDB_RESUME_FROM=<id>?_step=5 and
    drops WANDB_RESUME (W&B refuses both), and W&B's own settings parse it as a rewind to step 5 of that run."""
    import sys

    repo = Path(__file__).resolve().parent.parent
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("5")
    script = f'source {repo}/slurm/lifecycle.sh; fgrpo_wandb_continue; echo "from=${{WANDB_RESUME_FROM:-}} resume=${{WANDB_RESUME:-unset}}"'
    base = dict(os.environ, FGRPO_CHECKPOINT_DIR=str(tmp_path), WANDB_RUN_ID="abc123", WANDB_RESUME="allow",
                WANDB_MODE="online", FGRPO_PYTHON=sys.executable)
    out = subprocess.run(["bash", "-c", script], env=dict(base, FGRPO_WANDB_REWIND="1"), capture_output=True, text=True)
    assert "from=abc123?_step=5 resume=unset" in out.stdout, out.stderr
    # not asked: W&B resumes as before
    out = subprocess.run(["bash", "-c", script], env=base, capture_output=True, text=True)
    assert "from= resume=allow" in out.stdout
    import wandb

    settings = wandb.Settings()
    settings.update_from_env_vars({"WANDB_RESUME_FROM": "abc123?_step=5", "WANDB_RUN_ID": "abc123"})
    assert (settings.resume_from.run, settings.resume_from.value, settings.resume_from.metric) == ("abc123", 5, "_step")


def test_wandb_continue_trims_offline_runs_sets_the_flush_interval_and_never_stops_training(tmp_path):
    """Offline: the start trims the run's folders past its checkpoint and exports W&B's 1-s flush interval (a
    value of the user's wins). A damaged W&B file makes the trim fail: that is logged, and the job goes on
    (under `set -e` a failing trim would stop every start of the run before training)."""
    import sys

    repo = Path(__file__).resolve().parent.parent
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "latest_checkpointed_iteration.txt").write_text("5")
    script = (f'set -euo pipefail; source {repo}/slurm/lifecycle.sh; fgrpo_wandb_continue; '
              'echo "continued flush=$WANDB_X_TRANSACTION_LOG_FLUSH_INTERVAL"')
    base = dict(os.environ, FGRPO_CHECKPOINT_DIR=str(ckpt), WANDB_RUN_ID="abc123", WANDB_MODE="offline",
                WANDB_DIR=str(tmp_path), FGRPO_PYTHON=sys.executable)
    base.pop("WANDB_X_TRANSACTION_LOG_FLUSH_INTERVAL", None)
    folder = tmp_path / "wandb" / "offline-run-20260101_000000-abc123"
    folder.mkdir(parents=True)
    from fgrpo_verl.job import wandb_offline
    from test_wandb_offline_on_cpu import _history_payload

    path = folder / "run-abc123.wandb"
    wandb_offline.write_payloads(path, [_history_payload(s) for s in range(1, 8)])
    out = subprocess.run(["bash", "-c", script], env=base, capture_output=True, text=True)
    assert "continued flush=1" in out.stdout, out.stderr
    assert [wandb_offline.history_step(p) for p in wandb_offline.read_payloads(path)] == [1, 2, 3, 4, 5]
    out = subprocess.run(["bash", "-c", script], env=dict(base, WANDB_X_TRANSACTION_LOG_FLUSH_INTERVAL="5"),
                         capture_output=True, text=True)
    assert "continued flush=5" in out.stdout, out.stderr
    data = bytearray(path.read_bytes())
    data[20] ^= 0xFF  # damaged mid-file: not a cut a hard kill leaves
    path.write_bytes(bytes(data))
    out = subprocess.run(["bash", "-c", script], env=base, capture_output=True, text=True)
    assert "continued flush=1" in out.stdout, out.stderr
    assert "checksum mismatch" in out.stderr and "the offline trim failed" in out.stdout


# ---------------------------------------------------------------- --fresh, then a plain relaunch


def _fake_slurm(tmp_path, monkeypatch, **more):
    """`squeue` (nothing queued), `sbatch` (job 4242) and ``more`` commands (name=shell body) first on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in {"squeue": "exit 0", "sbatch": "echo 4242", **more}.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")




def test_a_plain_relaunch_after_a_submitted_fresh_run_resumes_the_fresh_run(tmp_path, monkeypatch):
    """`launch R --fresh` starts a new run of the same config; the next plain `launch R` (resubmitting what failed,
    `--status`) must mean that new run, not the abandoned one: otherwise it would resume and train the old run
    again next to the fresh one. A dry run with --fresh changes nothing."""
    from fgrpo_verl.launch import plan_jobs, submit_jobs

    _fake_slurm(tmp_path, monkeypatch)

    def plan(**kw):
        # training only: the recipe's evaluation needs benchmark files this test has no use for
        return plan_jobs("controls", ["grpo-kl"], [], tmp_path / "logs", tmp_path, evaluation=False, **kw)[1][0]

    old = plan()
    fresh = plan(fresh="20260101T000000")
    assert fresh.job_name != old.job_name and plan().job_name == old.job_name  # planned, not submitted: no change
    submit_jobs([fresh], tmp_path / "scripts", tmp_path / "logs", out=lambda *_: None)
    again = plan()
    assert (again.job_name, again.checkpoint_dir, again.fingerprint) == (
        fresh.job_name, fresh.checkpoint_dir, fresh.fingerprint)
    # a later --fresh supersedes it in turn
    newer = plan(fresh="20270101T000000")
    submit_jobs([newer], tmp_path / "scripts", tmp_path / "logs", out=lambda *_: None)
    assert plan().job_name == newer.job_name not in (old.job_name, fresh.job_name)


def test_one_config_launched_from_two_directories_is_two_wandb_runs(tmp_path):
    """Two users launching the same recipe run on the same shared data (absolute paths: same config, same
    experiment name) from their own directories train two runs: two checkpoint dirs and two W&B run ids (they
    shared one id before). A relaunch from the same directory keeps its id (a requeued job resumes that
    directory's checkpoint and continues its W&B run)."""
    from fgrpo_verl.launch import plan_jobs

    shared = [f"data.train_files={tmp_path}/shared/train.parquet", f"data.val_files={tmp_path}/shared/val.parquet"]

    def plan(workdir):
        workdir.mkdir(exist_ok=True)
        return plan_jobs("controls", ["grpo-kl"], shared, workdir / "logs", workdir)[1][0]

    alice, bob = plan(tmp_path / "alice"), plan(tmp_path / "bob")
    assert alice.job_name == bob.job_name and alice.checkpoint_dir != bob.checkpoint_dir

    def run_id(job):
        return re.search(r"^export WANDB_RUN_ID=(\S+)$", job.text, re.M).group(1)

    assert run_id(alice) != run_id(bob)
    assert run_id(plan(tmp_path / "alice")) == run_id(alice)


def test_a_submitted_run_keeps_its_wandb_run_id_on_every_relaunch(tmp_path, monkeypatch):
    """The id is pinned in the run record at the first submission, so a relaunch of a run (resubmitting what
    failed, after a package upgrade) never splits its W&B history in two runs:
    - a run first launched with an explicit WANDB_RUN_ID keeps it when relaunched without it;
    - a launch directory moved (or mounted elsewhere) with its checkpoints keeps its id.
    Runs never submitted, and a copy of a run whose original is still in place, get a derived id of their own
    (two directories: two W&B runs)."""
    import shutil

    from fgrpo_verl.launch import plan_jobs, submit_jobs

    _fake_slurm(tmp_path, monkeypatch)
    shared = [f"data.train_files={tmp_path}/shared/train.parquet", f"data.val_files={tmp_path}/shared/val.parquet"]

    def plan(workdir, **kw):
        workdir.mkdir(exist_ok=True)
        return plan_jobs("controls", ["grpo-kl"], shared, workdir / "logs", workdir, evaluation=False, **kw)[1][0]

    def run_id(job):
        found = re.findall(r"^export WANDB_RUN_ID=(\S+)$", job.text, re.M)
        assert found == [job.wandb_run_id]
        return found[0]

    def submit(job):
        submit_jobs([job], tmp_path / "scripts", tmp_path / "logs", out=lambda *_: None)

    with pytest.raises(ValueError, match="WANDB_RUN_ID='my/run' is invalid"):
        plan(tmp_path / "mine", wandb_run_id="my/run")
    # an explicit id at the first launch; the relaunch has none
    mine = plan(tmp_path / "mine", wandb_run_id="my-run-1")
    submit(mine)
    assert run_id(plan(tmp_path / "mine")) == "my-run-1"
    # a later explicit id replaces it, for good
    submit(plan(tmp_path / "mine", wandb_run_id="my-run-2"))
    assert run_id(plan(tmp_path / "mine")) == "my-run-2"

    # a launch directory moved with its checkpoints
    first = plan(tmp_path / "here")
    submit(first)
    shutil.move(tmp_path / "here", tmp_path / "there")
    assert run_id(plan(tmp_path / "there")) == run_id(first)
    submit(plan(tmp_path / "there"))
    # a copy while the original is in place (another user resuming from it) is a run of its own, both ways round
    shutil.copytree(tmp_path / "there", tmp_path / "copy")
    copy = plan(tmp_path / "copy")
    assert run_id(copy) not in (run_id(first), "my-run-2")
    submit(copy)
    assert run_id(plan(tmp_path / "copy")) == run_id(copy) and run_id(plan(tmp_path / "there")) == run_id(first)
    # never submitted: its own derived id
    assert run_id(plan(tmp_path / "new")) != run_id(first)


def test_plain_sbatch_path_keeps_the_wandb_run_id_its_run_started_with(tmp_path, monkeypatch, capsys):
    """`sbatch slurm/train.sbatch` (its `fgrpo-verl job-env`): the first start pins its id in the run record; a
    start after the launch directory moved (its data named by absolute paths, so the same config) continues the
    run's W&B run instead of opening a second one; an explicit WANDB_RUN_ID in the submitting environment is the
    run's id."""
    import shutil

    from fgrpo_verl.cli import main

    data = [f"data.train_files={tmp_path}/shared/train.parquet", f"data.val_files={tmp_path}/shared/val.parquet"]
    # a job start needs its model files (the launcher's preflight)
    model = tmp_path / "shared" / "model"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"")
    data += [f"actor_rollout_ref.model.path={model}"]

    def exports():
        assert main(["job-env", "algo=grpo", "trainer.project_name=p", *data]) == 0
        return dict(re.findall(r"^export (\w+)=(\S+)$", capsys.readouterr().out, re.M))

    monkeypatch.setenv("SLURM_JOB_ID", "7")
    (tmp_path / "a").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    env = exports()
    ckpt = tmp_path / "a" / env["FGRPO_CHECKPOINT_DIR"]
    assert run_record.read_record(ckpt)["wandb_run_id"] == env["WANDB_RUN_ID"]
    assert env["FGRPO_LAUNCH_DIR"] == str(tmp_path / "a") and env["FGRPO_WANDB_LOGGER"] == "1"
    assert exports()["WANDB_RUN_ID"] == env["WANDB_RUN_ID"]  # a requeue

    shutil.move(tmp_path / "a", tmp_path / "b")
    monkeypatch.chdir(tmp_path / "b")
    assert exports()["WANDB_RUN_ID"] == env["WANDB_RUN_ID"]
    # `WANDB_RUN_ID=mine sbatch slurm/train.sbatch ...`: the job exports it, and pins it for later starts without it
    monkeypatch.setenv("WANDB_RUN_ID", "mine/2")  # wandb.init would refuse it in the job
    assert main(["job-env", "algo=grpo", "trainer.project_name=p", *data]) == 2
    assert "WANDB_RUN_ID='mine/2' is invalid" in capsys.readouterr().err
    monkeypatch.setenv("WANDB_RUN_ID", "mine")
    assert exports()["WANDB_RUN_ID"] == "mine"
    monkeypatch.delenv("WANDB_RUN_ID")
    assert exports()["WANDB_RUN_ID"] == "mine"


def test_plain_sbatch_path_refuses_a_secret_in_a_dict_value_too(capsys):
    """slurm/train.sbatch evals job-env's output; its overrides get the same secret check as the launcher's."""
    from fgrpo_verl.cli import main

    assert main(["job-env", "+ray_kwargs.ray_init.runtime_env.env_vars={HF_TOKEN: abc}"]) == 2
    err = capsys.readouterr().err
    assert "HF_TOKEN" in err and "looks like a secret" in err and "abc" not in err


@pytest.mark.parametrize(
    "text, seconds",
    [("30", 1800), ("1:30", 90), ("2:00:00", 7200), ("1-0", 86400), ("1-02:03", 93780), ("1-00:00:01", 86401),
     ("UNLIMITED", None), ("infinite", None)],
)
def test_slurm_time_formats(text, seconds):
    assert render.slurm_seconds(text) == seconds


def test_a_time_limit_within_the_signal_lead_is_refused(tmp_path):
    """USR1 comes <lead> s before the limit: with a limit no longer than the lead it comes at once, and every start
    would train one step, checkpoint and requeue itself (reloading the model each time) until the run ends."""
    from fgrpo_verl.launch import plan_jobs

    def plan(*overrides):
        return plan_jobs("controls", ["grpo-kl"], list(overrides), tmp_path / "logs", tmp_path)[1][0]

    with pytest.raises(ValueError, match=r"time limit 10 \(600 s\) .* slurm.signal_lead_s=900"):
        plan("slurm.time=10")
    assert '#SBATCH --time="10"' in plan("slurm.time=10", "slurm.signal_lead_s=120").text
    with pytest.raises(ValueError, match="slurm time limit '1:2:3:4'"):
        render.slurm_seconds("1:2:3:4")


def test_a_recipe_env_that_moves_the_data_moves_the_identity(tmp_path, monkeypatch):
    """`${oc.env:FGRPO_DATA_DIR,data}` in dataset/deepscaler.yaml resolves in the job from the recipe's `env:`. The
    launch must resolve it the same way: otherwise two recipes that differ only in their data dir would hash the
    submitter's path, get one identity, and the second would resume the first's checkpoints on other data."""
    import yaml

    from fgrpo_verl.launch import plan_jobs
    from fgrpo_verl.config.paths import recipes_dir

    monkeypatch.delenv("FGRPO_DATA_DIR", raising=False)
    recipe = yaml.safe_load((recipes_dir() / "controls.yaml").read_text())
    jobs = {}
    for sub in ("a", "b"):
        path = tmp_path / f"controls_{sub}.yaml"
        path.write_text(yaml.safe_dump({**recipe, "env": {"FGRPO_DATA_DIR": str(tmp_path / sub)}}))
        jobs[sub] = plan_jobs(str(path), ["grpo-kl"], [], tmp_path / "logs", tmp_path)[1][0]
    assert jobs["a"].job_name != jobs["b"].job_name
    assert str(jobs["a"].config.data.train_files) == f"{tmp_path}/a/deepscaler/train.parquet"
    assert "FGRPO_DATA_DIR" not in os.environ  # the launcher's own environment is left as it was


@pytest.mark.parametrize("ack, driver_rc, requeued, rc", [(True, 0, True, 0), (True, 1, True, 0), (False, 1, False, 1),
                                                         (False, 0, False, 0)])
def test_a_stop_acknowledged_is_requeued_even_when_the_driver_exits_nonzero_after_it(tmp_path, ack, driver_rc,
                                                                                      requeued, rc):
    """The ack is written after the stop step's checkpoint. A driver that then fails on its way out (Ray or vLLM
    teardown errors are common) must not turn a clean stop into a FAILED job that nobody resumes."""
    repo = Path(__file__).resolve().parent.parent
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/scontrol.log\n')
    (bin_dir / "scontrol").chmod(0o755)
    stop = tmp_path / ".fgrpo-stop"
    driver = f"{'echo 7 > ' + str(stop) + '.ack; ' if ack else ''}exit {driver_rc}"
    script = (f"source {repo}/slurm/lifecycle.sh; fgrpo_ray_down() {{ :; }}; fgrpo_watch_stop_signal; "
              f"fgrpo_train bash -c {driver!r}; echo rc=$?")
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", FGRPO_STOP_FILE=str(stop),
               FGRPO_CHECKPOINT_DIR=str(tmp_path), SLURM_JOB_ID="77")
    out = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=30)
    assert f"rc={rc}" in out.stdout, out.stdout + out.stderr
    log = tmp_path / "scontrol.log"
    assert (log.read_text() if log.exists() else "") == ("requeue 77\n" if requeued else "")


def test_status_without_the_data_here_still_knows_a_finished_run_is_done(tmp_path, monkeypatch):
    """`--status` plans without requiring the training data (a login node without it gives no step count); the
    submit, which requires it, records the run's total steps, so a finished run is reported done, not failed."""
    from fgrpo_verl.launch import plan_jobs, run_states, submit_jobs

    _fake_slurm(tmp_path, monkeypatch, sacct="echo COMPLETED")
    import pyarrow as pa
    import pyarrow.parquet as pq

    train = tmp_path / "data" / "deepscaler" / "train.parquet"
    train.parent.mkdir(parents=True)
    pq.write_table(pa.table({"i": pa.array(range(2_560), pa.int32())}), train)  # 10 steps/epoch x 10 epochs

    def plan():
        return plan_jobs("controls", ["grpo-kl"], [], tmp_path / "logs", tmp_path, evaluation=False)[1][0]

    job = plan()
    assert job.total_steps == 100
    submit_jobs([job], tmp_path / "scripts", tmp_path / "logs", out=lambda *_: None)
    (job.checkpoint_dir / "latest_checkpointed_iteration.txt").write_text("100")
    train.unlink()
    blind = plan()
    # the same run with or without its data at hand (save_freq, derived from the data, is not in the hash)
    assert (blind.job_name, blind.total_steps) == (job.job_name, None)
    (status,) = run_states([blind])
    assert (status.state, status.step, status.total) == ("done", 100, 100)


def test_the_same_data_named_relative_absolute_or_by_env_is_one_run(tmp_path, monkeypatch):
    """`data/...` from the launch dir, its absolute path, and FGRPO_DATA_DIR set to it are the same files: one run
    (a relaunch from a shell that exports FGRPO_DATA_DIR must resume, not start a second run from step 0). Data
    under another directory is another run."""
    from fgrpo_verl.launch import plan_jobs

    monkeypatch.delenv("FGRPO_DATA_DIR", raising=False)

    def name(*overrides):
        return plan_jobs("controls", ["grpo-kl"], list(overrides), tmp_path / "logs", tmp_path)[1][0].job_name

    base = name()
    assert name("data.train_files=data/deepscaler/train.parquet") == base
    assert name(f"data.train_files={tmp_path}/data/deepscaler/train.parquet") == base
    monkeypatch.setenv("FGRPO_DATA_DIR", str(tmp_path / "data"))
    assert name() == base
    monkeypatch.setenv("FGRPO_DATA_DIR", str(tmp_path / "other"))
    assert name() != base


@pytest.mark.parametrize("manifest_fails", [False, True])
def test_a_submit_that_stops_half_way_records_its_runs_and_says_why_it_stopped(tmp_path, monkeypatch, capsys,
                                                                                manifest_fails):
    """sbatch refuses a job after others were queued: --status must still find the queued runs (the manifest is
    written), and the error the user reads is sbatch's with the count, also when the manifest cannot be written."""
    import fgrpo_verl.launch as launch
    import fgrpo_verl.launch.manifest as manifest
    from fgrpo_verl.cli import main

    real_plan = launch.plan_jobs
    monkeypatch.setattr(launch, "plan_jobs", lambda *a, **kw: real_plan(*a, **{**kw, "require_data": False,
                                                                              "check": False}))
    stopped = RuntimeError("sbatch x.sbatch failed (exit 1): Memory specification can not be satisfied; 1 training "
                           "and 0 evaluation job(s) were submitted before it and stay queued (job ids 11)")

    def submit(*a, **kw):
        raise stopped

    monkeypatch.setattr(launch, "submit_jobs", submit)
    if manifest_fails:
        def unwritable(*a, **kw):
            raise PermissionError(13, "Permission denied", "slurm_jobs/.controls.runs.json.tmp")
        monkeypatch.setattr(manifest, "write_manifest", unwritable)
    monkeypatch.chdir(tmp_path)
    assert main(["launch", "controls", "--only", "grpo-kl", "--no-eval"]) == 1
    err = capsys.readouterr().err
    assert "Memory specification can not be satisfied" in err and "stay queued (job ids 11)" in err, err
    written = manifest.manifest_path(tmp_path, "controls")
    if manifest_fails:
        assert "Permission denied" not in err and not written.exists()
    else:
        (entry,) = json.loads(written.read_text()).values()
        assert [e["run_name"] for e in entry] == ["grpo-kl"]
