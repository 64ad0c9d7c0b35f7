"""One identity per run: the experiment is its full resolved config, so the name carries a hash of it.

    fingerprint   = sha256 of the resolved config (canonical JSON, sorted keys), launcher-owned keys left out,
                    plus ``fresh=<salt>`` for an explicit fresh rerun (``fgrpo-verl launch --fresh``)
    experiment    = ``{algo}-g{γ}-n{N}-{model}-s{seed}[-<variant>]-<fingerprint[:8]>``
    checkpoints   = ``trainer.default_local_dir`` = ``checkpoints/<project>/<experiment>``
    W&B run id    = fgrpo_verl.job.tracking.run_id(project, experiment, absolute checkpoint dir), or an explicit
                    ``WANDB_RUN_ID``: two users or two launch directories never share a W&B run. Pinned in the
                    run record at first submission (:func:`recorded_run_id`): later launches keep it
    Slurm job     = ``<experiment>`` (with ``--dependency=singleton``: one job per run per user at a time)

So a different override (a learning rate, a data file) gives a different name, directory, W&B run and job, and a
requeue or a relaunch of the *same* config resumes the same run. Two recipes that contain the same config
(``paper_main``'s ``qwen25_7b-grpo-g0p5`` and ``group_size``'s ``fgrpo-n8-g0p5``) are one run with one job name.

A submitted ``--fresh`` rerun leaves its salt in ``<unsalted checkpoint dir>/fgrpo_fresh``: later plain launches
(resubmission, ``--status``) of that config mean the fresh run, not the abandoned one; delete the file to go back.

The first launch writes a run record, ``<checkpoint dir>/fgrpo_run.json`` (fingerprint, overrides, submitted
job ids, the W&B run id its jobs log to). A later launch or job start that finds a record with another
fingerprint in the directory refuses: the directory belongs to a different experiment (a hash prefix collision,
a hand-set experiment name, a copied directory).

Left out of the fingerprint (:data:`UNHASHED`): what the launcher itself sets (the name, the directory it
implies, the resume mode) and the ``slurm`` block (time limit and signal lead: how a run is scheduled, not what
it computes).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

RECORD = "fgrpo_run.json"
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


def secret_in_override(override: str) -> str | None:
    """``key=...`` or ``key={NAME: ...}`` when ``override`` sets a secret-looking key (itself or a key of its dict
    value), without the value; None otherwise."""
    key = override_key(override)
    if is_secret_key(key):
        return f"{key}=..."
    value = override.split("=", 1)[1] if "=" in override else ""
    inner = [name for name in _DICT_KEY.findall(value) if is_secret_key(name)]
    return f"{key}={{{inner[0]}: ...}}" if inner else None


def check_user_overrides(overrides) -> None:
    """Refuse launcher-owned and secret-looking overrides, naming the key and why."""
    for override in overrides:
        key = override_key(override)
        if key in OWNED:
            raise ValueError(f"override {override!r}: {key} is set by the launcher ({OWNED[key]}); remove it")
        where = secret_in_override(override)
        if where is not None:
            raise ValueError(
                f"override {where}: looks like a secret; verl prints and logs its config and the job script is "
                "a file: export it in your shell (or use ~/.netrc for W&B) instead"
            )


def _drop(tree: dict, dotted: str) -> None:
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


def fingerprint(config, fresh: str | None = None, workdir: Path | None = None) -> str:
    """sha256 (hex) of the resolved ``config`` without :data:`UNHASHED`, salted with ``fresh`` when given.

    The experiment name is replaced by a constant before resolving, so values that interpolate it (the checkpoint
    directory) do not feed the name back into its own hash. With ``workdir`` (where the job runs), relative data
    paths count as the absolute paths they name there."""
    from omegaconf import OmegaConf

    trainer = config.get("trainer") if hasattr(config, "get") else None
    if trainer is not None and "experiment_name" in trainer and not OmegaConf.is_readonly(trainer):
        # in place and put back (the value as written, an interpolation stays one): copying the whole config
        # first costs more than resolving it, and a recipe plans dozens of runs
        written = OmegaConf.to_container(trainer, resolve=False)["experiment_name"]
        trainer.experiment_name = _PLACEHOLDER
        try:
            tree = OmegaConf.to_container(config, resolve=True)
        finally:
            trainer.experiment_name = written
    else:
        copy = OmegaConf.create(OmegaConf.to_container(config, resolve=False))
        OmegaConf.update(copy, "trainer.experiment_name", _PLACEHOLDER, force_add=True)
        tree = OmegaConf.to_container(copy, resolve=True)
    for key in UNHASHED:
        _drop(tree, key)
    if workdir is not None:
        _absolute_data_paths(tree, Path(workdir))
    text = json.dumps(tree, sort_keys=True, default=str, separators=(",", ":"))
    if fresh is not None:
        text += f"\nfresh={fresh}"
    return hashlib.sha256(text.encode()).hexdigest()


def experiment_name(readable: str, digest: str) -> str:
    return f"{readable}-{digest[:SHORT]}"


def read_record(checkpoint_dir: Path) -> dict | None:
    path = Path(checkpoint_dir) / RECORD
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: unreadable run record ({exc}); move it away if the directory is yours") from exc


def check_record(checkpoint_dir: Path, digest: str) -> dict | None:
    """The run record of ``checkpoint_dir``; refuses when it belongs to another config. A directory that holds
    checkpoints but no record (made by hand or by an older launcher) is refused too: it is not provably this run."""
    checkpoint_dir = Path(checkpoint_dir)
    record = read_record(checkpoint_dir)
    if record is None:
        if any(checkpoint_dir.glob("global_step_*")):
            raise ValueError(
                f"{checkpoint_dir} holds checkpoints but no {RECORD}: it was not written by this config's launch; "
                "move it away or launch with --fresh"
            )
        return None
    if record.get("fingerprint") != digest:
        raise ValueError(
            f"{checkpoint_dir} holds a run of a different config (fingerprint {str(record.get('fingerprint'))[:12]}, "
            f"this config {digest[:12]}): refusing to resume or overwrite it. Its overrides: "
            f"{record.get('overrides')}. Launch with --fresh for a new run, or move the directory away."
        )
    return record


def recorded_run_id(record: dict | None, project: str, experiment: str, checkpoint_dir: Path) -> str | None:
    """The W&B run id the run in ``checkpoint_dir`` already logs to, from its run record; None for a run never
    submitted, or for a copy of a run whose original is still in place (a copy is a run of its own).

    A run keeps its W&B run whatever changes around it: an explicit ``WANDB_RUN_ID`` given at its first launch, a
    launch directory moved, a package upgrade that changes how ids are derived. So the id is pinned in the record
    (``wandb_run_id``, with the directory it was pinned in, ``wandb_run_dir``) when the run is first submitted.
    A record without one was written by a launcher from before ids were pinned, whose jobs logged to
    ``run_id(project, experiment)`` (the id then did not hash the checkpoint dir): the run they continue."""
    from fgrpo_verl.job.tracking import run_id

    if not record:
        return None
    pinned = record.get("wandb_run_id")
    if not pinned:
        return run_id(project, experiment) if record.get("jobs") else None
    home = record.get("wandb_run_dir")
    if home and _is_other_copy(Path(home), Path(checkpoint_dir), str(pinned)):
        return None
    return str(pinned)


def _is_other_copy(home: Path, here: Path, pinned: str) -> bool:
    """Whether ``here`` is a copy of the run still recorded at ``home`` (a move leaves nothing at ``home``)."""
    try:
        if not home.exists() or (here.exists() and os.path.samefile(home, here)):
            return False
        return (read_record(home) or {}).get("wandb_run_id") == pinned
    except (OSError, ValueError):
        return False


def write_record(
    checkpoint_dir: Path, digest: str, experiment: str, overrides, job_id: str | None = None, total_steps=None,
    wandb_run_id: str | None = None, eval_job: tuple[str, str] | None = None,
) -> dict:
    """Create or update the run record (atomically: a reader never sees half a file); appends ``job_id``, sets
    ``total_steps`` (the run's step count, for ``--status`` where its data is not at hand) and ``wandb_run_id``
    (the W&B run its jobs log to, :func:`recorded_run_id`); ``eval_job`` = (job id, pass) appends an evaluation job
    (``eval_jobs``: they share the run's job name, fgrpo_verl/launch/eval_jobs.py)."""
    checkpoint_dir = Path(checkpoint_dir)
    record = check_record(checkpoint_dir, digest) or {
        "fingerprint": digest,
        "experiment": experiment,
        "overrides": list(overrides),
        "jobs": [],
    }
    if total_steps is not None:
        record["total_steps"] = int(total_steps)
    if job_id is not None:
        record["jobs"] = [*record.get("jobs", []), str(job_id)]
    if eval_job is not None:
        record["eval_jobs"] = [*record.get("eval_jobs", []), {"id": str(eval_job[0]), "phase": eval_job[1]}]
    if wandb_run_id is not None:
        record["wandb_run_id"] = str(wandb_run_id)
        record["wandb_run_dir"] = os.path.abspath(checkpoint_dir)
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    tmp = checkpoint_dir / f".{RECORD}.{os.getpid()}"
    tmp.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    tmp.replace(checkpoint_dir / RECORD)
    return record


def read_fresh(base_dir: Path) -> str | None:
    """The salt of the newest submitted ``--fresh`` rerun of the config whose unsalted run dir is ``base_dir``."""
    path = Path(base_dir) / FRESH
    if not path.exists():
        return None
    return path.read_text(encoding="utf-8").strip() or None


def write_fresh(base_dir: Path, salt: str) -> None:
    """Point later plain launches of this config at its ``--fresh`` rerun ``salt`` (written once it is submitted)."""
    base_dir = Path(base_dir)
    base_dir.mkdir(parents=True, exist_ok=True)
    tmp = base_dir / f".{FRESH}.{os.getpid()}"
    tmp.write_text(f"{salt}\n", encoding="utf-8")
    tmp.replace(base_dir / FRESH)


def main(argv: list[str] | None = None) -> int:
    """``python -m fgrpo_verl.launch.identity check DIR FINGERPRINT``: what a job runs before training."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 3 or args[0] != "check":
        print("usage: python -m fgrpo_verl.launch.identity check CHECKPOINT_DIR FINGERPRINT", file=sys.stderr)
        return 2
    try:
        check_record(Path(args[1]), args[2])
    except ValueError as exc:
        print(f"fgrpo: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
