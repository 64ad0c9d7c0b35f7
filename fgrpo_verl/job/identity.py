"""One identity per run: the experiment is its full resolved config, so the name carries a hash of it.

    fingerprint   = sha256 of the resolved config (canonical JSON, sorted keys), launcher-owned keys left out,
                    plus ``fresh=<salt>`` for an explicit fresh rerun (``fgrpo-verl launch --fresh``)
    experiment    = ``{algo}-g{γ}-n{N}-{model}-s{seed}[-<variant>]-<fingerprint[:8]>``
    checkpoints   = ``trainer.default_local_dir`` = ``checkpoints/<project>/<experiment>``
    W&B run id    = fgrpo_verl.job.tracking.run_id(project, experiment, absolute checkpoint dir), or an explicit
                    ``WANDB_RUN_ID``: two users or two launch directories never share a W&B run. Pinned in the
                    run record at first submission (fgrpo_verl/job/run_record.py): later launches keep it
    Slurm job     = ``<experiment>`` (with ``--dependency=singleton``: one job per run per user at a time)

So a different override (a learning rate, a data file) gives a different name, directory, W&B run and job, and a
requeue or a relaunch of the *same* config resumes the same run. Two recipes that contain the same config
(``paper_main``'s ``qwen25_7b-grpo-g0p5`` and ``group_size``'s ``fgrpo-n8-g0p5``) are one run with one job name.

A submitted ``--fresh`` rerun leaves its salt in ``<unsalted checkpoint dir>/fgrpo_fresh``: later plain launches
(resubmission, ``--status``) of that config mean the fresh run, not the abandoned one; delete the file to go back.

The first launch writes a run record, ``<checkpoint dir>/fgrpo_run.json`` (fgrpo_verl/job/run_record.py): a later
launch or job start that finds another config's record in the directory refuses.

Left out of the fingerprint (:data:`UNHASHED`): what the launcher itself sets (the name, the directory it
implies, the resume mode) and the ``slurm`` block (time limit and signal lead: how a run is scheduled, not what
it computes).
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import shlex
from pathlib import Path

from fgrpo_verl.job.checkpoints import write_text

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

# in the unsalted run dir of a config: the salt of its newest submitted --fresh rerun, which plain launches use
FRESH = "fgrpo_fresh"
SHORT = 8
# Overrides the launcher owns: it sets them itself (from the identity, the allocation or the recipe), so a user
# value would be replaced silently. Refused instead, with the reason.
OWNED = {
    "trainer.experiment_name": "the launcher names each run from its config hash (docs/slurm.md, lifecycle)",
    "trainer.project_name": "the recipe's `project:` sets it; copy the recipe to change it",
    "trainer.default_local_dir": "checkpoints go to checkpoints/<project>/<experiment> under the launch directory",
    "trainer.resume_mode": "jobs always resume (auto) from their own checkpoint directory",
    "trainer.resume_from_path": "jobs resume from their own checkpoint directory; start a new run instead",
    "ray_kwargs.ray_init.num_cpus": "the job's Ray cluster is sized from the Slurm allocation",
    "ray_kwargs.ray_init.num_gpus": "the job's Ray cluster is sized from the Slurm allocation",
    "ray_kwargs.ray_init._node_ip_address": "the job sets the Ray head's address",
}
# data files named relative to the launch directory (fingerprint's workdir)
DATA_PATHS = ("train_files", "val_files")
UNHASHED = ("trainer.experiment_name", "trainer.default_local_dir", "trainer.resume_mode", "slurm")
# The last component of a key, as an environment variable would spell it: *API_KEY*, *SECRET*, *PASSWORD*,
# *_TOKEN / TOKEN (HF_TOKEN, RAY_AUTH_TOKEN). Not `tokenizer`, `max_num_batched_tokens`, `ppo_max_token_len`.
_SECRET_KEY = re.compile(r"(API_?KEY|SECRET|PASSWORD|ACCESS_?KEY|(^|_)TOKEN$)", re.IGNORECASE)
_PLACEHOLDER = "__fgrpo_experiment__"
# a key of a Hydra dict value: `{HF_TOKEN: x}`, `{a: 1, 'WANDB_API_KEY': y}` (after `{` or `,`, before `:`)
_DICT_KEY = re.compile(r"[{,]\s*['\"]?([A-Za-z_][A-Za-z0-9_]*)['\"]?\s*:")


def override_key(override: str) -> str:
    """``+a.b=1`` / ``++a.b=1`` / ``~a.b`` -> ``a.b``."""
    return override.split("=", 1)[0].lstrip("+~").strip()


def is_secret_key(key: str) -> bool:
    return bool(_SECRET_KEY.search(key.rsplit(".", 1)[-1]))


def check_user_overrides(overrides, owned: bool = True) -> None:
    """Refuse launcher-owned (``owned``) and secret-looking overrides (the key itself or a key of its dict value:
    ``key={NAME: ...}``), naming the key and why, never the value."""
    for override in overrides:
        key = override_key(override)
        if owned and key in OWNED:
            raise ValueError(f"override {override!r}: {key} is set by the launcher ({OWNED[key]}); remove it")
        value = override.split("=", 1)[1] if "=" in override else ""
        inner = [name for name in _DICT_KEY.findall(value) if is_secret_key(name)]
        if is_secret_key(key) or inner:
            where = f"{key}=..." if is_secret_key(key) else f"{key}={{{inner[0]}: ...}}"
            raise ValueError(
                f"override {where}: looks like a secret; verl prints and logs its config and the job script is "
                "a file: export it in your shell (or use ~/.netrc for W&B) instead"
            )


def drop_key(tree: dict, dotted: str) -> None:
    """``tree`` (plain data) without the key ``a.b.c``, where it has it."""
    *parents, last = dotted.split(".")
    for part in parents:
        tree = tree.get(part)
        if not isinstance(tree, dict):
            return
    tree.pop(last, None)


def _absolute_data_paths(tree: dict, workdir: Path) -> None:
    """Data files as absolute paths: ``data/x`` from ``workdir`` and ``<workdir>/data/x`` are one file, one run."""
    data = tree.get("data")
    if not isinstance(data, dict):
        return
    for key in DATA_PATHS:
        value = data.get(key)
        paths = value if isinstance(value, list) else [value]
        fixed = [
            os.path.normpath(os.path.join(workdir, p)) if isinstance(p, str) and p and "://" not in p else p
            for p in paths
        ]
        data[key] = fixed if isinstance(value, list) else fixed[0]


def unnamed_tree(config) -> dict:
    """``config`` resolved once into plain data, with its experiment name set to a placeholder first (in
    ``config`` itself: the callers own the config they name). Values that interpolate the name (the checkpoint
    directory) so do not feed the name back into its own hash; :func:`named_config` puts the name in."""
    from omegaconf import OmegaConf

    OmegaConf.update(config, "trainer.experiment_name", _PLACEHOLDER, force_add=True)
    return OmegaConf.to_container(config, resolve=True)


def fingerprint(tree: dict, fresh: str | None = None, workdir: Path | None = None) -> str:
    """sha256 (hex) of the resolved config ``tree`` (:func:`unnamed_tree`) without :data:`UNHASHED`, salted with
    ``fresh`` when given. With ``workdir`` (where the job runs), relative data paths count as the absolute paths
    they name there."""
    tree = copy.deepcopy(tree)
    for key in UNHASHED:
        drop_key(tree, key)
    if workdir is not None:
        _absolute_data_paths(tree, Path(workdir))
    text = json.dumps(tree, sort_keys=True, default=str, separators=(",", ":"))
    if fresh is not None:
        text += f"\nfresh={fresh}"
    return hashlib.sha256(text.encode()).hexdigest()


def checkpoint_dir(tree: dict, experiment: str) -> str:
    """``trainer.default_local_dir`` of the run of ``tree`` named ``experiment``."""
    return str(tree["trainer"]["default_local_dir"]).replace(_PLACEHOLDER, experiment)


def named_config(tree: dict, experiment: str):
    """The resolved config of ``tree`` with its experiment name ``experiment`` (also where values interpolated
    it), in struct mode as Hydra composes: what the run's checks and job script read."""
    from omegaconf import OmegaConf

    def named(node):
        if isinstance(node, dict):
            return {k: named(v) for k, v in node.items()}
        if isinstance(node, list):
            return [named(v) for v in node]
        return node.replace(_PLACEHOLDER, experiment) if isinstance(node, str) else node

    config = OmegaConf.create(named(tree))
    OmegaConf.set_struct(config, True)
    return config


def experiment_name(readable: str, digest: str) -> str:
    return f"{readable}-{digest[:SHORT]}"


def name_run(config, workdir: Path, readable: str, fresh: str | None = None, experiment: str | None = None):
    """The run of ``config`` launched from ``workdir``: (its resolved config, named; its fingerprint; its experiment
    name; its unsalted run dir). ``fresh`` salts the fingerprint; without it the salt of a submitted ``--fresh``
    rerun of the config does (:func:`read_fresh`). The name is ``<readable>-<fingerprint[:8]>`` unless
    ``experiment`` gives one (a plain job's own ``trainer.experiment_name``, which no rerun's salt changes)."""
    tree = unnamed_tree(config)
    base = fingerprint(tree, workdir=workdir)
    unsalted = Path(workdir) / checkpoint_dir(tree, experiment_name(readable, base))
    salt = fresh if fresh is not None or experiment else read_fresh(unsalted)
    digest = base if salt is None else fingerprint(tree, salt, workdir)
    experiment = experiment or experiment_name(readable, digest)
    return named_config(tree, experiment), digest, experiment, unsalted


def read_fresh(base_dir: Path) -> str | None:
    """The salt of the newest submitted ``--fresh`` rerun of the config whose unsalted run dir is ``base_dir``."""
    path = Path(base_dir) / FRESH
    return (path.read_text(encoding="utf-8").strip() or None) if path.exists() else None


def write_fresh(base_dir: Path, salt: str) -> None:
    """Point later plain launches of this config at its ``--fresh`` rerun ``salt`` (written once it is submitted)."""
    write_text(Path(base_dir) / FRESH, f"{salt}\n")


def job_environment(config, workdir: Path, wandb_group: str | None = None, tags=()) -> dict[str, str]:
    """Variables a job of the run described by the composed ``config`` exports: fgrpo_verl.job.tracking's W&B
    variables for (project, experiment name, absolute checkpoint dir: ``trainer.default_local_dir`` from the
    launch directory ``workdir``), the experiment name and checkpoint dir for the job's log, the launch directory
    (checked on the node) and ``FGRPO_WANDB_LOGGER=1`` when the run logs to W&B (fgrpo_verl/job/wandb_online.py
    checks from the node that W&B answers)."""
    from fgrpo_verl.job.tracking import wandb_env
    from fgrpo_verl.job.wandb_online import logs_to_wandb

    project, experiment = str(config.trainer.project_name), str(config.trainer.experiment_name)
    home = os.path.abspath(os.path.join(workdir, str(config.trainer.default_local_dir)))
    env = wandb_env(project, experiment, wandb_group, tags, checkpoint_dir=home)
    env.update(FGRPO_EXPERIMENT=experiment, FGRPO_CHECKPOINT_DIR=str(config.trainer.default_local_dir),
               FGRPO_LAUNCH_DIR=os.path.abspath(workdir))
    if logs_to_wandb(config.trainer.get("logger")):
        env["FGRPO_WANDB_LOGGER"] = "1"
    return env


def shell_exports(env: dict[str, str]) -> str:
    """``export NAME=value`` lines, values shell-quoted (and refused when they hold a control character)."""
    lines = []
    for name, value in env.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ValueError(f"environment variable name {name!r} is not a valid shell name")
        lines.append(f"export {name}={shlex.quote(check_value(f'export {name}', value))}")
    return "\n".join(lines)


def check_value(what: str, value) -> str:
    """``value`` as text, refused when it holds a control character (names ``what`` and the character)."""
    text = str(value)
    if bad := _CONTROL.search(text):
        raise ValueError(
            f"{what}={text!r} contains the control character {bad.group()!r}: it would become a new line of the "
            "job script; remove it"
        )
    return text
