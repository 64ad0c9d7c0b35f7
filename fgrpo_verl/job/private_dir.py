"""Create (or accept) a directory only its owner can use: ``python -m fgrpo_verl.job.private_dir DIR``.

Ray's session directory holds sockets and logs; on a shared node another user who pre-creates it (or plants a
symlink there) could read the logs or hijack the sockets. So the job creates it 0700 and refuses to use one
that is a symlink, is owned by someone else or is open to group/others.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path


def ensure_private_dir(path: str | Path) -> Path:
    path = Path(path)
    try:
        path.mkdir(mode=0o700, parents=False)
    except FileExistsError:
        pass
    except FileNotFoundError as exc:
        raise ValueError(f"{path}: parent directory {path.parent} does not exist") from exc
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise ValueError(f"{path}: not a plain directory (a symlink or a file): refusing to put Ray's session there")
    if info.st_uid != os.geteuid():
        raise ValueError(f"{path}: owned by uid {info.st_uid}, not by this job's user (uid {os.geteuid()})")
    if info.st_mode & 0o077:
        raise ValueError(f"{path}: mode {stat.S_IMODE(info.st_mode):o} lets other users in; expected 700")
    return path


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m fgrpo_verl.job.private_dir DIR", file=sys.stderr)
        return 2
    try:
        ensure_private_dir(args[0])
    except (ValueError, OSError) as exc:
        print(f"fgrpo private_dir: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
