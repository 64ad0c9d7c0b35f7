"""W&B conventions for fgrpo-verl runs: names, groups, tags, and a run id that survives requeues.

verl's ``Tracking`` calls ``wandb.init(project, name=trainer.experiment_name, entity=$WANDB_ENTITY, config)`` and
nothing else, so everything else goes through W&B's own environment variables, read by ``wandb.init`` in the
process that logs (verl's TaskRunner, a Ray actor):

    WANDB_RUN_ID     = run_id(project, experiment, checkpoint dir)   same run -> same id: a requeued or resumed job
    WANDB_RESUME     = allow                          continues the W&B run instead of opening a new one
    WANDB_RUN_GROUP  = the sweep name                 W&B groups the sweep's runs together
    WANDB_TAGS       = algo:<algo>,gamma:<γ>,n:<N>
    WANDB_MODE       = offline (optional)             runs are written under $WANDB_DIR/wandb/offline-run-*;
                                                      upload later with `wandb sync <dir>`

The run name is ``{algo}-g{γ}-n{N}-{model}-s{seed}`` (e.g. ``fgrpo-g0.5-n8-Qwen2.5-7B-s1``) and is also used as
``trainer.experiment_name`` (``fgrpo-verl launch`` appends ``-<config hash>``, fgrpo_verl/job/identity.py),
so its id is a pure function of (project, run name, absolute checkpoint dir): the same config launched by two
users, or from two directories, is two runs with two ids. To start a fresh run under an existing name, change
the name (or export your own ``WANDB_RUN_ID``).

Secrets: nothing here reads, writes or forwards ``WANDB_API_KEY``. Authenticate with ``wandb login`` (it writes
``~/.netrc``) or export the key in the job's environment yourself; never put it in a config or an override,
because verl prints its config and logs it to W&B.

``fgrpo-verl launch`` and the plain ``sbatch slurm/train.sbatch`` path (``fgrpo-verl job-env``) read the
name's parts from the composed config with :func:`config_run_name` / :func:`config_run_tags` and export
:func:`wandb_env` before ``ray start``; :func:`ray_env_overrides` hands the same variables to every Ray actor as
Hydra overrides instead. ``fgrpo-verl wandb-env`` prints both for hand-written scripts.
"""

from __future__ import annotations

import hashlib
import math
import numbers
import os
import re
import sys
from pathlib import Path
from urllib.parse import urlparse

RESUME = "allow"
MODES = ("online", "offline", "disabled")
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def format_gamma(gamma) -> str:
    """γ as it appears in names and tags: 0.5 -> "0.5", 1.0 -> "1", 0 -> "0"."""
    if isinstance(gamma, bool) or not isinstance(gamma, numbers.Real) or not math.isfinite(gamma) or gamma < 0:
        raise ValueError(f"gamma={gamma!r} is invalid: expected a finite real number >= 0")
    return f"{float(gamma):g}"


def model_tag(model: str) -> str:
    """Short model name for run names: the last component of an HF id or a local path, unsafe characters -> '-'."""
    if not isinstance(model, str) or not model.strip("/ "):
        raise ValueError(f"model={model!r} is invalid: expected a model path or HF id such as Qwen/Qwen2.5-7B")
    return _SAFE.sub("-", model.rstrip("/").rsplit("/", 1)[-1]).strip("-") or "model"


def _int(name: str, value, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise ValueError(f"{name}={value!r} is invalid: expected an integer >= {low}")
    return int(value)


def _label(name: str, value) -> str:
    if not isinstance(value, str) or not value or _SAFE.search(value):
        raise ValueError(f"{name}={value!r} is invalid: expected a non-empty name of letters, digits, '.', '_' or '-'")
    return value


def run_name(algo: str, gamma, n: int, model: str, seed: int) -> str:
    """``{algo}-g{γ}-n{N}-{model}-s{seed}``, e.g. ``fdapo-g1-n8-Qwen3-4B-Base-s0``."""
    return f"{_label('algo', algo)}-g{format_gamma(gamma)}-n{_int('n', n, 1)}-{model_tag(model)}-s{_int('seed', seed, 0)}"


def run_tags(algo: str, gamma, n: int) -> list[str]:
    """W&B tags for filtering a sweep: ``algo:<algo>``, ``gamma:<γ>``, ``n:<N>``."""
    return [f"algo:{_label('algo', algo)}", f"gamma:{format_gamma(gamma)}", f"n:{_int('n', n, 1)}"]


def run_id(project: str, experiment: str, checkpoint_dir: str | None = None) -> str:
    """Deterministic W&B run id: the first 32 hex digits of sha256("<project>/<experiment>"), or of
    sha256("<project>/<experiment>@<checkpoint_dir>") when the run's absolute checkpoint directory is given.

    The directory is what makes a run a run: two users (or two launch directories) with the same config train
    two runs with two checkpoint directories, and must not write into one W&B run; a requeue or relaunch from
    the same directory resumes that directory's checkpoint and so continues its W&B run."""
    for name, value in (("project", project), ("experiment", experiment)):
        if not isinstance(value, str) or not value:
            raise ValueError(f"{name}={value!r} is invalid: expected a non-empty string")
    key = f"{project}/{experiment}"
    if checkpoint_dir is not None:
        if not isinstance(checkpoint_dir, str) or not os.path.isabs(checkpoint_dir):
            raise ValueError(f"checkpoint_dir={checkpoint_dir!r} is invalid: expected an absolute path")
        key += "@" + os.path.normpath(checkpoint_dir)
    return hashlib.sha256(key.encode()).hexdigest()[:32]


# what wandb.init refuses in a run id (wandb's settings validator), and whitespace at either end
_ID_RESERVED = ":;,#?/'"
_ID_REFUSED = re.compile(rf"[\x00-\x1f\x7f{re.escape(_ID_RESERVED)}]")


def check_run_id(value, where: str = "WANDB_RUN_ID") -> str:
    """An explicit W&B run id, refused here (naming ``where``) when ``wandb.init`` would refuse it in the job,
    after a queue wait and a cluster start, and again on every requeue."""
    if not isinstance(value, str) or not value or value != value.strip() or _ID_REFUSED.search(value):
        raise ValueError(
            f"{where}={value!r} is invalid: W&B run ids are non-empty, without whitespace at either end, control "
            f"characters or any of {_ID_RESERVED}"
        )
    return value


def wandb_env(project: str, experiment: str, group: str | None = None, tags=(), mode: str | None = None,
              checkpoint_dir: str | None = None) -> dict[str, str]:
    """The ``WANDB_*`` variables for one run (see the module docstring). Never includes credentials."""
    env = {"WANDB_RUN_ID": run_id(project, experiment, checkpoint_dir), "WANDB_RESUME": RESUME}
    if group is not None:
        env["WANDB_RUN_GROUP"] = _label("group", group)
    tags = list(tags)
    for tag in tags:
        if not isinstance(tag, str) or not tag or "," in tag or len(tag) > 64:
            raise ValueError(f"tag {tag!r} is invalid: W&B tags are 1-64 characters without commas")
    if tags:
        env["WANDB_TAGS"] = ",".join(tags)
    if mode is not None:
        if mode not in MODES:
            raise ValueError(f"mode={mode!r} is invalid: expected one of {', '.join(MODES)}")
        env["WANDB_MODE"] = mode
    return env


def ray_env_overrides(env) -> list[str]:
    """Hydra overrides that put ``env`` into Ray's runtime_env, so every Ray actor (the TaskRunner included) sees it
    on every node, whatever environment ``ray start`` had. Each value single-quoted: Hydra unescapes only quotes
    and the backslashes that precede a quote or end the string."""
    out = []
    for key, value in env.items():
        if not isinstance(key, str) or not key.isidentifier():
            raise ValueError(f"env var name {key!r} is invalid: expected letters, digits and _ only")
        if "API_KEY" in key:
            raise ValueError(f"refusing to put {key} into the config (verl prints and logs it); export it instead")
        value = re.sub(r"(\\+)(?='|$)", lambda m: m.group(1) * 2, str(value)).replace("'", "\\'")
        out.append(f"++ray_kwargs.ray_init.runtime_env.env_vars.{key}='{value}'")
    return out


def experiment_overrides(project: str, experiment: str) -> list[str]:
    """The verl overrides naming the run: ``trainer.project_name`` and ``trainer.experiment_name``."""
    return [f'trainer.project_name="{_label("project", project)}"', f'trainer.experiment_name="{_label("experiment", experiment)}"']


# Keys of the composed config that the run name is read from (config_run_name).
GAMMA_KEY = "algorithm.fgrpo.gamma"
N_KEY = "actor_rollout_ref.rollout.n"
MODEL_KEY = "actor_rollout_ref.model.path"
# data.seed when set (verl's train-set shuffle seed), else the actor's data-loader seed that verl falls back to
SEED_KEYS = ("data.seed", "actor_rollout_ref.actor.data_loader_seed")


def algo_label(base_loss_mode: str, clip_ratio_low: float, clip_ratio_high: float, gamma) -> str:
    """``grpo`` / ``dapo`` / ``cispo`` from the policy loss, ``f``-prefixed when γ > 0 (``fgrpo``, ``fdapo``, ``fcispo``).

    The base loss decides CISPO; among ``vanilla`` (PPO-clip) losses DAPO is the one with clip-higher
    (clip_ratio_high > clip_ratio_low, the paper's 0.2 / 0.28), GRPO the symmetric one (0.2 / 0.2). Any other
    registered base loss is labelled by its own name.
    """
    if not isinstance(base_loss_mode, str) or not base_loss_mode:
        raise ValueError(f"base_loss_mode={base_loss_mode!r} is invalid: expected a registered policy loss name")
    if base_loss_mode == "vanilla":
        family = "dapo" if float(clip_ratio_high) > float(clip_ratio_low) else "grpo"
    else:
        family = _label("base_loss_mode", base_loss_mode)
    return ("f" if float(format_gamma(gamma)) > 0 else "") + family


def select(config, key: str, default=None):
    """``key`` (dotted) of an OmegaConf ``config``, ``default`` where nothing is there (absent, a path through a
    non-mapping, an interpolation that does not resolve): the one reader of config keys on the job's side."""
    from omegaconf import OmegaConf

    try:
        return OmegaConf.select(config, key, default=default, throw_on_resolution_failure=False)
    except Exception:  # noqa: BLE001  (a path through a non-mapping: nothing there)
        return default


BASE_LOSS_KEY = "actor_rollout_ref.actor.policy_loss.base_loss_mode"


def config_algo(config) -> str:
    """:func:`algo_label` of a composed fgrpo-verl config. The base loss is read as configured, without importing
    verl (``fgrpo-verl launch`` names dozens of runs before verl is needed); that it names a registered loss is
    checked where the config is validated (``fgrpo_verl.integration.loss.FocalPolicyLossConfig``)."""
    actor = config.actor_rollout_ref.actor
    mode = actor.policy_loss.loss_mode
    base = select(config, BASE_LOSS_KEY) if mode == "fgrpo" else mode
    return algo_label(base, actor.clip_ratio_low, actor.clip_ratio_high, config_gamma(config))


def config_gamma(config) -> float:
    """γ of a composed config, checked as the estimator checks it (fgrpo_verl.focal.FocalSettings), so a bad value
    gets the same one-line error from a launch as from the job."""
    from fgrpo_verl.focal import FocalSettings

    return FocalSettings.from_config(select(config, "algorithm.fgrpo")).gamma


def config_seed(config) -> int:
    for key in SEED_KEYS:
        value = select(config, key)
        if value is not None:
            return _int(key, value, 0)
    raise ValueError(f"no seed in the config: set one of {', '.join(SEED_KEYS)}")


def config_run_name(config, variant: str | None = None) -> str:
    """:func:`run_name` of a composed config; ``variant`` (a recipe run's ``variant``) is appended as ``-<variant>``
    for runs that differ only in settings the name does not show (e.g. the learning-rate and KL controls)."""
    name = run_name(config_algo(config), config_gamma(config), select(config, N_KEY), str(select(config, MODEL_KEY)),
                    config_seed(config))
    return name if variant is None else f"{name}-{_label('variant', variant)}"


def config_run_tags(config) -> list[str]:
    """:func:`run_tags` of a composed config."""
    return run_tags(config_algo(config), config_gamma(config), select(config, N_KEY))


def commit_wandb_row(tracking, step: int | None) -> bool:
    """Close W&B's row of ``step`` now that verl has logged everything of that step.

    verl logs step k with ``wandb.log(metrics, step=k)``; W&B keeps that row open (in its service, unwritten)
    until a later step is logged, i.e. until the end of step k + 1. A job killed during step k + 1 then loses
    row k although step k is checkpointed. ``log({}, step=k, commit=True)`` closes it at once. W&B then writes it
    to the ``.wandb`` file at its next flush: every 15 s by default (an offline run killed 5 s after logging two
    rows kept none), every second in our Slurm jobs (``WANDB_X_TRANSACTION_LOG_FLUSH_INTERVAL``, slurm/lifecycle.sh). ``tracking`` is verl's ``Tracking`` (or None); returns whether
    a row was committed (only when W&B is one of its backends and ``step`` is not None)."""
    run = getattr((getattr(tracking, "logger", None) or {}).get("wandb"), "run", None)
    if step is None or run is None:
        return False
    run.log({}, step=int(step), commit=True)
    return True


def close_wandb(tracking) -> None:
    """Finish verl's ``Tracking`` (its W&B run) and shut W&B's service process down now, in the process that
    logged (verl's TaskRunner), at the end of a successful fit.

    Otherwise W&B does both in an ``atexit`` hook, when Ray ends the TaskRunner's process after the driver
    returns; by then W&B's service process is gone, and every successful run ended with a ~30-line
    "Exception ignored in atexit callback ... ConnectionResetError: Connection lost" traceback. ``Tracking.finish``
    is idempotent, so verl's own call after ``fit`` does nothing more."""
    if tracking is not None and hasattr(tracking, "finish"):
        tracking.finish(exit_code=0)
    if "wandb" in sys.modules:
        sys.modules["wandb"].teardown()


# `fgrpo-verl wandb-env` exports these next to the WANDB_* variables; `fgrpo-verl train` reads them (read_env_names)
EXPERIMENT_ENV = "FGRPO_EXPERIMENT_NAME"
PROJECT_ENV = "FGRPO_PROJECT_NAME"
_NAME_PARTS = re.compile(r"^(?P<algo>[A-Za-z0-9._]+)-g(?P<gamma>[0-9.e+-]+?)-n(?P<n>\d+)-(?P<model>.+)-s(?P<seed>\d+)$")


def env_run_names(environ=os.environ) -> tuple[str | None, str | None]:
    """``(project, experiment)`` that ``fgrpo-verl wandb-env`` exported (None where unset)."""
    return environ.get(PROJECT_ENV) or None, environ.get(EXPERIMENT_ENV) or None


def check_env_run_name(config, experiment: str, project: str | None) -> None:
    """An experiment name from the environment must describe the run it names: γ and N read from the name
    (``{algo}-g{γ}-n{N}-...``) must be the config's, and a ``WANDB_RUN_ID`` exported with it must be the id of
    that (project, name); otherwise it is left over from another run in the same shell, and the run would be
    logged under the other run's name (and W&B run)."""
    match = _NAME_PARTS.match(experiment)
    fix = f"rerun `fgrpo-verl wandb-env` for this run, or unset {EXPERIMENT_ENV}"
    if match:
        gamma = format_gamma(config_gamma(config))
        n = select(config, N_KEY)
        if match.group("gamma") != gamma or str(match.group("n")) != str(n):
            raise ValueError(
                f"{EXPERIMENT_ENV}={experiment} (from `fgrpo-verl wandb-env`) names gamma {match.group('gamma')}, "
                f"N {match.group('n')}, but this run has {GAMMA_KEY}={gamma}, {N_KEY}={n}: {fix}"
            )
    run_id_env = os.environ.get("WANDB_RUN_ID")
    if run_id_env and project is not None and run_id_env != run_id(project, experiment):
        raise ValueError(
            f"WANDB_RUN_ID={run_id_env} is not the id `fgrpo-verl wandb-env` gives {project}/{experiment} "
            f"({run_id(project, experiment)}): it belongs to another run; {fix}, or unset WANDB_RUN_ID"
        )


def wandb_configured(environ=os.environ, home=None, cwd=None) -> bool:
    """Whether ``wandb.init`` can start without asking for a key: ``WANDB_MODE`` or ``WANDB_API_KEY`` set, a
    ``wandb login`` entry in ``~/.netrc`` (for api.wandb.ai or ``WANDB_BASE_URL``'s host), or a mode saved by
    ``wandb offline`` / ``wandb disabled`` (``$WANDB_CONFIG_DIR/settings``, ``~/.config/wandb/settings``,
    ``./wandb/settings``)."""
    home = Path.home() if home is None else Path(home)
    cwd = Path.cwd() if cwd is None else Path(cwd)
    if environ.get("WANDB_MODE") or environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(environ.get("WANDB_BASE_URL") or "https://api.wandb.ai").hostname or "api.wandb.ai"
    netrc = Path(environ.get("NETRC") or home / ".netrc")
    if netrc.is_file() and host in netrc.read_text(errors="ignore"):
        return True
    config_dir = Path(environ["WANDB_CONFIG_DIR"]) if environ.get("WANDB_CONFIG_DIR") else home / ".config" / "wandb"
    return any(settings.is_file() and re.search(r"^\s*mode\s*=", settings.read_text(errors="ignore"), re.MULTILINE)
               for settings in (config_dir / "settings", cwd / "wandb" / "settings"))
