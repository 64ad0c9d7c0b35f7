"""A run directory's checkpoints and their evaluation results: where things are, and when they are current.

Layout, under a run's checkpoint directory (``checkpoints/<project>/<experiment>``, verl's ``default_local_dir``):

    fgrpo_steps.json                      the trainer's actual step plan (steps per epoch after verl dropped
                                          over-long prompts, save_freq, total steps): fgrpo_verl/integration/trainer.py
    latest_checkpointed_iteration.txt     verl's resume point (held back until a step is logged: resume_point.py)
    global_step_<s>/actor/                verl's FSDP checkpoint
    global_step_<s>/fgrpo_eval/merged_hf/           verl's model_merger output (+ fgrpo_merge.json: its source)
    global_step_<s>/fgrpo_eval/<label>/             ``fgrpo-verl eval --out`` of one evaluation setting
    global_step_<s>/fgrpo_eval/<label>/result.json  written last: pass@k per benchmark and average
    fgrpo_eval/selected.json              the protocol's choice for this run (final pass)
    fgrpo_eval/wandb_ledger.json          evaluation rows already logged to the run's W&B run

A checkpoint's *signature* is the sha256 of (relative path, size, mtime) of every file of its ``actor/`` folder:
verl rewriting a step (a run resumed from an earlier checkpoint trains the step again) changes it, so the merge and
every result of the old weights are redone; an unchanged checkpoint is never merged or evaluated twice.

An evaluation setting's *label* is ``n<n>-<sha256 of the settings>[:10]``: sample count, benchmarks (names, scorers,
prompt groups), sampling, preset, length, seed and back-end. Equal settings share a label, so the selection pass
of protocol "full" (n = 1024 on everything) is also the final pass. File contents are not in the label (so a login
node without the benchmark files still finds the results); each result records its files' sha256, and a result of
an edited file is stale.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

STEPS_FILE = "fgrpo_steps.json"
# verl's resume point
TRACKER = "latest_checkpointed_iteration.txt"
EVAL_DIR = "fgrpo_eval"
RESULT = "result.json"
_STEP_DIR = re.compile(r"^global_step_(\d+)$")


def write_text(path: Path, text: str) -> None:
    """Atomically (a reader never sees half a file): a temporary file renamed over ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_json(path: Path, data) -> None:
    write_text(path, json.dumps(data, indent=1, sort_keys=True) + "\n")


def read_json(path: Path, fix: str = "move it away to redo what it records") -> dict | None:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: unreadable ({exc}); {fix}") from exc


def tracker_step(checkpoint_dir: Path) -> int:
    """The run's resume point as verl's tracker file in ``checkpoint_dir`` names it (0 when none or unreadable): what
    the launcher's ``--status`` and checkpoint evaluation read, outside the job (fgrpo_verl/job/resume_point.py)."""
    try:
        return int((Path(checkpoint_dir) / TRACKER).read_text().strip())
    except (OSError, ValueError):
        return 0


def read_steps(run_dir: Path) -> dict | None:
    """The trainer's record of the run's actual steps (None before its first start)."""
    return read_json(Path(run_dir) / STEPS_FILE)


def write_steps(run_dir: Path, steps_per_epoch: int, save_freq: int, total_training_steps: int, rows_kept: int,
                train_batch_size: int) -> dict:
    data = {"steps_per_epoch": int(steps_per_epoch), "save_freq": int(save_freq),
            "total_training_steps": int(total_training_steps), "train_rows_kept": int(rows_kept),
            "train_batch_size": int(train_batch_size)}
    write_json(Path(run_dir) / STEPS_FILE, data)
    return data


def step_plan(run_dir: Path, planned_save_freq: int | None, planned_total: int | None) -> tuple[int | None, int | None]:
    """(save_freq, total steps) the run actually uses: the trainer's record, else what the launcher planned."""
    record = read_steps(run_dir) or {}
    return record.get("save_freq", planned_save_freq), record.get("total_training_steps", planned_total)


def saved_steps(run_dir: Path) -> list[int]:
    """Steps of the complete checkpoints: a ``global_step_<s>/actor`` folder with s <= verl's resume point (a folder
    past it is being written, or was saved but never logged and will be trained again)."""
    last = tracker_step(run_dir)
    steps = [int(m.group(1)) for actor in Path(run_dir).glob("global_step_*/actor")
             if actor.is_dir() and (m := _STEP_DIR.match(actor.parent.name))]
    return sorted(s for s in steps if s <= last)


def epoch_steps(save_freq: int | None, total: int | None) -> list[int]:
    """The checkpoint steps a finished run has: every multiple of ``save_freq`` and the last step (verl's rule)."""
    if not save_freq or save_freq <= 0 or not total:
        return []
    return sorted(set(range(save_freq, total + 1, save_freq)) | {total})


def training_done(run_dir: Path, planned_total: int | None) -> bool:
    _, total = step_plan(run_dir, None, planned_total)
    return total is not None and tracker_step(run_dir) >= total


def signature(actor_dir: Path) -> str:
    """sha256 over (relative path, size, mtime_ns) of every file under ``actor_dir``."""
    actor_dir = Path(actor_dir)
    entries = [(str(path.relative_to(actor_dir)), (st := path.stat()).st_size, st.st_mtime_ns)
               for path in actor_dir.rglob("*") if path.is_file()]
    if not entries:
        raise ValueError(f"{actor_dir}: no checkpoint files")
    return hashlib.sha256(json.dumps(sorted(entries)).encode()).hexdigest()


def settings_label(settings: dict) -> str:
    text = json.dumps(settings, sort_keys=True, separators=(",", ":"), default=str)
    return f"n{settings['n']}-{hashlib.sha256(text.encode()).hexdigest()[:10]}"


def checkpoint_dir(run_dir: Path, step: int) -> Path:
    return Path(run_dir) / f"global_step_{int(step)}"


def result_path(run_dir: Path, step: int, label: str) -> Path:
    return checkpoint_dir(run_dir, step) / EVAL_DIR / label / RESULT


def current_result(run_dir: Path, step: int, label: str, file_sha256: dict | None = None) -> dict | None:
    """The result of ``label`` for checkpoint ``step`` if it belongs to the checkpoint as it is now (same
    signature) and, when ``file_sha256`` is given, to the same benchmark files; else None."""
    result = read_json(result_path(run_dir, step, label))
    if result is None:
        return None
    actor = checkpoint_dir(run_dir, step) / "actor"
    if not actor.is_dir() or result.get("signature") != signature(actor):
        return None
    if file_sha256 is not None and result.get("benchmark_sha256") != file_sha256:
        return None
    return result


def score(result: dict, column: str, k: int = 1) -> float:
    """pass@k (in [0, 1]) of ``column`` (a benchmark or an average) in a result."""
    try:
        return float(result["pass_at_k"][column][str(k)])
    except KeyError as exc:
        raise ValueError(f"result of step {result.get('step')} has no pass@{k} for {column!r}") from exc
