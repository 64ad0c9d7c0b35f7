"""The γ = 0 baseline of a focal run: the recipe run with the same config except γ (and training-time
validation). A focal run's checkpoint is selected against its baseline's (equal or less compute, protocol.py)."""

from __future__ import annotations

import json

from fgrpo_verl.job.identity import drop_key

# Settings of training-time validation: they do not change what is trained, so a focal run validating on AIME25
# (validation=aime25) is still selected against its γ = 0 twin that does not (paper_main's Qwen3 runs, App. P)
VALIDATION_KEYS = ("trainer.test_freq", "trainer.val_before_train", "trainer.val_only", "data.val_files",
                   "data.val_batch_size", "actor_rollout_ref.rollout.val_kwargs")


def _config_text(job, gamma: float | None = None) -> str:
    """The job's resolved config as text with its own name taken out (values interpolate it), without validation
    settings and, when given, with γ replaced: two runs with equal texts train the same but for γ. Composition
    makes γ a float, so ``0`` and ``0.0`` read the same here."""
    from omegaconf import OmegaConf

    tree = OmegaConf.to_container(job.config, resolve=True)
    if gamma is not None:
        tree["algorithm"]["fgrpo"]["gamma"] = float(gamma)
    for dotted in VALIDATION_KEYS:
        drop_key(tree, dotted)
    return json.dumps(tree, sort_keys=True, default=str).replace(job.job_name, "<experiment>")


def find_baselines(jobs: list, candidates: list) -> dict:
    """``{job name: the job among candidates whose config is the job's with γ = 0}`` (None for γ = 0 or when
    absent). Each config is written out once: a recipe's 36 runs compare each focal run with every baseline."""
    zero = {_config_text(other): other for other in reversed(candidates)  # reversed: the first of equal ones
            if float(other.config.algorithm.fgrpo.gamma) == 0}
    return {job.job_name: None if float(job.config.algorithm.fgrpo.gamma) == 0 else zero.get(_config_text(job, 0.0))
            for job in jobs}


def missing_baseline(job) -> str:
    """Why a focal run's evaluation has no γ = 0 baseline to select its checkpoint against; "" when it has one,
    is not focal, or has no evaluation."""
    ev = job.evaluation
    if ev is None or job.baseline_job or float(job.config.algorithm.fgrpo.gamma) <= 0:
        return ""
    # a command-line γ applies to every run of the plan, the recipe's γ = 0 twin included
    if any(o.lstrip("+").startswith(("algorithm.fgrpo.gamma=", "algorithm.fgrpo={", "algorithm={"))
           for o in job.command_line):
        return "algorithm.fgrpo.gamma on the command line sets every run's γ, the γ = 0 run's too"
    return "no run with the same config but γ = 0"
