"""verl v1 trainers that add fgrpo-verl's metrics to verl's own step and validation metrics.

Selected with ``trainer.v1.trainer_mode=fgrpo_sync`` (fgrpo-verl's default; ``fgrpo_colocate_async`` and
``fgrpo_separate_async`` wrap verl's asynchronous modes the same way). Each is verl's trainer for that mode plus
:class:`FocalMetricsMixin`, which hooks the methods below and otherwise leaves verl's training loop alone:

- ``_compute_advantage``: runs verl's, capturing the ``FocalResult`` the ``fgrpo`` estimator built for the batch,
  and adds ``fgrpo/*`` (``fgrpo_verl/monitoring/focal_metrics.py``). Nothing is computed twice. Other estimators: no-op.
- ``_update_actor``: turns the loss-side ``actor/fgrpo/*_x_share`` averages into positive-token means
  (``fgrpo_verl/integration/loss.py``).
- ``_val_metrics_update``: adds unbiased ``val-core/<source>/pass@<k>`` (``fgrpo_verl/monitoring/val_pass_at_k.py``).
- ``_compute_metrics`` (last call before verl logs a step): logs μ̂ as a W&B histogram, to W&B only.
- ``on_step_begin`` (first call after verl logged the previous step): closes that step's W&B row at once
  (``fgrpo_verl.job.tracking.commit_wandb_row``), so a job killed during the next step does not lose it; ``fit``
  closes the last step's row the same way when verl's loop returns.
- ``_save_checkpoint`` / ``on_step_begin`` / ``fit``: a restart resumes from step k only once step k is logged
  (``fgrpo_verl/job/resume_point.py``; verl saves a step before it validates and logs it).
- ``on_step_end``: on the Slurm job's stop request, a checkpoint and the end of the loop (``job/preempt.py``).
- ``on_init_end``: with ``trainer.save_per_epoch``, ``save_freq`` = verl's steps per epoch of the data it kept
  (``fgrpo_verl/job/save_per_epoch.py``).
- ``fit``: after a normal end, finishes W&B and stops its service process (``fgrpo_verl.job.tracking.close_wandb``).
- ``fit``: on a resumed start (verl's global step > 0), skips the validation before training, which
  ``trainer.val_before_train`` asks for on a fresh start (:func:`fresh_start_validation_only`).

verl's base trainer branches on the literal ``self.trainer_mode == "sync"`` (replay-buffer class, checkpoint and
prompt-refill paths). ``trainer_mode`` is therefore a property that reports the wrapped verl mode, so every such
branch, and the ``trainer.v1.<mode>`` settings lookup, behaves exactly as under the wrapped mode. verl code that
reads ``config.trainer.v1.<config's trainer_mode>`` itself (rollout skip) finds ``trainer.v1.fgrpo_*``, which
``hydra_configs/fgrpo_trainer.yaml`` declares as aliases of the wrapped mode's block.

This module imports verl's v1 trainer stack, so nothing imports it up front: ``fgrpo_verl.integration.plugin``
imports it when verl's ``verl.trainer.ppo.v1`` is imported (every process that can build a trainer does), and
importing it registers the trainers (:func:`register`, at the end). The hooks above must exist on verl's classes
with the parameters they pass on (a renamed private method would make the metrics vanish silently): the trainer
modes are offered on verl 0.9.1 only (``fgrpo_verl.verl_compat``), and tests/test_fgrpo_trainer_hooks_on_cpu.py
holds every hook to that release's signatures.
"""

from __future__ import annotations

import contextlib

import torch
from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY, register_trainer
from verl.trainer.ppo.v1.trainer_colocate_async import PPOTrainerColocateAsync
from verl.trainer.ppo.v1.trainer_separate_async import PPOTrainerSeparateAsync
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

from fgrpo_verl.focal import FocalSettings
from fgrpo_verl.integration import plugin, sessions
from fgrpo_verl.integration.estimator import capture_results
from fgrpo_verl.integration.loss import METRIC_PREFIX as LOSS_PREFIX
from fgrpo_verl.job import resume_point, save_per_epoch
from fgrpo_verl.job.preempt import stop_at_step_boundary
from fgrpo_verl.job.tracking import close_wandb, commit_wandb_row
from fgrpo_verl.monitoring.focal_metrics import focal_step_metrics, real_groups
from fgrpo_verl.monitoring.val_pass_at_k import validation_pass_at_k

MU_HAT_HISTOGRAM = "fgrpo/mu_hat_hist"


class FocalMetricsMixin:
    """Adds the fgrpo metrics to a verl v1 trainer; ``verl_mode`` names the verl mode it wraps."""

    verl_mode: str
    name: str

    @property
    def trainer_mode(self) -> str:
        return self.verl_mode

    @trainer_mode.setter
    def trainer_mode(self, value: str) -> None:
        # verl's __init__ assigns config.trainer.v1.trainer_mode, i.e. our registered name.
        if value not in (self.name, self.verl_mode):
            raise ValueError(f"trainer.v1.trainer_mode={value!r} does not match trainer {self.name!r}")

    def __init__(self, config):
        # Validate the fgrpo block before verl builds anything: pass@k needs its success_threshold.
        self._fgrpo_settings = FocalSettings.from_config(config.algorithm.get("fgrpo"))
        self._fgrpo_mu_hat: list[tuple[torch.Tensor, int]] = []  # (μ̂ of the real groups, largest N) per batch
        self._fgrpo_open_row: int | None = None  # the step verl is about to log (and W&B will keep open)
        self._fgrpo_unreleased: int | None = None  # a saved step the resume tracker does not name yet
        super().__init__(config)

    def _compute_advantage(self, batch, metrics: dict):
        # verl reads the batch rows in batch.keys order, so these tags line up with the estimator's rows.
        real_rows = torch.tensor([not tag.get("is_padding", False) for tag in batch.tags], dtype=torch.bool)
        with capture_results() as captured, sessions.capture_final_rows() as final_rows:
            out = super()._compute_advantage(batch, metrics)
        if not captured:  # another estimator: nothing focal to report
            return out
        if len(captured) != 1:
            raise RuntimeError(f"expected one fgrpo estimator call per advantage computation, saw {len(captured)}")
        settings, result = captured[0]
        if final_rows and final_rows[0] is not None:  # multi-output sessions: the estimator saw final outputs only
            real_rows = real_rows[torch.as_tensor(final_rows[0], dtype=torch.long)]
        metrics.update(focal_step_metrics(result, settings.gamma, real_rows))
        keep = real_groups(result, real_rows)
        if bool(keep.any()):
            self._fgrpo_mu_hat.append((result.mu_hat[keep].detach().cpu(), int(result.group_size[keep].max())))
        return out

    def _update_actor(self, batch, metrics: dict):
        batch = super()._update_actor(batch, metrics)
        metrics.update(positive_token_means(metrics))
        return batch

    def _val_metrics_update(self, data_sources, sample_uids, reward_extra_infos_dict, sample_turns, expected_acc_counts=None):
        metric_dict = super()._val_metrics_update(
            data_sources, sample_uids, reward_extra_infos_dict, sample_turns, expected_acc_counts=expected_acc_counts
        )
        metric_dict.update(
            validation_pass_at_k(
                data_sources,
                sample_uids,
                reward_extra_infos_dict,
                self._fgrpo_settings.success_threshold,
                expected_acc_counts,
            )
        )
        return metric_dict

    def _fgrpo_step_logged(self) -> None:
        # verl has logged the step (and nothing logs it after this point): close its W&B row, then let a restart
        # resume from it
        commit_wandb_row(getattr(self, "logger", None), self._fgrpo_open_row)
        self._fgrpo_open_row = None
        resume_point.release(self, self._fgrpo_unreleased)
        self._fgrpo_unreleased = None

    def on_step_begin(self):
        self._fgrpo_step_logged()  # the previous step's
        super().on_step_begin()

    def on_step_end(self):
        super().on_step_end()
        # on the Slurm job's stop request (time limit), checkpoint at the step boundary and leave the loop
        stop_at_step_boundary(self)

    def on_init_end(self):
        # verl has built its data loader: a checkpoint each epoch of what it kept (job/save_per_epoch.py)
        save_per_epoch.apply(self)
        super().on_init_end()

    def _save_checkpoint(self):
        # verl saves step k before it validates and logs it: resume from k only once it is logged
        before = resume_point.read_tracker(self)
        try:
            super()._save_checkpoint()
        finally:
            # also when verl's checkpoint_callback.on_save raises after the tracker was written: training aborts
            # there, before step k is logged
            self._fgrpo_unreleased = resume_point.hold_back(self, before)

    def fit(self, *args, **kwargs):
        with fresh_start_validation_only(self):
            out = super().fit(*args, **kwargs)
        # a normal return: the last step (or the step a stop request ended on) is logged. Not on an exception:
        # a step that crashed before its log is trained again by the next start. Its W&B row is closed here too:
        # verl's Tracking.finish comes only after fit returns (main_ppo), and a kill in between with the tracker
        # at the last step would leave that row unlogged for good.
        self._fgrpo_step_logged()
        # and W&B is finished and its service shut down here, while it still runs (tracking.close_wandb): at the
        # TaskRunner's exit it is gone, and W&B's atexit hook printed a "Connection lost" traceback
        close_wandb(getattr(self, "logger", None))
        return out

    def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
        super()._compute_metrics(batch, metrics, timing_raw, global_steps, epoch)
        self._fgrpo_open_row = int(global_steps)
        mu_hat, self._fgrpo_mu_hat = self._fgrpo_mu_hat, []
        tracking = getattr(self, "logger", None)
        if mu_hat and tracking is not None and "wandb" in tracking.logger:
            # A histogram object would break scalar-only loggers (console, tensorboard, ...): W&B only. The other
            # loggers get the fgrpo/mu_hat_q* quantiles. Same step as the scalars, so W&B merges them into one row.
            import numpy as np
            import wandb

            n = max(n for _, n in mu_hat)  # one bin centred on each attainable value j/N
            counts = np.histogram(torch.cat([m for m, _ in mu_hat]).double().numpy(),
                                  bins=np.linspace(-0.5 / n, 1.0 + 0.5 / n, n + 2))
            tracking.log(data={MU_HAT_HISTOGRAM: wandb.Histogram(np_histogram=counts)}, step=global_steps,
                         backend=["wandb"])


@contextlib.contextmanager
def fresh_start_validation_only(trainer):
    """For the ``fit`` of a resumed start, ``trainer.val_before_train`` reads false.

    verl's trainer resumes from the latest checkpoint while it is built (its ``_setup``), and ``fit`` then reads
    ``val_before_train`` on every start: each requeue would run the validation again (AIME25 x 64 in the recipes)
    and log it at the resumed step, a row off the run's validation grid, for weights that step's own validation
    already scored. A fresh start (global step 0) validates as configured; ``val_only`` keeps it (checking a
    checkpoint is its point). The setting is restored when ``fit`` ends, so the config reads as given afterwards."""
    from omegaconf import open_dict, read_write

    cfg = trainer.config.trainer
    step = int(getattr(trainer, "global_steps", 0) or 0)
    if step <= 0 or not cfg.get("val_before_train", True) or cfg.get("val_only", False):
        yield
        return
    print(f"[fgrpo] resuming at step {step}: skipping the validation before training "
          "(trainer.val_before_train validates a fresh start only)", flush=True)
    before = cfg.get("val_before_train", True)  # verl's default where the config leaves the key out
    with read_write(cfg), open_dict(cfg):
        cfg.val_before_train = False
    try:
        yield
    finally:
        with read_write(cfg), open_dict(cfg):
            cfg.val_before_train = before


def positive_token_means(actor_metrics: dict) -> dict[str, float]:
    """``actor/fgrpo/pos_{logprob,ratio}_mean`` = step average of ``*_x_share`` / step average of ``adv_pos_share``."""
    share = float(actor_metrics.get(LOSS_PREFIX + "adv_pos_share") or 0.0)
    shares = {name: actor_metrics.get(f"{LOSS_PREFIX}{name}_x_share") for name in ("pos_logprob", "pos_ratio")}
    return {f"{LOSS_PREFIX}{name}_mean": float(value) / share for name, value in shares.items()
            if value is not None and share > 0}


class FocalSyncTrainer(FocalMetricsMixin, PPOTrainerSync):
    verl_mode, name = "sync", "fgrpo_sync"


class FocalColocateAsyncTrainer(FocalMetricsMixin, PPOTrainerColocateAsync):
    verl_mode, name = "colocate_async", "fgrpo_colocate_async"


class FocalSeparateAsyncTrainer(FocalMetricsMixin, PPOTrainerSeparateAsync):
    verl_mode, name = "separate_async", "fgrpo_separate_async"


TRAINERS = (FocalSyncTrainer, FocalColocateAsyncTrainer, FocalSeparateAsyncTrainer)


def register() -> None:
    """Register the trainers in verl's ``TRAINER_REGISTRY`` (``fgrpo_verl.integration.plugin``'s duplicate policy)."""
    for cls in TRAINERS:
        plugin.register(TRAINER_REGISTRY, cls.name, cls, "trainer mode", register_trainer)


register()
