"""An exclusive lock on a file of a shared run directory, also where the file system has no ``flock``.

    with exclusive(path):                    # wait for the lock
    with exclusive(path, wait=False):        # raise LockHeld when another process holds it

First choice: ``flock`` on ``path`` (created if missing, never deleted: a third process would otherwise lock a
different inode). The kernel releases it when the holder exits or is killed, so it never goes stale. Lustre
mounted ``noflock`` (and some FUSE and NFS set-ups) answer ENOSYS, EOPNOTSUPP, EINVAL or ENOLCK instead; POSIX
record locks (``lockf``) fail the same way there, so they are no fallback. The fallback is an owner file
``<path>.owner`` created with ``O_CREAT | O_EXCL`` (atomic on Lustre and NFSv3+): it names the holder's host, pid
and a random token, and the holder touches it every ``stale_after / 6`` seconds from a background thread. A
waiter treats the owner file as stale, and removes it, when

- its host is this host and its pid no longer runs here (a killed holder on this node: at once), or
- it has not changed for ``stale_after`` seconds of the waiter's own clock (a holder on another node that was
  killed, or whose node died). Only changes are compared, never times, so clocks of different nodes need not
  agree.

A stale owner file is renamed away (one waiter wins the rename) and checked to be the file judged stale; a live
holder's file taken by mistake (replaced in between) is linked back. A holder whose file was removed anyway
(its heartbeat stalled for ``stale_after``, e.g. a file system that hung that long) is told at release. Every
process that shares the lock must see the same flock support (the same mount options), which holds for the nodes
of one cluster: a process using flock and another using the owner file do not exclude each other.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

# what a file system without flock answers (ENOTSUP is EOPNOTSUPP on Linux)
NO_FLOCK = frozenset({errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL, errno.ENOLCK})
OWNER_SUFFIX = ".owner"
STALE_AFTER = 120.0  # seconds an owner file of another host may stay unchanged before it counts as abandoned


class LockHeld(Exception):
    """Another process holds the lock (only raised with ``wait=False``)."""


@contextlib.contextmanager
def exclusive(path, *, wait: bool = True, stale_after: float = STALE_AFTER,
              log: Callable[[str], None] | None = None) -> Iterator[str]:
    """Hold an exclusive lock named ``path`` for the ``with`` block; yields how: ``"flock"`` or ``"owner-file"``."""
    if not stale_after > 0:
        raise ValueError(f"stale_after={stale_after!r} is invalid: expected a number of seconds > 0")
    import fcntl

    path = Path(path)
    with path.open("a") as fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            raise LockHeld(f"another process holds {path}") from None
        except OSError as err:
            if err.errno not in NO_FLOCK:
                raise
            reason = err.strerror or errno.errorcode.get(err.errno, str(err.errno))
        else:
            yield "flock"
            return
    owner = path.with_name(path.name + OWNER_SUFFIX)
    if log is not None:
        log(f"no flock on {path.parent} ({reason}): locking with the owner file {owner}")
    with _owner_file(owner, wait, stale_after, log):
        yield "owner-file"


def _identity() -> dict:
    return {"host": socket.gethostname(), "pid": os.getpid(), "token": secrets.token_hex(8),
            "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def _read(owner: Path) -> tuple[tuple, dict] | None:
    """(signature, content) of the owner file; None when it is gone. A file still being written reads as {}."""
    try:
        with owner.open("rb") as fh:
            st = os.fstat(fh.fileno())
            raw = fh.read()
    except FileNotFoundError:
        return None
    try:
        content = json.loads(raw)
    except ValueError:
        content = {}
    return (st.st_ino, st.st_mtime_ns, st.st_size, raw), content if isinstance(content, dict) else {}


def _dead_here(holder: dict) -> bool:
    """Whether the holder ran on this host and its pid is gone."""
    if holder.get("host") != socket.gethostname() or not isinstance(holder.get("pid"), int):
        return False
    try:
        os.kill(holder["pid"], 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's process: alive
        return False
    return False


def _alive_here(holder: dict) -> bool:
    return holder.get("host") == socket.gethostname() and isinstance(holder.get("pid"), int) and not _dead_here(holder)


def _describe(holder: dict) -> str:
    return f"pid {holder.get('pid', '?')} on {holder.get('host', '?')} since {holder.get('since', '?')}"


def _break(owner: Path, signature: tuple, holder: dict, log) -> None:
    """Remove the stale owner file ``owner`` (read as ``signature``), unless another waiter got there first."""
    now = _read(owner)
    if now is None or now[0] != signature:  # replaced or removed meanwhile: judge again
        return
    me = _identity()
    tomb = owner.with_name(f"{owner.name}.stale-{me['host']}-{me['pid']}-{me['token']}")
    try:
        os.rename(owner, tomb)
    except FileNotFoundError:
        return
    taken = _read(tomb)
    if taken is not None and taken[1].get("token") != holder.get("token"):
        # a new holder's file replaced the stale one between the check and the rename: give it back
        with contextlib.suppress(FileExistsError):
            os.link(tomb, owner)
    else:
        if log is not None:
            log(f"removed the stale lock {owner} of {_describe(holder)}")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tomb)


@contextlib.contextmanager
def _owner_file(owner: Path, wait: bool, stale_after: float, log) -> Iterator[None]:
    me = _identity()
    poll = min(1.0, stale_after / 10)
    seen: tuple | None = None  # the owner file's signature and when this process first saw it so
    seen_at = 0.0
    while True:
        try:
            fd = os.open(owner, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            pass
        else:
            try:
                with os.fdopen(fd, "w") as fh:
                    json.dump(me, fh)
                    fh.flush()
                    os.fsync(fh.fileno())
            except BaseException:
                # an empty owner file would hold everyone off for stale_after
                with contextlib.suppress(OSError):
                    os.unlink(owner)
                raise
            break
        state = _read(owner)
        if state is None:
            continue
        signature, holder = state
        if signature != seen:
            if seen is not None and not wait:  # it changed while watched: the holder is alive
                raise LockHeld(f"another process holds {owner} ({_describe(holder)})")
            seen, seen_at = signature, time.monotonic()
        if _dead_here(holder) or time.monotonic() - seen_at >= stale_after:
            _break(owner, signature, holder, log)
            seen = None
            continue
        if not wait and _alive_here(holder):
            raise LockHeld(f"another process holds {owner} ({_describe(holder)})")
        time.sleep(poll)

    stop = threading.Event()

    def heartbeat() -> None:
        while not stop.wait(stale_after / 6):
            with contextlib.suppress(OSError):
                os.utime(owner)

    beat = threading.Thread(target=heartbeat, name=f"lock-heartbeat:{owner.name}", daemon=True)
    beat.start()
    try:
        yield
    finally:
        stop.set()
        beat.join()
        state = _read(owner)
        if state is not None and state[1].get("token") == me["token"]:
            os.unlink(owner)
        elif log is not None:
            log(f"warning: the lock {owner} was taken from this process while it held it (removed as stale)")
