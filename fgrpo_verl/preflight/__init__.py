"""Preflight: what verl 0.9.1's worker start-up would refuse, and the run's memory estimate, before anything reaches
a GPU queue: on the login node (``fgrpo-verl launch``, submit and ``--dry-run``; ``fgrpo-verl doctor --recipe``)
and at a job's start on its allocation (``fgrpo-verl job-env``, which ``slurm/train.sbatch`` runs). It never imports the launcher.

verl's ``validate_config`` (``fgrpo_verl.integration.validation``) stops where the workers' start-up begins: a
config it accepts can still be refused minutes into a GPU allocation. :func:`run` checks what comes after. The
certain rules (:data:`rules.RULES`) refuse, one line each naming the key, its value and the fix. The memory
estimate (:mod:`memory`) warns, per phase of a step, naming the setting that would fit it: it is a model, never
checked against a GPU here, so it refuses only where the job's environment (this process's, or a recipe's ``env:``
over it) sets ``FGRPO_PREFLIGHT_MEMORY=refuse``, a site that trusts it; unset (or ``warn``) it warns.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from fgrpo_verl.preflight import memory, rules

MEMORY_ENV = "FGRPO_PREFLIGHT_MEMORY"
# the phases a certain rule already refused (the estimate adds nothing there)
_CERTAIN = {"vLLM start": "start", "model states": "update"}


class PreflightError(ValueError):
    """One or more refusals; ``str()`` is one line per refusal."""


@dataclass(frozen=True)
class Report:
    """What the checks found for a run that passed (the dry run and ``doctor`` print :meth:`summary`)."""

    notes: tuple[str, ...]

    def summary(self) -> str:
        return "preflight: " + "; ".join(self.notes)


def _estimate(run: rules.Run, refused: set[str], strict: bool) -> None:
    """The memory estimate's note (each phase, of the GPU) and its warnings, refusals when ``strict``."""
    if not run.capacity:
        if run.on_gpu:
            run.notes.append("memory not estimated (" + ("model architecture unknown here" if run.arch is None else
                                                         "no slurm.gpu_memory_gib: select a cluster group") + ")")
        return
    head = run.head if run.head in ("logits", *rules.FUSED_BACKENDS) else "logits"  # refused; counted as logits
    est = memory.estimate(run.config, run.arch, run.world, run.ref_worker, head, run.capacity)
    phases = ", ".join(f"{name} {memory.gib(total)}" for name, total in est.phases.items())
    note = f"memory per GPU (estimate): {phases} of {memory.gib(run.capacity)} GiB"
    if est.vllm:
        _, room, per_token, *_ = memory.kv_cache(run.config, run.arch, run.capacity)
        seqs = run.aro.rollout.max_num_seqs
        note += (f"; KV cache holds {min(int(max(room, 0.0) // (per_token * run.length)), int(seqs))} full-length "
                 f"sequences at once (max_num_seqs={seqs})")
    run.notes.append(note)
    for warning in memory.warnings(est, run.config, {_CERTAIN[r] for r in refused if r in _CERTAIN}):
        if strict:
            run.refusals.append(f"{warning} (an estimate; refused because {MEMORY_ENV}=refuse)")
        else:
            run.notes.append(f"warning: {warning} (an estimate: {MEMORY_ENV}=refuse refuses it)")


def run(config, workdir: Path, require_model: bool = False, env=os.environ) -> Report:
    """Every rule of :data:`rules.RULES` on the composed ``config`` (relative data paths from ``workdir``), then the
    memory estimate; ``require_model``: the model must be loadable offline here (a submit, a job start); ``env``: the
    job's environment (default: this process's). Raises :class:`PreflightError`."""
    checks, failed, mode = rules.Run(config, Path(workdir), env, require_model), set(), env.get(MEMORY_ENV, "").strip()
    if (mode or "warn") not in ("warn", "refuse"):
        checks.refuse(MEMORY_ENV, repr(env.get(MEMORY_ENV)), "not one of its values (warn, refuse, or unset)",
                      f"unset it (the memory estimate warns), or set {MEMORY_ENV}=refuse to refuse a run over it")
    for r in rules.RULES:
        before = len(checks.refusals)
        if not failed.intersection(r.needs):
            r.run(checks)
        if failed.intersection(r.needs) or len(checks.refusals) > before:
            failed.add(r.check)
    _estimate(checks, failed, mode == "refuse")
    if checks.refusals:
        raise PreflightError("\n".join(checks.refusals))
    return Report(tuple(checks.notes))


def check_run(config, workdir: str, require_model: bool = False, env: dict | None = None) -> str:
    """What ``fgrpo-verl launch`` checks of one run with verl: ``validate_config``
    (fgrpo_verl.integration.validation.validate: a ValueError with verl's or fgrpo's message), then :func:`run` (a
    :class:`PreflightError`, one line per refusal), with ``env`` (the recipe's ``env:``) over this process's
    environment. The report's summary; the launcher names the run in each line."""
    from fgrpo_verl.integration.validation import validate

    try:
        validate(config)
    except ValueError:
        raise
    except Exception as exc:  # noqa: BLE001 (reported with the run's name by the caller; a bug with its type)
        raise ValueError(str(exc) if isinstance(exc, AssertionError) else f"{type(exc).__name__}: {exc}") from exc
    return run(config, Path(workdir), require_model=require_model, env={**os.environ, **(env or {})}).summary()
