"""Offline W&B continuity after a hard kill (fgrpo_verl/job/wandb_offline.py), on real W&B offline files:
start 1 logs steps 1..7 and is killed with its last checkpoint at 5; start 2 trims the abandoned steps, resumes
at 6 and logs 6..9 with other values. The offline folders then hold exactly the resumed trajectory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fgrpo_verl.job import wandb_offline

RUN_ID = "fgrpotrimtest0001"
START = """
import sys, wandb
run = wandb.init(project="p", name="n")
first, last, scale = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
for step in range(first, last + 1):
    run.log({"score": scale * step, "pad": "x" * int(sys.argv[4])}, step=step)
run.finish()
"""


def _start(root: Path, first: int, last: int, scale: float, pad: int = 0) -> None:
    env = {key: value for key, value in os.environ.items() if key != "WANDB_SERVICE"}  # its own service, as a job
    env.update(WANDB_MODE="offline", WANDB_DIR=str(root), WANDB_RUN_ID=RUN_ID, WANDB_RESUME="allow",
               WANDB_SILENT="true")
    subprocess.run([sys.executable, "-c", START, str(first), str(last), str(scale), str(pad)], env=env, check=True,
                   timeout=120)


def read_history(path: Path, finished: bool = False) -> list[dict]:
    """History rows of one ``run-<id>.wandb`` file, each with its ``_step``. ``finished``: the run called
    ``finish()``; its service may still be writing the file when ``finish()`` returns, so wait (up to a minute)
    for the run's exit record before reading."""
    import json
    import time

    from wandb.proto import wandb_internal_pb2 as pb

    deadline = time.monotonic() + 60
    while True:
        records = []
        for payload in wandb_offline.read_payloads(path) if Path(path).exists() or not finished else []:
            record = pb.Record()
            record.ParseFromString(payload)
            records.append((payload, record))
        if not finished or any(r.WhichOneof("record_type") == "exit" for _, r in records):
            break
        assert time.monotonic() < deadline, f"{path}: no exit record a minute after the run finished"
        time.sleep(0.5)
    rows = []
    for payload, record in records:
        if record.WhichOneof("record_type") == "history":
            row = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.history.item}
            rows.append({**row, "_step": wandb_offline.history_step(payload)})
    return rows


def _history(root: Path) -> list[tuple[int, float]]:
    return [
        (row["_step"], float(row["score"]))
        for folder in sorted((root / "wandb").glob(f"offline-run-*-{RUN_ID}"))
        for row in read_history(folder / f"run-{RUN_ID}.wandb")
    ]


@pytest.mark.timeout(300)
def test_trim_leaves_exactly_the_resumed_trajectory(tmp_path):
    # large values make records span 32 KiB blocks (FIRST/MIDDLE/LAST fragments)
    _start(tmp_path, 1, 7, 1.0, pad=20000)
    (path,) = (tmp_path / "wandb").glob(f"offline-run-*-{RUN_ID}/run-{RUN_ID}.wandb")
    original = path.read_bytes()
    # the writer reproduces W&B's own file byte for byte (format and checksums right)
    wandb_offline.write_payloads(path, wandb_offline.read_payloads(path))
    assert path.read_bytes() == original
    assert [s for s, _ in _history(tmp_path)] == [1, 2, 3, 4, 5, 6, 7]
    # killed after step 7, last checkpoint 5: the next start trims 6 and 7, then logs 6..9 anew
    assert wandb_offline.main(["trim", str(tmp_path), RUN_ID, "5"]) == 0
    _start(tmp_path, 6, 9, 10.0)
    assert _history(tmp_path) == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 4.0), (5, 5.0), (6, 60.0), (7, 70.0), (8, 80.0), (9, 90.0)]
    # a start that resumes where the last one stopped cleanly changes nothing
    assert wandb_offline.trim(tmp_path, RUN_ID, 9) == []


def test_a_wandb_outside_the_tested_range_is_refused_in_one_line_and_its_folders_left_as_they_are(tmp_path,
                                                                                                     monkeypatch, capsys):
    """The trim rewrites W&B's own file format: only under the wandb versions it was tested with (setup.py pins the
    same range, and the installed wandb is one of them: the test above writes a real run with it)."""
    from importlib.metadata import version

    from packaging.specifiers import SpecifierSet

    assert version("wandb") in SpecifierSet(wandb_offline.TESTED_WANDB)
    setup = (Path(__file__).resolve().parent.parent / "setup.py").read_text(encoding="utf-8")
    assert f'"wandb{wandb_offline.TESTED_WANDB}"' in setup
    folder = tmp_path / "wandb" / f"offline-run-20260101_000000-{RUN_ID}"
    folder.mkdir(parents=True)
    path = folder / f"run-{RUN_ID}.wandb"
    wandb_offline.write_payloads(path, [_history_payload(s) for s in range(1, 8)])
    before = path.read_bytes()
    import importlib.metadata

    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.99.0" if name == "wandb" else "0")
    assert wandb_offline.main(["trim", str(tmp_path), RUN_ID, "5"]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert "wandb 0.99.0 is installed" in line and wandb_offline.TESTED_WANDB in line
    assert path.read_bytes() == before


def test_corrupt_file_is_refused(tmp_path):
    path = tmp_path / "run-x.wandb"
    wandb_offline.write_payloads(path, [b"abc", b"def"])
    assert wandb_offline.read_payloads(path) == [b"abc", b"def"]
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="checksum mismatch"):
        wandb_offline.read_payloads(path)


@pytest.mark.parametrize("size", [0, 3, 6])
def test_a_file_cut_inside_its_header_has_no_records_and_trim_passes_it(tmp_path, size):
    """A start killed between W&B creating its file and writing the 7-byte header leaves a shorter file; the next
    start's trim must not fail the job on it."""
    folder = tmp_path / "wandb" / f"offline-run-20260101_000000-{RUN_ID}"
    folder.mkdir(parents=True)
    path = folder / f"run-{RUN_ID}.wandb"
    path.write_bytes(wandb_offline.HEADER[:size])
    assert wandb_offline.read_payloads(path) == []
    assert wandb_offline.main(["trim", str(tmp_path), RUN_ID, "0"]) == 0
    assert path.read_bytes() == wandb_offline.HEADER[:size]
    path.write_bytes(b"xyz")  # not a prefix of the header: not W&B's file
    with pytest.raises(ValueError, match="not a W&B transaction log"):
        wandb_offline.read_payloads(path)


def _history_payload(step: int) -> bytes:
    from wandb.proto import wandb_internal_pb2 as pb

    record = pb.Record()
    record.history.step.num = step
    item = record.history.item.add()
    item.key, item.value_json = "score", str(step)
    return record.SerializeToString()


@pytest.mark.parametrize("cut", [1, 5, 9])
def test_trim_keeps_the_complete_records_of_a_file_cut_mid_record_by_a_hard_kill(tmp_path, cut):
    """A hard kill can stop W&B's writer inside a record: the file ends in a record header whose length runs past
    the end, or in part of one. That is the very file trim exists for; it must keep every complete record (and
    drop the steps past the checkpoint), not fail the job's start on a checksum of half a record."""
    folder = tmp_path / "wandb" / f"offline-run-20260101_000000-{RUN_ID}"
    folder.mkdir(parents=True)
    path = folder / f"run-{RUN_ID}.wandb"
    wandb_offline.write_payloads(path, [_history_payload(s) for s in range(1, 8)])
    path.write_bytes(path.read_bytes()[:-cut])  # step 7's record is cut
    assert [wandb_offline.history_step(p) for p in wandb_offline.read_payloads(path)] == [1, 2, 3, 4, 5, 6]
    assert wandb_offline.main(["trim", str(tmp_path), RUN_ID, "5"]) == 0
    assert [wandb_offline.history_step(p) for p in wandb_offline.read_payloads(path)] == [1, 2, 3, 4, 5]
    # a damaged record in the middle is still an error (that file is not just cut short)
    data = bytearray(path.read_bytes())
    data[7 + 7 + 2] ^= 0xFF  # a payload byte of the first record
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="checksum mismatch"):
        wandb_offline.read_payloads(path)


ROWS = """
import os, signal, sys, time
import wandb
from verl.utils.tracking import Tracking
from fgrpo_verl.integration.trainer import FocalMetricsMixin

class Base:  # verl's loop, reduced to the two calls around a step's log
    def on_step_begin(self):
        pass

    def _compute_metrics(self, *args):
        pass

class Trainer(FocalMetricsMixin, Base):
    pass

t = Trainer.__new__(Trainer)
t._fgrpo_open_row, t._fgrpo_mu_hat, t._fgrpo_unreleased = None, [], None
t.logger = Tracking(project_name="p", experiment_name="e", default_backend=["wandb"], config={"trainer": {}})
ours = sys.argv[1] == "fgrpo"
for step in (1, 2):
    if ours:
        t.on_step_begin()
    t._compute_metrics(None, {}, {}, step, 0)
    t.logger.log(data={"score": float(step)}, step=step)
if ours:
    t.on_step_begin()  # step 3 begins
if sys.argv[2] == "kill":
    time.sleep(3)  # 15 flush intervals
    os.kill(os.getpid(), signal.SIGKILL)
wandb.finish()
"""


CLOSES_ROWS = [
    ("verl", "kill", [(1, 1.0)]),  # without us: step 2's row is still open when step 3 is killed
    ("fgrpo", "kill", [(1, 1.0), (2, 2.0)]),
    ("fgrpo", "finish", [(1, 1.0), (2, 2.0)]),  # closing rows early adds none, changes none
]


@pytest.fixture(scope="module")
def rows_runs(request, tmp_path_factory):
    """The trainer processes of ``CLOSES_ROWS``, run side by side: each is its own process with its own W&B
    service, run id folder and offline files (``WANDB_DIR``), so one's kill cannot touch another's rows."""
    import side_by_side

    commands, roots = {}, {}
    for trainer, end, _ in CLOSES_ROWS:
        root = roots[trainer, end] = tmp_path_factory.mktemp(f"{trainer}-{end}")
        env = {key: value for key, value in os.environ.items() if key != "WANDB_SERVICE"}  # its own service, as a job
        env.update(WANDB_MODE="offline", WANDB_DIR=str(root), WANDB_RUN_ID=RUN_ID, WANDB_SILENT="true",
                   WANDB_X_TRANSACTION_LOG_FLUSH_INTERVAL="0.2")
        commands[f"{trainer}-{end}"] = ("test_the_trainer_closes_each_steps_wandb_row_so_a_hard_kill_keeps_it",
                                        {"args": [sys.executable, "-c", ROWS, trainer, end], "env": env,
                                         "timeout": 540})
    started = side_by_side.start(side_by_side.selected(request, commands))
    yield lambda trainer, end: (started.result(f"{trainer}-{end}"), roots[trainer, end])
    started.close()


@pytest.mark.parametrize("trainer, end, rows", CLOSES_ROWS)
@pytest.mark.timeout(600)  # the first case's wait includes its neighbours' start: they share the CPUs
def test_the_trainer_closes_each_steps_wandb_row_so_a_hard_kill_keeps_it(rows_runs, trainer, end, rows):
    """verl logs step k with wandb.log(step=k); W&B keeps that row open until step k + 1 is logged. Killed
    (SIGKILL, as a node failure would) during step 3, verl's loop has lost step 2's row; fgrpo-verl's trainers
    close the row when the next step begins, and the job's flush interval (1 s in the Slurm jobs, 0.2 s here)
    writes it to disk. Real verl Tracking, real W&B offline files."""
    done, root = rows_runs(trainer, end)
    assert done.returncode == (-9 if end == "kill" else 0), done.stderr[-3000:]
    assert _history(root) == rows
    # no row without the metrics (an empty row would be a step of its own in W&B's charts)
    (path,) = (root / "wandb").glob(f"offline-run-*-{RUN_ID}/run-{RUN_ID}.wandb")
    assert all("score" in row for row in read_history(path))


def test_trimming_a_folder_wandb_sync_already_uploaded_warns(tmp_path, capsys):
    """`wandb sync` of a running job's folder uploads the steps a later hard kill abandons, and marks the file
    synced (`<file>.synced`) so a later sync skips it: the trim cannot repair W&B's copy, so it says so."""
    folder = tmp_path / "wandb" / f"offline-run-20260101_000000-{RUN_ID}"
    folder.mkdir(parents=True)
    path = folder / f"run-{RUN_ID}.wandb"
    wandb_offline.write_payloads(path, [_history_payload(s) for s in range(1, 8)])
    assert wandb_offline.main(["trim", str(tmp_path), RUN_ID, "6"]) == 0
    assert "warning" not in capsys.readouterr().err
    Path(f"{path}.synced").touch()
    assert wandb_offline.main(["trim", str(tmp_path), RUN_ID, "5"]) == 0
    err = capsys.readouterr().err
    assert f"{folder} was uploaded by `wandb sync`" in err and "keeps the abandoned steps after 5" in err
    assert [wandb_offline.history_step(p) for p in wandb_offline.read_payloads(path)] == [1, 2, 3, 4, 5]


def test_trim_of_an_id_with_glob_characters_touches_only_its_own_folders(tmp_path):
    """An explicit WANDB_RUN_ID may contain `[` and `*` (W&B allows them): as a glob pattern `x[1]` would match
    run `x1`'s folder and trim another run's history."""
    for run in ("x1", "x[1]"):
        folder = tmp_path / "wandb" / f"offline-run-20260101_000000-{run}"
        folder.mkdir(parents=True)
        wandb_offline.write_payloads(folder / f"run-{run}.wandb", [_history_payload(s) for s in range(1, 5)])
    changed = wandb_offline.trim(tmp_path, "x[1]", 2)
    assert [path.name for path, _ in changed] == ["run-x[1].wandb"]
    other = tmp_path / "wandb" / "offline-run-20260101_000000-x1" / "run-x1.wandb"
    assert [wandb_offline.history_step(p) for p in wandb_offline.read_payloads(other)] == [1, 2, 3, 4]
