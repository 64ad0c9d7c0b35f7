"""Locks on run directories of shared file systems (``fgrpo_verl/job/locks.py``): flock where it works, an owner
file where the file system answers flock with ENOSYS (Lustre mounted ``noflock``), simulated here by replacing
``fcntl.flock``. Failure mode: every checkpoint evaluation died on its merge lock, and two evals could write one
``--out`` at once (the eval lock only warned).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from fgrpo_verl.job import locks
from fgrpo_verl.job.locks import LockHeld, exclusive

REPO = Path(__file__).resolve().parent.parent


def _no_flock(fd, operation):
    raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))


@pytest.fixture
def no_flock(monkeypatch):
    monkeypatch.setattr(fcntl, "flock", _no_flock)


# the merge of one checkpoint by the two workers of an evaluation job, each its own process, with no flock
WORKER = textwrap.dedent("""
    import errno, fcntl, json, os, sys, time
    from pathlib import Path

    def no_flock(fd, operation):
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))

    fcntl.flock = no_flock
    from fgrpo_verl.evaluation import checkpoint_eval as ce

    plan, shard, record = json.loads(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])

    def merge(ckpt, signature):
        with record.open("a") as fh:
            fh.write(f"enter {shard}\\n")
        time.sleep(0.6)
        with record.open("a") as fh:
            fh.write(f"exit {shard}\\n")
        return str(ckpt)

    ce.ensure_merged = merge
    ce.pass_options = lambda *args, **kwargs: None
    ce._run_eval = lambda options: None
    go = record.with_name("go")
    while not go.exists():
        time.sleep(0.01)
    ce.run_shard(plan, "selection", 2, shard, 2)
""")


def test_two_workers_merge_one_at_a_time_without_flock(tmp_path):
    from fgrpo_verl.evaluation import checkpoint_eval as ce
    from fgrpo_verl.job import checkpoints as ck

    plan = {"run_dir": str(tmp_path / "run"), "benchmarks": {}, "sampling": {"temperature": 0.6},
            "passes": {"selection": {"n": 4, "benchmarks": []}}}
    out = ck.checkpoint_dir(tmp_path / "run", 2) / ck.EVAL_DIR / ce.pass_label(plan, "selection")
    ck.write_json(out / "checkpoint.json", {"signature": "weights", "benchmark_sha256": {}, "shards": 2})
    record = tmp_path / "record"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    workers = [subprocess.Popen([sys.executable, "-c", WORKER, json.dumps(plan), str(shard), str(record)], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for shard in (0, 1)]
    time.sleep(1.5)  # both started (imports done) and waiting for the go
    (tmp_path / "go").touch()
    outputs = [w.communicate(timeout=120) for w in workers]
    for worker, (stdout, stderr) in zip(workers, outputs):
        assert worker.returncode == 0, stdout + stderr
        assert "no flock on" in stdout and "locking with the owner file" in stdout
    lines = record.read_text().split()
    events = list(zip(lines[::2], lines[1::2]))
    assert len(events) == 4
    # never two merges at once: each enter is followed by the same worker's exit
    assert [kind for kind, _ in events] == ["enter", "exit", "enter", "exit"], events
    assert events[0][1] == events[1][1] and events[2][1] == events[3][1] != events[0][1]
    assert not (out.parent / ".merge.lock.owner").exists()


def test_the_eval_lock_refuses_a_second_writer_without_flock(tmp_path, no_flock):
    from fgrpo_verl.evaluation.pipeline import exclusive_out

    messages = []
    with exclusive_out(tmp_path, messages.append):
        with pytest.raises(ValueError, match="another `fgrpo-verl eval` is writing to"):
            with exclusive_out(tmp_path, messages.append):
                pass
    assert messages and messages[0].startswith("[eval] no flock on")
    with exclusive_out(tmp_path, messages.append):  # released
        pass


def test_flock_is_used_where_it_works(tmp_path):
    with exclusive(tmp_path / "l") as how:
        assert how == "flock"
        with pytest.raises(LockHeld):
            with exclusive(tmp_path / "l", wait=False):
                pass
    assert not (tmp_path / "l.owner").exists()


def test_other_flock_errors_are_not_hidden(tmp_path, monkeypatch):
    def broken(fd, operation):
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(fcntl, "flock", broken)
    with pytest.raises(OSError, match="Input/output"):
        with exclusive(tmp_path / "l"):
            pass


def _owner(path: Path, **holder) -> Path:
    owner = path.with_name(path.name + locks.OWNER_SUFFIX)
    owner.write_text(json.dumps({"host": socket.gethostname(), "since": "then", "token": "t0", **holder}))
    return owner


def test_an_owner_file_of_a_dead_process_here_is_removed(tmp_path, no_flock):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    owner = _owner(tmp_path / "l", pid=int(dead.stdout))
    messages = []
    start = time.monotonic()
    with exclusive(tmp_path / "l", wait=False, log=messages.append) as how:
        assert how == "owner-file"
        assert json.loads(owner.read_text())["pid"] == os.getpid()
    assert time.monotonic() - start < 5  # at once, not after stale_after
    assert any("removed the stale lock" in m for m in messages) and not owner.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["l"]


def test_a_live_holder_here_is_refused_without_wait(tmp_path, no_flock):
    _owner(tmp_path / "l", pid=os.getpid())
    with pytest.raises(LockHeld, match=f"pid {os.getpid()} on {socket.gethostname()}"):
        with exclusive(tmp_path / "l", wait=False):
            pass


def test_an_abandoned_owner_file_of_another_host_is_removed_after_stale_after(tmp_path, no_flock):
    owner = _owner(tmp_path / "l", host="elsewhere", pid=1)
    start = time.monotonic()
    with exclusive(tmp_path / "l", stale_after=1.0):
        assert json.loads(owner.read_text())["host"] == socket.gethostname()
    assert 1.0 <= time.monotonic() - start < 10


def test_a_holder_on_another_host_that_keeps_its_file_fresh_is_not_removed(tmp_path, no_flock):
    owner = _owner(tmp_path / "l", host="elsewhere", pid=1)
    stop = threading.Event()

    def heartbeat():
        while not stop.wait(0.1):
            os.utime(owner)

    beat = threading.Thread(target=heartbeat)
    beat.start()
    try:
        with pytest.raises(LockHeld, match="elsewhere"):
            with exclusive(tmp_path / "l", wait=False, stale_after=1.0):
                pass
    finally:
        stop.set()
        beat.join()
    assert json.loads(owner.read_text())["host"] == "elsewhere"


def test_the_holder_keeps_its_owner_file_fresh(tmp_path, no_flock):
    with exclusive(tmp_path / "l", stale_after=0.6):
        owner = tmp_path / "l.owner"
        before = owner.stat().st_mtime_ns
        time.sleep(0.4)
        assert owner.stat().st_mtime_ns != before


def test_stale_after_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match=r"stale_after=0 is invalid: expected a number of seconds > 0"):
        with exclusive(tmp_path / "l", stale_after=0):
            pass
