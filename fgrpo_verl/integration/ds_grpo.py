"""DS-GRPO, "differential smoothing" (Gai, Zeng, Zhang, Raghunathan 2025, arXiv 2511.19942): the control of the
F-GRPO paper's Table 3, as a verl advantage estimator and a verl policy loss, both registered as ``ds_grpo``.

The method changes the reward of correct and of wrong trajectories differently, by the policy's own probability
of the trajectory. Its reward-level form, with the base policy:

    r_DS(τ) = r(τ) − γ_p · log π_base(τ)    τ correct: a bonus, larger the rarer τ is (entropy-raising)
    r_DS(τ) = r(τ) + γ_n · log π_base(τ)    τ wrong:   a penalty, larger the rarer τ is (entropy-lowering)

and its GRPO form (DS-GRPO), on the group-normalised advantage A_i, with the sampling policy π_θold:

    A_i^DS = A_i − γ_p · log π_θold(y_i | x)   if r_i = 1,        A_i^DS = A_i + γ_n · log π_θold(y_i | x)   else,

where log π_θold(y_i | x) = Σ_t log π_θold(y_i,t | x, y_i,<t) is the whole response's log-probability, a constant
(no gradient) like A_i. Source: the stored copy of arXiv 2511.19942 holds only its abstract and introduction; both
equations are as two public transcriptions of the paper give them (they agree with each other and with the
abstract: the modification that counters diversity collapse is the one on correct trajectories). γ_p, γ_n ≥ 0
are that paper's names; neither the F-GRPO paper nor the part of Gai et al. available to us gives values, so
the defaults are ours (``hydra_configs/control/ds_grpo.yaml`` says how they were chosen).

Why a registered estimator *and* a registered loss: A_i^DS needs which rollouts are correct (the rewards) and
log π_θold (the log-probabilities). verl gives an advantage estimator the rewards, mask, group index and config,
no log-probabilities; it gives a policy loss the old and new log-probabilities and the advantages, no rewards.
So the ``ds_grpo`` estimator computes A_i (the ``fgrpo`` estimator's: GRPO at ``algorithm.fgrpo.gamma=0``) and
passes each rollout's correctness to the loss in the sign bit of its advantage, and the ``ds_grpo`` loss adds the
term and calls the base loss (``base_loss_mode``, through the ``fgrpo`` mode, so ``actor/fgrpo/*`` stays). With
binary rewards a correct rollout of a mixed group has A_i > 0 and a wrong one A_i < 0; a uniform group has A_i = 0,
written +0.0 when correct and −0.0 when wrong. An IEEE zero's sign changes no loss value, and between the two verl
only copies the advantages (into its transfer queue, then the actor's micro-batches), so the loss reads
correctness with ``torch.signbit`` and the base loss sees GRPO's advantage plus the DS term exactly. Every step the
actor logs ``actor/ds_grpo/correct_share``, the share of rollouts the loss read as correct: with 1/0 rewards it
equals verl's ``critic/score/mean`` when the channel is intact. The other place that sees both inputs is a step in
the trainer hooks (``fgrpo_verl/integration/trainer.py``); it would work in the ``fgrpo_*`` trainer modes only and
needs a second round trip through the transfer queue, while the two registry entries work in every trainer mode
and are what verl's own ``compute_advantage`` and ``get_policy_loss_fn`` call (tests/test_ds_grpo_on_cpu.py).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from types import SimpleNamespace

import torch
from verl.workers.config import PolicyLossConfig

from fgrpo_verl.integration import loss, plugin
from fgrpo_verl.integration.estimator import ESTIMATOR_NAME, compute_fgrpo_outcome_advantage, settings_of

NAME = "ds_grpo"
# the estimators that read algorithm.fgrpo, each a group estimator over the rollouts' final outputs
FGRPO_ESTIMATORS = (ESTIMATOR_NAME, NAME)
KEY = "actor_rollout_ref.actor.policy_loss"
METRIC_PREFIX = "actor/ds_grpo/"


@dataclass
class DSPolicyLossConfig(PolicyLossConfig):
    """verl's ``PolicyLossConfig`` plus DS-GRPO's keys; ``hydra_configs/control/ds_grpo.yaml`` declares their values.

    ``adv_estimator`` is ``${algorithm.adv_estimator}`` there: the loss reads correctness from the ``ds_grpo``
    estimator's advantages, and any other estimator writes +0.0 for a wrong rollout of an all-wrong group."""

    base_loss_mode: str | None = None
    gamma_p: float | None = None
    gamma_n: float | None = None
    adv_estimator: str | None = None

    def __post_init__(self):
        parent = getattr(super(), "__post_init__", None)
        if parent is not None:
            parent()
        if self.loss_mode != NAME:
            raise ValueError(f"{KEY}.loss_mode={self.loss_mode!r} with _target_ {type(self).__qualname__}: the target "
                             f"is DS-GRPO's, set loss_mode={NAME} (or drop control=ds_grpo)")
        if self.adv_estimator != NAME:
            raise ValueError(f"algorithm.adv_estimator={self.adv_estimator!r} with {KEY}.loss_mode={NAME}: the loss reads "
                             f"each rollout's correctness from the {NAME} estimator's advantages; set "
                             f"algorithm.adv_estimator={NAME} (control=ds_grpo sets both)")
        for key in ("gamma_p", "gamma_n"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{KEY}.{key}={value!r} is invalid: expected a finite number >= 0 (0 switches that "
                                 "side of the smoothing off)")
        if self.base_loss_mode in (None, NAME):
            raise ValueError(f"{loss.BASE_KEY}={self.base_loss_mode!r} is invalid: it names the registered loss "
                             f"{NAME} delegates to (vanilla for GRPO and DAPO, cispo for CISPO)")
        loss.base_loss_mode(SimpleNamespace(policy_loss=self))  # a registered loss other than fgrpo, or raise


def _setting(config, key: str) -> float:
    value = getattr(getattr(config, "policy_loss", None), key, None)
    if value is None:
        raise ValueError(f"policy loss `{NAME}` needs {KEY}.{key}: select control=ds_grpo (its _target_ "
                         f"{__name__}.DSPolicyLossConfig declares it)")
    return float(value)


@torch.no_grad()
def mark_correctness(advantages, scores: torch.Tensor, threshold: float, rows: torch.Tensor, index) -> torch.Tensor:
    """``advantages`` with every zero signed by its row's correctness: +0.0 correct, −0.0 wrong (module docstring).

    The sign carries correctness only when, within each group (``index``), the correct rollouts (of ``rows``: those
    with a response) share one score and the wrong ones another: a graded score gives a correct rollout below its
    group's mean A < 0. Groups may differ (verl scores some data sources 1/0, others +-1). Checked on every batch,
    so a graded reward fails at its first (KL and overlong shaping in the reward are refused before Ray)."""
    correct = scores > threshold
    found: dict = {}  # (group, correct) -> its scores, exactly: the slightest spread gives a correct rollout A < 0
    for uid, ok, score, live in zip(index, correct.tolist(), scores.tolist(), rows.tolist()):
        if live:
            found.setdefault((uid, ok), set()).add(score)
    graded = next(((ok, sorted(kind)) for (_, ok), kind in found.items() if len(kind) > 1), None)
    if graded is not None:
        raise ValueError(
            f"algorithm.adv_estimator={NAME} needs binary rewards, within each group one score for its correct "
            f"rollouts (summed reward > algorithm.fgrpo.success_threshold={threshold:g}) and one for its wrong ones, "
            f"but the {'correct' if graded[0] else 'wrong'} rollouts of one group scored {graded[1][:4]} (4 at most): "
            "use a reward function that scores the verdict only, 1/0 or +-1 (reward.custom_reward_function, or "
            "verl's default for the data source), or another estimator (fgrpo, grpo)")
    sign = torch.where(correct, 1.0, -1.0).to(advantages.dtype)[:, None]
    return torch.where(advantages == 0, torch.copysign(torch.zeros_like(advantages), sign), advantages)


def compute_ds_grpo_outcome_advantage(token_level_rewards, response_mask, index=None, config=None, epsilon=1e-6,
                                      **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``fgrpo`` estimator's advantages (GRPO's at γ = 0), each zero signed by its rollout's correctness."""
    advantages, _ = compute_fgrpo_outcome_advantage(token_level_rewards, response_mask, index=index, config=config,
                                                    epsilon=epsilon)
    marked = mark_correctness(advantages, token_level_rewards.sum(dim=-1), settings_of(config)[0].success_threshold,
                              response_mask.bool().any(dim=-1), index)
    return marked, marked


@torch.no_grad()
def smoothed_advantages(advantages, old_log_prob, response_mask, gamma_p: float, gamma_n: float):
    """``(A^DS, correct, shift)``: A^DS on every response token (module docstring), and per row the correctness read
    from the sign bit and the term added, −γ_p · log π_θold(y|x) or +γ_n · log π_θold(y|x)."""
    mask = response_mask.bool()
    correct = ~(torch.signbit(advantages) & mask).any(dim=-1)
    sequence_log_prob = torch.where(mask, old_log_prob, 0.0).sum(dim=-1)
    shift = torch.where(correct, -gamma_p * sequence_log_prob, gamma_n * sequence_log_prob)
    return advantages + shift[:, None] * mask.to(advantages.dtype), correct, shift


def compute_policy_loss_ds_grpo(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode: str = "token-mean",
                                config=None, rollout_is_weights=None):
    """The base loss on A^DS (through the ``fgrpo`` mode: its ``actor/fgrpo/*`` describe A^DS) plus ``actor/ds_grpo/*``."""
    if config is None:
        raise ValueError(f"policy loss `{NAME}` needs the actor config; got config=None")
    smoothed, correct, shift = smoothed_advantages(advantages, old_log_prob, response_mask,
                                                   _setting(config, "gamma_p"), _setting(config, "gamma_n"))
    out, metrics = loss.compute_policy_loss_fgrpo(old_log_prob, log_prob, smoothed, response_mask,
                                                  loss_agg_mode=loss_agg_mode, config=config,
                                                  rollout_is_weights=rollout_is_weights)
    rows = response_mask.bool().any(dim=-1)  # an all-padding row is no rollout
    used = rows.sum().clamp_min(1)
    metrics[METRIC_PREFIX + "correct_share"] = float((correct & rows).sum() / used)
    metrics[METRIC_PREFIX + "shift_mean"] = float(torch.where(rows, shift, 0.0).sum() / used)
    return out, metrics


def register() -> None:
    """Put the ``ds_grpo`` estimator and loss in verl's registries (``fgrpo_verl.integration.plugin``'s duplicate policy)."""
    plugin.register_in_core_algos("advantage estimator", NAME, compute_ds_grpo_outcome_advantage)
    plugin.register_in_core_algos("policy loss", NAME, compute_policy_loss_ds_grpo)
