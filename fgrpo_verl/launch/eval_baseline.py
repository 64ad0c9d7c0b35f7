"""The γ = 0 baseline of a focal run: the recipe run with the same config except γ (and training-time
validation). A focal run's checkpoint is selected against its baseline's (equal or less compute, protocol.py)."""

from __future__ import annotations

import json

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
        *parents, last = dotted.split(".")
        node = tree
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(last, None)
    return json.dumps(tree, sort_keys=True, default=str).replace(job.job_name, "<experiment>")


def find_baseline(job, candidates: list, texts: dict | None = None):
    """The job among ``candidates`` whose config is ``job``'s with γ = 0 (None for γ = 0 or when absent).
    ``texts``: a cache of :func:`_config_text` kept across calls over the same candidates (a recipe's 36 runs
    compare each focal run with every baseline: one text per job, not one per pair)."""
    if float(job.config.algorithm.fgrpo.gamma) == 0:
        return None
    texts = {} if texts is None else texts

    def text(j, gamma: float | None = None) -> str:
        key = (id(j), gamma)
        if key not in texts:
            texts[key] = _config_text(j, gamma)
        return texts[key]

    want = text(job, 0.0)
    for other in candidates:
        if other is not job and float(other.config.algorithm.fgrpo.gamma) == 0 and text(other) == want:
            return other
    return None


def missing_baseline(job) -> str:
    """Why a focal run's evaluation has no γ = 0 baseline to select its checkpoint against; "" when it has one,
    is not focal, or has no evaluation."""
    ev = job.evaluation
    if ev is None or ev.baseline or float(job.config.algorithm.fgrpo.gamma) <= 0:
        return ""
    # a command-line γ applies to every run of the plan, the recipe's γ = 0 twin included
    if any(o.lstrip("+").startswith(("algorithm.fgrpo.gamma=", "algorithm.fgrpo={", "algorithm={"))
           for o in job.command_line):
        return "algorithm.fgrpo.gamma on the command line sets every run's γ, the γ = 0 run's too"
    return "no run with the same config but γ = 0"
