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

Whoever removes the owner file (a waiter breaking a stale one, the holder releasing its own) first creates
``<path>.owner.break`` with ``O_EXCL``, re-reads the owner file under it and removes it only if it still reads the
same; as new owner files are only created where none exists, the file removed is the one judged. A ``.break``
file left unchanged for ``stale_after`` (its creator was killed) is removed. The heartbeat checks that the owner
file still carries the holder's token and touches it through the holder's own descriptor, so it never refreshes
another holder's file; a holder whose file was removed anyway (its heartbeat stalled for ``stale_after``, e.g. a
file system that hung that long) stops refreshing and logs it, at once and at release. With ``wait=False`` a
holder whose pid runs here is refused at once only while its file is fresh by this host's clock: a pid that merely
looks alive (reused after a requeue, another user's) is judged by the rule above. Every
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
BREAK_SUFFIX = ".break"  # taken (O_EXCL) by whoever removes the owner file
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


def _try_lock_breaking(brk: Path, stale_after: float, seen: dict) -> str | None:
    """Take the ``.break`` file that serializes every removal of the owner file (breakers and the holder's release);
    returns its token, or None when another process holds it.

    It is held for a read and an unlink only. One whose process is gone from this host is removed at once; one of
    another host's process left unchanged for ``stale_after`` (as watched through ``seen``, signature -> first seen)
    belongs to a process killed meanwhile and is removed. A live process of this host keeps it."""
    me = _identity()
    try:
        fd = os.open(brk, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        state = _read(brk)
        if state is None or _alive_here(state[1]):
            return None
        first = seen.setdefault(state[0], time.monotonic())
        if _dead_here(state[1]) or time.monotonic() - first >= stale_after:
            again = _read(brk)
            if again is not None and again[0] == state[0]:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(brk)
        return None
    try:
        os.write(fd, json.dumps(me).encode())
    finally:
        os.close(fd)
    return me["token"]


def _drop_break(brk: Path, token: str) -> None:
    """Remove the ``.break`` file if it is still the one this process took (a stalled holder's may have been
    removed as stale and taken by another process)."""
    state = _read(brk)
    if state is not None and state[1].get("token") == token:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(brk)


def _break(owner: Path, signature: tuple, holder: dict, log, stale_after: float = STALE_AFTER,
           seen: dict | None = None) -> bool:
    """Remove the stale owner file ``owner`` (read as ``signature``) unless it changed; False when another process
    is removing or releasing it right now (judge again)."""
    brk = owner.with_name(owner.name + BREAK_SUFFIX)
    token = _try_lock_breaking(brk, stale_after, {} if seen is None else seen)
    if token is None:
        return False
    try:
        # every unlink of the owner file happens under the .break file, and a new owner file can only be created
        # once it is gone: what reads the same here is still the stale file when unlinked below
        now = _read(owner)
        if now is None or now[0] != signature:  # removed, refreshed or replaced meanwhile
            return True
        with contextlib.suppress(FileNotFoundError):
            os.unlink(owner)
        if log is not None:
            log(f"removed the stale lock {owner} of {_describe(holder)}")
        return True
    finally:
        _drop_break(brk, token)


def _release(owner: Path, token: str, stale_after: float, log) -> None:
    """Remove the owner file if it is still this holder's; never raises (it runs over the body's exception)."""
    brk = owner.with_name(owner.name + BREAK_SUFFIX)
    seen: dict = {}
    poll = min(0.05, stale_after / 10)
    try:
        brk_token = _try_lock_breaking(brk, stale_after, seen)
        while brk_token is None:
            time.sleep(poll)
            brk_token = _try_lock_breaking(brk, stale_after, seen)
        try:
            state = _read(owner)
            if state is not None and state[1].get("token") == token:
                os.unlink(owner)
                return
        finally:
            _drop_break(brk, brk_token)
    except OSError as err:
        if log is not None:
            log(f"warning: could not release the lock {owner}: {err}")
        return
    if log is not None:
        log(f"warning: the lock {owner} was taken from this process while it held it (removed as stale)")


@contextlib.contextmanager
def _owner_file(owner: Path, wait: bool, stale_after: float, log) -> Iterator[None]:
    me = _identity()
    poll = min(1.0, stale_after / 10)
    seen: tuple | None = None  # the owner file's signature and when this process first saw it so
    seen_at = 0.0
    break_seen: dict = {}
    while True:
        try:
            fd = os.open(owner, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            pass
        else:
            try:
                os.write(fd, json.dumps(me).encode())
                os.fsync(fd)
            except BaseException:
                # an empty owner file would hold everyone off for stale_after
                os.close(fd)
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
            if _break(owner, signature, holder, log, stale_after, break_seen):
                seen = None
                continue
        elif not wait and _alive_here(holder) and _fresh(signature, stale_after):
            # a running pid here with a file touched lately (same host, same clock): refuse at once. A pid that
            # only looks alive (reused after a requeue, another user's process) leaves its file unchanged and is
            # judged by the rule above
            raise LockHeld(f"another process holds {owner} ({_describe(holder)})")
        time.sleep(poll)

    stop = threading.Event()

    def heartbeat() -> None:
        while not stop.wait(stale_after / 6):
            try:
                state = _read(owner)
            except OSError:  # a passing file system error: try again at the next beat
                continue
            if state is None or state[1].get("token") != me["token"]:
                # removed as stale (or replaced by a new holder's): stop, never touch another holder's file
                if log is not None:
                    log(f"warning: lost the lock {owner} while holding it (removed as stale)")
                return
            # through this holder's own descriptor, so a file that replaced it since the read is never touched
            with contextlib.suppress(OSError):
                os.utime(fd)

    beat = threading.Thread(target=heartbeat, name=f"lock-heartbeat:{owner.name}", daemon=True)
    beat.start()
    try:
        yield
    finally:
        stop.set()
        beat.join()
        with contextlib.suppress(OSError):
            os.close(fd)
        _release(owner, me["token"], stale_after, log)


def _fresh(signature: tuple, stale_after: float) -> bool:
    """Whether the owner file (as read, ``signature``) was modified less than ``stale_after`` ago by this clock."""
    return time.time() - signature[1] / 1e9 < stale_after
