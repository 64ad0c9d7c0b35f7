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
import signal
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
    import errno, fcntl, os, sys, time
    from pathlib import Path

    def no_flock(fd, operation):
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))

    fcntl.flock = no_flock
    from fgrpo_verl.evaluation import checkpoint_eval as ce
    from fgrpo_verl.evaluation.plan import Plan
    from fgrpo_verl.job import locks

    plan, shard, record = Plan.from_json(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
    real_open = os.open

    def contended_open(path, flags, *args):  # the owner file already existed: this worker had to wait
        try:
            return real_open(path, flags, *args)
        except FileExistsError:
            if str(path).endswith(locks.OWNER_SUFFIX):
                with record.open("a") as fh:
                    fh.write(f"waited {shard}\\n")
            raise

    os.open = contended_open

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
    with record.open("a") as fh:
        fh.write(f"ready {shard}\\n")
    while not go.exists():
        time.sleep(0.01)
    ce.run_shard(plan, "selection", 2, shard, 2)
""")


def test_two_workers_merge_one_at_a_time_without_flock(tmp_path):
    from test_eval_plan_on_cpu import plan_dict

    from fgrpo_verl.evaluation import checkpoint_eval as ce
    from fgrpo_verl.evaluation.plan import Plan
    from fgrpo_verl.job import checkpoints as ck

    no_benchmarks = {"n": 4, "benchmarks": []}
    plan = Plan.from_dict({**plan_dict(), "run_dir": str(tmp_path / "run"), "benchmarks": {}, "averages": {},
                           "passes": {"selection": no_benchmarks, "final": no_benchmarks}})
    out = ck.checkpoint_dir(tmp_path / "run", 2) / ck.EVAL_DIR / ce.pass_label(plan, "selection")
    ck.write_json(out / "checkpoint.json", {"signature": "weights", "benchmark_sha256": {}, "shards": 2})
    record = tmp_path / "record"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    workers = [subprocess.Popen([sys.executable, "-c", WORKER, plan.to_json(), str(shard), str(record)], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for shard in (0, 1)]
    deadline = time.monotonic() + 60
    while not (record.exists() and record.read_text().count("ready") == 2):  # both imported, waiting for the go
        assert time.monotonic() < deadline and all(w.poll() is None for w in workers), "a worker did not start"
        time.sleep(0.05)
    (tmp_path / "go").touch()
    outputs = [w.communicate(timeout=120) for w in workers]
    for worker, (stdout, stderr) in zip(workers, outputs):
        assert worker.returncode == 0, stdout + stderr
        assert "no flock on" in stdout and "locking with the owner file" in stdout
    lines = [tuple(line.split()) for line in record.read_text().splitlines()]
    # the merges contended: one worker found the other's owner file and waited for it
    assert any(kind == "waited" for kind, _ in lines), lines
    events = [line for line in lines if line[0] in ("enter", "exit")]
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
    with open(tmp_path / "probe", "a") as fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            pytest.skip(f"this machine's temporary directory {tmp_path} has no flock ({err}): nothing to test here")
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
    old = time.time() - 3600
    os.utime(owner, (old, old))
    start = time.monotonic()
    with exclusive(tmp_path / "l", stale_after=1.0):
        assert json.loads(owner.read_text())["host"] == socket.gethostname()
    assert 1.0 <= time.monotonic() - start < 10


def test_a_holder_on_another_host_that_keeps_its_file_fresh_is_not_removed(tmp_path, no_flock):
    owner = _owner(tmp_path / "l", host="elsewhere", pid=1)
    stop = threading.Event()

    def heartbeat():  # whole seconds apart, so a file system with coarse mtimes sees every change
        t = int(time.time()) - 3600
        while not stop.wait(0.1):
            t += 1
            os.utime(owner, (t, t))

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
        old = int(time.time()) - 3600  # whole seconds in the past: any refresh is seen, whatever the granularity
        os.utime(owner, (old, old))
        deadline = time.monotonic() + 5
        while owner.stat().st_mtime_ns == old * 10**9 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert owner.stat().st_mtime_ns != old * 10**9


def test_stale_after_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match=r"stale_after=0 is invalid: expected a number of seconds > 0"):
        with exclusive(tmp_path / "l", stale_after=0):
            pass


def _take(owner: Path, token: str) -> bool:
    """Create the owner file as another holder would (O_EXCL); whether it got it."""
    try:
        fd = os.open(owner, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    os.write(fd, json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "token": token}).encode())
    os.close(fd)
    return True


def test_two_breakers_and_a_newcomer_never_give_the_lock_to_two(tmp_path, monkeypatch):
    """B and C both judged the same owner file stale; C breaks it and takes the lock just as B removes what it
    judged; D arrives before B is done. C and D must never both hold the lock."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    owner = _owner(tmp_path / "l", pid=int(dead.stdout))
    signature, holder = locks._read(owner)
    holders = []
    real = {name: getattr(os, name) for name in ("rename", "unlink", "link")}
    busy = []  # the hooks act for B's own calls only, not for those of C and D they run

    def hooked(name):
        def call(src, *args, **kwargs):
            if busy:  # an action of C's or D's, run as is
                return real[name](src, *args, **kwargs)
            busy.append(name)
            try:
                if name in ("rename", "unlink") and Path(src) == owner:
                    # B is about to remove the file it judged stale: C, which judged it stale too, goes first
                    locks._break(owner, signature, holder, None)
                    if _take(owner, "C"):
                        holders.append("C")
                if name == "link" and args and Path(args[0]) == owner and _take(owner, "D"):
                    holders.append("D")  # B puts back what it took by mistake: D came in between
            finally:
                busy.clear()
            return real[name](src, *args, **kwargs)
        return call

    for name in real:
        monkeypatch.setattr(os, name, hooked(name))
    locks._break(owner, signature, holder, None)  # B
    monkeypatch.undo()
    if _take(owner, "D"):
        holders.append("D")
    assert len(holders) <= 1, f"{holders} both hold the lock"
    if holders:
        assert json.loads(owner.read_text())["token"] == holders[0]


def test_a_holder_whose_lock_was_taken_stops_refreshing_the_new_holders_file(tmp_path, no_flock):
    messages = []
    owner = tmp_path / "l.owner"
    old = int(time.time()) - 3600
    with exclusive(tmp_path / "l", stale_after=0.6, log=messages.append):
        owner.unlink()  # judged stale and broken meanwhile; another holder took the lock
        assert _take(owner, "other")
        os.utime(owner, (old, old))
        deadline = time.monotonic() + 3
        while not any("lost the lock" in m for m in messages) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)  # three more heartbeats' worth: none may touch the other file
        assert owner.stat().st_mtime_ns == old * 10**9, "the heartbeat refreshed another holder's owner file"
    assert json.loads(owner.read_text())["token"] == "other"  # not removed at release either
    assert any("lost the lock" in m for m in messages)
    assert any("was taken from this process" in m for m in messages)


def test_without_wait_a_reused_pid_here_does_not_hold_the_lock_forever(tmp_path, no_flock):
    # the pid of this very process runs, but the file has not changed since long ago: a pid reused after a requeue
    owner = _owner(tmp_path / "l", pid=os.getpid())
    old = int(time.time()) - 3600
    os.utime(owner, (old, old))
    start = time.monotonic()
    with exclusive(tmp_path / "l", wait=False, stale_after=1.0) as how:
        assert how == "owner-file" and json.loads(owner.read_text())["token"] != "t0"
    assert 1.0 <= time.monotonic() - start < 10


def test_a_release_racing_a_removal_never_hides_the_body_exception(tmp_path, no_flock, monkeypatch):
    messages = []
    owner = tmp_path / "l.owner"
    real_unlink = os.unlink

    def raced_unlink(path, *args, **kwargs):  # another process removed it between the release's read and unlink
        if Path(path) == owner:
            real_unlink(path)
        return real_unlink(path, *args, **kwargs)

    with pytest.raises(RuntimeError, match="the body failed"):
        with exclusive(tmp_path / "l", log=messages.append):
            monkeypatch.setattr(os, "unlink", raced_unlink)
            raise RuntimeError("the body failed")
    monkeypatch.undo()
    assert not owner.exists() and any(owner.name in m for m in messages[1:]), messages


def test_a_break_file_left_by_a_killed_breaker_is_removed_after_stale_after(tmp_path, no_flock):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    owner = _owner(tmp_path / "l", pid=int(dead.stdout))
    brk = tmp_path / ("l.owner" + locks.BREAK_SUFFIX)
    brk.write_text("{}")
    start = time.monotonic()
    with exclusive(tmp_path / "l", stale_after=1.0) as how:
        assert how == "owner-file" and json.loads(owner.read_text())["pid"] == os.getpid()
    assert 1.0 <= time.monotonic() - start < 10
    assert [p.name for p in tmp_path.iterdir()] == ["l"]


def test_a_break_file_of_a_live_process_here_is_kept_and_one_of_a_dead_process_is_removed_at_once(tmp_path):
    brk = tmp_path / ("l" + locks.OWNER_SUFFIX + locks.BREAK_SUFFIX)
    live = {"host": socket.gethostname(), "pid": os.getpid(), "token": "t1"}
    brk.write_text(json.dumps(live))
    old = time.time() - 3600
    os.utime(brk, (old, old))
    seen: dict = {}
    for _ in range(3):
        assert locks._try_lock_breaking(brk, 0.001, seen) is None
        time.sleep(0.01)
    assert json.loads(brk.read_text()) == live  # a stalled but live breaker keeps it
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    brk.write_text(json.dumps({**live, "pid": int(gone.stdout)}))
    assert locks._try_lock_breaking(brk, 3600, {}) is None and not brk.exists()  # removed, taken next time
    token = locks._try_lock_breaking(brk, 3600, {})
    assert token is not None and json.loads(brk.read_text())["token"] == token
    # a holder whose .break was replaced meanwhile removes only its own
    brk.write_text(json.dumps({**live, "token": "someone else"}))
    locks._drop_break(brk, token)
    assert brk.exists()
    locks._drop_break(brk, "someone else")
    assert not brk.exists()


# an evaluation process holding the owner-file lock (no flock) when its job script sends SIGTERM before a requeue
HOLDER = textwrap.dedent("""
    import errno, fcntl, os, sys, time
    from pathlib import Path

    def no_flock(fd, operation):
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))

    fcntl.flock = no_flock
    from fgrpo_verl.evaluation import checkpoint_eval as ce
    from fgrpo_verl.job import locks

    def body(argv):
        with locks.exclusive(Path(sys.argv[1])):
            print("held", flush=True)
            time.sleep(120)
        return 0

    ce._main = body
    sys.exit(ce.main([]))
""")


def test_sigterm_to_an_evaluation_releases_its_owner_file(tmp_path):
    lock = tmp_path / "merge.lock"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(lock)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        # the holder prints once it holds the lock, or exits (its stderr then says why)
        assert holder.stdout.readline().strip() == "held", holder.stderr.read()
        owners = [p for p in tmp_path.iterdir() if p != lock]
        assert owners, "the lock without flock is an owner file beside the lock"
        holder.send_signal(signal.SIGTERM)
        assert holder.wait(timeout=60) == 128 + signal.SIGTERM, holder.stderr.read()
        assert [p for p in tmp_path.iterdir() if p != lock] == [], "the owner file outlived its holder"
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
